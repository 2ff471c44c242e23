"""Matrix products for Hopper (sm_90): the NVIDIA backend's ``mm`` variant.

The core's products (tiled, and persistent over tensor descriptors) leave the schedule of
their main loop to Triton's pipeliner, which on Hopper keeps one group of warps issuing both
the copies and the tensor-core products; at 8192^3 that stays a few per cent behind cuBLAS.
This kernel is written in Gluon, so that it lays out the warps itself (warp specialization):

* one loading warp walks the program's result tiles and their K steps, issuing the
  tensor-memory-accelerator (TMA) copies of each step's A and B blocks into a ring of
  ``STAGES`` slots, each signalled by an mbarrier once its bytes have landed;
* two consumer warp groups each own half of the program's tile rows: per K
  step an asynchronous wgmma of their A block with the shared B block, keeping one product
  in flight, and releasing a slot (an mbarrier both groups arrive on) as soon as the
  product that read it has retired. At the end of a tile each group scales its fp32
  accumulator by alpha, rounds it to the output dtype, stages it in shared memory and
  writes it with a bulk copy, while the loading warp already fills the ring for its next
  tile.

Persistent: ``min(tiles, SMs)`` programs walk the result tiles ``pid, pid + grid, ...`` in
grouped order (a config's ``group_m`` tile rows swept column by column, so tiles in flight
together share operand blocks in L2). Registers are rebalanced between the roles
(``setmaxnreg``).

Served: 16-bit A (M, K) row-major and B (K, N) row- or column-major (a linear layer's weight
``W.t()`` is column-major: it is read as W's rows, and the wgmma takes the block
transposed), out (M, N) row-major, all 16-byte aligned with strides in 16-byte multiples;
addmm's input where it is a row or a column broadcast over the result (a linear layer's
bias), added in fp32 before the one rounding as cuBLAS's bias epilogue does (a full (M, N)
input runs on the core's kernels); products of at least
``MIN_WORK`` multiply-adds (smaller ones are host-bound, where the core's replayed launches
cost less). Edges need no masks: copies past M, N or K read zeros and the bulk store clips.
Everything else is declined and runs on the core's kernels.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from dataclasses import dataclass
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

#: registers a thread: the kernel's budget at launch (9 warps resident), the consumers'
#: and the loading warp's after the rebalance
MAX_REGISTERS = 168
CONSUMER_REGISTERS = 232
LOADER_REGISTERS = 40
#: multiply-adds (M * N * K) below which the variant declines: smaller products are
#: host-bound. The native layer replays this kernel's calls (descriptors encoded in C++), so
#: the bound is where the core's tiled kernel stops losing: on an H100 the prefill products
#: of a 2048-wide model at 768 rows (768 x 2048 x 2048, 3.2e9) ran 0.86-0.93x cuBLAS here
#: against 0.74-0.85x on the tiled kernel
MIN_WORK = 1 << 31
DTYPES = (torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class Config:
    """A tile (block_m rows, half of them each consumer group's, block_n columns), its K
    step, the ring depth and the tile rows swept together (L2 reuse of B's blocks).
    Shared memory: stages x (A and B blocks) + the staged result tile."""

    block_m: int
    block_n: int
    block_k: int
    stages: int
    group_m: int = 8
    #: throughput relative to the widest tile, for :func:`choose` (measured, H100)
    speed: float = 1.0

    def shared_memory(self, element_size: int = 2) -> int:
        ring = self.stages * (self.block_m * self.block_k + self.block_k * self.block_n)
        return (ring + self.block_m * self.block_n) * element_size

    def describe(self) -> str:
        group = "" if self.group_m == 8 else f", groups of {self.group_m}"
        return f"{self.block_m}x{self.block_n}x{self.block_k}, {self.stages} stages{group}"


#: the configs a product chooses from (:func:`choose`). On an H100 (benchmarks/mm_sm90.py)
#: 128 x 256 tiles ran 0.93-1.06x cuBLAS from 1024 x 4096 x 14336 to 8192^3 and 5-15 %
#: ahead of every 128 x 128 config, which won only where the wide tiles leave most of a
#: second wave idle (1024 x 6144 x 4096: 0.95x against 0.75x)
CONFIGS = (Config(128, 256, 64, 3), Config(128, 128, 64, 5, speed=0.9))

if gluon is not None:

    @gluon.jit
    def _tile_origin(tile, tiles_m, tiles_n, BM: gl.constexpr, BN: gl.constexpr, GROUP: gl.constexpr):
        """(row, column) of result tile ``tile`` in grouped order."""
        group_size = GROUP * tiles_n
        first_m = (tile // group_size) * GROUP
        rows_in_group = gl.minimum(tiles_m - first_m, GROUP)
        off_m = (first_m + (tile % group_size) % rows_in_group) * BM
        off_n = ((tile % group_size) // rows_in_group) * BN
        return off_m, off_n

    @gluon.jit
    def _consume(group: gl.constexpr, descs, bars, bufs, M, N, K, alpha, bias, bias_stride, beta,
                 B_T: gl.constexpr, GROUP: gl.constexpr, BIAS: gl.constexpr):
        a_desc, b_desc, c_desc = descs
        ready, empty = bars
        a_smem, b_smem, c_smem = bufs
        dtype: gl.constexpr = a_desc.dtype
        ROWS: gl.constexpr = a_desc.block_type.shape[0]
        BK: gl.constexpr = a_desc.block_type.shape[1]
        BN: gl.constexpr = c_desc.block_type.shape[1]
        STAGES: gl.constexpr = b_smem.type.shape[0]
        acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                             instr_shape=[16, BN, 16])
        tiles_m = gl.cdiv(M, 2 * ROWS)
        tiles_n = gl.cdiv(N, BN)
        k_steps = gl.cdiv(K, BK)
        out_smem = c_smem.index(group)
        step = 0
        for tile in range(gl.program_id(0), tiles_m * tiles_n, gl.num_programs(0)):
            off_m, off_n = _tile_origin(tile, tiles_m, tiles_n, 2 * ROWS, BN, GROUP)
            acc = gl.zeros([ROWS, BN], gl.float32, acc_layout)
            prev = 0
            for kk in range(k_steps):
                slot = step % STAGES
                mbarrier.wait(ready.index(slot), (step // STAGES) & 1)
                if B_T:
                    b_op = b_smem.index(slot).permute((1, 0))
                else:
                    b_op = b_smem.index(slot)
                acc = warpgroup_mma(a_smem.index(2 * slot + group), b_op, acc, is_async=True)
                # one product in flight: the one before it has read its slot
                acc = warpgroup_mma_wait(1, deps=(acc, ))
                if kk > 0:
                    mbarrier.arrive(empty.index(prev), count=1)
                prev = slot
                step += 1
            acc = warpgroup_mma_wait(0, deps=(acc, ))
            mbarrier.arrive(empty.index(prev), count=1)
            result = acc * alpha
            if BIAS == 1:  # addmm's input, a row broadcast over the rows (a linear layer's bias)
                cols = off_n + gl.arange(0, BN, layout=gl.SliceLayout(0, acc_layout))
                row = gl.load(bias + cols * bias_stride, mask=cols < N, other=0.0)
                result = result + beta * gl.expand_dims(row.to(gl.float32), 0)
            elif BIAS == 2:  # a column broadcast over the columns
                rows = off_m + group * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, acc_layout))
                col = gl.load(bias + rows * bias_stride, mask=rows < M, other=0.0)
                result = result + beta * gl.expand_dims(col.to(gl.float32), 1)
            result = result.to(dtype)
            tma.store_wait(pendings=0)  # the previous tile's copy out has read the staging tile
            out_smem.store(result)
            fence_async_shared()
            tma_store(c_desc, [off_m + group * ROWS, off_n], out_smem)
        tma.store_wait(pendings=0)

    @gluon.jit
    def _first_group(descs, bars, bufs, M, N, K, alpha, bias, bias_stride, beta, B_T: gl.constexpr,
                    GROUP: gl.constexpr, BIAS: gl.constexpr):
        _consume(0, descs, bars, bufs, M, N, K, alpha, bias, bias_stride, beta, B_T, GROUP, BIAS)

    @gluon.jit
    def _second_group(descs, bars, bufs, M, N, K, alpha, bias, bias_stride, beta, B_T: gl.constexpr,
                    GROUP: gl.constexpr, BIAS: gl.constexpr):
        _consume(1, descs, bars, bufs, M, N, K, alpha, bias, bias_stride, beta, B_T, GROUP, BIAS)

    @gluon.jit
    def _load(descs, bars, bufs, M, N, K, alpha, B_T: gl.constexpr, GROUP: gl.constexpr):
        a_desc, b_desc, c_desc = descs
        ready, empty = bars
        a_smem, b_smem, c_smem = bufs
        ROWS: gl.constexpr = a_desc.block_type.shape[0]
        BK: gl.constexpr = a_desc.block_type.shape[1]
        BN: gl.constexpr = c_desc.block_type.shape[1]
        STAGES: gl.constexpr = b_smem.type.shape[0]
        nbytes: gl.constexpr = 2 * a_desc.block_type.nbytes + b_desc.block_type.nbytes
        tiles_m = gl.cdiv(M, 2 * ROWS)
        tiles_n = gl.cdiv(N, BN)
        k_steps = gl.cdiv(K, BK)
        step = 0
        for tile in range(gl.program_id(0), tiles_m * tiles_n, gl.num_programs(0)):
            off_m, off_n = _tile_origin(tile, tiles_m, tiles_n, 2 * ROWS, BN, GROUP)
            for kk in range(k_steps):
                slot = step % STAGES
                # a slot is free once both groups released it (mbarriers start as if the
                # phase before the first had completed)
                mbarrier.wait(empty.index(slot), ((step // STAGES) & 1) ^ 1)
                bar = ready.index(slot)
                mbarrier.expect(bar, nbytes)
                off_k = kk * BK
                tma_load(a_desc, [off_m, off_k], bar, a_smem.index(2 * slot))
                tma_load(a_desc, [off_m + ROWS, off_k], bar, a_smem.index(2 * slot + 1))
                if B_T:
                    tma_load(b_desc, [off_n, off_k], bar, b_smem.index(slot))
                else:
                    tma_load(b_desc, [off_k, off_n], bar, b_smem.index(slot))
                step += 1

    # integer arguments are never specialized (a kernel per signature: see launcher.py)
    @gluon.jit(do_not_specialize=["M", "N", "K", "bias_stride"], do_not_specialize_on_alignment=["bias"])
    def gemm_kernel(a_desc, b_desc, c_desc, M, N, K, alpha, bias, bias_stride, beta, STAGES: gl.constexpr,
                    B_T: gl.constexpr, GROUP: gl.constexpr, BIAS: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                    LOADER_REGS: gl.constexpr):
        """Grid (programs,); 4 warps here (the first consumer group), 5 more in the
        partitions. A's descriptor has (ROWS, BK) blocks (a consumer group's rows), B's
        (BK, BN), or (BN, BK) over B^T when B_T, C's (ROWS, BN); a tile is 2 * ROWS x BN.
        C = alpha * (A @ B), plus beta * bias where BIAS is 1 (bias[n * bias_stride] added
        to column n) or 2 (bias[m * bias_stride] added to row m); ``bias`` is unread when
        BIAS is 0."""
        dtype: gl.constexpr = a_desc.dtype
        a_smem = gl.allocate_shared_memory(dtype, [2 * STAGES] + a_desc.block_type.shape, a_desc.layout)
        b_smem = gl.allocate_shared_memory(dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
        c_smem = gl.allocate_shared_memory(dtype, [2] + c_desc.block_type.shape, c_desc.layout)
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            mbarrier.init(ready.index(i), count=1)
            mbarrier.init(empty.index(i), count=2)  # both consumer groups release a slot
        descs = (a_desc, b_desc, c_desc)
        bars = (ready, empty)
        bufs = (a_smem, b_smem, c_smem)
        gl.warp_specialize([
            (_first_group, (descs, bars, bufs, M, N, K, alpha, bias, bias_stride, beta, B_T, GROUP, BIAS)),
            (_second_group, (descs, bars, bufs, M, N, K, alpha, bias, bias_stride, beta, B_T, GROUP, BIAS)),
            (_load, (descs, bars, bufs, M, N, K, alpha, B_T, GROUP)),
        ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


@functools.lru_cache(maxsize=None)
def _units(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


@functools.lru_cache(maxsize=None)
def _layout(dtype: torch.dtype, rows: int, cols: int) -> Any:
    gdtype = gl.bfloat16 if dtype == torch.bfloat16 else gl.float16
    return gl.NVMMASharedLayout.get_default_for([rows, cols], gdtype)


def _blocks(config: Config, b_t: bool) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    """The A, B and C descriptors' blocks."""
    b_block = (config.block_n, config.block_k) if b_t else (config.block_k, config.block_n)
    rows = config.block_m // 2
    return (rows, config.block_k), b_block, (rows, config.block_n)


def compiles(target: Any) -> list[VariantCompile]:
    """The compiles the kernel needs for ``target`` (each config, B row- and column-major;
    bf16, which compiles as fp16 does): for sm_90 only."""
    if gluon is None or target.backend != "cuda" or target.arch != 90:
        return []
    from triton.experimental.gluon._runtime import GluonASTSource

    found = []
    for config, b_t, bias in itertools.product(CONFIGS, (True, False), (0, 1, 2)):
        if bias == 0 or config == CONFIGS[0]:  # (the epilogue's loads: one config tells)
            a_block, b_block, c_block = _blocks(config, b_t)

            def desc(block: tuple[int, int]) -> str:
                return f"tensordesc<bf16[{block[0]}, {block[1]}],{_layout(torch.bfloat16, *block)!r}>"

            signature = {
                "a_desc": desc(a_block), "b_desc": desc(b_block), "c_desc": desc(c_block),
                "M": "i32", "N": "i32", "K": "i32", "alpha": "fp32", "bias": "*bf16", "bias_stride": "i32",
                "beta": "fp32", "STAGES": "constexpr", "B_T": "constexpr", "GROUP": "constexpr", "BIAS": "constexpr",
                "CONSUMER_REGS": "constexpr", "LOADER_REGS": "constexpr",
            }
            names = list(signature)
            values = {"STAGES": config.stages, "B_T": b_t, "GROUP": config.group_m, "BIAS": bias,
                      "CONSUMER_REGS": CONSUMER_REGISTERS, "LOADER_REGS": LOADER_REGISTERS}
            source = GluonASTSource(gemm_kernel, signature, {(names.index(k),): v for k, v in values.items()})
            name = f"{config.describe()}, B {'column' if b_t else 'row'}-major"
            name += ("", ", row bias", ", column bias")[bias]
            found.append(VariantCompile(name, source, {"num_warps": 4, "maxnreg": MAX_REGISTERS}))
    return found


def _rows(t: torch.Tensor) -> bool:
    """Rows contiguous, in 16-byte multiples and not overlapping: with a 16-byte aligned
    base (checked per call), a descriptor describes t."""
    return t.stride(1) == 1 and t.stride(0) >= t.shape[1] and t.stride(0) * t.element_size() % 16 == 0


def _row_major(t: torch.Tensor) -> bool:
    """A descriptor describes t as it is (rows as in :func:`_rows`, base 16-byte aligned)."""
    return _rows(t) and t.data_ptr() % 16 == 0


def choose(M: int, N: int, units: int) -> Config:
    """The config with the least time once tiles are quantized to waves of ``units``
    programs: waves x a tile's work / the config's speed (ties to the first listed)."""

    def cost(config: Config) -> float:
        tiles = cdiv(M, config.block_m) * cdiv(N, config.block_n)
        return cdiv(tiles, units) * config.block_m * config.block_n / config.speed

    return min(CONFIGS, key=cost)


_launcher = KeptLauncher(gemm_kernel if gluon is not None else None, num_warps=4, maxnreg=MAX_REGISTERS)


@dataclass(frozen=True)
class _Plan:
    """What a call signature's launches share: everything but the operands' addresses."""

    config: Config
    b_t: bool
    index: int
    blocks: tuple[tuple[int, int], tuple[int, int], tuple[int, int]]
    layouts: tuple[Any, Any, Any]
    grid: tuple[int]
    #: the kernel's BIAS and bias_stride
    bias: tuple[int, int]
    #: what the compile depends on (the kept launch's signature)
    key: tuple[Any, ...]


def _bias_mode(bias: torch.Tensor | None) -> tuple[int, int] | None:
    """(BIAS, bias_stride) of the kernel for addmm's input expanded to the result's (M, N),
    or None for an input the epilogue does not read (a full matrix)."""
    if bias is None:
        return 0, 0
    (M, N), (stride_m, stride_n) = bias.shape, bias.stride()
    if stride_m == 0 and (N - 1) * stride_n < 2**31:
        return 1, stride_n
    if stride_n == 0 and (M - 1) * stride_m < 2**31:
        return 2, stride_m
    return None


def _plan(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, config: Config | None = None,
          b_t: bool | None = None, bias: torch.Tensor | None = None) -> _Plan | None:
    """The launch of an (M, K) @ (K, N) product of this signature (shapes, strides, dtype,
    device; ``bias``: addmm's input expanded to (M, N)), or None when the kernel does not
    serve it."""
    if gluon is None or not a.is_cuda or a.dtype not in DTYPES:
        return None
    (M, K), N = a.shape, b.shape[1]
    if K == 0 or M * N * K < MIN_WORK or max(M, N, K) >= 2**31 or not (_rows(a) and _rows(out)):
        return None  # (the kernel's sizes and tile coordinates are 32-bit)
    mode = _bias_mode(bias)
    if mode is None or (bias is not None and (bias.dtype != a.dtype or bias.device != a.device)):
        return None
    if b_t is None:
        if _rows(b):
            b_t = False
        elif _rows(b.t()):
            b_t = True
        else:
            return None
    index = a.device.index if a.device.index is not None else torch.cuda.current_device()
    if not is_hopper(index):
        return None
    units = _units(index)
    config = config or choose(M, N, units)
    blocks = _blocks(config, b_t)
    tiles = cdiv(M, config.block_m) * cdiv(N, config.block_n)
    return _Plan(config, b_t, index, blocks, tuple(_layout(a.dtype, *block) for block in blocks),
                 (min(tiles, units),), mode, (a.dtype, config, b_t, mode[0]))


#: call signature -> its plan, or None for a signature the kernel does not serve
_plans: dict[tuple[Any, ...], _Plan | None] = {}
#: signatures kept before the table starts afresh
_PLANS_KEPT = 4096


def mm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, bias: torch.Tensor | None, alpha: Any,
       beta: Any) -> bool:
    """The ``mm`` variant point (``gems_core.variants.POINTS``): out = alpha * (a @ b) +
    beta * bias (``bias``: None, or addmm's input expanded to out's shape)."""
    if isinstance(alpha, (torch.Tensor, complex)) or isinstance(beta, (torch.Tensor, complex)):
        return False
    key = (a.shape, a.stride(), b.shape, b.stride(), out.stride(), a.dtype, a.device,
           None if bias is None else (bias.stride(), bias.dtype, bias.device))
    plan = _plans.get(key, _plans)
    if plan is _plans:  # a new signature
        if len(_plans) >= _PLANS_KEPT:
            _plans.clear()
        plan = _plans[key] = _plan(a, b, out, bias=bias)
    if plan is None or a.data_ptr() % 16 or b.data_ptr() % 16 or out.data_ptr() % 16:
        return False
    _run(plan, a, b, out, alpha, bias, beta)
    return True


#: every launch is reported to the native layer's recorder (launcher.py), which repeats it
mm.reports_launches = True  # type: ignore[attr-defined]


def launch(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, alpha: Any, config: Config, b_t: bool,
           index: int, bias: torch.Tensor | None = None, beta: Any = 1) -> None:
    """out = alpha * (a @ b) (+ beta * bias) on ``config``, for operands :func:`mm` accepts
    (``b_t``: b is column-major) on CUDA device ``index`` (for benchmarks and tests:
    :func:`mm` chooses)."""
    plan = _plan(a, b, out, config, b_t, bias)
    if plan is None or plan.index != index:
        raise ValueError(f"the Hopper GEMM does not serve this product on device {index}")
    _run(plan, a, b, out, alpha, bias, beta)


def _descriptor_maker() -> Any:
    """A maker of Gluon's host ``TensorDescriptor`` without its ``__post_init__`` checks
    (about 10 us for three descriptors a call), which :func:`_plan` and :func:`mm` have made
    already: the dataclass's fields with their defaults, then the given ones. The plain
    constructor where the class is not a plain dataclass."""
    if gluon is None:
        return None
    try:
        fields = dataclasses.fields(TensorDescriptor)
        defaults = {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}
        defaults.update({f.name: f.default_factory() for f in fields
                         if f.default_factory is not dataclasses.MISSING})  # type: ignore[misc]
        object.__new__(TensorDescriptor).__dict__  # noqa: B018 - no __dict__ with slots
    except (TypeError, AttributeError):
        return TensorDescriptor

    def make(base: torch.Tensor, shape: list[int], strides: list[int], block_shape: list[int],
             layout: Any) -> Any:
        desc = object.__new__(TensorDescriptor)
        desc.__dict__.update(defaults, base=base, shape=shape, strides=strides, block_shape=block_shape,
                             layout=layout)
        return desc

    return make


_descriptor = _descriptor_maker()


def _run(plan: _Plan, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, alpha: Any,
         bias: torch.Tensor | None = None, beta: Any = 0) -> None:
    (M, K), N = a.shape, b.shape[1]
    a_block, b_block, c_block = plan.blocks
    a_layout, b_layout, c_layout = plan.layouts
    operand = b.t() if plan.b_t else b
    config = plan.config
    args = (
        _descriptor(a, [M, K], [a.stride(0), 1], list(a_block), a_layout),
        _descriptor(operand, list(operand.shape), [operand.stride(0), 1], list(b_block), b_layout),
        _descriptor(out, [M, N], [out.stride(0), 1], list(c_block), c_layout),
        M, N, K, float(alpha),
        out if bias is None else bias, plan.bias[1], 0.0 if bias is None else float(beta),  # out: unread
        config.stages, plan.b_t, config.group_m, plan.bias[0], CONSUMER_REGISTERS, LOADER_REGISTERS,
    )
    _launcher(plan.grid, args, plan.key, plan.index)
