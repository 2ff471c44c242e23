"""Cases for gems_core/ops/prod.py: prod over every dim and over one dim, dtype= and out=.

Floating inputs lie in [0.5, 1.5], so that products of long rows stay finite and are
compared as numbers; integer inputs take the reduction samples as they are (their products
wrap in int64 the same way in gems and ATen).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample
from .reduction import reduction_length, reduction_samples

NUMERIC = samples.FLOAT_DTYPES + (torch.int32, torch.int64, torch.uint8, torch.bool)


def _near_one(x: torch.Tensor) -> torch.Tensor:
    """[-3, 3] to [0.5, 1.5] in place on the tensor's storage, keeping its layout."""
    if x.is_floating_point() and x.numel() and x.stride() and 0 not in x.stride():
        return x.mul_(1 / 6).add_(1)
    return x / 6 + 1 if x.is_floating_point() else x


def _out(x: torch.Tensor) -> torch.Tensor:
    return torch.empty(0, dtype=x.dtype if x.is_floating_point() else torch.int64, device=x.device)


def single_dim_samples(
    dtype: torch.dtype, device: torch.device | str, profile: str, *, all_dims: bool = True, empty_rows: bool = True,
) -> Iterator[Sample]:
    """The reduction samples with ``dim`` as one int (dim lists left out); ``all_dims``:
    keep the samples with no ``dim``."""
    for sample in reduction_samples(dtype, device, profile, empty_rows=empty_rows):
        dim = sample.kwargs.get("dim")
        if dim is None:
            if all_dims:
                yield sample
        elif len(dim) == 1:
            yield Sample(sample.label, sample.args, {**sample.kwargs, "dim": dim[0]})


def prod_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    for sample in single_dim_samples(dtype, device, profile):
        if sample.label == "special":
            yield sample
        else:
            yield Sample(sample.label, (_near_one(sample.args[0]),), sample.kwargs)


register(OpCase("prod", ("prod", "prod.dim_int"), lambda x, **kw: torch.prod(x, **kw), prod_samples, NUMERIC,
                reduction_length=reduction_length))
register(OpCase("prod_dtype", ("prod.dim_int",),
                lambda x, **kw: torch.prod(x, kw.get("dim", 0), dtype=torch.float32),
                lambda dt, dev, p: (s for s in prod_samples(dt, dev, p) if "dim" in s.kwargs),
                (torch.float16,), reduction_length=reduction_length,
                reference=lambda x, **kw: torch.prod(x.float(), kw.get("dim", 0)).double()))
register(OpCase("prod_out", ("prod.int_out",),
                lambda x, **kw: torch.prod(x, kw["dim"], kw.get("keepdim", False),
                                           out=_out(x)),
                lambda dt, dev, p: (s for s in prod_samples(dt, dev, p) if "dim" in s.kwargs),
                (torch.float32, torch.int32), reduction_length=reduction_length))
