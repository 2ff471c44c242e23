"""The gems hooks of the NVIDIA backend; the data lives in :mod:`.device` and :mod:`.configs`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from gems_core import BackendDescriptor, DetectedDevice, KernelConfig, KernelVariant, OpGate, hookimpl
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


#: the multi-tensor optimizer kernels stay with ATen on NVIDIA GPUs until they are measured
#: at ATen's speed there: with a (tensor, chunk) grid sized by the largest tensor, an H100 ran
#: a Llama AdamW step 0.4-0.6x ATen's (most programs idle beside the embedding); the grid now
#: covers each tensor's own chunks, not yet timed on a GPU
_MULTI_TENSOR = tuple(
    f"_foreach_{name}{suffix}"
    for name in ("abs", "add", "addcdiv", "addcmul", "div", "exp", "lerp", "maximum", "minimum", "mul",
                 "neg", "reciprocal", "sqrt", "sub")
    for suffix in ("", "_")
) + ("_foreach_zero_", "_fused_adam_", "_fused_adamw_", "_fused_sgd_")


@hookimpl
def gems_unsupported_ops() -> Iterable[OpGate]:
    return [OpGate(op, reason="multi-tensor optimizer kernel not yet measured at ATen's speed on this chip")
            for op in _MULTI_TENSOR]
