"""Cases for gems_core/ops/vector_norm.py: linalg_vector_norm of every ord, dtype= and out=.

ord 2 meets every reduction sample (layouts, inner and outer dims with keepdim, dim lists,
every dim, a split row, empty and 0-d inputs, NaN/Inf); the other orders (1, inf, -inf, 0,
3, 0.5, -1.5) meet a subset: a layout, a dim list, a split row, zeros and special values.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample
from .reduction import reduction_length, reduction_samples

FLOATS = samples.FLOAT_DTYPES
ORDS = (1, float("inf"), float("-inf"), 0, 3, 0.5, -1.5)
SUBSET = ("transposed", "non-innermost", "long", "special", "zeros")


def norm_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    base = list(reduction_samples(dtype, device, profile))
    zeros = samples.make_tensor((3, 40), dtype, device, 73)
    zeros[:, ::3] = 0
    base.append(Sample("zeros", (zeros,), {"dim": [1]}))
    yield from base
    for ord in ORDS:
        for sample in base:
            if sample.label in SUBSET:
                yield Sample(sample.label, sample.args, {**sample.kwargs, "ord": ord})


register(OpCase("vector_norm", ("linalg_vector_norm",), lambda x, **kw: torch.linalg.vector_norm(x, **kw),
                norm_samples, FLOATS, reduction_length=reduction_length))
register(OpCase("vector_norm_dtype", ("linalg_vector_norm",),
                lambda x, **kw: torch.linalg.vector_norm(x, **kw, dtype=torch.float32),
                lambda dt, dev, p: (s for s in norm_samples(dt, dev, p) if s.label in ("contiguous", "long")),
                (torch.float16, torch.bfloat16), reduction_length=reduction_length,
                reference=lambda x, **kw: torch.linalg.vector_norm(x.float(), **kw).double()))
register(OpCase("vector_norm_out", ("linalg_vector_norm.out",),
                lambda x, **kw: torch.linalg.vector_norm(x, **kw, out=torch.empty(0, dtype=x.dtype, device=x.device)),
                lambda dt, dev, p: (s for s in norm_samples(dt, dev, p) if s.label in ("strided", "empty", "0-d")),
                (torch.float32,), reduction_length=reduction_length))
