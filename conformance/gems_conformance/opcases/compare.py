"""Cases for gems_core/ops/compare.py.

Float samples are rounded to multiples of 0.5 (every layout keeps its strides: the rounding
is done on the storage) so that equal elements, the interesting case of a comparison, are
common; the special-values sample keeps NaN, +-inf, -0.0 and subnormals. Integer samples
come from [-3, 3] for the same reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample

FLOATS = samples.FLOAT_DTYPES
ORDERED = FLOATS + (torch.int32,)


def _with_ties(sample: Sample) -> Sample:
    if sample.label != "special":
        for t in sample.args:
            if t.is_floating_point():
                storage = t._base if t._base is not None else t
                storage.mul_(2).round_().div_(2)
    return sample


def _ties(n: int) -> Any:
    def make(dt: torch.dtype, dev: torch.device, p: str) -> Iterator[Sample]:
        low, high = (None, None) if dt.is_floating_point else (-3, 4)
        return (_with_ties(s) for s in samples.elementwise(n, dt, dev, p, low=low, high=high))

    return make


def _same_shape(dt: torch.dtype, dev: torch.device, p: str) -> Iterator[Sample]:
    return (s for s in _ties(2)(dt, dev, p) if s.label != "broadcast")


for _name in ("eq", "ne", "gt", "ge", "lt", "le"):
    _dtypes = FLOATS + (torch.int32, torch.int8, torch.uint8, torch.bool) if _name in ("eq", "ne") else ORDERED
    register(OpCase(_name, (f"{_name}.Tensor",), lambda x, y, n=_name: getattr(torch, n)(x, y), _ties(2), _dtypes))

register(OpCase("eq_scalar", ("eq.Scalar",), lambda x: x == 1.5, _ties(1), ORDERED))
register(OpCase("gt_scalar", ("gt.Scalar",), lambda x: x > 1, _ties(1), FLOATS + (torch.int8, torch.uint8, torch.bool)))
register(OpCase("le_scalar_wraps", ("le.Scalar",), lambda x: x <= 1000, _ties(1), (torch.int8, torch.uint8)))
register(OpCase("eq_out", ("eq.Tensor_out",),
                lambda x, y: torch.eq(x, y, out=torch.empty(x.shape, dtype=torch.bool, device=x.device)),
                _same_shape, (torch.float32, torch.int32)))
register(OpCase("gt_", ("gt_.Tensor",), lambda x, y: x.clone().gt_(y), _same_shape,
                (torch.float32, torch.bfloat16, torch.int32)))

for _name in ("maximum", "minimum"):
    register(OpCase(_name, (_name,), lambda x, y, n=_name: getattr(torch, n)(x, y), _ties(2),
                    ORDERED + (torch.int8, torch.bool)))
register(OpCase("maximum_out", ("maximum.out",),
                lambda x, y: torch.maximum(x, y, out=torch.empty_like(x)), _same_shape, (torch.float16,)))

for _name in ("isnan", "isinf", "isposinf", "isneginf", "isfinite"):
    register(OpCase(_name, (_name,), lambda x, n=_name: getattr(torch, n)(x), _ties(1), ORDERED))

register(OpCase("isclose", ("isclose",), lambda x, y: torch.isclose(x, y), _ties(2), ORDERED + (torch.bool,)))
register(OpCase("isclose_equal_nan", ("isclose",), lambda x, y: torch.isclose(x, y, equal_nan=True),
                _ties(2), FLOATS))
register(OpCase("isclose_tolerance", ("isclose",), lambda x, y: torch.isclose(x, y, rtol=0.25, atol=0.5),
                _ties(2), (torch.float32, torch.int32)))
register(OpCase("allclose", ("allclose",), lambda x, y: (torch.allclose(x, y), torch.allclose(x, x.clone())),
                _ties(2), (torch.float32, torch.float16)))
