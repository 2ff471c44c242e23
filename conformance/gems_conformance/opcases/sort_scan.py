"""Cases for gems_core/ops/argmin.py, scan_more.py and sort.py: argmin, amin, aminmax,
cumprod, cummax, cummin, sort and argsort, with their out= (and cumprod's in-place) forms.

argmin and aminmax take the argmax samples (ties, NaN, rows long enough to be split), cummax
and cummin the one-dim reduction samples and rows of ties and NaN carried over two tiles;
indices are compared exactly, as the float64 reference sees the same values, so the same
ties (first index for argmin, last for the running extremes, as in ATen). cumprod takes
prod's inputs near one, so long running products stay finite. sort is stable here, so its
indices are exact too: rows are short (one program sorts one row, slowly in the
interpreter) but for one row of ``MAX_ROW`` entries; NaN sorts last ascending and first
descending.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample
from .argreduce import ORDERED, arg_samples
from .prod import NUMERIC, prod_samples, single_dim_samples
from .reduction import reduction_length, reduction_samples

SORTED = samples.FLOAT_DTYPES + (torch.int32, torch.int16, torch.uint8, torch.bool)


def _with_dim(dt: torch.dtype, dev: torch.device | str, p: str) -> Iterator[Sample]:
    return (s for s in arg_samples(dt, dev, p) if "dim" in s.kwargs)


def _empty(x: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    return torch.empty(0, dtype=dtype or x.dtype, device=x.device)


def _argmin(x: torch.Tensor, out: bool = False, **kw: Any) -> Any:
    if out:
        return torch.argmin(x, **kw, out=_empty(x, torch.int64))
    return torch.argmin(x, **kw)


register(OpCase("argmin", ("argmin",), _argmin, arg_samples, ORDERED, reduction_length=reduction_length))
register(OpCase("argmin_out", ("argmin.out",), lambda x, **kw: _argmin(x, True, **kw), arg_samples,
                (torch.float32,)))
register(OpCase("amin", ("amin",), lambda x, **kw: torch.amin(x, **kw),
                lambda dt, dev, p: reduction_samples(dt, dev, p, empty_rows=False), ORDERED + (torch.bool,)))
register(OpCase("amin_out", ("amin.out",), lambda x, **kw: torch.amin(x, **kw, out=_empty(x)),
                lambda dt, dev, p: reduction_samples(dt, dev, p, empty_rows=False), (torch.float16,)))
register(OpCase("aminmax", ("aminmax",), lambda x, **kw: tuple(torch.aminmax(x, **kw)), arg_samples,
                ORDERED + (torch.bool,)))
register(OpCase("aminmax_out", ("aminmax.out",),
                lambda x, **kw: tuple(torch.aminmax(x, **kw, out=(_empty(x), _empty(x)))),
                _with_dim, (torch.float32,)))


def _cumprod_samples(dt: torch.dtype, dev: torch.device | str, p: str) -> Iterator[Sample]:
    return (s for s in prod_samples(dt, dev, p) if "dim" in s.kwargs)


def _cumprod(x: torch.Tensor, dim: int, keepdim: bool = False, form: str = "", dtype: Any = None) -> Any:
    if form == "out":
        return torch.cumprod(x, dim, out=_empty(x, x.dtype if x.is_floating_point() else torch.int64))
    if form == "inplace":
        return x.clone().cumprod_(dim)
    return torch.cumprod(x, dim, dtype=dtype)


register(OpCase("cumprod", ("cumprod",), _cumprod, _cumprod_samples, NUMERIC, reduction_length=reduction_length))
register(OpCase("cumprod_dtype", ("cumprod",), lambda x, **kw: _cumprod(x, **kw, dtype=torch.float32),
                _cumprod_samples, (torch.float16,), reduction_length=reduction_length,
                reference=lambda x, dim, keepdim=False: torch.cumprod(x.float(), dim).double()))
register(OpCase("cumprod_out", ("cumprod.out",), lambda x, **kw: _cumprod(x, **kw, form="out"), _cumprod_samples,
                (torch.float32, torch.int32), reduction_length=reduction_length))
register(OpCase("cumprod_inplace", ("cumprod_",), lambda x, **kw: _cumprod(x, **kw, form="inplace"),
                _cumprod_samples, (torch.bfloat16,), reduction_length=reduction_length))


def _running(fn: Callable[..., Any], out: bool = False) -> Callable[..., Any]:
    def call(x: torch.Tensor, dim: int, keepdim: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        if out:
            return tuple(fn(x, dim, out=(_empty(x), _empty(x, torch.int64))))
        return tuple(fn(x, dim))

    return call


def running_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    # a scan with indices runs element by element in the interpreter: rows of a few hundred
    for sample in single_dim_samples(dtype, device, profile, all_dims=False):
        if sample.label != "long" or profile != "quick":
            yield sample
    ties = samples.make_tensor((3, 300), dtype, device, 61, low=-2, high=3)
    ties = ties.round() if dtype.is_floating_point else ties
    if dtype.is_floating_point:
        ties[0, 7] = ties[0, 280] = ties[1, 299] = float("nan")
    yield Sample("ties", (ties,), {"dim": 1})  # two tiles: the running extreme is carried


for _name, _fn in (("cummax", torch.cummax), ("cummin", torch.cummin)):
    register(OpCase(_name, (_name,), _running(_fn), running_samples, ORDERED + (torch.uint8, torch.bool)))
    register(OpCase(f"{_name}_out", (f"{_name}.out",), _running(_fn, out=True), running_samples,
                    (torch.float32,)))


def sort_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    shape = samples.SHAPES["quick"][0]  # one program sorts each row, slowly in the interpreter
    for label, x in samples.layouts(shape, dtype, device):
        yield Sample(label, (x,), {"dim": 1})
    yield Sample("outer dim", (samples.make_tensor((9, 4), dtype, device, 1),), {"dim": 0, "descending": True})
    cube = samples.make_tensor((3, 33, 2), dtype, device, 2)
    yield Sample("non-innermost", (cube,), {"dim": 1})
    ties = samples.make_tensor((3, 40), dtype, device, 3, low=-2, high=3)
    yield Sample("ties", (ties.round() if dtype.is_floating_point else ties,), {"dim": -1, "descending": True})
    yield Sample("empty", (samples.make_tensor((0, 5), dtype, device, 4),), {"dim": 1})
    yield Sample("0-d", (samples.make_tensor((), dtype, device, 5),), {"dim": 0})
    yield Sample("long", (samples.make_tensor((1, 512), dtype, device, 6),), {"dim": -1})
    if dtype.is_floating_point:
        special = samples.special_values(dtype, device).view(2, 5)
        yield Sample("special", (special,), {"dim": 1})
        yield Sample("special", (special,), {"dim": 1, "descending": True})


def _sort(x: torch.Tensor, out: bool = False, **kw: Any) -> tuple[torch.Tensor, torch.Tensor]:
    if out:
        return tuple(torch.sort(x, stable=True, **kw, out=(_empty(x), _empty(x, torch.int64))))
    return tuple(torch.sort(x, stable=True, **kw))


register(OpCase("sort", ("sort.stable",), _sort, sort_samples, SORTED))
register(OpCase("sort_out", ("sort.values_stable",), lambda x, **kw: _sort(x, out=True, **kw), sort_samples,
                (torch.float32,)))
register(OpCase("argsort", ("sort.stable",), lambda x, **kw: torch.argsort(x, stable=True, **kw), sort_samples,
                (torch.float32, torch.int32)))


def distinct_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    """The sort samples without repeated values: an unstable sort may order equal values
    either way, so only distinct values give ATen's indices."""
    for sample in sort_samples(dtype, device, profile):
        if sample.label not in ("ties", "special"):
            yield sample


register(OpCase("sort_unstable", ("sort",), lambda x, **kw: tuple(torch.sort(x, **kw)), distinct_samples,
                (torch.float32,)))
register(OpCase("sort_unstable_out", ("sort.values",),
                lambda x, **kw: tuple(torch.sort(x, **kw, out=(_empty(x), _empty(x, torch.int64)))),
                distinct_samples, (torch.float32,)))
