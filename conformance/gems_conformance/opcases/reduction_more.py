"""Cases for gems_core/ops/reduction_more.py: trace, count_nonzero, equal and angle.

trace and count_nonzero take every layout of matrices with some zeros (and integer and
bool inputs, which count and sum in int64), count_nonzero over all dims, one, both and a
negative one; equal compares a tensor with its copy, with one element changed and with
another shape, NaN included; angle takes the elementwise samples (special values too).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample

_DIMS = (None, 1, (0, 1), -2)


def _sparse(shape: tuple[int, ...], dtype: torch.dtype, device: Any, seed: int) -> Iterator[tuple[str, torch.Tensor]]:
    for label, x in samples.layouts(shape, dtype, device, seed=seed):
        mask = samples.make_tensor(shape, torch.bool, device, seed + 7)
        yield label, torch.where(mask, x, torch.zeros((), dtype=dtype, device=device))


def _trace_samples(dtype: torch.dtype, device: Any, profile: str) -> Iterator[Sample]:
    for n, shape in enumerate(samples.SHAPES[profile]):
        for label, x in _sparse(shape, dtype, device, 100 * n):
            yield Sample(label, (x,))
    yield Sample("empty", (samples.make_tensor((0, 3), dtype, device, 1),))


def _count_samples(dtype: torch.dtype, device: Any, profile: str) -> Iterator[Sample]:
    for n, shape in enumerate(samples.SHAPES[profile]):
        for label, x in _sparse(shape, dtype, device, 100 * n):
            for dim in _DIMS:
                yield Sample(label, (x, dim))
    yield Sample("empty", (samples.make_tensor((0, 3), dtype, device, 1), 0))
    yield Sample("0-d", (samples.make_tensor((), dtype, device, 2), None))


def _equal_samples(dtype: torch.dtype, device: Any, profile: str) -> Iterator[Sample]:
    for n, shape in enumerate(samples.SHAPES[profile]):
        for label, x in samples.layouts(shape, dtype, device, seed=100 * n):
            yield Sample(label, (x, x.clone()))
            changed = x.clone()
            changed[-1, -1] = 1 - changed[-1, -1] if dtype != torch.bool else ~changed[-1, -1]
            yield Sample(f"{label}, one differs", (x, changed))
        x = samples.make_tensor(shape, dtype, device, 100 * n + 9)
        yield Sample("other shape", (x, x[:1]))
    if dtype.is_floating_point:
        nan = torch.full((3,), float("nan"), dtype=dtype, device=device)
        yield Sample("NaN", (nan, nan.clone()))
    yield Sample("empty", (torch.empty(0, 2, dtype=dtype, device=device), torch.empty(0, 2, dtype=dtype, device=device)))


def _count_out(x: torch.Tensor, dim: Any) -> torch.Tensor:
    shape = torch.count_nonzero(torch.empty(x.shape, device="meta"), dim).shape
    overload = torch.ops.aten.count_nonzero.out if dim is None or isinstance(dim, int) else \
        torch.ops.aten.count_nonzero.dim_IntList_out
    return overload(x, dim, out=torch.empty(shape, dtype=torch.int64, device=x.device))


register(OpCase("trace", ("trace",), torch.trace, _trace_samples, samples.FLOAT_DTYPES + samples.INT_DTYPES,
                reduction_length=lambda sample: min(sample.args[0].shape)))
register(OpCase("trace_out", ("trace.out",),
                lambda x: torch.ops.aten.trace.out(x, out=torch.empty((), dtype=x.dtype, device=x.device)),
                _trace_samples, (torch.float32,), reduction_length=lambda sample: min(sample.args[0].shape)))
register(OpCase("count_nonzero", ("count_nonzero", "count_nonzero.dim_IntList"), torch.count_nonzero, _count_samples,
                samples.ALL_DTYPES))
register(OpCase("count_nonzero_out", ("count_nonzero.out", "count_nonzero.dim_IntList_out"), _count_out,
                _count_samples, (torch.float32, torch.int64)))
register(OpCase("equal", ("equal",), torch.equal, _equal_samples, samples.ALL_DTYPES))
register(OpCase("angle", ("angle",), torch.angle, lambda d, dev, p: samples.elementwise(1, d, dev, p),
                samples.FLOAT_DTYPES + (torch.int32, torch.int64)))
register(OpCase("angle_out", ("angle.out",), lambda x: torch.angle(x, out=torch.empty_like(x)),
                lambda d, dev, p: samples.elementwise(1, d, dev, p), (torch.float32,)))
