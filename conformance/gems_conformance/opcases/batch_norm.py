"""Cases for gems_core/ops/batch_norm.py: batch norm in training (the running statistics
updated) and with the running statistics, forward and backward, through ``F.batch_norm`` (its
route on this device: ``native_batch_norm``, or ``cudnn_batch_norm`` / ``miopen_batch_norm``
where cuDNN or MIOpen takes the call) and each overload called directly.

Samples: a contiguous 4-d input and a channels-last one, a channels-last 5-d one, a 3-d one
without weight and bias, a 2-d (N, C) one, sliced, transposed and expanded inputs (copied
first), long channels (their sums split over programs), half-precision inputs with float32
parameters (ATen's mixed types), and an empty batch where the call takes one. Inputs of
fewer than 2 dims and other bad arguments are tests/test_batch_norm.py's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample, ramp_like

FLOATS = samples.FLOAT_DTYPES
EPS = 1e-5
MOMENTUM = 0.1


def batch_norm_samples(dtype: torch.dtype, device: torch.device | str, profile: str,
                       empty: bool = False) -> Iterator[Sample]:
    """(input, weight, bias, running_mean, running_var)."""

    def params(c: int, seed: int, param_dtype: torch.dtype = dtype) -> tuple[torch.Tensor, ...]:
        return (samples.make_tensor((c,), param_dtype, device, seed, low=0.5, high=2),
                samples.make_tensor((c,), param_dtype, device, seed + 1),
                samples.make_tensor((c,), param_dtype, device, seed + 2, low=-1, high=1),
                samples.make_tensor((c,), param_dtype, device, seed + 3, low=0.5, high=2))

    def x(shape: tuple[int, ...], seed: int) -> torch.Tensor:
        return samples.make_tensor(shape, dtype, device, seed, low=-1, high=5)  # a mean away from 0

    yield Sample("contiguous", (x((3, 6, 5, 7), 61), *params(6, 62)))
    yield Sample("channels-last", (x((2, 5, 7, 8), 63).to(memory_format=torch.channels_last), *params(5, 64)))
    yield Sample("channels-last 5-d", (x((2, 3, 4, 5, 6), 65).to(memory_format=torch.channels_last_3d),
                                       *params(3, 66)))
    yield Sample("no weight", (x((4, 5, 17), 67), None, None, *params(5, 68)[2:]))
    yield Sample("2-d", (x((9, 33), 69), *params(33, 70)))
    yield Sample("strided", (x((3, 4, 6, 10), 71)[:, :, :, ::2], *params(4, 72)))
    yield Sample("transposed", (x((2, 3, 7, 4), 81).transpose(2, 3), *params(3, 82)))
    yield Sample("expanded", (x((1, 4, 9), 83).expand(3, 4, 9), *params(4, 84)))
    # centred data: ATen's CPU kernel keeps half-precision statistics, whose rounding the
    # weight gradient's long sum multiplies (on the CPU, for ATen and gems alike)
    yield Sample("long", (samples.make_tensor((1, 2, 17000), dtype, device, 73), *params(2, 74)))
    yield Sample("long channels-last", (x((2, 3, 48, 48), 79).to(memory_format=torch.channels_last), *params(3, 80)))
    if dtype in (torch.float16, torch.bfloat16):
        yield Sample("mixed", (x((3, 4, 5, 6), 75).to(memory_format=torch.channels_last),
                               *params(4, 76, torch.float32)))
    if empty:
        yield Sample("empty", (x((0, 3, 4), 77), *params(3, 78)))


def _with_empty(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    return batch_norm_samples(dtype, device, profile, empty=True)


def positions(sample: Sample) -> int:
    """Sums run over the N * HW positions of a channel."""
    x = sample.args[0]
    return max(x.numel() // max(x.shape[1], 1), 1)


def _clones(*stats: torch.Tensor | None) -> list[torch.Tensor | None]:
    # the call updates them in place: the suite calls each case several times on one sample
    return [t.clone() if t is not None else None for t in stats]


def _train(x: torch.Tensor, w: Any, b: Any, rm: Any, rv: Any) -> Any:
    rm, rv = _clones(rm, rv)
    y = F.batch_norm(x, rm, rv, w, b, training=True, momentum=MOMENTUM, eps=EPS)
    return y, rm, rv


def _eval(x: torch.Tensor, w: Any, b: Any, rm: Any, rv: Any) -> Any:
    return F.batch_norm(x, rm, rv, w, b, training=False, eps=EPS)


def _with_grads(training: bool) -> Callable[..., Any]:
    """(y, dx, dw?, db?) of ``F.batch_norm`` for fixed output weights."""

    def call(x: torch.Tensor, w: Any, b: Any, rm: Any, rv: Any) -> Any:
        rm, rv = _clones(rm, rv)
        leaves = [t.detach().requires_grad_() if t is not None else None for t in (x, w, b)]
        y = F.batch_norm(leaves[0], rm, rv, leaves[1], leaves[2], training=training, momentum=MOMENTUM, eps=EPS)
        grads = torch.autograd.grad(y, [t for t in leaves if t is not None], ramp_like(y))
        return (y.detach(), *grads)

    return call


def _native_eval(x: torch.Tensor, w: Any, b: Any, rm: Any, rv: Any) -> Any:
    # the statistics it returns differ by device (empty on the CPU, the running ones on GPUs)
    return torch.ops.aten.native_batch_norm(x, w, b, rm, rv, False, MOMENTUM, EPS)[0]


def _outs(*like: torch.Tensor) -> dict[str, torch.Tensor]:
    """``out=`` tensors laid out as the functional form's results (ATen's CPU kernel resizes
    an empty one contiguous, then writes it in the input's layout: a channels-last input's
    result would be scrambled)."""
    return {f"out{i}": torch.empty_like(t) for i, t in enumerate(like)}


def _forward_outs(x: torch.Tensor, w: Any) -> dict[str, torch.Tensor]:
    out, mean, invstd = _outs(*torch.ops.aten.native_batch_norm(x, w, None, None, None, True, MOMENTUM, EPS)).values()
    return {"out": out, "save_mean": mean, "save_invstd": invstd}


def _training(op: Any, out: bool = False) -> Callable[..., Any]:
    """A training call of ``op`` (native_batch_norm or _native_batch_norm_legit, functional or
    ``out=``) with running statistics, which are results too."""

    def call(x: torch.Tensor, w: Any, b: Any, rm: Any, rv: Any) -> Any:
        rm, rv = _clones(rm, rv)
        args = (x, w, b, rm, rv, True, MOMENTUM, EPS)
        if not out:
            return (*op(*args), rm, rv)
        outs = _forward_outs(x, w)
        op(*args, **outs)
        return (*outs.values(), rm, rv)

    return call


def _legit_no_stats(x: torch.Tensor, w: Any, b: Any, rm: Any, rv: Any) -> Any:
    return torch.ops.aten._native_batch_norm_legit.no_stats(x, w, b, True, MOMENTUM, EPS)


def _legit_no_stats_out(x: torch.Tensor, w: Any, b: Any, rm: Any, rv: Any) -> Any:
    outs = _forward_outs(x, w)
    torch.ops.aten._native_batch_norm_legit.no_stats_out(x, w, b, True, MOMENTUM, EPS, **outs)
    return tuple(outs.values())


def _backward_inputs(x: torch.Tensor, w: Any, b: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dy, save_mean, save_invstd) of a training forward."""
    _, mean, invstd = torch.ops.aten.native_batch_norm(x, w, b, None, None, True, MOMENTUM, EPS)
    return ramp_like(x), mean, invstd


def _native_backward_out(x: torch.Tensor, w: Any, b: Any, rm: Any, rv: Any) -> Any:
    dy, mean, invstd = _backward_inputs(x, w, b)
    args = (dy, x, w, rm, rv, mean, invstd, True, EPS, [True] * 3)
    outs = _outs(*torch.ops.aten.native_batch_norm_backward(*args))
    torch.ops.aten.native_batch_norm_backward.out(*args, **outs)
    return tuple(outs.values())


def _with_update(x: torch.Tensor, w: Any, b: Any, rm: Any, rv: Any) -> Any:
    """_batch_norm_with_update's output, statistics and updated running statistics, then
    batch_norm_backward's gradients from them."""
    rm, rv = _clones(rm, rv)
    out, mean, invstd, reserve = torch.ops.aten._batch_norm_with_update(x, w, b, rm, rv, MOMENTUM, EPS)
    weight = w if w is not None else torch.ones(x.shape[1], dtype=x.dtype, device=x.device)
    grads = torch.ops.aten.batch_norm_backward(ramp_like(x), x, weight, rm, rv, mean, invstd, True, EPS,
                                               [True] * 3, reserve)
    return (out, mean, invstd, rm, rv, *grads)


def _register(name: str, aten: tuple[str, ...], call: Callable[..., Any], empty: bool = False,
              reference: Callable[..., Any] | None = None) -> None:
    register(OpCase(name, aten, call, _with_empty if empty else batch_norm_samples, FLOATS,
                    reduction_length=positions, reference=reference))


# F.batch_norm reaches native_batch_norm on the CPU, cudnn_batch_norm on NVIDIA GPUs where cuDNN
# takes the call (weight and bias given, 3 dims or more, no bfloat16), miopen_batch_norm on AMD
# GPUs where MIOpen does, native_batch_norm otherwise
_ROUTE = ("native_batch_norm", "cudnn_batch_norm", "miopen_batch_norm")
# the forward's overloads too: the routing check's profile hook then leaves at the forward
# rather than watching every Python call of its interpreted kernels (the backward's routing
# is checked on its own by tests/test_batch_norm.py)
_BACKWARD_ROUTE = (*_ROUTE, "native_batch_norm_backward", "cudnn_batch_norm_backward", "miopen_batch_norm_backward")
_register("batch_norm", _ROUTE, _train)
_register("batch_norm_eval", _ROUTE, _eval)
_register("batch_norm_backward", _BACKWARD_ROUTE, _with_grads(training=True))
_register("batch_norm_eval_backward", _BACKWARD_ROUTE, _with_grads(training=False))
_native = _training(torch.ops.aten.native_batch_norm)
_legit = _training(torch.ops.aten._native_batch_norm_legit)
_register("native_batch_norm", ("native_batch_norm",), _native)
_register("native_batch_norm_eval", ("native_batch_norm",), _native_eval, empty=True)
_register("native_batch_norm_legit", ("_native_batch_norm_legit",), _legit)
_register("native_batch_norm_legit_no_stats", ("_native_batch_norm_legit.no_stats",), _legit_no_stats)
# the out= forms hold against their functional forms: ATen's CPU out= kernels write an input
# that is neither contiguous nor channels-last (a transposed one) in the wrong order
_register("native_batch_norm_out", ("native_batch_norm.out",), _training(torch.ops.aten.native_batch_norm.out, True),
          reference=_native)
_register("native_batch_norm_legit_out", ("_native_batch_norm_legit.out",),
          _training(torch.ops.aten._native_batch_norm_legit.out, True), reference=_legit)
_register("native_batch_norm_legit_no_stats_out", ("_native_batch_norm_legit.no_stats_out",), _legit_no_stats_out,
          reference=_legit_no_stats)
_register("native_batch_norm_backward_out", ("native_batch_norm", "native_batch_norm_backward.out"), _native_backward_out)
_register("batch_norm_with_update", ("_batch_norm_with_update", "batch_norm_backward"), _with_update)
