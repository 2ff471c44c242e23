"""The gems hooks of the NVIDIA backend; the data lives in :mod:`.device` and :mod:`.configs`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from gems_core import BackendDescriptor, DetectedDevice, Deviation, KernelConfig, KernelVariant, OpGate, hookimpl
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


#: convolution stays with cuDNN: gems' implicit GEMM runs at 0.5-0.86x cuDNN on ResNet-50's
#: bf16 channels_last layers on an H100 (the conformance suite and the CPU interpreter check
#: its results). Two forms that are one matrix product on the GEMM stay on gems:
#: - "patches", a patch embedding (stride = kernel): a patch copy and the product, where cuDNN
#:   took 0.31 ms for ViT-base's at batch 32 (0.23 ms of convolution, 0.08 ms of layout
#:   conversion);
#: - "unit", a 1x1 map with unit stride over channels-last images: ResNet-50's 32 such layers
#:   (bf16, batch 64, H100) took 0.82 ms of GPU time on the GEMM against cuDNN's 0.77 ms, but
#:   the model's forward 4.97 ms against 5.26 ms with them on cuDNN (a cuDNN call's host path
#:   is longer than the native layer's replay) and its training step 29.3 against 33.3 ms.
#: Their backward stays with cuDNN.
_CUDNN = ("convolution", "convolution.out", "convolution_backward")
_KEPT = {"convolution": ("patches", "unit"), "convolution.out": ("patches", "unit")}
#: float8 products stay with cuBLASLt, which multiplies float8 on the tensor cores; gems'
#: kernel decodes its operands to tf32 (and ATen's CUDA kernel takes fewer layouts and sizes
#: than ATen's CPU one, whose rules gems' kernel follows)
_CUBLASLT = ("_scaled_mm", "_scaled_mm.out")
#: float32 matrix products stay with cuBLAS: in IEEE precision (torch's default) Triton's dot
#: runs on the FMA units, which cuBLAS's SIMT kernels use better (gems' tiled kernel took
#: 0.83-1.0x cuBLAS's time on an H100 alone, about 0.73x summed over a float32 Llama training
#: step's products)
_CUBLAS_FLOAT32 = ("mm", "mm.out", "addmm", "addmm.out", "bmm", "bmm.out", "baddbmm", "baddbmm.out",
                   # and float32 attention: ATen's (its products on cuBLAS) took half the time of
                   # gems' FMA-unit kernels over a float32 Llama training step (6.5 against 13 ms)
                   "scaled_dot_product_attention")
#: attention with dropout stays with FlashAttention / cuDNN, the rest of attention on gems:
#: gems' kernels draw the same Bernoulli mask in the forward and both backward kernels, but
#: took 779 against 206 us for a BERT-base layer's forward and backward (fp16, batch 32 x 256
#: tokens, 12 heads of 64, p = 0.1; H200), 290 against 145 us of it GPU time (the rest the
#: host path of the autograd function), and BERT's and GPT-2's training steps 0.90x and 0.79x
#: (H100) with it on gems
_LEFT = {"scaled_dot_product_attention": ("dropout",)}
#: F.dropout stays with ATen's composite, which on CUDA devices calls native_dropout (gems')
#: itself, from C++: gems' own registration of it (for backends where ATen's composite does
#: not) would only put a Python call in front of every dropout of a training step
_ATEN_COMPOSITE = ("dropout",)


@hookimpl
def gems_unsupported_ops() -> Iterable[OpGate]:
    return [*(OpGate(op, reason="cuDNN is faster on this chip", keep=_KEPT.get(op, ())) for op in _CUDNN),
            *(OpGate(op, reason="cuBLASLt multiplies float8 natively on this chip") for op in _CUBLASLT),
            *(OpGate(op, dtypes=("float32",), reason="cuBLAS's float32 products are faster on this chip")
              for op in _CUBLAS_FLOAT32),
            *(OpGate(op, reason="FlashAttention's and cuDNN's attention with dropout is faster on this chip",
                     leave=forms) for op, forms in _LEFT.items()),
            *(OpGate(op, reason="ATen's composite calls gems' native_dropout on this device, without Python")
              for op in _ATEN_COMPOSITE)]


@hookimpl
def gems_known_deviations() -> Iterable[Deviation]:
    """cuDNN, which serves the convolutions gated to it, multiplies float32 in TF32 by default
    (``torch.backends.cudnn.allow_tf32``): ten mantissa bits per operand, so its sums of
    hundreds to tens of thousands of products (a ResNet layer's channels x taps, a weight
    gradient's positions) land up to about 1e-1 from float64."""
    reason = "cuDNN convolves float32 in TF32 by default (torch.backends.cudnn.allow_tf32)"
    return [*(Deviation(op, reason, kind="tolerance", dtypes=("float32",), atol=0.25, rtol=2e-2)
              for op in ("convolution", "convolution_backward")),
            *(Deviation(op, _FP8_ACCUMULATION, kind="tolerance", atol=1.0, rtol=4e-2) for op in _CUBLASLT)]


#: measured on an H100 (torch 2.11): of the quick samples, up to 29 of 256 results off the
#: float64 reference, by up to 1.0 (a float16 result near 49) and 3.4 % relative
_FP8_ACCUMULATION = ("cuBLASLt's float8 products, which _scaled_mm is gated to, accumulate on the tensor "
                     "cores at reduced precision: a result that partial sums cancel down to misses by "
                     "a share of those sums")

