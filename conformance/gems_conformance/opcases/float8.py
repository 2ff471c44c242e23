"""Cases for gems_core/ops/float8.py: float8 conversions through copy_, and _scaled_mm.

copy_float8 writes float8 destinations from float32, float16, bfloat16, float64 and int32
sources of every layout (values past the format's range, ties, subnormals, infinities and
NaN included) and reads float8 sources into those dtypes, uint8 and the other float8
format; the reference is ATen's own cast of the exact float64 values. _scaled_mm multiplies
float8 matrices (row-major and transposed, tensor-wise and row-wise scales, a bias) into
float32, bfloat16 and float16, against the float64 product.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample

FLOAT8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
_WIDE = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32)

#: past e4m3fn's 448 and e5m2's 57344, their rounding boundaries, ties, subnormals, specials
_SPECIALS = (448.0, 464.0, 480.0, 1e4, 57344.0, 61439.0, 61440.0, 1e6, 1.0625, 1.1875, -2.0**-10,
             3 * 2.0**-11, 2.0**-17, 3 * 2.0**-18, -0.0, float("inf"), float("-inf"), float("nan"))


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _converted(src: torch.Tensor, dtype: torch.dtype, shape: tuple[int, ...] | None = None) -> torch.Tensor:
    """``src`` written by copy_ into a fresh ``dtype`` tensor (of ``shape``: broadcast)."""
    if shape is None:
        return torch.empty_like(src, dtype=dtype).copy_(src)
    return torch.empty(shape, dtype=dtype, device=src.device).copy_(src)


def convert_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    for n, shape in enumerate(samples.SHAPES[profile]):
        for i, wide in enumerate(_WIDE):
            for label, x in samples.layouts(shape, wide, device, seed=100 * n + 10 * i, low=-600, high=600):
                yield Sample(f"from {_name(wide)} {label}", (x, dtype))
            yield Sample("broadcast", (samples.make_tensor(shape[-1:], wide, device, 100 * n + 9), dtype, shape))
        for i, other in enumerate((*_WIDE, torch.uint8, *FLOAT8_DTYPES)):
            for label, x in samples.layouts(shape, dtype, device, seed=100 * n + 50 + i, low=-300, high=300):
                yield Sample(f"to {_name(other)} {label}", (x, other))
    specials = torch.tensor(_SPECIALS, device=device)
    yield Sample("specials", (torch.cat([specials, -specials]), dtype))
    yield Sample("empty", (samples.make_tensor((0, 3), torch.float32, device, 1), dtype))
    yield Sample("0-d", (samples.make_tensor((), torch.float32, device, 2), dtype))


register(OpCase("copy_float8", ("copy_",), _converted, convert_samples, FLOAT8_DTYPES, compare="exact",
                reference=lambda src, dtype, shape=None: _converted(src, dtype, shape)))


def _scaled(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
            bias: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor:
    return torch._scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype)


def _scaled_reference(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                      bias: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor:
    product = (a @ b) * scale_a * scale_b
    return product if bias is None else product + bias


def scaled_mm_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    # on an accelerator ATen's product (cuBLASLt, hipBLASLt) takes only a column-major b and
    # K and N divisible by 16: the samples there are ones it accepts, so that its result is
    # the reference; the CPU samples have odd sizes and a row-major b too
    accelerator = torch.device(device).type != "cpu"
    if accelerator:
        sizes = [(16, 32, 16), (40, 64, 48)] if profile == "quick" else [(64, 128, 96), (257, 512, 128)]
    else:
        sizes = [(5, 19, 7), (33, 64, 17)] if profile == "quick" else [(64, 128, 96), (257, 512, 130)]
    for n, (m, k, cols) in enumerate(sizes):
        a = samples.make_tensor((m, k), dtype, device, 100 * n, low=-8, high=8)
        b_t = samples.make_tensor((cols, k), dtype, device, 100 * n + 2, low=-8, high=8).t()
        b = b_t if accelerator else samples.make_tensor((k, cols), dtype, device, 100 * n + 1, low=-8, high=8)
        tensorwise = (samples.make_tensor((), torch.float32, device, 100 * n + 3, low=0.5, high=2),
                      samples.make_tensor((), torch.float32, device, 100 * n + 4, low=0.5, high=2))
        rowwise = (samples.make_tensor((m, 1), torch.float32, device, 100 * n + 5, low=0.5, high=2),
                   samples.make_tensor((1, cols), torch.float32, device, 100 * n + 6, low=0.5, high=2))
        for out_dtype in (torch.float32, torch.bfloat16, torch.float16):
            bias = samples.make_tensor((cols,), out_dtype, device, 100 * n + 7)
            yield Sample(f"tensor-wise {_name(out_dtype)}", (a, b, *tensorwise, None, out_dtype))
            yield Sample(f"column-major b, bias {_name(out_dtype)}", (a, b_t, *tensorwise, bias, out_dtype))
            yield Sample(f"row-wise {_name(out_dtype)}", (a, b_t, *rowwise, bias, out_dtype))
    other = FLOAT8_DTYPES[1] if dtype == FLOAT8_DTYPES[0] else FLOAT8_DTYPES[0]
    a = samples.make_tensor((6, 16), dtype, device, 1)
    b = (samples.make_tensor((16, 16), other, device, 2).t() if accelerator
         else samples.make_tensor((16, 5), other, device, 2))
    one = torch.ones((), device=device)
    yield Sample("mixed formats", (a, b, one, one, None, torch.float32))
    yield Sample("empty", (a[:0], b, one, one, None, torch.float32))


register(OpCase("_scaled_mm", ("_scaled_mm",), _scaled, scaled_mm_samples, FLOAT8_DTYPES,
                reduction_length=lambda sample: sample.args[0].shape[1], reference=_scaled_reference))


def _scaled_out(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                bias: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor:
    out = torch.empty((a.shape[0], b.shape[1]), dtype=out_dtype, device=a.device)
    return torch._scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype, out=out)


register(OpCase("_scaled_mm_out", ("_scaled_mm.out",), _scaled_out, scaled_mm_samples, FLOAT8_DTYPES,
                reduction_length=lambda sample: sample.args[0].shape[1], reference=_scaled_reference))
