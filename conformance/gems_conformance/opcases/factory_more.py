"""Cases for gems_core/ops/factory_more.py: linspace, logspace and eye (with out=).

linspace over increasing and decreasing ranges, a single step, no steps and many (1000 +
17); logspace in base 10 and 2 over negative and positive exponents; eye square, wide, tall
and empty. The case's dtype is carried by a 0-d tensor (the float64 reference computes in
float64).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample

#: the ranges run negative, which ATen refuses to convert to uint8
SIGNED = samples.FLOAT_DTYPES + (torch.int32, torch.int64, torch.int16, torch.int8)


def _space_samples(dtype: torch.dtype, device: Any, profile: str) -> Iterator[Sample]:
    x = samples.make_tensor((), dtype, device, 3)
    for label, args in (("increasing", (-3.5, 7.25, 17)), ("decreasing", (6, -2, 9)), ("one step", (2.5, -5, 1)),
                        ("no steps", (0, 1, 0)), ("many", (-1, 1, 1000 + 17))):
        yield Sample(label, (x, args))


def _log_samples(dtype: torch.dtype, device: Any, profile: str) -> Iterator[Sample]:
    x = samples.make_tensor((), dtype, device, 4)
    for label, args in (("base 10", (-2.5, 3, 12, 10.0)), ("base 2", (4, -3, 9, 2.0)), ("one step", (1.5, 3, 1, 10.0))):
        yield Sample(label, (x, args))


def _eye_samples(dtype: torch.dtype, device: Any, profile: str) -> Iterator[Sample]:
    x = samples.make_tensor((), dtype, device, 5)
    for label, args in (("square", (7,)), ("wide", (3, 8)), ("tall", (9, 2)), ("empty", (0, 4))):
        yield Sample(label, (x, args))


def _factory(fn: Any, out: bool = False) -> Any:
    def call(x: torch.Tensor, args: tuple) -> torch.Tensor:
        if not out:
            return fn(*args, dtype=x.dtype, device=x.device)
        shape = fn(*args, device="meta").shape
        return fn(*args, out=torch.empty(shape, dtype=x.dtype, device=x.device))

    return call


register(OpCase("linspace", ("linspace",), _factory(torch.linspace), _space_samples, SIGNED,
                reduction_length=lambda sample: sample.args[1][2]))
register(OpCase("linspace_out", ("linspace.out",), _factory(torch.linspace, out=True), _space_samples,
                (torch.float32, torch.int64), reduction_length=lambda sample: sample.args[1][2]))
register(OpCase("logspace", ("logspace",), _factory(torch.logspace), _log_samples, samples.FLOAT_DTYPES))
register(OpCase("logspace_out", ("logspace.out",), _factory(torch.logspace, out=True), _log_samples,
                (torch.float32,)))
register(OpCase("eye", ("eye", "eye.m"), _factory(torch.eye), _eye_samples, samples.ALL_DTYPES, compare="exact"))
register(OpCase("eye_out", ("eye.out", "eye.m_out"), _factory(torch.eye, out=True), _eye_samples,
                (torch.float32, torch.int64), compare="exact"))
