"""scaled_dot_product_attention beyond the op cases: gradients against float64 ATen, ATen's
errors, dropout, what is left to ATen (a mask that needs a gradient), the split-key decoding
path, and proof that gems' kernels run in both directions.

Shapes are small (the CPU interpreter is slow) but odd: lengths that are not tile multiples,
L != S both ways, a head dim that is not a power of two."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import gems_core
from gems_core import runtime, tuning
from gems_core.contract import KernelConfig
from gems_core.registry import load_ops

DEVICE = torch.device(gems_core.device)
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


def _module(name: str) -> Any:
    """gems_core.ops.``name``, imported after the backend is selected (its kernels are
    defined for the interpreter or the compiler at import)."""
    load_ops()
    return __import__(f"gems_core.ops.{name}", fromlist=["__name__"])


def _inputs(b: int, h: int, hkv: int, lq: int, s: int, e: int, ev: int | None = None,
            dtype: torch.dtype = torch.float32, seed: int = 0) -> list[torch.Tensor]:
    """Random q, k, v on the device; the test is skipped where the backend leaves attention
    in ``dtype`` to ATen (the NVIDIA backend's float32): these tests are of gems' kernels."""
    if runtime.current().policy.leaves_to_aten(OPS[0], str(dtype).removeprefix("torch.")):
        pytest.skip(f"the {gems_core.backend().name} backend leaves {dtype} attention to ATen")
    return _random_inputs(b, h, hkv, lq, s, e, ev, dtype, seed)


def _random_inputs(b: int, h: int, hkv: int, lq: int, s: int, e: int, ev: int | None = None,
                   dtype: torch.dtype = torch.float32, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g).to(DEVICE, dtype)
            for shape in ((b, h, lq, e), (b, hkv, s, e), (b, hkv, s, ev or e))]


def _on_device(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with their tensors (masks) on the gems device."""
    return {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}


GRAD_CASES: dict[str, tuple[tuple[int, ...], dict[str, Any]]] = {
    "plain": ((2, 2, 2, 37, 29, 24), {}),
    "causal L<S": ((1, 2, 2, 19, 70, 32, 16), {"is_causal": True}),
    "gqa causal L>S": ((1, 4, 2, 45, 21, 16), {"is_causal": True, "enable_gqa": True}),
    "bool mask": ((1, 2, 2, 9, 33, 16), {"attn_mask": torch.rand(9, 33) > 0.4}),
    "float mask": ((2, 2, 2, 9, 33, 16), {"attn_mask": torch.randn(2, 1, 9, 33)}),
    "decode": ((1, 4, 1, 1, 150, 32), {"enable_gqa": True}),
    "few queries masked": ((1, 4, 2, 3, 40, 16), {"enable_gqa": True, "attn_mask": torch.rand(3, 40) > 0.3}),
}


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_gradients_match_float64_aten(name: str) -> None:
    shape, kwargs = GRAD_CASES[name]
    inputs = _inputs(*shape, seed=len(name))
    ref_kwargs = {k: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                  for k, v in kwargs.items()}
    ref_leaves = [t.cpu().double().requires_grad_() for t in inputs]
    ref_out = F.scaled_dot_product_attention(*ref_leaves, **ref_kwargs)
    weights = torch.randn(ref_out.shape, generator=torch.Generator().manual_seed(1))
    expected = torch.autograd.grad(ref_out, ref_leaves, weights.double())
    leaves = [t.clone().requires_grad_() for t in inputs]
    with gems_core.use_gems(include=OPS):
        got = torch.autograd.grad(F.scaled_dot_product_attention(*leaves, **_on_device(kwargs)), leaves,
                                  weights.to(DEVICE))
    atol, rtol = GRAD_TOLERANCE
    for label, g, e in zip("qkv", got, expected):
        torch.testing.assert_close(g.cpu().double(), e, atol=atol, rtol=rtol,
                                   msg=lambda m, label=label: f"d{label}: {m}")


def test_gems_kernels_run_forward_and_backward(monkeypatch: pytest.MonkeyPatch) -> None:
    forward = _spy(monkeypatch, "attention_prefill", "_forward")
    dkdv = _spy(monkeypatch, "attention_backward", "_dkdv")
    dq = _spy(monkeypatch, "attention_backward", "_dq")
    q, k, v = (t.requires_grad_() for t in _inputs(1, 4, 2, 33, 17, 16))
    with gems_core.use_gems(include=OPS):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        out.sum().backward()
    assert forward and dkdv and dq, "a gems attention kernel did not run"
    assert dkdv[0][0] == 2 and dq[0][0] == 4  # programs per key/value head and per query head
    assert q.grad is not None and k.grad is not None and v.grad is not None


def _forcing(**configs: KernelConfig) -> Any:
    """Force the configs of the named tunables (others keep their first config)."""
    return tuning.forcing(lambda t: configs.get(t.name, t.configs()[0]))


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    """ATen in float64 on the CPU (an additive mask too). ATen's float64 path scales q and k
    by sqrt(scale) each, NaN for a negative scale: that case is written out."""
    q, k, v = q.cpu().double(), k.cpu().double(), v.cpu().double()
    kwargs = {k_: v_.cpu() if isinstance(v_, torch.Tensor) else v_ for k_, v_ in kwargs.items()}
    kwargs = {k_: v_.double() if isinstance(v_, torch.Tensor) and v_.is_floating_point() else v_
              for k_, v_ in kwargs.items()}
    scale = kwargs.get("scale")
    if scale is None or scale >= 0:
        return F.scaled_dot_product_attention(q, k, v, **kwargs)
    assert set(kwargs) <= {"scale", "is_causal"}
    scores = scale * q @ k.transpose(-2, -1)
    if kwargs.get("is_causal"):
        scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(-1) @ v


#: (atol, rtol) of a float32 output against float64
OUT_TOLERANCE = (2e-6, 2e-5)
SMALL_DECODE_BLOCKS = KernelConfig({"BLOCK_N": 16})


@pytest.mark.parametrize("merge", ["fused", "kernel"])
def test_decode_splits_the_keys_and_combines(merge: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One query per head over 70 keys, 16 at a time, 4 programs (batch x key/value head)
    on the interpreter's 8 compute units x 5 resident programs: 5 key blocks allow at most
    5 splits, which fill the 40 slots best, so 5 splits of one block (the last one short).
    The splits are merged by the last one to finish in each row block (fused) or by a
    combining program per row block (kernel)."""
    monkeypatch.setenv("GEMS_DECODE_MERGE", merge)
    decode = _spy(monkeypatch, "attention_decode", "_decode")
    combine = _spy(monkeypatch, "attention_decode", "_combine")
    forward = _spy(monkeypatch, "attention_prefill", "_forward")
    q, k, v = _inputs(2, 2, 2, 1, 70, 16)
    mask = torch.rand(2, 1, 1, 70) > 0.3
    with _forcing(attention_decode=SMALL_DECODE_BLOCKS), gems_core.use_gems(include=OPS):
        got = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(DEVICE))
    assert decode == [(4, 5)] and combine == ([(4,)] if merge == "kernel" else []) and not forward
    expected = F.scaled_dot_product_attention(q.cpu(), k.cpu(), v.cpu(), attn_mask=mask)
    torch.testing.assert_close(got.cpu(), expected)


@pytest.mark.parametrize("fixed", [1, 2, 3])
def test_decode_config_may_fix_the_split_count(fixed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A config's SPLITS replaces the heuristic's count (5 splits for this shape, above):
    one split walks all 70 keys and writes the output itself; more are merged. The kernel
    never sees SPLITS."""
    decode = _spy(monkeypatch, "attention_decode", "_decode")
    combine = _spy(monkeypatch, "attention_decode", "_combine")
    q, k, v = _inputs(2, 4, 2, 1, 70, 16)
    mask = (torch.rand(2, 1, 1, 70, generator=torch.Generator().manual_seed(3)) > 0.3).to(DEVICE)
    config = KernelConfig({"BLOCK_N": 16, "SPLITS": fixed})
    with _forcing(attention_decode=config), gems_core.use_gems(include=OPS):
        got = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    assert decode == [(4, fixed)] and not combine
    torch.testing.assert_close(got.cpu().double(), _reference(q, k, v, attn_mask=mask, enable_gqa=True),
                               atol=OUT_TOLERANCE[0], rtol=OUT_TOLERANCE[1])


@pytest.mark.parametrize("splits", [1, 3])
def test_decode_config_rows_pad_the_program(splits: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A config's ROWS pads a program's query rows (a group of 4 heads) to 64 rows: the same
    grid (one program per batch and key/value head and split), rows past the group neither
    read nor written, the result ATen's; the kernel never sees ROWS."""
    decode = _spy(monkeypatch, "attention_decode", "_decode")
    q, k, v = _inputs(2, 8, 2, 1, 48, 16)
    config = KernelConfig({"BLOCK_N": 16, "SPLITS": splits, "ROWS": 64})
    with _forcing(attention_decode=config), gems_core.use_gems(include=OPS):
        got = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert decode == [(4, splits)]
    common = _module("attention_common")
    assert common._decode_rows(4, config) == 64 and common._decode_rows(4) == 16
    assert common._decode_rows(72, KernelConfig({"BLOCK_N": 16, "ROWS": 128})) == 64
    torch.testing.assert_close(got.cpu().double(), _reference(q, k, v, enable_gqa=True),
                               atol=OUT_TOLERANCE[0], rtol=OUT_TOLERANCE[1])


@pytest.mark.parametrize("shape", [(None, 8, 4, 1, 27), (1, 4, 1, 1, 13)], ids=["programs fill the chip", "one key block"])
def test_decode_with_one_split_writes_the_output_itself(shape: tuple[Any, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    """Enough programs to fill 0.8 of the chip's slots (the interpreter's 8 units x 5
    programs: batch 8 of 4 key/value heads) take no split; 13 keys are one block."""
    decoding = _module("attention_decode")

    decode = _spy(monkeypatch, "attention_decode", "_decode")
    combine = _spy(monkeypatch, "attention_decode", "_combine")
    b, h, hkv, lq, s = shape
    if b is None:
        blocks = {"BLOCK_D": 16, "BLOCK_DV": 16, "INPUT_PRECISION": "ieee"}
        tile = decoding._decode_tile_bytes(torch.float32, 16, blocks, False, SMALL_DECODE_BLOCKS)
        slots = runtime.compute_units(DEVICE.type, DEVICE.index) * decoding.decode_resident(
            SMALL_DECODE_BLOCKS, tile, runtime.current().limits.shared_memory_per_block)
        b = -(-int(decoding._DECODE_ONE_SPLIT * slots) // hkv)
    q, k, v = _inputs(b, h, hkv, lq, s, 16)
    with _forcing(attention_decode=SMALL_DECODE_BLOCKS), gems_core.use_gems(include=OPS):
        got = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert decode == [(b * hkv, 1)] and not combine
    torch.testing.assert_close(got.cpu().double(), _reference(q, k, v, enable_gqa=True), atol=OUT_TOLERANCE[0],
                               rtol=OUT_TOLERANCE[1])


def _decode_mask(kind: str, b: int, h: int, lq: int, s: int) -> torch.Tensor | None:
    g = torch.Generator().manual_seed(7)
    if kind == "bool":  # per batch, broadcast over heads; query 0's keys all masked but one
        mask = torch.rand(b, 1, lq, s, generator=g) > 0.3
        mask[:, :, 0] = False
        mask[:, :, 0, s - 1] = True
        return mask.to(DEVICE)
    if kind == "float":  # per head and query, broadcast over the batch
        return (torch.randn(h, lq, s, generator=g) * 2).to(DEVICE)
    return None


#: (B, H, HKV, L, S): groups of 1, 4 and 8 query heads per key/value head, key lengths that
#: are not multiples of 16 (the forced BLOCK_N), a few queries per head, and a group of 72
#: rows that takes two programs of 64 rows
DECODE_SHAPES = {
    "group 1": (2, 2, 2, 1, 75),
    "group 4": (1, 8, 2, 1, 93),
    "group 8": (1, 8, 1, 1, 61),
    "group 4, 3 queries": (1, 8, 2, 3, 50),
    "group 8, 9 queries": (1, 8, 1, 9, 37),
    "group 4, whole key blocks": (1, 8, 2, 1, 48),
}


@pytest.mark.parametrize("mask_kind", ["none", "bool", "float"])
@pytest.mark.parametrize("name", sorted(DECODE_SHAPES))
def test_decode_matches_float64_aten(name: str, mask_kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    decode = _spy(monkeypatch, "attention_decode", "_decode")
    b, h, hkv, lq, s = DECODE_SHAPES[name]
    q, k, v = _inputs(b, h, hkv, lq, s, 16, ev=24, seed=s)
    kwargs: dict[str, Any] = {"enable_gqa": h != hkv}
    mask = _decode_mask(mask_kind, b, h, lq, s)
    if mask is not None:
        kwargs["attn_mask"] = mask
    with _forcing(attention_decode=SMALL_DECODE_BLOCKS), gems_core.use_gems(include=OPS):
        got = F.scaled_dot_product_attention(q, k, v, **kwargs)
    rows = h // hkv * lq
    assert decode and decode[0][0] == b * hkv * (1 if rows <= 64 else 2)
    atol, rtol = OUT_TOLERANCE
    torch.testing.assert_close(got.cpu().double(), _reference(q, k, v, **kwargs), atol=atol, rtol=rtol)
    if mask_kind == "bool":  # a query that attends one key gets that key's value
        torch.testing.assert_close(got[:, :, 0], v[:, :, s - 1].repeat_interleave(h // hkv, dim=1))


def test_decode_row_that_attends_nothing_gives_zeros() -> None:
    """Every split of batch 0 attends nothing (the combine sees only -inf), batch 1 a
    single key in the last split."""
    q, k, v = _inputs(2, 4, 2, 1, 70, 16)
    mask = torch.zeros(2, 1, 1, 70, dtype=torch.bool, device=DEVICE)
    mask[1, ..., 66] = True
    with _forcing(attention_decode=SMALL_DECODE_BLOCKS), gems_core.use_gems(include=OPS):
        got = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    assert not got[0].any()
    torch.testing.assert_close(got[1], v[1, :, 66:67].repeat_interleave(2, dim=0))
    torch.testing.assert_close(got.cpu().double(), _reference(q, k, v, attn_mask=mask, enable_gqa=True))


def test_decode_splits_fill_the_chip() -> None:
    """Decode split counts for the batch-8, 8-key/value-head benchmark (64 programs per
    split) on an H100/H200 (132 SMs) with 3 programs resident per SM (396 slots): 6 splits
    fill the slots to 97 % (5 would leave 19 % empty); 512 keys in 64-key blocks allow 4
    (2 blocks each). Batch 1 (8 programs) over 8192 keys takes 43 splits of 3 blocks (86 %),
    the fewest within 0.85 of the best fill; many programs take no split."""
    decode_splits = _module("attention_decode").decode_splits

    assert decode_splits(64, 512, 64, 396) == (4, 128)
    assert decode_splits(64, 2048, 64, 396) == (6, 384)
    assert decode_splits(64, 8192, 64, 396) == (6, 1408)
    assert decode_splits(64, 8192 + 17, 128, 396) == (6, 1408)
    assert decode_splits(8, 8192, 64, 396) == (43, 192)
    assert decode_splits(8, 512, 64, 396) == (8, 64)
    assert decode_splits(320, 8192, 64, 396) == (1, 8192)  # 0.8 of the slots: one split
    assert decode_splits(1, 100, 128, 396) == (1, 128)  # one block
    for programs in (1, 3, 8, 64, 100, 500):
        for keys in (1, 63, 64, 65, 1000, 4097, 100_000):
            splits, per = decode_splits(programs, keys, 64, 396)
            assert per % 64 == 0 and (splits - 1) * per < keys <= splits * per  # none empty
            assert splits <= 64


def test_decode_resident_programs() -> None:
    """Programs a compute unit holds: by shared memory (228 KiB an H100 SM, 1 KiB reserved
    per program) and by warps (20 a unit)."""
    decode_resident = _module("attention_decode").decode_resident

    kib = 1024
    assert decode_resident(KernelConfig({"BLOCK_N": 64}, num_warps=4, num_stages=2), 68 * kib, 227 * kib) == 3
    assert decode_resident(KernelConfig({"BLOCK_N": 64}, num_warps=4, num_stages=3), 100 * kib, 227 * kib) == 2
    assert decode_resident(KernelConfig({"BLOCK_N": 32}, num_warps=1, num_stages=2), 20 * kib, 227 * kib) == 10
    assert decode_resident(KernelConfig({"BLOCK_N": 32}, num_warps=8, num_stages=2), 20 * kib, 227 * kib) == 2
    assert decode_resident(KernelConfig({"BLOCK_N": 128}, num_warps=4, num_stages=4), 300 * kib, 227 * kib) == 1


def _decode_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    return {torch.float32: OUT_TOLERANCE, torch.float16: (2e-3, 2e-3), torch.bfloat16: (2e-2, 2e-2)}[dtype]


def _skip_gated(dtype: torch.dtype) -> None:
    """The interpreter's tl.dot reads bf16 operands wrong (the cpu backend leaves bf16
    attention to ATen for it): bf16 runs on a chip only."""
    if dtype == torch.bfloat16 and runtime.current().interpreter:
        pytest.skip("bf16 tl.dot is wrong in the Triton interpreter (bf16 attention runs on chips only)")


#: (B, H, HKV, L, S, forced splits): GQA groups of 4 and 8 and MHA, key lengths that are
#: not multiples of 16, one split, several, and as many as key blocks; a 72-row group (two
#: row blocks of 64, merged two splits at a time)
FORCED_SPLITS = {
    "gqa 4, 3 splits": (2, 8, 2, 1, 45, 3),
    "gqa 4, a split per block": (1, 8, 2, 1, 61, 4),
    "gqa 8, 1 split": (1, 8, 1, 1, 50, 1),
    "mha, 2 splits": (2, 3, 3, 1, 33, 2),
    "gqa 8, 9 queries, 3 splits": (1, 8, 1, 9, 40, 3),
    "gqa 4, whole key blocks, 2 splits": (2, 8, 2, 1, 64, 2),
}


@pytest.mark.parametrize("merge", ["fused", "kernel"])
@pytest.mark.parametrize("mask_kind", ["none", "bool", "float"])
@pytest.mark.parametrize("name", sorted(FORCED_SPLITS))
def test_decode_forced_splits_match_float64_aten(name: str, mask_kind: str, merge: str) -> None:
    """Every split count and both merges through :func:`decode_plan` (the tool's entry
    point), twice: the fused merge's counters are zero again after each launch."""
    decoding = _module("attention_decode")

    b, h, hkv, lq, s, splits = FORCED_SPLITS[name]
    q, k, v = _inputs(b, h, hkv, lq, s, 16, ev=24, seed=s)
    mask = _decode_mask(mask_kind, b, h, lq, s)
    plan = decoding.decode_plan(q, k, v, mask, config=SMALL_DECODE_BLOCKS, splits=splits, merge=merge)
    assert plan.splits == splits and plan.merge == (0 if splits == 1 else 2 if merge == "fused" else 1)
    kwargs: dict[str, Any] = {"enable_gqa": h != hkv}
    if mask is not None:
        kwargs["attn_mask"] = mask
    expected = _reference(q, k, v, **kwargs)
    for _ in range(2):
        got = plan(q, k, v, mask)
        torch.testing.assert_close(got.cpu().double(), expected, atol=OUT_TOLERANCE[0], rtol=OUT_TOLERANCE[1])
    assert all(not counts.any() for counts in decoding._merge_counts.values())


@pytest.mark.parametrize("merge", ["fused", "kernel"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
def test_decode_dtypes_match_float64_aten(dtype: torch.dtype, merge: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The benchmark's layout at a small size (GQA 4, head dim 128, one query) in each dtype:
    4 programs on the interpreter's 8 x 4 slots, 83 keys split 6 ways."""
    _skip_gated(dtype)
    monkeypatch.setenv("GEMS_DECODE_MERGE", merge)
    decode = _spy(monkeypatch, "attention_decode", "_decode")
    q, k, v = _inputs(2, 8, 2, 1, 83, 128, dtype=dtype, seed=5)
    with _forcing(attention_decode=SMALL_DECODE_BLOCKS), gems_core.use_gems(include=OPS):
        got = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert decode == [(4, 6)] and got.dtype == dtype
    atol, rtol = _decode_tolerance(dtype)
    torch.testing.assert_close(got.cpu().double(), _reference(q, k, v, enable_gqa=True), atol=atol, rtol=rtol)


@pytest.mark.parametrize("mask_kind", ["none", "bool", "float"])
@pytest.mark.parametrize("three_d", [False, True], ids=["4-D", "3-D"])
def test_decode_repeat_calls_replay_the_plan(mask_kind: str, three_d: bool) -> None:
    """A decode call without gradients keeps its launches for its signature: the second call
    of a signature replays them (no new plan), with new data in the same layout."""
    decoding = _module("attention_decode")

    decoding._decode_plans.clear()
    b, h, hkv, lq, s = (2, 4, 1, 1, 70) if not three_d else (3, 1, 1, 2, 70)
    calls = []
    for seed in (1, 2, 3):
        q, k, v = _inputs(b, h, hkv, lq, s, 16, seed=seed)
        mask = _decode_mask(mask_kind, b, h, lq, s)
        if three_d:
            q, k, v = q[:, 0], k[:, 0], v[:, 0]
            mask = None if mask is None else mask[:, 0] if mask.dim() == 4 else mask[0]
        calls.append((q, k, v, mask))
    stores = decoding._decode_plans.stores
    with gems_core.use_gems(include=OPS):
        for q, k, v, mask in calls:
            got = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=not three_d)
            expected = _reference(q, k, v, attn_mask=mask, enable_gqa=not three_d)
            torch.testing.assert_close(got.cpu().double(), expected, atol=OUT_TOLERANCE[0], rtol=OUT_TOLERANCE[1])
            assert got.shape == expected.shape
    assert decoding._decode_plans.stores == stores + 1 and len(decoding._decode_plans) == 1


def test_decode_plan_is_not_used_when_gradients_are_needed() -> None:
    decoding = _module("attention_decode")

    decoding._decode_plans.clear()
    q, k, v = _inputs(1, 4, 2, 1, 40, 16)
    with gems_core.use_gems(include=OPS):
        F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        assert len(decoding._decode_plans) == 1
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out = F.scaled_dot_product_attention(*leaves, enable_gqa=True)
        out.sum().backward()
    assert out.grad_fn is not None and all(t.grad is not None for t in leaves)


#: prefill with 16-row, 16- or 32-key blocks, so that tiny shapes have several query blocks,
#: whole key blocks (the unmasked step) and a causal diagonal: (B, H, HKV, L, S), keywords
PREFILL_CASES: dict[str, tuple[tuple[int, ...], dict[str, Any]]] = {
    "plain L>S": ((1, 2, 2, 45, 37), {}),
    "causal L<S": ((1, 2, 2, 29, 70), {"is_causal": True}),
    "causal L>S": ((1, 2, 2, 53, 35), {"is_causal": True}),
    # 10 heads of 3 query blocks on 8 compute units: causal sections of 6 heads, then 4
    "gqa causal sections": ((2, 5, 1, 45, 45), {"is_causal": True, "enable_gqa": True}),
    "bool mask": ((1, 2, 2, 33, 50), {"attn_mask": torch.rand(33, 50, generator=torch.Generator().manual_seed(3)) > 0.5}),
    "float mask": ((2, 2, 2, 20, 41), {"attn_mask": torch.randn(2, 1, 20, 41, generator=torch.Generator().manual_seed(4))}),
    "negative scale": ((1, 2, 2, 24, 40), {"scale": -0.7, "is_causal": True}),
}


@pytest.mark.parametrize("block_n", [16, 32])
@pytest.mark.parametrize("name", sorted(PREFILL_CASES))
def test_prefill_blocks_match_float64_aten(name: str, block_n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    forward = _spy(monkeypatch, "attention_prefill", "_forward")
    shape, kwargs = PREFILL_CASES[name]
    q, k, v = _inputs(*shape, 16, seed=shape[3])
    small = KernelConfig({"BLOCK_M": 16, "BLOCK_N": block_n})
    with _forcing(attention=small), gems_core.use_gems(include=OPS):
        got = F.scaled_dot_product_attention(q, k, v, **_on_device(kwargs))
    b, h, _, lq, _ = shape
    assert forward == [(b * h * -(-lq // 16),)]
    atol, rtol = OUT_TOLERANCE
    torch.testing.assert_close(got.cpu().double(), _reference(q, k, v, **kwargs), atol=atol, rtol=rtol)


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


Q, K, V = _random_inputs(1, 4, 2, 5, 7, 16)  # ATen's errors: whatever the backend gates
ERRORS = {
    "head dims differ": lambda: F.scaled_dot_product_attention(Q, K[..., :8], V),
    "mask shape": lambda: F.scaled_dot_product_attention(
        Q, K, K, attn_mask=torch.ones(6, 7, dtype=torch.bool, device=DEVICE)),
    "mask of one dim": lambda: F.scaled_dot_product_attention(Q, K, K, attn_mask=torch.zeros(7, device=DEVICE)),
    "mask and causal": lambda: F.scaled_dot_product_attention(
        Q, K, K, attn_mask=torch.zeros(5, 7, device=DEVICE), is_causal=True),
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


#: (inputs' shape, keywords, p): keys not a multiple of 4 or of a tile, a causal and a
#: grouped-query call, both mask kinds, few queries (which take the prefill path with dropout)
DROPOUT_CASES: dict[str, tuple[tuple[int, ...], dict[str, Any], float]] = {
    "plain": ((1, 2, 2, 19, 23, 16), {}, 0.3),
    "causal gqa": ((1, 4, 2, 21, 21, 16, 24), {"is_causal": True, "enable_gqa": True}, 0.5),
    "bool mask": ((2, 2, 2, 9, 33, 16), {"attn_mask": torch.rand(9, 33) > 0.4}, 0.1),
    "float mask, 3-d": ((1, 1, 1, 12, 17, 32), {"attn_mask": torch.randn(12, 17)}, 0.2),
    "few queries": ((1, 2, 2, 3, 40, 16), {}, 0.25),
}


def _kept(q: torch.Tensor, k: torch.Tensor, p: float, seed: int, **kwargs: Any) -> torch.Tensor:
    """Which probabilities gems' draw keeps for a call after ``torch.manual_seed(seed)``: its
    output with the identity for values (one value a key) is the dropped probabilities."""
    identity = torch.eye(k.shape[-2], device=DEVICE).expand(*k.shape[:-1], k.shape[-2]).contiguous()
    torch.manual_seed(seed)
    with gems_core.use_gems(include=OPS):
        out = F.scaled_dot_product_attention(q, k, identity.to(q.dtype), dropout_p=p, **_on_device(kwargs))
    return out.cpu() != 0


@pytest.mark.parametrize("name", sorted(DROPOUT_CASES))
def test_dropout_runs_on_gems_and_matches_float64_with_its_mask(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Output and all three gradients against float64 attention with the kept
    probabilities scaled by 1 / (1 - p); the mask is the one gems drew (recovered with
    identity values under the same seed), and gems' kernels ran in both directions."""
    shape, kwargs, p = DROPOUT_CASES[name]
    q, k, v = _inputs(*shape, seed=len(name))
    three_d = name.endswith("3-d")
    if three_d:
        q, k, v = (t[0] for t in (q, k, v))
    kept = _kept(q, k, p, seed=7, **kwargs)
    assert 0 < kept.double().mean() < 1
    forward = _spy(monkeypatch, "attention_prefill", "_forward")
    dkdv = _spy(monkeypatch, "attention_backward", "_dkdv")
    dq = _spy(monkeypatch, "attention_backward", "_dq")
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    torch.manual_seed(7)
    with gems_core.use_gems(include=OPS):
        out = F.scaled_dot_product_attention(*leaves, dropout_p=p, **_on_device(kwargs))
        weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(3))
        got = torch.autograd.grad(out, leaves, weights.to(DEVICE))
    assert forward and dkdv and dq, "a gems attention kernel did not run"
    wide = [t.cpu().double().requires_grad_() for t in (q, k, v)]
    group = q.shape[-3] // k.shape[-3]
    keys, values = (t.repeat_interleave(group, -3) for t in wide[1:])
    scores = wide[0] @ keys.transpose(-2, -1) / q.shape[-1] ** 0.5
    if kwargs.get("is_causal"):
        scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
    mask = kwargs.get("attn_mask")
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask.double()
    want = (scores.softmax(-1) * kept / (1 - p)) @ values
    expected = torch.autograd.grad(want, wide, weights.double())
    torch.testing.assert_close(out.detach().cpu().double(), want.detach(), atol=2e-6, rtol=2e-5)
    atol, rtol = GRAD_TOLERANCE
    for label, g, e in zip("qkv", got, expected):
        torch.testing.assert_close(g.cpu().double(), e, atol=atol, rtol=rtol,
                                   msg=lambda m, label=label: f"d{label}: {m}")


def test_dropout_keeps_one_minus_p_and_draws_afresh_each_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kept share is 1 - p (within 6 standard deviations), the same seed draws the same
    mask, the next call another; without gradients the forward kernel serves it too."""
    q, k, _ = _inputs(2, 2, 2, 32, 48, 16)
    first, again = _kept(q, k, 0.2, seed=11), _kept(q, k, 0.2, seed=11)
    assert torch.equal(first, again)
    share, n = first.double().mean().item(), first.numel()
    assert abs(share - 0.8) < 6 * (0.2 * 0.8 / n) ** 0.5, share
    forward = _spy(monkeypatch, "attention_prefill", "_forward")
    torch.manual_seed(11)
    identity = torch.eye(48, device=DEVICE).expand(2, 2, 48, 48).contiguous()
    with torch.no_grad(), gems_core.use_gems(include=OPS):
        one = F.scaled_dot_product_attention(q, k, identity, dropout_p=0.2)
        two = F.scaled_dot_product_attention(q, k, identity, dropout_p=0.2)
    assert len(forward) == 2
    assert torch.equal(one.cpu() != 0, first) and not torch.equal(two.cpu() != 0, first)


def test_a_gate_that_leaves_dropout_to_aten(monkeypatch: pytest.MonkeyPatch) -> None:
    """``OpGate("scaled_dot_product_attention", leave=("dropout",))`` (the NVIDIA backend's):
    a call with dropout reaches ATen without entering gems, one without stays on gems."""
    import dataclasses

    rt = runtime.current()
    monkeypatch.setattr(rt, "policy", dataclasses.replace(
        rt.policy, gate_leaves={**rt.policy.gate_leaves, OPS[0]: frozenset({"dropout"})}))
    assert dict(load_ops()[OPS[0]].forms).keys() == {"dropout"}
    forward = _spy(monkeypatch, "attention_prefill", "_forward")
    q, k, v = _inputs(1, 2, 2, 19, 23, 16)
    with gems_core.use_gems(include=OPS):
        dropped = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
        assert not forward
        plain = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert len(forward) == 1 and dropped.shape == plain.shape == (1, 2, 19, 16)
    torch.testing.assert_close(plain.cpu().double(), _reference(q, k, v, is_causal=True), atol=2e-6, rtol=2e-5)


@pytest.mark.parametrize("p", [1.0, -0.5, 1.5])
def test_dropout_outside_zero_to_one_is_atens(p: float, monkeypatch: pytest.MonkeyPatch) -> None:
    forward = _spy(monkeypatch, "attention_prefill", "_forward")
    q, k, v = _inputs(1, 2, 2, 5, 7, 16)
    expected = _outcome(lambda: F.scaled_dot_product_attention(q, k, v, dropout_p=p))
    with gems_core.use_gems(include=OPS):
        assert _outcome(lambda: F.scaled_dot_product_attention(q, k, v, dropout_p=p)) == expected
        if expected == "ok":  # p = 1: everything dropped
            got = F.scaled_dot_product_attention(q, k, v, dropout_p=p)
            torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, dropout_p=p))
            assert p == 1.0 and not got.any()
    assert not forward


def test_mask_that_needs_a_gradient_goes_to_aten(monkeypatch: pytest.MonkeyPatch) -> None:
    forward = _spy(monkeypatch, "attention_prefill", "_forward")
    q, k, v = _inputs(1, 2, 2, 5, 7, 16)
    mask = torch.randn(5, 7, device=DEVICE, requires_grad=True)
    # ATen's math backend: its CUDA memory-efficient kernel rejects these unaligned lengths
    with sdpa_kernel(SDPBackend.MATH), gems_core.use_gems(include=OPS):
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum().backward()
    assert not forward and mask.grad is not None


def test_cpu_backend_sends_bf16_attention_to_aten(monkeypatch: pytest.MonkeyPatch) -> None:
    if runtime.current().selection.backend.name != "cpu":
        pytest.skip("the bf16 gate is the cpu backend's")
    assert "bfloat16" in (runtime.current().policy.gate_for(OPS[0]) or ())
    forward = _spy(monkeypatch, "attention_prefill", "_forward")
    q, k, v = _inputs(1, 2, 2, 5, 7, 16, dtype=torch.bfloat16)
    with gems_core.use_gems(include=OPS):
        got = F.scaled_dot_product_attention(q, k, v)
    assert not forward
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v))


_DROPOUT_AOT = """
import json, torch
from gems_core import aot, tuning
from gems_core.registry import load_ops
load_ops()
from gems_core.ops import attention, attention_backward as backward
from gems_core.ops.attention_common import _head_blocks

q, k, v = (torch.empty(2, 4, 200, 64, dtype=torch.bfloat16) for _ in range(3))
dropout = (0.1, (12345, 0, 4096, 0))
done = []
with aot.observe(done.append), tuning.forcing(lambda t: t.configs()[0]):
    out, lse, _ = attention._forward_launch(q, k, v, q, backward.MASK_NONE, True, 0.125, dropout=dropout)
    backward.launch_backward(q, k, v, q, out, torch.empty_like(out), lse, 0.125, True, backward.MASK_NONE,
                             attention.ATTENTION_BACKWARD.configs()[0], _head_blocks(q, v),
                             attention.ATTENTION_BACKWARD.options(), dropout)
print(json.dumps([{"name": r.name, "error": r.error, "dropout": r.constexprs.get("DROPOUT")} for r in done]))
"""


def test_dropout_kernels_compile_ahead_of_time() -> None:
    """The forward and both backward kernels with dropout compile for sm_90 (the NVIDIA
    backend's kernels, compile-only; that backend leaves such calls to ATen, so the launches
    are made directly). They ran on an H100 and an H200."""
    import compile_only

    outcome, _ = compile_only.run(_DROPOUT_AOT)
    assert sorted(r["name"] for r in outcome) == ["attention", "attention_backward", "attention_backward"]
    assert all(r["error"] is None and r["dropout"] for r in outcome), outcome
