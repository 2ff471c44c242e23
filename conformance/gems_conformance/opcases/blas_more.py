"""Cases for gems_core/ops/blas_more.py: dot, vdot, addmv and addr, with their out= forms.

The matrix-vector and vector-pair samples of the mv and outer cases (contiguous,
transposed, strided and expanded operands, empty sizes, NaN and infinities); dot pairs a
vector with itself reversed; addmv and addr add a broadcast ``self`` with beta and alpha.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from ..cases import OpCase, register
from ..samples import Sample
from .blas import DTYPES, _k, _matrix_vector, _uniform, _vector_pairs


def _dot_samples(dt: torch.dtype, dev: Any, p: str) -> Iterator[Sample]:
    for sample in _matrix_vector(dt, dev, p):
        matrix, vector = sample.args
        if matrix.shape[0]:
            yield Sample(sample.label, (matrix[0], vector.flip(0)))
        else:
            yield Sample(sample.label, (vector[:0], vector[:0]))


def _addmv_samples(dt: torch.dtype, dev: Any, p: str) -> Iterator[Sample]:
    for n, sample in enumerate(_matrix_vector(dt, dev, p)):
        rows = sample.args[0].shape[0]
        bias = _uniform((rows,), dt, dev, 70 + n) if n % 2 else _uniform((1,), dt, dev, 70 + n)
        yield Sample(sample.label, (bias, *sample.args))


def _addr_samples(dt: torch.dtype, dev: Any, p: str) -> Iterator[Sample]:
    for n, sample in enumerate(_vector_pairs(dt, dev, p)):
        first, second = sample.args
        shape = (first.shape[0], second.shape[0]) if n % 2 else (second.shape[0],)
        yield Sample(sample.label, (_uniform(shape, dt, dev, 80 + n), first, second))


def _into(fn: Any, shape_of: Any) -> Any:
    def call(*args: torch.Tensor) -> torch.Tensor:
        return fn(*args, out=torch.empty(shape_of(*args), dtype=args[0].dtype, device=args[0].device))

    return call


register(OpCase("dot", ("dot",), torch.dot, _dot_samples, DTYPES, reduction_length=_k(0, 0)))
register(OpCase("vdot", ("vdot",), torch.vdot, _dot_samples, DTYPES, reduction_length=_k(0, 0)))
register(OpCase("dot_out", ("dot.out", "vdot.out"), _into(torch.dot, lambda a, b: ()), _dot_samples,
                (torch.float32,), reduction_length=_k(0, 0)))
register(OpCase("addmv", ("addmv",), lambda c, a, x: torch.addmv(c, a, x, beta=-1.5, alpha=0.25), _addmv_samples,
                DTYPES, reduction_length=_k(1, 1)))
register(OpCase("addmv_out", ("addmv.out",), _into(torch.addmv, lambda c, a, x: (a.shape[0],)), _addmv_samples,
                (torch.float32,), reduction_length=_k(1, 1)))
register(OpCase("addr", ("addr",), lambda c, a, b: torch.addr(c, a, b, beta=0.5, alpha=-2), _addr_samples, DTYPES))
register(OpCase("addr_out", ("addr.out",), _into(torch.addr, lambda c, a, b: (a.shape[0], b.shape[0])),
                _addr_samples, (torch.float32,)))
