"""scaled_dot_product_attention beyond the op cases: gradients against float64 ATen, ATen's
errors, what is left to ATen (dropout, a mask that needs a gradient), the split-key decoding
path, and proof that gems' kernels run in both directions.

Shapes are small (the CPU interpreter is slow) but odd: lengths that are not tile multiples,
L != S both ways, a head dim that is not a power of two."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import gems_core
from gems_core import runtime, tuning
from gems_core.contract import KernelConfig
from gems_core.registry import load_ops

OPS = ("scaled_dot_product_attention",)
#: (atol, rtol) of float32 gradients against float64 (sums over at most ~100 terms)
GRAD_TOLERANCE = (2e-5, 1e-4)


def _spy(monkeypatch: pytest.MonkeyPatch, module_name: str, name: str) -> list[tuple[Any, ...]]:
    """Record the grid of each launch of ``module_name``.``name`` (a LaunchCache)."""
    load_ops()
    module = __import__(f"gems_core.ops.{module_name}", fromlist=[name])
    original = getattr(module, name)
    grids: list[tuple[Any, ...]] = []

    def record(grid: tuple[Any, ...], *args: Any, **kwargs: Any) -> Any:
        grids.append(grid)
        return original(grid, *args, **kwargs)

    monkeypatch.setattr(module, name, record)
    return grids


def _inputs(b: int, h: int, hkv: int, lq: int, s: int, e: int, ev: int | None = None,
            dtype: torch.dtype = torch.float32, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g).to(dtype)
            for shape in ((b, h, lq, e), (b, hkv, s, e), (b, hkv, s, ev or e))]


GRAD_CASES: dict[str, tuple[tuple[int, ...], dict[str, Any]]] = {
    "plain": ((2, 2, 2, 37, 29, 24), {}),
    "causal L<S": ((1, 2, 2, 19, 70, 32, 16), {"is_causal": True}),
    "gqa causal L>S": ((1, 4, 2, 45, 21, 16), {"is_causal": True, "enable_gqa": True}),
    "bool mask": ((1, 2, 2, 9, 33, 16), {"attn_mask": torch.rand(9, 33) > 0.4}),
    "float mask": ((2, 2, 2, 9, 33, 16), {"attn_mask": torch.randn(2, 1, 9, 33)}),
    "decode": ((1, 4, 1, 1, 150, 32), {"enable_gqa": True}),
}


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_gradients_match_float64_aten(name: str) -> None:
    shape, kwargs = GRAD_CASES[name]
    inputs = _inputs(*shape, seed=len(name))
    ref_kwargs = {k: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                  for k, v in kwargs.items()}
    ref_leaves = [t.double().requires_grad_() for t in inputs]
    ref_out = F.scaled_dot_product_attention(*ref_leaves, **ref_kwargs)
    weights = torch.randn(ref_out.shape, generator=torch.Generator().manual_seed(1))
    expected = torch.autograd.grad(ref_out, ref_leaves, weights.double())
    leaves = [t.clone().requires_grad_() for t in inputs]
    with gems_core.use_gems(include=OPS):
        got = torch.autograd.grad(F.scaled_dot_product_attention(*leaves, **kwargs), leaves, weights)
    atol, rtol = GRAD_TOLERANCE
    for label, g, e in zip("qkv", got, expected):
        torch.testing.assert_close(g.double(), e, atol=atol, rtol=rtol, msg=lambda m, label=label: f"d{label}: {m}")


def test_gems_kernels_run_forward_and_backward(monkeypatch: pytest.MonkeyPatch) -> None:
    forward = _spy(monkeypatch, "attention", "_forward")
    dkdv = _spy(monkeypatch, "attention_backward", "_dkdv")
    dq = _spy(monkeypatch, "attention_backward", "_dq")
    q, k, v = (t.requires_grad_() for t in _inputs(1, 4, 2, 33, 17, 16))
    with gems_core.use_gems(include=OPS):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        out.sum().backward()
    assert forward and dkdv and dq, "a gems attention kernel did not run"
    assert dkdv[0][0] == 2 and dq[0][0] == 4  # programs per key/value head and per query head
    assert q.grad is not None and k.grad is not None and v.grad is not None


def test_decode_splits_the_keys_and_combines(monkeypatch: pytest.MonkeyPatch) -> None:
    """One query over 70 keys, 16 at a time: split over 3 programs (two key blocks each,
    the last one short), then combined by log-sum-exp."""
    decode = _spy(monkeypatch, "attention", "_decode")
    forward = _spy(monkeypatch, "attention", "_forward")
    split = KernelConfig({"BLOCK_N": 16, "SPLITS": 3})
    q, k, v = _inputs(2, 2, 2, 1, 70, 16)
    mask = torch.rand(2, 1, 1, 70) > 0.3
    with tuning.forcing(lambda t: split if t.name == "attention_decode" else t.defaults[0]):
        with gems_core.use_gems(include=OPS):
            got = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert decode == [(4, 3)] and not forward
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


def test_causal_single_query_attends_the_first_key() -> None:
    """ATen's causal mask is top-left aligned: with L == 1 only key 0 is attended."""
    q, k, v = _inputs(1, 2, 2, 1, 150, 16)
    with gems_core.use_gems(include=OPS):
        got = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(got, v[:, :, :1])


def _outcome(fn: Callable[[], Any]) -> str:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the error itself is what is compared
        return type(exc).__name__
    return "ok"


Q, K, V = _inputs(1, 4, 2, 5, 7, 16)
ERRORS = {
    "head dims differ": lambda: F.scaled_dot_product_attention(Q, K[..., :8], V),
    "mask shape": lambda: F.scaled_dot_product_attention(Q, K, K, attn_mask=torch.ones(6, 7, dtype=torch.bool)),
    "mask of one dim": lambda: F.scaled_dot_product_attention(Q, K, K, attn_mask=torch.zeros(7)),
    "mask and causal": lambda: F.scaled_dot_product_attention(Q, K, K, attn_mask=torch.zeros(5, 7), is_causal=True),
    "heads without gqa": lambda: F.scaled_dot_product_attention(Q, K, V),
    "heads not a multiple": lambda: F.scaled_dot_product_attention(Q[:, :3], K, V, enable_gqa=True),
    "dtypes differ": lambda: F.scaled_dot_product_attention(Q, K.half(), V),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_invalid_calls_raise_atens_error(name: str) -> None:
    expected = _outcome(ERRORS[name])
    assert expected != "ok"
    with gems_core.use_gems(include=OPS):
        assert _outcome(ERRORS[name]) == expected


def test_dropout_goes_to_aten_with_one_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    from gems_core.ops import attention

    monkeypatch.setattr(attention, "_dropout_noted", False)
    forward = _spy(monkeypatch, "attention", "_forward")
    q, k, v = _inputs(1, 2, 2, 5, 7, 16)
    with gems_core.use_gems(include=OPS):
        with pytest.warns(RuntimeWarning, match="dropout"):
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert not forward and out.shape == (1, 2, 5, 16)


def test_mask_that_needs_a_gradient_goes_to_aten(monkeypatch: pytest.MonkeyPatch) -> None:
    forward = _spy(monkeypatch, "attention", "_forward")
    q, k, v = _inputs(1, 2, 2, 5, 7, 16)
    mask = torch.randn(5, 7, requires_grad=True)
    with gems_core.use_gems(include=OPS):
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum().backward()
    assert not forward and mask.grad is not None


def test_cpu_backend_sends_bf16_attention_to_aten(monkeypatch: pytest.MonkeyPatch) -> None:
    if runtime.current().selection.backend.name != "cpu":
        pytest.skip("the bf16 gate is the cpu backend's")
    assert "bfloat16" in (runtime.current().policy.gate_for(OPS[0]) or ())
    forward = _spy(monkeypatch, "attention", "_forward")
    q, k, v = _inputs(1, 2, 2, 5, 7, 16, dtype=torch.bfloat16)
    with gems_core.use_gems(include=OPS):
        got = F.scaled_dot_product_attention(q, k, v)
    assert not forward
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v))
