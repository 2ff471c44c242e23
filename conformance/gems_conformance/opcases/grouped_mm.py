"""Cases for gems_core/ops/grouped_mm.py: ``torch._grouped_mm`` in its four layouts.

2d x 3d (ragged M: tokens by expert), 3d x 2d (ragged N), 2d x 2d (ragged K: a result per
group) and 3d x 3d (batched). Each operand is taken row-major and column-major (the
layouts ATen admits: a 16-byte aligned leading stride, so K and N are multiples of 8),
groups of unequal sizes, an empty group among them, and a 3-d operand expanded over the
groups. Group sizes are multiples of 8 (M = 2^k + 24 spans partial tiles): ATen's CUDA
bf16 kernel asserts on the device for others (gems' kernel takes any; tests/test_grouped_mm.py
checks them against ATen's CPU kernel). The offsets always end at the ragged dim's size: past
the last offset ATen leaves the result unwritten. ATen's ``_grouped_mm``
takes no float64, so the reference is a float64 loop of per-group ``torch.mm``; the
tolerance scales with K.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from ..cases import OpCase, register
from ..samples import Sample, make_tensor

DTYPES = (torch.float32, torch.float16, torch.bfloat16)

#: (G, M, K, N) per profile
SHAPES = {
    "quick": [(3, 16 + 24, 16, 24)],
    "full": [(4, 64 + 24, 64, 40), (8, 512 + 24, 256, 128)],
    "large": [(64, 8192 + 24, 1024, 512)],
}


def _operand(shape: tuple[int, ...], column_major: bool, dt: torch.dtype, dev: Any, seed: int) -> torch.Tensor:
    """Entries in [-1, 1]; column-major from a transposed buffer whose rows are padded to a
    multiple of 8 (the aligned leading stride ATen requires, for odd sizes too)."""
    if column_major:
        rows = shape[-2]
        padded = (*shape[:-2], shape[-1], -(-rows // 8) * 8)
        return make_tensor(padded, dt, dev, seed, low=-1, high=1)[..., :rows].transpose(-1, -2)
    return make_tensor(shape, dt, dev, seed, low=-1, high=1)


def _ends(sizes: list[int], dev: Any) -> torch.Tensor:
    return torch.tensor(sizes, dtype=torch.int64).cumsum(0).to(torch.int32).to(dev)


def _split(total: int, groups: int) -> list[int]:
    """Unequal group sizes, multiples of 8, summing to ``total`` (a multiple of 8); the
    second group empty (with 3 or more)."""
    weights = [g + 1 for g in range(groups)]
    if groups > 2:
        weights[1] = 0
    sizes = [8 * (total // 8 * w // sum(weights)) for w in weights]
    sizes[-1] += total - sum(sizes)
    return sizes


def _grouped_samples(dt: torch.dtype, dev: Any, p: str) -> Iterator[Sample]:
    for n, (g, m, k, nn) in enumerate(SHAPES[p]):
        for i, (a_cols, b_cols) in enumerate([(False, False), (False, True), (True, False)]):
            seed = 100 * n + 10 * i
            label = "contiguous" if not (a_cols or b_cols) else "transposed"
            yield Sample(f"2d x 3d {label}", (_operand((m, k), a_cols, dt, dev, seed),
                                              _operand((g, k, nn), b_cols, dt, dev, seed + 1),
                                              _ends(_split(m, g), dev)))
            yield Sample(f"3d x 2d {label}", (_operand((g, m, k), a_cols, dt, dev, seed + 2),
                                              _operand((k, g * 16), b_cols, dt, dev, seed + 3),
                                              _ends(_split(g * 16, g), dev)))
            yield Sample(f"2d x 2d {label}", (_operand((m, 8 * k), a_cols, dt, dev, seed + 4),
                                              _operand((8 * k, nn), b_cols, dt, dev, seed + 5),
                                              _ends(_split(8 * k, g), dev)))
            yield Sample(f"3d x 3d {label}", (_operand((g, m, k), a_cols, dt, dev, seed + 6),
                                              _operand((g, k, nn), b_cols, dt, dev, seed + 7), None))
        yield Sample("expanded", (_operand((1, m, k), False, dt, dev, 7).expand(g, m, k),
                                  _operand((g, k, nn), False, dt, dev, 8), None))
    yield Sample("empty", (_operand((0, 16), False, dt, dev, 1), _operand((2, 16, 8), False, dt, dev, 2),
                           _ends([0, 0], dev)))
    yield Sample("empty", (_operand((0, 5, 16), False, dt, dev, 3), _operand((0, 16, 8), False, dt, dev, 4), None))


def _reference(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None) -> torch.Tensor:
    """The per-group float64 products, group ``g`` spanning ``offs[g - 1]:offs[g]``."""
    if offs is None:
        return torch.bmm(a, b)
    ends = [int(e) for e in offs.tolist()]
    spans = list(zip([0, *ends[:-1]], ends))
    if a.dim() == 2 and b.dim() == 3:
        return torch.cat([a[s:e] @ b[g] for g, (s, e) in enumerate(spans)])
    if a.dim() == 3:
        return torch.cat([a[g] @ b[:, s:e] for g, (s, e) in enumerate(spans)], 1)
    return torch.stack([a[:, s:e] @ b[s:e] for s, e in spans])


register(OpCase("_grouped_mm", ("_grouped_mm",), lambda a, b, offs: torch._grouped_mm(a, b, offs),
                _grouped_samples, DTYPES, reference=_reference,
                reduction_length=lambda sample: max(sample.args[0].shape[-1], 1)))
