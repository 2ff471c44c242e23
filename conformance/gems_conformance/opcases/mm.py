"""Cases for gems_core/ops/mm.py.

Shapes (M, K, N) mix sizes below one tile with 2^k + 17 sizes that span several tiles and
several program groups; each operand is taken contiguous, transposed, sliced with a step
and expanded (stride 0). Shapes whose 16-bit rows and columns are 16-byte multiples (M > 64;
M, K and N multiples of 8), with row- and column-major operands, reach the TMA variant of
NVIDIA Hopper and later (compile-only execution and GEMS_MM_TMA=force take it at any size,
the chip by default only past its size bound: the full profile's shape). K == 0 must give
zeros (addmm: beta * input), M == 0 an empty result. Tolerances scale with K, the length of
each dot product.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample, make_tensor

DTYPES = samples.FLOAT_DTYPES + (torch.float64,)

#: (M, K, N) per profile
SHAPES = {
    "quick": [(5, 7, 3), (145, 33, 81)],
    "full": [(64, 128, 96), (1024 + 17, 257, 512 + 17), (33, 4096 + 17, 65)],
    "large": [(4096 + 17, 4096 + 17, 4096 + 17)],
}
#: (M, K, N) per profile whose 16-bit rows and columns are 16-byte multiples, for 16-bit
#: dtypes with the row- and column-major layouts only (the full profile's is past
#: gemm_tma.MIN_WORK)
TMA_SHAPES = {
    "quick": [(80, 24, 40)],
    "full": [(1024 + 72, 2048 + 8, 2048 + 24)],
    "large": [],
}


def _operand(
    label: str, shape: tuple[int, int], dt: torch.dtype, dev: Any, seed: int
) -> torch.Tensor:
    # entries in [-1, 1] keep results O(1), the scale the tolerance table's atol assumes;
    # wider entries make near-zero results (cancellation) fail on rounding alone
    rows, cols = shape
    if label == "transposed":
        return make_tensor((cols, rows), dt, dev, seed, low=-1, high=1).t()
    if label == "strided":
        return make_tensor((rows, 2 * cols), dt, dev, seed, low=-1, high=1)[:, ::2]
    if label == "expanded":
        return make_tensor((1, cols), dt, dev, seed, low=-1, high=1).expand(rows, cols)
    return make_tensor(shape, dt, dev, seed, low=-1, high=1)


def _pairs(dt: torch.dtype, dev: Any, p: str) -> Iterator[Sample]:
    """(mat1, mat2) samples."""
    # (mat1's layout, mat2's layout): every pairing of row- and column-major operands meets
    layouts = [
        ("contiguous", "contiguous"),
        ("transposed", "transposed"),
        ("transposed", "contiguous"),
        ("contiguous", "transposed"),
        ("strided", "transposed"),
        ("expanded", "strided"),
    ]
    shapes = [(shape, layouts) for shape in SHAPES[p]]
    if dt.itemsize == 2:  # the TMA variant serves fp16 and bf16 only
        shapes += [(shape, layouts[:4]) for shape in TMA_SHAPES[p]]
    for n, ((m, k, nn), pairings) in enumerate(shapes):
        for i, (first, second) in enumerate(pairings):
            a = _operand(first, (m, k), dt, dev, 100 * n + i)
            b = _operand(second, (k, nn), dt, dev, 100 * n + 50 + i)
            yield Sample(first if first != "contiguous" else second, (a, b))
    yield Sample(
        "empty",
        (_operand("contiguous", (4, 0), dt, dev, 1), _operand("contiguous", (0, 5), dt, dev, 2)),
    )
    yield Sample(
        "empty",
        (_operand("contiguous", (0, 6), dt, dev, 3), _operand("contiguous", (6, 5), dt, dev, 4)),
    )
    a = _operand("contiguous", (6, 9), dt, dev, 5)
    a[0, 0], a[1, 1], a[2, 2] = float("nan"), float("inf"), float("-inf")
    yield Sample("special", (a, _operand("contiguous", (9, 4), dt, dev, 6)))


def _triples(dt: torch.dtype, dev: Any, p: str) -> Iterator[Sample]:
    """(input, mat1, mat2) samples; input of the full shape unless broadcast."""
    for n, sample in enumerate(_pairs(dt, dev, p)):
        a, b = sample.args
        shape = (a.shape[0], b.shape[1])
        yield Sample(sample.label, (make_tensor(shape, dt, dev, 700 + n), a, b))
        if sample.label == "contiguous":
            for j, bias_shape in enumerate([(shape[1],), (shape[0], 1), (1, shape[1])]):
                yield Sample("broadcast", (make_tensor(bias_shape, dt, dev, 800 + j), a, b))
            yield Sample("0-d", (make_tensor((), dt, dev, 900 + n), a, b))


def _k(index: int) -> Any:
    return lambda s: s.args[index].shape[1]


def _mm_out(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # a transposed out: the result is written through its strides
    out = torch.empty((b.shape[1], a.shape[0]), dtype=a.dtype, device=a.device).t()
    return torch.mm(a, b, out=out)


def _addmm_in_place(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    c = c.expand(a.shape[0], b.shape[1]).clone()
    return torch.addmm(c, a, b, beta=0.5, alpha=2.0, out=c)


def _nan_input(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # beta == 0: the input is ignored, NaN in it included
    return torch.addmm(torch.full_like(c, float("nan")), a, b, beta=0)


register(OpCase("mm", ("mm",), lambda a, b: torch.mm(a, b), _pairs, DTYPES, reduction_length=_k(0)))
register(OpCase("mm_out", ("mm.out",), _mm_out, _pairs, DTYPES, reduction_length=_k(0)))
register(
    OpCase(
        "addmm",
        ("addmm",),
        lambda c, a, b: torch.addmm(c, a, b),
        _triples,
        DTYPES,
        reduction_length=_k(1),
    )
)
register(
    OpCase(
        "addmm_scaled",
        ("addmm",),
        lambda c, a, b: torch.addmm(c, a, b, beta=-1.5, alpha=0.25),
        _triples,
        DTYPES,
        reduction_length=_k(1),
    )
)
register(OpCase("addmm_beta0", ("addmm",), _nan_input, _triples, DTYPES, reduction_length=_k(1)))
register(
    OpCase("addmm_out", ("addmm.out",), _addmm_in_place, _triples, DTYPES, reduction_length=_k(1))
)
