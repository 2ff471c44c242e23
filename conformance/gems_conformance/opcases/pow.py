"""Cases for gems_core/ops/pow.py.

Floating bases are drawn from [0.25, 2.5] (negative bases with fractional exponents are NaN
in both, so they would say little) and the special-values sample pairs every special value
with another; integer samples keep negative exponents, which give 0 or +-1 as in ATen.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import samples
from ..cases import OpCase, register

FLOATS = samples.FLOAT_DTYPES
INTS = (torch.int32, torch.int64, torch.int16, torch.int8, torch.uint8)


def _pairs(dt: torch.dtype, dev: torch.device, p: str) -> Any:
    if dt.is_floating_point:
        return samples.elementwise(2, dt, dev, p, low=0.25, high=2.5)
    return samples.elementwise(2, dt, dev, p)


def _unary(dt: torch.dtype, dev: torch.device, p: str) -> Any:
    return samples.elementwise(1, dt, dev, p)


def _same_shape(dt: torch.dtype, dev: torch.device, p: str) -> Any:
    return (s for s in _pairs(dt, dev, p) if s.label != "broadcast")


register(OpCase("pow", ("pow.Tensor_Tensor",), lambda x, y: torch.pow(x, y), _pairs, FLOATS + INTS))
register(OpCase("pow_scalar", ("pow.Tensor_Scalar",), lambda x: x ** 3, _unary,
                FLOATS + (torch.int32, torch.int8)))
register(OpCase("pow_scalar_fraction", ("pow.Tensor_Scalar",), lambda x: x ** -0.5, _unary,
                FLOATS + (torch.int64,)))
register(OpCase("pow_scalar_base", ("pow.Scalar",), lambda x: 2 ** x, _unary, FLOATS + (torch.int32,)))
register(OpCase("pow_", ("pow_.Tensor",), lambda x, y: x.clone().pow_(y), _same_shape,
                (torch.float32, torch.int32)))
register(OpCase("pow_out", ("pow.Tensor_Tensor_out",), lambda x, y: torch.pow(x, y, out=torch.empty_like(x)),
                _same_shape, (torch.float16,)))
