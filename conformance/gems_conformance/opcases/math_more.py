"""Cases for gems_core/ops/math_more.py.

Unary samples cover every layout, empty, 0-d and special values (NaN, +-inf, -0.0,
subnormals); ops with a domain draw their random data inside it (the special values still
reach outside). Integer and bool inputs give float32 results, checked against ATen's own
answer for them; the rounding ops keep integer dtypes and compare exactly.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import samples
from ..cases import OpCase, register

FLOATS = samples.FLOAT_DTYPES
TO_FLOAT = FLOATS + (torch.int32, torch.bool)
ROUNDING = FLOATS + (torch.int32, torch.int64)

#: (low, high) of the random data for ops defined on part of the line
DOMAINS: dict[str, tuple[float, float]] = {
    "acos": (-1.0, 1.0), "atanh": (-0.99, 0.99), "log": (0.01, 5.0), "log2": (0.01, 5.0),
    "log10": (0.01, 5.0), "log1p": (-0.9, 5.0), "sqrt": (0.0, 9.0), "logit": (0.01, 0.99),
}


def _unary(name: str) -> Any:
    low, high = DOMAINS.get(name, (None, None))

    def make(dt: torch.dtype, dev: torch.device, p: str) -> Any:
        if not dt.is_floating_point:  # integers out of the domain give NaN on both sides
            return samples.elementwise(1, dt, dev, p)
        return samples.elementwise(1, dt, dev, p, low=low, high=high)

    return make


for _name in ("acos", "atan", "asinh", "atanh", "sinh", "cosh", "tan", "exp2", "expm1", "log", "log2", "log10",
              "log1p", "sqrt", "i0", "logit"):
    register(OpCase(_name, (_name,), lambda x, n=_name: getattr(torch, n)(x), _unary(_name), TO_FLOAT))
    register(OpCase(f"{_name}_", (f"{_name}_",), lambda x, n=_name: getattr(x.clone(), f"{n}_")(), _unary(_name),
                    (torch.float32,)))
    register(OpCase(f"{_name}_out", (f"{_name}.out",),
                    lambda x, n=_name: getattr(torch, n)(x, out=torch.empty_like(x)), _unary(_name),
                    (torch.bfloat16,)))

register(OpCase("arcsinh", ("asinh",), lambda x: torch.arcsinh(x), _unary("asinh"), (torch.float32,)))
register(OpCase("arctanh_", ("atanh_",), lambda x: x.clone().arctanh_(), _unary("atanh"), (torch.float16,)))
register(OpCase("logit_eps", ("logit",), lambda x: torch.logit(x, eps=0.2), _unary("logit"), FLOATS))
register(OpCase("logit_eps_", ("logit_",), lambda x: x.clone().logit_(eps=0.05), _unary("logit"),
                (torch.float32,)))

for _name in ("ceil", "floor", "trunc", "round", "sign", "sgn"):
    register(OpCase(_name, (_name,), lambda x, n=_name: getattr(torch, n)(x), _unary(_name), ROUNDING,
                    compare="exact"))
    register(OpCase(f"{_name}_", (f"{_name}_",), lambda x, n=_name: getattr(x.clone(), f"{n}_")(), _unary(_name),
                    (torch.float16, torch.int32), compare="exact"))
    register(OpCase(f"{_name}_out", (f"{_name}.out",),
                    lambda x, n=_name: getattr(torch, n)(x, out=torch.empty_like(x)), _unary(_name),
                    (torch.bfloat16,), compare="exact"))

register(OpCase("round_halves", ("round",), lambda x: torch.round(x * 2) / 2, _unary("round"), FLOATS,
                compare="exact"))
register(OpCase("sign_bool", ("sign",), lambda x: torch.sign(x), _unary("sign"), (torch.bool,), compare="exact"))
register(OpCase("signbit", ("signbit",), lambda x: torch.signbit(x), _unary("signbit"),
                FLOATS + (torch.int32, torch.uint8), compare="exact"))
register(OpCase("signbit_out", ("signbit.out",),
                lambda x: torch.signbit(x, out=torch.empty(x.shape, dtype=torch.bool, device=x.device)),
                _unary("signbit"), (torch.float32,), compare="exact"))
