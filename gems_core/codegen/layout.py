"""Host-side shape and stride arithmetic for elementwise kernels.

Everything here works on plain tuples: no tensor is copied. Operands are broadcast by giving
their expanded dims stride 0, dims are ordered by the output's strides (so consecutive
program lanes write consecutive memory), and dims that are contiguous for every operand are
merged, so a contiguous op of any rank runs as a rank-1 loop.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

Shape = tuple[int, ...]
Strides = tuple[int, ...]


def broadcast_shapes(shapes: Sequence[Shape]) -> Shape:
    """ATen's broadcasting; raises ATen's RuntimeError (and message) on a mismatch."""
    first = shapes[0]
    if all(s == first for s in shapes):
        return tuple(first)
    rank = max(len(s) for s in shapes)
    result = [1] * rank
    for s in shapes:
        for i, size in enumerate(s, start=rank - len(s)):
            if size == result[i] or size == 1:
                continue
            if result[i] != 1:
                raise RuntimeError(
                    f"The size of tensor a ({result[i]}) must match the size of tensor b ({size}) "
                    f"at non-singleton dimension {i}"
                )
            result[i] = size
    return tuple(result)


def broadcast_strides(shape: Shape, strides: Strides, target: Shape) -> Strides:
    """Strides that view a tensor of ``shape`` as ``target`` (stride 0 where expanded)."""
    pad = len(target) - len(shape)
    out = [0] * pad
    for size, stride, full in zip(shape, strides, target[pad:]):
        out.append(0 if size == 1 and full != 1 else stride)
    return tuple(out)


def iteration_layout(shape: Shape, strides: Sequence[Strides]) -> tuple[Shape, list[Strides]]:
    """Reorder and merge dims of ``shape`` for iteration; ``strides[0]`` is the output's.

    Returns the merged shape (outermost first, at least rank 1) and each operand's strides.
    """
    rank = len(shape)
    out_strides = strides[0]
    # Innermost (fastest) dim last: order by the output's strides, ties by position.
    order = sorted(range(rank), key=lambda d: (-abs(out_strides[d]), d))
    dims = [d for d in order if shape[d] != 1]
    if not dims:
        return (1,), [(1,) for _ in strides]
    merged_shape = [shape[dims[0]]]
    merged = [[s[dims[0]]] for s in strides]
    for d in dims[1:]:
        size = shape[d]
        if all(m[-1] == s[d] * size for m, s in zip(merged, strides)):
            merged_shape[-1] *= size
            for m, s in zip(merged, strides):
                m[-1] = s[d]
        else:
            merged_shape.append(size)
            for m, s in zip(merged, strides):
                m.append(s[d])
    return tuple(merged_shape), [tuple(m) for m in merged]


def max_offset(shape: Shape, strides: Strides) -> int:
    """The largest element offset reachable (for choosing 32- or 64-bit indexing)."""
    return sum((size - 1) * abs(stride) for size, stride in zip(shape, strides))


def allocate_like(
    shape: Shape, dtype: torch.dtype, device: torch.device, operands: Sequence[torch.Tensor]
) -> torch.Tensor:
    """An output laid out like the first operand of the full shape (``empty_like`` keeps a
    dense operand's strides and a strided one's dim order, as ATen's elementwise results
    do), else contiguous."""
    for t in operands:
        if tuple(t.shape) == shape:
            return torch.empty_like(t, dtype=dtype)
    return torch.empty(shape, dtype=dtype, device=device)
