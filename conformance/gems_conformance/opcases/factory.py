"""Cases for gems_core/ops/factory.py: fill_, zero_ and arange, reached through torch.full,
ones, zeros, the _like forms and every arange form.

Each factory call takes its dtype and device from a sample tensor; the _like forms and
fill_ meet every layout, so strided and transposed outputs are written through strides.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample

NO_BOOL = samples.FLOAT_DTYPES + samples.INT_DTYPES
#: the composites that only reach fill_/zero_ (served and checked in every dtype by "full",
#: "zeros" and "fill_strided") are checked in a few
SOME = (torch.float32, torch.int64, torch.bool)


def layout_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    for n, shape in enumerate(samples.SHAPES[profile]):
        for label, x in samples.layouts(shape, dtype, device, seed=100 * n):
            if label != "expanded":
                yield Sample(label, (x,))
    yield Sample("empty", (samples.make_tensor((0, 3), dtype, device, 7),))
    yield Sample("0-d", (samples.make_tensor((), dtype, device, 11),))


def _full(x: torch.Tensor, value: object) -> torch.Tensor:
    return torch.full(x.shape, value, dtype=x.dtype, device=x.device)


register(OpCase("ones", ("fill_.Scalar",), lambda x: torch.ones(x.shape, dtype=x.dtype, device=x.device),
                layout_samples, SOME, compare="exact"))
register(OpCase("zeros", ("zero_",), lambda x: torch.zeros(x.shape, dtype=x.dtype, device=x.device),
                layout_samples, samples.ALL_DTYPES, compare="exact"))
register(OpCase("full", ("fill_.Scalar",), lambda x: _full(x, 3),
                layout_samples, samples.ALL_DTYPES, compare="exact"))
register(OpCase("full_float", ("fill_.Scalar",), lambda x: _full(x, -2.7),
                layout_samples, samples.FLOAT_DTYPES + (torch.float64,)))
register(OpCase("ones_like", ("fill_.Scalar",), lambda x: torch.ones_like(x),
                layout_samples, SOME, compare="exact"))
register(OpCase("zeros_like", ("zero_",), lambda x: torch.zeros_like(x),
                layout_samples, SOME, compare="exact"))
register(OpCase("full_like", ("fill_.Scalar",), lambda x: torch.full_like(x, 5),
                layout_samples, SOME[:2], compare="exact"))
def _fill_both(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    every_other = x.clone()[..., ::2] if x.dim() else x.clone()
    return every_other.fill_(1), x.clone().fill_(torch.tensor(2))


register(OpCase("fill_strided", ("fill_.Scalar", "fill_.Tensor"), _fill_both,
                layout_samples, samples.ALL_DTYPES, compare="exact"))
register(OpCase("zero_", ("zero_",), lambda x: x.clone().t().zero_() if x.dim() == 2 else x.clone().zero_(),
                layout_samples, SOME, compare="exact"))


def arange_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    x = samples.make_tensor((), dtype, device, 3)
    yield Sample("end", (x,), {"args": (17,)})
    yield Sample("start-end", (x,), {"args": (-5, 12)})
    yield Sample("step", (x,), {"args": (1, 40, 3)})
    yield Sample("negative step", (x,), {"args": (20, -7, -4)})
    yield Sample("empty", (x,), {"args": (3, 3)})
    if dtype.is_floating_point:
        yield Sample("float step", (x,), {"args": (-1.5, 2.25, 0.25)})


def _arange(x: torch.Tensor, args: tuple) -> torch.Tensor:
    return torch.arange(*args, dtype=x.dtype, device=x.device)


#: torch.arange without out= reaches gems' functional overloads (the end-only one too), which fill through arange.start_out's kernel
_ARANGE = ("arange", "arange.start", "arange.start_step", "arange.start_out")
register(OpCase("arange", _ARANGE, _arange, arange_samples, NO_BOOL))
register(OpCase(
    "arange_inferred", _ARANGE,
    # no dtype: integers give int64, any float the default dtype
    lambda x, args: torch.arange(*args, device=x.device), arange_samples, (torch.float32, torch.int64),
    reference=lambda x, args: torch.arange(*args),
))
register(OpCase(
    "arange_out", ("arange.start_out",),
    lambda x, args: torch.arange(*args, out=torch.empty(0, dtype=x.dtype, device=x.device)),
    arange_samples, (torch.float32, torch.int32, torch.float16),
))
