"""Cases for gems_core/ops/unique.py: ``torch.unique`` (``_unique2``), sorted, with inverse
indices and counts; ``unique_consecutive``, flat and along a dim. Inputs hold many repeats
(small integers in every dtype: values 0 .. 2 for runs of equal neighbours, and rows of
0 and 1 for runs of equal slices)."""

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


def consecutive_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    for n, shape in enumerate(samples.SHAPES[profile]):
        for label, x in samples.layouts(shape, torch.int64, device, seed=100 * n, low=0, high=3):
            yield Sample(label, (x.to(dtype), True, True))
        yield Sample("values only", (samples.make_tensor(shape, torch.int64, device, 7, low=0, high=2).to(dtype),
                                     False, False))
        yield Sample("counts only", (samples.make_tensor(shape, torch.int64, device, 8, low=0, high=2).to(dtype),
                                     False, True))
    yield Sample("empty", (torch.empty(0, 3, dtype=dtype, device=device), True, True))
    yield Sample("0-d", (samples.make_tensor((), dtype, device, 5), True, True))
    if dtype.is_floating_point:
        values = [0.0, -0.0, float("nan"), float("nan"), 1.5, 1.5, float("inf")]
        yield Sample("special", (torch.tensor(values, dtype=dtype, device=device), True, True))


def _runs_of_rows(dtype: torch.dtype, device: torch.device | str, seed: int, shape: tuple[int, ...],
                  dim: int) -> torch.Tensor:
    """Slices along ``dim`` drawn from two patterns, so that equal neighbours are common."""
    size = shape[dim]
    rest = shape[:dim] + shape[dim + 1:]
    patterns = samples.make_tensor((2, *rest), torch.int64, device, seed, low=0, high=3)
    choice = samples.make_tensor((size,), torch.int64, device, seed + 1, low=0, high=2)
    return patterns[choice].movedim(0, dim).to(dtype)


def consecutive_dim_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    for n, shape in enumerate(samples.SHAPES[profile]):
        for dim in (0, 1, -1):
            x = _runs_of_rows(dtype, device, 10 * n + dim, shape, dim % 2)
            yield Sample(f"dim {dim}", (x, False, False, dim))
            yield Sample("transposed", (x.t().contiguous().t(), True, False, dim))
    yield Sample("3-d", (_runs_of_rows(dtype, device, 50, (3, 9, 2), 1), True, True, 1))
    yield Sample("1-d", (_runs_of_rows(dtype, device, 51, (33,), 0), False, True, -1))
    if dtype.is_floating_point:
        rows = torch.tensor([[0.0, 1.0], [-0.0, 1.0], [float("nan"), 2.0], [float("nan"), 2.0]], dtype=dtype)
        yield Sample("special", (rows.to(device), True, True, 0))


register(OpCase("unique_consecutive", ("unique_consecutive",),
                lambda x, inverse, counts: torch.ops.aten.unique_consecutive(x, inverse, counts),
                consecutive_samples, DTYPES, compare="exact"))
register(OpCase("unique_consecutive_dim", ("unique_consecutive",),
                lambda x, inverse, counts, dim: torch.ops.aten.unique_consecutive(x, inverse, counts, dim),
                consecutive_dim_samples, DTYPES, compare="exact"))
