"""Cases for gems_core/ops/repeat_interleave.py: repeat_interleave with a tensor of repeats
(and its out=), directly and through ``torch.repeat_interleave(x, repeats, dim)``.

Repeats of 0 to 4 (zeros included: empty runs), strided, a long vector (1000 + 17 runs),
an output_size given, no repeats at all; compared exactly.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample


def _repeats(size: int, dtype: torch.dtype, device: Any, seed: int) -> torch.Tensor:
    return samples.make_tensor((size,), torch.int64, device, seed, low=0, high=5).to(dtype)


def _repeat_samples(dtype: torch.dtype, device: Any, profile: str) -> Iterator[Sample]:
    yield Sample("short", (_repeats(7, dtype, device, 1), None))
    yield Sample("strided", (_repeats(34, dtype, device, 2)[::2], None))
    yield Sample("long", (_repeats(1000 + 17, dtype, device, 3), None))
    given = _repeats(9, dtype, device, 4)
    yield Sample("output_size", (given, int(given.sum())))
    yield Sample("empty", (torch.empty(0, dtype=dtype, device=device), None))


def _rows_samples(dtype: torch.dtype, device: Any, profile: str) -> Iterator[Sample]:
    for n, shape in enumerate(samples.SHAPES[profile]):
        x = samples.make_tensor(shape, torch.float32, device, 100 * n)
        yield Sample("rows", (x, _repeats(shape[0], dtype, device, 100 * n + 1), 0))
        yield Sample("columns", (x, _repeats(shape[1], dtype, device, 100 * n + 2), 1))


def _out(repeats: torch.Tensor, output_size: int | None) -> torch.Tensor:
    out = torch.empty(int(repeats.sum()), dtype=repeats.dtype, device=repeats.device)
    return torch.ops.aten.repeat_interleave.Tensor_out(repeats, output_size=output_size, out=out)


_INDEX_DTYPES = (torch.int64, torch.int32)
register(OpCase("repeat_interleave_counts", ("repeat_interleave.Tensor",),
                lambda repeats, size: torch.repeat_interleave(repeats, output_size=size), _repeat_samples,
                _INDEX_DTYPES, compare="exact"))
register(OpCase("repeat_interleave_counts_out", ("repeat_interleave.Tensor_out",), _out, _repeat_samples,
                (torch.int64,), compare="exact"))
register(OpCase("repeat_interleave_rows", ("repeat_interleave.Tensor",),
                lambda x, repeats, dim: torch.repeat_interleave(x, repeats, dim), _rows_samples, _INDEX_DTYPES,
                compare="exact"))
