"""Cases for gems_core/ops/argreduce.py: argmax, max and min (every dim, and one dim with
its indices), with out=.

The reduction samples with one dim (integer inputs have many ties; ties must take the first
index, as in ATen), a row whose extremes repeat, rows long enough to be split, NaN (which
wins, its first index returned). Indices are compared exactly: the float64 reference sees
the same values, so the same ties. argmax also returns the values at its indices.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample
from .prod import single_dim_samples
from .reduction import reduction_length

ORDERED = samples.FLOAT_DTYPES + (torch.int32, torch.int64)


def arg_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    yield from single_dim_samples(dtype, device, profile, empty_rows=False)
    ties = samples.make_tensor((3, 70), dtype, device, 61, low=-2, high=3)
    ties = ties.round() if dtype.is_floating_point else ties
    ties[0, 5] = ties[0, 60] = 9 if dtype != torch.bool else True
    yield Sample("ties", (ties,), {"dim": 1})
    long_row = samples.make_tensor((2, 5000), dtype, device, 67)
    long_row[0, 4097] = 20
    long_row[1, 123] = long_row[1, 4000] = 20
    yield Sample("long", (long_row,), {"dim": 1})
    if dtype.is_floating_point:
        nans = samples.make_tensor((2, 3000), dtype, device, 71)
        nans[0, 2500] = nans[0, 2900] = float("nan")
        nans[1, 7] = float("nan")
        yield Sample("special", (nans,), {"dim": -1})


def _argmax(x: torch.Tensor, **kw: Any) -> tuple[torch.Tensor, torch.Tensor]:
    index = torch.argmax(x, **kw)
    if "dim" not in kw:
        return index, x.reshape(-1)[index.reshape(())]
    dim, keepdim = kw["dim"], kw.get("keepdim", False)
    along = index if keepdim or x.dim() == 0 else index.unsqueeze(dim)
    values = torch.take_along_dim(x, along, dim) if x.dim() else x
    return index, values if keepdim or x.dim() == 0 else values.squeeze(dim)


def _with_dim(samples_of: Any) -> Any:
    return lambda dt, dev, p: (s for s in samples_of(dt, dev, p) if "dim" in s.kwargs)


def _without_dim(samples_of: Any) -> Any:
    return lambda dt, dev, p: (s for s in samples_of(dt, dev, p) if "dim" not in s.kwargs and s.args[0].numel())


register(OpCase("argmax", ("argmax",), _argmax, arg_samples, ORDERED, reduction_length=reduction_length))
register(OpCase("argmax_out", ("argmax.out",),
                lambda x, **kw: torch.argmax(x, **kw, out=torch.empty(0, dtype=torch.int64, device=x.device)),
                arg_samples, (torch.float32,)))
for _name, _fn in (("max", torch.max), ("min", torch.min)):
    register(OpCase(f"{_name}_dim", (f"{_name}.dim",), lambda x, _fn=_fn, **kw: tuple(_fn(x, **kw)),
                    _with_dim(arg_samples), ORDERED + (torch.bool,)))
    register(OpCase(f"{_name}_all", (_name,), lambda x, _fn=_fn: _fn(x), _without_dim(arg_samples),
                    ORDERED + (torch.bool,)))
register(OpCase(
    "max_dim_out", ("max.dim_max",),
    lambda x, **kw: tuple(torch.max(x, **kw, out=(torch.empty(0, dtype=x.dtype, device=x.device),
                                                  torch.empty(0, dtype=torch.int64, device=x.device)))),
    _with_dim(arg_samples), (torch.float16,),
))
register(OpCase(
    "min_all_out", ("min.unary_out",),
    lambda x: torch.min(x, out=torch.empty(0, dtype=x.dtype, device=x.device)),
    _without_dim(arg_samples), (torch.float32,),
))
