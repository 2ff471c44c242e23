"""bmm/baddbmm/mv/outer/resolve_* behaviour beyond the op cases: ATen's errors, which
composites reach gems, operands read in place, large batches, out= rules, and the cpu
backend's bf16 gate."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from outcomes import answer
from gems_conformance.routing import RouteWatch, implementations

import gems_core
from gems_core import runtime
from gems_core.registry import load_ops

DEVICE = torch.device(gems_core.device)
#: only the ops under test run on gems, so a fault elsewhere cannot fail these tests
OPS = ("bmm", "baddbmm", "mv", "resolve_conj", "resolve_neg")


def _outcome(fn: Callable[[], Any]) -> str:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the error itself is what is compared
        return f"{type(exc).__name__}: {exc}"
    return "ok"


A, B = torch.randn(2, 3, 4, device=DEVICE), torch.randn(2, 4, 5, device=DEVICE)
M, V = torch.randn(3, 4, device=DEVICE), torch.randn(4, device=DEVICE)
ERRORS = {
    "bmm dtype mismatch": lambda: torch.bmm(A, B.half()),
    "bmm batch mismatch": lambda: torch.bmm(A, torch.randn(3, 4, 5, device=DEVICE)),
    "bmm shape mismatch": lambda: torch.bmm(A, torch.randn(2, 3, 5, device=DEVICE)),
    "bmm of matrices": lambda: torch.bmm(A[0], B[0]),
    "bmm of vectors": lambda: torch.bmm(torch.randn(3, device=DEVICE), torch.randn(3, device=DEVICE)),
    "bmm out dtype": lambda: torch.bmm(A, B, out=torch.empty(2, 3, 5, dtype=torch.float64, device=DEVICE)),
    "matmul batch shape mismatch": lambda: torch.matmul(A, torch.randn(2, 5, 5, device=DEVICE)),
    "baddbmm input shape": lambda: torch.baddbmm(torch.randn(2, 2, 5, device=DEVICE), A, B),
    "baddbmm input dtype": lambda: torch.baddbmm(torch.randn(2, 3, 5, device=DEVICE).half(), A, B),
    "mv shape mismatch": lambda: torch.mv(M, torch.randn(5, device=DEVICE)),
    "mv dtype mismatch": lambda: torch.mv(M, V.double()),
    "mv of a vector": lambda: torch.mv(V, V),
    "mv of a column": lambda: torch.mv(M, V[:, None]),
    "mv out dtype": lambda: torch.mv(M, V, out=torch.empty(3, dtype=torch.float16, device=DEVICE)),
    "outer of a matrix": lambda: torch.outer(M, V),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_invalid_calls_raise_atens_error(name: str) -> None:
    expected = _outcome(ERRORS[name])
    assert expected != "ok"
    with gems_core.use_gems(include=OPS):
        assert _outcome(ERRORS[name]) == expected


def _spy(monkeypatch: pytest.MonkeyPatch, name: str) -> list[tuple[Any, ...]]:
    """Record the arguments of each call to blas.``name`` (a launcher)."""
    load_ops()
    from gems_core.ops import blas

    calls: list[tuple[Any, ...]] = []
    original = getattr(blas, name)

    def record(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(blas, name, record)
    return calls


def test_matmul_of_batches_reaches_bmm(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _spy(monkeypatch, "_launch_batched")
    a, b = torch.randn(2, 3, 5, 7, device=DEVICE), torch.randn(3, 7, 4, device=DEVICE)
    with gems_core.use_gems(include=OPS):
        got = torch.matmul(a, b)
    assert calls, "no gems kernel ran"
    torch.testing.assert_close(got, torch.matmul(a, b))


def test_matmul_of_matrix_and_vector_reaches_mv(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _spy(monkeypatch, "_launch_gemv")
    a, x = torch.randn(37, 21, device=DEVICE), torch.randn(21, device=DEVICE)
    with gems_core.use_gems(include=OPS):
        got = a @ x
    assert calls, "no gems kernel ran"
    torch.testing.assert_close(got, torch.mv(a, x))


def test_outer_is_served_by_gems_mul() -> None:
    """outer is a composite that reaches the backend as mul.Tensor of a column and a row."""
    x, y = torch.randn(9, device=DEVICE), torch.randn(33, device=DEVICE)
    watch = RouteWatch(implementations(["mul.Tensor"])["mul.Tensor"])
    with watch, gems_core.use_gems(include=["mul.Tensor"]):
        got = torch.outer(x, y)
    assert watch.hit, "gems' mul did not run"
    torch.testing.assert_close(got, x[:, None] * y[None, :])


def test_transposed_and_strided_batches_are_read_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _spy(monkeypatch, "_launch_batched")
    a = torch.randn(6, 20, 11, device=DEVICE)[::2].transpose(1, 2)  # strided batch, column-major matrices
    b = torch.randn(20, 3, 9, device=DEVICE).permute(1, 0, 2)  # batch stride smaller than a row's
    with gems_core.use_gems(include=OPS):
        got = torch.bmm(a, b)
    ((launched_a, launched_b, *_),) = calls
    assert launched_a.data_ptr() == a.data_ptr() and launched_a.stride() == a.stride()
    assert launched_b.data_ptr() == b.data_ptr() and launched_b.stride() == b.stride()
    torch.testing.assert_close(got.cpu(), (a.cpu().double() @ b.cpu().double()).float())


def test_batches_beyond_one_grid_axis_run_in_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    load_ops()
    from gems_core.ops import blas

    monkeypatch.setattr(blas, "_MAX_GRID_Y", 2)  # the real limit needs 65536 interpreted programs
    a, b, c = (torch.randn(shape, device=DEVICE) for shape in ((5, 3, 4), (5, 4, 2), (5, 1, 2)))
    with gems_core.use_gems(include=OPS):
        product = torch.bmm(a, b)
        biased = torch.baddbmm(c, a, b, alpha=2.0)
    torch.testing.assert_close(product, torch.bmm(a, b))
    torch.testing.assert_close(biased, torch.baddbmm(c, a, b, alpha=2.0))


def test_empty_k_gives_zeros_and_beta_times_input() -> None:
    a, b, c = (torch.randn(shape, device=DEVICE) for shape in ((2, 4, 0), (2, 0, 3), (2, 4, 3)))
    with gems_core.use_gems(include=OPS):
        product = torch.bmm(a, b)
        biased = torch.baddbmm(c, a, b, beta=2.0)
        vector = torch.mv(torch.randn(5, 0, device=DEVICE), torch.randn(0, device=DEVICE))
    assert torch.equal(product, torch.zeros(2, 4, 3, device=DEVICE))
    assert torch.allclose(biased, 2.0 * c)
    assert torch.equal(vector, torch.zeros(5, device=DEVICE))


def test_baddbmm_beta_zero_ignores_nan_input() -> None:
    a, b = torch.randn(2, 5, 6, device=DEVICE), torch.randn(2, 6, 3, device=DEVICE)
    with gems_core.use_gems(include=OPS):
        got = torch.baddbmm(torch.full((2, 5, 3), float("nan"), device=DEVICE), a, b, beta=0, alpha=0.5)
    torch.testing.assert_close(got, 0.5 * torch.bmm(a, b))


def test_integer_batches_go_to_aten() -> None:
    """ATen's answer, whatever it is: a product on the CPU, an error on CUDA (no integer bmm)."""
    a, b = torch.randint(-5, 5, (2, 6, 7), device=DEVICE), torch.randint(-5, 5, (2, 7, 3), device=DEVICE)
    expected = answer(lambda: torch.bmm(a, b))
    with gems_core.use_gems(include=OPS):
        assert answer(lambda: torch.bmm(a, b)) == expected


@pytest.mark.parametrize(
    "call,shape",
    [
        pytest.param(lambda out: torch.bmm(A, B, out=out), (2, 3, 5), id="bmm"),
        pytest.param(lambda out: torch.mv(M, V, out=out), (3,), id="mv"),
    ],
)
def test_out_of_another_shape_is_resized_with_atens_warning(
    call: Any, shape: tuple[int, ...]
) -> None:
    out = torch.empty(2, 2, device=DEVICE)
    with gems_core.use_gems(include=OPS), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call(out)
    assert out.shape == shape
    assert any("was resized" in str(w.message) for w in caught)
    torch.testing.assert_close(out, call(torch.empty(0, device=DEVICE)))


def test_bmm_trains_through_autograd() -> None:
    a = torch.randn(3, 5, 7, device=DEVICE, requires_grad=True)
    b = torch.randn(3, 7, 4, device=DEVICE, requires_grad=True)
    expected = torch.autograd.grad((torch.bmm(a, b) ** 2).sum(), (a, b))
    with gems_core.use_gems(include=OPS):
        got = torch.autograd.grad((torch.bmm(a, b) ** 2).sum(), (a, b))
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)


def test_resolve_conj_and_neg_are_served_and_return_a_real_tensor_itself() -> None:
    x = torch.randn(4, device=DEVICE, requires_grad=True)
    with gems_core.use_gems(include=OPS):
        assert {"resolve_conj", "resolve_neg"} <= set(gems_core.registered_ops())
        assert torch.resolve_conj(x) is x
        assert torch.resolve_neg(x) is x


def test_resolve_with_the_bit_set_materializes_on_aten() -> None:
    z = torch.randn(4, dtype=torch.complex64, device=DEVICE)
    y = torch.randn(4, device=DEVICE)
    with gems_core.use_gems(include=OPS):
        conj = torch.resolve_conj(z.conj())
        neg = torch.resolve_neg(torch._neg_view(y))
    assert not conj.is_conj() and torch.equal(conj, torch.conj_physical(z))
    assert not neg.is_neg() and torch.equal(neg, -y)


@pytest.mark.skipif(
    runtime.current().selection.backend.name != "cpu", reason="the cpu backend's own gate"
)
def test_cpu_backend_sends_bf16_batched_products_to_aten() -> None:
    policy = runtime.current().policy
    for op in ("bmm", "bmm.out", "baddbmm", "baddbmm.out"):
        assert "bfloat16" in (policy.gate_for(op) or ())
    a, b = torch.randn(2, 16, 16).bfloat16(), torch.randn(2, 16, 16).bfloat16()
    with gems_core.use_gems(include=OPS):
        got = torch.bmm(a, b)
    assert torch.equal(got, torch.bmm(a, b))
