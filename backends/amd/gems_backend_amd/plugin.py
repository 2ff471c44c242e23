"""The gems hooks of the AMD backend; the data lives in :mod:`.device` and :mod:`.configs`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gems_core import BackendDescriptor, DetectedDevice, KernelConfig, hookimpl

from . import configs, device


@hookimpl
def gems_descriptor() -> BackendDescriptor:
    detected = device.detect()
    return device.descriptor(detected.arch if detected else device.DEFAULT_ARCH)


@hookimpl
def gems_detect() -> DetectedDevice | None:
    return device.detect()


@hookimpl
def gems_tuned_configs(arch: str) -> Mapping[str, Sequence[KernelConfig]]:
    return configs.tuned_configs(arch)


@hookimpl
def gems_compiler_options(arch: str) -> Mapping[str, Mapping[str, object]]:
    return configs.compiler_options(arch)
