"""Cases for gems_core/ops/copying.py: copy_ and cat.

copy_ writes into destinations of every writable layout from sources of every layout
(broadcast rows and 0-d values included), and converts between the case's dtype and float32,
int32, uint8 and bool both ways. cat joins every layout along both dims, inputs of other
sizes along the joined dim, mixed dtypes (ATen's promotion), a skipped 1-d empty input and
channels-last images.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample

_CONVERSIONS = (torch.float32, torch.int32, torch.uint8, torch.bool)


def _copied(template: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """A fresh destination with ``template``'s dtype, shape and strides, written by copy_."""
    out = torch.empty_strided(template.shape, template.stride(), dtype=template.dtype, device=template.device)
    return out.copy_(src)


def copy_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    for n, shape in enumerate(samples.SHAPES[profile]):
        src = samples.make_tensor(shape, dtype, device, 100 * n + 50)
        for label, x in samples.layouts(shape, dtype, device, seed=100 * n):
            if label != "expanded":  # a destination whose elements share memory: ATen raises
                yield Sample(f"into {label}", (x, src))
            yield Sample(label, (torch.empty(shape, dtype=dtype, device=device), x))
        yield Sample("broadcast", (src, samples.make_tensor(shape[-1:], dtype, device, 100 * n + 51)))
        for i, other in enumerate(_CONVERSIONS):
            if other != dtype:
                converted = samples.make_tensor(shape, other, device, 100 * n + 52 + i)
                yield Sample("converted", (torch.empty(shape, dtype=other, device=device), src))
                yield Sample("converted", (src, converted))
    yield Sample("empty", (samples.make_tensor((0, 3), dtype, device, 1), samples.make_tensor((3,), dtype, device, 2)))
    yield Sample("0-d", (samples.make_tensor((), dtype, device, 3), samples.make_tensor((), dtype, device, 4)))
    yield Sample("0-d", (samples.make_tensor((3, 4), dtype, device, 5), samples.make_tensor((), dtype, device, 6)))


register(OpCase("copy_", ("copy_",), _copied, copy_samples, samples.ALL_DTYPES, compare="exact"))


def cat_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    for n, shape in enumerate(samples.SHAPES[profile]):
        other = samples.make_tensor(shape, dtype, device, 100 * n + 50)
        for label, x in samples.layouts(shape, dtype, device, seed=100 * n):
            yield Sample(label, ([x, other], 0))
            yield Sample(label, ([other, x], -1))
        narrow = samples.make_tensor((shape[0], 3), dtype, device, 100 * n + 51)
        yield Sample("uneven", ([other, narrow, other[:, :1]], 1))
        yield Sample("promoted", ([other, samples.make_tensor(shape, torch.int32, device, 100 * n + 52)], 0))
    x = samples.make_tensor((2, 3), dtype, device, 1)
    yield Sample("skipped", ([torch.empty(0, dtype=dtype, device=device), x, x], 1))
    yield Sample("empty", ([samples.make_tensor((0, 3), dtype, device, 2), x], 0))
    image = samples.make_tensor((2, 3, 4, 5), dtype, device, 3).to(memory_format=torch.channels_last)
    yield Sample("channels last", ([image, image[:, :2]], 1))


register(OpCase("cat", ("cat",), lambda tensors, dim: torch.cat(tensors, dim), cat_samples,
                samples.ALL_DTYPES, compare="exact"))
register(OpCase("cat_out", ("cat.out",),
                lambda tensors, dim: torch.cat(tensors, dim, out=torch.empty(0, dtype=tensors[0].dtype,
                                                                             device=tensors[0].device)),
                cat_samples, (torch.float32, torch.int64), compare="exact"))
