"""Cases for gems_core/ops/math_binary.py.

Pair samples cover every layout, a broadcast row and column, empty, 0-d and special values
paired with themselves rolled (NaN against numbers, infinities against each other, signed
zeros); Scalar overloads take a Python number. Integer ops (remainder, the shifts, the
logical ops) draw integers and compare exactly.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample

FLOATS = samples.FLOAT_DTYPES
INTS = (torch.int32, torch.int64, torch.int8, torch.uint8)


def _pairs(dt: torch.dtype, dev: torch.device, p: str) -> Any:
    return samples.elementwise(2, dt, dev, p)


def _unary(dt: torch.dtype, dev: torch.device, p: str) -> Any:
    return samples.elementwise(1, dt, dev, p)


def _triples(dt: torch.dtype, dev: torch.device, p: str) -> Any:
    return samples.elementwise(3, dt, dev, p)


def _nonzero_divisors(dt: torch.dtype, dev: torch.device, p: str) -> Any:
    # integer division by zero raises on the CPU (checked in tests); floats keep their zeros
    for s in _pairs(dt, dev, p):
        x, y = s.args
        yield Sample(s.label, (x, y if dt.is_floating_point else torch.where(y == 0, 3, y).to(dt)))


def _shifts(dt: torch.dtype, dev: torch.device, p: str) -> Any:
    # counts from -2 to past the width: out-of-range counts take ATen's defined results
    for s in samples.elementwise(2, dt, dev, p, low=-100, high=100):
        x, y = s.args
        count = samples.make_tensor(y.shape, torch.int64, dev, 3, low=-2 if dt.is_signed else 0, high=70)
        yield Sample(s.label, (x, count.to(dt).expand(y.shape) if y.stride() else count.to(dt)))


def _add_case(name: str, aten: str, call: Any, make: Any, dtypes: tuple[torch.dtype, ...], **kw: Any) -> None:
    register(OpCase(name, (aten,), call, make, dtypes, **kw))


for _name in ("atan2", "copysign", "fmin", "fmax", "hypot", "logaddexp"):
    _overload = "copysign.Tensor" if _name == "copysign" else _name
    _add_case(_name, _overload, lambda x, y, n=_name: getattr(torch, n)(x, y), _pairs, FLOATS)
    _add_case(f"{_name}_out", f"{_name}.out" if _name != "copysign" else "copysign.out",
              lambda x, y, n=_name: getattr(torch, n)(x, y, out=torch.empty_like(x + y)), _pairs, (torch.float32,))
for _name in ("atan2", "hypot"):
    _add_case(f"{_name}_", f"{_name}_", lambda x, y, n=_name: getattr(x.clone(), f"{n}_")(y),
              lambda dt, dev, p: (s for s in _pairs(dt, dev, p) if s.label != "broadcast"), (torch.bfloat16,))
_add_case("copysign_scalar", "copysign.Scalar", lambda x: torch.copysign(x, -0.0), _unary, FLOATS + (torch.int32,))
_add_case("fmin_int", "fmin", lambda x, y: torch.fmin(x, y), _pairs, INTS, compare="exact")

_add_case("remainder", "remainder.Tensor", lambda x, y: torch.remainder(x, y), _nonzero_divisors, FLOATS + INTS)
_add_case("remainder_scalar", "remainder.Scalar", lambda x: torch.remainder(x, -2.5), _unary, FLOATS)
_add_case("remainder_scalar_int", "remainder.Scalar", lambda x: x % 4, _unary, INTS, compare="exact")
_add_case("remainder_scalar_tensor", "remainder.Scalar_Tensor", lambda y: torch.remainder(7.5, y), _unary, FLOATS)
_add_case("remainder_", "remainder_.Tensor", lambda x, y: x.clone().remainder_(y),
          lambda dt, dev, p: (s for s in _nonzero_divisors(dt, dev, p) if s.label != "broadcast"),
          (torch.float32, torch.int32))

for _name in ("bitwise_left_shift", "bitwise_right_shift"):
    _add_case(_name, f"{_name}.Tensor", lambda x, y, n=_name: getattr(torch, n)(x, y), _shifts, INTS,
              compare="exact")
    _add_case(f"{_name}_scalar", f"{_name}.Tensor_Scalar", lambda x, n=_name: getattr(torch, n)(x, 3), _unary,
              (torch.int64, torch.int8), compare="exact")
    _add_case(f"{_name}_", f"{_name}_.Tensor", lambda x, y, n=_name: getattr(x.clone(), f"{n}_")(y),
              lambda dt, dev, p: (s for s in _shifts(dt, dev, p) if s.label != "broadcast"), (torch.int16,),
              compare="exact")

for _name in ("logical_and", "logical_or", "logical_xor"):
    _add_case(_name, _name, lambda x, y, n=_name: getattr(torch, n)(x, y), _pairs,
              FLOATS + (torch.int32, torch.bool), compare="exact")
    _add_case(f"{_name}_", f"{_name}_", lambda x, y, n=_name: getattr(x.clone(), f"{n}_")(y),
              lambda dt, dev, p: (s for s in _pairs(dt, dev, p) if s.label != "broadcast"), (torch.bool,),
              compare="exact")
_add_case("logical_not", "logical_not", lambda x: torch.logical_not(x), _unary, FLOATS + (torch.int32, torch.bool),
          compare="exact")
_add_case("logical_or_out", "logical_or.out",
          lambda x, y: torch.logical_or(x, y, out=torch.empty((x + y).shape, dtype=torch.bool, device=x.device)),
          _pairs, (torch.int8,), compare="exact")

_add_case("lerp_scalar", "lerp.Scalar", lambda x, y: torch.lerp(x, y, 0.3), _pairs, FLOATS)
_add_case("lerp_tensor", "lerp.Tensor", lambda x, y, w: torch.lerp(x, y, w), _triples, FLOATS)
_add_case("lerp_", "lerp_.Scalar", lambda x, y: x.clone().lerp_(y, 0.9),
          lambda dt, dev, p: (s for s in _pairs(dt, dev, p) if s.label != "broadcast"), (torch.float32,))
_add_case("addcmul", "addcmul", lambda x, a, b: torch.addcmul(x, a, b, value=-0.5), _triples, FLOATS)
_add_case("addcdiv", "addcdiv", lambda x, a, b: torch.addcdiv(x, a, b, value=2), _triples, FLOATS)
_add_case("addcmul_", "addcmul_", lambda x, a, b: x.clone().addcmul_(a, b),
          lambda dt, dev, p: (s for s in _triples(dt, dev, p) if s.label != "broadcast"), (torch.bfloat16,))
_add_case("addcdiv_out", "addcdiv.out", lambda x, a, b: torch.addcdiv(x, a, b, value=0.1, out=torch.empty_like(x)),
          lambda dt, dev, p: (s for s in _triples(dt, dev, p) if s.label != "broadcast"), (torch.float32,))
