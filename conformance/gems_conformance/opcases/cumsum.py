"""Cases for gems_core/ops/cumsum.py: cumsum over one dim, dtype= and out=.

The reduction samples with one dim (every layout, inner and outer dims, a 3-d input over its
middle dim, a row longer than one tile so the carry matters, empty and 0-d inputs, NaN/Inf);
integer and bool inputs, which sum in int64.
"""

from __future__ import annotations

import torch

from .. import samples
from ..cases import OpCase, register
from .prod import single_dim_samples
from .reduction import reduction_length

DTYPES = samples.FLOAT_DTYPES + (torch.int32, torch.uint8, torch.bool)


def _samples(dt: torch.dtype, dev: torch.device | str, p: str):  # type: ignore[no-untyped-def]
    return single_dim_samples(dt, dev, p, all_dims=False)


def _out(x: torch.Tensor) -> torch.Tensor:
    return torch.empty(0, dtype=x.dtype if x.is_floating_point() else torch.int64, device=x.device)


register(OpCase("cumsum", ("cumsum",), lambda x, dim, keepdim=False: torch.cumsum(x, dim), _samples, DTYPES,
                reduction_length=reduction_length))
register(OpCase("cumsum_dtype", ("cumsum",), lambda x, dim, keepdim=False: torch.cumsum(x, dim, dtype=torch.float32),
                _samples, (torch.float16, torch.int32), reduction_length=reduction_length,
                reference=lambda x, dim, keepdim=False: torch.cumsum(x.float(), dim).double()))
register(OpCase("cumsum_out", ("cumsum.out",),
                lambda x, dim, keepdim=False: torch.cumsum(x, dim, out=_out(x)),
                _samples, (torch.float32, torch.int64), reduction_length=reduction_length))
