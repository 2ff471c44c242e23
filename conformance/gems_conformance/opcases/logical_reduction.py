"""Cases for gems_core/ops/logical_reduction.py: all and any.

The reduction samples (every layout, inner and outer dims with keepdim, dim lists, every
dim, a split row, empty and 0-d inputs, NaN/Inf) in bool, a float and integer dtypes,
uint8 (whose result stays uint8), with a sparse input so that both answers occur, an
explicit empty dim list (which reduces nothing) and out=.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from ..cases import OpCase, register
from ..samples import Sample
from .reduction import reduction_length, reduction_samples

DTYPES = (torch.bool, torch.float32, torch.bfloat16, torch.int32, torch.uint8)


def logical_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    yield from reduction_samples(dtype, device, profile)
    rows = torch.ones(4, 40, dtype=dtype, device=device)
    rows[1, 17] = 0  # one zero: all() false there
    rows[2] = 0
    rows[2, 39] = 1  # one non-zero: any() true there
    rows[3] = 0
    yield Sample("sparse", (rows,), {"dim": [1]})
    yield Sample("sparse", (rows.t(),), {"dim": [0], "keepdim": True})
    yield Sample("no dims", (rows,), {"dim": []})


def _out(x: torch.Tensor) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8 if x.dtype == torch.uint8 else torch.bool, device=x.device)


for _name, _fn in (("all", torch.all), ("any", torch.any)):
    register(OpCase(
        _name, (_name, f"{_name}.dims"), lambda x, _fn=_fn, **kw: _fn(x, **kw),
        logical_samples, DTYPES, reduction_length=reduction_length,
    ))
    register(OpCase(
        f"{_name}_dim", (f"{_name}.dim",),
        lambda x, _fn=_fn, **kw: _fn(x, kw["dim"][0], keepdim=kw.get("keepdim", False)),
        lambda dt, dev, p: (s for s in logical_samples(dt, dev, p) if len(s.kwargs.get("dim", ())) == 1),
        (torch.bool, torch.float16), reduction_length=reduction_length,
    ))
    register(OpCase(
        f"{_name}_out", (f"{_name}.dims_out", f"{_name}.all_out"),
        lambda x, _fn=_fn, **kw: _fn(x, **kw, out=_out(x)),
        logical_samples, (torch.bool, torch.float32), reduction_length=reduction_length,
    ))
