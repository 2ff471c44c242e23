"""Activation behaviour beyond the op cases: ATen's errors on dtypes it rejects, and
training through gelu/silu with their backward kernels on gems."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from gems_conformance.routing import RouteWatch, implementations

import gems_core

#: only the ops under test run on gems, so a fault elsewhere cannot fail these tests
OPS = ("exp", "relu", "gelu", "gelu_backward", "silu", "silu_backward", "mm")


def _outcome(fn: Callable[[], Any]) -> str:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the error itself is what is compared
        return f"{type(exc).__name__}: {exc}"
    return "ok"


INTS = torch.tensor([1, -2, 3])
ERRORS = {
    "relu of bool": lambda: torch.relu(torch.tensor([True, False])),
    "relu_ of bool": lambda: torch.tensor([True, False]).relu_(),
    "gelu of int": lambda: F.gelu(INTS),
    "gelu mode": lambda: F.gelu(torch.randn(3), approximate="fast"),
    "silu of int": lambda: F.silu(INTS),
    "exp_ of int": lambda: INTS.clone().exp_(),
    "exp out of int": lambda: torch.exp(torch.randn(3), out=torch.empty(3, dtype=torch.int64)),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_rejected_inputs_raise_atens_error(name: str) -> None:
    expected = _outcome(ERRORS[name])
    assert expected != "ok"
    with gems_core.use_gems(include=OPS):
        assert _outcome(ERRORS[name]) == expected


def test_relu_propagates_nan() -> None:
    x = torch.tensor([float("nan"), -1.0, 2.0, float("-inf")])
    with gems_core.use_gems(include=OPS):
        y = torch.relu(x)
    assert y[0].isnan() and y[1:].tolist() == [0.0, 2.0, 0.0]


def test_exp_of_integers_is_float() -> None:
    x = torch.arange(-3, 4, dtype=torch.int32)
    with gems_core.use_gems(include=OPS):
        y = torch.exp(x)
    assert y.dtype == torch.float32
    torch.testing.assert_close(y, torch.exp(x.double()).float())


def test_gelu_tanh_is_finite_far_from_zero() -> None:
    x = torch.tensor([-1e4, -60.0, -10.0, 10.0, 60.0, 1e4])
    with gems_core.use_gems(include=OPS):
        y = F.gelu(x, approximate="tanh")
    torch.testing.assert_close(y, F.gelu(x.double(), approximate="tanh").float())


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_mlp_trains_with_gems_backward_kernels(approximate: str) -> None:
    torch.manual_seed(0)
    x = torch.randn(5, 12)
    w1, w2 = torch.randn(12, 16, requires_grad=True), torch.randn(16, 3, requires_grad=True)

    def loss() -> torch.Tensor:
        return F.silu(F.gelu(x @ w1, approximate=approximate) @ w2).sum()

    expected = torch.autograd.grad(loss(), (w1, w2))
    codes = frozenset().union(*implementations(("gelu_backward", "silu_backward")).values())
    with RouteWatch(codes) as watch, gems_core.use_gems(include=OPS):
        got = torch.autograd.grad(loss(), (w1, w2))
    assert watch.hit, "the backward kernels did not run on gems"
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
