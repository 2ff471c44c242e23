"""The NVIDIA backend's Hopper attention kernel (``gems_backend_nvidia.attention_sm90``, the
``attention_forward`` variant): its ahead-of-time compile for sm_90 (upstream Triton compiles
for it on any machine), which inputs it takes, and, on a Hopper GPU, its results through gems'
SDPA against float64 ATen: odd lengths (not tile multiples, L != S both ways), grouped-query
heads, ATen's (B, L, H, D) memory layout, both head dims, fp16 and bf16, a negative scale,
and the gradients of the backward that reads its log-sum-exp."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import gems_core
from kept_launches import LaunchSpy, on_hopper
from sm90_compile import compile_records

attention_sm90 = pytest.importorskip("gems_backend_nvidia.attention_sm90")

pytestmark = pytest.mark.skipif(not attention_sm90.available(), reason="this Triton has no Gluon Hopper module")

SM90_SHARED_MEMORY = 227 * 1024




@pytest.fixture(scope="module")
def compiled() -> dict[str, Any]:
    return compile_records("gems_backend_nvidia.attention_sm90", "attention_forward",
                           "scaled_dot_product_attention", "head dim 128, causal, 2 stages")


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("head_dim", attention_sm90.HEAD_DIMS)
def test_compiles_for_sm90_within_the_chip(compiled: dict[str, Any], head_dim: int, causal: bool,
                                           stages: int) -> None:
    # as the compile tier compiles it (the backend lists the compiles; the core compiles
    # them and reads ptxas' report)
    record = compiled[f"head dim {head_dim}, {'causal' if causal else 'full'}, {stages} stages"]
    assert record["status"] == "ok", record["message"]
    assert record["shared"] <= SM90_SHARED_MEMORY
    assert record["registers"] <= attention_sm90.MAX_REGISTERS and record["spills"] == 0


def test_compiled_kernel_is_the_warp_specialized_pipeline(compiled: dict[str, Any]) -> None:
    ptx = compiled["ptx"]
    # asynchronous tensor-core products, bulk tensor copies, and the register rebalance of
    # the warp-specialized roles
    assert ptx["wgmma"] and ptx["bulk_copies"] and ptx["setmaxnreg"]
    assert ptx["overlapped_waits"] >= 2  # the scores overlap the previous P V
    assert compiled["none_for"] == [0, 0]  # nothing listed for sm_80 or AMD


def test_describable_needs_contiguous_rows_and_16_byte_alignment() -> None:
    ok = torch.empty(2, 3, 10, 64, dtype=torch.bfloat16)
    assert attention_sm90._describable(ok)
    assert attention_sm90._describable(ok.transpose(1, 2))  # ATen's (B, L, H, D) memory
    assert not attention_sm90._describable(torch.empty(1, 1, 10, 65, dtype=torch.bfloat16)[..., :64])
    assert not attention_sm90._describable(torch.empty(1, 1, 64, 10, dtype=torch.bfloat16).transpose(2, 3))
    shifted = torch.empty(1000, dtype=torch.bfloat16)[1:641].view(1, 1, 10, 64)
    assert not attention_sm90._describable(shifted)


def test_declines_what_it_does_not_serve_on_this_machine() -> None:
    q = torch.randn(1, 2, 32, 64, dtype=torch.bfloat16)
    out, lse = torch.empty_like(q), torch.empty(2, 32)
    assert attention_sm90.attention_forward(q, q, q, out, lse, True, 1.0) is False  # CPU tensors


# --- on a Hopper GPU --------------------------------------------------------------------------


def _spy_launches(monkeypatch: pytest.MonkeyPatch) -> LaunchSpy:
    """The kernel's launches (first launches through Triton and later ones through the kept
    launcher alike), with the work bound lifted for these small shapes."""
    from gems_core import plan_cache

    monkeypatch.setattr(attention_sm90, "MIN_WORK", 0)
    plan_cache.clear_all()  # the native layer's recipes too: calls of these signatures run Python again
    return LaunchSpy(monkeypatch, attention_sm90)


#: name -> (B, H, HKV, L, S, D, causal, dtype, ATen's (B, L, H, D) memory, scale)
CASES: dict[str, tuple[Any, ...]] = {
    "tile multiples": (2, 4, 4, 256, 256, 128, True, torch.bfloat16, False, None),
    "gqa odd lengths": (1, 8, 2, 200, 200, 128, True, torch.float16, True, None),
    "full L<S d64": (2, 4, 2, 77, 333, 64, False, torch.bfloat16, True, None),
    "causal L>S": (1, 4, 4, 300, 130, 128, True, torch.bfloat16, False, None),
    "causal L<S d64": (1, 2, 2, 130, 400, 64, True, torch.float16, False, None),
    "negative scale": (1, 4, 1, 150, 150, 128, False, torch.bfloat16, True, -0.07),
}


def _make(b: int, h: int, hkv: int, lq: int, s: int, d: int, dtype: torch.dtype, blhd: bool,
          seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(lq * 7 + s + 1000 * seed)

    def one(heads: int, rows: int) -> torch.Tensor:
        if blhd:  # (B, L, H, D) memory seen as (B, H, L, D), as a projection's output is
            return torch.randn(b, rows, heads, d, generator=g).to("cuda", dtype).transpose(1, 2)
        return torch.randn(b, heads, rows, d, generator=g).to("cuda", dtype)

    return [one(h, lq), one(hkv, s), one(hkv, s)]


def _same_layout(a: torch.Tensor) -> torch.Tensor:
    """A copy of ``a`` with its strides (``clone`` makes a tensor with gaps contiguous)."""
    copy = torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device)
    return copy.copy_(a.detach())


def _bound(aten: float, dtype: torch.dtype) -> float:
    """gems' largest error allowed: twice ATen's own 16-bit error against float64, plus a few
    units in the last place of outputs near 1 (both round P and the output to 16 bits, and
    ATen's backend may round differently: its math fallback keeps more bits). ATen's error
    may be NaN: with a negative scale its 16-bit CUDA backends returned NaN on the H100
    (torch 2.11); the bound is then the 16-bit term alone."""
    return (2 * aten if math.isfinite(aten) else 0.0) + (1.6e-2 if dtype == torch.bfloat16 else 2e-3)


def _errors(args: list[torch.Tensor], kwargs: dict[str, Any], requires_grad: bool = False) -> tuple[Any, Any]:
    """(gems' error, ATen's error) against float64 ATen: output, and gradients when asked."""
    ref_args = [a.detach().double().requires_grad_(requires_grad) for a in args]
    low_args = [_same_layout(a).requires_grad_(requires_grad) for a in args]
    gems_args = [_same_layout(a).requires_grad_(requires_grad) for a in args]
    ref = F.scaled_dot_product_attention(*ref_args, **kwargs)
    low = F.scaled_dot_product_attention(*low_args, **kwargs)
    with gems_core.use_gems():
        mine = F.scaled_dot_product_attention(*gems_args, **kwargs)
        if requires_grad:
            grad = torch.randn_like(ref)
            mine.backward(grad.to(mine.dtype))
    if not requires_grad:
        return (mine.double() - ref).abs().max().item(), (low.double() - ref).abs().max().item()
    ref.backward(grad)
    low.backward(grad.to(low.dtype))
    return ([(a.grad.double() - r.grad).abs().max().item() for a, r in zip(gems_args, ref_args)],
            [(a.grad.double() - r.grad).abs().max().item() for a, r in zip(low_args, ref_args)])


@on_hopper
@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_float64_aten_through_gems(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    b, h, hkv, lq, s, d, causal, dtype, blhd, scale = CASES[name]
    spy = _spy_launches(monkeypatch)
    args = _make(b, h, hkv, lq, s, d, dtype, blhd)
    kwargs = {"is_causal": causal, "enable_gqa": h != hkv, "scale": scale}
    mine, aten = _errors(args, kwargs)
    assert spy.grids == [(math.ceil(lq / attention_sm90.BLOCK_M), b * h)]
    assert mine <= _bound(aten, dtype), (mine, aten)


@on_hopper
def test_repeat_calls_take_the_kept_launcher_then_the_native_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first call compiles through Triton, the second goes to the kept launch (recorded
    by the native layer with its tensor maps), later ones replay from C++ over each call's
    new tensors."""
    spy = _spy_launches(monkeypatch)
    kwargs = {"is_causal": True, "enable_gqa": True}
    calls = []
    with gems_core.use_gems():  # one registration of the layer for all five calls
        for seed in range(5):
            args = _make(2, 4, 2, 300, 300, 128, torch.bfloat16, True, seed=seed)
            calls.append((args, F.scaled_dot_product_attention(*args, **kwargs)))
        stats = {s["op"]: s for s in gems_core.dispatch.native_stats() if not s.get("gate")}
    results = []
    for args, mine in calls:
        ref = F.scaled_dot_product_attention(*[a.double() for a in args], **kwargs)
        low = F.scaled_dot_product_attention(*args, **kwargs)
        results.append(((mine.double() - ref).abs().max().item(), (low.double() - ref).abs().max().item()))
    assert spy.through_triton == [(3, 8)] and spy.launcher.kept() == 1
    sdpa = stats.get("scaled_dot_product_attention")
    if sdpa is None:  # no native layer: every call through the kept launch
        assert spy.grids == [(3, 8)] * 5
    else:
        assert spy.grids == [(3, 8)] * 2 and sdpa["hits"] >= 1 and sdpa["refused"] == 0
    for mine, aten in results:
        assert mine <= _bound(aten, torch.bfloat16), results


def test_declines_calls_with_little_work() -> None:
    # the Llama prefill's attention (batch 2, 32 heads, 512 causal tokens) is left to the
    # portable kernel; the 2048-token benchmark call is taken
    assert attention_sm90.attended_pairs(64, 512, 512, True) < attention_sm90.MIN_WORK
    assert attention_sm90.attended_pairs(128, 2048, 2048, True) >= attention_sm90.MIN_WORK
    assert attention_sm90.attended_pairs(1, 5, 3, True) == 3 * 4 // 2 + 2 * 3  # rows past S attend all keys
    assert attention_sm90.attended_pairs(1, 3, 5, True) == 6
    assert attention_sm90.attended_pairs(2, 3, 5, False) == 30
    q = torch.randn(2, 32, 512, 128, dtype=torch.bfloat16)
    assert attention_sm90.attention_forward(q, q, q, torch.empty_like(q), torch.empty(64, 512), True, 1.0) is False


@on_hopper
def test_gradients_from_its_log_sum_exp_match_float64_aten(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = _spy_launches(monkeypatch)
    args = _make(1, 4, 2, 190, 190, 128, torch.bfloat16, True)
    mine, aten = _errors(args, {"is_causal": True, "enable_gqa": True}, requires_grad=True)
    assert len(spy.grids) == 1
    for got, theirs in zip(mine, aten):
        assert got <= _bound(theirs, torch.bfloat16), (mine, aten)


@on_hopper
def test_inputs_it_cannot_describe_run_on_the_core_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = _spy_launches(monkeypatch)
    q, k, v = _make(1, 2, 2, 100, 100, 64, torch.bfloat16, False)
    padded = torch.zeros(1, 2, 100, 68, dtype=torch.bfloat16, device="cuda")[..., :64]
    padded.copy_(q)  # rows of 136 bytes, not a multiple of 16: no tensor descriptor
    mine, aten = _errors([padded, k, v], {"is_causal": True})
    assert spy.grids == []
    assert mine <= _bound(aten, torch.bfloat16), (mine, aten)
