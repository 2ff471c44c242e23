"""Attention forward for Hopper (sm_90): the NVIDIA backend's ``attention_forward`` variant.

The core's portable prefill kernel (Triton) runs each block's two products and its softmax
one after the other in every warp group; Triton does not overlap them on Hopper. This
kernel is written in Gluon, Triton's lower-level language, so that it can lay out the warps
itself (warp specialization):

* one loading warp issues the tensor-memory-accelerator (TMA) copies of the query tile and
  of a ring of key and value blocks, each signalled by an mbarrier;
* two consumer warp groups each take 64 of the program's 128 query rows and walk the same
  key blocks: scores ``Q K^T`` by an asynchronous wgmma, an online softmax in base 2, then
  ``P V`` (P from registers) into the fp32 accumulator. Block j's scores product is issued
  before block j-1's ``P V`` is waited for, and each group releases a key or value slot
  (an mbarrier both groups arrive on) as soon as its product has read it. The two groups
  are not synchronized with each other, so one group's softmax runs while the other's
  products occupy the tensor cores.

Registers are rebalanced between the roles (``setmaxnreg``): 24 a thread for the loading
warp's group, the rest for the consumers.

Served: calls with enough work (``MIN_WORK``: shorter ones run faster on the portable kernel),
16-bit q, k, v of one dtype, head dim 64 or 128 for both products, no mask,
causal (top-left) or not, grouped-query heads, any L and S, strides TMA can describe (last
dim contiguous, the others 16-byte multiples, 16-byte aligned bases). Rows past L and keys
past S are zero-filled by the copies; scores of keys past S are masked. Everything else is
declined and runs on the core's kernel.

Measured on an H100 (batch 4, 32 heads, head dim 128, bf16): 0.98x ATen's fastest backend at
2048 causal tokens, 1.00-1.03x at 8192, 1.03x at 2048 without the mask, against 0.76-0.83x
for the portable kernel (``benchmarks/run.py --ops scaled_dot_product_attention``; current
numbers in docs/performance.md).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from gems_core import VariantCompile

from .hopper import (  # noqa: F401 - available is this module's answer too
    TensorDescriptor,
    available,
    cdiv,
    fence_async_shared,
    gl,
    gluon,
    is_hopper,
    mbarrier,
    tma,
    tma_load,
    tma_store,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from .launcher import KeptLauncher

#: query rows per consumer warp group, and per program (two groups)
QUERY_ROWS = 64
BLOCK_M = 2 * QUERY_ROWS
BLOCK_N = 128
HEAD_DIMS = (64, 128)
#: registers a thread: the kernel's budget (12 warps resident), the consumers' and the
#: loading warp's after the rebalance
MAX_REGISTERS = 168
CONSUMER_REGISTERS = 232
LOADER_REGISTERS = 24
#: key/value ring depth: a third stage paid off only on long key ranges (2 % at 8192 keys)
LONG_KEYS = 4096
#: attended (query, key) pairs of a call, over its batch and heads, below which the kernel
#: declines. One program per SM (its tiles take 160 KB of shared memory) has a fixed cost
#: (barriers, the query tile, filling the ring, the copy out) that a short key walk does not
#: pay back, and the launch through Triton costs ~100 us of host time against the portable
#: kernel's replayed launch: on the H100 a Llama prefill's attention (batch 2, 32 heads,
#: 512 causal tokens: 8.4e6 pairs) took 50 us against the portable kernel's 25 us, while at
#: 2048 causal tokens over 128 heads (2.7e8 pairs) it runs 1.3x the portable kernel.
MIN_WORK = 1 << 27

if gluon is not None:
    ROWS = gl.constexpr(QUERY_ROWS)

    @gluon.jit
    def _softmax(sc, m_i, l_i, j, rows, row0, S, qk_scale, BLOCK: gl.constexpr, col_layout: gl.constexpr,
                 CAUSAL: gl.constexpr):
        """Block j's step of the online softmax: (P, new row max, new row sum, rescale)."""
        edge = (j + 1) * BLOCK > S
        if CAUSAL:
            edge = edge | ((j + 1) * BLOCK > row0 + 1)
        if edge:
            cols = j * BLOCK + gl.arange(0, BLOCK, layout=col_layout)
            valid = cols[None, :] < S
            if CAUSAL:
                valid = valid & (cols[None, :] <= rows[:, None])
            sc = gl.where(valid, sc, float("-inf"))
        # every row attends key 0 (causal or not), so the running max is finite from block
        # 0 on and a masked score's exp2 is 0
        m_new = gl.maximum(m_i, gl.max(sc, axis=1) * qk_scale)
        alpha = gl.exp2(m_i - m_new)
        p = gl.exp2(sc * qk_scale - m_new[:, None])
        return p, m_new, l_i * alpha + gl.sum(p, axis=1), alpha

    @gluon.jit
    def _consume(group: gl.constexpr, descs, bars, bufs, b, h, start_m, n_blocks, qk_scale, L, S, lse_ptr,
                 bh, CAUSAL: gl.constexpr):
        q_desc, k_desc, v_desc, o_desc = descs
        q_bars, k_ready, k_empty, v_ready, v_empty = bars
        q_smem, k_smem, v_smem = bufs
        dtype: gl.constexpr = q_desc.dtype
        HEAD_D: gl.constexpr = q_desc.block_type.shape[3]
        BLOCK: gl.constexpr = k_desc.block_type.shape[2]
        STAGES: gl.constexpr = k_smem.type.shape[0]
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, HEAD_D, 16])
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, BLOCK, 16])
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
        col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
        orow_layout: gl.constexpr = gl.SliceLayout(1, o_layout)
        row0 = start_m + group * ROWS
        rows = row0 + gl.arange(0, ROWS, layout=row_layout)
        s_zero = gl.zeros([ROWS, BLOCK], gl.float32, s_layout)
        q_op = q_smem.index(group)

        mbarrier.wait(q_bars.index(group), 0)
        mbarrier.wait(k_ready.index(0), 0)
        sc = warpgroup_mma(q_op, k_smem.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        sc = warpgroup_mma_wait(0, deps=(sc, ))
        mbarrier.arrive(k_empty.index(0), count=1)
        p, m_i, l_i, alpha = _softmax(sc, gl.full([ROWS], float("-inf"), gl.float32, row_layout),
                                      gl.zeros([ROWS], gl.float32, row_layout), 0, rows, row0, S, qk_scale,
                                      BLOCK, col_layout, CAUSAL)
        p16 = gl.convert_layout(p.to(dtype), p_layout)
        o = gl.zeros([ROWS, HEAD_D], gl.float32, o_layout)
        for j in range(1, n_blocks):
            slot = j % STAGES
            prev = (j - 1) % STAGES
            mbarrier.wait(k_ready.index(slot), (j // STAGES) & 1)
            sc = warpgroup_mma(q_op, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
            # block j-1's P V, issued behind block j's scores: it runs during the softmax
            mbarrier.wait(v_ready.index(prev), ((j - 1) // STAGES) & 1)
            o = warpgroup_mma(p16, v_smem.index(prev), o, is_async=True)
            sc = warpgroup_mma_wait(1, deps=(sc, ))
            mbarrier.arrive(k_empty.index(slot), count=1)
            p, m_i, l_i, alpha = _softmax(sc, m_i, l_i, j, rows, row0, S, qk_scale, BLOCK, col_layout, CAUSAL)
            o, p16 = warpgroup_mma_wait(0, deps=(o, p16))
            mbarrier.arrive(v_empty.index(prev), count=1)
            o = o * gl.convert_layout(alpha, orow_layout)[:, None]
            # the new P is written only now: while the previous P V runs, its operand
            # registers must not be reused
            p16 = gl.convert_layout(p.to(dtype), p_layout)
        last = (n_blocks - 1) % STAGES
        mbarrier.wait(v_ready.index(last), ((n_blocks - 1) // STAGES) & 1)
        o = warpgroup_mma(p16, v_smem.index(last), o, is_async=True)
        o = warpgroup_mma_wait(0, deps=(o, ))
        mbarrier.arrive(v_empty.index(last), count=1)
        o = o / gl.convert_layout(l_i, orow_layout)[:, None]
        gl.store(lse_ptr + bh * L + rows, m_i + gl.log2(l_i), mask=rows < L)
        # the group's query tile is spent: it stages the output for the copy out (rows past
        # L are clipped by the copy)
        o_smem = q_smem.index(group)
        o_smem.store(o.to(dtype))
        fence_async_shared()
        tma_store(o_desc, [b, h, row0, 0], o_smem.reshape([1, 1, ROWS, HEAD_D]))
        tma.store_wait(pendings=0)

    @gluon.jit
    def _first_group(descs, bars, bufs, b, h, hk, start_m, n_blocks, qk_scale, L, S, lse_ptr, bh,
                     CAUSAL: gl.constexpr):
        _consume(0, descs, bars, bufs, b, h, start_m, n_blocks, qk_scale, L, S, lse_ptr, bh, CAUSAL)

    @gluon.jit
    def _second_group(descs, bars, bufs, b, h, hk, start_m, n_blocks, qk_scale, L, S, lse_ptr, bh,
                      CAUSAL: gl.constexpr):
        _consume(1, descs, bars, bufs, b, h, start_m, n_blocks, qk_scale, L, S, lse_ptr, bh, CAUSAL)

    @gluon.jit
    def _load(descs, bars, bufs, b, h, hk, start_m, n_blocks, qk_scale, L, S, lse_ptr, bh, CAUSAL: gl.constexpr):
        q_desc, k_desc, v_desc, o_desc = descs
        q_bars, k_ready, k_empty, v_ready, v_empty = bars
        q_smem, k_smem, v_smem = bufs
        HEAD_D: gl.constexpr = q_desc.block_type.shape[3]
        BLOCK: gl.constexpr = k_desc.block_type.shape[2]
        STAGES: gl.constexpr = k_smem.type.shape[0]
        for group in gl.static_range(2):
            bar = q_bars.index(group)
            mbarrier.expect(bar, q_desc.block_type.nbytes)
            tma_load(q_desc, [b, h, start_m + group * ROWS, 0], bar,
                      q_smem.index(group).reshape([1, 1, ROWS, HEAD_D]))
        for j in range(n_blocks):
            slot = j % STAGES
            # a slot is free once both groups released it (mbarriers start as if the phase
            # before the first had completed)
            phase = ((j // STAGES) & 1) ^ 1
            mbarrier.wait(k_empty.index(slot), phase)
            mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
            tma_load(k_desc, [b, hk, j * BLOCK, 0], k_ready.index(slot),
                      k_smem.index(slot).reshape([1, 1, BLOCK, HEAD_D]))
            mbarrier.wait(v_empty.index(slot), phase)
            mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
            tma_load(v_desc, [b, hk, j * BLOCK, 0], v_ready.index(slot),
                      v_smem.index(slot).reshape([1, 1, BLOCK, HEAD_D]))

    # the integer arguments are never specialized (a kernel per signature: see launcher.py)
    @gluon.jit(do_not_specialize=["H", "GROUP", "L", "S"], do_not_specialize_on_alignment=["lse_ptr"])
    def attention_kernel(q_desc, k_desc, v_desc, o_desc, lse_ptr, qk_scale, H, GROUP, L, S,
                         STAGES: gl.constexpr, CAUSAL: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                         LOADER_REGS: gl.constexpr):
        """Grid (cdiv(L, 128), B * H); 4 warps here (the first consumer group), 5 more in
        the partitions. Descriptors are 4-D over (B, heads, rows, head dim), boxes
        (1, 1, rows, head dim)."""
        dtype: gl.constexpr = q_desc.dtype
        HEAD_D: gl.constexpr = q_desc.block_type.shape[3]
        BLOCK: gl.constexpr = k_desc.block_type.shape[2]
        blocks_m = gl.cdiv(L, 2 * ROWS)
        pid_m = gl.program_id(0)
        bh = gl.program_id(1)
        if CAUSAL:
            pid_m = blocks_m - 1 - pid_m  # the longest rows first
        start_m = pid_m * (2 * ROWS)
        h = bh % H
        b = bh // H
        hk = h // GROUP
        if CAUSAL:
            hi = gl.minimum(S, start_m + 2 * ROWS)
        else:
            hi = S
        n_blocks = gl.cdiv(hi, BLOCK)

        tile: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, HEAD_D], dtype)
        block: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK, HEAD_D], dtype)
        q_smem = gl.allocate_shared_memory(dtype, [2, ROWS, HEAD_D], tile)
        k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK, HEAD_D], block)
        v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK, HEAD_D], block)
        q_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(2):
            mbarrier.init(q_bars.index(i), count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(k_ready.index(i), count=1)
            mbarrier.init(v_ready.index(i), count=1)
            mbarrier.init(k_empty.index(i), count=2)  # both consumer groups release a slot
            mbarrier.init(v_empty.index(i), count=2)
        descs = (q_desc, k_desc, v_desc, o_desc)
        bars = (q_bars, k_ready, k_empty, v_ready, v_empty)
        bufs = (q_smem, k_smem, v_smem)
        gl.warp_specialize([
            (_first_group, (descs, bars, bufs, b, h, hk, start_m, n_blocks, qk_scale, L, S, lse_ptr, bh, CAUSAL)),
            (_second_group, (descs, bars, bufs, b, h, hk, start_m, n_blocks, qk_scale, L, S, lse_ptr, bh, CAUSAL)),
            (_load, (descs, bars, bufs, b, h, hk, start_m, n_blocks, qk_scale, L, S, lse_ptr, bh, CAUSAL)),
        ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


@functools.lru_cache(maxsize=None)
def _layout(dtype: torch.dtype, rows: int, head_dim: int) -> Any:
    gdtype = gl.bfloat16 if dtype == torch.bfloat16 else gl.float16
    return gl.NVMMASharedLayout.get_default_for([1, 1, rows, head_dim], gdtype)


def compiles(target: Any) -> list[VariantCompile]:
    """The compiles the kernel needs for ``target`` (each head dim, causal or not, each ring
    depth; bf16, which compiles as fp16 does): for sm_90 only."""
    if gluon is None or target.backend != "cuda" or target.arch != 90:
        return []
    from triton.experimental.gluon._runtime import GluonASTSource

    found = []
    for head_dim in HEAD_DIMS:
        tile = repr(_layout(torch.bfloat16, QUERY_ROWS, head_dim))
        block = repr(_layout(torch.bfloat16, BLOCK_N, head_dim))
        signature = {
            "q_desc": f"tensordesc<bf16[1, 1, {QUERY_ROWS}, {head_dim}],{tile}>",
            "k_desc": f"tensordesc<bf16[1, 1, {BLOCK_N}, {head_dim}],{block}>",
            "v_desc": f"tensordesc<bf16[1, 1, {BLOCK_N}, {head_dim}],{block}>",
            "o_desc": f"tensordesc<bf16[1, 1, {QUERY_ROWS}, {head_dim}],{tile}>",
            "lse_ptr": "*fp32", "qk_scale": "fp32", "H": "i32", "GROUP": "i32", "L": "i32", "S": "i32",
            "STAGES": "constexpr", "CAUSAL": "constexpr", "CONSUMER_REGS": "constexpr", "LOADER_REGS": "constexpr",
        }
        names = list(signature)
        for causal in (True, False):
            for stages in (2, 3):
                values = {"STAGES": stages, "CAUSAL": causal, "CONSUMER_REGS": CONSUMER_REGISTERS,
                          "LOADER_REGS": LOADER_REGISTERS}
                source = GluonASTSource(attention_kernel, signature,
                                        {(names.index(k),): v for k, v in values.items()})
                config = f"head dim {head_dim}, {'causal' if causal else 'full'}, {stages} stages"
                found.append(VariantCompile(config, source, {"num_warps": 4, "maxnreg": MAX_REGISTERS}))
    return found


def _describable(t: torch.Tensor) -> bool:
    """TMA can address ``t``: last dim contiguous, other strides and the base 16-byte aligned."""
    size = t.element_size()
    return (t.stride(-1) == 1 and t.data_ptr() % 16 == 0
            and all(s * size % 16 == 0 for s in t.stride()[:-1]))


def serves(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor) -> bool:
    """Whether the kernel takes these inputs (everything else runs on the core's kernel)."""
    return (gluon is not None and q.is_cuda and q.dtype in (torch.float16, torch.bfloat16)
            and k.dtype == q.dtype and v.dtype == q.dtype and out.dtype == q.dtype
            and q.shape[-1] in HEAD_DIMS and k.shape[-1] == q.shape[-1] and v.shape[-1] == q.shape[-1]
            and q.numel() > 0 and k.numel() > 0 and q.shape[0] * q.shape[1] <= 65535
            and is_hopper(q.device.index if q.device.index is not None else torch.cuda.current_device())
            and all(_describable(t) for t in (q, k, v, out)))


def _descriptor(t: torch.Tensor, rows: int) -> Any:
    head_dim = t.shape[-1]
    return TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, rows, head_dim],
                            _layout(t.dtype, rows, head_dim))


def attended_pairs(batch_heads: int, length: int, keys: int, causal: bool) -> int:
    """(query, key) pairs a call attends: all of them, or the top-left causal triangle."""
    if not causal:
        return batch_heads * length * keys
    if length <= keys:
        return batch_heads * length * (length + 1) // 2
    return batch_heads * (keys * (keys + 1) // 2 + (length - keys) * keys)


def attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
                      causal: bool, qk_scale: float) -> bool:
    """The ``attention_forward`` variant point (``gems_core.variants.POINTS``)."""
    if attended_pairs(q.shape[0] * q.shape[1], q.shape[2], k.shape[2], causal) < MIN_WORK:
        return False
    if not serves(q, k, v, out):
        return False
    batch, heads, length, _ = q.shape
    kv_heads, keys = k.shape[1], k.shape[2]
    stages = 3 if keys >= LONG_KEYS else 2
    grid = (cdiv(length, BLOCK_M), batch * heads)
    args = (_descriptor(q, QUERY_ROWS), _descriptor(k, BLOCK_N), _descriptor(v, BLOCK_N),
            _descriptor(out, QUERY_ROWS), lse, qk_scale, heads, heads // kv_heads, length, keys,
            stages, bool(causal), CONSUMER_REGISTERS, LOADER_REGISTERS)
    index = q.device.index if q.device.index is not None else torch.cuda.current_device()
    _launcher(grid, args, (q.dtype, q.shape[-1], stages, bool(causal)), index)
    return True


#: every launch is reported to the native layer's recorder (launcher.py), which repeats it
attention_forward.reports_launches = True  # type: ignore[attr-defined]

#: launches through the compiled kernel after a signature's first (nothing is specialized
#: but the constexprs: see the kernel's decorator)
_launcher = KeptLauncher(attention_kernel if gluon is not None else None, num_warps=4, maxnreg=MAX_REGISTERS)
