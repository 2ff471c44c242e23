"""Cases for gems_core/ops/math.py.

Unary samples cover every layout, empty, 0-d and special values (NaN, +-inf, -0.0,
subnormals). Integer and bool inputs give float32 results, checked against ATen's own
float32 answer for them.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import samples
from ..cases import OpCase, register

FLOATS = samples.FLOAT_DTYPES
TO_FLOAT = FLOATS + (torch.int32, torch.bool)


def _unary(dt: torch.dtype, dev: torch.device, p: str) -> Any:
    return samples.elementwise(1, dt, dev, p)


register(OpCase("abs", ("abs",), lambda x: torch.abs(x), _unary, FLOATS + samples.INT_DTYPES))
register(OpCase("abs_out", ("abs.out",), lambda x: torch.abs(x, out=torch.empty_like(x)), _unary,
                (torch.float32, torch.int32)))
register(OpCase("abs_", ("abs_",), lambda x: x.clone().abs_(), _unary, (torch.float16, torch.int8)))

for _name in ("reciprocal", "rsqrt", "sin", "cos", "tanh", "sigmoid", "erf"):
    register(OpCase(_name, (_name,), lambda x, n=_name: getattr(torch, n)(x), _unary, TO_FLOAT))
    register(OpCase(f"{_name}_", (f"{_name}_",), lambda x, n=_name: getattr(x.clone(), f"{n}_")(), _unary,
                    (torch.float32,)))

for _name in ("sigmoid", "tanh", "rsqrt"):
    register(OpCase(f"{_name}_out", (f"{_name}.out",),
                    lambda x, n=_name: getattr(torch, n)(x, out=torch.empty_like(x)), _unary, (torch.bfloat16,)))
