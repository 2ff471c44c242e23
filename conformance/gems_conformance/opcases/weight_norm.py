"""Cases for gems_core/ops/weight_norm.py: ``_weight_norm_interface`` and its backward,
through ``torch._weight_norm`` (what weight_norm's hook and parametrization call) over the
first and the last dim, forward and through autograd, on contiguous and transposed ``v``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample


def _norm_samples(dtype: torch.dtype, device: Any, profile: str) -> Iterator[Sample]:
    for n, shape in enumerate(samples.SHAPES[profile]):
        full = (*shape, 3)
        for dim in (0, 2):
            g_shape = [full[d] if d == dim else 1 for d in range(3)]
            g = samples.make_tensor(g_shape, dtype, device, 100 * n + dim)
            v = samples.make_tensor(full, dtype, device, 100 * n + 10 + dim)
            yield Sample(f"dim {dim}", (v, g, dim))
            yield Sample(f"dim {dim}, transposed", (v.transpose(0, 1).contiguous().transpose(0, 1), g, dim))


def _through_autograd(v: torch.Tensor, g: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    v, g = v.detach().requires_grad_(), g.detach().requires_grad_()
    w = torch._weight_norm(v, g, dim)
    return torch.autograd.grad(w, (v, g), samples.ramp_like(w))


def _length(sample: Sample) -> int:
    v, _, dim = sample.args
    return v.numel() // v.shape[dim]


register(OpCase("weight_norm", ("_weight_norm_interface",), torch._weight_norm, _norm_samples,
                (torch.float32, torch.float64), reduction_length=_length))
register(OpCase("weight_norm_autograd", ("_weight_norm_interface", "_weight_norm_interface_backward"),
                _through_autograd, _norm_samples, (torch.float32, torch.float64), reduction_length=_length))
