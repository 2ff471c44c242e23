"""triu and tril (with out= and in-place): keep the upper or lower triangle of the last two
dims, counted from diagonal ``diagonal`` (0 the main one, > 0 above it), zero elsewhere.

The input is seen as (B, M, N): batch dims that merge into one stride (contiguous,
transposed matrices, sliced rows...) are read in place; other layouts are made contiguous
first. Each program covers one BLOCK_M x BLOCK_N tile of one matrix and loads only the
elements it keeps.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from ..codegen.layout import iteration_layout
from ..contract import KernelConfig
from ..host_math import cdiv, next_power_of_2
from ..launch_cache import LaunchCache
from ..registry import aten_op
from ..tuning import Tunable

TRIANGULAR = Tunable(
    "triangular",
    params=("BLOCK_M", "BLOCK_N"),
    defaults=[KernelConfig({"BLOCK_M": 32, "BLOCK_N": 64}, num_warps=4)],
    description="triu/tril: one program per BLOCK_M x BLOCK_N tile of one matrix",
)


@triton.jit
def _triangular_kernel(
    x_ptr,  # (B, M, N) with strides (x_sb, x_sm, x_sn)
    out_ptr,  # (B, M, N) with strides (out_sb, out_sm, out_sn)
    M,
    N,
    diagonal,
    tiles_n,
    tiles_per_matrix,
    x_sb,
    x_sm,
    x_sn,
    out_sb,
    out_sm,
    out_sn,
    UPPER: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # upper: out[b, i, j] = x[b, i, j] if j - i >= diagonal else 0
    # lower: out[b, i, j] = x[b, i, j] if j - i <= diagonal else 0
    pid = tl.program_id(0).to(tl.int64)
    b = pid // tiles_per_matrix
    tile = pid % tiles_per_matrix
    rows = (tile // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    cols = (tile % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    inside = (rows < M) & (cols < N)
    if UPPER:
        keep = cols - rows >= diagonal
    else:
        keep = cols - rows <= diagonal
    x = tl.load(x_ptr + b * x_sb + rows * x_sm + cols * x_sn, mask=inside & keep, other=0)
    tl.store(out_ptr + b * out_sb + rows * out_sm + cols * out_sn, x, mask=inside)


_launch = LaunchCache(_triangular_kernel, name="triangular")


def _batch_strides(batch: tuple[int, ...], tensors: tuple[torch.Tensor, ...]) -> list[int] | None:
    """One batch stride per tensor if the batch dims merge into one for all of them."""
    if not batch:
        return [0 for _ in tensors]
    shape, strides = iteration_layout(batch, [tuple(t.stride()[:-2]) for t in tensors])
    if len(shape) != 1:
        return None
    return [s[0] for s in strides]


def _run(x: torch.Tensor, out: torch.Tensor, diagonal: int, upper: bool) -> None:
    """out <- the triangle of x (out has x's shape and dtype; it may be x itself)."""
    *batch_dims, m, n = x.shape
    batch = tuple(batch_dims)
    b = x.numel() // (m * n) if m * n else 0
    if b == 0:
        return
    strides = _batch_strides(batch, (x, out))
    if strides is None:
        if out is x or not out.is_contiguous():
            result = torch.empty(x.shape, dtype=x.dtype, device=x.device)
            _run(x.contiguous(), result, diagonal, upper)
            out.copy_(result)
            return
        x = x.contiguous()
        strides = _batch_strides(batch, (x, out))
        assert strides is not None
    # a diagonal past the matrix keeps all or nothing; clamping keeps it within int32
    diagonal = max(-m, min(n, diagonal))

    def launch(config: KernelConfig) -> None:
        block_m = min(config.params["BLOCK_M"], next_power_of_2(m))
        block_n = min(config.params["BLOCK_N"], next_power_of_2(n))
        tiles_n = cdiv(n, block_n)
        tiles = cdiv(m, block_m) * tiles_n
        _launch(
            (b * tiles,), x, out, m, n, diagonal, tiles_n, tiles,
            strides[0], x.stride(-2), x.stride(-1), strides[1], out.stride(-2), out.stride(-1),
            config=config, options=TRIANGULAR.options(), UPPER=upper, BLOCK_M=block_m, BLOCK_N=block_n,
        )

    launch(TRIANGULAR.choose("all"))


_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.int16,
           torch.int32, torch.int64, torch.uint8, torch.bool)


def _served(self: torch.Tensor) -> bool:
    """ATen raises for fewer than two dims; complex and other dtypes stay with ATen."""
    return self.dim() >= 2 and self.dtype in _DTYPES


def _functional(self: torch.Tensor, diagonal: int, upper: bool) -> Any:
    if not _served(self):
        return NotImplemented
    out = torch.empty(self.shape, dtype=self.dtype, device=self.device)
    _run(self, out, diagonal, upper)
    return out


def _out(self: torch.Tensor, diagonal: int, upper: bool, out: torch.Tensor) -> Any:
    if not _served(self) or out.dtype != self.dtype or out.shape != self.shape or out.device != self.device:
        return NotImplemented  # ATen raises on the dtype, resizes (and warns) on the shape
    _run(self, out, diagonal, upper)
    return out


def _inplace(self: torch.Tensor, diagonal: int, upper: bool) -> Any:
    if not _served(self):
        return NotImplemented
    _run(self, self, diagonal, upper)
    return self


@aten_op("triu")
def triu(self: torch.Tensor, diagonal: int = 0) -> Any:
    """The upper triangle (j - i >= diagonal) of every matrix in the last two dims."""
    return _functional(self, diagonal, upper=True)


@aten_op("triu.out")
def triu_out(self: torch.Tensor, diagonal: int = 0, *, out: torch.Tensor) -> Any:
    return _out(self, diagonal, True, out)


@aten_op("triu_")
def triu_(self: torch.Tensor, diagonal: int = 0) -> Any:
    return _inplace(self, diagonal, upper=True)


@aten_op("tril")
def tril(self: torch.Tensor, diagonal: int = 0) -> Any:
    """The lower triangle (j - i <= diagonal) of every matrix in the last two dims."""
    return _functional(self, diagonal, upper=False)


@aten_op("tril.out")
def tril_out(self: torch.Tensor, diagonal: int = 0, *, out: torch.Tensor) -> Any:
    return _out(self, diagonal, False, out)


@aten_op("tril_")
def tril_(self: torch.Tensor, diagonal: int = 0) -> Any:
    return _inplace(self, diagonal, upper=False)
