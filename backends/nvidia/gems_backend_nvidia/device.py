"""Is an NVIDIA GPU present, and what the chip is: Triton target and limits per arch."""

from __future__ import annotations

import torch

from gems_core import BackendDescriptor, DetectedDevice, DtypeSupport, Limits, TritonTarget

KIB = 1024
WARP_SIZE = 32
MAX_THREADS_PER_BLOCK = 1024
DEFAULT_ARCH = "sm_90"

# Datacenter parts since Ampere report "NVIDIA ..."; older drivers and parts use the brand
# names, which other vendors' CUDA-compatible builds do not (they report their own names).
NAME_PREFIXES = ("NVIDIA", "Tesla", "Quadro", "GeForce", "TITAN")

# Opt-in shared memory per block, bytes.
SHARED_MEMORY_PER_BLOCK = {
    "sm_80": 163 * KIB,  # A100 (108 SMs)
    "sm_86": 99 * KIB,  # A10, A40, RTX 30xx
    "sm_87": 163 * KIB,  # Jetson Orin
    "sm_89": 99 * KIB,  # L4, L40, RTX 40xx
    "sm_90": 227 * KIB,  # H100, H200 (132 SMs)
    "sm_100": 227 * KIB,  # B200
    "sm_103": 227 * KIB,  # B300
    "sm_120": 99 * KIB,  # RTX 50xx
    "sm_121": 99 * KIB,  # GB10
}
# An arch not listed (older than Ampere, or newer than this table) is budgeted this.
FALLBACK_SHARED_MEMORY = 48 * KIB

DETECTION = (
    "torch.cuda.is_available(), torch.version.hip is None and a device name starting with "
    + " or ".join(repr(p) for p in NAME_PREFIXES)
)


def arch_key(arch: str | int) -> str:
    """``"sm_90"`` from ``"sm_90"``, ``"90"`` or ``90`` (emulation passes the target's int)."""
    text = str(arch)
    return text if text.startswith("sm_") else f"sm_{text}"


def capability(arch: str) -> int:
    return int(arch_key(arch).removeprefix("sm_"))


def detect() -> DetectedDevice | None:
    if torch.version.hip is not None or not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(0)
    if not name.startswith(NAME_PREFIXES):
        return None
    major, minor = torch.cuda.get_device_capability(0)
    return DetectedDevice(name=name, arch=f"sm_{major}{minor}")


def _limits(arch: str) -> Limits:
    return Limits(
        max_warps=MAX_THREADS_PER_BLOCK // WARP_SIZE,
        max_threads_per_block=MAX_THREADS_PER_BLOCK,
        shared_memory_per_block=SHARED_MEMORY_PER_BLOCK.get(arch_key(arch), FALLBACK_SHARED_MEMORY),
        # the decode merge's counters rely on PTX's acquire-release atomics and L1 bypass
        fused_merge=True,
        tensor_descriptors=capability(arch) >= 90,  # TMA since Hopper
    )


def descriptor(arch: str = DEFAULT_ARCH) -> BackendDescriptor:
    return BackendDescriptor(
        name="nvidia",
        vendor="NVIDIA",
        device_type="cuda",
        dispatch_key="CUDA",
        target=TritonTarget("cuda", capability(arch), WARP_SIZE),
        limits=_limits(arch),
        # float8 from Ada and Hopper (compute capability 8.9) on
        dtypes=DtypeSupport(float64=True, bfloat16=True, int64=True,
                            float8_e4m3fn=capability(arch) >= 89, float8_e5m2=capability(arch) >= 89),
        triton_versions=">=3.6,<3.10",
        gems_core_versions=">=0.1,<0.2",
        compile_targets=(TritonTarget("cuda", 80, WARP_SIZE), TritonTarget("cuda", 90, WARP_SIZE)),
        arch_limits=(("80", _limits("sm_80")), ("90", _limits("sm_90"))),
        description=f"NVIDIA GPU, {arch_key(arch)}, upstream Triton",
        detection=DETECTION,
    )
