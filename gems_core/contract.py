"""The value types of the vendor contract.

A backend plugin answers the hooks in :mod:`gems_core.hookspecs` with these frozen
dataclasses. They are plain data: the core validates them once at load and freezes them into
lookup tables, so nothing here is consulted by a hook call on the per-op path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: torch dtype names a backend may gate; the keys of :class:`DtypeSupport`.
GATEABLE_DTYPES = ("float64", "bfloat16", "int64")


@dataclass(frozen=True)
class TritonTarget:
    """What Triton compiles for: ``backend`` ("cuda", "hip", or a fork's own name),
    ``arch`` (an int compute capability for cuda, a gfx name for hip) and the warp size."""

    backend: str
    arch: int | str
    warp_size: int


@dataclass(frozen=True)
class Limits:
    """Hardware limits every tuned config must stay within."""

    max_warps: int
    max_threads_per_block: int
    shared_memory_per_block: int  # bytes
    max_grid: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    #: the largest block (elements per program along one axis) a kernel may use; 0 = no limit
    max_block_elements: int = 0


@dataclass(frozen=True)
class DtypeSupport:
    """Which of the optional dtypes the chip computes natively. An unsupported dtype's ops
    go to ATen (FALLBACK) or are reported NOT SUPPORTED by the conformance suite."""

    float64: bool = True
    bfloat16: bool = True
    int64: bool = True

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

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in self.params.items()]
        parts += [f"num_warps={self.num_warps}", f"num_stages={self.num_stages}"]
        parts += [f"{k}={v}" for k, v in self.options.items()]
        return ", ".join(parts)


@dataclass(frozen=True)
class OpGate:
    """Leave ``op`` to ATen: every call when ``dtypes`` is empty, else only calls where a
    tensor argument (``out=`` included) has one of these dtypes or one is asked for with
    ``dtype=`` (torch dtype names, e.g. "float64")."""

    op: str
    dtypes: tuple[str, ...] = ()
    reason: str = ""


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


@dataclass(frozen=True)
class KernelVariant:
    """A chip's own implementation of one of the core's variant points
    (:data:`gems_core.variants.POINTS`): the core offers it each call at that point, and it
    serves the inputs it accepts (returning True) or declines (False), leaving them to the
    portable kernel. ``fn`` follows the point's documented signature. ``compiles``, given a
    Triton target, lists the compiles the kernel needs there (none for a target it does not
    run on); the compile tier compiles them ahead of time as it does the core's kernels."""

    point: str
    fn: Callable[..., Any]
    reason: str = ""
    compiles: Callable[[TritonTarget], Iterable[VariantCompile]] | None = None
