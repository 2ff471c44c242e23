"""FP8 conversions (``torch.float8_e4m3fn``, ``torch.float8_e5m2``) for copy_, and _scaled_mm.

A float8 tensor is read and written as its bytes (a uint8 view with the same strides) and
converted with integer arithmetic on the bits, so the result is the same on every chip and in
the CPU interpreter (whose own float8 casts round and saturate differently from ATen's).
The conversions are ATen's:

- to float8: through float32 (a float64 or int64 source is rounded to float32 first, as
  ATen's cast does), then rounded to nearest, ties to even; NaN stays NaN (sign kept).
  e4m3fn has no infinity; what lies past 448 follows the installed torch, asked once:
  torch 2.13's cast saturates (anything beyond 448, infinity included, becomes ±448),
  earlier releases round it to NaN (from 464 up, infinity included). e5m2 keeps IEEE's
  rules: past 57344 it rounds to ±inf.
- from float8: exact in float32, then to the destination as from a float32 (int8, int16
  and uint8 through int64, keeping the low bits, as ATen converts them).

_scaled_mm (tensor-wise scales, or row-wise: scale_a (M, 1), scale_b (1, N), float32):
``out = (a * scale_a) @ (b * scale_b) + bias`` in float32, stored as float32, bfloat16 or
float16. The operands are decoded in the kernel and multiplied with a tf32 ``tl.dot`` into
float32 (exact products: every float8 value is a tf32 value). A float8 result (ATen's default out_dtype) and
``scale_result`` are left to ATen.

A chip declares float8 through its descriptor (``DtypeSupport.float8_e4m3fn``/``float8_e5m2``);
on one without, calls with float8 tensors stay on ATen.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from ..codegen.pointwise import pointwise
from ..contract import KernelConfig
from ..host_math import cdiv, next_power_of_2
from ..launch_cache import LaunchCache
from ..registry import aten_op
from ..tuning import Tunable

FLOAT8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


@triton.jit
def _encode(x, MANTISSA: tl.constexpr, BIAS: tl.constexpr, TOP: tl.constexpr, SUBNORMAL_ROUNDER: tl.constexpr):
    # float32 x -> the float8 byte (as int32): MANTISSA stored bits, exponent bias BIAS,
    # TOP the largest magnitude's byte (448's for e4m3fn, inf's for e5m2)
    bits = x.to(tl.int32, bitcast=True)
    sign = (bits >> 24) & 0x80
    magnitude = bits & 0x7FFFFFFF
    drop: tl.constexpr = 23 - MANTISSA
    # rebias the exponent, then round the mantissa to nearest even
    rebiased = magnitude - ((127 - BIAS) << 23)
    normal = (rebiased + ((1 << (drop - 1)) - 1) + ((magnitude >> drop) & 1)) >> drop
    normal = tl.minimum(normal, TOP)
    # below the smallest normal, float32's own rounding of the sum puts the float8
    # subnormal (in units of its smallest step) in the low bits
    rounder = tl.abs(x) + SUBNORMAL_ROUNDER
    subnormal = rounder.to(tl.int32, bitcast=True) - tl.full(x.shape, SUBNORMAL_ROUNDER, tl.float32).to(
        tl.int32, bitcast=True)
    byte = tl.where(magnitude < ((128 - BIAS) << 23), subnormal, normal)
    byte = tl.where(magnitude > 0x7F800000, 0x7F, byte)
    return byte | sign


@triton.jit
def _decode(byte, MANTISSA: tl.constexpr, BIAS: tl.constexpr, HAS_INF: tl.constexpr):
    # the float8 byte (int32) -> its float32 value
    magnitude = byte & 0x7F
    normal = ((magnitude << (23 - MANTISSA)) + ((127 - BIAS) << 23)).to(tl.float32, bitcast=True)
    smallest: tl.constexpr = 2.0 ** (1 - BIAS - MANTISSA)
    subnormal = magnitude.to(tl.float32) * smallest
    value = tl.where(magnitude < (1 << MANTISSA), subnormal, normal)
    if HAS_INF:
        value = tl.where(magnitude == 0x7C, float("inf"), value)
        value = tl.where(magnitude > 0x7C, float("nan"), value)
    else:
        value = tl.where(magnitude == 0x7F, float("nan"), value)
    return tl.where((byte & 0x80) != 0, -value, value)


@triton.jit
def _e4m3fn_value(byte):
    return _decode(byte, 3, 7, False)


@triton.jit
def _e5m2_value(byte):
    return _decode(byte, 2, 15, True)


@pointwise(kind="NO_OPMATH")
@triton.jit
def _to_e4m3fn(x):
    return _encode(x, 3, 7, 0x7E, 16384.0)  # past 448: 448 (0x7E)


@pointwise(kind="NO_OPMATH")
@triton.jit
def _to_e4m3fn_nan(x):
    return _encode(x, 3, 7, 0x7F, 16384.0)  # rounded past 448: NaN (0x7F)


@pointwise(kind="NO_OPMATH")
@triton.jit
def _to_e5m2(x):
    return _encode(x, 2, 15, 0x7C, 128.0)


@pointwise(kind="NO_OPMATH")
@triton.jit
def _from_e4m3fn(byte):
    return _e4m3fn_value(byte)


@pointwise(kind="NO_OPMATH")
@triton.jit
def _from_e5m2(byte):
    return _e5m2_value(byte)


@pointwise(kind="NO_OPMATH")
@triton.jit
def _from_e4m3fn_integral(byte):
    return _e4m3fn_value(byte).to(tl.int64)


@pointwise(kind="NO_OPMATH")
@triton.jit
def _from_e5m2_integral(byte):
    return _e5m2_value(byte).to(tl.int64)


@pointwise(kind="NO_OPMATH")
@triton.jit
def _from_e4m3fn_bool(byte):
    return _e4m3fn_value(byte) != 0


@pointwise(kind="NO_OPMATH")
@triton.jit
def _from_e5m2_bool(byte):
    return _e5m2_value(byte) != 0


@pointwise(kind="NO_OPMATH")
@triton.jit
def _bytes(byte):
    return byte


_ENCODERS = {torch.float8_e4m3fn: _to_e4m3fn, torch.float8_e5m2: _to_e5m2}
_DECODERS = {
    torch.float8_e4m3fn: (_from_e4m3fn, _from_e4m3fn_integral, _from_e4m3fn_bool),
    torch.float8_e5m2: (_from_e5m2, _from_e5m2_integral, _from_e5m2_bool),
}


def _saturates() -> bool:
    # asked when the module loads, before gems serves copy_ (the cast would reach gems)
    return not bool(torch.tensor([1000.0]).to(torch.float8_e4m3fn).float().isnan().item())


_SATURATES = _saturates()


def aten_saturates_e4m3fn() -> bool:
    """Whether this torch's cast to float8_e4m3fn saturates past 448 (else it gives NaN)."""
    return _SATURATES


def convert(dst: torch.Tensor, src: torch.Tensor) -> None:
    """``dst[...] = src`` where either is float8 (``src`` of ``dst``'s shape, expanded where
    broadcast), converted as ATen converts."""
    if src.dtype == dst.dtype:
        _bytes(src.view(torch.uint8), out=dst.view(torch.uint8))
    elif src.dtype in FLOAT8_DTYPES and dst.dtype in FLOAT8_DTYPES:
        wide = torch.empty(src.shape, dtype=torch.float32, device=src.device)
        convert(wide, src)
        convert(dst, wide)
    elif dst.dtype in FLOAT8_DTYPES:
        encoder = _ENCODERS[dst.dtype]
        if dst.dtype == torch.float8_e4m3fn and not aten_saturates_e4m3fn():
            encoder = _to_e4m3fn_nan
        encoder(src, out=dst.view(torch.uint8), dtype=torch.uint8, compute_dtype=torch.float32)
    else:
        floating, integral, boolean = _DECODERS[src.dtype]
        # ATen converts a float to int32/int64 directly and to a narrower integer through a
        # wide one, keeping the low bits
        narrow = dst.dtype in (torch.int8, torch.int16, torch.uint8)
        decoder = boolean if dst.dtype == torch.bool else integral if narrow else floating
        decoder(src.view(torch.uint8), out=dst, dtype=dst.dtype, compute_dtype=torch.int32)


SCALED_MM = Tunable(
    "scaled_mm",
    params=("BLOCK_M", "BLOCK_N", "BLOCK_K"),
    defaults=[KernelConfig({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4, num_stages=3)],
    description="_scaled_mm: one BLOCK_M x BLOCK_N result tile per program, K in BLOCK_K steps",
)


@triton.jit
def _float8_tile(ptr, offsets, mask, E5M2: tl.constexpr):
    byte = tl.load(ptr + offsets, mask=mask, other=0).to(tl.int32)
    return _e5m2_value(byte) if E5M2 else _e4m3fn_value(byte)


@triton.jit
def _scaled_mm_kernel(
    a_ptr,  # (M, K) float8 bytes, strides (stride_am, stride_ak)
    b_ptr,  # (K, N) float8 bytes, strides (stride_bk, stride_bn)
    scale_a_ptr,  # float32: one value, or (M,) with ROWWISE
    scale_b_ptr,  # float32: one value, or (N,) with ROWWISE
    bias_ptr,  # (N,) with stride stride_bias; unused unless HAS_BIAS
    c_ptr,  # (M, N), strides (stride_cm, stride_cn)
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_bias,
    stride_cm,
    stride_cn,
    A_E5M2: tl.constexpr,
    B_E5M2: tl.constexpr,
    ROWWISE: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    # c = (a @ b) * scale_a * scale_b + bias, accumulated in float32
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(N, BLOCK_N)
    rows = (pid // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (pid % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + ks
        a = _float8_tile(a_ptr, rows[:, None] * stride_am + k[None, :] * stride_ak,
                         (rows[:, None] < M) & (k[None, :] < K), A_E5M2)
        b = _float8_tile(b_ptr, k[:, None] * stride_bk + cols[None, :] * stride_bn,
                         (k[:, None] < K) & (cols[None, :] < N), B_E5M2)
        # tf32 is exact here: every float8 value is a tf32 value
        acc = tl.dot(a, b, acc, input_precision="tf32", out_dtype=tl.float32)
    if ROWWISE:
        scale_a = tl.load(scale_a_ptr + rows, mask=rows < M, other=0.0)[:, None]
        scale_b = tl.load(scale_b_ptr + cols, mask=cols < N, other=0.0)[None, :]
    else:
        scale_a = tl.load(scale_a_ptr)
        scale_b = tl.load(scale_b_ptr)
    acc = acc * scale_a * scale_b
    if HAS_BIAS:
        acc += tl.load(bias_ptr + cols * stride_bias, mask=cols < N, other=0.0).to(tl.float32)[None, :]
    inside = (rows[:, None] < M) & (cols[None, :] < N)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn,
             acc.to(c_ptr.dtype.element_ty), mask=inside)


_scaled_mm_launch = LaunchCache(_scaled_mm_kernel, name="scaled_mm")
_OUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _rowwise(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor) -> bool | None:
    """True for row-wise scales ((M, 1) and (1, N), contiguous), False for tensor-wise (one
    float32 value each), None for the configurations gems leaves to ATen."""
    if scale_a.dtype != torch.float32 or scale_b.dtype != torch.float32:
        return None
    if scale_a.numel() == 1 and scale_b.numel() == 1:
        return False
    rowwise = (tuple(scale_a.shape) == (a.shape[0], 1) and tuple(scale_b.shape) == (1, b.shape[1])
               and scale_a.is_contiguous() and scale_b.is_contiguous())
    return True if rowwise else None


def _scaled_mm_into(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor,
                    scale_b: torch.Tensor, bias: torch.Tensor | None, rowwise: bool) -> torch.Tensor:
    (m, k), n = a.shape, b.shape[1]
    if out.numel() == 0:
        return out
    if k == 0:
        out.copy_(torch.zeros_like(out) if bias is None else bias.expand(m, n))
        return out
    config = SCALED_MM.choose("all")
    block_m = min(config.params["BLOCK_M"], max(16, next_power_of_2(m)))
    block_n = min(config.params["BLOCK_N"], max(16, next_power_of_2(n)))
    block_k = min(config.params["BLOCK_K"], max(16, next_power_of_2(k)))
    bias_arg = bias if bias is not None else out
    _scaled_mm_launch(
        (cdiv(m, block_m) * cdiv(n, block_n),), a.view(torch.uint8), b.view(torch.uint8), scale_a, scale_b,
        bias_arg, out, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
        bias.stride(0) if bias is not None else 0, out.stride(0), out.stride(1),
        config=config, options=SCALED_MM.options(), A_E5M2=a.dtype == torch.float8_e5m2,
        B_E5M2=b.dtype == torch.float8_e5m2, ROWWISE=rowwise, HAS_BIAS=bias is not None,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
    )
    return out


def _scaled_mm_plan(a: Any, b: Any, scale_a: Any, scale_b: Any, bias: Any, scale_result: Any,
                    out_dtype: Any) -> tuple[torch.dtype, bool] | None:
    """(result dtype, row-wise) for a call gems serves; None hands it to ATen (which raises
    for the bad ones)."""
    tensors = [a, b, scale_a, scale_b] + ([bias] if bias is not None else [])
    if scale_result is not None or out_dtype not in _OUT_DTYPES:
        return None
    if len({t.device for t in tensors}) != 1 or a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        return None
    if a.dtype not in FLOAT8_DTYPES or b.dtype not in FLOAT8_DTYPES:
        return None
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != b.shape[1] or bias.dtype not in _OUT_DTYPES):
        return None
    rowwise = _rowwise(a, b, scale_a, scale_b)
    return None if rowwise is None else (out_dtype, rowwise)


@aten_op("_scaled_mm")
def _scaled_mm(self: torch.Tensor, mat2: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
               bias: torch.Tensor | None = None, scale_result: torch.Tensor | None = None,
               out_dtype: torch.dtype | None = None, use_fast_accum: bool = False) -> Any:
    """``(self * scale_a) @ (mat2 * scale_b) + bias`` of float8 matrices, in ``out_dtype``
    (float32, bfloat16 or float16; float32 accumulation whatever ``use_fast_accum`` says)."""
    plan = _scaled_mm_plan(self, mat2, scale_a, scale_b, bias, scale_result, out_dtype)
    if plan is None:
        return NotImplemented
    out = torch.empty((self.shape[0], mat2.shape[1]), dtype=plan[0], device=self.device)
    return _scaled_mm_into(out, self, mat2, scale_a, scale_b, bias, plan[1])


@aten_op("_scaled_mm.out")
def _scaled_mm_out(self: torch.Tensor, mat2: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                   bias: torch.Tensor | None = None, scale_result: torch.Tensor | None = None,
                   out_dtype: torch.dtype | None = None, use_fast_accum: bool = False, *,
                   out: torch.Tensor) -> Any:
    plan = _scaled_mm_plan(self, mat2, scale_a, scale_b, bias, scale_result, out_dtype)
    shape = (self.shape[0], mat2.shape[1]) if plan is not None else None
    if plan is None or out.dtype != plan[0] or tuple(out.shape) != shape or out.device != self.device:
        return NotImplemented  # ATen raises on the dtype, resizes on the shape
    return _scaled_mm_into(out, self, mat2, scale_a, scale_b, bias, plan[1])
