"""The gems hooks of the Kunlunxin backend; the data lives in :mod:`.device`, :mod:`.configs`
and :mod:`.ops`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from gems_core import BackendDescriptor, DetectedDevice, Deviation, KernelConfig, OpGate, hookimpl

from . import configs, device, ops


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


@hookimpl
def gems_unsupported_ops() -> Iterable[OpGate]:
    return ops.UNSUPPORTED_OPS


@hookimpl
def gems_known_deviations() -> Iterable[Deviation]:
    return ops.KNOWN_DEVIATIONS
