"""Cases for gems_core/ops/norm.py: layer_norm and rms_norm, forward and backward.

Every layout normalized over its last dim (with weight and bias), a 3-d input normalized
over two dims, no weight, rows a stride apart (the last position of a sequence) and a slice
of positions, a row longer than one tile, and an empty batch. Backward runs
through autograd, so the kernels are met the way training meets them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample, ramp_like

FLOATS = samples.FLOAT_DTYPES


def norm_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    """(input, weight, bias) and a ``normalized_shape`` keyword."""

    def params(shape: tuple[int, ...], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        return (samples.make_tensor(shape, dtype, device, seed, low=0.5, high=2),
                samples.make_tensor(shape, dtype, device, seed + 1))

    for n, shape in enumerate(samples.SHAPES[profile]):
        for label, x in samples.layouts(shape, dtype, device, seed=100 * n):
            yield Sample(label, (x, *params(shape[-1:], 100 * n + 50)), {"normalized_shape": [shape[-1]]})
    cube = samples.make_tensor((3, 5, 17), dtype, device, 31)
    yield Sample("two dims", (cube, *params((5, 17), 33)), {"normalized_shape": [5, 17]})
    yield Sample("no weight", (cube, None, None), {"normalized_shape": [17]})
    # rows a stride apart (read in place) and rows whose leading dims do not step alike (copied)
    sequence = samples.make_tensor((4, 6, 33), dtype, device, 45)
    yield Sample("last position", (sequence[:, -1], *params((33,), 47)), {"normalized_shape": [33]})
    yield Sample("slice of positions", (sequence[:, 1:4], *params((33,), 49)), {"normalized_shape": [33]})
    yield Sample("long", (samples.make_tensor((2, 3000 + 17), dtype, device, 37, low=1, high=4),
                          *params((3000 + 17,), 39)), {"normalized_shape": [3000 + 17]})
    yield Sample("empty", (samples.make_tensor((0, 3), dtype, device, 41), *params((3,), 43)),
                 {"normalized_shape": [3]})


def row_length(sample: Sample) -> int:
    return math.prod(sample.kwargs["normalized_shape"])


def batch_length(sample: Sample) -> int:
    """Weight gradients sum over the batch as well."""
    return max(row_length(sample), sample.args[0].numel() // max(row_length(sample), 1))


def _layer_norm(x: torch.Tensor, w: Any, b: Any, normalized_shape: list[int]) -> Any:
    return torch.native_layer_norm(x, normalized_shape, w, b, 1e-5)


def _with_grads(forward: Callable[..., torch.Tensor], bias: bool = True) -> Callable[..., Any]:
    """(y, dx, dw?, db?) of ``forward(x, w, b, normalized_shape)`` for fixed output weights;
    ``bias=False``: the op takes no bias (its sample's bias is left out)."""

    def call(x: torch.Tensor, w: Any, b: Any, normalized_shape: list[int]) -> Any:
        b = b if bias else None
        leaves = [t.detach().requires_grad_() if t is not None else None for t in (x, w, b)]
        y = forward(*leaves, normalized_shape)
        weights = ramp_like(y)
        grads = torch.autograd.grad(y, [t for t in leaves if t is not None], weights)
        return (y.detach(), *grads)

    return call


register(OpCase("layer_norm", ("native_layer_norm",), _layer_norm, norm_samples, FLOATS,
                reduction_length=row_length))
register(OpCase("layer_norm_backward", ("native_layer_norm", "native_layer_norm_backward"),
                _with_grads(lambda x, w, b, s: torch.nn.functional.layer_norm(x, s, w, b)),
                norm_samples, FLOATS, reduction_length=batch_length))
register(OpCase("rms_norm", ("rms_norm",), lambda x, w, b, normalized_shape: torch.rms_norm(x, normalized_shape, w, 1e-6),
                norm_samples, FLOATS, reduction_length=row_length))
register(OpCase("rms_norm_default_eps", ("rms_norm",),
                lambda x, w, b, normalized_shape: torch.rms_norm(x, normalized_shape, w),
                lambda dt, dev, p: (s for s in norm_samples(dt, dev, p) if s.label in ("contiguous", "no weight")),
                FLOATS, reduction_length=row_length))
register(OpCase("rms_norm_backward", ("rms_norm",),
                _with_grads(lambda x, w, b, s: torch.rms_norm(x, s, w, 1e-6), bias=False),
                norm_samples, FLOATS, reduction_length=batch_length))
