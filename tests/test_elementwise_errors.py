"""math, pow, compare, bitwise, clamp, floor_divide and triangular beyond the op cases:
ATen's errors raised the same way with gems on, and the number semantics the cases cannot
show against a float64 reference (scalars rounded or wrapped to the tensor's dtype)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import gems_core

DEVICE = torch.device(gems_core.device)


def _outcome(fn: Callable[[], Any]) -> str:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the error itself is what is compared
        return f"{type(exc).__name__}: {exc}"
    return "ok"


FLOATS = torch.tensor([1.5, -2.0, 0.25], device=DEVICE)
INTS = torch.tensor([3, -2, 0], device=DEVICE)
BOOLS = torch.tensor([True, False, True], device=DEVICE)
ERRORS = {
    "abs bool": lambda: torch.abs(BOOLS),
    "abs out dtype": lambda: torch.abs(INTS, out=torch.empty(3, device=DEVICE)),
    "sin_ int": lambda: INTS.clone().sin_(),
    "pow int negative number": lambda: INTS ** -1,
    "pow_ int negative number": lambda: INTS.clone().pow_(-2),
    "pow bool bool": lambda: torch.pow(BOOLS, BOOLS),
    "pow_ int float": lambda: INTS.clone().pow_(2.5),
    "bitwise float": lambda: torch.bitwise_and(FLOATS, FLOATS),
    "bitwise float number": lambda: INTS | 2.5,
    "bitwise_not float": lambda: ~FLOATS,
    "clamp no bounds": lambda: torch.clamp(FLOATS),
    "clamp int8 overflow": lambda: torch.clamp(INTS.to(torch.int8), 1, 300),
    "clamp fp16 overflow": lambda: torch.clamp(FLOATS.half(), 1e6),
    "clamp uint8 overflow": lambda: torch.clamp(INTS.abs().to(torch.uint8), -256),
    "clamp bool numbers": lambda: torch.clamp(BOOLS, True, True),
    "clamp bool tensors": lambda: torch.clamp(BOOLS, BOOLS, BOOLS),
    "clamp_ int float": lambda: INTS.clone().clamp_(0.5),
    "clamp_min bool": lambda: torch.clamp_min(BOOLS, True),
    "floor_divide int zero": lambda: INTS // 0,
    "floor_divide int zero tensor": lambda: INTS // torch.zeros(3, dtype=torch.int64, device=DEVICE),
    "floor_divide bool": lambda: torch.floor_divide(BOOLS, BOOLS),
    "floor_divide_ int float": lambda: INTS.clone().floor_divide_(1.5),
    "isclose dtypes": lambda: torch.isclose(FLOATS, INTS),
    "isclose rtol": lambda: torch.isclose(FLOATS, FLOATS, rtol=-1.0),
    "isclose atol": lambda: torch.isclose(FLOATS, FLOATS, atol=-1.0),
    "allclose dtypes": lambda: torch.allclose(FLOATS, INTS),
    "maximum shapes": lambda: torch.maximum(FLOATS, torch.ones(2, device=DEVICE)),
    "gt_ broadcast self": lambda: FLOATS[:1].clone().gt_(FLOATS),
    "triu 1-d": lambda: torch.triu(FLOATS),
    "tril out dtype": lambda: torch.tril(torch.ones(2, 2, device=DEVICE),
                                         out=torch.empty(2, 2, dtype=torch.int32, device=DEVICE)),
}
#: ATen raises these only in its CPU kernels (its GPU kernels divide by zero without an error)
CPU_ONLY_ERRORS = {"floor_divide int zero", "floor_divide int zero tensor", "abs bool", "clamp fp16 overflow"}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_invalid_calls_raise_atens_error(name: str) -> None:
    if name in CPU_ONLY_ERRORS and DEVICE.type != "cpu":
        pytest.skip("ATen raises only in its CPU kernels")
    expected = _outcome(ERRORS[name])
    assert expected != "ok"
    with gems_core.use_gems():
        assert _outcome(ERRORS[name]) == expected


SEMANTICS = {
    # a number is cast to the tensor's dtype before comparing: rounded, or wrapped
    "half == 0.1": lambda: torch.tensor([0.1, 0.2], dtype=torch.float16, device=DEVICE) == 0.1,
    "bf16 >= 0.1": lambda: torch.tensor([0.1, 0.0996], dtype=torch.bfloat16, device=DEVICE) >= 0.1,
    "bf16 == 257": lambda: torch.tensor([256.0, 258.0], dtype=torch.bfloat16, device=DEVICE) == 257,
    "half == 0-d float": lambda: (torch.tensor([0.1], dtype=torch.float16, device=DEVICE)
                                  == torch.tensor(0.1, device=DEVICE)),
    "int8 == 1000": lambda: torch.tensor([-24, 1], dtype=torch.int8, device=DEVICE) == 1000,
    "uint8 == -1": lambda: torch.tensor([255, 1], dtype=torch.uint8, device=DEVICE) == -1,
    "int8 & 1000": lambda: torch.tensor([-24, 127], dtype=torch.int8, device=DEVICE) & 1000,
    "uint8 clamp -1": lambda: torch.clamp(torch.tensor([3, 250], dtype=torch.uint8, device=DEVICE), -1),
    "bf16 gt_ bool into bf16": lambda: torch.tensor([1.0, 3.0], dtype=torch.bfloat16, device=DEVICE).gt_(2),
    # ATen computes a number exponent of +-0.5 as sqrt/rsqrt, a tensor exponent as pow
    "pow 0.5 number": lambda: torch.tensor([-0.0, float("-inf"), 4.0], device=DEVICE) ** 0.5,
    "pow -0.5 number": lambda: torch.tensor([-0.0, float("-inf"), 4.0], device=DEVICE) ** -0.5,
    "pow 0.5 tensor": lambda: torch.pow(torch.tensor([-0.0, float("-inf"), 4.0], device=DEVICE),
                                        torch.tensor(0.5, device=DEVICE)),
    "pow int negative tensor": lambda: torch.pow(torch.tensor([1, -1, -1, 2], device=DEVICE),
                                                 torch.tensor([-3, -3, -2, -1], device=DEVICE)),
    "pow number base": lambda: torch.pow(2, torch.tensor([-1, 0, 3], device=DEVICE)),
    "pow int8 wraps": lambda: torch.tensor([3, -2], dtype=torch.int8, device=DEVICE) ** 7,
    "abs int min": lambda: torch.abs(torch.tensor([-128], dtype=torch.int8, device=DEVICE)),
    "clamp nan bound": lambda: torch.clamp(torch.tensor([1.0, float("nan")], device=DEVICE), float("nan"), 2.0),
    "isclose infinities": lambda: torch.isclose(torch.tensor([float("inf"), float("-inf")], device=DEVICE),
                                                torch.tensor([float("inf"), float("inf")], device=DEVICE)),
    "isclose int tolerance": lambda: torch.isclose(torch.tensor([100, 7], device=DEVICE),
                                                   torch.tensor([101, 9], device=DEVICE), rtol=0.01),
    "isclose zero tolerance": lambda: torch.isclose(FLOATS, FLOATS + 1e-7, rtol=0.0, atol=0.0),
    "isfinite int": lambda: torch.isfinite(INTS),
    "triu past the matrix": lambda: torch.triu(torch.ones(3, 4, device=DEVICE), 10**12),
}


@pytest.mark.parametrize("name", sorted(SEMANTICS))
def test_number_semantics_match_aten(name: str) -> None:
    expected = SEMANTICS[name]()
    with gems_core.use_gems():
        got = SEMANTICS[name]()
    assert got.dtype == expected.dtype
    assert torch.equal(got.nan_to_num(), expected.nan_to_num())
    if got.is_floating_point():
        assert torch.equal(got.isnan(), expected.isnan())
        numbers = ~expected.isnan()  # -0.0 keeps its sign; a NaN's sign means nothing
        assert torch.equal(got.signbit()[numbers], expected.signbit()[numbers])


def test_allclose_returns_a_python_bool() -> None:
    with gems_core.use_gems():
        assert torch.allclose(FLOATS, FLOATS * (1 + 1e-7)) is True
        assert torch.allclose(FLOATS, FLOATS + 1) is False


def test_composite_ops_are_served_with_grad_inputs() -> None:
    x = torch.tensor([1.0, float("inf"), float("nan")], device=DEVICE, requires_grad=True)
    with gems_core.use_gems():
        assert torch.equal(torch.isfinite(x), torch.tensor([True, False, False], device=DEVICE))
        assert torch.equal(torch.isclose(x, x, equal_nan=True), torch.tensor([True, True, True], device=DEVICE))
