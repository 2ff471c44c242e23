"""Cases for gems_core/ops/blas.py: bmm, baddbmm, mv, outer, resolve_conj/resolve_neg.

bmm shapes (B, M, K, N) mix sizes below one tile with 2^k + 17 sizes that span several
tiles; each batch operand is taken contiguous, transposed (last two dims), with a strided
batch (every other matrix), batch-inner (the batch stride smaller than a row's, as after a
permute) and expanded (batch stride 0). Empty batch, M and K (zeros) are checked, and a
broadcast 4-D matmul that must reach bmm. mv walks the same sizes with row- and
column-major matrices and strided or expanded vectors. Tolerances scale with K, the length
of each dot product. outer reaches the backend as mul.Tensor: its case names that
overload, so the suite proves a gems kernel ran.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample, make_tensor

DTYPES = samples.FLOAT_DTYPES + (torch.float64,)

#: (B, M, K, N) per profile
SHAPES = {
    "quick": [(2, 5, 7, 3), (3, 145, 33, 81)],
    "full": [(4, 64, 128, 96), (5, 1024 + 17, 257, 512 + 17), (2, 33, 4096 + 17, 65)],
    "large": [(8, 2048 + 17, 2048 + 17, 2048 + 17)],
}

#: (M, K) per profile, for mv
MV_SHAPES = {
    "quick": [(5, 7), (145, 256 + 17)],
    "full": [(1024 + 17, 257), (33, 4096 + 17), (8192 + 17, 1024 + 17)],
    "large": [(2**16 + 17, 2**14 + 17)],
}


def _uniform(shape: tuple[int, ...], dt: torch.dtype, dev: Any, seed: int) -> torch.Tensor:
    # entries in [-1, 1] keep results O(1), the scale the tolerance table's atol assumes
    return make_tensor(shape, dt, dev, seed, low=-1, high=1)


def _batch_operand(
    label: str, shape: tuple[int, int, int], dt: torch.dtype, dev: Any, seed: int
) -> torch.Tensor:
    b, rows, cols = shape
    if label == "transposed":
        return _uniform((b, cols, rows), dt, dev, seed).transpose(1, 2)
    if label == "strided batch":
        return _uniform((2 * b, rows, cols), dt, dev, seed)[::2]
    if label == "batch inner":
        return _uniform((rows, b, cols), dt, dev, seed).permute(1, 0, 2)
    if label == "expanded batch":
        return _uniform((1, rows, cols), dt, dev, seed).expand(b, rows, cols)
    return _uniform(shape, dt, dev, seed)


def _batch_pairs(dt: torch.dtype, dev: Any, p: str) -> Iterator[Sample]:
    """(batch1, batch2) samples."""
    layouts = [
        ("contiguous", "contiguous"),
        ("transposed", "transposed"),
        ("transposed", "contiguous"),
        ("contiguous", "transposed"),
        ("strided batch", "batch inner"),
        ("expanded batch", "strided batch"),
    ]
    for n, (b, m, k, nn) in enumerate(SHAPES[p]):
        for i, (first, second) in enumerate(layouts):
            x = _batch_operand(first, (b, m, k), dt, dev, 100 * n + i)
            y = _batch_operand(second, (b, k, nn), dt, dev, 100 * n + 50 + i)
            yield Sample(first if first != "contiguous" else second, (x, y))
    for j, (b, m, k, nn) in enumerate([(0, 4, 3, 5), (2, 0, 3, 5), (2, 4, 0, 5)]):
        yield Sample(
            "empty", (_uniform((b, m, k), dt, dev, j), _uniform((b, k, nn), dt, dev, 9 + j))
        )
    x = _uniform((2, 6, 9), dt, dev, 5)
    x[0, 0, 0], x[1, 1, 1], x[1, 2, 2] = float("nan"), float("inf"), float("-inf")
    yield Sample("special", (x, _uniform((2, 9, 4), dt, dev, 6)))


def _batch_triples(dt: torch.dtype, dev: Any, p: str) -> Iterator[Sample]:
    """(input, batch1, batch2) samples; input of the full shape unless broadcast."""
    for n, sample in enumerate(_batch_pairs(dt, dev, p)):
        x, y = sample.args
        shape = (x.shape[0], x.shape[1], y.shape[2])
        yield Sample(sample.label, (_uniform(shape, dt, dev, 700 + n), x, y))
        if sample.label == "contiguous":
            for j, bias_shape in enumerate([(shape[2],), (shape[1], 1), (shape[0], 1, shape[2])]):
                yield Sample("broadcast", (_uniform(bias_shape, dt, dev, 800 + j), x, y))


def _matmul_pairs(dt: torch.dtype, dev: Any, p: str) -> Iterator[Sample]:
    """4-D by 3-D: matmul broadcasts the batch dims and multiplies through bmm."""
    for n, (b, m, k, nn) in enumerate(SHAPES[p][:2]):
        yield Sample(
            "broadcast",
            (_uniform((2, b, m, k), dt, dev, 10 * n), _uniform((b, k, nn), dt, dev, 10 * n + 1)),
        )


def _matrix(
    label: str, shape: tuple[int, int], dt: torch.dtype, dev: Any, seed: int
) -> torch.Tensor:
    rows, cols = shape
    if label == "transposed":
        return _uniform((cols, rows), dt, dev, seed).t()
    if label == "strided":
        return _uniform((rows, 2 * cols), dt, dev, seed)[:, ::2]
    return _uniform(shape, dt, dev, seed)


def _vector(label: str, size: int, dt: torch.dtype, dev: Any, seed: int) -> torch.Tensor:
    if label == "strided":
        return _uniform((2 * size,), dt, dev, seed)[::2]
    if label == "expanded":
        return _uniform((1,), dt, dev, seed).expand(size)
    return _uniform((size,), dt, dev, seed)


def _matrix_vector(dt: torch.dtype, dev: Any, p: str) -> Iterator[Sample]:
    """(matrix, vector) samples."""
    layouts = [
        ("contiguous", "contiguous"),
        ("transposed", "contiguous"),
        ("strided", "strided"),
        ("transposed", "expanded"),
    ]
    for n, (m, k) in enumerate(MV_SHAPES[p]):
        for i, (first, second) in enumerate(layouts):
            a = _matrix(first, (m, k), dt, dev, 100 * n + i)
            x = _vector(second, k, dt, dev, 100 * n + 50 + i)
            yield Sample(first if first != "contiguous" else second, (a, x))
    yield Sample("empty", (_uniform((0, 6), dt, dev, 1), _uniform((6,), dt, dev, 2)))
    yield Sample("empty", (_uniform((4, 0), dt, dev, 3), _uniform((0,), dt, dev, 4)))
    a = _uniform((6, 9), dt, dev, 5)
    a[0, 0], a[1, 1], a[2, 2] = float("nan"), float("inf"), float("-inf")
    yield Sample("special", (a, _uniform((9,), dt, dev, 6)))


def _vector_pairs(dt: torch.dtype, dev: Any, p: str) -> Iterator[Sample]:
    """(vec1, vec2) samples for outer."""
    for n, (m, k) in enumerate(MV_SHAPES[p]):
        yield Sample(
            "contiguous",
            (_vector("contiguous", m, dt, dev, n), _vector("contiguous", k, dt, dev, 9 + n)),
        )
        yield Sample(
            "strided", (_vector("strided", m, dt, dev, n), _vector("expanded", k, dt, dev, 9 + n))
        )
    yield Sample("empty", (_uniform((0,), dt, dev, 1), _uniform((5,), dt, dev, 2)))
    base = samples.special_values(dt, dev)
    yield Sample("special", (base, base.roll(1)))


def _k(index: int, dim: int) -> Any:
    return lambda s: s.args[index].shape[dim]


def _bmm_out(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # a batch-inner out: the result is written through its strides
    shape = (a.shape[0], a.shape[1], b.shape[2])
    out = torch.empty((shape[1], shape[0], shape[2]), dtype=a.dtype, device=a.device)
    return torch.bmm(a, b, out=out.permute(1, 0, 2))


def _baddbmm_in_place(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    c = c.expand(a.shape[0], a.shape[1], b.shape[2]).clone()
    return torch.baddbmm(c, a, b, beta=0.5, alpha=2.0, out=c)


def _mv_out(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    out = torch.empty(2 * a.shape[0], dtype=a.dtype, device=a.device)[::2]
    return torch.mv(a, x, out=out)


register(
    OpCase(
        "bmm",
        ("bmm",),
        lambda a, b: torch.bmm(a, b),
        _batch_pairs,
        DTYPES,
        reduction_length=_k(0, 2),
    )
)
register(OpCase("bmm_out", ("bmm.out",), _bmm_out, _batch_pairs, DTYPES, reduction_length=_k(0, 2)))
register(
    OpCase(
        "bmm_matmul",
        ("bmm",),
        lambda a, b: torch.matmul(a, b),
        _matmul_pairs,
        DTYPES,
        reduction_length=_k(0, 3),
    )
)
register(
    OpCase(
        "baddbmm",
        ("baddbmm",),
        lambda c, a, b: torch.baddbmm(c, a, b, beta=-1.5, alpha=0.25),
        _batch_triples,
        DTYPES,
        reduction_length=_k(1, 2),
    )
)
register(
    OpCase(
        "baddbmm_out",
        ("baddbmm.out",),
        _baddbmm_in_place,
        _batch_triples,
        DTYPES,
        reduction_length=_k(1, 2),
    )
)
register(
    OpCase(
        "mv",
        ("mv",),
        lambda a, x: torch.mv(a, x),
        _matrix_vector,
        DTYPES,
        reduction_length=_k(0, 1),
    )
)
register(OpCase("mv_out", ("mv.out",), _mv_out, _matrix_vector, DTYPES, reduction_length=_k(0, 1)))
register(
    OpCase(
        "mv_matmul",
        ("mv",),
        lambda a, x: torch.matmul(a, x),
        _matrix_vector,
        DTYPES,
        reduction_length=_k(0, 1),
    )
)
register(OpCase("outer", ("mul.Tensor",), lambda a, b: torch.outer(a, b), _vector_pairs, DTYPES))
register(
    OpCase(
        "resolve_conj",
        ("resolve_conj",),
        lambda x: torch.resolve_conj(x),
        lambda dt, dev, p: samples.elementwise(1, dt, dev, p),
        samples.ALL_DTYPES,
        compare="exact",
    )
)
register(
    OpCase(
        "resolve_neg",
        ("resolve_neg",),
        lambda x: torch.resolve_neg(x),
        lambda dt, dev, p: samples.elementwise(1, dt, dev, p),
        samples.ALL_DTYPES,
        compare="exact",
    )
)
