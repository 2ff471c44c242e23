"""where behaviour beyond the op cases: ATen's errors and warning for non-bool conditions,
out= dtype rules, number operands' dtypes, and gradients through the number overloads."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch

import gems_core

DEVICE = torch.device(gems_core.device)
#: only the op under test runs on gems, so a fault elsewhere cannot fail these tests
OPS = ("where",)


def _outcome(fn: Callable[[], Any]) -> str:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the error itself is what is compared
        return f"{type(exc).__name__}: {exc}"
    return "ok"


X, Y = torch.randn(4, device=DEVICE), torch.randn(4, device=DEVICE)
MASK = torch.tensor([True, False, True, False], device=DEVICE)
ERRORS = {
    "int condition": lambda: torch.where(torch.tensor([1, 0, 1, 0], device=DEVICE), X, Y),
    "float condition, numbers": lambda: torch.where(torch.tensor([1.0, 0.0], device=DEVICE), 1.0, 2.0),
    "float condition, number": lambda: torch.where(torch.tensor([1.0, 0, 1, 0], device=DEVICE), X, 2.0),
    "out dtype": lambda: torch.where(MASK, X, Y, out=torch.empty(4, dtype=torch.float64, device=DEVICE)),
    "shapes": lambda: torch.where(MASK, X, torch.randn(3, device=DEVICE)),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_invalid_calls_raise_atens_error(name: str) -> None:
    expected = _outcome(ERRORS[name])
    assert expected != "ok"
    with gems_core.use_gems(include=OPS):
        assert _outcome(ERRORS[name]) == expected


def test_uint8_condition_warns_and_selects_as_aten() -> None:
    condition = torch.tensor([1, 0, 1, 0], dtype=torch.uint8, device=DEVICE)
    with gems_core.use_gems(include=OPS), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = torch.where(condition, X, Y)
    assert torch.equal(got, torch.where(condition.bool(), X, Y))
    assert any("uint8 condition" in str(w.message) for w in caught)


@pytest.mark.parametrize("self,other", [(2, 3), (2, 3.5), (True, False), (True, 7), (1.5, -2)])
def test_number_operands_promote_as_aten(self: Any, other: Any) -> None:
    expected = torch.where(MASK, self, other)
    with gems_core.use_gems(include=OPS):
        got = torch.where(MASK, self, other)
    assert got.dtype == expected.dtype
    assert torch.equal(got, expected)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int8, torch.uint8])
def test_int_number_keeps_the_tensor_dtype(dtype: torch.dtype) -> None:
    x = torch.arange(4, device=DEVICE).to(dtype)
    expected = torch.where(MASK, x, 5)
    with gems_core.use_gems(include=OPS):
        got = torch.where(MASK, x, 5)
    assert got.dtype == dtype and torch.equal(got, expected)


def test_gradients_flow_through_number_overloads() -> None:
    x = torch.randn(4, device=DEVICE, requires_grad=True)
    (expected,) = torch.autograd.grad(torch.where(MASK, x, 0.0).mul(3).sum(), x)
    with gems_core.use_gems(include=OPS):
        (got,) = torch.autograd.grad(torch.where(MASK, x, 0.0).mul(3).sum(), x)
    assert torch.equal(got, expected)
