"""Is a Kunlunxin XPU present, and what the chip is.

Kunlunxin's torch stack (``torch_klx``, ``xmlir``) keeps device type ``cuda``. The XPU Triton
fork compiles for target backend ``xpu`` with the XPU generation as arch (3 for P800). It
has no warps: a program runs on one cluster (64 cores), the fork ignores ``num_warps``, and
grids are sized to the 12 clusters. Blocks are at most 512 elements along an axis.
"""

from __future__ import annotations

import importlib.util
import re

import torch

from gems_core import BackendDescriptor, DetectedDevice, DtypeSupport, Limits, TritonTarget

KIB = 1024
WARP_SIZE = 1  # [?] no SIMT warps; a config's num_warps is 1 and means nothing to the fork
CORES_PER_CLUSTER = 64  # [?] 12 clusters x 64 cores on P800
SHARED_MEMORY_PER_BLOCK = 256 * KIB  # [?] cluster shared memory; GEMM tiles stay well below
MAX_TILE = 512
DEFAULT_ARCH = "xpu3"

VENDOR_NAME = re.compile(r"kunlun|\bklx", re.IGNORECASE)
PART = re.compile(r"\b(P800|R480|R200)\b", re.IGNORECASE)
GENERATION_BY_PART = {"p800": "xpu3", "r480": "xpu3", "r200": "xpu2"}  # [?] R480 carries P800s
STACK_MODULES = ("torch_klx", "xmlir")
# An NVIDIA GPU in a machine that also has the Kunlunxin stack installed is still NVIDIA's.
NVIDIA_NAMES = ("NVIDIA", "Tesla", "Quadro", "GeForce", "TITAN")

DETECTION = (
    "torch.cuda.is_available() and a device name naming Kunlunxin (Kunlun, P800, R480, R200), "
    "or Kunlunxin's torch stack (torch_klx or xmlir) installed beside a device not named by NVIDIA"
)


def kunlunxin_stack() -> bool:
    """Is Kunlunxin's torch stack installed? Looked up, never imported (no side effects)."""
    for module in STACK_MODULES:
        try:
            if importlib.util.find_spec(module) is not None:
                return True
        except (ImportError, ValueError):
            continue
    return False


def detect() -> DetectedDevice | None:
    if torch.version.hip is not None or not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(0)
    if name.startswith(NVIDIA_NAMES):
        return None
    part = PART.search(name)
    named = part is not None or VENDOR_NAME.search(name) is not None
    if not (named or kunlunxin_stack()):
        return None
    arch = GENERATION_BY_PART.get(part.group(1).lower(), DEFAULT_ARCH) if part else DEFAULT_ARCH
    return DetectedDevice(name=name, arch=arch)


def generation(arch: str) -> int:
    """3 from "xpu3", or from "3" (emulation passes the target's int)."""
    digits = arch.removeprefix("xpu")
    return int(digits) if digits.isdigit() else 3


def descriptor(arch: str = DEFAULT_ARCH) -> BackendDescriptor:
    target = TritonTarget("xpu", generation(arch), WARP_SIZE)
    return BackendDescriptor(
        name="kunlunxin",
        vendor="Kunlunxin",
        device_type="cuda",
        dispatch_key="CUDA",
        target=target,
        limits=Limits(
            max_warps=1,
            max_threads_per_block=CORES_PER_CLUSTER,
            shared_memory_per_block=SHARED_MEMORY_PER_BLOCK,
            max_block_elements=MAX_TILE,
        ),
        dtypes=DtypeSupport(float64=False, bfloat16=True, int64=True),
        # FlagTree 0.5.1+xpu3.0 (its triton reports 3.0) or triton==3.0.0+...; ">=" keeps the
        # local-labelled versions in range (packaging leaves 3.0.0+x out of ">3.0.0").
        triton_versions=">=3.0,<3.1",
        gems_core_versions=">=0.1,<0.2",
        compile_targets=(target,),
        description=f"Kunlunxin XPU, {arch}, XPU Triton fork",
        detection=DETECTION,
    )
