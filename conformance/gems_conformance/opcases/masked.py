"""Cases for gems_core/ops/masked.py: masked_fill (Scalar/Tensor value, in place and not),
masked_select and nonzero.

Every layout of the input meets a full mask and a broadcast row mask; masked_select and
nonzero compact in row-major order, so a transposed input checks that order.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample


def mask_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    for n, shape in enumerate(samples.SHAPES[profile]):
        for i, (label, x) in enumerate(samples.layouts(shape, dtype, device, seed=100 * n)):
            if label == "expanded":
                continue
            yield Sample(label, (x, samples.make_tensor(shape, torch.bool, device, 100 * n + i)))
        yield Sample("broadcast", (samples.make_tensor(shape, dtype, device, 5),
                                   samples.make_tensor((shape[-1],), torch.bool, device, 6)))
    yield Sample("empty", (samples.make_tensor((0, 3), dtype, device, 7),
                           samples.make_tensor((0, 3), torch.bool, device, 8)))
    yield Sample("0-d", (samples.make_tensor((), dtype, device, 11), torch.ones((), dtype=torch.bool, device=device)))


def _value(x: torch.Tensor) -> object:
    return True if x.dtype == torch.bool else (-1.5 if x.is_floating_point() else 7)


register(OpCase("masked_fill", ("masked_fill.Scalar",), lambda x, m: x.masked_fill(m, _value(x)),
                mask_samples, samples.ALL_DTYPES))
register(OpCase("masked_fill_", ("masked_fill_.Scalar",), lambda x, m: x.clone().masked_fill_(m, _value(x)),
                mask_samples, samples.ALL_DTYPES))
register(OpCase("masked_fill_tensor", ("masked_fill.Tensor", "masked_fill_.Tensor"),
                lambda x, m: (x.masked_fill(m, torch.tensor(3)), x.clone().masked_fill_(m, torch.tensor(2))),
                mask_samples, samples.FLOAT_DTYPES + (torch.int32, torch.uint8)))
register(OpCase("masked_select", ("masked_select",), lambda x, m: torch.masked_select(x, m),
                mask_samples, samples.ALL_DTYPES, compare="exact"))
register(OpCase("masked_select_out", ("masked_select.out",),
                lambda x, m: torch.masked_select(x, m, out=torch.empty(0, dtype=x.dtype, device=x.device)),
                mask_samples, (torch.float32, torch.int64), compare="exact"))


def nonzero_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    for sample in mask_samples(dtype, device, profile):
        x = sample.args[0]
        # about half the elements zero
        yield Sample(sample.label, (torch.where(sample.args[1].expand(x.shape), x, torch.zeros_like(x)),))
    yield Sample("3-d", (samples.make_tensor((3, 4, 5), dtype, device, 13, low=0, high=2),))
    yield Sample("0-d", (torch.zeros((), dtype=dtype, device=device),))


register(OpCase("nonzero", ("nonzero",), lambda x: torch.nonzero(x), nonzero_samples,
                samples.ALL_DTYPES, compare="exact"))
register(OpCase("nonzero_out", ("nonzero.out",),
                lambda x: torch.nonzero(x, out=torch.empty(0, dtype=torch.int64, device=x.device)),
                nonzero_samples, (torch.float32, torch.bool), compare="exact"))
