"""Cases for gems_core/ops/pooling.py: max, average, adaptive average and adaptive max
pooling, forward (with indices) and backward, functional and out= forms.

Every case meets the same sample classes: a channels-last batch, a contiguous one, a slice
with a step along W, H and W transposed, a batch expanded from one image (stride 0), a 3-d
input (no batch), an empty batch and NaN and infinities among the values. Each sample takes
the next window arguments of its case's list, the channels-last one the first (ResNet's 3x3
stride-2 pool, its 1x1 global average), so the classes also cover ceil_mode, dilation,
rectangular windows, count_include_pad off, divisor_override, and adaptive outputs smaller
and larger than the input.
Backward cases call the backward overload on the forward's own result and ``ramp_like``
gradients.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample, make_tensor, ramp_like

FLOATS = samples.FLOAT_DTYPES
aten = torch.ops.aten

#: (N, C, H, W) per profile; the full profile's first is a ResNet-50 stem output
SHAPES = {"quick": (2, 3, 9, 10), "full": (8, 64, 112, 112), "large": (32, 64, 112, 112)}

MAX_ARGS = [
    {"kernel_size": [3, 3], "stride": [2, 2], "padding": [1, 1], "dilation": [1, 1], "ceil_mode": False},
    {"kernel_size": [2, 2], "stride": [2, 2], "padding": [0, 0], "dilation": [1, 1], "ceil_mode": True},
    {"kernel_size": [3, 2], "stride": [1, 2], "padding": [1, 0], "dilation": [2, 1], "ceil_mode": True},
    {"kernel_size": [2, 3], "stride": [2, 1], "padding": [0, 1], "dilation": [1, 2], "ceil_mode": False},
]
AVG_ARGS = [
    {"kernel_size": [3, 3], "stride": [2, 2], "padding": [1, 1], "ceil_mode": False, "count_include_pad": True,
     "divisor_override": None},
    {"kernel_size": [3, 3], "stride": [2, 2], "padding": [1, 1], "ceil_mode": True, "count_include_pad": False,
     "divisor_override": None},
    {"kernel_size": [2, 3], "stride": [1, 2], "padding": [1, 0], "ceil_mode": True, "count_include_pad": True,
     "divisor_override": None},
    {"kernel_size": [2, 2], "stride": [2, 2], "padding": [0, 1], "ceil_mode": False, "count_include_pad": True,
     "divisor_override": 3},
]
ADAPTIVE_ARGS = [{"output_size": [1, 1]}, {"output_size": [4, 3]}, {"output_size": [5, 13]},
                 {"output_size": [7, 7]}]


def _with_specials(shape: tuple[int, ...], dtype: torch.dtype, device: Any, seed: int) -> torch.Tensor:
    """Random values with NaN, infinities and signed zeros scattered through them."""
    x = make_tensor(shape, dtype, "cpu", seed)
    flat = x.view(-1)
    special = samples.special_values(dtype, "cpu")
    spots = torch.randperm(flat.numel(), generator=torch.Generator().manual_seed(seed))[:3 * len(special)]
    flat[spots] = special.repeat(3)
    return x.to(device)


def _inputs(dtype: torch.dtype, device: Any, profile: str) -> Iterator[tuple[str, torch.Tensor]]:
    n, c, h, w = SHAPES[profile]
    yield "channels-last", make_tensor((n, h, w, c), dtype, device, 2).permute(0, 3, 1, 2)
    yield "contiguous", make_tensor((n, c, h, w), dtype, device, 1)
    yield "strided", make_tensor((n, c, h, 2 * w), dtype, device, 3)[..., ::2]
    yield "transposed", make_tensor((n, c, w, h), dtype, device, 4).transpose(2, 3)
    yield "expanded", make_tensor((1, c, h, w), dtype, device, 5).expand(n, c, h, w)
    yield "3-d", make_tensor((c, h, w), dtype, device, 6)
    yield "empty", make_tensor((0, c, h, w), dtype, device, 7)
    yield "special", _with_specials((n, c, h, w), dtype, device, 8)


def pool_samples(arguments: list[dict[str, Any]]) -> Callable[[torch.dtype, Any, str], Iterator[Sample]]:
    """Every input class, each with the next of ``arguments`` (window arguments by keyword)."""

    def make(dtype: torch.dtype, device: Any, profile: str) -> Iterator[Sample]:
        for i, (label, x) in enumerate(_inputs(dtype, device, profile)):
            yield Sample(label, (x,), dict(arguments[i % len(arguments)]))

    return make


def window_size(sample: Sample) -> int:
    """Elements an output sums: the window, or an adaptive window's largest extent."""
    if "output_size" in sample.kwargs:
        x = sample.args[0]
        return max(-(-x.shape[-2] // sample.kwargs["output_size"][0]) + 1, 1) * max(
            -(-x.shape[-1] // sample.kwargs["output_size"][1]) + 1, 1)
    k = sample.kwargs["kernel_size"]
    return k[0] * k[1]


def _out(op: Any, *results: str) -> Callable[..., Any]:
    """``op`` (an out= overload) into fresh empty tensors, which it resizes."""

    def call(x: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        outs = {name: torch.empty(0, dtype=torch.int64 if name == "indices" else x.dtype, device=x.device)
                for name in results}
        op(x, *args, **kwargs, **outs)
        return tuple(outs.values()) if len(outs) > 1 else outs["out"]

    return call


def _max_backward(x: torch.Tensor, out: dict[str, torch.Tensor] | None = None, **kw: Any) -> torch.Tensor:
    y, indices = aten.max_pool2d_with_indices(x, **kw)
    if out is None:
        return aten.max_pool2d_with_indices_backward(ramp_like(y), x, **kw, indices=indices)
    return aten.max_pool2d_with_indices_backward.grad_input(ramp_like(y), x, **kw, indices=indices, **out)


def _avg_backward(x: torch.Tensor, out: dict[str, torch.Tensor] | None = None, **kw: Any) -> torch.Tensor:
    y = aten.avg_pool2d(x, **kw)
    if out is None:
        return aten.avg_pool2d_backward(ramp_like(y), x, **kw)
    return aten.avg_pool2d_backward.grad_input(ramp_like(y), x, **kw, **out)


def _adaptive_avg_backward(x: torch.Tensor, out: dict[str, torch.Tensor] | None = None, **kw: Any) -> torch.Tensor:
    y = aten._adaptive_avg_pool2d(x, **kw)
    if out is None:
        return aten._adaptive_avg_pool2d_backward(ramp_like(y), x)
    return aten._adaptive_avg_pool2d_backward.out(ramp_like(y), x, **out)


def _adaptive_max_backward(x: torch.Tensor, out: dict[str, torch.Tensor] | None = None, **kw: Any) -> torch.Tensor:
    y, indices = aten.adaptive_max_pool2d(x, **kw)
    if out is None:
        return aten.adaptive_max_pool2d_backward(ramp_like(y), x, indices)
    return aten.adaptive_max_pool2d_backward.grad_input(ramp_like(y), x, indices, **out)


def _into(backward: Callable[..., torch.Tensor], name: str) -> Callable[..., torch.Tensor]:
    """``backward``'s out= overload, into a fresh empty tensor named ``name``."""

    def call(x: torch.Tensor, **kw: Any) -> torch.Tensor:
        out = {name: torch.empty(0, dtype=x.dtype, device=x.device)}
        return backward(x, out, **kw)

    return call


for _name, _forward, _backward, _args, _outs in (
    ("max_pool2d_with_indices", aten.max_pool2d_with_indices, _max_backward, MAX_ARGS, ("out", "indices")),
    ("avg_pool2d", aten.avg_pool2d, _avg_backward, AVG_ARGS, ("out",)),
    ("_adaptive_avg_pool2d", aten._adaptive_avg_pool2d, _adaptive_avg_backward, ADAPTIVE_ARGS, ("out",)),
    ("adaptive_max_pool2d", aten.adaptive_max_pool2d, _adaptive_max_backward, ADAPTIVE_ARGS, ("out", "indices")),
):
    _grad_out = "out" if _name == "_adaptive_avg_pool2d" else "grad_input"
    _backward_name = f"{_name}_backward"
    _pool_samples = pool_samples(_args)
    register(OpCase(_name, (_name,), _forward, _pool_samples, FLOATS, reduction_length=window_size))
    register(OpCase(f"{_name}_out", (f"{_name}.out",), _out(_forward.out, *_outs), _pool_samples, FLOATS,
                    reduction_length=window_size))
    register(OpCase(_backward_name, (_backward_name,), _backward, _pool_samples, FLOATS,
                    reduction_length=window_size))
    register(OpCase(f"{_backward_name}_out", (f"{_backward_name}.{_grad_out}",), _into(_backward, _grad_out),
                    _pool_samples, FLOATS, reduction_length=window_size))
