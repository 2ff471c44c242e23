"""Cases for gems_core/ops/pixel_shuffle.py: pixel_shuffle and pixel_unshuffle (and out=).

Every layout of a 4-d input (contiguous, transposed, sliced with a step, expanded,
channels_last), a 5-d one (an extra batch dim) and an empty batch, by factors 2 and 3.
Both only move elements: compared exactly.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample


def _layouts(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str,
             seed: int) -> Iterator[tuple[str, torch.Tensor]]:
    n, c, h, w = shape
    yield "contiguous", samples.make_tensor(shape, dtype, device, seed)
    yield "transposed", samples.make_tensor((n, c, w, h), dtype, device, seed + 1).transpose(2, 3)
    yield "strided", samples.make_tensor((n, c, h, 2 * w), dtype, device, seed + 2)[..., ::2]
    yield "expanded", samples.make_tensor((1, c, h, w), dtype, device, seed + 3).expand(shape)
    yield "channels_last", samples.make_tensor(shape, dtype, device, seed + 4).contiguous(
        memory_format=torch.channels_last)


def _shuffle_samples(up: bool):
    def generate(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
        for factor in (2, 3):
            shape = (2, 2 * factor * factor, 3, 5) if up else (2, 3, 2 * factor, 3 * factor)
            for label, x in _layouts(shape, dtype, device, factor):
                yield Sample(label, (x, factor))
            yield Sample("5-d", (samples.make_tensor((2, *shape), dtype, device, 8), factor))
        empty = (0, 8, 2, 2) if up else (0, 2, 4, 4)
        yield Sample("empty", (samples.make_tensor(empty, dtype, device, 9), 2))

    return generate


def _out(op, up: bool):
    def call(x: torch.Tensor, factor: int) -> torch.Tensor:
        *lead, c, h, w = x.shape
        shape = [*lead, c // factor**2, h * factor, w * factor] if up else [*lead, c * factor**2, h // factor,
                                                                           w // factor]
        return op(x, factor, out=torch.empty(shape, dtype=x.dtype, device=x.device))

    return call


register(OpCase("pixel_shuffle", ("pixel_shuffle",), torch.pixel_shuffle, _shuffle_samples(True), samples.ALL_DTYPES,
                compare="exact"))
register(OpCase("pixel_unshuffle", ("pixel_unshuffle",), torch.pixel_unshuffle, _shuffle_samples(False),
                samples.ALL_DTYPES, compare="exact"))
register(OpCase("pixel_shuffle_out", ("pixel_shuffle.out",), _out(torch.ops.aten.pixel_shuffle.out, True),
                _shuffle_samples(True), (torch.float32, torch.int64), compare="exact"))
register(OpCase("pixel_unshuffle_out", ("pixel_unshuffle.out",), _out(torch.ops.aten.pixel_unshuffle.out, False),
                _shuffle_samples(False), (torch.float32, torch.int64), compare="exact"))
