"""Vector products on gems' matrix kernels: dot and vdot (real), addmv and addr, with their
out= forms.

Each is a matrix product of views, served by mm.py's kernels: ``dot(a, b)`` is the
(1, K) x (K, 1) product, ``addmv`` the (M, K) x (K, 1) one with ``self`` as a broadcast
(M, 1) bias, ``addr`` the rank-one (M, 1) x (1, N) one with ``self`` broadcast to (M, N).
What those kernels decline (integer, bool and complex dtypes, mixed dtypes), arguments
ATen rejects (shapes that do not match) are handed to ATen, as are the dtypes the backend
leaves mm's (addmm's) kernels out of. addmv of an empty matrix is ``beta * self`` by the
pointwise kernels, in ``self``'s shape as ATen gives it.
"""

from __future__ import annotations

from typing import Any

import torch

from ..registry import aten_op
from .arithmetic import mul
from .factory import zeros
from .kernel_gates import leaves_to_aten
from .mm import addmm, addmm_out, mm, mm_out
from .reduction import write_out


def _vectors(self: torch.Tensor, other: torch.Tensor) -> bool:
    """Real floating 1-d tensors of one size, dtype and device (ATen raises otherwise)."""
    return (self.dim() == other.dim() == 1 and self.shape == other.shape and self.dtype == other.dtype
            and self.is_floating_point() and not self.is_complex() and self.device == other.device)


def _dot(self: torch.Tensor, other: torch.Tensor, out: torch.Tensor | None) -> Any:
    if not _vectors(self, other) or leaves_to_aten("mm", self.dtype):
        return NotImplemented
    if out is None:
        result = mm(self.unsqueeze(0), other.unsqueeze(1))
        return result if result is NotImplemented else result.view(())
    if out.dtype != self.dtype or out.device != self.device or out.dim() != 0:
        return NotImplemented  # ATen raises or resizes
    result = mm_out(self.unsqueeze(0), other.unsqueeze(1), out=out.view(1, 1))
    return result if result is NotImplemented else out


@aten_op("dot", "vdot")
def dot(self: torch.Tensor, other: torch.Tensor) -> Any:
    """sum(self * other) of two real 1-d tensors (vdot's conjugate is the identity there)."""
    return _dot(self, other, None)


@aten_op("dot.out", "vdot.out")
def dot_out(self: torch.Tensor, other: torch.Tensor, *, out: torch.Tensor) -> Any:
    return _dot(self, other, out)


def _bias(self: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor | None:
    try:
        return self.expand(shape)
    except RuntimeError:
        return None  # ATen raises: self does not broadcast


def _add_product(bias: torch.Tensor | None, mat1: torch.Tensor, mat2: torch.Tensor, beta: Any, alpha: Any,
                 out: torch.Tensor | None, shape: tuple[int, ...]) -> Any:
    """``beta * bias + alpha * (mat1 @ mat2)`` by addmm's kernels, seen as ``shape`` (written
    into ``out``, which must have that shape: ATen resizes another)."""
    if bias is None or (out is not None and tuple(out.shape) != shape):
        return NotImplemented
    if out is None:
        result = addmm(bias, mat1, mat2, beta=beta, alpha=alpha)
        return result if result is NotImplemented else result.view(shape)
    result = addmm_out(bias, mat1, mat2, beta=beta, alpha=alpha, out=out.view(bias.shape))
    return result if result is NotImplemented else out


def _empty_addmv(self: torch.Tensor, mat: torch.Tensor, beta: Any, out: torch.Tensor | None) -> Any:
    """addmv of an empty matrix, as ATen computes it: zeros of (M,) where beta is 0 (``self``
    ignored, NaN included), else ``beta * self`` in ``self``'s own shape (ATen resizes its
    (M,) result to it)."""
    if (_bias(self, (mat.shape[0],)) is None or self.dtype != mat.dtype or not mat.is_floating_point()
            or mat.is_complex() or self.device != mat.device):
        return NotImplemented  # ATen raises
    if out is not None and (out.dtype != self.dtype or out.device != self.device):
        return NotImplemented  # ATen raises
    result = zeros((mat.shape[0],), dtype=self.dtype, device=self.device) if beta == 0 else mul(self, beta)
    return result if out is None or result is NotImplemented else write_out(out, result)


def _addmv(self: torch.Tensor, mat: torch.Tensor, vec: torch.Tensor, beta: Any, alpha: Any,
           out: torch.Tensor | None) -> Any:
    if (mat.dim() != 2 or vec.dim() != 1 or mat.shape[1] != vec.shape[0] or vec.dtype != mat.dtype
            or leaves_to_aten("addmm", mat.dtype)):
        return NotImplemented
    if mat.numel() == 0:
        return _empty_addmv(self, mat, beta, out)
    bias = _bias(self, (mat.shape[0],))
    bias = None if bias is None else bias.unsqueeze(1)
    return _add_product(bias, mat, vec.unsqueeze(1), beta, alpha, out, (mat.shape[0],))


@aten_op("addmv")
def addmv(self: torch.Tensor, mat: torch.Tensor, vec: torch.Tensor, *, beta: Any = 1, alpha: Any = 1) -> Any:
    """beta * self + alpha * (mat @ vec), ``self`` broadcast to (M,)."""
    return _addmv(self, mat, vec, beta, alpha, None)


@aten_op("addmv.out")
def addmv_out(self: torch.Tensor, mat: torch.Tensor, vec: torch.Tensor, *, beta: Any = 1, alpha: Any = 1,
              out: torch.Tensor) -> Any:
    return _addmv(self, mat, vec, beta, alpha, out)


def _addr(self: torch.Tensor, vec1: torch.Tensor, vec2: torch.Tensor, beta: Any, alpha: Any,
          out: torch.Tensor | None) -> Any:
    if vec1.dim() != 1 or vec2.dim() != 1 or leaves_to_aten("addmm", vec1.dtype):
        return NotImplemented
    shape = (vec1.shape[0], vec2.shape[0])
    return _add_product(_bias(self, shape), vec1.unsqueeze(1), vec2.unsqueeze(0), beta, alpha, out, shape)


@aten_op("addr")
def addr(self: torch.Tensor, vec1: torch.Tensor, vec2: torch.Tensor, *, beta: Any = 1, alpha: Any = 1) -> Any:
    """beta * self + alpha * outer(vec1, vec2), ``self`` broadcast to (M, N)."""
    return _addr(self, vec1, vec2, beta, alpha, None)


@aten_op("addr.out")
def addr_out(self: torch.Tensor, vec1: torch.Tensor, vec2: torch.Tensor, *, beta: Any = 1, alpha: Any = 1,
             out: torch.Tensor) -> Any:
    return _addr(self, vec1, vec2, beta, alpha, out)
