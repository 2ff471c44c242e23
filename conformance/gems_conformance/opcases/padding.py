"""Cases for gems_core/ops/padding.py: reflection_pad1d/2d/3d and replication_pad1d/2d/3d
through F.pad (forward, and backward through autograd) and their out= and grad_input=
overloads called directly; constant_pad_nd.out.

Every input meets every layout (contiguous, transposed, sliced with a step, expanded,
channels_last for 4-d and 5-d), with and without its batch dim, padded on both sides,
on one side, and cropped on one side by a negative pad; plus an empty batch. The quick
profile gives the 3-d pads and the backward's cases contiguous and channels_last inputs only,
and a 3-d input every kind of pad in one sample. The forward copies elements, so it compares
exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample

FLOATS = samples.FLOAT_DTYPES
#: every dtype ATen pads by reflection or replication (no bool)
PADDED = samples.FLOAT_DTYPES + (torch.float64,) + samples.INT_DTYPES
#: (N, C, D, H, W) per profile; the spatial dims an op has are the last ones
SHAPES = {"quick": (2, 3, 4, 5, 7), "full": (4, 16, 9, 33, 65), "large": (8, 64, 3, 129, 257)}
#: pads (before, after) of each spatial dim: both sides, one side, a crop
PADS = ((2, 1), (0, 2), (-1, 2))


def _pad_samples(dims: int, backward: bool = False) -> Callable[[torch.dtype, torch.device | str, str], Iterator[Sample]]:
    """(x, pad) with pad listed last dim first, as F.pad takes it (``backward``: for a case
    of the backward, whose kernel reads the upstream gradient and, of the input, only its
    sizes and memory format)."""

    def generate(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
        shape = SHAPES[profile][:2] + SHAPES[profile][5 - dims:]
        # the quick profile's 3-d inputs and backward cases: contiguous and channels_last only
        # (every dims' op runs one kernel, which the 1-d and 2-d forward cases drive through
        # every layout), and the 3-d ones every kind of pad in one sample, a kind per dim
        quick = profile == "quick"
        layouts = list(samples.layouts(shape, dtype, device, seed=dims))[:1 if quick and (dims == 3 or backward) else None]
        if dims > 1:
            fmt = torch.channels_last if dims == 2 else torch.channels_last_3d
            layouts.append(("channels_last", samples.make_tensor(shape, dtype, device, 9).contiguous(memory_format=fmt)))
        for label, x in layouts:
            if quick and dims == 3:
                yield Sample(label, (x, [v for pair in PADS for v in pair]))
                continue
            for k, pair in enumerate(PADS):
                pad = [v for d in range(dims) for v in (pair if d == k % dims else pair[::-1])]
                yield Sample(label, (x, pad))
        yield Sample("unbatched", (samples.make_tensor(shape[1:], dtype, device, 5), [1, 2] * dims))
        yield Sample("empty", (samples.make_tensor((0,) + shape[1:], dtype, device, 6), [1, 1] * dims))

    return generate


def _padded(mode: str) -> Callable[..., torch.Tensor]:
    return lambda x, pad: F.pad(x, pad, mode=mode)


def _through_autograd(mode: str) -> Callable[..., torch.Tensor]:
    def call(x: torch.Tensor, pad: list[int]) -> torch.Tensor:
        x = x.detach().requires_grad_()
        y = F.pad(x, pad, mode=mode)
        (grad,) = torch.autograd.grad(y, x, samples.ramp_like(y))
        return grad

    return call


def _out_call(op: str) -> Callable[..., torch.Tensor]:
    overload = getattr(torch.ops.aten, op).out
    return lambda x, pad: overload(x, pad, out=torch.empty(0, dtype=x.dtype, device=x.device))


def _grad_input_call(op: str) -> Callable[..., torch.Tensor]:
    overload = getattr(torch.ops.aten, f"{op}_backward").grad_input

    def call(x: torch.Tensor, pad: list[int]) -> torch.Tensor:
        grad = samples.ramp_like(F.pad(x, pad, mode="replicate" if "replication" in op else "reflect"))
        return overload(grad, x, pad, grad_input=torch.empty(0, dtype=x.dtype, device=x.device))

    return call


def _summed(dims: int) -> Callable[[Sample], int]:
    """A backward element sums at most (pad + 1) outputs per dim."""
    return lambda sample: 4**dims


for _dims in (1, 2, 3):
    for _op, _mode in ((f"reflection_pad{_dims}d", "reflect"), (f"replication_pad{_dims}d", "replicate")):
        _samples = _pad_samples(_dims)
        # every dtype on the 2-d pads; the 1-d and 3-d ones share their kernels
        _dtypes = PADDED if _dims == 2 else (torch.float32, torch.float16, torch.int32, torch.float64)
        register(OpCase(_op, (_op,), _padded(_mode), _samples, _dtypes, compare="exact"))
        register(OpCase(f"{_op}_out", (f"{_op}.out",), _out_call(_op), _samples, (torch.float32, torch.int64),
                        compare="exact"))
        register(OpCase(f"{_op}_autograd", (_op, f"{_op}_backward"), _through_autograd(_mode),
                        _pad_samples(_dims, backward=True), FLOATS if _dims == 2 else (torch.float32,),
                        reduction_length=_summed(_dims)))
        register(OpCase(f"{_op}_backward_grad_input", (f"{_op}_backward.grad_input",), _grad_input_call(_op),
                        _pad_samples(_dims, backward=True), (torch.float32,), reduction_length=_summed(_dims)))


def _constant_pad_out(x: torch.Tensor, pad: list[int]) -> torch.Tensor:
    out = torch.empty(0, dtype=x.dtype, device=x.device)
    return torch.ops.aten.constant_pad_nd.out(x, pad, 1.5 if x.is_floating_point() else 3, out=out)


register(OpCase("constant_pad_nd_out", ("constant_pad_nd.out",), _constant_pad_out, _pad_samples(2),
                (torch.float32, torch.float64, torch.int32), compare="exact"))
