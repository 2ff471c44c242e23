"""Variant points (gems_core.variants): a backend's own kernel at a point of the core's.

The ``attention_forward`` point, with fake variants installed in the running process's policy:
one that serves (its output is returned and gems' backward runs from its log-sum-exp), one
that declines and one that raises (the portable kernel serves both), and the calls that are
never offered (a mask, the decode path). Then the hook itself through throwaway plugins in
subprocesses (``info`` lists a variant; a bad answer is a clear error), and the NVIDIA
backend's answer per arch.

Shapes are tiny: the portable kernels run in the CPU interpreter.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from plugin_factory import FakePlugin, run_code, run_info, write_site
from test_attention import DEVICE, GRAD_TOLERANCE, OPS, OUT_TOLERANCE, _inputs, _reference, _spy
from test_plugins import assert_selection_error, info_json

import gems_core
from gems_core import KernelVariant, runtime, variants

POINT = "attention_forward"
LOG2E = 1.0 / math.log(2)


def _attention64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                 qk_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, base-2 lse) of the point's contract in float64: scores ``qk_scale * q @ k^T`` in
    base 2, query head h reading key/value head h // (H // HKV), causal top-left."""
    q, k, v = (t.double() for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = (t.repeat_interleave(group, dim=1) for t in (k, v))
    scores = qk_scale * q @ k.transpose(-2, -1)
    if causal:
        scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(scores / LOG2E, dim=-1) * LOG2E  # log2 of the sum of exp2(scores)
    return torch.exp2(scores - lse.unsqueeze(-1)) @ v, lse


class FakeVariant:
    """An ``attention_forward`` variant that records each call, then serves it in float64
    (``mode="serve"``; ``lse_base`` e is a wrong lse convention when not 2), declines it
    ("decline") or writes garbage and raises ("raise")."""

    def __init__(self, mode: str = "serve", lse_base: float = 2.0) -> None:
        self.mode, self.lse_base = mode, lse_base
        self.calls: list[dict[str, Any]] = []

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
                 causal: bool, qk_scale: float) -> bool:
        self.calls.append({"q": q.detach().clone(), "k": k.shape, "v": v.shape, "out": out, "lse": lse,
                           "causal": causal, "qk_scale": qk_scale})
        if self.mode == "decline":
            return False
        if self.mode == "raise":
            out.fill_(float("nan"))
            lse.fill_(float("nan"))
            raise RuntimeError("fake kernel crashed")
        result, row_lse = _attention64(q, k, v, causal, qk_scale)
        out.copy_(result)
        lse.copy_((row_lse / math.log2(self.lse_base)).reshape(lse.shape))
        return True


def _install(monkeypatch: pytest.MonkeyPatch, fn: Any) -> None:
    """``fn`` as the running backend's ``attention_forward`` variant, with no point turned off;
    both undone after the test."""
    rt = runtime.current()
    monkeypatch.setattr(rt, "policy", dataclasses.replace(rt.policy, variants={POINT: KernelVariant(POINT, fn)}))
    monkeypatch.setattr(variants, "_turned_off", set())


def _gradients(inputs: list[torch.Tensor], **kwargs: Any) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
    """(gems' gradients, float64 ATen's) of attention over ``inputs`` for random weights."""
    ref_leaves = [t.cpu().double().requires_grad_() for t in inputs]
    ref_out = _reference(*ref_leaves, **kwargs)
    weights = torch.randn(ref_out.shape, generator=torch.Generator().manual_seed(1))
    expected = torch.autograd.grad(ref_out, ref_leaves, weights.double())
    leaves = [t.clone().requires_grad_() for t in inputs]
    with gems_core.use_gems(include=OPS):
        got = torch.autograd.grad(F.scaled_dot_product_attention(*leaves, **kwargs), leaves, weights.to(DEVICE))
    return got, expected


def _assert_gradients_close(got: tuple[torch.Tensor, ...], expected: tuple[torch.Tensor, ...]) -> None:
    atol, rtol = GRAD_TOLERANCE
    for label, g, e in zip("qkv", got, expected):
        torch.testing.assert_close(g.cpu().double(), e, atol=atol, rtol=rtol,
                                   msg=lambda m, label=label: f"d{label}: {m}")


def _assert_matches_aten(got: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs: Any) -> None:
    atol, rtol = OUT_TOLERANCE
    torch.testing.assert_close(got.cpu().double(), _reference(q, k, v, **kwargs), atol=atol, rtol=rtol)


# ---------------------------------------------------------------- a variant that serves

#: (B, H, HKV, L, S, D) and the call's arguments (the float64 reference of a negative scale
#: is written out, without GQA: ATen's gives NaN)
SERVED_CASES = {
    "gqa causal L<S": ((1, 2, 1, 20, 27, 16), {"is_causal": True, "scale": 0.3, "enable_gqa": True}),
    "negative scale": ((1, 2, 2, 20, 20, 16), {"scale": -0.3}),
    "gqa L>S": ((1, 4, 2, 17, 9, 16), {"enable_gqa": True}),
}


@pytest.mark.parametrize("name", sorted(SERVED_CASES))
def test_serving_variant_gives_the_output_and_the_lse_for_the_backward(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    shape, kwargs = SERVED_CASES[name]
    fake = FakeVariant()
    _install(monkeypatch, fake)
    forward = _spy(monkeypatch, "attention_prefill", "_forward")
    dq = _spy(monkeypatch, "attention_backward", "_dq")
    q, k, v = _inputs(*shape, seed=len(name))

    with torch.no_grad(), gems_core.use_gems(include=OPS):
        got = F.scaled_dot_product_attention(q, k, v, **kwargs)
    assert len(fake.calls) == 1 and not forward, "the portable kernel ran"
    call = fake.calls[0]
    assert got.data_ptr() == call["out"].data_ptr()  # the variant's output is the result
    _assert_matches_aten(got, q, k, v, **kwargs)
    scale = kwargs.get("scale", 1 / math.sqrt(shape[-1]))
    assert call["qk_scale"] == pytest.approx(abs(scale) * LOG2E, rel=1e-12)
    assert call["causal"] is kwargs.get("is_causal", False)
    # a negative scale reaches the variant as the queries' sign
    torch.testing.assert_close(call["q"], q if scale > 0 else -q, atol=0, rtol=0)
    assert (call["k"], call["v"]) == (k.shape, v.shape)
    b, h, _, lq, _, d = shape
    assert call["out"].shape == (b, h, lq, d) and call["lse"].shape == (b * h, lq)
    assert call["lse"].dtype == torch.float32

    got_grads, expected_grads = _gradients([q, k, v], **kwargs)
    assert len(fake.calls) == 2 and not forward and dq, "gems' backward did not run from the variant's forward"
    _assert_gradients_close(got_grads, expected_grads)


def test_backward_reads_the_variants_lse(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gradients above prove the lse contract: a natural-log lse (right output, wrong
    lse) gives wrong ones."""
    _install(monkeypatch, FakeVariant(lse_base=math.e))
    got, expected = _gradients(_inputs(1, 2, 1, 20, 20, 16), is_causal=True, enable_gqa=True)
    with pytest.raises(AssertionError):
        _assert_gradients_close(got, expected)


# ---------------------------------------------------------------- declining and failing variants


def test_declining_variant_leaves_the_call_to_the_portable_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeVariant("decline")
    _install(monkeypatch, fake)
    forward = _spy(monkeypatch, "attention_prefill", "_forward")
    q, k, v = _inputs(1, 2, 1, 20, 20, 16)
    with gems_core.use_gems(include=OPS):
        got = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    assert len(fake.calls) == 1 and forward
    _assert_matches_aten(got, q, k, v, is_causal=True, enable_gqa=True)


def test_failing_variant_warns_once_and_is_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """The failed call (its output and lse written with NaN first) goes to the portable
    kernel, gradients included; later calls are not offered."""
    fake = FakeVariant("raise")
    _install(monkeypatch, fake)
    forward = _spy(monkeypatch, "attention_prefill", "_forward")
    q, k, v = _inputs(1, 2, 1, 20, 20, 16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got, expected = _gradients([q, k, v], is_causal=True, enable_gqa=True)
        with gems_core.use_gems(include=OPS):
            again = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning) and POINT in str(w.message)]
    assert messages == [
        f"gems: the {gems_core.backend().name} backend's attention_forward variant failed "
        "(RuntimeError: fake kernel crashed); the portable kernel serves this point from now on"
    ]
    assert len(fake.calls) == 1 and len(forward) == 2
    assert POINT in variants._turned_off and variants.variant(POINT) is None
    _assert_gradients_close(got, expected)
    _assert_matches_aten(again, q, k, v, is_causal=True, enable_gqa=True)


# ---------------------------------------------------------------- which calls are offered

#: (B, H, HKV, L, S, D[, DV]), the call's arguments, whether the variant is offered the call
OFFER_CASES = {
    "bool mask": ((1, 2, 2, 20, 20, 16), {"attn_mask": torch.rand(20, 20) > 0.3}, False),
    "float mask": ((1, 2, 2, 20, 20, 16), {"attn_mask": torch.randn(1, 1, 20, 20)}, False),
    "decode L=1": ((1, 4, 2, 1, 20, 16), {"enable_gqa": True}, False),
    "decode L=16": ((1, 2, 2, 16, 20, 16), {}, False),
    "L=17": ((1, 2, 2, 17, 20, 16), {}, True),
    "causal L=1": ((1, 2, 2, 1, 20, 16), {"is_causal": True}, True),
    "3-d": ((2, None, None, 20, 20, 16), {}, True),
    "value head dim 8": ((1, 2, 2, 20, 20, 16, 8), {}, True),
}


@pytest.mark.parametrize("name", list(OFFER_CASES))
def test_which_calls_are_offered(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls without a mask on the prefill path (more than 16 queries, or causal) only."""
    (b, h, hkv, *lengths_and_dims), kwargs, offered = OFFER_CASES[name]
    fake = FakeVariant()
    _install(monkeypatch, fake)
    if h is None:  # (B, L, E): one head, as the kernels see it
        q, k, v = (t.squeeze(1) for t in _inputs(b, 1, 1, *lengths_and_dims))
    else:
        q, k, v = _inputs(b, h, hkv, *lengths_and_dims)
    with gems_core.use_gems(include=OPS):
        got = F.scaled_dot_product_attention(q, k, v, **{key: value.to(DEVICE) if isinstance(value, torch.Tensor)
                                                         else value for key, value in kwargs.items()})
    assert len(fake.calls) == int(offered)
    _assert_matches_aten(got, q, k, v, **kwargs)


# ---------------------------------------------------------------- the hook, through plugins

VARIANT_HOOKS = """
    from gems_core import KernelVariant

    CALLS = []

    def attention_forward(q, k, v, out, lse, causal, qk_scale):
        CALLS.append((tuple(q.shape), causal))
        return False

    @hookimpl
    def gems_kernel_variants(arch):
        return [{entry}]
"""
GOOD_ENTRY = 'KernelVariant("attention_forward", attention_forward, reason=f"fake kernel for arch {arch}")'
EMULATE = {"GEMS_DEVICE": "varchip", "GEMS_EMULATE": "1"}


def _variant_chip(entry: str) -> FakePlugin:
    return FakePlugin("varchip", hooks=VARIANT_HOOKS.replace("{entry}", entry))


def test_cpu_backend_has_no_variants() -> None:
    if runtime.current().selection.backend.name != "cpu":
        pytest.skip("the cpu backend's policy")
    assert runtime.current().policy.variants == {}
    assert POINT in variants.POINTS


def test_info_lists_the_backends_variant(tmp_path) -> None:
    site = write_site(tmp_path, _variant_chip(GOOD_ENTRY))
    report = info_json(site, **EMULATE)
    assert report["policy"]["variants"] == [
        {"point": POINT, "fn": "gems_test_backend_varchip.attention_forward", "reason": "fake kernel for arch 90"}
    ]
    text = run_info(site=site, env=EMULATE)
    assert text.returncode == 0, text.stderr
    assert ("  kernel variants:\n    attention_forward: gems_test_backend_varchip.attention_forward"
            "  (fake kernel for arch 90)") in text.stdout


def test_emulated_backends_variant_is_offered_prefill_calls(tmp_path) -> None:
    code = """
        import torch, torch.nn.functional as F, gems_core
        import gems_test_backend_varchip as chip
        q, k, v = (torch.randn(1, 2, 20, 16, device=gems_core.device) for _ in range(3))
        with gems_core.use_gems(include="scaled_dot_product_attention"):
            got = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            F.scaled_dot_product_attention(q[:, :, :1], k, v)  # decode: not offered
        error = (got - F.scaled_dot_product_attention(q, k, v, is_causal=True)).abs().max().item()
        print("calls:", chip.CALLS, "error below 1e-5:", error < 1e-5)
    """
    result = run_code(code, site=write_site(tmp_path, _variant_chip(GOOD_ENTRY)), env=EMULATE)
    assert result.returncode == 0, result.stderr
    assert "calls: [((1, 2, 20, 16), True)] error below 1e-5: True" in result.stdout


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ('KernelVariant("attention_backward", attention_forward)', "'attention_backward'"),
        ('("attention_forward", attention_forward)', "is not a KernelVariant"),
    ],
    ids=["unknown point", "not a KernelVariant"],
)
def test_bad_variant_answer_is_left_out_with_a_warning(entry: str, problem: str, tmp_path) -> None:
    """A malformed answer of gems_kernel_variants is left out at load, with a warning that
    names the backend and the hook, and info lists it under the policy's errors."""
    result = run_info(site=write_site(tmp_path, _variant_chip(entry)), env=EMULATE)
    assert result.returncode == 0, result.stderr
    assert "gems backend 'varchip', gems_kernel_variants()" in result.stderr + result.stdout
    errors = result.stdout.split("POLICY ERRORS", 1)[1]
    assert "gems_kernel_variants()" in errors and problem in errors
    assert "kernel variants:            none" in result.stdout


# ---------------------------------------------------------------- the NVIDIA backend's answer


@pytest.mark.parametrize(("arch", "offered"), [("sm_90", True), ("90", True), ("sm_80", False), ("sm_89", False),
                                               ("sm_100", False), ("sm_120", False)])
def test_nvidia_offers_its_kernels_on_hopper_only(arch: str, offered: bool) -> None:
    from gems_backend_nvidia import attention_sm90, gemm_sm90, plugin

    if offered and not attention_sm90.available():
        pytest.skip("the installed Triton has no Gluon Hopper module")
    answer = list(plugin.gems_kernel_variants(arch=arch))
    if not offered:
        assert answer == []
        return
    assert [(entry.point, entry.fn) for entry in answer] == [(POINT, attention_sm90.attention_forward),
                                                             ("mm", gemm_sm90.mm)]
    assert all(isinstance(entry, KernelVariant) and entry.reason for entry in answer)


def test_nvidia_attention_kernel_declines_cpu_tensors() -> None:
    """Emulating the NVIDIA backend on a CPU host offers the Gluon kernel CPU tensors: it
    declines them, writing nothing."""
    from gems_backend_nvidia import attention_sm90

    q, k, v = (torch.randn(1, 2, 20, 64, dtype=torch.float16) for _ in range(3))
    out, lse = torch.zeros_like(q), torch.zeros(2, 20)
    assert attention_sm90.attention_forward(q, k, v, out, lse, True, 0.18) is False
    assert not out.any() and not lse.any()
