"""Is a MetaX GPU present, and what the chip is.

MACA builds of torch (``torch==2.8.0+metax3.5.3.9``) keep device type ``cuda``; device names
contain "MetaX" (C500, C550). The MetaX Triton fork compiles for target backend ``maca``
with 64-lane warps.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch

from gems_core import BackendDescriptor, DetectedDevice, DtypeSupport, Limits, TritonTarget

KIB = 1024
WARP_SIZE = 64
MAX_THREADS_PER_BLOCK = 512  # [?] C550; older notes say 1024 (16 warps): the smaller is kept
SHARED_MEMORY_PER_BLOCK = 64 * KIB  # [?]
MAX_TILE = 2048  # largest block along one axis
CAPABILITY = 80  # [?] the capability the fork's "sm{arch}" target takes
DEFAULT_ARCH = "c500"
MACA_DEFAULT_PATH = "/opt/maca"

# An NVIDIA GPU in a machine that also has MACA installed is still NVIDIA's.
NVIDIA_NAMES = ("NVIDIA", "Tesla", "Quadro", "GeForce", "TITAN")
PART = re.compile(r"\b([CN]\d{3})\b", re.IGNORECASE)  # C500, C550, N260

DETECTION = (
    "torch.cuda.is_available() and a device name containing 'MetaX', or a MACA build of torch "
    f"(a '+metax' version label) with MACA installed (MACA_PATH or {MACA_DEFAULT_PATH})"
)


def maca_installed() -> bool:
    return any(Path(p).is_dir() for p in (os.environ.get("MACA_PATH"), MACA_DEFAULT_PATH) if p)


def maca_torch() -> bool:
    return "metax" in torch.__version__.partition("+")[2].lower()


def detect() -> DetectedDevice | None:
    if torch.version.hip is not None or not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(0)
    # The device name is the evidence; a MACA torch on a MACA install stands in for it where
    # a driver reports a bare part name [?], but never for another vendor's named device.
    by_name = "metax" in name.lower()
    by_stack = maca_torch() and maca_installed() and not name.startswith(NVIDIA_NAMES)
    if not (by_name or by_stack):
        return None
    part = PART.search(name)
    return DetectedDevice(name=name, arch=part.group(1).lower() if part else DEFAULT_ARCH)


def descriptor(arch: str = DEFAULT_ARCH) -> BackendDescriptor:
    target = TritonTarget("maca", CAPABILITY, WARP_SIZE)
    return BackendDescriptor(
        name="metax",
        vendor="MetaX",
        device_type="cuda",
        dispatch_key="CUDA",
        target=target,
        limits=Limits(
            max_warps=MAX_THREADS_PER_BLOCK // WARP_SIZE,
            max_threads_per_block=MAX_THREADS_PER_BLOCK,
            shared_memory_per_block=SHARED_MEMORY_PER_BLOCK,
            max_block_elements=MAX_TILE,
        ),
        dtypes=DtypeSupport(float64=True, bfloat16=True, int64=True),
        # FlagTree 3.1.0+metax3.5.3.9 or triton 3.0.0+metax...; ">=" keeps the local-labelled
        # versions in range (packaging leaves 3.1.0+metax... out of ">3.1.0").
        triton_versions=">=3.0,<3.2",
        gems_core_versions=">=0.1,<0.2",
        compile_targets=(target,),
        description=f"MetaX GPU, {arch}, MACA and the MetaX Triton fork",
        detection=DETECTION,
    )
