"""Cases for gems_core/ops/softmax.py: softmax and log_softmax, forward and backward.

Every layout over the innermost and the outer dim, a 3-d input over its middle dim, a row
longer than one tile (the online two-pass path), a row of -inf padding, empty and 0-d
inputs, and NaN/Inf rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample, ramp_like

FLOATS = samples.FLOAT_DTYPES


def softmax_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    """One input tensor and a ``dim`` keyword."""
    for n, shape in enumerate(samples.SHAPES[profile]):
        for label, x in samples.layouts(shape, dtype, device, seed=100 * n):
            yield Sample(label, (x,), {"dim": 1})
            yield Sample(label, (x,), {"dim": 0})
    cube = samples.make_tensor((3, 5, 17), dtype, device, 31)
    yield Sample("non-innermost", (cube,), {"dim": 1})
    yield Sample("non-innermost", (cube,), {"dim": -3})
    yield Sample("long", (samples.make_tensor((2, 3000 + 17), dtype, device, 37, low=-8, high=8),), {"dim": -1})
    padded = samples.make_tensor((3, 2048 + 17), dtype, device, 39)
    padded[0, :1500] = float("-inf")
    yield Sample("masked", (padded,), {"dim": 1})
    yield Sample("empty", (samples.make_tensor((0, 3), dtype, device, 41),), {"dim": 1})
    yield Sample("0-d", (samples.make_tensor((), dtype, device, 47),), {"dim": 0})
    yield Sample("special", (samples.special_values(dtype, device).view(2, 5),), {"dim": 1})


def backward_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    """(grad_output, softmax output) pairs and a ``dim`` keyword."""
    for i, sample in enumerate(softmax_samples(dtype, device, profile)):
        if sample.label in ("special", "masked"):
            continue
        x = sample.args[0]
        y = torch.softmax(x.float(), sample.kwargs["dim"]).to(dtype)
        grad = samples.make_tensor(tuple(x.shape), dtype, device, 500 + i)
        yield Sample(sample.label, (grad, y), sample.kwargs)


def row_length(sample: Sample) -> int:
    x = sample.args[0]
    return x.shape[sample.kwargs["dim"]] if x.dim() else 1


def _input_grad(fn: Callable[..., torch.Tensor]) -> Callable[..., Any]:
    """x -> d(sum(fn(x) * w))/dx with fixed weights w, through autograd."""

    def call(x: torch.Tensor, dim: int) -> torch.Tensor:
        x = x.detach().requires_grad_()
        y = fn(x, dim)
        weights = ramp_like(y)
        (grad,) = torch.autograd.grad(y, x, weights)
        return grad

    return call


register(OpCase("softmax", ("_softmax",), lambda x, dim: torch.softmax(x, dim),
                softmax_samples, FLOATS, reduction_length=row_length))
register(OpCase("log_softmax", ("_log_softmax",), lambda x, dim: torch.log_softmax(x, dim),
                softmax_samples, FLOATS, reduction_length=row_length))
register(OpCase("softmax_out", ("_softmax.out",),
                lambda x, dim: torch._softmax(x, dim, False, out=torch.empty(0, dtype=x.dtype, device=x.device)),
                softmax_samples, (torch.float32, torch.bfloat16), reduction_length=row_length))
register(OpCase("log_softmax_out", ("_log_softmax.out",),
                lambda x, dim: torch._log_softmax(x, dim, False, out=torch.empty(0, dtype=x.dtype, device=x.device)),
                softmax_samples, (torch.float32, torch.float16), reduction_length=row_length))
register(OpCase("softmax_backward", ("_softmax_backward_data",),
                lambda g, y, dim: torch.ops.aten._softmax_backward_data(g, y, dim, y.dtype),
                backward_samples, FLOATS, reduction_length=row_length))
register(OpCase("log_softmax_backward", ("_log_softmax_backward_data",),
                lambda g, y, dim: torch.ops.aten._log_softmax_backward_data(g, y, dim, y.dtype),
                backward_samples, FLOATS, reduction_length=row_length))
register(OpCase("softmax_autograd", ("_softmax", "_softmax_backward_data"), _input_grad(torch.softmax),
                lambda dt, dev, p: (s for s in softmax_samples(dt, dev, p) if s.label not in ("special", "masked")),
                FLOATS, reduction_length=row_length))
register(OpCase("log_softmax_autograd", ("_log_softmax", "_log_softmax_backward_data"),
                _input_grad(torch.log_softmax),
                lambda dt, dev, p: (s for s in softmax_samples(dt, dev, p) if s.label not in ("special", "masked")),
                FLOATS, reduction_length=row_length))
