"""Cases for gems_core/ops/reduction.py: sum, mean, amax.

Each op meets every layout reduced over the innermost and an outer dim (with keepdim), a
3-d input over a middle dim and over dim lists (one that the kernel cannot read in place),
every dim at once, a row long enough to be split over several programs, empty inputs, 0-d
inputs and, for floats, NaN/Inf.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample

FLOATS = samples.FLOAT_DTYPES
NUMERIC = samples.FLOAT_DTYPES + samples.INT_DTYPES


def reduction_samples(
    dtype: torch.dtype, device: torch.device | str, profile: str, *, empty_rows: bool = True
) -> Iterator[Sample]:
    """Inputs with ``dim``/``keepdim`` keywords for an op reducing over dims.
    ``empty_rows``: also reduce over a dim of size 0 (ops like max raise there)."""
    for n, shape in enumerate(samples.SHAPES[profile]):
        for label, x in samples.layouts(shape, dtype, device, seed=100 * n):
            yield Sample(label, (x,), {"dim": [1]})
            yield Sample(label, (x,), {"dim": [0], "keepdim": True})
        yield Sample("all dims", (samples.make_tensor(shape, dtype, device, 100 * n + 9),), {})
    cube = samples.make_tensor((3, 5, 17), dtype, device, 31)
    yield Sample("non-innermost", (cube,), {"dim": [1]})
    yield Sample("non-innermost", (cube,), {"dim": [-1, 0], "keepdim": True})
    yield Sample("transposed", (cube.transpose(0, 2),), {"dim": [0, 1]})
    yield Sample("long", (samples.make_tensor((2, 3000 + 17), dtype, device, 37),), {"dim": [-1]})
    yield Sample("empty", (samples.make_tensor((0, 3), dtype, device, 41),), {"dim": [1]})
    if empty_rows:
        yield Sample("empty", (samples.make_tensor((2, 0), dtype, device, 43),), {"dim": [1]})
        yield Sample("empty", (samples.make_tensor((2, 0), dtype, device, 43),), {})
    yield Sample("0-d", (samples.make_tensor((), dtype, device, 47),), {"dim": [0]})
    yield Sample("0-d", (samples.make_tensor((), dtype, device, 53),), {})
    if dtype.is_floating_point:
        yield Sample("special", (samples.special_values(dtype, device).view(2, 5),), {"dim": [1]})


def reduction_length(sample: Sample) -> int:
    """How many elements make one result (scales the tolerance)."""
    x = sample.args[0]
    dim = sample.kwargs.get("dim")
    if not dim or x.dim() == 0:
        return max(x.numel(), 1)
    dims = [dim] if isinstance(dim, int) else dim
    return math.prod(x.shape[d] for d in dims)


def _sum_dtype(x: torch.Tensor) -> torch.dtype:
    return x.dtype if x.is_floating_point() else torch.int64


def _out(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(0, dtype=dtype, device=x.device)


register(OpCase(
    "sum", ("sum", "sum.dim_IntList"), lambda x, **kw: torch.sum(x, **kw),
    reduction_samples, NUMERIC + (torch.bool,), reduction_length=reduction_length,
))
register(OpCase(
    "sum_dtype", ("sum.dim_IntList",), lambda x, **kw: torch.sum(x, dim=kw.get("dim"), dtype=torch.float32),
    reduction_samples, (torch.float16, torch.bfloat16, torch.int32), reduction_length=reduction_length,
    # ATen sums in the dtype asked for: the float64 reference must round to float32 first
    reference=lambda x, **kw: torch.sum(x.float(), dim=kw.get("dim")).double(),
))
register(OpCase(
    "sum_out", ("sum.IntList_out",),
    lambda x, **kw: torch.sum(x, dim=kw.get("dim"), keepdim=kw.get("keepdim", False),
                              out=_out(x, _sum_dtype(x))),
    reduction_samples, (torch.float32, torch.float16, torch.int32), reduction_length=reduction_length,
))
register(OpCase(
    "mean", ("mean", "mean.dim"), lambda x, **kw: torch.mean(x, **kw),
    reduction_samples, FLOATS, reduction_length=reduction_length,
))
register(OpCase(
    "mean_out", ("mean.out",),
    lambda x, **kw: torch.mean(x, dim=kw.get("dim"), keepdim=kw.get("keepdim", False), out=_out(x, x.dtype)),
    reduction_samples, FLOATS, reduction_length=reduction_length,
))
register(OpCase(
    "amax", ("amax",), lambda x, **kw: torch.amax(x, **kw),
    lambda dt, dev, p: reduction_samples(dt, dev, p, empty_rows=False), NUMERIC + (torch.bool,),
))
register(OpCase(
    "amax_out", ("amax.out",),
    lambda x, **kw: torch.amax(x, dim=kw.get("dim", []), keepdim=kw.get("keepdim", False), out=_out(x, x.dtype)),
    lambda dt, dev, p: reduction_samples(dt, dev, p, empty_rows=False), (torch.float32, torch.bfloat16, torch.int64),
))
