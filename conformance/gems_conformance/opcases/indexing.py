"""Cases for gems_core/ops/indexing.py: index_select, index.Tensor, embedding and its dense
backward.

index_select meets every layout along both dims, with int32 and int64 indices that repeat
and skip entries, an empty index and a 0-d input; index.Tensor (one index tensor) takes 2-d,
0-d, transposed and empty indices with negative entries on a leading or later dim;
embedding takes a 2-d index batch.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample

FLOATS = samples.FLOAT_DTYPES


def _index(size: int, count: int, device: torch.device | str, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, size, (count,), generator=g).to(dtype).to(device)


def index_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    for n, shape in enumerate(samples.SHAPES[profile]):
        for i, (label, x) in enumerate(samples.layouts(shape, dtype, device, seed=100 * n)):
            index_dtype = torch.int32 if i % 2 else torch.int64
            yield Sample(label, (x, 0, _index(shape[0], 6, device, index_dtype, i)))
            yield Sample(label, (x, -1, _index(shape[1], 9, device, index_dtype, i + 1)))
    x = samples.make_tensor((4, 5), dtype, device, 3)
    yield Sample("empty", (x, 1, torch.empty(0, dtype=torch.int64, device=device)))
    yield Sample("0-d", (samples.make_tensor((), dtype, device, 5), 0, torch.zeros((), dtype=torch.int64, device=device)))


register(OpCase("index_select", ("index_select",), lambda x, d, i: torch.index_select(x, d, i),
                index_samples, samples.ALL_DTYPES, compare="exact"))
register(OpCase("index_select_out", ("index_select.out",),
                lambda x, d, i: torch.index_select(x, d, i, out=torch.empty(0, dtype=x.dtype, device=x.device)),
                index_samples, (torch.float32, torch.int64), compare="exact"))


def tensor_index_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    for n, shape in enumerate(samples.SHAPES[profile]):
        for i, (label, x) in enumerate(samples.layouts(shape, dtype, device, seed=100 * n)):
            index_dtype = torch.int32 if i % 2 else torch.int64
            rows = _index(shape[0], 6, device, index_dtype, i).view(2, 3)
            yield Sample(label, (x, 0, rows - shape[0] * (rows % 2)))  # odd rows counted from the end
            yield Sample(label, (x, 1, _index(shape[1], 4, device, index_dtype, i + 1)))
    x = samples.make_tensor((3, 4, 5), dtype, device, 3)
    yield Sample("3-d", (x.transpose(0, 2), 1, _index(4, 6, device, torch.int64, 4).view(3, 2).t()))
    yield Sample("0-d index", (x, 2, torch.tensor(-2, device=device)))
    yield Sample("empty", (x, 1, torch.empty(0, 2, dtype=torch.int64, device=device)))


register(OpCase("index", ("index.Tensor",), lambda x, d, i: torch.ops.aten.index.Tensor(x, [None] * d + [i]),
                tensor_index_samples, samples.ALL_DTYPES, compare="exact"))


def embedding_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    weight = samples.make_tensor((11, 33), dtype, device, 1)
    yield Sample("contiguous", (weight, _index(11, 12, device, torch.int64, 2).view(3, 4)))
    yield Sample("int32", (weight, _index(11, 7, device, torch.int32, 3)))
    yield Sample("transposed", (samples.make_tensor((33, 11), dtype, device, 4).t(), _index(11, 5, device, torch.int64, 5)))
    yield Sample("empty", (weight, torch.empty(0, 2, dtype=torch.int64, device=device)))


register(OpCase("embedding", ("embedding",), lambda w, i: torch.nn.functional.embedding(i, w),
                embedding_samples, samples.FLOAT_DTYPES + (torch.int64,), compare="exact"))


def backward_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    for label, count, padding, scale in (("contiguous", 12, -1, False), ("padding", 20, 3, False),
                                         ("scaled", 20, 2, True), ("empty", 0, -1, False)):
        index = _index(7, count, device, torch.int64, count)
        grad = samples.make_tensor((count, 33), dtype, device, count + 1)
        yield Sample(label, (grad, index, 7, padding, scale))
    yield Sample("batched", (samples.make_tensor((2, 3, 5), dtype, device, 9),
                             _index(7, 6, device, torch.int32, 9).view(2, 3), 7, -1, True))


register(OpCase(
    "embedding_dense_backward", ("embedding_dense_backward",),
    lambda g, i, n, p, s: torch.ops.aten.embedding_dense_backward(g, i, n, p, s),
    backward_samples, FLOATS, reduction_length=lambda s: s.args[1].numel() or 1,
))
