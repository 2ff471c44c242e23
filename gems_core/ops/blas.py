"""Batched and vector products: bmm and baddbmm (a batch grid axis over mm's tile), mv (a
GEMV), with their out= overloads; resolve_conj and resolve_neg for real tensors.

bmm runs mm.py's tile (:func:`gemm_tile`, the "mm" tunable's configs) once per batch entry:
the second grid axis is the batch, and each operand's batch stride moves its base pointer,
so transposed, sliced or expanded (stride 0) batches are read in place, never copied.
``torch.matmul`` of two 3-D (or broadcast N-D) tensors reaches bmm; a 2-D matrix times a
vector reaches mv.

mv is not a padded GEMM: it runs gemm_decode.py's GEMV (the "gemv" tunable, shared with
mm/addmm of one row or column) on the transposed matrix, each program owning a block of
result entries and streaming their rows of the matrix once, in an fp32 (fp64) tile that is
summed across K once at the end.

``outer`` (and ``ger``) is a composite in ATen that reaches the backend as ``mul.Tensor`` of
a column and a row, so gems serves it through arithmetic.py's mul; nothing is registered
for it here.

resolve_conj/resolve_neg are composites too: they are registered on the Autograd key so
gems answers before they decompose. A real tensor (no conjugate or negative bit) is its own
result; a tensor with a bit set goes to ATen, which materializes it.

Cases ATen must judge (integer or mixed dtypes, shapes that do not multiply, batch sizes
that differ) are handed to ATen, so its errors are its own.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from ..contract import KernelConfig
from ..host_math import cdiv
from ..launch_cache import LaunchCache
from ..registry import aten_op
from .gemm_decode import launch_gemv
from .mm import (
    _FLOATS,
    _INT32_MAX,
    MM,
    _bucket,
    _input_precision,
    _max_offset,
    _prepare_out,
    _scalar_arg,
    _shares_memory,
    fits_shared_memory,
    gemm_tile,
)

#: the most programs one grid axis past the first may hold on common hardware
_MAX_GRID_Y = 65535


@triton.jit
def _bmm_kernel(
    a_ptr,  # (B, M, K), strides (stride_ab, stride_am, stride_ak)
    b_ptr,  # (B, K, N), strides (stride_bb, stride_bk, stride_bn)
    c_ptr,  # (B, M, N), strides (stride_cb, stride_cm, stride_cn); the result
    bias_ptr,  # (B, M, N) baddbmm's input, broadcast (stride 0); unused unless HAS_BIAS
    M,
    N,
    K,
    stride_ab,
    stride_am,
    stride_ak,
    stride_bb,
    stride_bk,
    stride_bn,
    stride_cb,
    stride_cm,
    stride_cn,
    stride_biasb,
    stride_biasm,
    stride_biasn,
    alpha,  # fp32, or the bits of an fp64 when ACC_FP64
    beta,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACC_FP64: tl.constexpr,
    INT64: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    # C[b] = alpha * (A[b] @ B[b]) + beta * bias[b]; axis 0: tiles of C[b], axis 1: b
    batch = tl.program_id(1)
    if INT64:
        batch = batch.to(tl.int64)
    gemm_tile(
        tl.program_id(0),
        a_ptr + batch * stride_ab,
        b_ptr + batch * stride_bb,
        c_ptr + batch * stride_cb,
        bias_ptr + batch * stride_biasb,
        M,
        N,
        K,
        stride_am,
        stride_ak,
        stride_bk,
        stride_bn,
        stride_cm,
        stride_cn,
        stride_biasm,
        stride_biasn,
        alpha,
        beta,
        BLOCK_M,
        BLOCK_N,
        BLOCK_K,
        GROUP_M,
        HAS_BIAS,
        ACC_FP64,
        INT64,
        INPUT_PRECISION,
    )


_launch_bmm = LaunchCache(_bmm_kernel, name="bmm")


def _launch_batched(
    a: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor,
    bias: torch.Tensor | None,
    alpha: Any,
    beta: Any,
) -> None:
    """out[i] = alpha * (a[i] @ b[i]) + beta * bias[i] (bias already expanded to out's shape)."""
    (B, M, K), N = a.shape, b.shape[2]
    if B == 0 or M == 0 or N == 0:
        return
    fp64 = a.dtype == torch.float64
    tensors = (a, b, out) if bias is None else (a, b, out, bias)
    bias_arg = out if bias is None else bias  # a placeholder pointer when there is no bias
    constexprs = {
        "HAS_BIAS": bias is not None,
        "ACC_FP64": fp64,
        "INT64": any(_max_offset(t) > _INT32_MAX for t in tensors),
        "INPUT_PRECISION": _input_precision(a.dtype),
    }
    scalars = (_scalar_arg(alpha, fp64), _scalar_arg(beta, fp64))

    def run(config: KernelConfig, target: torch.Tensor) -> None:
        p = config.params
        tiles = cdiv(M, p["BLOCK_M"]) * cdiv(N, p["BLOCK_N"])
        # the batch axis holds at most _MAX_GRID_Y programs: larger batches go in slices
        for start in range(0, B, _MAX_GRID_Y):
            count = min(B - start, _MAX_GRID_Y)
            x, y, c, bias_part = (t.narrow(0, start, count) for t in (a, b, target, bias_arg))
            _launch_bmm(
                (tiles, count),
                x,
                y,
                c,
                bias_part,
                M,
                N,
                K,
                *x.stride(),
                *y.stride(),
                *c.stride(),
                *bias_part.stride(),
                *scalars,
                config=config,
                options=MM.options(),
                **constexprs,
            )

    def bench(config: KernelConfig) -> float:
        scratch = torch.empty_like(out)  # never the real output: it may be the bias itself
        return float(triton.testing.do_bench(lambda: run(config, scratch)))

    key = ("bmm", str(a.dtype), _bucket(B), _bucket(M), _bucket(N), _bucket(K))
    run(MM.choose(key, bench, fits_shared_memory(a.dtype)), out)


def _batches(batch1: Any, batch2: Any) -> bool:
    """Two float 3-D tensors of one dtype whose batches multiply; else ATen judges."""
    return (
        isinstance(batch1, torch.Tensor)
        and isinstance(batch2, torch.Tensor)
        and batch1.dim() == 3
        and batch2.dim() == 3
        and batch1.dtype == batch2.dtype
        and batch1.dtype in _FLOATS
        and batch1.shape[0] == batch2.shape[0]
        and batch1.shape[2] == batch2.shape[1]
        and batch1.device == batch2.device
    )


def _bmm_shape(batch1: torch.Tensor, batch2: torch.Tensor) -> tuple[int, int, int]:
    return (batch1.shape[0], batch1.shape[1], batch2.shape[2])


@aten_op("bmm")
def bmm(self: torch.Tensor, mat2: torch.Tensor) -> Any:
    """self[i] @ mat2[i] for (B, M, K) and (B, K, N) float tensors of one dtype."""
    if not _batches(self, mat2):
        return NotImplemented
    out = torch.empty(_bmm_shape(self, mat2), dtype=self.dtype, device=self.device)
    _launch_batched(self, mat2, out, None, 1, 0)
    return out


@aten_op("bmm.out")
def bmm_out(self: torch.Tensor, mat2: torch.Tensor, *, out: torch.Tensor) -> Any:
    if not _batches(self, mat2) or _shares_memory(out, self, mat2):
        return NotImplemented
    if not _prepare_out(out, _bmm_shape(self, mat2), self):
        return NotImplemented
    _launch_batched(self, mat2, out, None, 1, 0)
    return out


def _baddbmm(
    input: Any,
    batch1: torch.Tensor,
    batch2: torch.Tensor,
    beta: Any,
    alpha: Any,
    out: torch.Tensor | None,
) -> Any:
    if (
        not _batches(batch1, batch2)
        or not isinstance(input, torch.Tensor)
        or input.dtype != batch1.dtype
        or input.device != batch1.device
        or any(isinstance(s, complex) for s in (beta, alpha))
    ):
        return NotImplemented
    shape = _bmm_shape(batch1, batch2)
    try:
        bias = input.expand(shape)
    except RuntimeError:
        return NotImplemented
    if out is None:
        out = torch.empty(shape, dtype=batch1.dtype, device=batch1.device)
    else:
        # each bias element is read just before that element is written: out may be the
        # input itself (of the result's shape), but overlap nothing else
        same_as_input = (
            out.data_ptr() == input.data_ptr()
            and tuple(out.shape) == tuple(input.shape) == shape
            and out.stride() == input.stride()
        )
        if _shares_memory(out, batch1, batch2) or (
            _shares_memory(out, input) and not same_as_input
        ):
            return NotImplemented
        if not _prepare_out(out, shape, batch1):
            return NotImplemented
    # beta == 0 ignores the input entirely (NaN and inf in it do not propagate), as in ATen
    _launch_batched(batch1, batch2, out, None if beta == 0 else bias, alpha, beta)
    return out


@aten_op("baddbmm")
def baddbmm(
    self: torch.Tensor,
    batch1: torch.Tensor,
    batch2: torch.Tensor,
    *,
    beta: Any = 1,
    alpha: Any = 1,
) -> Any:
    """beta * self + alpha * (batch1 @ batch2), ``self`` broadcast to (B, M, N)."""
    return _baddbmm(self, batch1, batch2, beta, alpha, None)


@aten_op("baddbmm.out")
def baddbmm_out(
    self: torch.Tensor,
    batch1: torch.Tensor,
    batch2: torch.Tensor,
    *,
    beta: Any = 1,
    alpha: Any = 1,
    out: torch.Tensor,
) -> Any:
    return _baddbmm(self, batch1, batch2, beta, alpha, out)


def _launch_gemv(a: torch.Tensor, x: torch.Tensor, out: torch.Tensor) -> None:
    """out = a @ x for an (M, K) matrix and a (K,) vector; K == 0 gives zeros (no step)."""
    M, K = a.shape
    # the GEMV's (K, N) weight is a^T: the result's entries are its columns
    launch_gemv(x, x.stride(0), a, a.stride(1), a.stride(0), out, out.stride(0), None, 0, K, M, 1, 0)


def _matrix_vector(matrix: Any, vec: Any) -> bool:
    """A float matrix and vector of one dtype that multiply; anything else is ATen's."""
    return (
        isinstance(matrix, torch.Tensor)
        and isinstance(vec, torch.Tensor)
        and matrix.dim() == 2
        and vec.dim() == 1
        and matrix.dtype == vec.dtype
        and matrix.dtype in _FLOATS
        and matrix.shape[1] == vec.shape[0]
        and matrix.device == vec.device
    )


@aten_op("mv")
def mv(self: torch.Tensor, vec: torch.Tensor) -> Any:
    """self @ vec for an (M, K) matrix and a (K,) vector of one float dtype."""
    if not _matrix_vector(self, vec):
        return NotImplemented
    out = torch.empty((self.shape[0],), dtype=self.dtype, device=self.device)
    _launch_gemv(self, vec, out)
    return out


@aten_op("mv.out")
def mv_out(self: torch.Tensor, vec: torch.Tensor, *, out: torch.Tensor) -> Any:
    if not _matrix_vector(self, vec) or _shares_memory(out, self, vec):
        return NotImplemented
    if not _prepare_out(out, (self.shape[0],), self):
        return NotImplemented
    _launch_gemv(self, vec, out)
    return out


@aten_op("resolve_conj", autograd=True)  # a composite in ATen: served before it decomposes
def resolve_conj(self: torch.Tensor) -> Any:
    """``self`` itself unless its conjugate bit is set (then ATen materializes it)."""
    if not isinstance(self, torch.Tensor) or self.is_conj():
        return NotImplemented
    return self


@aten_op("resolve_neg", autograd=True)  # a composite in ATen: served before it decomposes
def resolve_neg(self: torch.Tensor) -> Any:
    """``self`` itself unless its negative bit is set (then ATen materializes it)."""
    if not isinstance(self, torch.Tensor) or self.is_neg():
        return NotImplemented
    return self
