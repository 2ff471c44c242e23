"""Cases for gems_core/ops/unique.py: ``torch.unique`` (``_unique2``), sorted, with inverse
indices and counts. Inputs hold many repeats (small integers in every dtype)."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample

DTYPES = samples.ALL_DTYPES + (torch.float64,)


def unique_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    for n, shape in enumerate(samples.SHAPES[profile]):
        for label, x in samples.layouts(shape, torch.int64, device, seed=100 * n, low=0, high=9):
            yield Sample(label, (x.to(dtype),))
    yield Sample("empty", (torch.empty(0, 3, dtype=dtype, device=device),))
    yield Sample("0-d", (samples.make_tensor((), dtype, device, 5),))
    if dtype.is_floating_point:
        yield Sample("signed zero", (torch.tensor([0.0, -0.0, 1.5, -0.0, 1.5], dtype=dtype, device=device),))


register(OpCase("unique", ("_unique2",),
                lambda x: torch.unique(x, return_inverse=True, return_counts=True),
                unique_samples, DTYPES, compare="exact"))
register(OpCase("unique_values", ("_unique2",), lambda x: torch.unique(x),
                lambda dt, dev, p: (s for s in unique_samples(dt, dev, p) if s.label == "contiguous"),
                (torch.int64,), compare="exact"))
