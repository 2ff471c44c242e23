"""Cases for gems_core/ops/group_norm.py: group_norm forward (output, mean, rstd) and
backward through autograd.

A 4-d input in the contiguous and the channels-last layout, a 3-d one without weights, a
2-d one (one position per channel), a group longer than one tile, and an empty batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample, ramp_like

FLOATS = samples.FLOAT_DTYPES


def group_norm_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    """(input, weight, bias) and a ``groups`` keyword."""

    def params(c: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        return (samples.make_tensor((c,), dtype, device, seed, low=0.5, high=2),
                samples.make_tensor((c,), dtype, device, seed + 1))

    yield Sample("contiguous", (samples.make_tensor((2, 6, 3, 5), dtype, device, 91), *params(6, 92)), {"groups": 3})
    channels_last = samples.make_tensor((2, 3, 5, 6), dtype, device, 93).permute(0, 3, 1, 2)
    yield Sample("channels-last", (channels_last, *params(6, 94)), {"groups": 2})
    yield Sample("no weight", (samples.make_tensor((3, 4, 17), dtype, device, 95), None, None), {"groups": 2})
    yield Sample("2-d", (samples.make_tensor((5, 8), dtype, device, 96), *params(8, 97)), {"groups": 2})
    yield Sample("long", (samples.make_tensor((1, 4, 1500), dtype, device, 98), *params(4, 99)), {"groups": 1})
    yield Sample("empty", (samples.make_tensor((0, 4, 3), dtype, device, 100), *params(4, 101)), {"groups": 2})


def _native(x: torch.Tensor, w: Any, b: Any, groups: int) -> Any:
    # dense, as ATen's group_norm passes it on (its CUDA kernel refuses any other layout,
    # channels-last included); the channels-last sample still reaches gems through the
    # gradient case, which goes through F.group_norm
    x = x.contiguous()
    n, c = x.shape[:2]
    return torch.native_group_norm(x, w, b, n, c, x[0, 0].numel() if n else x.shape[2:].numel(), groups, 1e-5)


def _with_grads(x: torch.Tensor, w: Any, b: Any, groups: int) -> Any:
    leaves = [t.detach().requires_grad_() if t is not None else None for t in (x, w, b)]
    y = F.group_norm(leaves[0], groups, leaves[1], leaves[2])
    weights = ramp_like(y)
    grads = torch.autograd.grad(y, [t for t in leaves if t is not None], weights)
    return (y.detach(), *grads)


def row_length(sample: Sample) -> int:
    x = sample.args[0]
    return max(x.numel() // max(x.shape[0] * sample.kwargs["groups"], 1), x.shape[0] * x[0, 0].numel() if len(x) else 1)


register(OpCase("group_norm", ("native_group_norm",), _native, group_norm_samples, FLOATS,
                reduction_length=row_length))
register(OpCase("group_norm_backward", ("native_group_norm", "native_group_norm_backward"), _with_grads,
                group_norm_samples, FLOATS, reduction_length=row_length))
