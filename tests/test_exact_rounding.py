"""floor, ceil, remainder and floor_divide where compiled code and ATen's kernels part ways:
subnormal inputs (libdevice's float32 floor and fmod flush them to zero on NVIDIA) and
quotients past 2^24, or 2^53 in float64 (Triton's float ``%`` is ``x - trunc(x / y) * y``
there). gems' results must be the exact ones: the float64 reference, or C's fmod for
float64, which ATen's CUDA kernels give too."""

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
    # -0.0 kept; a NaN's sign bit is no part of its value (x86's default NaN has it set)
    assert torch.equal(got.signbit() & ~got.isnan(), want.signbit() & ~want.isnan()), (got, want)


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


def _exact_remainders(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """C's fmod of float64s (Python's math.fmod, exact) and the remainder with the
    divisor's sign from it, as ATen's CUDA kernels compute them."""
    x, y = torch.broadcast_tensors(x, y)
    fmod, remainder = [], []
    for a, b in zip(x.flatten().tolist(), y.flatten().tolist()):
        r = math.fmod(a, b) if b != 0 and math.isfinite(a) else float("nan")
        fmod.append(r)
        remainder.append(r + b if r != 0 and (r < 0) != (b < 0) else r)
    return (torch.tensor(fmod, dtype=torch.float64).reshape(x.shape),
            torch.tensor(remainder, dtype=torch.float64).reshape(x.shape))


def _floor_divide_from(x: torch.Tensor, y: torch.Tensor, fmod: torch.Tensor) -> torch.Tensor:
    """ATen's float floor division from the remainder ``fmod`` (each step one IEEE operation)."""
    q = (x - fmod) / y
    q = torch.where((fmod != 0) & ((y < 0) != (fmod < 0)), q - 1, q)
    fq = torch.floor(q)
    fq = torch.where(q - fq > 0.5, fq + 1, fq)
    fq = torch.where(q == 0, torch.copysign(torch.zeros_like(q), x / y), fq)
    return torch.where(y == 0, x / y, fq)


def _float64_operands() -> tuple[torch.Tensor, torch.Tensor]:
    """Pairs of float64s: every pair of special values (quotients far past 2^53, subnormals,
    signed zeros, infinities, NaN) and random values across the whole exponent range."""
    specials = torch.tensor([
        1e300, -1e300, 3.7, 2.0 ** 1000 * 1.3, 1e-300, 5e-324, -5e-324, 3e-310, -2.5e-320,
        torch.finfo(torch.float64).tiny, torch.finfo(torch.float64).max, -0.0, 0.0, 1.0, -7.5, 6.0,
        float("inf"), -float("inf"), float("nan"),
    ], dtype=torch.float64)
    sx, sy = torch.cartesian_prod(specials, specials).unbind(1)
    g = torch.Generator().manual_seed(5)
    exponents = torch.randint(-1074, 1024, (2, 2000), generator=g)
    x, y = torch.ldexp(torch.randn(2, 2000, generator=g, dtype=torch.float64), exponents.double())
    return torch.cat([sx, x]), torch.cat([sy, y])


def test_float64_remainder_and_floor_divide_are_exact() -> None:
    x, y = _float64_operands()
    fmod, remainder = _exact_remainders(x, y)
    got = _served("remainder.Tensor", torch.remainder, x.to(DEVICE), y.to(DEVICE))
    _same(got, remainder)
    # ATen's CPU kernel agrees where the quotient x / y is finite (past that its
    # vectorized fmod is NaN)
    finite = (x / y).isfinite()
    _same(got[finite], torch.remainder(x[finite], y[finite]))
    _same(_served("floor_divide", torch.floor_divide, x.to(DEVICE), y.to(DEVICE)), _floor_divide_from(x, y, fmod))
    _same(torch.floor_divide(x[finite], y[finite]), _floor_divide_from(x, y, fmod)[finite])


def test_float64_remainder_of_scalars_and_strided_tensors() -> None:
    x, y = _float64_operands()
    # a Python float reaches float64 kernels as its bit pattern, a scalar beside the block
    for scalar in (3.7, -1e-300, 5e-324, float("inf")):
        got = _served("remainder.Scalar", torch.remainder, x.to(DEVICE), scalar)
        _same(got, _exact_remainders(x, torch.tensor([scalar], dtype=torch.float64))[1])
        got = _served("remainder.Scalar_Tensor", torch.remainder, scalar, y.to(DEVICE))
        _same(got, _exact_remainders(torch.tensor([scalar], dtype=torch.float64), y)[1])
    m = x.numel() // 2
    xs, ys = x[:2 * m].reshape(2, m).t(), y[:m, None]  # transposed, and broadcast along dim 1
    assert not xs.is_contiguous()
    got = _served("remainder.Tensor", torch.remainder, xs.to(DEVICE), ys.to(DEVICE))
    _same(got, _exact_remainders(xs, ys)[1])
