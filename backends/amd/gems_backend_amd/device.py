"""Is an AMD GPU present (a ROCm build of torch), and what the chip is, per gfx arch."""

from __future__ import annotations

import torch

from gems_core import BackendDescriptor, DetectedDevice, DtypeSupport, Limits, TritonTarget

KIB = 1024
MAX_THREADS_PER_BLOCK = 1024
DEFAULT_ARCH = "gfx942"

# LDS per workgroup, bytes.
LDS_PER_WORKGROUP = {
    "gfx90a": 64 * KIB,  # MI210, MI250(X)
    "gfx942": 64 * KIB,  # MI300X, MI300A, MI325X
    "gfx950": 160 * KIB,  # MI350X, MI355X
}
FALLBACK_LDS = 64 * KIB
# The compile tier checks every target against one set of limits (this descriptor's), so
# gfx950 and its 160 KB configs stay out until limits can differ per target.
COMPILE_CHECKED = ("gfx90a", "gfx942")

# Other vendors' ROCm-based stacks also set torch.version.hip; they name their own parts.
FOREIGN_NAME_MARKERS = ("Hygon", "DCU")  # [?] Hygon DCU names, e.g. "K100_AI" parts

DETECTION = (
    "a ROCm build of torch (torch.version.hip set) with torch.cuda.is_available(); the arch "
    "from torch.cuda.get_device_properties(0).gcnArchName"
)


def warp_size(arch: str) -> int:
    """CDNA (gfx9) runs 64-lane wavefronts; RDNA (gfx10-12) runs 32 under Triton."""
    return 64 if arch.startswith("gfx9") else 32


def detect() -> DetectedDevice | None:
    if torch.version.hip is None or not torch.cuda.is_available():
        return None
    properties = torch.cuda.get_device_properties(0)
    name = torch.cuda.get_device_name(0) or getattr(properties, "name", "") or "AMD GPU"
    if any(marker in name for marker in FOREIGN_NAME_MARKERS):
        return None
    # "gfx942:sramecc+:xnack-": the target is the part before the feature flags
    arch = (getattr(properties, "gcnArchName", "") or "").split(":", 1)[0]
    return DetectedDevice(name=name, arch=arch or "gfx")


def descriptor(arch: str = DEFAULT_ARCH) -> BackendDescriptor:
    if not arch.startswith("gfx") or arch == "gfx":
        arch = DEFAULT_ARCH
    lanes = warp_size(arch)
    return BackendDescriptor(
        name="amd",
        vendor="AMD",
        device_type="cuda",
        dispatch_key="CUDA",
        target=TritonTarget("hip", arch, lanes),
        limits=Limits(
            max_warps=MAX_THREADS_PER_BLOCK // lanes,
            max_threads_per_block=MAX_THREADS_PER_BLOCK,
            shared_memory_per_block=LDS_PER_WORKGROUP.get(arch, FALLBACK_LDS),
            pipelining="stream",  # Triton's AMD stream pipeliner
        ),
        dtypes=DtypeSupport(float64=True, bfloat16=True, int64=True),
        triton_versions=">=3.6,<3.10",
        gems_core_versions=">=0.1,<0.2",
        compile_targets=tuple(TritonTarget("hip", gfx, 64) for gfx in COMPILE_CHECKED),
        description=f"AMD GPU, {arch}, ROCm and upstream Triton",
        detection=DETECTION,
    )
