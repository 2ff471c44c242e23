"""The one dtype -> tolerance table. Reductions scale it by the reduction length; integer and
bool results compare exactly."""

from __future__ import annotations

import math

import torch

#: (atol, rtol) for a result of this dtype, compared with a float64 reference
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1e-2, 1.6e-2),
    torch.float32: (1.3e-6, 1.3e-5),
    torch.float64: (1e-12, 1e-10),
}


def tolerance(dtype: torch.dtype, reduction_length: int = 1) -> tuple[float, float]:
    """(atol, rtol) for ``dtype``; exact (0, 0) for integer and bool results. Rounding errors
    of a sum grow about with the square root of its length."""
    if dtype not in TOLERANCES:
        return (0.0, 0.0)
    atol, rtol = TOLERANCES[dtype]
    scale = max(1.0, math.sqrt(max(reduction_length, 1)))
    return (atol * scale, rtol * scale)
