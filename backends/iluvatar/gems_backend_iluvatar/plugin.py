"""The gems hooks of the Iluvatar backend; the data lives in :mod:`.device` and :mod:`.configs`.

No ops are gated beyond float64 (the descriptor marks it unsupported, which gates it for
every op): the ops published as failing on CoreX, ``grouped_topk`` and ``topk_softmax``, are
not ATen operators, so there is nothing of ATen's to leave to it.
"""

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
