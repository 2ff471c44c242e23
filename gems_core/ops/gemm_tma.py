"""A persistent GEMM over tensor descriptors (TMA) for large 16-bit products on chips whose
limits declare them (``Limits.tensor_descriptors``: NVIDIA Hopper and later), dispatched to
by mm.py (see :func:`variant` there).

Persistent. The grid has one program per compute unit (at most one per result tile:
``min(tiles, compute_units)``), and each program walks the result tiles ``pid, pid + grid,
pid + 2 * grid, ...`` in grouped order (GROUP_M tile rows swept column by column, as the
tiled kernel of mm.py does, so tiles in flight together share operand tiles in L2). The tile
loop is a ``tl.range(..., flatten=True)``: the compiler flattens it with the K loop into one
software pipeline, so the loads of the next tile start while the current one finishes, and a
launch costs one wave however many tiles there are.

Tensor descriptors. A and B are read through host-side descriptors
(:class:`triton.tools.tensor_descriptor.TensorDescriptor`, passed as kernel arguments): on
Hopper each operand tile is one bulk copy by the TMA unit into shared memory, with no address
arithmetic or masks in the kernel, and reads past an edge (M, N or K not a multiple of the
block) come back as zeros. A descriptor needs a 16-byte aligned base, a unit last stride and
its other strides multiples of 16 bytes, so only operands that are row-major or column-major
with such strides take this kernel (:func:`describable`). A column-major operand is
described as its transpose, row-major, and the kernel transposes the loaded tile (``.T``: a
view of the tile in shared memory that wgmma reads as is, which PTX allows for 16-bit types).
Without a bias, the result is written through a descriptor too when it is row-major with
such strides (a bulk store, clipped at the edges); otherwise (an ``out=`` of another layout,
or a bias to add: the bias tile in the accumulator's layout next to a staged C tile needs
more shared memory than the large tiles leave, and ptxas spills) through its strides by
gemm_common.store_epilogue, in two halves of BLOCK_N columns: with the 128 x 256 and 256 x
128 tiles, a full-width bias tile next to the accumulator takes ~250 registers a thread
(sm_90, row strides of 16-element multiples; a column bias spills), halves 180-210 and no
spills. (Rows of other lengths and a full (M, N) bias spill either way, halves more.)
Device-side descriptors (``tl.make_tensor_descriptor``) are not used: they need a global
scratch allocator (``triton.set_allocator``) set for the process.

Fused addmm epilogue, as in the other variants: ``C = alpha * acc + beta * bias`` with the
fp32 accumulator and the bias broadcast through its strides (stride 0), read just before
each element of C is written, so ``out`` may be addmm's input itself.

Scope. fp16 and bf16 only: fp32 products follow torch's matmul precision (IEEE by default,
see gemm_common._input_precision), which the tensor cores do not compute, and tf32 wgmma
reads no transposed operand; fp64 has no tensor-core path. Products are taken when they are
large enough that the kernel's throughput matters more than its host cost, and not so large
that the tiled kernel measured faster (:data:`MIN_WORK`, :data:`MAX_WORK`): the launch goes through Triton's own ``kernel[grid]`` path (the
descriptors are new objects per call), whose Python binding of the arguments a product of
hundreds of microseconds hides, and such calls are not replayed by mm.py's launch plans.
Everything else keeps the other variants.

Launch paths: on a device ``kernel[grid]``, the first launch of each specialization turned
into :class:`~gems_core.launch_cache.KernelCompileError` if it fails (mm.py then turns the
variant off and uses the tiled kernel); in the CPU interpreter a :class:`LaunchCache` (which
runs kernels with any arguments there); in compile-only execution (the compile tier) an
ahead-of-time compile for the target through :mod:`gems_core.aot`. The tunable is "mm_tma".
The same source compiles with Triton 3.6 to 3.9 (``flatten`` included).
"""

from __future__ import annotations

import threading
from typing import Any

import torch
import triton
import triton.language as tl

from .. import runtime, settings
from ..contract import KernelConfig
from ..host_math import cdiv
from ..launch_cache import KernelCompileError, LaunchCache, recording
from ..tuning import Tunable
from .gemm_common import _bucket, _needs_int64, store_epilogue

try:
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # a Triton without host-side tensor descriptors: the variant is off
    TensorDescriptor = None  # type: ignore[assignment,misc]

MM_TMA = Tunable(
    "mm_tma",
    params=("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"),
    defaults=[
        # the first is used where no benchmarking happens; shared memory (16-bit): stages x
        # the A and B tiles, plus the C tile staged for its bulk store
        KernelConfig(
            {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=3
        ),  # 128 KB
        KernelConfig(
            {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=3
        ),  # 208 KB
        KernelConfig(
            {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=4
        ),  # 160 KB
    ],
    description="mm/addmm of large 16-bit products on Hopper: persistent programs over "
    "BLOCK_M x BLOCK_N result tiles in GROUP_M order, operands read through tensor descriptors "
    "(TMA) in BLOCK_K steps",
)

#: the products that take this kernel: MIN_WORK <= M * N * K < MAX_WORK. Measured on an
#: H200 (`benchmarks/run.py --ops mm`): the TMA kernel was ahead of the tiled one only at
#: 2048 x 14336 x 4096 (x0.96-0.98 vs x0.90 cuBLAS) and behind at 8192^3 (x0.88 vs x0.96);
#: below 2^36 its host path (Triton's launcher, new descriptors per call, no native replay)
#: cost a Llama prefill of 1024 tokens 18.5 ms against 8.1 ms with the tiled kernel. On an
#: H100 the host path costs ~120 us a call and the TMA kernel beat the tiled one
#: at 1024 x 4096 x 14336 (159-162 us vs 195-200, cuBLAS 163-169) but not at 1024 x 6144 x
#: 4096 (85-94 us, host-bound, vs 94 tiled): the bound sits between the two.
#: GEMS_MM_TMA=force lifts both bounds.
MIN_WORK = 3 << 34
MAX_WORK = 1 << 39
#: operand dtypes served
DTYPES = (torch.float16, torch.bfloat16)


@triton.jit
def _mm_tma_kernel(
    a_desc,  # A (M, K) in BLOCK_M x BLOCK_K blocks; A^T (K, M) in BLOCK_K x BLOCK_M if A_T
    b_desc,  # B (K, N) in BLOCK_K x BLOCK_N blocks; B^T (N, K) in BLOCK_N x BLOCK_K if B_T
    c_desc,  # C (M, N) in BLOCK_M x BLOCK_N blocks if C_DESC (never with a bias); else None
    c_ptr,  # C, strides (stride_cm, stride_cn); written through them unless C_DESC
    bias_ptr,  # (M, N) addmm's input, broadcast (stride 0); unused unless HAS_BIAS
    M,
    N,
    K,
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
    A_T: tl.constexpr,
    B_T: tl.constexpr,
    C_DESC: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    INT64: tl.constexpr,
):
    # C = alpha * (A @ B) + beta * bias, accumulated in fp32, for the result tiles
    # program_id, program_id + num_programs, ... in grouped order
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    group_size = GROUP_M * tiles_n
    for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, tl.num_programs(0), flatten=True):
        first_m = (tile // group_size) * GROUP_M
        rows_in_group = tl.minimum(tiles_m - first_m, GROUP_M)
        off_m = (first_m + (tile % group_size) % rows_in_group) * BLOCK_M
        off_n = ((tile % group_size) // rows_in_group) * BLOCK_N

        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(k_steps):
            off_k = k * BLOCK_K
            # blocks past an edge of the operand read as zeros
            if A_T:
                a = a_desc.load([off_k, off_m]).T
            else:
                a = a_desc.load([off_m, off_k])
            if B_T:
                b = b_desc.load([off_n, off_k]).T
            else:
                b = b_desc.load([off_k, off_n])
            acc = tl.dot(a, b, acc, out_dtype=tl.float32)

        if C_DESC:  # (no bias)
            c_desc.store([off_m, off_n], (acc * alpha).to(c_desc.dtype))  # clipped at the edges
        else:
            # two halves of BLOCK_N columns, one after the other (see the module docstring)
            rm = off_m + tl.arange(0, BLOCK_M)
            rn = off_n + tl.arange(0, BLOCK_N // 2)
            if INT64:
                rm = rm.to(tl.int64)
                rn = rn.to(tl.int64)
            left, right = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
            store_epilogue(left, c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn,
                           bias_ptr + rm[:, None] * stride_biasm + rn[None, :] * stride_biasn,
                           (rm[:, None] < M) & (rn[None, :] < N), alpha, beta, HAS_BIAS)
            rn += BLOCK_N // 2
            store_epilogue(right, c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn,
                           bias_ptr + rm[:, None] * stride_biasm + rn[None, :] * stride_biasn,
                           (rm[:, None] < M) & (rn[None, :] < N), alpha, beta, HAS_BIAS)


#: the interpreter's launch path (any argument types); compiled launches bypass it
_launch_interpreted = LaunchCache(_mm_tma_kernel, name="mm_tma")
#: specializations launched once already on a device (their compile succeeded)
_launched: set[Any] = set()
_launched_lock = threading.Lock()


#: why the variant was turned off for the process (a compile failure on the chip), if it was
turned_off: str | None = None


def turn_off_tma(reason: str) -> None:
    """Take the other variants for every later product (mm.py, after a compile failure)."""
    global turned_off
    turned_off = reason


def _mode() -> str:
    """``GEMS_MM_TMA``: "0" turns the variant off, "force" takes it for every product it
    can serve whatever the size; anything else (the default) for products from MIN_WORK up
    to MAX_WORK."""
    if turned_off is not None:
        return "off"
    return settings.get("GEMS_MM_TMA")


#: device index -> (the runtime it was decided for, whether the chip runs this kernel)
_support: dict[int | None, tuple[runtime.Runtime, bool]] = {}


def supported(device: torch.device) -> bool:
    """Whether kernels for ``device`` run (or, in compile-only execution, are compiled) on a
    chip with tensor descriptors (its ``Limits.tensor_descriptors``: NVIDIA Hopper and later)
    under a Triton that has them, with the shared memory for one of the tunable's configs (not
    the 99 KB parts, sm_120). In the CPU interpreter, what the selected backend's limits say
    (an emulated Hopper: the interpreter executes descriptors too)."""
    rt = runtime.current()
    cached = _support.get(device.index)
    if cached is None or cached[0] is not rt:
        cached = _support[device.index] = (rt, _chip_supports(rt))
    return cached[1]


def _chip_supports(rt: runtime.Runtime) -> bool:
    limits = rt.limits  # a compile target's own limits in compile-only execution
    if TensorDescriptor is None or not limits.tensor_descriptors:
        return False
    admit = _fits(torch.float16, limits.shared_memory_per_block)
    return any(admit(config) for config in MM_TMA.configs())


def _row_major(t: torch.Tensor, cols: int) -> bool:
    """Rows of ``t`` are contiguous, 16-byte aligned and do not overlap."""
    stride = t.stride(0)
    return t.stride(1) == 1 and stride >= cols and stride * t.element_size() % 16 == 0


def describable(t: torch.Tensor) -> bool:
    """Whether a tensor descriptor can describe matrix ``t`` (row-major, or column-major as
    its transpose): base 16-byte aligned, strides in 16-byte multiples but one of 1."""
    if t.data_ptr() % 16:
        return False
    rows, cols = t.shape
    return _row_major(t, cols) or _row_major(t.t(), rows)


def tma_applies(
    M: int,
    N: int,
    K: int,
    dtype: torch.dtype,
    a: torch.Tensor | None = None,
    b: torch.Tensor | None = None,
) -> bool:
    """Whether this kernel serves an (M, K) @ (K, N) product of ``dtype`` operands (M past
    the decode rows, checked by mm.py): large enough (or forced), both operands
    describable (assumed when not given), on a chip with tensor descriptors. Compile-only
    execution takes every product it can serve, so that the compile tier reaches it."""
    if dtype not in DTYPES or N <= 1 or K == 0:
        return False
    mode = _mode()
    if mode == "off":
        return False
    if mode == "auto" and not MIN_WORK <= M * N * K < MAX_WORK and not runtime.current().compile_only:
        return False
    if a is not None and not describable(a):
        return False
    if b is not None and not describable(b):
        return False
    return supported(a.device if a is not None else torch.device("cuda"))


def _fits(dtype: torch.dtype, limit: int | None = None) -> Any:
    """Whether a config's pipeline (stages x the A and B tiles) and its staged C tile fit
    ``limit`` bytes of shared memory (default: the chip's)."""
    if limit is None:
        limit = runtime.current().limits.shared_memory_per_block
    size = dtype.itemsize

    def admit(config: KernelConfig) -> bool:
        p = config.params
        block_m, block_n, block_k = p["BLOCK_M"], p["BLOCK_N"], p["BLOCK_K"]
        staged = max(config.num_stages, 1) * (block_m * block_k + block_k * block_n) * size
        return staged + block_m * block_n * size <= limit

    return admit


def _descriptor(t: torch.Tensor, block: tuple[int, int]) -> tuple[Any, bool]:
    """A descriptor of matrix ``t`` in ``block`` tiles, and whether it describes t^T (then
    the block is taken transposed too)."""
    rows, cols = t.shape
    if _row_major(t, cols):
        return TensorDescriptor(t, [rows, cols], [t.stride(0), 1], list(block)), False
    return TensorDescriptor(t, [cols, rows], [t.stride(1), 1], [block[1], block[0]]), True


def launch_tma(
    a: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor,
    bias: torch.Tensor | None,
    alpha: Any,
    beta: Any,
) -> None:
    """out = alpha * (a @ b) + beta * bias (bias already expanded to out's shape) for 16-bit
    operands that :func:`describable` accepts and M, N, K > 0."""
    (M, K), N = a.shape, b.shape[1]
    tensors = (out,) if bias is None else (out, bias)
    bias_arg = out if bias is None else bias  # a placeholder pointer when there is no bias
    rt = runtime.current()
    units = runtime.compute_units(out.device.type, out.device.index)
    scalars = (float(alpha), float(beta))
    common = {"HAS_BIAS": bias is not None, "INT64": _needs_int64(*tensors)}

    def run(config: KernelConfig, target: torch.Tensor) -> None:
        p = config.params
        block_m, block_n, block_k = p["BLOCK_M"], p["BLOCK_N"], p["BLOCK_K"]
        a_desc, a_t = _descriptor(a, (block_m, block_k))
        b_desc, b_t = _descriptor(b, (block_k, block_n))
        c_desc = None
        if bias is None and target.data_ptr() % 16 == 0 and _row_major(target, N):
            c_desc = TensorDescriptor(target, [M, N], [target.stride(0), 1], [block_m, block_n])
        args = (
            a_desc, b_desc, c_desc, target, bias_arg, M, N, K,
            target.stride(0), target.stride(1), bias_arg.stride(0), bias_arg.stride(1), *scalars,
        )
        constexprs = {**p, "A_T": a_t, "B_T": b_t, "C_DESC": c_desc is not None, **common}
        grid = (min(cdiv(M, block_m) * cdiv(N, block_n), units),)
        _run(rt, grid, args, constexprs, config, target.device)

    def bench(config: KernelConfig) -> float:
        scratch = torch.empty_like(out)  # never the real output: it may be the bias itself
        return float(triton.testing.do_bench(lambda: run(config, scratch)))

    # which operands are read transposed (column-major): their tiles move differently
    layout = ("n" if _row_major(a, K) else "t") + ("n" if _row_major(b, N) else "t")
    key = (str(a.dtype), layout, _bucket(M), _bucket(N), _bucket(K))
    try:
        config = MM_TMA.choose(key, bench, _fits(a.dtype))
    except RuntimeError as exc:  # benchmarking found no config that compiles and runs
        if isinstance(exc, KernelCompileError):
            raise
        raise KernelCompileError(f"mm_tma: {exc}") from exc
    run(config, out)


def _run(
    rt: runtime.Runtime,
    grid: tuple[int],
    args: tuple[Any, ...],
    constexprs: dict[str, Any],
    config: KernelConfig,
    device: torch.device,
) -> None:
    run_described(_mm_tma_kernel, _launch_interpreted, MM_TMA, rt, grid, args, constexprs, config, device)


def run_described(
    kernel: Any,
    interpreted: LaunchCache,
    tunable: Tunable,
    rt: runtime.Runtime,
    grid: tuple[int, ...],
    args: tuple[Any, ...],
    constexprs: dict[str, Any],
    config: KernelConfig,
    device: torch.device,
) -> None:
    """Launch ``kernel``, whose first arguments are host-side tensor descriptors, with
    ``config`` of ``tunable``: through ``interpreted`` (a :class:`LaunchCache` of the kernel)
    in the CPU interpreter, compiled for the target in compile-only execution, else through
    Triton's own launcher, the first launch of each specialization (which compiles it) turned
    into :class:`KernelCompileError` if it fails. The tunable's name names the kernel in
    errors."""
    name = tunable.name
    options = tunable.options()
    if config.options:
        options.update(config.options)
    if rt.interpreter:
        interpreted(grid, *args, options=options, **constexprs)
        return
    target = rt.selection.execution.compile_target
    if target is not None:  # compile-only execution: compiled for the target, never run
        from .. import aot

        result = aot.compile_launch(kernel, name, target, args, constexprs,
                                    config.num_warps, config.num_stages, options)
        if result.error is not None:
            raise KernelCompileError(f"{name}: {result.error}")
        return
    # Triton's own launcher (host tensor descriptors): not a launch the native dispatch
    # layer can repeat
    recording.impure = True
    launch = kernel[grid]
    key = (name, device.index, args[0].base.dtype, tuple(constexprs.items()), config.describe(),
           repr(sorted(options.items())))
    if key in _launched:
        launch(*args, num_warps=config.num_warps, num_stages=config.num_stages, **options, **constexprs)
        return
    try:  # the first launch of a specialization compiles it
        launch(*args, num_warps=config.num_warps, num_stages=config.num_stages, **options, **constexprs)
    except Exception as exc:
        raise KernelCompileError(f"{name}: {type(exc).__name__}: {exc}") from exc
    with _launched_lock:
        _launched.add(key)
