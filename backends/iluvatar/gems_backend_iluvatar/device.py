"""Is an Iluvatar CoreX GPU present, and what the chip is.

CoreX builds of torch keep device type ``cuda`` and add a ``torch.corex`` attribute; device
names contain "Iluvatar". The CoreX Triton fork takes the target backend ``corex`` (it also
accepts ``cuda``) with the compute capability the device reports, and 64-lane warps.
"""

from __future__ import annotations

import torch

from gems_core import BackendDescriptor, DetectedDevice, DtypeSupport, Limits, TritonTarget

KIB = 1024
WARP_SIZE = 64  # [?] reported for BI-V150; the CoreX fork's default warp_size
MAX_THREADS_PER_BLOCK = 1024  # [?] consistent with the published num_warps=16 GEMM tuning
SHARED_MEMORY_PER_BLOCK = 64 * KIB  # [?] conservative until the vendor confirms
DEFAULT_ARCH = "ivcore11"

# The fork names its ISA generations by the capability the device reports.
ARCH_BY_CAPABILITY = {
    (7, 0): "ivcore10",  # [?] BI-V100
    (7, 1): "ivcore11",  # BI-V150, MR-V100 [?]
    (8, 0): "ivcore20",  # [?]
}
CAPABILITY_BY_ARCH = {arch: major * 10 + minor for (major, minor), arch in ARCH_BY_CAPABILITY.items()}
UNKNOWN_ARCH_PREFIX = "ivcore_sm"  # a capability not in the table: "ivcore_sm75"

DETECTION = (
    "torch.cuda.is_available() and either a CoreX build of torch (torch.corex) or a device "
    "name containing 'Iluvatar'"
)


def detect() -> DetectedDevice | None:
    if torch.version.hip is not None or not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(0)
    if not (hasattr(torch, "corex") or "iluvatar" in name.lower()):
        return None
    major, minor = torch.cuda.get_device_capability(0)
    arch = ARCH_BY_CAPABILITY.get((major, minor), f"{UNKNOWN_ARCH_PREFIX}{major}{minor}")
    return DetectedDevice(name=name, arch=arch)


def capability_of(arch: str) -> int:
    """The capability behind an arch key: "ivcore11" -> 71, "ivcore_sm75" -> 75, "71" -> 71
    (emulation passes the target's int)."""
    if arch in CAPABILITY_BY_ARCH:
        return CAPABILITY_BY_ARCH[arch]
    digits = arch.removeprefix(UNKNOWN_ARCH_PREFIX)
    return int(digits) if digits.isdigit() else CAPABILITY_BY_ARCH[DEFAULT_ARCH]


def descriptor(arch: str = DEFAULT_ARCH) -> BackendDescriptor:
    capability = capability_of(arch)
    return BackendDescriptor(
        name="iluvatar",
        vendor="Iluvatar CoreX",
        device_type="cuda",
        dispatch_key="CUDA",
        target=TritonTarget("corex", capability, WARP_SIZE),
        limits=Limits(
            max_warps=MAX_THREADS_PER_BLOCK // WARP_SIZE,
            max_threads_per_block=MAX_THREADS_PER_BLOCK,
            shared_memory_per_block=SHARED_MEMORY_PER_BLOCK,
        ),
        dtypes=DtypeSupport(float64=False, bfloat16=True, int64=True),
        # triton==3.1.0+corex.4.4.0, or FlagTree 0.5.0+iluvatar3.1 (whose triton reports 3.1).
        # ">=" not ">": packaging excludes 3.1.0+local from ">3.1.0" but keeps it in ">=3.1".
        triton_versions=">=3.1,<3.2",
        gems_core_versions=">=0.1,<0.2",
        compile_targets=(TritonTarget("corex", capability, WARP_SIZE),),
        description=f"Iluvatar CoreX GPU, {arch}, CoreX Triton fork (16 SMs on BI-V150 [?])",
        detection=DETECTION,
    )
