"""Host helpers shared by the GEMM kernels (mm.py's tiled kernel, the decode-shaped and GEMV
variants of gemm_decode.py, blas.py's batched and vector products): dtypes served, tuning
buckets, scalar arguments, offset widths and the shared-memory admission of tile configs."""

from __future__ import annotations

import struct
from typing import Any, Callable

import torch
import triton
import triton.language as tl

from .. import runtime
from ..contract import KernelConfig
from ..host_math import next_power_of_2

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_INT32_MAX = 2**31 - 1


def _bucket(size: int) -> int:
    """Shapes within a power of two (capped) share one tuning choice."""
    return min(next_power_of_2(max(size, 1)), 8192)


def _input_precision(dtype: torch.dtype) -> str | None:
    """fp32 products follow torch's matmul precision setting (IEEE by default, as ATen)."""
    if dtype != torch.float32:
        return None
    return "ieee" if torch.get_float32_matmul_precision() == "highest" else "tf32"


def _scalar_arg(value: Any, fp64: bool) -> Any:
    """Triton passes Python floats as fp32; an fp64 product gets the value's 64-bit pattern."""
    if fp64:
        return struct.unpack("<q", struct.pack("<d", float(value)))[0]
    return float(value)


def _max_offset(t: torch.Tensor) -> int:
    return sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride()))


def _needs_int64(*tensors: torch.Tensor) -> bool:
    """Whether some element offset of these tensors passes int32."""
    return any(_max_offset(t) > _INT32_MAX for t in tensors)


def fits_shared_memory(dtype: torch.dtype) -> Callable[[KernelConfig], bool]:
    """Whether a GEMM tile config fits the chip's shared memory for ``dtype`` operands:
    ``num_stages`` copies of the A and B tiles, or the fp32 output tile that the epilogue
    may stage through shared memory, whichever is larger."""
    limit = runtime.current().limits.shared_memory_per_block
    size = dtype.itemsize

    def admit(config: KernelConfig) -> bool:
        p = config.params
        block_m, block_n, block_k = p.get("BLOCK_M", 0), p.get("BLOCK_N", 0), p.get("BLOCK_K", 0)
        staged = max(config.num_stages, 1) * (block_m * block_k + block_k * block_n) * size
        return max(staged, block_m * block_n * 4) <= limit

    return admit


@triton.jit
def store_epilogue(acc, c_ptrs, bias_ptrs, mask, alpha, beta, HAS_BIAS: tl.constexpr):
    """C = alpha * acc + beta * bias, cast to C's dtype, at ``c_ptrs``; ``bias_ptrs`` (read
    only with HAS_BIAS) carry the bias's broadcast through its strides."""
    acc = acc * alpha
    if HAS_BIAS:
        acc += tl.load(bias_ptrs, mask=mask).to(acc.dtype) * beta
    tl.store(c_ptrs, acc.to(c_ptrs.dtype.element_ty), mask=mask)
