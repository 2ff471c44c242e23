"""Cases for gems_core/ops/masked_scatter.py: masked_scatter_, masked_scatter and its out=.

``self`` of every layout, a random mask of ``self``'s shape or a broadcast row, a source
longer than the count of the mask (as a matrix: read row-major), and an all-false mask;
the functional form also broadcasts ``self`` against the mask. Compared exactly.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample


def _mask(shape: tuple[int, ...], device: torch.device | str, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g) > 0.5).to(device)


def scatter_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    for n, shape in enumerate(samples.SHAPES[profile]):
        numel = shape[0] * shape[1]
        source = samples.make_tensor((2, numel), dtype, device, 100 * n + 50)
        for label, x in samples.layouts(shape, dtype, device, seed=100 * n):
            if label != "expanded":  # written in place: ATen refuses a self whose elements share memory
                yield Sample(label, (x, _mask(shape, device, 100 * n + 1), source))
        x = samples.make_tensor(shape, dtype, device, 100 * n + 2)
        yield Sample("broadcast mask", (x, _mask(shape[-1:], device, 100 * n + 3), source))
        yield Sample("all false", (x, torch.zeros(shape, dtype=torch.bool, device=device), source[:, :3]))
    x = samples.make_tensor((0, 3), dtype, device, 1)
    yield Sample("empty", (x, _mask((3,), device, 2), samples.make_tensor((2,), dtype, device, 3)))


def _broadcast_self_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    yield from scatter_samples(dtype, device, profile)
    row = samples.make_tensor((7,), dtype, device, 4)
    yield Sample("broadcast self", (row, _mask((5, 7), device, 5), samples.make_tensor((40,), dtype, device, 6)))


def _scatter_out(x: torch.Tensor, mask: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    shape = torch.broadcast_shapes(x.shape, mask.shape)
    return torch.ops.aten.masked_scatter.out(x, mask, source, out=torch.empty(shape, dtype=x.dtype, device=x.device))


register(OpCase("masked_scatter_", ("masked_scatter_",), lambda x, m, s: x.clone().masked_scatter_(m, s),
                scatter_samples, samples.ALL_DTYPES, compare="exact"))
register(OpCase("masked_scatter", ("masked_scatter",), torch.masked_scatter, _broadcast_self_samples,
                (torch.float32, torch.bfloat16, torch.int64, torch.bool), compare="exact"))
register(OpCase("masked_scatter_out", ("masked_scatter.out",), _scatter_out, _broadcast_self_samples,
                (torch.float32, torch.int64), compare="exact"))
