"""Grouped matrix products (``_grouped_mm``): the expert GEMMs of a mixture-of-experts layer
in one launch.

The operands' layouts, as ATen's (``offs`` holds int32 cumulative group ends along the
ragged dim; group ``g`` spans ``offs[g - 1]:offs[g]``, from 0 for the first):

- 2d x 3d: tokens ``a`` (M, K) sorted by expert, weights ``b`` (G, K, N): rows of group
  ``g`` of the (M, N) result are ``a[rows] @ b[g]`` (ragged M).
- 3d x 2d: ``a`` (G, M, K), ``b`` (K, N): columns of group ``g`` are ``a[g] @ b[:, cols]``
  (ragged N).
- 2d x 2d: ``a`` (M, K), ``b`` (K, N): result ``g`` of (G, M, N) is
  ``a[:, ks] @ b[ks, :]`` (ragged K: per-expert weight gradients); an empty group gives
  zeros.
- 3d x 3d, no offsets: a batched product (G, M, N).

One kernel serves all four: each program computes a BLOCK_M x BLOCK_N tile of one group's
product, K in BLOCK_K steps through ``tl.dot`` into an fp32 accumulator. Along a ragged M
(N), the groups' tiles are laid end to end: the program finds its group by walking the
offsets (G scalar loads), so no offsets are read back and no program is launched per
(group, whole-dim tile) pair; the grid holds every tile the groups can need
(``cdiv(M, BLOCK_M) + G`` rows of tiles), and the programs past the last group's tiles do
nothing. Offsets are clamped into ``[previous end, size]``: offsets past the dim end
there, as in ATen; decreasing or negative offsets (which ATen's CUDA kernel does not
define, and its CPU fallback reads as Python slices) give empty groups instead. Rows
(columns) past the last offset are not written, as in ATen.

Served: float32, float16 and bfloat16 operands of one dtype (ATen's set), the result in
that dtype, with the layouts ATen admits (each matrix row- or column-major with 16-byte
aligned leading strides); anything else, a bias and another ``out_dtype`` go to ATen,
which raises. float32 products follow torch's matmul precision setting. Triton's CPU
interpreter reads bf16 ``tl.dot`` operands wrongly, so there bf16 tiles are widened to
fp32 first (exact: a bf16 product is exact in fp32), and bf16 is checked on the ``cpu``
backend through the same kernel.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from .. import runtime
from ..contract import KernelConfig
from ..host_math import cdiv
from ..launch_cache import LaunchCache
from ..registry import aten_op
from ..tuning import Tunable
from .gemm_common import _bucket, _input_precision, fits_shared_memory

GROUPED_MM = Tunable(
    "grouped_mm",
    params=("BLOCK_M", "BLOCK_N", "BLOCK_K"),
    defaults=[
        # the first is used where no benchmarking happens: safe on 64 KiB of shared memory
        KernelConfig({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4, num_stages=3),
        KernelConfig({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32}, num_warps=4, num_stages=3),
        KernelConfig({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64}, num_warps=4, num_stages=3),
        KernelConfig({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64}, num_warps=4, num_stages=4),
        KernelConfig({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, num_warps=8, num_stages=3),
    ],
    description="_grouped_mm: one BLOCK_M x BLOCK_N tile of one group's product per program, K in "
    "BLOCK_K steps",
)

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: which dim the offsets split
RAGGED_M, RAGGED_N, RAGGED_K, BATCHED = range(4)


@triton.jit
def _group_tile(offs_ptr, G, slot, BLOCK: tl.constexpr, LIMIT):
    """(group, first index, group end) of tile ``slot`` of the groups' BLOCK-sized tiles laid
    end to end along a ragged dim of size LIMIT; group -1 past the last one."""
    limit = tl.cast(LIMIT, tl.int64)
    group = tl.cast(-1, tl.int32)
    first = tl.cast(0, tl.int64)
    end_of_tile = tl.cast(0, tl.int64)
    tiles_before = tl.cast(0, tl.int64)
    previous = tl.cast(0, tl.int64)
    for g in range(G):
        end = tl.minimum(tl.maximum(tl.load(offs_ptr + g).to(tl.int64), previous), limit)
        count = (end - previous + BLOCK - 1) // BLOCK
        hit = (slot >= tiles_before) & (slot < tiles_before + count)
        group = tl.where(hit, g, group)
        first = tl.where(hit, previous + (slot - tiles_before) * BLOCK, first)
        end_of_tile = tl.where(hit, end, end_of_tile)
        tiles_before += count
        previous = end
    return group, first, end_of_tile


@triton.jit
def _group_span(offs_ptr, group, LIMIT):
    """[start, end) of ``group`` along a ragged dim of size LIMIT, offsets clamped as above."""
    limit = tl.cast(LIMIT, tl.int64)
    start = tl.cast(0, tl.int64)
    end = tl.cast(0, tl.int64)
    for g in range(group + 1):
        start = end
        end = tl.minimum(tl.maximum(tl.load(offs_ptr + g).to(tl.int64), start), limit)
    return start, end


@triton.jit
def _grouped_mm_kernel(
    a_ptr,  # (M, K) or (G, M, K), strides (stride_ag, stride_am, stride_ak); stride_ag 0 if 2-d
    b_ptr,  # (K, N) or (G, K, N), strides (stride_bg, stride_bk, stride_bn)
    c_ptr,  # (M, N) or (G, M, N), strides (stride_cg, stride_cm, stride_cn)
    offs_ptr,  # (G,) int32 cumulative group ends along the ragged dim; unused when BATCHED
    G,
    M,
    N,
    K,
    stride_ag,
    stride_am,
    stride_ak,
    stride_bg,
    stride_bk,
    stride_bn,
    stride_cg,
    stride_cm,
    stride_cn,
    RAGGED: tl.constexpr,  # RAGGED_M, RAGGED_N, RAGGED_K or BATCHED
    WIDEN: tl.constexpr,  # the operands to fp32 before the product
    INPUT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    # C_g[m, n] = sum over k of A_g[m, k] * B_g[k, n], fp32 accumulation, over group g's span
    pid = tl.program_id(0).to(tl.int64)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    m_end = tl.cast(M, tl.int64)
    n_end = tl.cast(N, tl.int64)
    k_start = tl.cast(0, tl.int64)
    k_end = tl.cast(K, tl.int64)
    if RAGGED == 0:
        group, m_first, m_end = _group_tile(offs_ptr, G, pid // tiles_n, BLOCK_M, M)
        n_first = (pid % tiles_n) * BLOCK_N
    elif RAGGED == 1:
        group, n_first, n_end = _group_tile(offs_ptr, G, pid // tiles_m, BLOCK_N, N)
        m_first = (pid % tiles_m) * BLOCK_M
    else:
        group = (pid // (tiles_m * tiles_n)).to(tl.int32)
        tile = pid % (tiles_m * tiles_n)
        m_first = (tile // tiles_n) * BLOCK_M
        n_first = (tile % tiles_n) * BLOCK_N
        if RAGGED == 2:
            k_start, k_end = _group_span(offs_ptr, group, K)
    if group >= 0:
        rm = m_first + tl.arange(0, BLOCK_M)
        rn = n_first + tl.arange(0, BLOCK_N)
        rk = tl.arange(0, BLOCK_K)
        m_ok = rm < m_end
        n_ok = rn < n_end
        a_base = a_ptr + group.to(tl.int64) * stride_ag + rm[:, None] * stride_am
        b_base = b_ptr + group.to(tl.int64) * stride_bg + rn[None, :] * stride_bn
        acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        for k in range(k_start, k_end, BLOCK_K):
            kk = k + rk
            k_ok = kk < k_end
            a = tl.load(a_base + kk[None, :] * stride_ak, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
            b = tl.load(b_base + kk[:, None] * stride_bk, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
            if WIDEN:
                acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
            else:
                acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION, out_dtype=tl.float32)
        c = c_ptr + group.to(tl.int64) * stride_cg + rm[:, None] * stride_cm + rn[None, :] * stride_cn
        tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


_grouped_mm = LaunchCache(_grouped_mm_kernel, name="grouped_mm")


def _admitted_layout(mat: torch.Tensor) -> bool:
    """ATen's check of an operand: row- or column-major in its last two dims, the leading
    stride a multiple of 16 bytes (and, off the CPU, the data 16-byte aligned)."""
    sizes, strides = mat.shape[-2:], mat.stride()[-2:]
    alignment = 16 // mat.element_size()
    if mat.device.type != "cpu" and mat.data_ptr() % 16:
        return False
    if strides[0] == 1 and strides[1] >= max(1, sizes[0]):
        return strides[1] % alignment == 0
    if strides[1] == 1 and strides[0] >= max(1, sizes[1]):
        return strides[0] % alignment == 0
    return False


def _ragged(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None) -> int | None:
    """Which dim the offsets split for these operands; None where ATen must judge the call."""
    if offs is None:
        batched = a.dim() == b.dim() == 3 and a.shape[0] == b.shape[0] and a.shape[2] == b.shape[1]
        return BATCHED if batched else None
    if offs.dim() != 1 or offs.dtype != torch.int32 or offs.device != a.device:
        return None
    groups = offs.shape[0]
    if a.dim() == 2 and b.dim() == 3 and b.shape[0] == groups and a.shape[1] == b.shape[1]:
        return RAGGED_M
    if a.dim() == 3 and b.dim() == 2 and a.shape[0] == groups and a.shape[2] == b.shape[0]:
        return RAGGED_N
    if a.dim() == 2 and b.dim() == 2 and a.shape[1] == b.shape[0]:
        return RAGGED_K
    return None


def _result(a: torch.Tensor, b: torch.Tensor, groups: int, ragged: int) -> torch.Tensor:
    """The uninitialized result, with ATen's strides: rows padded to 16 bytes."""
    if ragged == RAGGED_M:
        shape: tuple[int, ...] = (a.shape[0], b.shape[-1])
    elif ragged == RAGGED_N:
        shape = (a.shape[1], b.shape[1])
    else:
        shape = (groups, a.shape[-2], b.shape[-1])
    alignment = 16 // a.element_size()
    padded = cdiv(shape[-1], alignment) * alignment
    strides = (padded, 1) if len(shape) == 2 else (shape[1] * padded, padded, 1)
    return torch.empty_strided(shape, strides, dtype=a.dtype, device=a.device)


def _strides(t: torch.Tensor) -> tuple[int, int, int]:
    """(group, row, column) strides of a 2-d (shared by the groups) or 3-d operand."""
    return (0, *t.stride()) if t.dim() == 2 else t.stride()


@aten_op("_grouped_mm")
def grouped_mm(self: torch.Tensor, mat2: torch.Tensor, offs: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, out_dtype: torch.dtype | None = None) -> Any:
    """The groups' products ``self_g @ mat2_g``, groups split by ``offs`` (see the module)."""
    if (self.dtype not in _DTYPES or mat2.dtype != self.dtype or self.device != mat2.device
            or bias is not None or out_dtype not in (None, self.dtype) or not 2 <= self.dim() <= 3
            or not 2 <= mat2.dim() <= 3):
        return NotImplemented  # ATen raises (or mixes dtypes)
    ragged = _ragged(self, mat2, offs)
    if ragged is None or not (_admitted_layout(self) and _admitted_layout(mat2)):
        return NotImplemented
    G = self.shape[0] if offs is None else offs.shape[0]
    out = _result(self, mat2, G, ragged)
    M, K, N = self.shape[-2], self.shape[-1], mat2.shape[-1]
    if G == 0 or M == 0 or N == 0:
        return out
    interpreted_bf16 = self.dtype == torch.bfloat16 and runtime.current().interpreter
    constexprs = {"RAGGED": ragged, "WIDEN": interpreted_bf16, "INPUT_PRECISION": _input_precision(self.dtype)}
    offsets = offs.contiguous() if offs is not None else out  # a placeholder pointer when batched

    def run(config: KernelConfig, target: torch.Tensor) -> None:
        p = config.params
        tiles_m, tiles_n = cdiv(M, p["BLOCK_M"]), cdiv(N, p["BLOCK_N"])
        if ragged == RAGGED_M:
            grid = (tiles_m + G) * tiles_n
        elif ragged == RAGGED_N:
            grid = (tiles_n + G) * tiles_m
        else:
            grid = G * tiles_m * tiles_n
        _grouped_mm((grid,), self, mat2, target, offsets, G, M, N, K, *_strides(self), *_strides(mat2),
                    *_strides(target), config=config, options=GROUPED_MM.options(), **constexprs)

    def bench(config: KernelConfig) -> float:
        scratch = torch.empty_strided(out.shape, out.stride(), dtype=out.dtype, device=out.device)
        return float(triton.testing.do_bench(lambda: run(config, scratch)))

    key = (str(self.dtype), ragged, _bucket(G), _bucket(M), _bucket(N), _bucket(K))
    run(GROUPED_MM.choose(key, bench, fits_shared_memory(self.dtype)), out)
    return out
