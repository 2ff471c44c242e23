"""scaled_dot_product_attention's decode path: few queries against many keys, the keys
split over programs and the splits merged (:mod:`.attention` chooses between it and the
prefill path).

Decoding (L <= 16, not causal: one new token, or a few speculative ones). The prefill grid
would hold one program per query head, too few to fill a chip, each reading its key/value
head again. The decode kernel gives one program all the query rows that share a key/value
head, ``G = H / HKV`` heads times L queries (at most 64 rows per program; more take several
programs), padded to at least 16 rows (or a config's ``ROWS``: 64 makes both products wgmma
on Hopper) so the scores are one ``tl.dot`` of ``[rows, D] x [D, BLOCK_N]``, and a
contiguous range of keys: each key and value byte is read once per group. Where the key
count is a multiple of BLOCK_N (``EVEN_KEYS``) the kernel has no masked tail step: a second
loop is a second software pipeline, paid even when it runs no iteration. The keys are split
over programs so that the grid fills the chip once: a compute unit holds as many decode
programs as its shared memory and registers allow (:func:`decode_resident`), and the split
count is the fewest that fills those slots about as well as any (:func:`decode_splits`);
with enough programs, or keys that are one block, there is one split and the kernel writes
the output itself. Otherwise each program writes its rows' normalized partial output and
log-sum-exp to scratch and the splits are merged,
``O = sum_s w_s O_s / sum_s w_s`` with ``w_s = exp2(lse_s - max lse)``: on NVIDIA (and in
the interpreter) in the same launch, by the last split of each row block to finish (a
counter per program, counted with an acquire-release atomic after a barrier, read back past
L1, reset by that program: :func:`_merge_mode`), elsewhere by a second kernel. The lse is
written only where the backward needs it.

Host path. A decode call that needs no gradient keeps its launches per call signature
(:class:`DecodePlan`): a repeat call allocates its output (and the partials' scratch) and
launches, with no validation, tuning or split logic. A plan declares the key counts its
choices hold for (the same key blocks and tuning bucket: :func:`_same_choices`), so that the
native dispatch layer serves a growing KV cache's new lengths from one recipe.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
import triton
import triton.language as tl

from .. import compat, runtime, settings
from ..contract import KernelConfig
from ..host_math import cdiv, next_power_of_2
from ..launch_cache import LaunchCache, keep_resident, recording
from ..plan_cache import Launch, PlanCache, signature
from ..tuning import Tunable
from .attention_backward import LOG2E, MASK_NONE
from .attention_common import (
    _attend_block,
    _bucket,
    _decode_rows,
    _fits,
    _head_blocks,
    _prepare,
    _served,
    _tile_bytes,
)
from .reduction import bench_ms

ATTENTION_DECODE = Tunable(
    "attention_decode",
    params=("BLOCK_N", "SPLITS", "ROWS"),
    optional=("SPLITS", "ROWS"),
    defaults=[
        KernelConfig({"BLOCK_N": 64}, num_warps=4, num_stages=2),
        KernelConfig({"BLOCK_N": 64}, num_warps=4, num_stages=3),
        KernelConfig({"BLOCK_N": 32}, num_warps=4, num_stages=3),
        KernelConfig({"BLOCK_N": 32}, num_warps=4, num_stages=2),
    ],
    description="attention of few queries (decoding): one program per key/value head's group "
    "of query rows and split of the keys, walking its keys in BLOCK_N steps; the split count "
    "follows from the programs a compute unit holds (shared memory, warps) so that the grid "
    "fills the chip once, or is SPLITS where a config sets it (1: no split, no merge); ROWS "
    "pads a program's query rows to at least that many (64: the products take Hopper's wgmma)",
)

#: query rows per head (L) the decode kernel serves
_DECODE_MAX_LENGTH = 16
#: attention_decode params chosen on the host (the split count, the rows' padding), not constexprs
_DECODE_HOST_PARAMS = ("SPLITS", "ROWS")
#: decode programs resident per compute unit at most, and warps per unit the kernel's
#: registers allow: :func:`decode_resident`
_DECODE_MAX_RESIDENT = 16
_DECODE_WARPS_PER_UNIT = 20
#: one split where the programs alone fill this share of the resident slots ...
_DECODE_ONE_SPLIT = 0.8
#: ... else the fewest splits whose last wave is within this share of the fullest: :func:`decode_splits`
_DECODE_FILL = 0.85
_DECODE_MAX_SPLITS = 64
#: elements of the merge's (rows, splits, BLOCK_DV) tile a thread holds at most
_MERGE_PER_THREAD = 32


@triton.jit
def _merge_splits(
    part_ptr,  # fp32: (rows, splits, BLOCK_DV) normalized partial outputs, then at lse_offset (rows, splits) lses
    lse_offset,
    o_ptr,  # (B, H, L, DV)
    lse_ptr,  # (B * H * L,) fp32: written when WRITE_LSE
    row0,  # global row (b * H + h) * L + query of the group's row 0 (int64)
    first,  # the group row this block starts at
    group_rows,
    splits,
    b,
    hk,
    GROUP,
    L,
    so_b, so_h, so_l, so_d,
    DV,
    BLOCK_G: tl.constexpr,  # rows merged: a power of two >= the block's rows
    BLOCK_SPLITS: tl.constexpr,  # next power of two >= splits
    CHUNK: tl.constexpr,  # splits merged per step (BLOCK_SPLITS: all at once)
    BLOCK_DV: tl.constexpr,
    WRITE_LSE: tl.constexpr,
    LOAD_CACHE: tl.constexpr,  # ".cg" (past L1) where other programs of this launch wrote the partials
):
    """O = sum_s w_s O_s / sum_s w_s with w_s = exp2(lse_s - max lse), for BLOCK_G rows of
    one group at once: every split's lse of those rows in one load, then their partial
    outputs as one (rows, CHUNK, BLOCK_DV) tile per step."""
    r = first + tl.arange(0, BLOCK_G)
    ok = r < group_rows
    row = row0 + r
    sp = tl.arange(0, BLOCK_SPLITS)
    lse_base = part_ptr + lse_offset
    lse = tl.load(lse_base + row[:, None] * splits + sp[None, :], mask=ok[:, None] & (sp[None, :] < splits),
                  other=float("-inf"), cache_modifier=LOAD_CACHE)
    top = tl.max(lse, 1)
    top = tl.where(top == float("-inf"), 0.0, top)  # a row that attends nothing: all weights 0
    weights = tl.exp2(lse - top[:, None])
    total = tl.sum(weights, 1)
    dv = tl.arange(0, BLOCK_DV)
    if CHUNK == BLOCK_SPLITS:
        live = ok[:, None] & (sp[None, :] < splits)
        parts = tl.load(part_ptr + (row[:, None, None] * splits + sp[None, :, None]) * BLOCK_DV + dv[None, None, :],
                        mask=live[:, :, None], other=0.0, cache_modifier=LOAD_CACHE)
        acc = tl.sum(parts * weights[:, :, None], 1)
    else:
        # CHUNK splits a step; each step's loads are issued before the previous chunk is
        # reduced, so that two round trips are in flight (the last step's are all masked)
        acc = tl.zeros((BLOCK_G, BLOCK_DV), tl.float32)
        chunk = tl.arange(0, CHUNK)
        live = ok[:, None] & (chunk[None, :] < splits)
        index = row[:, None] * splits + chunk[None, :]
        lse_c = tl.load(lse_base + index, mask=live, other=float("-inf"), cache_modifier=LOAD_CACHE)
        parts = tl.load(part_ptr + index[:, :, None] * BLOCK_DV + dv[None, None, :], mask=live[:, :, None],
                        other=0.0, cache_modifier=LOAD_CACHE)
        for start in range(CHUNK, splits + CHUNK, CHUNK):
            chunk = start + tl.arange(0, CHUNK)
            live = ok[:, None] & (chunk[None, :] < splits)
            index = row[:, None] * splits + chunk[None, :]
            lse_next = tl.load(lse_base + index, mask=live, other=float("-inf"), cache_modifier=LOAD_CACHE)
            parts_next = tl.load(part_ptr + index[:, :, None] * BLOCK_DV + dv[None, None, :], mask=live[:, :, None],
                                 other=0.0, cache_modifier=LOAD_CACHE)
            acc += tl.sum(parts * tl.exp2(lse_c - top[:, None])[:, :, None], 1)
            lse_c, parts = lse_next, parts_next
    out = acc / tl.where(total == 0.0, 1.0, total)[:, None]
    h = hk * GROUP + r // L
    query = r % L
    tl.store(o_ptr + b * so_b + h[:, None] * so_h + query[:, None] * so_l + dv[None, :] * so_d,
             out.to(o_ptr.dtype.element_ty), mask=ok[:, None] & (dv[None, :] < DV))
    if WRITE_LSE:
        tl.store(lse_ptr + row, tl.where(total == 0.0, float("inf"), top + tl.log2(total)), mask=ok)


@triton.jit
def _decode_program(pid, HKV, GROUP, L, BLOCK_R: tl.constexpr):
    """(group rows, batch * key/value head, batch, key/value head, first row) of decode
    program ``pid``: programs run over (batch, key/value head, block of BLOCK_R group rows)."""
    group_rows = GROUP * L
    row_blocks = tl.cdiv(group_rows, BLOCK_R)
    bhk = pid // row_blocks
    return group_rows, bhk, (bhk // HKV).to(tl.int64), (bhk % HKV).to(tl.int64), (pid % row_blocks) * BLOCK_R


@triton.jit
def _attention_decode_kernel(
    q_ptr,  # (B, H, L, D)
    k_ptr,  # (B, HKV, S, D)
    v_ptr,  # (B, HKV, S, DV)
    mask_ptr,  # (B, H, L, S) broadcast view; unused unless MASK
    o_ptr,  # (B, H, L, DV): written by the program (MERGE 0) or the merging one (MERGE 2)
    lse_ptr,  # (B * H * L,) fp32: written alongside the output when WRITE_LSE
    part_ptr,  # fp32 scratch: (B * H * L, splits, BLOCK_DV) partial outputs, then at lse_offset
    #            (B * H * L, splits) their base-2 log-sum-exps; unused with MERGE 0
    count_ptr,  # int32 per program of grid axis 0: splits done so far (MERGE 2), 0 between launches
    sq_b, sq_h, sq_l, sq_d,
    sk_b, sk_h, sk_s, sk_d,
    sv_b, sv_h, sv_s, sv_d,
    sm_b, sm_h, sm_l, sm_s,
    so_b, so_h, so_l, so_d,
    HKV,
    GROUP,
    L,
    S,
    D,
    DV,
    keys_per_split,  # a multiple of BLOCK_N
    lse_offset,
    qk_scale,  # |scale| * log2(e)
    BLOCK_R: tl.constexpr,  # query rows per program: (head in the group, query) pairs
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    MASK: tl.constexpr,
    HEAD_EXACT: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    MERGE: tl.constexpr,  # 0: one split, written here; 1: partials for the combine kernel;
    #                       2: partials, merged by the row block's last split to finish
    WRITE_LSE: tl.constexpr,
    BLOCK_G: tl.constexpr,  # the merge's rows (MERGE 2)
    BLOCK_SPLITS: tl.constexpr,  # the merge's splits (MERGE 2)
    CHUNK: tl.constexpr,  # the merge's splits per step (MERGE 2)
    EVEN_KEYS: tl.constexpr,  # S is a multiple of BLOCK_N: every split is whole blocks
):
    # programs: (batch * key/value head * row block, split); row r of a group is query
    # r % L of head r // L in it, so a group's rows are its heads' rows in (H, L) order
    pid = tl.program_id(0)
    split = tl.program_id(1)
    splits = tl.num_programs(1)
    group_rows, bhk, b, hk, first_row = _decode_program(pid, HKV, GROUP, L, BLOCK_R)
    r = first_row + tl.arange(0, BLOCK_R)
    row_ok = r < group_rows
    query = r % L
    h = hk * GROUP + r // L
    d = tl.arange(0, BLOCK_D)
    dv = tl.arange(0, BLOCK_DV)
    q = tl.load(q_ptr + b * sq_b + h[:, None] * sq_h + query[:, None] * sq_l + d[None, :] * sq_d,
                mask=row_ok[:, None] & (d[None, :] < D), other=0.0)
    k_base = k_ptr + b * sk_b + hk * sk_h
    v_base = v_ptr + b * sv_b + hk * sv_h
    mask_base = mask_ptr + b * sm_b
    row_mask = h * sm_h + query * sm_l
    m_i = tl.full((BLOCK_R,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_R,), tl.float32)
    acc = tl.zeros((BLOCK_R, BLOCK_DV), tl.float32)
    first = split * keys_per_split
    last = tl.minimum(S, first + keys_per_split)
    if EVEN_KEYS:
        whole = last
    else:
        whole = first + ((last - first) // BLOCK_N) * BLOCK_N
    for start_n in range(first, whole, BLOCK_N):
        acc, m_i, l_i = _attend_block(
            acc, m_i, l_i, q, k_base, v_base, mask_base, query, row_mask, row_ok, start_n, last,
            sk_s, sk_d, sv_s, sv_d, sm_s, D, DV, qk_scale,
            BLOCK_N, BLOCK_D, BLOCK_DV, False, False, MASK, HEAD_EXACT, INPUT_PRECISION, 0, False,
        )
    if not EVEN_KEYS:  # the last split's partial block, masked; no second pipeline otherwise
        for start_n in range(whole, last, BLOCK_N):
            acc, m_i, l_i = _attend_block(
                acc, m_i, l_i, q, k_base, v_base, mask_base, query, row_mask, row_ok, start_n, last,
                sk_s, sk_d, sv_s, sv_d, sm_s, D, DV, qk_scale,
                BLOCK_N, BLOCK_D, BLOCK_DV, True, False, MASK, HEAD_EXACT, INPUT_PRECISION, 0, False,
            )
    empty = l_i == 0.0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    row0 = bhk.to(tl.int64) * group_rows
    row = row0 + r  # (b * H + h) * L + query
    if MERGE == 0:
        tl.store(o_ptr + b * so_b + h[:, None] * so_h + query[:, None] * so_l + dv[None, :] * so_d,
                 out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None] & (dv[None, :] < DV))
        if WRITE_LSE:
            tl.store(lse_ptr + row, tl.where(empty, float("inf"), m_i + tl.log2(l_i)), mask=row_ok)
    else:
        part = row * splits + split
        tl.store(part_ptr + part[:, None] * BLOCK_DV + dv[None, :], out, mask=row_ok[:, None])
        tl.store(part_ptr + lse_offset + part, tl.where(empty, float("-inf"), m_i + tl.log2(l_i)), mask=row_ok)
        if MERGE == 2:
            # every thread's partial stores come before the count (the barrier), the count
            # is a release and, for the program that finishes the row block, an acquire
            tl.debug_barrier()
            done = tl.atomic_add(count_ptr + pid, 1, sem="acq_rel", scope="gpu")
            if done == splits - 1:
                _merge_splits(part_ptr, lse_offset, o_ptr, lse_ptr, row0, first_row, group_rows, splits, b, hk,
                              GROUP, L, so_b, so_h, so_l, so_d, DV, BLOCK_G, BLOCK_SPLITS, CHUNK, BLOCK_DV,
                              WRITE_LSE, ".cg")
                tl.store(count_ptr + pid, 0)  # zero again for the next launch


@triton.jit
def _attention_decode_combine_kernel(
    part_ptr,  # as the decode kernel's
    o_ptr,  # (B, H, L, DV)
    lse_ptr,  # (B * H * L,) fp32: written when WRITE_LSE
    so_b, so_h, so_l, so_d,
    HKV,
    GROUP,
    L,
    DV,
    splits,
    lse_offset,
    BLOCK_R: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_SPLITS: tl.constexpr,
    CHUNK: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    WRITE_LSE: tl.constexpr,
):
    # one program per row block of the decode grid, merging its rows' splits
    group_rows, bhk, b, hk, first_row = _decode_program(tl.program_id(0), HKV, GROUP, L, BLOCK_R)
    _merge_splits(part_ptr, lse_offset, o_ptr, lse_ptr, bhk.to(tl.int64) * group_rows, first_row,
                  group_rows, splits, b, hk, GROUP, L, so_b, so_h, so_l, so_d, DV, BLOCK_G, BLOCK_SPLITS, CHUNK,
                  BLOCK_DV, WRITE_LSE, "")


_decode = LaunchCache(_attention_decode_kernel, name="attention_decode")
_combine = LaunchCache(_attention_decode_combine_kernel, name="attention_decode_combine")


def _decode_tile_bytes(dtype: torch.dtype, block_r: int, blocks: dict[str, Any], masked: bool,
                       config: KernelConfig) -> int:
    """Shared memory of a decode program, for :func:`decode_resident`. With fewer than 64
    rows the dots are mma.sync (not wgmma), and Triton's pipeliner keeps ``num_stages - 1``
    K and V buffers, plus the Q tile and the probabilities (a layout change): exact for the
    sm_90 compiles of 16-row programs in every dtype checked (bf16, fp16, fp32; BLOCK_N 16
    to 128, 2 to 6 stages). Otherwise as the forward's tiles (:func:`_tile_bytes`)."""
    if block_r >= 64 or runtime.current().limits.pipelining == "stream":
        return _tile_bytes(dtype, block_r, blocks, masked, config)
    size, block_d, block_dv = dtype.itemsize, blocks["BLOCK_D"], blocks["BLOCK_DV"]
    block_n, buffers = config.params["BLOCK_N"], max(1, config.num_stages - 1)
    scores = block_r * block_n
    tiles = (block_r * block_d + buffers * block_n * (block_d + block_dv) + scores) * size
    return tiles + (buffers * scores * size if masked else 0)


def decode_resident(config: KernelConfig, tile_bytes: int, shared_memory: int) -> int:
    """Decode programs of ``config`` one compute unit holds at once: as many as its shared
    memory takes (a unit has about the per-block limit plus 1 KiB, and each program costs
    1 KiB more than its tiles: NVIDIA's reservation), at most _DECODE_WARPS_PER_UNIT warps
    and _DECODE_MAX_RESIDENT programs. (On sm_90 the 4-warp configs use 80-100 registers a
    thread, 5 programs' worth; 1- and 2-warp programs use up to 250, where shared memory
    binds first.)"""
    by_memory = (shared_memory + 1024) // (tile_bytes + 1024)
    by_warps = _DECODE_WARPS_PER_UNIT // max(1, config.num_warps)
    return max(1, min(by_memory, by_warps, _DECODE_MAX_RESIDENT))


@functools.lru_cache(maxsize=4096)
def decode_splits(programs: int, keys: int, block_n: int, slots: int) -> tuple[int, int]:
    """(splits, keys per split) of a decode grid of ``programs`` programs per split on a chip
    that holds ``slots`` such programs at once (compute units x :func:`decode_resident`).

    One split (no partials, no merge) where the programs alone fill _DECODE_ONE_SPLIT of the
    slots or the keys are one block. Otherwise the split counts that whole BLOCK_N blocks
    allow (each split a run of whole blocks, none empty, at most _DECODE_MAX_SPLITS) are
    scored by how full they leave the last wave of programs over the slots, and the fewest
    splits within _DECODE_FILL of the best score is taken: fewer splits mean less to merge,
    a fuller wave keeps more memory traffic in flight."""
    blocks = cdiv(keys, block_n)
    if blocks == 1 or programs >= _DECODE_ONE_SPLIT * slots:
        return 1, blocks * block_n
    fill: dict[int, float] = {}
    for wanted in range(1, min(blocks, _DECODE_MAX_SPLITS) + 1):
        splits = cdiv(blocks, cdiv(blocks, wanted))  # what whole blocks per split give
        if splits not in fill:
            waves = programs * splits / slots
            fill[splits] = waves / math.ceil(waves)
    best = max(fill.values())
    splits = min(n for n, f in fill.items() if f >= _DECODE_FILL * best)
    keys_per_split = cdiv(blocks, splits) * block_n
    return cdiv(keys, keys_per_split), keys_per_split


def _merge_mode(splits: int, block_g: int, block_dv: int, num_warps: int, merge: str | None) -> int:
    """The decode kernel's MERGE: 0 for one split; else 2 (the last split of each row block
    merges, no second launch) where the chip allows it (``Limits.fused_merge``: NVIDIA, the
    interpreter) and the merge's tile fits _MERGE_PER_THREAD elements a thread; else 1 (the
    combine kernel). ``merge`` ("fused",
    "kernel"; None: ``GEMS_DECODE_MERGE``, default "auto") overrides the choice. The fused
    merge's counters are resident buffers (:func:`_counts_for`), so the native dispatch
    layer's recipes repeat it too."""
    if splits == 1:
        return 0
    merge = merge or settings.get("GEMS_DECODE_MERGE")
    if merge == "kernel" or block_g * block_dv > _MERGE_PER_THREAD * 32 * num_warps:
        return 1
    if merge == "fused":
        return 2
    return 2 if runtime.current().limits.fused_merge else 1


def _merge_tiles(block_g: int, splits: int, block_dv: int, num_warps: int) -> tuple[int, int]:
    """(BLOCK_SPLITS, CHUNK) of a merge: CHUNK splits a step, the most (a power of two, at
    most _DECODE_MAX_SPLITS) whose (rows, CHUNK, BLOCK_DV) tile keeps within
    _MERGE_PER_THREAD elements a thread; BLOCK_SPLITS = CHUNK (one step) where the splits fit
    one step, else _DECODE_MAX_SPLITS (rounded up to a power of two) in CHUNK steps. Two
    variants per kernel config, whatever the split count: each is a compile."""
    most = next_power_of_2(_DECODE_MAX_SPLITS)
    chunk = most
    while chunk > 1 and block_g * chunk * block_dv > _MERGE_PER_THREAD * 32 * num_warps:
        chunk //= 2
    return (chunk if splits <= chunk else most), chunk


#: the fused merge's counters, one int32 per decode program, by (device, stream): zero
#: between launches (the merging program resets its own), so one buffer serves every call
#: made in order on its stream. Resident (never freed, a larger one added beside it): the
#: native layer's recipes address them, and it keys recipes by stream
_merge_counts: dict[tuple[torch.device, int], torch.Tensor] = {}


def _counts_for(device: torch.device, needed: int) -> torch.Tensor:
    stream = compat.current_stream(device.index or 0) if device.type == "cuda" and not _interpreted() else 0
    counts = _merge_counts.get((device, stream))
    if counts is None or counts.numel() < needed:
        counts = keep_resident(torch.zeros(max(needed, 1024), dtype=torch.int32, device=device))
        _merge_counts[(device, stream)] = counts
    return counts


def _interpreted() -> bool:
    rt = runtime.current()
    return rt.interpreter or rt.compile_only


def _unbound(kernel: Any, grid: tuple[int, ...], static: tuple[Any, ...], config: KernelConfig | None,
             options: dict[str, Any], constexprs: dict[str, Any], *tensors: Any) -> None:
    kernel(grid, *tensors, *static, config=config, options=options, **constexprs)


def _bind(kernel: Any, grid: tuple[int, ...], leading: int, static: tuple[Any, ...], device: torch.device,
          config: KernelConfig | None, options: dict[str, Any], **constexprs: Any) -> Any:
    """A launch of ``kernel`` with its tensors (the first ``leading`` arguments) passed per
    call; a kernel that is not a LaunchCache (a test's wrapper that records grids) is
    called as one."""
    if isinstance(kernel, LaunchCache):
        return Launch(kernel, grid, leading, static, device, config=config, options=options, **constexprs)
    return functools.partial(_unbound, kernel, grid, static, config, options, constexprs)


class DecodePlan:
    """The launches of the decode path for one call signature: the decode kernel over
    (programs, splits), then the combine kernel where MERGE is 1. A repeat call allocates
    its output (and the partials' scratch) and launches; nothing is chosen again."""

    __slots__ = ("combine", "config", "counts", "decode", "device", "dtype", "keys_bound", "merge", "scratch",
                 "shape", "splits", "strides", "uint8_mask")

    def __init__(self, decode: Any, combine: Any, merge: int, splits: int, scratch: int, counts: int,
                 device: torch.device, config: KernelConfig) -> None:
        self.decode = decode
        self.combine = combine
        self.merge = merge
        self.splits = splits
        self.scratch = scratch  # fp32 elements of the partials (0: none)
        self.counts = counts  # counters the fused merge needs (0: none)
        self.device = device
        self.config = config
        # the result of a call from the plan (set by :meth:`returning`)
        self.shape: tuple[int, ...] = ()
        self.strides: tuple[int, ...] = ()
        self.dtype = torch.float32
        self.uint8_mask = False
        #: (the decode launch's argument S, least, most): the key counts this plan's choices
        #: hold for, declared to the native layer's length-generic recipes (set by _build_decode)
        self.keys_bound: tuple[int, int, int] | None = None

    @property
    def replayable(self) -> bool:
        return isinstance(self.decode, Launch) and (self.combine is None or isinstance(self.combine, Launch))

    def run(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, out: torch.Tensor,
            lse: torch.Tensor | None) -> None:
        """Attention into ``out`` (and ``lse``, if the plan writes it); any tensors with the
        data pointers of the planned ones will do (3-D or 4-D, a bool mask or its bytes)."""
        part = torch.empty(self.scratch, dtype=torch.float32, device=self.device) if self.scratch else out
        counts = _counts_for(self.device, self.counts) if self.merge == 2 else out
        lse = out if lse is None else lse
        if self.keys_bound is not None and recording.native is not None:
            recording.generic = [(0, *self.keys_bound)]  # gems_core.native.recorder.learn
        self.decode(q, k, v, mask, out, lse, part, counts)
        if self.combine is not None:
            self.combine(part, out, lse)

    def returning(self, result: torch.Tensor, uint8_mask: bool) -> DecodePlan:
        self.shape, self.strides, self.dtype = tuple(result.shape), result.stride(), result.dtype
        self.uint8_mask = uint8_mask
        return self

    def __call__(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attn_mask: torch.Tensor | None) -> torch.Tensor:
        out = torch.empty_strided(self.shape, self.strides, dtype=self.dtype, device=self.device)
        if attn_mask is None:
            mask = query
        else:
            mask = attn_mask.view(torch.uint8) if self.uint8_mask else attn_mask
        self.run(query, key, value, mask, out, None)
        return out


def _build_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, mask_kind: int,
                  qk_scale: float, out: torch.Tensor, blocks: dict[str, Any], units: int, config: KernelConfig,
                  write_lse: bool, splits: int | None = None, merge: str | None = None) -> DecodePlan:
    """The decode launches of ``config`` for these (B, H, L, D) queries into ``out``'s
    layout: the split count from :func:`decode_splits` unless ``splits`` is given (tools) or
    the config sets SPLITS (at most one split per key block either way)."""
    (batch, heads, length, head_dim), (kv_heads, keys), value_dim = q.shape, k.shape[1:3], v.shape[-1]
    group = heads // kv_heads
    group_rows = group * length
    block_r = _decode_rows(group_rows, config)
    programs = batch * kv_heads * cdiv(group_rows, block_r)
    block_n, block_dv = config.params["BLOCK_N"], blocks["BLOCK_DV"]
    key_blocks = cdiv(keys, block_n)
    splits = splits or config.params.get("SPLITS") or None
    config = config.without(*_DECODE_HOST_PARAMS)  # the kernel is launched without them
    if splits is None:
        tile = _decode_tile_bytes(q.dtype, block_r, blocks, mask_kind != MASK_NONE, config)
        slots = units * decode_resident(config, tile, runtime.current().limits.shared_memory_per_block)
        splits, keys_per_split = decode_splits(programs, keys, block_n, slots)
    else:
        keys_per_split = cdiv(key_blocks, max(1, min(splits, key_blocks, _DECODE_MAX_SPLITS))) * block_n
        splits = cdiv(keys, keys_per_split)
    block_g = min(block_r, max(2, next_power_of_2(group_rows)))
    mode = _merge_mode(splits, block_g, block_dv, config.num_warps, merge)
    rows = batch * heads * length
    lse_offset = rows * splits * block_dv
    options = ATTENTION_DECODE.options()
    static = (*q.stride(), *k.stride(), *v.stride(), *mask.stride()[:4], *out.stride(), kv_heads, group, length,
              keys, head_dim, value_dim, keys_per_split, lse_offset if mode else 0, qk_scale)
    fused = mode == 2
    merge_tiles = _merge_tiles(block_g, splits, block_dv, config.num_warps) if fused else (1, 1)
    decode = _bind(_decode, (programs, splits), 8, static, q.device, config, options, BLOCK_R=block_r, MASK=mask_kind,
                   MERGE=mode, WRITE_LSE=write_lse, BLOCK_G=block_g if fused else 1, BLOCK_SPLITS=merge_tiles[0],
                   CHUNK=merge_tiles[1], EVEN_KEYS=keys % block_n == 0, **blocks)
    combine = None
    if mode == 1:
        warps = max(4, min(16, block_g * block_dv // 1024))
        block_splits, chunk = _merge_tiles(block_g, splits, block_dv, warps)
        combine = _bind(_combine, (programs,), 3, (*out.stride(), kv_heads, group, length, value_dim, splits, lse_offset),
                        q.device, KernelConfig(num_warps=warps, num_stages=1), options, BLOCK_R=block_r,
                        BLOCK_G=block_g, BLOCK_SPLITS=block_splits, CHUNK=chunk, BLOCK_DV=block_dv,
                        WRITE_LSE=write_lse)
    scratch = rows * splits * (block_dv + 1) if mode else 0
    plan = DecodePlan(decode, combine, mode, splits, scratch, programs if fused else 0, q.device, config)
    # the decode kernel's parameter S follows 8 tensors, 20 strides, HKV, GROUP and L
    plan.keys_bound = (8 + 5 * 4 + 3, *_same_choices(keys, block_n))
    return plan


def _same_choices(keys: int, block_n: int) -> tuple[int, int]:
    """The key counts around ``keys`` for which the decode path chooses as for ``keys``: the
    same tuning bucket, key blocks (so split count and keys per split) and EVEN_KEYS."""
    if keys % block_n == 0:
        return keys, keys
    blocks = cdiv(keys, block_n)
    least, most = (blocks - 1) * block_n + 1, blocks * block_n - 1
    bucket = _bucket(keys)
    return max(least, bucket // 2 + 1), min(most, bucket) if bucket < _bucket(2**62) else most


def _decode_launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, mask_kind: int,
                   qk_scale: float, out: torch.Tensor, lse: torch.Tensor | None, blocks: dict[str, Any],
                   units: int) -> DecodePlan:
    """The decode path (module docstring) with the config tuned for this shape bucket, run
    into ``out`` (and ``lse`` unless None); returns its plan."""
    (batch, heads, length, _), (kv_heads, keys) = q.shape, k.shape[1:3]
    block_r = _decode_rows(heads // kv_heads * length)
    programs = batch * kv_heads * cdiv(heads // kv_heads * length, block_r)
    write_lse = lse is not None

    def build(config: KernelConfig) -> DecodePlan:
        return _build_decode(q, k, v, mask, mask_kind, qk_scale, out, blocks, units, config, write_lse)

    def bench(config: KernelConfig) -> float:
        plan = build(config)
        scratch, scratch_lse = torch.empty_like(out), None if lse is None else torch.empty_like(lse)
        return bench_ms(lambda: plan.run(q, k, v, mask, scratch, scratch_lse))

    key = ("decode", str(q.dtype), _bucket(keys), _bucket(programs), block_r, blocks["BLOCK_D"], blocks["BLOCK_DV"],
           mask_kind)
    plan = build(ATTENTION_DECODE.choose(key, bench, _fits(q.dtype, block_r, blocks, mask_kind != MASK_NONE)))
    plan.run(q, k, v, mask, out, lse)
    return plan


def decode_plan(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None = None,
                scale: float | None = None, *, config: KernelConfig | None = None, splits: int | None = None,
                merge: str | None = None) -> DecodePlan:
    """The decode path's plan for these inputs (few queries, no causal mask, GQA when the
    head counts differ; scale >= 0), with ``config`` (default: the tunable's first that
    fits), ``splits`` (default: :func:`decode_splits`) and ``merge`` ("fused"/"kernel";
    default as :func:`_merge_mode`) forced: for tools that time the choices
    (benchmarks/sdpa_decode_sweep.py). ``plan(query, key, value, attn_mask)`` returns the
    output; it does not check its inputs beyond what this call did."""
    if not _served(query, key, value, attn_mask, True) or query.shape[-2] > _DECODE_MAX_LENGTH:
        raise ValueError("decode_plan: inputs the decode path does not serve")
    q, k, v, mask, mask_kind, scale = _prepare(query, key, value, attn_mask, scale)
    if scale < 0:
        raise ValueError("decode_plan: a negative scale is applied to the queries first")
    (batch, heads, length, _), value_dim = q.shape, v.shape[-1]
    out = torch.empty((batch, length, heads, value_dim), dtype=q.dtype, device=q.device).transpose(1, 2)
    blocks = _head_blocks(q, v)
    blocks["HEAD_EXACT"] = blocks["BLOCK_D"] == q.shape[-1] and blocks["BLOCK_DV"] == value_dim
    rows = _decode_rows(heads // k.shape[1] * length)
    if config is None:
        admit = _fits(q.dtype, rows, blocks, mask_kind != MASK_NONE)
        config = next((c for c in ATTENTION_DECODE.configs() if admit(c)), ATTENTION_DECODE.configs()[0])
    units = runtime.compute_units(q.device.type, q.device.index)
    plan = _build_decode(q, k, v, mask, mask_kind, scale * LOG2E, out, blocks, units, config, False, splits, merge)
    result = out.squeeze(1) if query.dim() == 3 else out
    return plan.returning(result, attn_mask is not None and attn_mask.dtype == torch.bool)


#: decode plans (:class:`DecodePlan`) of calls that need no gradient, by call signature
_decode_plans = PlanCache("scaled_dot_product_attention")


def _plan_key(query: Any, key: Any, value: Any, attn_mask: Any, dropout_p: Any, is_causal: Any, scale: Any,
              enable_gqa: Any) -> Any:
    """What a decode plan depends on of a call: the signatures of its tensors (and whether
    the mask needs a gradient), its other arguments; None where an argument is not a tensor
    (ATen's error to raise)."""
    try:
        mask = None if attn_mask is None else (signature(attn_mask), attn_mask.requires_grad)
        return (signature(query), signature(key), signature(value), mask, dropout_p, is_causal, scale, enable_gqa)
    except AttributeError:
        return None
