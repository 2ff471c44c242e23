"""Cases for gems_core/ops/conv.py: convolution (1-d, 2-d, 3-d; grouped, depthwise,
transposed), its out= form, and its backward through autograd.

Each sample is (input, weight, bias) and F.conv*d's keywords (a transposed sample's always
include ``output_padding``). The quick profile keeps the interpreter's shapes small yet
reaches every path: contiguous, channels-last and sliced (non-contiguous) inputs, an input
expanded along the batch (stride 0), stride, padding and dilation per dim, groups, depthwise
(one channel a group, with and without a channel multiplier), a 3-channel 7x7 stem (the flat
K walk), 16 channels over 3x3 taps (the tap-by-tap walk), a strided 1x1 convolution with more
channels than one K step, a unit-stride channels-last 1x1 one (a matrix product), a map over
non-overlapping patches (stride = kernel, a vision transformer's patch embedding), transposed
convolutions with output padding and stride phases no tap reaches, and an empty batch. The
full profile adds ResNet-50, ViT and UNet-like layers. Entries lie in [-1, 1]; tolerances scale
with the longest sum (channels x taps, or positions for the weight gradient).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample, make_tensor, ramp_like

DTYPES = samples.FLOAT_DTYPES + (torch.float64,)
CL = torch.channels_last


def _t(shape: tuple[int, ...], dtype: torch.dtype, device: Any, seed: int) -> torch.Tensor:
    return make_tensor(shape, dtype, device, seed, low=-1, high=1)


def _sample(label: str, x: torch.Tensor, w: torch.Tensor, bias: bool, dtype: torch.dtype, device: Any, seed: int,
            **kwargs: Any) -> Sample:
    out_channels = w.shape[1] * kwargs.get("groups", 1) if "output_padding" in kwargs else w.shape[0]
    b = _t((out_channels,), dtype, device, seed) if bias else None
    return Sample(label, (x, w, b), kwargs)


def conv_samples(dtype: torch.dtype, device: Any, profile: str) -> Iterator[Sample]:
    def t(*shape: int, seed: int) -> torch.Tensor:
        return _t(shape, dtype, device, seed)

    yield _sample("2-d", t(2, 4, 7, 6, seed=1), t(6, 4, 3, 3, seed=2), True, dtype, device, 3, padding=1)
    yield _sample("channels-last stride 2", t(2, 8, 7, 6, seed=4).to(memory_format=CL), t(8, 8, 3, 3, seed=5),
                  True, dtype, device, 6, stride=2, padding=1)
    yield _sample("sliced, dilated", t(2, 4, 9, 16, seed=7)[..., ::2], t(5, 4, 3, 2, seed=8), False, dtype, device,
                  9, stride=(1, 2), padding=(2, 0), dilation=2)
    yield _sample("batch expanded", t(1, 3, 5, 5, seed=10).expand(3, 3, 5, 5), t(4, 3, 2, 2, seed=11), False,
                  dtype, device, 12)
    yield _sample("groups", t(2, 8, 5, 5, seed=13), t(6, 4, 3, 3, seed=14), True, dtype, device, 15, groups=2)
    yield _sample("depthwise", t(2, 6, 6, 6, seed=16).to(memory_format=CL), t(6, 1, 3, 3, seed=17), True, dtype,
                  device, 18, padding=1, groups=6)
    yield _sample("depthwise x2", t(1, 3, 5, 5, seed=19), t(6, 1, 3, 3, seed=20), False, dtype, device, 21,
                  stride=2, groups=3)
    yield _sample("3x3 16 channels", t(1, 16, 5, 5, seed=49), t(16, 16, 3, 3, seed=50), False, dtype, device, 51,
                  padding=1)
    yield _sample("stem", t(1, 3, 15, 15, seed=22), t(8, 3, 7, 7, seed=23), False, dtype, device, 24, stride=2,
                  padding=3)
    yield _sample("1x1", t(2, 40, 4, 4, seed=25).to(memory_format=CL), t(20, 40, 1, 1, seed=26), False, dtype,
                  device, 27, stride=2)
    yield _sample("1x1 matrix product", t(2, 24, 5, 4, seed=52).to(memory_format=CL),
                  t(20, 24, 1, 1, seed=53).to(memory_format=CL), True, dtype, device, 54)
    yield _sample("patches", t(2, 3, 9, 14, seed=72), t(5, 3, 4, 4, seed=73), True, dtype, device, 74, stride=4)
    yield _sample("1-d", t(2, 4, 9, seed=28), t(5, 4, 3, seed=29), True, dtype, device, 30, padding=2, dilation=2)
    yield _sample("3-d", t(1, 3, 4, 5, 5, seed=31), t(4, 3, 2, 3, 3, seed=32), True, dtype, device, 33,
                  padding=(0, 1, 1))
    yield _sample("3-d channels-last", t(1, 4, 3, 4, 4, seed=34).to(memory_format=torch.channels_last_3d),
                  t(4, 2, 1, 3, 3, seed=35), False, dtype, device, 36, groups=2, stride=(1, 2, 1))
    yield _sample("empty batch", t(0, 4, 5, 5, seed=37), t(6, 4, 3, 3, seed=38), True, dtype, device, 39)
    if profile != "quick":
        # ResNet-50 layers as a channels-last model runs them (a 3x3 of stage 2, a 1x1 expansion,
        # the stride-2 1x1 shortcut of stage 3) and a UNet step
        yield _sample("resnet 3x3", t(8, 64, 56, 56, seed=40).to(memory_format=CL),
                      t(64, 64, 3, 3, seed=41).to(memory_format=CL), False, dtype, device, 42, padding=1)
        yield _sample("resnet 1x1", t(8, 64, 56, 56, seed=69).to(memory_format=CL),
                      t(256, 64, 1, 1, seed=70).to(memory_format=CL), False, dtype, device, 71)
        yield _sample("resnet 1x1/2", t(8, 256, 56, 56, seed=43).to(memory_format=CL),
                      t(512, 256, 1, 1, seed=44).to(memory_format=CL), False, dtype, device, 45, stride=2)
        yield _sample("vit patches", t(8, 3, 224, 224, seed=75), t(768, 3, 16, 16, seed=76), True, dtype, device,
                      77, stride=16)
        yield _sample("unet 3x3", t(2, 128, 64 + 17, 64 + 17, seed=46), t(64, 128, 3, 3, seed=47), True, dtype,
                      device, 48, padding=1)


def transpose_samples(dtype: torch.dtype, device: Any, profile: str) -> Iterator[Sample]:
    def t(*shape: int, seed: int) -> torch.Tensor:
        return _t(shape, dtype, device, seed)

    yield _sample("2-d stride 2", t(2, 4, 5, 5, seed=51), t(4, 3, 3, 3, seed=52), True, dtype, device, 53, stride=2,
                  padding=1, output_padding=1)
    yield _sample("channels-last groups", t(2, 4, 5, 4, seed=54).to(memory_format=CL), t(4, 3, 3, 2, seed=55),
                  False, dtype, device, 56, stride=(2, 1), groups=2, output_padding=0)
    yield _sample("depthwise", t(1, 4, 5, 5, seed=57), t(4, 1, 3, 3, seed=58), True, dtype, device, 59, stride=2,
                  groups=4, dilation=2, output_padding=1)
    yield _sample("1-d", t(2, 6, 7, seed=60), t(6, 2, 4, seed=61), False, dtype, device, 62, stride=3, padding=1,
                  output_padding=2)
    yield _sample("3-d", t(1, 2, 3, 3, 3, seed=63), t(2, 3, 2, 2, 2, seed=64), True, dtype, device, 65, stride=2,
                  output_padding=0)
    if profile != "quick":
        yield _sample("unet up", t(2, 128, 32, 32, seed=66).to(memory_format=CL), t(128, 64, 2, 2, seed=67), True,
                      dtype, device, 68, stride=2, output_padding=0)


def _conv(x: torch.Tensor, w: torch.Tensor, b: Any, **kwargs: Any) -> torch.Tensor:
    return getattr(F, f"conv{x.dim() - 2}d")(x, w, b, **kwargs)


def _transposed(x: torch.Tensor, w: torch.Tensor, b: Any, **kwargs: Any) -> torch.Tensor:
    return getattr(F, f"conv_transpose{x.dim() - 2}d")(x, w, b, **kwargs)


def _conv_out(x: torch.Tensor, w: torch.Tensor, b: Any, **kwargs: Any) -> torch.Tensor:
    """convolution.out with F.conv*d's keywords, into a fresh empty tensor (resized)."""
    dims = x.dim() - 2

    def per_dim(name: str, default: int) -> list[int]:
        value = kwargs.get(name, default)
        return list(value) if isinstance(value, (tuple, list)) else [value] * dims

    out = torch.empty(0, dtype=x.dtype, device=x.device)
    return torch.ops.aten.convolution.out(x, w, b, per_dim("stride", 1), per_dim("padding", 0),
                                          per_dim("dilation", 1), False, [0] * dims, kwargs.get("groups", 1), out=out)


def _with_grads(fn: Any) -> Any:
    def call(x: torch.Tensor, w: torch.Tensor, b: Any, **kwargs: Any) -> Any:
        leaves = [t.detach().requires_grad_() if t is not None else None for t in (x, w, b)]
        y = fn(*leaves, **kwargs)
        grads = torch.autograd.grad(y, [t for t in leaves if t is not None], ramp_like(y))
        return (y.detach(), *grads)

    return call


def output_sum(sample: Sample) -> int:
    """The longest sum behind an output or input-gradient element: channels x taps."""
    w = sample.args[1]
    taps = math.prod(w.shape[2:])
    return max(w.shape[1] * taps, w.shape[0] // sample.kwargs.get("groups", 1) * taps)


def longest_sum(sample: Sample) -> int:
    """That, or the positions behind a weight-gradient element (bounded by the input's)."""
    x = sample.args[0]
    return max(output_sum(sample), x.shape[0] * math.prod(x.shape[2:]))


register(OpCase("convolution", ("convolution",), _conv, conv_samples, DTYPES, reduction_length=output_sum))
register(OpCase("convolution_out", ("convolution.out",), _conv_out, conv_samples, DTYPES, reduction_length=output_sum))
register(OpCase("conv_transpose", ("convolution",), _transposed, transpose_samples, DTYPES,
                reduction_length=output_sum))
register(OpCase("convolution_backward", ("convolution", "convolution_backward"), _with_grads(_conv), conv_samples,
                DTYPES, reduction_length=longest_sum))
register(OpCase("conv_transpose_backward", ("convolution", "convolution_backward"), _with_grads(_transposed),
                transpose_samples, DTYPES, reduction_length=longest_sum))
