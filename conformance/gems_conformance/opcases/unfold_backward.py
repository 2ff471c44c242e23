"""Cases for gems_core/ops/unfold_backward.py: the gradient of ``Tensor.unfold`` through
autograd (inputs of every layout) and unfold_backward called directly on window gradients
of every layout (a 4-d one permuted so that its dims cannot be merged), with overlapping
windows (step < size), gapped ones (step > size, leaving zeros), windows along the last dim,
one window of the whole dim, an empty input and a 0-d one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample

FLOATS = samples.FLOAT_DTYPES + (torch.float64,)

#: sample class -> (dim, size, step); size None: the whole dim
WINDOWS: dict[str, tuple[int, int | None, int]] = {
    "overlapping": (1, 3, 2),
    "gapped": (0, 2, 3),
    "last dim": (-1, 4, 1),
    "whole": (1, None, 1),
}


def _unfolded(shape: tuple[int, ...], dim: int, size: int, step: int) -> list[int]:
    grad_shape = list(shape)
    grad_shape[dim] = (shape[dim] - size) // step + 1
    return [*grad_shape, size]


def _input_samples(dtype: torch.dtype, device: Any, profile: str) -> Iterator[Sample]:
    for n, shape in enumerate(samples.SHAPES[profile]):
        for kind, (dim, size, step) in WINDOWS.items():
            for label, x in samples.layouts(shape, dtype, device, seed=100 * n):
                yield Sample(f"{label} {kind}", (x, dim, size or shape[dim], step))
    yield Sample("empty", (samples.make_tensor((0, 4), dtype, device, 1), 1, 3, 1))
    yield Sample("0-d", (samples.make_tensor((), dtype, device, 2), 0, 1, 1))


def _grad_samples(dtype: torch.dtype, device: Any, profile: str) -> Iterator[Sample]:
    for n, shape in enumerate(samples.SHAPES[profile]):
        for kind, (dim, size, step) in WINDOWS.items():
            size = size or shape[dim]
            grad_shape = _unfolded(shape, dim, size, step)
            for label, grad in samples.layouts(grad_shape, dtype, device, seed=100 * n + 7):
                yield Sample(f"{label} {kind}", (grad, list(shape), dim, size, step))
    shape = (2, 3, 7, 2)
    grad = samples.make_tensor(_unfolded(shape, 2, 3, 2)[::-1], dtype, device, 3).permute(4, 3, 2, 1, 0)
    yield Sample("permuted", (grad, list(shape), 2, 3, 2))
    yield Sample("empty", (samples.make_tensor((0, 2, 3), dtype, device, 4), [0, 4], 1, 3, 1))
    yield Sample("0-d", (samples.make_tensor((1,), dtype, device, 5), [], 0, 1, 1))


def _unfold_grad(x: torch.Tensor, dim: int, size: int, step: int) -> torch.Tensor:
    x = x.detach().requires_grad_()
    y = x.unfold(dim, size, step)
    (grad,) = torch.autograd.grad(y, x, samples.ramp_like(y))
    return grad


def _out(grad: torch.Tensor, sizes: list[int], dim: int, size: int, step: int) -> torch.Tensor:
    out = torch.empty(sizes, dtype=grad.dtype, device=grad.device)
    return torch.ops.aten.unfold_backward.out(grad, sizes, dim, size, step, out=out)


def _length(sample: Sample) -> int:
    # an element sums at most ceil(size / step) window gradients
    *_, size, step = sample.args
    return max(1, -(-size // step))


register(OpCase("unfold_autograd", ("unfold_backward",), _unfold_grad, _input_samples, FLOATS,
                reduction_length=_length))
register(OpCase("unfold_backward", ("unfold_backward",), torch.ops.aten.unfold_backward, _grad_samples, FLOATS,
                reduction_length=_length))
register(OpCase("unfold_backward_out", ("unfold_backward.out",), _out, _grad_samples, (torch.float32,),
                reduction_length=_length))
