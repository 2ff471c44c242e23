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
    TritonTarget,
)
from gems_core.hookspecs import hookimpl

DESCRIPTOR = BackendDescriptor(
    name="cpu",
    vendor="reference",
    device_type="cpu",
    dispatch_key="CPU",
    target=TritonTarget(backend="interpreter", arch="cpu", warp_size=1),
    limits=Limits(max_warps=32, max_threads_per_block=1024, shared_memory_per_block=2**30),
    dtypes=DtypeSupport(float64=True, bfloat16=True, int64=True),
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
    # The interpreter's tl.dot computes bf16 products in numpy with a bf16 round trip that
    # loses the fp32 accumulation (seen on Triton 3.9): matmuls in bf16 are wrong there.
    reason = "Triton interpreter: bf16 tl.dot gives wrong results (Triton 3.9)"
    return [Deviation(op=op, dtypes=("bfloat16",), kind="xfail", reason=reason)
            for op in ("mm", "addmm", "bmm")]
