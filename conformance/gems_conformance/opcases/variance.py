"""Cases for gems_core/ops/variance.py: var_mean, var and std.

The reduction samples (every layout, inner and outer dims with keepdim, dim lists, every
dim, a split row, empty and 0-d inputs, NaN/Inf) with the default correction, and a share
of them with correction 0, a fractional one and one past the row length (inf/NaN results).
Inputs are offset from zero so that the mean matters.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample
from .reduction import reduction_length, reduction_samples

FLOATS = samples.FLOAT_DTYPES


def variance_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    for i, sample in enumerate(reduction_samples(dtype, device, profile)):
        x = sample.args[0]
        if sample.label != "special":  # in place where it can, to keep the layout
            x = x.add_(4) if x.numel() and 0 not in x.stride() else x + 4
        kwargs = dict(sample.kwargs)
        if i % 3 == 1 and sample.label != "expanded":  # a constant row past its length: 0/0 or tiny/0
            kwargs["correction"] = (0, 0.5, 40)[i % 9 // 3]
        yield Sample(sample.label, (x,), kwargs)


register(OpCase("var_mean", ("var_mean.correction",), lambda x, **kw: torch.var_mean(x, **kw),
                variance_samples, FLOATS, reduction_length=reduction_length))
register(OpCase("var", ("var.correction",), lambda x, **kw: torch.var(x, **kw),
                lambda dt, dev, p: (s for s in variance_samples(dt, dev, p) if s.label in ("contiguous", "long")),
                (torch.float32,), reduction_length=reduction_length))
register(OpCase("std", ("std.correction",), lambda x, **kw: torch.std(x, **kw),
                lambda dt, dev, p: (s for s in variance_samples(dt, dev, p) if s.label in ("transposed", "long")),
                (torch.float32, torch.bfloat16), reduction_length=reduction_length))
