"""Cases for gems_core/ops/clamp.py.

Number bounds include a NaN bound and min > max; tensor bounds are drawn like the input
(the special-values sample gives NaN and infinite bounds), broadcast and in every layout.
uint8 with a bound of -1 checks ATen's wrap-around (-1 is 255 there).
"""

from __future__ import annotations

from typing import Any

import torch

from .. import samples
from ..cases import OpCase, register

FLOATS = samples.FLOAT_DTYPES


def _unary(dt: torch.dtype, dev: torch.device, p: str) -> Any:
    return samples.elementwise(1, dt, dev, p)


def _n(n: int) -> Any:
    return lambda dt, dev, p: samples.elementwise(n, dt, dev, p)


def _same_shape(dt: torch.dtype, dev: torch.device, p: str) -> Any:
    return (s for s in samples.elementwise(2, dt, dev, p) if s.label != "broadcast")


register(OpCase("clamp", ("clamp",), lambda x: torch.clamp(x, -1, 2), _unary,
                FLOATS + (torch.int32, torch.int8, torch.uint8)))
register(OpCase("clamp_nan_bound", ("clamp",), lambda x: torch.clamp(x, float("nan"), 1.0), _unary, (torch.float32,)))
register(OpCase("clamp_min_above_max", ("clamp",), lambda x: torch.clamp(x, 2, -1), _unary,
                (torch.float32, torch.int32)))
register(OpCase("clamp_tensor", ("clamp.Tensor",), lambda x, lo, hi: torch.clamp(x, lo, hi), _n(3),
                FLOATS + (torch.int32,)))
register(OpCase("clamp_tensor_min", ("clamp.Tensor",), lambda x, lo: torch.clamp(x, min=lo), _n(2),
                (torch.float32, torch.int32, torch.bool)))
register(OpCase("clamp_min", ("clamp_min",), lambda x: torch.clamp_min(x, 0.5), _unary, FLOATS + (torch.int64,)))
register(OpCase("clamp_max_tensor", ("clamp_max.Tensor",), lambda x, hi: torch.clamp_max(x, hi), _n(2),
                (torch.float32, torch.int16)))
register(OpCase("clamp_", ("clamp_",), lambda x: x.clone().clamp_(-1, 1), _unary, (torch.float16, torch.int32)))
register(OpCase("clamp_out", ("clamp.out",), lambda x: torch.clamp(x, -1, 1, out=torch.empty_like(x)), _unary,
                (torch.float32,)))
register(OpCase("clamp_tensor_", ("clamp_.Tensor",), lambda x, lo: x.clone().clamp_(min=lo), _same_shape,
                (torch.bfloat16,)))
