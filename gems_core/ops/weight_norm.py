"""weight_norm's kernels: ``_weight_norm_interface`` (``w = v * g / ||v||``, the norm over
every dim but the first or the last) and its backward, as ``torch.nn.utils.weight_norm`` and
its parametrization reach them.

The norms (``g``'s shape, float32 for float16/bfloat16, as ATen keeps them) are
vector_norm.py's kernel over the other dims; ``w`` is one generated pointwise op. The
backward sums ``grad_w * v`` over the other dims (the pointwise product, then reduction.py's
sum, in float32 or float64) and writes ``grad_g = s / n`` and
``grad_v = (g / n) (grad_w - v s / n^2)``. Another ``dim`` (ATen's composite computes it
itself), integer or complex dtypes and mismatched shapes are handed to ATen.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl  # noqa: F401 - the interpreter wants it among a kernel's globals

from ..codegen.pointwise import pointwise
from ..registry import aten_op
from .kernel_gates import leaves_to_aten
from .reduction import sum_dim
from .vector_norm import vector_norm

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@pointwise(kind="DEFAULT")
@triton.jit
def _normalized(v, g, norm):
    return v * (g / norm)


@pointwise(kind="DEFAULT")
@triton.jit
def _product(a, b):
    return a * b


@pointwise(kind="DEFAULT")
@triton.jit
def _grad_v(grad_w, v, g, norm, dot):
    # dot = sum(grad_w * v) over the slice of v that ``norm`` normalizes
    return (g / norm) * (grad_w - v * (dot / (norm * norm)))


@pointwise(kind="DEFAULT")
@triton.jit
def _grad_g(dot, norm):
    return dot / norm


def _other_dims(v: torch.Tensor, g: torch.Tensor, dim: int) -> list[int] | None:
    """The dims the norm runs over; None where gems leaves the call to ATen."""
    if v.dim() == 0 or v.dtype not in _FLOATS or g.dtype != v.dtype or g.device != v.device:
        return None
    dim = dim % v.dim() if -v.dim() <= dim < v.dim() else -1
    if dim not in (0, v.dim() - 1) or g.numel() != v.shape[dim]:
        return None  # (ATen asserts: fused kernels take the first or last dim only)
    if leaves_to_aten("linalg_vector_norm", v.dtype) or leaves_to_aten("sum", v.dtype):
        return None
    return [d for d in range(v.dim()) if d != dim]


def _accumulation(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


@aten_op("_weight_norm_interface")
def weight_norm_interface(v: torch.Tensor, g: torch.Tensor, dim: int = 0) -> Any:
    """(``v * g / ||v||``, the norms), the norm over every dim of ``v`` but ``dim``."""
    dims = _other_dims(v, g, dim)
    if dims is None:
        return NotImplemented
    acc = _accumulation(v.dtype)
    norms = vector_norm(v, 2, dims, True, dtype=acc)
    weight = _normalized(v, g.view(norms.shape), norms, dtype=v.dtype, compute_dtype=acc)
    return weight, norms


@aten_op("_weight_norm_interface_backward")
def weight_norm_interface_backward(grad_w: torch.Tensor, saved_v: torch.Tensor, saved_g: torch.Tensor,
                                   saved_norms: torch.Tensor, dim: int) -> Any:
    """(grad_v, grad_g) of :func:`weight_norm_interface`."""
    dims = _other_dims(saved_v, saved_g, dim)
    acc = _accumulation(saved_v.dtype)
    if (dims is None or grad_w.shape != saved_v.shape or grad_w.dtype != saved_v.dtype
            or saved_norms.numel() != saved_g.numel()):
        return NotImplemented
    kept = [1 if d in dims else saved_v.shape[d] for d in range(saved_v.dim())]  # the norms' shape
    norms, g = saved_norms.view(kept), saved_g.view(kept)
    dot = sum_dim(_product(grad_w, saved_v, dtype=acc, compute_dtype=acc), dims, True, dtype=acc)
    grad_v = _grad_v(grad_w, saved_v, g, norms, dot, dtype=saved_v.dtype, compute_dtype=acc)
    grad_g = _grad_g(dot, norms, dtype=saved_g.dtype, compute_dtype=acc)
    return grad_v, grad_g.view(saved_g.shape)
