"""Cases for gems_core/ops/floor_divide.py.

Divisors come from [1, 9] and are negated in the call (exact in every dtype), so quotients
of both signs are floored; no divisor is zero (ATen's CPU kernel raises on integer zero).
"""

from __future__ import annotations

from typing import Any

import torch

from .. import samples
from ..cases import OpCase, register

SIGNED = samples.FLOAT_DTYPES + (torch.int32, torch.int64, torch.int16, torch.int8)


def _pairs(dt: torch.dtype, dev: torch.device, p: str) -> Any:
    return samples.elementwise(2, dt, dev, p, low=1, high=9, special=False)


def _same_shape(dt: torch.dtype, dev: torch.device, p: str) -> Any:
    return (s for s in _pairs(dt, dev, p) if s.label != "broadcast")


register(OpCase("floor_divide", ("floor_divide",), lambda x, y: torch.floor_divide(x, -y), _pairs, SIGNED))
register(OpCase("floor_divide_scalar", ("floor_divide.Scalar",), lambda x: x // -3,
                lambda dt, dev, p: samples.elementwise(1, dt, dev, p),
                (torch.float32, torch.int32, torch.int8)))
register(OpCase("floor_divide_", ("floor_divide_.Tensor",), lambda x, y: x.clone().floor_divide_(-y),
                _same_shape, (torch.float32, torch.int64)))
