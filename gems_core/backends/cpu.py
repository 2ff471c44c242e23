"""The built-in ``cpu`` reference backend: Triton's interpreter on CPU tensors.

Selected wherever no accelerator backend detects its hardware. It declares its own quirks
through the same hooks a chip vendor uses.
"""

from __future__ import annotations

from gems_core.contract import (
    BackendDescriptor,
    DetectedDevice,
    Deviation,
    DtypeSupport,
    Limits,
    OpGate,
    TritonTarget,
)
from gems_core.hookspecs import hookimpl

DESCRIPTOR = BackendDescriptor(
    name="cpu",
    vendor="reference",
    device_type="cpu",
    dispatch_key="CPU",
    target=TritonTarget(backend="interpreter", arch="cpu", warp_size=1),
    # the interpreter runs a launch's programs one after another: a fused merge's counters work
    limits=Limits(max_warps=32, max_threads_per_block=1024, shared_memory_per_block=2**30, fused_merge=True),
    dtypes=DtypeSupport(float64=True, bfloat16=True, int64=True, float8_e4m3fn=True, float8_e5m2=True),
    interpreter=True,
    description="Triton interpreter on CPU tensors (reference; slow)",
    detection="always present",
)


@hookimpl
def gems_descriptor() -> BackendDescriptor:
    return DESCRIPTOR


@hookimpl
def gems_detect() -> DetectedDevice:
    return DetectedDevice(name="CPU (Triton interpreter)", arch="cpu")


@hookimpl
def gems_known_deviations() -> list[Deviation]:
    return []


_BF16_DOT = (
    "Triton interpreter (3.9): tl.dot on bf16 operands reads them as the wrong values "
    "(results off by orders of magnitude), so bf16 matrix products stay on ATen"
)


@hookimpl
def gems_unsupported_ops() -> list[OpGate]:
    return [
        OpGate("mm", ("bfloat16",), reason=_BF16_DOT),
        OpGate("addmm", ("bfloat16",), reason=_BF16_DOT),
        OpGate("bmm", ("bfloat16",), reason=_BF16_DOT),
        OpGate("baddbmm", ("bfloat16",), reason=_BF16_DOT),
        OpGate("scaled_dot_product_attention", ("bfloat16",), reason=_BF16_DOT),
    ]
