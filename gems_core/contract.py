"""The value types of the vendor contract.

A backend plugin answers the hooks in :mod:`gems_core.hookspecs` with these frozen
dataclasses. They are plain data: the core validates them once at load and freezes them into
lookup tables, so nothing here is consulted by a hook call on the per-op path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: torch dtype names a backend may gate; the keys of :class:`DtypeSupport`.
GATEABLE_DTYPES = ("float64", "bfloat16", "int64", "float8_e4m3fn", "float8_e5m2")


@dataclass(frozen=True)
class TritonTarget:
    """What Triton compiles for: ``backend`` ("cuda", "hip", or a fork's own name),
    ``arch`` (an int compute capability for cuda, a gfx name for hip) and the warp size."""

    backend: str
    arch: int | str
    warp_size: int


#: the values of :attr:`Limits.pipelining`
PIPELINING = ("stages", "stream")


@dataclass(frozen=True)
class Limits:
    """Hardware limits every tuned config must stay within, and the facts of the chip (and of
    its Triton) that the portable kernels size and choose their tiles by."""

    max_warps: int
    max_threads_per_block: int
    shared_memory_per_block: int  # bytes
    max_grid: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    #: the largest block (elements per program along one axis) a kernel may use; 0 = no limit
    max_block_elements: int = 0
    #: how Triton's software pipeliner holds a loop's tiles in shared memory: "stages"
    #: (``num_stages`` buffers of each pipelined tile, both operands of a dot in shared
    #: memory, as upstream Triton's NVIDIA pipeliner does) or "stream" (``num_stages - 1``
    #: buffers, a dot's first operand in registers, as its AMD stream pipeliner does)
    pipelining: str = "stages"
    #: programs of one launch may hand results to each other through acquire-release atomic
    #: counters (attention decode then merges its key splits in the same launch; otherwise a
    #: second kernel merges them)
    fused_merge: bool = False
    #: Triton moves tiles through host tensor descriptors on this chip (bulk copies, TMA on
    #: NVIDIA Hopper and later): the core's tensor-descriptor GEMM may serve large products
    tensor_descriptors: bool = False


@dataclass(frozen=True)
class DtypeSupport:
    """Which of the optional dtypes the chip computes natively. An unsupported dtype's ops
    go to ATen (FALLBACK) or are reported NOT SUPPORTED by the conformance suite."""

    float64: bool = True
    bfloat16: bool = True
    int64: bool = True
    #: the float8 formats: off unless a chip declares them
    float8_e4m3fn: bool = False
    float8_e5m2: bool = False

    def unsupported(self) -> frozenset[str]:
        return frozenset(name for name in GATEABLE_DTYPES if not getattr(self, name))


@dataclass(frozen=True)
class BackendDescriptor:
    """Who the backend is and what it runs on.

    ``device_type`` is the torch device type tensors live on ("cuda" for every GPU vendor:
    never derive the vendor from it). ``dispatch_key`` is where gems registers its kernels
    ("CUDA", "CPU", or a PrivateUse key). Version ranges are PEP 440 specifiers, checked with
    ``packaging`` at load.
    """

    name: str
    vendor: str
    device_type: str
    dispatch_key: str
    target: TritonTarget
    limits: Limits
    dtypes: DtypeSupport = DtypeSupport()
    triton_versions: str = ""
    gems_core_versions: str = ""
    #: targets the compile tier checks ahead of time (defaults to ``target`` alone)
    compile_targets: tuple[TritonTarget, ...] = ()
    #: limits of other chips of the family by arch (``str(target.arch)``, e.g. "80"), for
    #: the compile targets whose limits differ from ``limits``
    arch_limits: tuple[tuple[str, Limits], ...] = ()
    #: kernels run in Triton's interpreter: the built-in ``cpu`` reference, or a test device
    #: whose memory is the host's (tests/privateuse1_runtime.py)
    interpreter: bool = False
    description: str = ""
    #: what gems_detect() looks for, in words; shown when the hardware is not found
    detection: str = ""

    def limits_for(self, arch: int | str) -> Limits:
        """The limits of chip ``arch`` of this family (``limits`` when none are declared)."""
        for key, limits in self.arch_limits:
            if key == str(arch):
                return limits
        return self.limits


@dataclass(frozen=True)
class DetectedDevice:
    """What detection found: a human-readable name and the arch key configs are chosen by
    (e.g. "sm_90", "gfx942")."""

    name: str
    arch: str


@dataclass(frozen=True)
class KernelConfig:
    """One launch configuration of a tunable kernel: its meta-parameters (constexprs) plus
    warps, stages and any extra compiler options the chip's Triton accepts."""

    params: Mapping[str, int] = field(default_factory=dict)
    num_warps: int = 4
    num_stages: int = 2
    options: Mapping[str, Any] = field(default_factory=dict)

    def __hash__(self) -> int:
        return hash(
            (
                tuple(sorted(self.params.items())),
                self.num_warps,
                self.num_stages,
                tuple(sorted((k, repr(v)) for k, v in self.options.items())),
            )
        )

    def without(self, *names: str) -> KernelConfig:
        """This config less the params ``names`` (those its op chooses on the host, which the
        kernel does not take); itself where it has none of them."""
        if not any(name in self.params for name in names):
            return self
        return dataclasses.replace(self, params={k: v for k, v in self.params.items() if k not in names})

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in self.params.items()]
        parts += [f"num_warps={self.num_warps}", f"num_stages={self.num_stages}"]
        parts += [f"{k}={v}" for k, v in self.options.items()]
        return ", ".join(parts)


@dataclass(frozen=True)
class OpGate:
    """Leave ``op`` to ATen: every call when ``dtypes`` is empty, else only calls where a
    tensor argument (``out=`` included) has one of these dtypes or one is asked for with
    ``dtype=`` (torch dtype names, e.g. "float64").

    ``keep`` names forms of the op's calls that gems keeps serving under a whole-op gate:
    forms its implementation defines (``gems_core.registry.forms(op)`` lists them;
    convolution's ``"patches"``, a patch embedding computed as one matrix product, and
    ``"unit"``, a 1x1 one). Every other call goes to ATen.

    ``leave`` is the converse, a gate on forms alone: the calls of these forms go to ATen,
    every other call stays on gems (``scaled_dot_product_attention``'s ``"dropout"``). It
    takes neither ``dtypes`` nor ``keep`` (give a dtype gate as an OpGate of its own)."""

    op: str
    dtypes: tuple[str, ...] = ()
    reason: str = ""
    keep: tuple[str, ...] = ()
    leave: tuple[str, ...] = ()


@dataclass(frozen=True)
class Deviation:
    """A known, accepted difference on this chip.

    ``kind`` is "tolerance" (compare with ``atol``/``rtol`` instead of the suite's table) or
    "xfail" (expected to fail). ``op`` is an ATen name (overload or packet) or "*" for every
    op; a deviation on an op covers its in-place and ``out=`` forms too ("exp": ``exp_`` and
    ``exp.out``; "exp.default": ``exp_.default``). ``dtypes`` and ``samples`` (sample classes
    of the conformance suite, e.g. "special") empty mean all. ``reason`` is required: it is
    printed in every report.
    """

    op: str
    reason: str
    kind: str = "xfail"
    dtypes: tuple[str, ...] = ()
    samples: tuple[str, ...] = ()
    atol: float | None = None
    rtol: float | None = None

    def applies(self, op: str, dtype: str, sample: str) -> bool:
        packet, _, overload = op.partition(".")
        # ATen names an in-place form by a trailing underscore ("exp_"; not "__and__")
        functional = packet[:-1] if packet.endswith("_") and not packet.endswith("__") else packet
        ops = (op, packet, functional, f"{functional}.{overload}")
        return (
            (self.op == "*" or self.op in ops)
            and (not self.dtypes or dtype in self.dtypes)
            and (not self.samples or sample in self.samples)
        )


@dataclass(frozen=True)
class KernelOverride:
    """A replacement implementation of one ATen overload, used only where the portable
    kernel cannot serve the chip. ``fn`` takes the overload's ATen arguments."""

    op: str
    fn: Callable[..., Any]
    reason: str = ""


@dataclass(frozen=True)
class VariantCompile:
    """One compile of a variant's kernel for a target, for the compile tier: ``source`` is
    what ``triton.compile`` takes (an ``ASTSource``, or Gluon's), ``options`` its compiler
    options (``num_warps``, ``maxnreg``, ...), ``config`` how reports name it."""

    config: str
    source: Any
    options: Mapping[str, Any] = field(default_factory=dict)


#: variant point (:mod:`gems_core.variants`) -> the signature and contract a variant at that
#: point follows
VARIANT_POINTS: dict[str, str] = {
    "attention_forward": (
        "fn(q, k, v, out, lse, causal, qk_scale) -> bool: attention without a mask, from the "
        "SDPA prefill path (more than 16 queries, or causal). q is (B, H, L, D), k is "
        "(B, HKV, S, D) and v is (B, HKV, S, DV) with H a multiple of HKV (DV may differ from "
        "D), any strides, all on the backend's device in one dtype. Write softmax(scores) @ v "
        "into out ((B, H, L, DV), preallocated), where the "
        "scores are qk_scale * q @ k^T in base 2 (qk_scale > 0 is the softmax scale times "
        "log2(e)), causal masking keeps key j <= query i (top-left), and write each row's "
        "base-2 log-sum-exp of its scores (max + log2(sum of exp2)) into lse, a (B * H, L) "
        "float32 tensor (the backward reads it). Return False, having written nothing, to "
        "leave the call to the portable kernel."
    ),
    "mm": (
        "fn(a, b, out, bias, alpha, beta) -> bool: a matrix product from mm and addmm (and the "
        "products built on them: linear, matmul) that the core would run on its tiled or "
        "tensor-descriptor kernel (more than one row and column, and more than 64 rows unless "
        "fp64). a is (M, K), "
        "b is (K, N), out is (M, N), preallocated, not overlapping a or b; any strides, all on "
        "the backend's device in one floating dtype, M, N > 0 (K may be 0). Write "
        "alpha * (a @ b) + beta * bias into out, accumulating in at least fp32; bias is None "
        "(mm, or addmm with beta == 0: then nothing of the input is read) or addmm's input "
        "expanded to (M, N) (stride-0 broadcast dims), which may be out itself. alpha and beta "
        "are Python numbers. Return False, having written nothing, to leave the call to the "
        "core's kernels."
    ),
}

#: point name -> the op whose kernel holds it (the compile tier's ``--ops`` selects by op)
VARIANT_POINT_OPS: dict[str, str] = {
    "attention_forward": "scaled_dot_product_attention",
    "mm": "mm",
}


@dataclass(frozen=True)
class KernelVariant:
    """A chip's own implementation of one of the core's variant points
    (:data:`VARIANT_POINTS`): the core offers it each call at that point, and it
    serves the inputs it accepts (returning True) or declines (False), leaving them to the
    portable kernel. ``fn`` follows the point's documented signature. ``compiles``, given a
    Triton target, lists the compiles the kernel needs there (none for a target it does not
    run on); the compile tier compiles them ahead of time as it does the core's kernels."""

    point: str
    fn: Callable[..., Any]
    reason: str = ""
    compiles: Callable[[TritonTarget], Iterable[VariantCompile]] | None = None


@dataclass(frozen=True)
class NativeLaunch:
    """How the native dispatch layer (:mod:`gems_core.native`) launches compiled kernels on
    the chip: the driver's entry points as addresses of C functions (``ctypes.cast(fn,
    ctypes.c_void_p).value``), answered by ``gems_native_launch``. Each returns an ``int``
    status, 0 on success, with the signatures of CUDA's driver API (which HIP's mirrors):

    - ``launch(function, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes,
      stream, void** params, void** extra)``;
    - ``context_get(void** context)``, ``context_set(void* context)``, ``device_get(int*
      device, int ordinal)``, ``primary_context_retain(void** context, int device)``: the
      device's primary context made current on a thread that has none;
    - ``error_string(status, const char** text)``: optional (0), errors then read as numbers;
    - ``encode_tensor_map(void* map, int data_type, unsigned rank, void* address, const
      uint64_t* dims, const uint64_t* byte_strides, const unsigned* box, const unsigned*
      element_strides, int interleave, int swizzle, int l2_promotion, int oob_fill)``:
      optional (0), calls whose kernels take tensor maps then keep the Python path.

    ``library`` is kept with the answer for as long as the process uses the addresses (the
    loaded driver library, say). ``torch_launcher``: PyTorch's launcher of Triton-compiled
    kernels (the one ``torch.compile`` uses) launches this chip's kernels, and gems' launch
    cache goes through it (which is also how the layer learns the launches it repeats)."""

    launch: int
    context_get: int
    context_set: int
    device_get: int
    primary_context_retain: int
    error_string: int = 0
    encode_tensor_map: int = 0
    torch_launcher: bool = False
    library: Any = field(default=None, compare=False, repr=False)

    #: the entry points the layer cannot do without
    REQUIRED = ("launch", "context_get", "context_set", "device_get", "primary_context_retain")

    def problem(self) -> str:
        """Why the layer cannot use these entry points ("" when it can)."""
        for name in (*self.REQUIRED, "error_string", "encode_tensor_map"):
            value = getattr(self, name)
            if type(value) is not int or value < 0 or value >= 2**64:
                return f"NativeLaunch.{name} must be a C function's address as an int, not {value!r}"
            if value == 0 and name in self.REQUIRED:
                return f"NativeLaunch.{name} is a null address"
        return ""


@dataclass(frozen=True)
class LaunchedKernel:
    """A compiled kernel as the native dispatch layer launches it, for reporting a backend's
    own launches (:func:`gems_core.launches.report`): the driver's ``function`` handle,
    ``threads`` per block, dynamic ``shared`` memory in bytes and one ``codes`` letter per
    kernel parameter, in order: ``O`` an address (or None), ``i`` ``l`` ``b`` ``h`` signed and
    ``I`` ``K`` ``B`` ``H`` unsigned integers of 32, 64, 8 and 16 bits, ``f`` ``d`` 32- and
    64-bit floats, ``T`` a tensor map (:class:`gems_core.launches.TensorMap`)."""

    function: int
    threads: int
    shared: int
    codes: str

    @property
    def native(self) -> tuple[int, int, int, str, None]:
        """The launch spec the recorder reads (no parameter selection: every one is passed)."""
        return (self.function, self.threads, self.shared, self.codes, None)
