"""floor, ceil, remainder and floor_divide where compiled code and ATen's kernels part ways:
subnormal inputs (libdevice's float32 floor and fmod flush them to zero on NVIDIA) and
quotients past 2^24 (Triton's float ``%`` is ``x - trunc(x / y) * y`` there). gems' results
must be the exact ones: the float64 reference, which ATen's CUDA kernels give too."""

from __future__ import annotations

import math

import pytest
import torch
from gems_conformance.routing import RouteWatch, implementations

import gems_core

DEVICE = torch.device(gems_core.device)
TINY = torch.finfo(torch.float32).tiny


def _served(op: str, fn, *args: torch.Tensor) -> torch.Tensor:
    watch = RouteWatch(implementations([op])[op])
    with watch, gems_core.use_gems():
        result = fn(*args)
    assert watch.hit, f"{op} did not run on gems"
    return result.cpu()


def _same(got: torch.Tensor, want: torch.Tensor) -> None:
    assert torch.equal(got.isnan(), want.isnan()), (got, want)
    assert torch.equal(got.nan_to_num(), want.nan_to_num()), (got, want)
    assert torch.equal(got.signbit(), want.signbit()), (got, want)  # -0.0 kept


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_floor_and_ceil_of_subnormals(dtype: torch.dtype) -> None:
    values = [TINY / 4, -TINY / 2, -0.0, 0.0, 1.5, -2.25, 7.0, float("inf"), float("nan")]
    x = torch.tensor(values, dtype=torch.float64).to(dtype)
    for op, fn in (("floor", torch.floor), ("ceil", torch.ceil)):
        # float64 holds float32's subnormals as normal numbers: its result is the exact one
        _same(_served(op, fn, x.to(DEVICE)), fn(x.double()).to(dtype))


def test_remainder_and_floor_divide_are_exact_for_any_quotient() -> None:
    g = torch.Generator().manual_seed(3)
    scale = torch.exp(torch.randn(400, generator=g, dtype=torch.float64) * 25)
    x = (torch.randn(400, generator=g, dtype=torch.float64) * scale).float()
    y = (torch.randn(400, generator=g, dtype=torch.float64) * torch.exp(torch.randn(400, generator=g) * 25)).float()
    specials_x = torch.tensor([7.5, -7.5, 1e10, 3e38, -0.0, 6.0, 2.0, float("inf"), 1.0])
    specials_y = torch.tensor([TINY / 4, -TINY / 2, 3.0, 1e-45, 5.0, -3.0, float("inf"), 2.0, 0.0])
    x, y = torch.cat([x, specials_x]), torch.cat([y, specials_y])
    got = _served("remainder.Tensor", torch.remainder, x.to(DEVICE), y.to(DEVICE))
    # the exact remainder with the divisor's sign, as ATen's CUDA kernel computes it
    exact = []
    for a, b in zip(x.double().tolist(), y.double().tolist()):
        r = math.fmod(a, b) if b != 0 and math.isfinite(a) else float("nan")
        exact.append(r + b if r != 0 and (r < 0) != (b < 0) else r)
    _same(got, torch.tensor(exact, dtype=torch.float64).float())
    # floor division from that exact remainder: (x - r) / y rounded once, as ATen's float32
    # kernel computes it (where its CPU fmod is exact: quotients within float32's range)
    moderate = (x.abs() < 1e30) & (y.abs() > 1e-30) & x.isfinite() & y.isfinite()
    q = _served("floor_divide", torch.floor_divide, x[moderate].to(DEVICE), y[moderate].to(DEVICE))
    _same(q, torch.floor_divide(x[moderate], y[moderate]))
