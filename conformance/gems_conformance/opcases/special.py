"""Cases for gems_core/ops/special.py: special_i0e, special_i1 and digamma.

Unary samples of every layout, empty, 0-d and special values (NaN, +-inf, -0.0,
subnormals). The random data spans [-12, 12] for the Bessel functions, so both the power
series and the asymptotic expansion (past 9 in float32) are taken, and [-4, 4] for digamma,
whose negative half goes through the reflection. float64 is served (the term counts grow
with the dtype) and checked too; integer and bool inputs give float32 results.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import samples
from ..cases import OpCase, register

DTYPES = samples.FLOAT_DTYPES + (torch.float64, torch.int32, torch.bool)

#: case name -> (the function models call, its ATen packet, half-width of the random data)
FUNCTIONS: dict[str, tuple[Any, str, float]] = {
    "special_i0e": (torch.special.i0e, "special_i0e", 12.0),
    "special_i1": (torch.special.i1, "special_i1", 12.0),
    "digamma": (torch.digamma, "digamma", 4.0),
}


def _unary(width: float) -> Any:
    def make(dt: torch.dtype, dev: torch.device, p: str) -> Any:
        if not dt.is_floating_point:
            return samples.elementwise(1, dt, dev, p)
        return samples.elementwise(1, dt, dev, p, low=-width, high=width)

    return make


for _name, (_fn, _aten, _width) in FUNCTIONS.items():
    register(OpCase(_name, (_aten,), lambda x, f=_fn: f(x), _unary(_width), DTYPES))
    register(OpCase(f"{_name}_out", (f"{_aten}.out",), lambda x, f=_fn: f(x, out=torch.empty_like(x)),
                    _unary(_width), (torch.bfloat16, torch.float32)))

register(OpCase("digamma_", ("digamma_",), lambda x: x.clone().digamma_(), _unary(4.0),
                (torch.float32, torch.float16)))
register(OpCase("psi", ("digamma",), lambda x: torch.special.psi(x), _unary(4.0), (torch.float32,)))
