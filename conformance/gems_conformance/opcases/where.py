"""Cases for gems_core/ops/where.py.

Every elementwise sample of (self, other) gets a bool condition of the broadcast shape; the
condition itself is then taken through every layout, and broadcast as a column against
operands of the full shape. Number operands promote as ATen's scalars (an int tensor with a
float number gives the default float dtype).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample


def _conditions(dt: torch.dtype, dev: torch.device, p: str) -> Iterator[Sample]:
    for n, sample in enumerate(samples.elementwise(2, dt, dev, p)):
        shape = torch.broadcast_shapes(*(a.shape for a in sample.args))
        condition = samples.make_tensor(shape, torch.bool, dev, seed=500 + n)
        yield Sample(sample.label, (condition, *sample.args))
    shape = samples.SHAPES[p][0]
    x = samples.make_tensor(shape, dt, dev, seed=600)
    y = samples.make_tensor(shape, dt, dev, seed=601)
    for label, condition in samples.layouts(shape, torch.bool, dev, seed=602):
        yield Sample(label, (condition, x, y))
    column = samples.make_tensor((shape[0], 1), torch.bool, dev, seed=603)
    yield Sample("broadcast", (column, x, y))


def _one_operand(dt: torch.dtype, dev: torch.device, p: str) -> Iterator[Sample]:
    for sample in _conditions(dt, dev, p):
        yield Sample(sample.label, sample.args[:2])


def _condition_only(dt: torch.dtype, dev: torch.device, p: str) -> Iterator[Sample]:
    for sample in _conditions(dt, dev, p):
        yield Sample(sample.label, sample.args[:1])


def _out(c: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> Any:
    shape = torch.broadcast_shapes(c.shape, x.shape, y.shape)
    out = torch.empty(shape, dtype=torch.result_type(x, y), device=x.device)
    return torch.where(c, x, y, out=out)


register(
    OpCase(
        "where",
        ("where.self",),
        lambda c, x, y: torch.where(c, x, y),
        _conditions,
        samples.ALL_DTYPES,
        compare="exact",
    )
)
register(
    OpCase(
        "where_mixed",
        ("where.self",),
        lambda c, x, y: torch.where(c, x, y.to(torch.float32)),
        _conditions,
        (torch.float16, torch.bfloat16, torch.int32, torch.bool),
        compare="exact",
    )
)
register(
    OpCase(
        "where_out",
        ("where.self_out",),
        _out,
        _conditions,
        (torch.float32, torch.float16, torch.int64, torch.bool),
        compare="exact",
    )
)
register(
    OpCase(
        "where_scalar_self",
        ("where.ScalarSelf",),
        lambda c, y: torch.where(c, 2.5, y),
        _one_operand,
        samples.ALL_DTYPES,
    )
)
register(
    OpCase(
        "where_scalar_other",
        ("where.ScalarOther",),
        lambda c, x: torch.where(c, x, -3),
        _one_operand,
        samples.ALL_DTYPES,
    )
)
register(
    OpCase(
        "where_scalars",
        ("where.Scalar",),
        lambda c: torch.where(c, 1.5, -2),
        _condition_only,
        (torch.float32,),
    )
)
