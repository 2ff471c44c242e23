"""Cases for gems_core/ops/resample_aa.py: antialiased bilinear and bicubic upsampling
(F.interpolate(..., antialias=True)), forward, backward through autograd, and the out= and
grad_input= overloads called directly.

The inputs and sizes are the other upsample cases' (every layout, channels_last, twice the
input, a size with no integer ratio, a downscale, a non-integer scale passed on, an empty
batch), plus a downscale by more than 3, where each output averages a window of several
inputs. float32 and float64: ATen's CPU kernels serve no other floating dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample
from .resample import _grad_input_call, _length, _out_call, _resize_samples, _through_autograd

DTYPES = (torch.float32, torch.float64)


def _aa_samples(backward: bool) -> Callable[[torch.dtype, torch.device | str, str], Iterator[Sample]]:
    """The resize samples of :mod:`.resample` (``backward``: its cases of a backward) and
    strong downscales, which widen the antialiasing filter."""

    def generate(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
        yield from _resize_samples(2, backward=backward)(dtype, device, profile)
        wide = samples.make_tensor((2, 3, 23, 31), dtype, device, 5)
        yield Sample("strong downscale", (wide, (6, 7), None))
        yield Sample("strong downscale", (wide.contiguous(memory_format=torch.channels_last), None, 0.3))

    return generate


aa_samples, aa_backward_samples = _aa_samples(False), _aa_samples(True)


def _interpolate(mode: str, align: bool) -> Callable[..., torch.Tensor]:
    return lambda x, size, scale: F.interpolate(x, size=size, scale_factor=scale, mode=mode, align_corners=align,
                                                antialias=True)


for _mode, _op in (("bilinear", "_upsample_bilinear2d_aa"), ("bicubic", "_upsample_bicubic2d_aa")):
    _forward_length, _backward_length = _length(2, True, 0), _length(2, True, 8)
    for _align in (False, True):
        _name = f"upsample_{_mode}_aa{'_align_corners' if _align else ''}"
        register(OpCase(_name, (_op,), _interpolate(_mode, _align), aa_samples, DTYPES,
                        reduction_length=_forward_length))
        register(OpCase(f"{_name}_autograd", (_op, f"{_op}_backward"), _through_autograd(_interpolate(_mode, _align)),
                        aa_backward_samples, DTYPES, reduction_length=_backward_length))
    register(OpCase(f"upsample_{_mode}_aa_out", (f"{_op}.out",), _out_call(_op, False), aa_samples, (torch.float32,),
                    reduction_length=_forward_length))
    register(OpCase(f"upsample_{_mode}_aa_backward_grad_input", (f"{_op}_backward.grad_input",),
                    _grad_input_call(_op, False), aa_backward_samples, (torch.float32,),
                    reduction_length=_backward_length))
