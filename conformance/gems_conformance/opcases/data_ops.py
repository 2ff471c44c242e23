"""Cases for gems_core/ops/data_ops.py: bincount (counts and weighted sums) and isin (tensor
and scalar forms, inverted, out=).

bincount: values 0 .. 8 in every integer dtype, contiguous, strided and expanded (stride 0),
a long input (1000 + 17 values), a ``minlength`` past and short of the largest value, and
an empty input; counts compare exactly. Weighted sums take weights of every floating dtype
(the dtype of the case: float32 sums stay float32, the others become float64, as ATen's),
strided weights among them, with the tolerance of the result scaled by the input's length.

isin: elements of small integer values (so that many are found) in every layout of the
shared shapes, against test sets short enough to be compared one by one and long enough to
be sorted and searched (past ``BRUTE_FORCE_MAX``), of the same dtype and of a mixed one
(promoted as ATen promotes); NaN, infinities and signed zeros; 0-d and empty operands.
Results compare exactly. Test elements never have a narrower dtype than the comparison's, so
the float64 reference compares the same values.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample

_INTEGRAL = samples.INT_DTYPES
_WEIGHTS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def _values(size: int, dtype: torch.dtype, device: Any, seed: int, high: int = 9) -> torch.Tensor:
    return samples.make_tensor((size,), torch.int64, device, seed, low=0, high=high).to(dtype)


def _bincount_samples(dtype: torch.dtype, device: Any, profile: str) -> Iterator[Sample]:
    yield Sample("contiguous", (_values(33, dtype, device, 1), None, 0))
    yield Sample("strided", (_values(66, dtype, device, 2)[::2], None, 0))
    yield Sample("expanded", (_values(1, dtype, device, 3).expand(17), None, 0))
    yield Sample("long", (_values(1000 + 17, dtype, device, 4, high=100), None, 0))
    yield Sample("minlength", (_values(20, dtype, device, 5), None, 15))
    yield Sample("minlength", (_values(20, dtype, device, 6), None, 3))
    yield Sample("empty", (torch.empty(0, dtype=dtype, device=device), None, 4))


def _weighted_samples(dtype: torch.dtype, device: Any, profile: str) -> Iterator[Sample]:
    def weights(size: int, seed: int) -> torch.Tensor:
        return samples.make_tensor((size,), dtype, device, seed, low=-1, high=1)

    yield Sample("contiguous", (_values(33, torch.int64, device, 1), weights(33, 11), 0))
    yield Sample("strided", (_values(66, torch.int32, device, 2)[::2], weights(66, 12)[::2], 0))
    yield Sample("long", (_values(1000 + 17, torch.int64, device, 4, high=100), weights(1000 + 17, 14), 0))
    yield Sample("minlength", (_values(20, torch.uint8, device, 5), weights(20, 15), 12))
    yield Sample("empty", (torch.empty(0, dtype=torch.int64, device=device), weights(0, 16), 4))


register(OpCase("bincount", ("bincount",), lambda x, w, n: torch.bincount(x, w, n), _bincount_samples,
                _INTEGRAL, compare="exact"))
register(OpCase("bincount_weights", ("bincount",), lambda x, w, n: torch.bincount(x, w, n), _weighted_samples,
                _WEIGHTS, reduction_length=lambda sample: max(sample.args[0].numel(), 1)))


def _small(shape: tuple[int, ...], dtype: torch.dtype, device: Any, seed: int) -> torch.Tensor:
    return samples.make_tensor(shape, torch.int64, device, seed, low=-20, high=20).to(dtype)


def _wider(dtype: torch.dtype) -> torch.dtype:
    """A dtype every value of ``dtype`` converts into exactly, unlike ``dtype``."""
    if dtype.is_floating_point:
        return torch.float64
    return torch.int64 if dtype != torch.int64 else torch.float64


def _isin_samples(dtype: torch.dtype, device: Any, profile: str) -> Iterator[Sample]:
    few = _small((9,), dtype, device, 1)
    many = _small((100 + 17,), dtype, device, 2)
    for n, shape in enumerate(samples.SHAPES[profile]):
        for label, x in samples.layouts(shape, torch.int64, device, seed=100 * n, low=-20, high=20):
            x = x.to(dtype)
            yield Sample(label, (x, few), {"invert": n == 1})
            yield Sample(label, (x, many))
    x = _small((5, 7), dtype, device, 3)
    yield Sample("mixed dtypes", (x, few.to(_wider(dtype))))
    yield Sample("mixed dtypes", (x, many.to(_wider(dtype))))
    yield Sample("strided test", (x, many[::3]))
    yield Sample("0-d", (_small((), dtype, device, 4), few))
    yield Sample("0-d test", (x, _small((), dtype, device, 5)))
    yield Sample("empty", (_small((0, 3), dtype, device, 6), few))
    yield Sample("empty test", (x, few[:0]), {"invert": True})
    if dtype.is_floating_point:
        special = samples.special_values(dtype, device)
        yield Sample("special", (special, special[::2]))
        yield Sample("special", (special, torch.cat([many, special[1:3]])))


def _isin_out(elements: torch.Tensor, test: torch.Tensor, invert: bool = False) -> torch.Tensor:
    out = torch.empty(elements.shape, dtype=torch.bool, device=elements.device)
    return torch.isin(elements, test, invert=invert, out=out)


def _scalar_samples(dtype: torch.dtype, device: Any, profile: str) -> Iterator[Sample]:
    x = _small((5, 7), dtype, device, 7)
    yield Sample("contiguous", (x, 3))
    yield Sample("transposed", (x.t(), -2), {"invert": True})
    yield Sample("float scalar", (x, 4.0))
    yield Sample("0-d", (_small((), dtype, device, 8), 0))
    yield Sample("empty", (_small((0, 3), dtype, device, 9), 1))


def _scalar_tensor_samples(dtype: torch.dtype, device: Any, profile: str) -> Iterator[Sample]:
    for value in (3, -2, 7.0, 0.5):
        yield Sample("contiguous", (value, _small((40,), dtype, device, 10)))
    yield Sample("sorted", (5, _small((100 + 17,), dtype, device, 11)), {"invert": True})
    yield Sample("empty", (1, _small((0,), dtype, device, 12)))


_ISIN_DTYPES = samples.FLOAT_DTYPES + (torch.float64,) + samples.INT_DTYPES
register(OpCase("isin", ("isin.Tensor_Tensor",), lambda e, t, **kw: torch.isin(e, t, **kw), _isin_samples,
                _ISIN_DTYPES, compare="exact"))
register(OpCase("isin_out", ("isin.Tensor_Tensor_out",), _isin_out, _isin_samples, (torch.float32, torch.int64),
                compare="exact"))
register(OpCase("isin_scalar", ("isin.Tensor_Scalar",), lambda e, t, **kw: torch.isin(e, t, **kw),
                _scalar_samples, _ISIN_DTYPES, compare="exact"))
register(OpCase("isin_scalar_out", ("isin.Tensor_Scalar_out",), _isin_out, _scalar_samples, (torch.int32,),
                compare="exact"))
register(OpCase("isin_of_scalar", ("isin.Scalar_Tensor",), lambda e, t, **kw: torch.isin(e, t, **kw),
                _scalar_tensor_samples, _ISIN_DTYPES, compare="exact"))
register(OpCase("isin_of_scalar_out", ("isin.Scalar_Tensor_out",),
                lambda e, t, **kw: torch.isin(e, t, **kw, out=torch.empty(0, dtype=torch.bool, device=t.device)),
                _scalar_tensor_samples, (torch.float32,), compare="exact"))
