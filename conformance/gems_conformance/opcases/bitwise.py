"""Cases for gems_core/ops/bitwise.py: integer and bool dtypes (floats are ATen's error)."""

from __future__ import annotations

from typing import Any

import torch

from .. import samples
from ..cases import OpCase, register

INTEGRAL = samples.INT_DTYPES + (torch.bool,)


def _pairs(dt: torch.dtype, dev: torch.device, p: str) -> Any:
    return samples.elementwise(2, dt, dev, p, low=-100, high=100)


def _unary(dt: torch.dtype, dev: torch.device, p: str) -> Any:
    return samples.elementwise(1, dt, dev, p, low=-100, high=100)


def _same_shape(dt: torch.dtype, dev: torch.device, p: str) -> Any:
    return (s for s in _pairs(dt, dev, p) if s.label != "broadcast")


register(OpCase("bitwise_and", ("bitwise_and.Tensor",), lambda x, y: torch.bitwise_and(x, y), _pairs, INTEGRAL))
register(OpCase("bitwise_or", ("bitwise_or.Tensor",), lambda x, y: x | y, _pairs, INTEGRAL))
register(OpCase("bitwise_xor", ("bitwise_xor.Tensor",), lambda x, y: x ^ y, _pairs,
                (torch.int32, torch.uint8, torch.bool)))
register(OpCase("bitwise_and_scalar", ("bitwise_and.Scalar",), lambda x: x & 6, _unary,
                (torch.int32, torch.int8, torch.uint8, torch.bool)))
register(OpCase("bitwise_or_scalar_tensor", ("bitwise_or.Scalar_Tensor",), lambda x: torch.bitwise_or(5, x),
                _unary, (torch.int64,)))
register(OpCase("bitwise_not", ("bitwise_not",), lambda x: ~x, _unary, INTEGRAL))
register(OpCase("bitwise_and_", ("bitwise_and_.Tensor",), lambda x, y: x.clone().bitwise_and_(y), _same_shape,
                (torch.int32, torch.bool)))
register(OpCase("bitwise_or_out", ("bitwise_or.Tensor_out",),
                lambda x, y: torch.bitwise_or(x, y, out=torch.empty_like(x)), _same_shape, (torch.int16,)))
