"""Matrix products: mm and addmm (with beta/alpha), with their out= overloads.

Four kernels, picked by shape (:func:`variant`):

- ``gemv`` (M == 1, or N == 1 as the transposed product): a matrix-vector product that
  streams the large operand once (gemm_decode.py; mv uses it too).
- ``decode`` (M <= 64, 16-bit or fp32 operands): a skinny tile (16 to 64 rows, wide in N
  and K), split over K when the result's tiles alone do not fill the chip, with a
  deterministic reduction of the fp32 partials (gemm_decode.py). Decode steps of a model
  (M = batch) and short prompts land here.
- ``tma`` (M > 64, fp16/bf16, M * N * K >= 2^32, on NVIDIA compute capability >= 9.0 with
  a Triton that has tensor descriptors): a persistent kernel, one program per SM walking
  the result tiles, that reads row- or column-major operands (16-byte aligned rows) through
  TMA descriptors (gemm_tma.py). ``GEMS_MM_TMA=0`` turns it off, ``force`` lifts the size
  bound. Its launches go through Triton's own launcher and are not replayed by the plans
  below; a compile failure on the chip turns it off for the process (warning) and the
  product takes ``general``.
- ``general``: the portable tiled kernel below. Each program computes a BLOCK_M x BLOCK_N
  tile of the result, walking K in BLOCK_K steps with ``tl.dot`` into an fp32 accumulator
  (fp64 for fp64 inputs, which always take this kernel unless they are a GEMV). Programs
  are ordered in groups of GROUP_M tile rows, so tiles running together share operand
  tiles in cache.

Products that would take ``tma`` or ``general`` are first offered to the selected backend's
``mm`` kernel variant (``gems_core.variants``), which serves the ones it accepts; the NVIDIA
backend's is a warp-specialized Gluon kernel for Hopper.

Every kernel takes any M, N, K (masked edges) and any strides (a transposed operand is read
in place, never copied; ``tma`` takes only the layouts a descriptor describes, the others
all the rest), accumulates in fp32 (fp64) and fuses alpha, beta and the
broadcast bias of addmm into its epilogue. Each has its own tunable: "mm", "mm_decode",
"gemv", "mm_tma".

Cases ATen must judge (integer or mixed dtypes, shapes that do not multiply, non-matrices)
are handed to ATen, so its errors are its own.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl

from .. import plan_cache, runtime, tuning, variants
from ..contract import KernelConfig
from ..host_math import cdiv
from ..launch_cache import KernelCompileError, LaunchCache
from ..plan_cache import PlanCache
from ..registry import aten_op
from ..tuning import Tunable
from . import gemm_split_k
from .arithmetic import _mul
from .gemm_common import (  # noqa: F401 - re-exported for blas.py and attention_common.py
    _FLOATS,
    _INT32_MAX,
    _bucket,
    _input_precision,
    _max_offset,
    _needs_int64,
    _scalar_arg,
    fits_shared_memory,
    store_epilogue,
)
from .gemm_decode import launch_decode, launch_gemv
from .gemm_tma import launch_tma, tma_applies, turn_off_tma

MM = Tunable(
    "mm",
    params=("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"),
    defaults=[
        # the first is used where no benchmarking happens: safe on 64 KiB of shared memory
        KernelConfig(
            {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=4, num_stages=3
        ),
        KernelConfig(
            {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=4, num_stages=3
        ),
        KernelConfig(
            {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=4, num_stages=4
        ),
        KernelConfig(
            {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=4, num_stages=4
        ),
        KernelConfig(
            {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=3
        ),
        KernelConfig(
            {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=4, num_stages=4
        ),
    ],
    description="mm, addmm, bmm and baddbmm: one BLOCK_M x BLOCK_N result tile per program, K in BLOCK_K "
    "steps; GROUP_M tile rows per program group",
)

#: the most rows that take the decode variant
DECODE_MAX_M = 64

#: how a product's call may be repeated (see :func:`_launch`)
REPLAYABLE, ONCE, SERVED = "replayable", "once", "served"


@triton.jit
def gemm_tile(
    pid,  # this program's tile, in grouped order
    a_ptr,  # (M, K), strides (stride_am, stride_ak)
    b_ptr,  # (K, N), strides (stride_bk, stride_bn)
    c_ptr,  # (M, N), strides (stride_cm, stride_cn); the result
    bias_ptr,  # (M, N) addmm's input, broadcast (stride 0); unused unless HAS_BIAS
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
    # C = alpha * (A @ B) + beta * bias, accumulated in fp32 (fp64 for fp64 inputs); one
    # BLOCK_M x BLOCK_N tile of C. Shared with the batched kernels of blas.py.
    tiles_m = (M + BLOCK_M - 1) // BLOCK_M
    tiles_n = (N + BLOCK_N - 1) // BLOCK_N
    # grouped order: GROUP_M tile rows are swept column by column
    group_size = GROUP_M * tiles_n
    first_m = (pid // group_size) * GROUP_M
    rows_in_group = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group_size) % rows_in_group
    pid_n = (pid % group_size) // rows_in_group

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    if INT64:
        rm = rm.to(tl.int64)
        rn = rn.to(tl.int64)
        rk = rk.to(tl.int64)
    # rows/columns past the edge read a valid row/column (wrapped) and are not stored
    am = rm % M
    bn = rn % N
    a_ptrs = a_ptr + am[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + bn[None, :] * stride_bn

    if ACC_FP64:
        acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float64)
    else:
        acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    for k in range((K + BLOCK_K - 1) // BLOCK_K):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=rk[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=rk[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION, out_dtype=acc.dtype)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    if ACC_FP64:
        # small bit patterns arrive as int32, a pattern equal to 1 as a constant: tl.cast
        # takes both
        alpha = tl.cast(alpha, tl.int64).to(tl.float64, bitcast=True)
        beta = tl.cast(beta, tl.int64).to(tl.float64, bitcast=True)
    store_epilogue(
        acc,
        c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn,
        bias_ptr + rm[:, None] * stride_biasm + rn[None, :] * stride_biasn,
        (rm[:, None] < M) & (rn[None, :] < N),
        alpha,
        beta,
        HAS_BIAS,
    )


@triton.jit
def _mm_kernel(
    a_ptr,  # (M, K)
    b_ptr,  # (K, N)
    c_ptr,  # (M, N)
    bias_ptr,  # (M, N), broadcast
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
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACC_FP64: tl.constexpr,
    INT64: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    gemm_tile(
        tl.program_id(0),
        a_ptr,
        b_ptr,
        c_ptr,
        bias_ptr,
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


_launch_mm = LaunchCache(_mm_kernel, name="mm")


def variant(
    M: int,
    N: int,
    K: int,
    dtype: torch.dtype,
    a: torch.Tensor | None = None,
    b: torch.Tensor | None = None,
) -> str:
    """Which kernel computes an (M, K) @ (K, N) product: "gemv" for one row or column,
    "decode" for few rows of 16-bit or fp32 operands, "tma" for large 16-bit products on a
    chip with tensor descriptors (operands ``a`` and ``b``, when given, must suit them:
    gemm_tma.py), else "general"."""
    if M == 1 or N == 1:
        return "gemv"
    if M <= DECODE_MAX_M and dtype != torch.float64:
        return "decode"
    if tma_applies(M, N, K, dtype, a, b):
        return "tma"
    return "general"


def _launch(
    a: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor,
    bias: torch.Tensor | None,
    alpha: Any,
    beta: Any,
) -> bool:
    """out = alpha * (a @ b) + beta * bias (bias already expanded to out's shape), by the
    selected backend's ``mm`` kernel variant where it serves the product, else by the
    kernel :func:`variant` picks. Returns how the call may be repeated: REPLAYABLE (every
    launch went through the launch caches), ONCE (the TMA kernel bypassed them, so a
    recording cannot replay the call) or SERVED (the backend's variant computed it)."""
    (M, K), N = a.shape, b.shape[1]
    if M == 0 or N == 0:
        return REPLAYABLE
    kind = variant(M, N, K, a.dtype, a, b)
    if kind in ("tma", "general") and variants.offer("mm", a, b, out, bias, alpha, beta):
        return SERVED
    if kind == "tma":
        try:
            launch_tma(a, b, out, bias, alpha, beta)
            return ONCE
        except KernelCompileError as exc:
            _tma_failed(exc)
            kind = "general"
    if kind == "general" and gemm_split_k.applies(M, N, K, a.dtype, a.device):
        gemm_split_k.launch(a, b, out, bias, alpha, beta, plain=launch_general)
    elif kind == "general":
        launch_general(a, b, out, bias, alpha, beta)
    elif kind == "decode":
        launch_decode(a, b, out, bias, alpha, beta)
    elif M == 1:
        # the row of the result: x = a's row, W = b
        launch_gemv(
            a, a.stride(1), b, b.stride(0), b.stride(1), out, out.stride(1),
            bias, 0 if bias is None else bias.stride(1), K, N, alpha, beta,
        )
    else:
        # a column, computed as its transpose: x = b's column, W = a^T
        launch_gemv(
            b, b.stride(0), a, a.stride(1), a.stride(0), out, out.stride(0),
            bias, 0 if bias is None else bias.stride(0), K, M, alpha, beta,
        )
    return REPLAYABLE


def _tma_failed(exc: KernelCompileError) -> None:
    """The TMA kernel did not compile: this product (and, on a chip, every later one) takes
    the tiled kernel. In compile-only execution the failure is the compile tier's record
    and each later product tries again (other configs may compile)."""
    if not runtime.current().compile_only:
        turn_off_tma(str(exc))
        warnings.warn(
            f"gems: the TMA variant of mm failed to compile and is turned off for this "
            f"process; mm/addmm use the tiled kernel: {exc}",
            RuntimeWarning,
            stacklevel=3,
        )


def launch_general(
    a: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor,
    bias: torch.Tensor | None,
    alpha: Any,
    beta: Any,
) -> None:
    """out = alpha * (a @ b) + beta * bias on the tiled kernel, for any non-empty shape."""
    (M, K), N = a.shape, b.shape[1]
    fp64 = a.dtype == torch.float64
    tensors = (a, b, out) if bias is None else (a, b, out, bias)
    bias_arg = out if bias is None else bias  # a placeholder pointer when there is no bias
    constexprs = {
        "HAS_BIAS": bias is not None,
        "ACC_FP64": fp64,
        "INT64": _needs_int64(*tensors),
        "INPUT_PRECISION": _input_precision(a.dtype),
    }
    scalars = (_scalar_arg(alpha, fp64), _scalar_arg(beta, fp64))

    def run(config: KernelConfig, target: torch.Tensor) -> None:
        p = config.params
        grid = (cdiv(M, p["BLOCK_M"]) * cdiv(N, p["BLOCK_N"]),)
        _launch_mm(
            grid,
            a,
            b,
            target,
            bias_arg,
            M,
            N,
            K,
            a.stride(0),
            a.stride(1),
            b.stride(0),
            b.stride(1),
            target.stride(0),
            target.stride(1),
            bias_arg.stride(0),
            bias_arg.stride(1),
            *scalars,
            config=config,
            options=MM.options(),
            **constexprs,
        )

    def bench(config: KernelConfig) -> float:
        scratch = torch.empty_like(out)  # never the real output: it may be the bias itself
        return float(triton.testing.do_bench(lambda: run(config, scratch)))

    key = (str(a.dtype), _bucket(M), _bucket(N), _bucket(K))
    run(MM.choose(key, bench, fits_shared_memory(a.dtype)), out)


def _matrices(mat1: Any, mat2: Any) -> bool:
    """Two float matrices of one dtype that multiply; anything else is ATen's to judge."""
    return (
        isinstance(mat1, torch.Tensor)
        and isinstance(mat2, torch.Tensor)
        and mat1.dim() == 2
        and mat2.dim() == 2
        and mat1.dtype == mat2.dtype
        and mat1.dtype in _FLOATS
        and mat1.shape[1] == mat2.shape[0]
        and mat1.device == mat2.device
    )


def _shares_memory(out: torch.Tensor, *inputs: torch.Tensor) -> bool:
    """Whether ``out`` lives in the storage of one of ``inputs``. Storages of no bytes share
    nothing (their data pointers are all null: an empty out= and empty operands)."""
    address = out.untyped_storage().data_ptr()
    return address != 0 and any(address == t.untyped_storage().data_ptr() for t in inputs)


def _prepare_out(out: torch.Tensor, shape: tuple[int, ...], like: torch.Tensor) -> bool:
    """ATen's out= rules for these ops: same dtype and device, resized (with a warning when it
    held data) if its shape differs. False sends the call to ATen."""
    if out.dtype != like.dtype or out.device != like.device:
        return False
    if tuple(out.shape) != shape:
        if out.numel():
            warnings.warn(
                "An output with one or more elements was resized since it had shape "
                f"{list(out.shape)}, "
                f"which does not match the required output shape {list(shape)}.",
                UserWarning,
                stacklevel=4,
            )
        out.resize_(shape)
    return True


def _bias_view(input: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor | None:
    """addmm's input broadcast to (M, N) as a stride-0 view, or None if it does not broadcast."""
    try:
        return input.expand(shape)
    except RuntimeError:
        return None


#: replayed launches of mm and addmm (without out=) by call signature; a signature's first
#: call takes the full path (and tunes), its second records the launches
_plans = PlanCache("mm")
_FIRST = object()
#: a signature the backend's ``mm`` variant served: later calls are offered to it directly
_SERVED = object()


def _planned(key: Any, out: torch.Tensor, slots: tuple[torch.Tensor, ...], launch: Callable[[], str]) -> None:
    """Run ``launch`` (which computes ``out`` from ``slots`` and says how it may be
    repeated: see :func:`_launch`), keeping a replay of it for ``key`` when this is the
    signature's second call, or noting that the backend's variant serves the signature."""
    seen = _plans.get(key)
    if seen is None:
        _plans.store(key, _SERVED if launch() == SERVED else _FIRST)
        return
    if seen is _SERVED:  # a call the variant declined (its operands' alignment): it keeps the rest
        launch()
        return
    benchmarks = tuning.benchmarks_run
    with plan_cache.record() as calls:
        how = launch()
    if how != REPLAYABLE:
        return  # the signature keeps the full path
    if tuning.benchmarks_run != benchmarks:
        # configs were benchmarked during the call (its first call took another path: the
        # backend's variant, say): the recording holds every benchmark launch too, and a
        # replay of it would run them all again. The next call records afresh.
        return
    replay = plan_cache.Replay.build(calls, slots)
    if replay is not None:
        _plans.store(key, (replay, tuple(out.shape), out.dtype, out.device))


def _offer_served(a: torch.Tensor, b: torch.Tensor, alpha: Any, beta: Any,
                  input: torch.Tensor | None = None) -> torch.Tensor | None:
    """alpha * (a @ b) (+ beta * input, addmm's, broadcast) by the backend's variant, for a
    signature it served before; None when it declines this call (its operands' alignment),
    which then takes the full path."""
    shape = (a.shape[0], b.shape[1])
    out = torch.empty(shape, dtype=a.dtype, device=a.device)
    bias = None if input is None or beta == 0 else input.expand(shape)
    return out if variants.offer("mm", a, b, out, bias, alpha, beta) else None


@aten_op("mm")
def mm(self: torch.Tensor, mat2: torch.Tensor) -> Any:
    """self @ mat2 for (M, K) @ (K, N) float matrices of one dtype; K == 0 gives zeros."""
    key = (self.dtype, self.shape, self.stride(), self.device, mat2.dtype, mat2.shape, mat2.stride(),
           mat2.device, _input_precision(self.dtype))
    plan = _plans.get(key)
    if plan is _SERVED:
        out = _offer_served(self, mat2, 1, 0)
        if out is not None:
            return out
    elif plan is not None and plan is not _FIRST:
        replay, shape, dtype, device = plan
        out = torch.empty(shape, dtype=dtype, device=device)
        replay(self, mat2, out)
        return out
    if not _matrices(self, mat2):
        return NotImplemented
    out = torch.empty((self.shape[0], mat2.shape[1]), dtype=self.dtype, device=self.device)
    _planned(key, out, (self, mat2, out), lambda: _launch(self, mat2, out, None, 1, 0))
    return out


@aten_op("mm.out")
def mm_out(self: torch.Tensor, mat2: torch.Tensor, *, out: torch.Tensor) -> Any:
    if not _matrices(self, mat2) or _shares_memory(out, self, mat2):
        return NotImplemented
    if not _prepare_out(out, (self.shape[0], mat2.shape[1]), self):
        return NotImplemented
    _launch(self, mat2, out, None, 1, 0)
    return out


def _addmm(
    input: torch.Tensor,
    mat1: torch.Tensor,
    mat2: torch.Tensor,
    beta: Any,
    alpha: Any,
    out: torch.Tensor | None,
    key: Any = None,
) -> Any:
    """``key``: the call signature to keep a replay under (calls without out=)."""
    if (
        not _matrices(mat1, mat2)
        or not isinstance(input, torch.Tensor)
        or input.dtype != mat1.dtype
    ):
        return NotImplemented
    if any(isinstance(s, complex) for s in (beta, alpha)):
        return NotImplemented
    shape = (mat1.shape[0], mat2.shape[1])
    bias = _bias_view(input, shape)
    if bias is None or bias.device != mat1.device:
        return NotImplemented
    if out is None:
        out = torch.empty(shape, dtype=mat1.dtype, device=mat1.device)
    else:
        # the kernel reads each bias element just before writing that element, so out may be
        # the input itself (of the result's shape), but overlap nothing else
        same_as_input = (
            out.data_ptr() == input.data_ptr()
            and tuple(out.shape) == tuple(input.shape) == shape
            and out.stride() == input.stride()
        )
        if _shares_memory(out, mat1, mat2) or (_shares_memory(out, input) and not same_as_input):
            return NotImplemented
        if not _prepare_out(out, shape, mat1):
            return NotImplemented
    if alpha == 0:
        # as BLAS does, the product is not read (NaN and inf in mat1/mat2 do not propagate)
        if beta == 0:
            out.zero_()
        else:
            _mul(bias, beta, out=out)
        return out
    # beta == 0 ignores the input entirely (NaN and inf in it do not propagate), as in ATen
    used_bias = None if beta == 0 else bias

    def launch() -> str:
        return _launch(mat1, mat2, out, used_bias, alpha, beta)

    if key is None:
        launch()
    else:
        _planned(key, out, (mat1, mat2, out, bias), launch)
    return out


@aten_op("addmm")
def addmm(
    self: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor, *, beta: Any = 1, alpha: Any = 1
) -> Any:
    """beta * self + alpha * (mat1 @ mat2), ``self`` broadcast to (M, N)."""
    if not isinstance(self, torch.Tensor):
        return _addmm(self, mat1, mat2, beta, alpha, None)
    key = (self.dtype, self.shape, self.stride(), self.device, mat1.dtype, mat1.shape, mat1.stride(),
           mat1.device, mat2.dtype, mat2.shape, mat2.stride(), mat2.device,
           type(beta), beta, type(alpha), alpha, _input_precision(mat1.dtype))
    plan = _plans.get(key)
    if plan is _SERVED:
        out = _offer_served(mat1, mat2, alpha, beta, self)
        if out is not None:
            return out
    elif plan is not None and plan is not _FIRST:
        replay, shape, dtype, device = plan
        out = torch.empty(shape, dtype=dtype, device=device)
        replay(mat1, mat2, out, self)  # the bias slot needs only self's address
        return out
    return _addmm(self, mat1, mat2, beta, alpha, None, key)


@aten_op("addmm.out")
def addmm_out(
    self: torch.Tensor,
    mat1: torch.Tensor,
    mat2: torch.Tensor,
    *,
    beta: Any = 1,
    alpha: Any = 1,
    out: torch.Tensor,
) -> Any:
    return _addmm(self, mat1, mat2, beta, alpha, out)
