"""The gems hooks of the NVIDIA backend; the data lives in :mod:`.device` and :mod:`.configs`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from gems_core import BackendDescriptor, DetectedDevice, KernelConfig, KernelVariant, OpGate, hookimpl
from gems_core.contract import NativeLaunch
from gems_core.shipped import package_table

from . import configs, device


@hookimpl
def gems_descriptor() -> BackendDescriptor:
    detected = device.detect()
    return device.descriptor(detected.arch if detected else device.DEFAULT_ARCH)


@hookimpl
def gems_detect() -> DetectedDevice | None:
    return device.detect()


@hookimpl
def gems_native_launch() -> NativeLaunch:
    from . import driver

    return driver.native_launch()


@hookimpl
def gems_tuned_configs(arch: str) -> Mapping[str, Sequence[KernelConfig]]:
    return configs.tuned_configs(arch)


@hookimpl
def gems_tuned_table(device_model: str) -> Path | None:
    return package_table(__package__, device_model)


@hookimpl
def gems_kernel_variants(arch: str) -> Sequence[KernelVariant]:
    if device.arch_key(arch) != "sm_90":
        return []
    from . import attention_sm90, gemm_sm90  # Gluon is imported only for the chip it serves

    if not attention_sm90.available():
        return []
    return [
        KernelVariant(
            "attention_forward", attention_sm90.attention_forward,
            reason="warp-specialized Gluon kernel (a loading warp, two consumer warp groups): the portable "
                   "kernel cannot overlap softmax and products on Hopper",
            compiles=attention_sm90.compiles,
        ),
        KernelVariant(
            "mm", gemm_sm90.mm,
            reason="warp-specialized persistent Gluon GEMM (a loading warp, two consumer warp groups) for "
                   "large 16-bit products: the core's Triton main loops stay a few per cent behind cuBLAS",
            compiles=gemm_sm90.compiles,
        ),
    ]


#: convolution stays with cuDNN on NVIDIA GPUs until gems' implicit GEMM is measured against
#: it on these chips (the conformance suite and the CPU interpreter check its results)
_UNMEASURED = ("convolution", "convolution.out", "convolution_backward")


@hookimpl
def gems_unsupported_ops() -> Iterable[OpGate]:
    return [OpGate(op, reason="not yet measured against cuDNN on this chip") for op in _UNMEASURED]
