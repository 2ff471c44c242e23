"""Cases for gems_core/ops/functional_forms.py: fill (Scalar and Tensor value) and
index_put, with their out= forms.

fill takes every layout of ``self`` (the result is laid out like it) and a value of the
dtype's kind; index_put takes the index_put_ cases' inputs (rows counted from the end,
values broadcast over the rows, an empty index), with and without accumulate. Compared
exactly, except accumulated sums (by the sum's tolerance).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample
from .indexing_more import ADD_DTYPES, _count, _put_samples

SOME = (torch.float32, torch.bfloat16, torch.int64, torch.bool)


def fill_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    value = True if dtype == torch.bool else 3 if not dtype.is_floating_point else -2.75
    for n, shape in enumerate(samples.SHAPES[profile]):
        for label, x in samples.layouts(shape, dtype, device, seed=100 * n):
            yield Sample(label, (x, value))
            yield Sample(f"{label}, tensor value", (x, torch.tensor(value)))
    yield Sample("empty", (samples.make_tensor((0, 3), dtype, device, 1), value))
    yield Sample("0-d", (samples.make_tensor((), dtype, device, 2), value))


def _fill_out(x: torch.Tensor, value: object) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    overload = torch.ops.aten.fill.Tensor_out if isinstance(value, torch.Tensor) else torch.ops.aten.fill.Scalar_out
    return overload(x, value, out=out)


def _put_out(x: torch.Tensor, index: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    return torch.ops.aten.index_put.out(x, [index], values, out=torch.empty(x.shape, dtype=x.dtype, device=x.device))


register(OpCase("fill", ("fill.Scalar", "fill.Tensor"), torch.fill, fill_samples, samples.ALL_DTYPES, compare="exact"))
register(OpCase("fill_out", ("fill.Scalar_out", "fill.Tensor_out"), _fill_out, fill_samples, SOME, compare="exact"))
register(OpCase("index_put", ("index_put",), lambda x, i, v: torch.index_put(x, (i,), v), _put_samples(True),
                SOME, compare="exact"))
register(OpCase("index_put_accumulated", ("index_put",), lambda x, i, v: torch.index_put(x, (i,), v, True),
                _put_samples(False), ADD_DTYPES, reduction_length=_count))
register(OpCase("index_put_out", ("index_put.out",), _put_out, _put_samples(True), (torch.float32, torch.int64),
                compare="exact"))
