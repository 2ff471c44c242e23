"""Cases for gems_core/ops/roll.py: roll and roll.out.

Every layout rolled along one dim (a shift past the size, a negative one), along both dims
at once, along one dim named twice, and as one flat vector (no dims), plus empty and 0-d
inputs. Rolls move elements: compared exactly.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample

_ROLLS = (((3,), (1,)), ((-9,), (0,)), ((2, -1), (0, 1)), ((1, 2), (1, 1)), ((5,), ()))


def roll_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    for n, shape in enumerate(samples.SHAPES[profile]):
        for label, x in samples.layouts(shape, dtype, device, seed=100 * n):
            for shifts, dims in _ROLLS:
                yield Sample(f"{label} {'flat' if not dims else f'{len(dims)} dims'}", (x, shifts, dims))
    yield Sample("empty", (samples.make_tensor((0, 3), dtype, device, 1), (1,), (1,)))
    yield Sample("0-d", (samples.make_tensor((), dtype, device, 2), (3,), ()))


def _roll_out(x: torch.Tensor, shifts: tuple[int, ...], dims: tuple[int, ...]) -> torch.Tensor:
    return torch.ops.aten.roll.out(x, shifts, dims, out=torch.empty(x.shape, dtype=x.dtype, device=x.device))


register(OpCase("roll", ("roll",), torch.roll, roll_samples, samples.ALL_DTYPES, compare="exact"))
register(OpCase("roll_out", ("roll.out",), _roll_out, roll_samples, (torch.float32, torch.int64), compare="exact"))
