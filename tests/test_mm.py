"""mm/addmm behaviour beyond the op cases: ATen's errors, empty products, out= rules, the
tunable's contract with backend plugins, and the cpu backend's bf16 gate."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch

import gems_core
from gems_core import runtime
from gems_core.tuning import tunables

#: only the ops under test run on gems, so a fault elsewhere cannot fail these tests
OPS = ("mm", "addmm")


def _outcome(fn: Callable[[], Any]) -> str:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the error itself is what is compared
        return f"{type(exc).__name__}: {exc}"
    return "ok"


A, B = torch.randn(3, 4), torch.randn(4, 5)
ERRORS = {
    "dtype mismatch": lambda: torch.mm(A, B.half()),
    "shape mismatch": lambda: torch.mm(A, torch.randn(3, 5)),
    "not a matrix": lambda: torch.mm(A, torch.randn(4)),
    "addmm input shape": lambda: torch.addmm(torch.randn(2, 5), A, B),
    "addmm input dtype": lambda: torch.addmm(torch.randn(3, 5).half(), A, B),
    "out dtype": lambda: torch.mm(A, B, out=torch.empty(3, 5, dtype=torch.float64)),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_invalid_calls_raise_atens_error(name: str) -> None:
    expected = _outcome(ERRORS[name])
    assert expected != "ok"
    with gems_core.use_gems(include=OPS):
        assert _outcome(ERRORS[name]) == expected


def test_empty_k_gives_zeros_and_beta_times_input() -> None:
    a, b, c = torch.randn(4, 0), torch.randn(0, 3), torch.randn(4, 3)
    with gems_core.use_gems(include=OPS):
        product = torch.mm(a, b)
        biased = torch.addmm(c, a, b, beta=2.0)
    assert torch.equal(product, torch.zeros(4, 3))
    assert torch.allclose(biased, 2.0 * c)


def test_integer_matrices_go_to_aten() -> None:
    a, b = torch.randint(-5, 5, (6, 7)), torch.randint(-5, 5, (7, 3))
    with gems_core.use_gems(include=OPS):
        got = torch.mm(a, b)
    assert torch.equal(got, a @ b)


def test_out_of_another_shape_is_resized_with_atens_warning() -> None:
    a, b = torch.randn(17, 9), torch.randn(9, 33)
    out = torch.empty(2, 2)
    with gems_core.use_gems(include=OPS), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.mm(a, b, out=out)
    assert out.shape == (17, 33)
    assert any("was resized" in str(w.message) for w in caught)
    torch.testing.assert_close(out, a @ b)


def test_addmm_out_may_be_its_own_input() -> None:
    a, b = torch.randn(33, 20).t(), torch.randn(33, 18)
    c = torch.randn(20, 18)
    expected = torch.addmm(c, a, b, beta=0.5, alpha=-2)
    with gems_core.use_gems(include=OPS):
        torch.addmm(c, a, b, beta=0.5, alpha=-2, out=c)
    torch.testing.assert_close(c, expected)


def test_float64_scalars_keep_their_precision() -> None:
    a, b, c = (
        torch.randn(5, 6, dtype=torch.float64),
        torch.randn(6, 7, dtype=torch.float64),
        torch.randn(5, 7, dtype=torch.float64),
    )
    alpha, beta = 1 / 3, 0.1
    with gems_core.use_gems(include=OPS):
        got = torch.addmm(c, a, b, beta=beta, alpha=alpha)
    torch.testing.assert_close(got, beta * c + alpha * (a @ b), rtol=1e-12, atol=1e-12)


def test_mm_tunable_keeps_the_names_backends_configure() -> None:
    mm = tunables()["mm"]
    assert mm.params == ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")
    for config in mm.defaults:
        assert set(config.params) == set(mm.params)


def test_linear_layer_trains_on_gems() -> None:
    torch.manual_seed(0)
    layer = torch.nn.Linear(24, 10)
    x = torch.randn(7, 24)
    expected = torch.autograd.grad((layer(x) * layer(x)).sum(), (layer.weight, layer.bias))
    with gems_core.use_gems(include=OPS):
        got = torch.autograd.grad((layer(x) * layer(x)).sum(), (layer.weight, layer.bias))
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(
    runtime.current().selection.backend.name != "cpu", reason="the cpu backend's own gate"
)
def test_cpu_backend_sends_bf16_products_to_aten() -> None:
    policy = runtime.current().policy
    for op in ("mm", "mm.out", "addmm", "addmm.out"):
        assert "bfloat16" in (policy.gate_for(op) or ())
    a, b = torch.randn(16, 16).bfloat16(), torch.randn(16, 16).bfloat16()
    with gems_core.use_gems(include=OPS):
        got = torch.mm(a, b)
    assert torch.equal(got, a @ b)


@pytest.mark.skipif(not runtime.current().interpreter, reason="a Triton interpreter quirk")
def test_interpreter_bf16_dot_is_still_wrong() -> None:
    """Why the cpu backend gates bf16 mm. If this fails, Triton's interpreter computes bf16
    tl.dot correctly now: drop the gate in gems_core/backends/cpu.py."""
    from gems_core.ops.mm import _launch

    a, b = torch.randn(16, 16).bfloat16(), torch.randn(16, 16).bfloat16()
    out = torch.empty(16, 16, dtype=torch.bfloat16)
    _launch(a, b, out, None, 1, 0)
    assert not torch.allclose(out.float(), (a.double() @ b.double()).float(), rtol=0.05, atol=0.05)
