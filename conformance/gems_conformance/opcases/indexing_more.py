"""Cases for gems_core/ops/indexing_more.py: gather, scatter (src, value, reduce="add"),
scatter_add, scatter_reduce, index_copy, index_add and index_put_, in their functional,
in-place and out= forms.

Every sample's input meets every layout (contiguous, transposed, strided, expanded) along
both dims, with an index smaller than the input and a transposed (non-contiguous) source,
plus an empty index and 0-d tensors. Where a write's result depends on which of two
writes to one element wins (scatter, index_copy, index_put_ without accumulate) the indices
along the written dim are distinct; the accumulating forms repeat them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample

ADD_DTYPES = (torch.float32, torch.float16, torch.int32, torch.int64)
MINMAX_DTYPES = (torch.float32, torch.int64)


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _positions(size: int, shape: tuple[int, ...], dim: int, unique: bool, seed: int) -> torch.Tensor:
    """An int64 index of ``shape`` with entries in [0, size), distinct along ``dim`` when
    ``unique`` (then ``shape[dim] <= size``)."""
    g = _generator(seed)
    if not unique:
        return torch.randint(0, size, shape, generator=g)
    full = list(shape)
    full[dim] = size
    return torch.rand(full, generator=g).argsort(dim).narrow(dim, 0, shape[dim])


def _scatter_samples(unique: bool) -> Callable[[torch.dtype, torch.device | str, str], Iterator[Sample]]:
    """(self, dim, index, src) with index no larger than self (but along dim) and src."""

    def generate(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
        for n, shape in enumerate(samples.SHAPES[profile]):
            for i, (label, x) in enumerate(samples.layouts(shape, dtype, device, seed=100 * n)):
                for dim in (0, -1):
                    d = dim % 2
                    size = list(shape)
                    size[d] = min(shape[d], 4) if unique else 6
                    size[1 - d] = max(shape[1 - d] - 1, 1)
                    index = _positions(shape[d], tuple(size), d, unique, 10 * n + i + d).to(device)
                    src = samples.make_tensor((size[1] + 2, size[0] + 1), dtype, device, 7 * i + d).t()
                    yield Sample(label, (x, dim, index, src))
        x = samples.make_tensor((4, 5), dtype, device, 3)
        yield Sample("empty", (x, 1, torch.empty(4, 0, dtype=torch.int64, device=device), x))
        zero = torch.zeros((), dtype=torch.int64, device=device)
        yield Sample("0-d", (samples.make_tensor((), dtype, device, 5), 0, zero, samples.make_tensor((), dtype, device, 6)))

    return generate


def _gather_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    for sample in _scatter_samples(False)(dtype, device, profile):
        x, dim, index, _ = sample.args
        yield Sample(sample.label, (x, dim, index.t().contiguous().t() if index.dim() == 2 else index))


def _index_samples(unique: bool) -> Callable[[torch.dtype, torch.device | str, str], Iterator[Sample]]:
    """(self, dim, index, source) with a 1-d index along dim and source's dim its length."""

    def generate(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
        for n, shape in enumerate(samples.SHAPES[profile]):
            for i, (label, x) in enumerate(samples.layouts(shape, dtype, device, seed=100 * n)):
                for dim in (0, -1):
                    d = dim % 2
                    count = min(shape[d], 4) if unique else 6
                    index = _positions(shape[d], (count,), 0, unique, 10 * n + i + d).to(device)
                    size = list(shape)
                    size[d] = count
                    source = samples.make_tensor(size[::-1], dtype, device, 7 * i + d).t()
                    yield Sample(label, (x, dim, index, source))
        x = samples.make_tensor((4, 5), dtype, device, 3)
        empty = torch.empty(0, dtype=torch.int64, device=device)
        yield Sample("empty", (x, 1, empty, samples.make_tensor((4, 0), dtype, device, 4)))
        zero = torch.zeros((), dtype=torch.int64, device=device)
        yield Sample("0-d", (samples.make_tensor((), dtype, device, 5), 0, zero, samples.make_tensor((), dtype, device, 6)))

    return generate


def _out(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` called with an empty out= tensor (resized by the op)."""
    return lambda x, *args: fn(x, *args, out=torch.empty(0, dtype=x.dtype, device=x.device))


def _count(sample: Sample) -> int:
    return max(sample.args[2].numel(), 1)


EXACT: dict[str, Any] = {"compare": "exact"}
SUMMED: dict[str, Any] = {"reduction_length": _count}

for name, aten, call, generate, dtypes, kw in (
    ("gather", ("gather",), torch.gather, _gather_samples, samples.ALL_DTYPES, EXACT),
    ("gather_out", ("gather.out",), _out(torch.gather), _gather_samples, (torch.float32, torch.int64), EXACT),
    ("scatter", ("scatter.src",), torch.scatter, _scatter_samples(True), samples.ALL_DTYPES, EXACT),
    ("scatter_", ("scatter_.src",), lambda x, d, i, s: x.clone().scatter_(d, i, s), _scatter_samples(True),
     (torch.float32, torch.bfloat16, torch.int8, torch.bool), EXACT),
    ("scatter_value", ("scatter.value",), lambda x, d, i, s: torch.scatter(x, d, i, 2), _scatter_samples(False),
     samples.FLOAT_DTYPES + samples.INT_DTYPES, EXACT),
    ("scatter_value_", ("scatter_.value",), lambda x, d, i, s: x.clone().scatter_(d, i, -1.5),
     _scatter_samples(False), samples.FLOAT_DTYPES, EXACT),
    ("scatter_out", ("scatter.src_out",), _out(torch.scatter), _scatter_samples(True), (torch.float32,), EXACT),
    ("scatter_value_out", ("scatter.value_out",), _out(lambda x, d, i, s, out: torch.scatter(x, d, i, 2, out=out)),
     _scatter_samples(False), (torch.int32,), EXACT),
    ("scatter_value_reduce_add", ("scatter.value_reduce",),
     lambda x, d, i, s: torch.scatter(x, d, i, 2, reduce="add"), _scatter_samples(False), ADD_DTYPES, SUMMED),
    ("scatter_reduce_add_", ("scatter_.reduce",), lambda x, d, i, s: x.clone().scatter_(d, i, s, reduce="add"),
     _scatter_samples(False), (torch.float32, torch.int64), SUMMED),
    ("scatter_value_reduce_add_", ("scatter_.value_reduce",),
     lambda x, d, i, s: x.clone().scatter_(d, i, 1.5, reduce="add"), _scatter_samples(False), (torch.float32,), SUMMED),
    ("scatter_reduce_amax_out", ("scatter_reduce.two_out",),
     _out(lambda x, d, i, s, out: torch.scatter_reduce(x, d, i, s, "amax", out=out)), _scatter_samples(False),
     (torch.float32,), SUMMED),
    ("scatter_reduce_sum_", ("scatter_reduce_.two",), lambda x, d, i, s: x.clone().scatter_reduce_(d, i, s, "sum"),
     _scatter_samples(False), (torch.float32, torch.int32), SUMMED),
    ("scatter_reduce_add", ("scatter.reduce",), lambda x, d, i, s: torch.scatter(x, d, i, s, reduce="add"),
     _scatter_samples(False), ADD_DTYPES, SUMMED),
    ("scatter_add", ("scatter_add",), torch.scatter_add, _scatter_samples(False), ADD_DTYPES, SUMMED),
    ("scatter_add_", ("scatter_add_",), lambda x, d, i, s: x.clone().scatter_add_(d, i, s), _scatter_samples(False),
     ADD_DTYPES, SUMMED),
    ("scatter_add_out", ("scatter_add.out",), _out(torch.scatter_add), _scatter_samples(False), (torch.float32,), SUMMED),
    ("index_copy", ("index_copy",), torch.index_copy, _index_samples(True), samples.ALL_DTYPES, EXACT),
    ("index_copy_", ("index_copy_",), lambda x, d, i, s: x.clone().index_copy_(d, i, s), _index_samples(True),
     samples.ALL_DTYPES, EXACT),
    ("index_copy_out", ("index_copy.out",), _out(torch.index_copy), _index_samples(True), (torch.float16,), EXACT),
    ("index_add", ("index_add",), torch.index_add, _index_samples(False), ADD_DTYPES, SUMMED),
    ("index_add_alpha_", ("index_add_",), lambda x, d, i, s: x.clone().index_add_(d, i, s, alpha=3),
     _index_samples(False), (torch.float32, torch.int32, torch.int64), SUMMED),
    ("index_add_out", ("index_add.out",), _out(torch.index_add), _index_samples(False), (torch.float32,), SUMMED),
):
    register(OpCase(name, aten, call, generate, dtypes, **kw))

for reduce, dtypes in (("sum", ADD_DTYPES), ("mean", (torch.float32, torch.float16)),
                       ("amax", MINMAX_DTYPES), ("amin", MINMAX_DTYPES)):
    for include_self in (True, False):
        register(OpCase(
            f"scatter_reduce_{reduce}{'' if include_self else '_exclude_self'}", ("scatter_reduce.two",),
            lambda x, d, i, s, r=reduce, k=include_self: torch.scatter_reduce(x, d, i, s, r, include_self=k),
            _scatter_samples(False), dtypes, **SUMMED,
        ))


def _put_samples(unique: bool) -> Callable[[torch.dtype, torch.device | str, str], Iterator[Sample]]:
    """(self, index, values): ``self[index] = values`` with values broadcast over the rows."""

    def generate(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
        for n, shape in enumerate(samples.SHAPES[profile]):
            for i, (label, x) in enumerate(samples.layouts(shape, dtype, device, seed=100 * n)):
                count = 2 * min(shape[0] // 2, 2) if unique else 6
                index = _positions(shape[0], (count,), 0, unique, 10 * n + i).to(device)
                index = (index - shape[0] * (index % 2)).view(2, -1)  # odd rows counted from the end
                values = samples.make_tensor((shape[1], count), dtype, device, 7 * i).t().reshape(2, -1, shape[1])
                yield Sample(label, (x, index, values))
                row = samples.make_tensor((shape[1],), dtype, device, 7 * i + 1)
                yield Sample("broadcast", (x, index.view(-1), row))
        x = samples.make_tensor((4, 5), dtype, device, 3)
        empty = torch.empty(0, dtype=torch.int64, device=device)
        yield Sample("empty", (x, empty, samples.make_tensor((5,), dtype, device, 4)))

    return generate


register(OpCase("index_put_", ("index_put_",), lambda x, i, v: x.clone().index_put_((i,), v),
                _put_samples(True), samples.ALL_DTYPES, compare="exact"))
def _setitem(x: torch.Tensor, index: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    result = x.clone()
    result[index] = values
    return result


register(OpCase("index_put_setitem", ("_index_put_impl_",), _setitem,
                _put_samples(True), (torch.float32,), compare="exact"))
register(OpCase("index_put_accumulate", ("_index_put_impl_",),
                lambda x, i, v: x.clone().index_put_((i,), v, accumulate=True), _put_samples(False), ADD_DTYPES,
                reduction_length=_count))


def _later_dim_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    """(self, index, values) for ``self[:, index] = values``: a cache write by position."""
    for n, shape in enumerate(samples.SHAPES[profile]):
        for i, (label, x) in enumerate(samples.layouts(shape, dtype, device, seed=100 * n)):
            index = _positions(shape[1], (3,), 0, True, 10 * n + i).to(device) - shape[1] * (i % 2)
            yield Sample(label, (x, index, samples.make_tensor((3, shape[0]), dtype, device, 7 * i).t()))


def _set_columns(x: torch.Tensor, index: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    result = x.clone()
    result[:, index] = values
    return result


register(OpCase("index_put_later_dim", ("_index_put_impl_",), _set_columns, _later_dim_samples,
                (torch.float32, torch.bfloat16, torch.int64), compare="exact"))
