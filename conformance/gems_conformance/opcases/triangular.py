"""Cases for gems_core/ops/triangular.py.

Matrices in every layout and odd sizes, a batch whose dims merge into one stride (permuted)
and one whose dims do not (sliced), empty matrices and batches, and special values; the
diagonal is varied above, below and past the matrix.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample, make_tensor

FLOATS = samples.FLOAT_DTYPES


def _matrices(dt: torch.dtype, dev: torch.device, p: str) -> Iterator[Sample]:
    for n, shape in enumerate(samples.SHAPES[p]):
        for label, x in samples.layouts(shape, dt, dev, seed=100 * n):
            yield Sample(label, (x,))
    yield Sample("batch_permuted", (make_tensor((2, 3, 5, 7), dt, dev, 1).permute(1, 0, 2, 3),))
    yield Sample("batch_sliced", (make_tensor((4, 3, 6, 5), dt, dev, 2)[::2, 1:].transpose(-1, -2),))
    yield Sample("empty", (make_tensor((0, 3), dt, dev, 3),))
    yield Sample("empty_batch", (make_tensor((0, 3, 3), dt, dev, 4),))
    if dt.is_floating_point:
        yield Sample("special", (samples.special_values(dt, dev).view(2, 5),))


def _contiguous_out(x: torch.Tensor) -> torch.Tensor:
    # not empty_like: ATen's own tril.out (torch 2.13, CPU) crashes on an out whose batch
    # dims are permuted, and the suite runs ATen on every sample
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


register(OpCase("triu", ("triu",), lambda x: torch.triu(x), _matrices, FLOATS + (torch.int32, torch.bool),
                compare="exact"))
register(OpCase("triu_diagonal", ("triu",), lambda x: (torch.triu(x, 2), torch.triu(x, -1), torch.triu(x, 50)),
                _matrices, (torch.float32, torch.int64), compare="exact"))
register(OpCase("tril", ("tril",), lambda x: (torch.tril(x), torch.tril(x, -2), torch.tril(x, -50)), _matrices,
                (torch.float32, torch.float16, torch.bool), compare="exact"))
register(OpCase("triu_", ("triu_",), lambda x: x.clone().triu_(1), _matrices, (torch.float32, torch.int8),
                compare="exact"))
register(OpCase("tril_out", ("tril.out",), lambda x: torch.tril(x, 1, out=_contiguous_out(x)), _matrices,
                (torch.bfloat16,), compare="exact"))
register(OpCase("tril_", ("tril_",), lambda x: x.clone().tril_(-1), _matrices, (torch.float32, torch.int8),
                compare="exact"))
register(OpCase("triu_out", ("triu.out",), lambda x: torch.triu(x, 1, out=_contiguous_out(x)), _matrices,
                (torch.float32,), compare="exact"))
