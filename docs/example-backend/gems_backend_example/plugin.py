"""The gems hooks of the Example backend.

A fictional CUDA-compatible accelerator: its torch build keeps device type ``cuda``, its
devices report names such as "Example X1", and its Triton fork compiles for the target
backend ``example`` with 32-lane warps. Everything below is data the core reads once, when
it loads the backend; no hook runs while a model runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import torch

from gems_core import (
    BackendDescriptor,
    DetectedDevice,
    Deviation,
    DtypeSupport,
    KernelConfig,
    Limits,
    OpGate,
    TritonTarget,
    configs,
    hookimpl,
)

#: the backend name: GEMS_DEVICE's value; must equal the entry point's name in pyproject.toml
NAME = "example"
VENDOR = "Example"

KIB = 1024
WARP_SIZE = 32
MAX_THREADS_PER_BLOCK = 1024
SHARED_MEMORY_PER_BLOCK = 96 * KIB
DEFAULT_ARCH = "x1"  # the arch key used when no device is detected (emulation, compile check)
PARTS = ("x1", "x2")  # arch keys, from the part name in the device name

DETECTION = "torch.cuda.is_available() and a device name starting with 'Example'"


def detect() -> DetectedDevice | None:
    """Only what torch already knows: no vendor CLI, no driver library loaded by hand."""
    if torch.version.hip is not None or not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(0)
    # The name must be ours: an NVIDIA or AMD GPU in the same machine is not an Example chip.
    if not name.startswith("Example"):
        return None
    arch = next((part for part in PARTS if part in name.lower().split()), DEFAULT_ARCH)
    return DetectedDevice(name=name, arch=arch)


def descriptor(arch: str) -> BackendDescriptor:
    target = TritonTarget(backend="example", arch=arch, warp_size=WARP_SIZE)
    return BackendDescriptor(
        name=NAME,
        vendor=VENDOR,
        device_type="cuda",  # tensors live on "cuda" devices, as on every CUDA-compatible stack
        dispatch_key="CUDA",  # where gems registers its kernels with the dispatcher
        target=target,
        limits=Limits(
            max_warps=MAX_THREADS_PER_BLOCK // WARP_SIZE,
            max_threads_per_block=MAX_THREADS_PER_BLOCK,
            shared_memory_per_block=SHARED_MEMORY_PER_BLOCK,
            max_block_elements=4096,
        ),
        dtypes=DtypeSupport(float64=False, bfloat16=True, int64=True),
        # The fork reports local versions such as "3.1.0+example2.4": ">=3.1,<3.2" admits
        # them, ">3.1.0" would not (a local label sorts after, but ">" excludes it).
        triton_versions=">=3.1,<3.2",
        gems_core_versions=">=0.1,<0.2",
        compile_targets=tuple(TritonTarget("example", part, WARP_SIZE) for part in PARTS),
        description=f"{VENDOR} {arch.upper()}, Example Triton fork",
        detection=DETECTION,
    )


# Per tunable kernel (``python -m gems_core info`` lists them and their params). One config
# fixes the choice; several are benchmarked once per shape bucket. The first is used where
# nothing is benchmarked (emulation, the interpreter).
# ``gems_core.configs`` has a constructor per tunable taking exactly its parameters.
_ROW_TILES = [
    configs.tile(BLOCK_M=1, BLOCK_N=1024, num_warps=4),
    configs.tile(BLOCK_M=4, BLOCK_N=256, num_warps=4),
]
TUNED_CONFIGS: dict[str, dict[str, list[KernelConfig]]] = {
    "x1": {
        # ``options``: compiler options of this config alone (here one of the fork's)
        "pointwise": [configs.pointwise(BLOCK_SIZE=1024, num_warps=4, options={"example_vector_width": 4})],
        "reduction": _ROW_TILES,
        "softmax": _ROW_TILES,
    },
    "x2": {
        "pointwise": [configs.pointwise(BLOCK_SIZE=2048, num_warps=8)],
        "reduction": _ROW_TILES,
        "softmax": _ROW_TILES,
    },
}

# Options of the fork's compiler, per tunable kernel ("*": every kernel). An upstream Triton
# does not know them: under emulation they are dropped and listed by `gems_core info`.
COMPILER_OPTIONS: dict[str, dict[str, object]] = {
    "softmax": {"example_pipeline": "double_buffer"},
}

UNSUPPORTED_OPS: tuple[OpGate, ...] = (
    OpGate("cumsum", reason="the fork has no scan lowering yet: ATen's kernel serves it"),
    OpGate("prod", dtypes=("int64",), reason="no 64-bit integer multiply in the vector unit"),
)

KNOWN_DEVIATIONS: tuple[Deviation, ...] = (
    Deviation(
        op="exp",
        kind="tolerance",
        dtypes=("bfloat16",),
        rtol=2e-2,
        atol=1e-2,
        reason="the fast exp unit rounds bf16 results once more than the reference",
    ),
)


@hookimpl
def gems_descriptor() -> BackendDescriptor:
    detected = detect()
    return descriptor(detected.arch if detected else DEFAULT_ARCH)


@hookimpl
def gems_detect() -> DetectedDevice | None:
    return detect()


@hookimpl
def gems_tuned_configs(arch: str) -> Mapping[str, Sequence[KernelConfig]]:
    return TUNED_CONFIGS.get(arch, {})


@hookimpl
def gems_compiler_options(arch: str) -> Mapping[str, Mapping[str, object]]:
    return COMPILER_OPTIONS


@hookimpl
def gems_unsupported_ops() -> Iterable[OpGate]:
    return UNSUPPORTED_OPS


@hookimpl
def gems_known_deviations() -> Iterable[Deviation]:
    return KNOWN_DEVIATIONS
