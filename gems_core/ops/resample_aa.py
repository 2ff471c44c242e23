"""Antialiased upsampling (F.interpolate(..., antialias=True)): bilinear and bicubic in 2
spatial dims, functional and out= forms, and their backward (with grad_input=).

Each output coordinate ``o`` of a dim (input size ``n``, scale ``s`` as ATen computes it:
resample.py's ``_step``) reads the inputs ``j`` of a window around ``c = s * (o + 0.5)``
of half-width ``support = r * max(s, 1)`` (``r`` = 1 bilinear, 2 bicubic), from
``trunc(c - support + 0.5)`` (at least 0) to ``trunc(c + support + 0.5)`` (at most ``n``),
weighted by ``f((j - c + 0.5) / max(s, 1))`` normalized to sum 1: ``f`` the triangle
``max(0, 1 - |x|)``, or Keys' cubic with A = -0.5 for bicubic. Downscaling thus averages
over a window as wide as the scale, as the filter of an image library does.

The weights depend only on the sizes and the scale: they are worked out on the host in
float64 (once per size pair and scale, as tables of window starts, lengths and weights)
and read by one kernel that applies a 1-d window along one dim of a 4-d tensor read and
written through strides. The 2-d op is two such passes, along W into a float32 (float64)
buffer, then along H into the result; a dim whose size and scale leave it unchanged is not
passed over. The backward is the same two passes with the transposed tables (the outputs
that read input ``j`` form a window too, since the windows' ends grow with ``o``).

Left to ATen: uint8 inputs (ATen rounds in its own fixed-point arithmetic), float16 and
bfloat16 on the CPU (where ATen raises), and arguments it refuses.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch
import triton
import triton.language as tl
from torch._prims_common import suggest_memory_format

from ..codegen.overlap import assert_no_internal_overlap, assert_no_overlap
from ..contract import KernelConfig
from ..host_math import cdiv, next_power_of_2
from ..launch_cache import LaunchCache
from ..tuning import Tunable
from .copying import copy_into
from .masked import write_out
from .resample import _sizes_ok, _step, register_forms

RESAMPLE_AA = Tunable(
    "resample_aa",
    params=("BLOCK_L", "BLOCK_I"),
    defaults=[KernelConfig({"BLOCK_L": 16, "BLOCK_I": 64}, num_warps=4)],
    description="antialiased upsample (and backward), one pass along a dim: BLOCK_L coordinates of "
    "that dim x BLOCK_I of the dim after it a program",
)


@triton.jit
def _window_pass_kernel(
    x_ptr,  # (A, B, L_in, inner), strides (x_sa, x_sb, x_sl, x_si)
    out_ptr,  # (A, B, L_out, inner), strides (o_sa, o_sb, o_sl, o_si)
    start_ptr,  # (L_out,) int32: the first input coordinate each output reads
    count_ptr,  # (L_out,) int32: how many it reads
    weight_ptr,  # (L_out, taps): their weights
    B,
    L_out,
    inner,
    taps,
    x_sa,
    x_sb,
    x_sl,
    x_si,
    o_sa,
    o_sb,
    o_sl,
    o_si,
    ACC: tl.constexpr,
    BLOCK_L: tl.constexpr,
    BLOCK_I: tl.constexpr,
):
    # out[a, b, l, i] = sum_k weight[l, k] * x[a, b, start[l] + k, i], k < count[l]
    ab = tl.program_id(0).to(tl.int64)
    a = ab // B
    b = ab % B
    ls = tl.program_id(1) * BLOCK_L + tl.arange(0, BLOCK_L)
    cols = tl.program_id(2) * BLOCK_I + tl.arange(0, BLOCK_I)
    l_in = ls < L_out
    inside = l_in[:, None] & (cols < inner)[None, :]
    start = tl.load(start_ptr + ls, mask=l_in, other=0).to(tl.int64)
    count = tl.load(count_ptr + ls, mask=l_in, other=0)
    x_rows = x_ptr + a * x_sa + b * x_sb + cols[None, :].to(tl.int64) * x_si
    acc = tl.zeros((BLOCK_L, BLOCK_I), dtype=ACC)
    for k in range(taps):
        weight = tl.load(weight_ptr + ls * taps + k, mask=l_in & (k < count), other=0.0).to(ACC)
        value = tl.load(x_rows + (start + k)[:, None] * x_sl, mask=inside & (k < count)[:, None], other=0.0)
        acc += weight[:, None] * value.to(ACC)
    out = out_ptr + a * o_sa + b * o_sb + ls[:, None].to(tl.int64) * o_sl + cols[None, :].to(tl.int64) * o_si
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=inside)


_window_pass = LaunchCache(_window_pass_kernel, name="resample_aa")


def _filter(x: np.ndarray, cubic: bool) -> np.ndarray:
    x = np.abs(x)
    if not cubic:
        return np.maximum(0.0, 1.0 - x)
    a = -0.5
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x < 1, near, np.where(x < 2, far, 0.0))


def _windows(size: int, out_size: int, scale: float, cubic: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, count, weights (out_size, taps)) of each output coordinate, in float64."""
    stretch = max(scale, 1.0)
    support = (2.0 if cubic else 1.0) * stretch
    center = scale * (np.arange(out_size) + 0.5)
    start = np.maximum(np.trunc(center - support + 0.5), 0).astype(np.int64)
    end = np.minimum(np.trunc(center + support + 0.5), size).astype(np.int64)
    count = np.maximum(end - start, 0)
    taps = max(int(count.max(initial=1)), 1)
    k = np.arange(taps)
    weights = _filter((start[:, None] + k[None, :] - center[:, None] + 0.5) / stretch, cubic)
    weights = np.where(k[None, :] < count[:, None], weights, 0.0)
    total = weights.sum(axis=1, keepdims=True)
    weights = np.divide(weights, total, out=weights.copy(), where=total != 0)
    return start, count, weights


def _transposed(size: int, start: np.ndarray, count: np.ndarray,
                weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The same tables seen from the input: for each input coordinate ``j``, the window of
    output coordinates that read it and the weights they read it with."""
    end = start + count
    j = np.arange(size)
    first = np.searchsorted(end, j, side="right")  # the first output whose window ends past j
    last = np.searchsorted(start, j, side="right")  # one past the last output starting at or before j
    t_count = np.maximum(last - first, 0)
    taps = max(int(t_count.max(initial=1)), 1)
    o = first[:, None] + np.arange(taps)[None, :]
    valid = np.arange(taps)[None, :] < t_count[:, None]
    o_safe = np.where(valid, o, 0)
    k = np.clip(j[:, None] - start[o_safe], 0, weights.shape[1] - 1)
    t_weights = np.where(valid, weights[o_safe, k], 0.0)
    return first, t_count, t_weights


@functools.lru_cache(maxsize=256)
def _tables(size: int, out_size: int, scale: float, cubic: bool, backward: bool, acc: torch.dtype,
            device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    start, count, weights = _windows(size, out_size, scale, cubic)
    if backward:
        start, count, weights = _transposed(size, start, count, weights)
    return (torch.from_numpy(start.astype(np.int32)).to(device), torch.from_numpy(count.astype(np.int32)).to(device),
            torch.from_numpy(weights).to(device=device, dtype=acc))


def _pass(x: torch.Tensor, out: torch.Tensor, dim: int, tables: tuple[torch.Tensor, ...]) -> None:
    """One window pass along ``dim`` (2: H, 3: W) of the (N, C, H, W) ``x`` into ``out``."""
    order = (0, 1, dim, 5 - dim)  # the other spatial dim is the inner one
    start, count, weights = tables
    a, b, l_out, inner = (out.shape[d] for d in order)
    config = RESAMPLE_AA.choose("all")
    block_i = min(config.params["BLOCK_I"], next_power_of_2(inner))
    block_l = min(config.params["BLOCK_L"] * (config.params["BLOCK_I"] // block_i), next_power_of_2(l_out))
    acc = weights.dtype
    _window_pass(
        (a * b, cdiv(l_out, block_l), cdiv(inner, block_i)), x, out, start, count, weights,
        b, l_out, inner, weights.shape[1], *(x.stride(d) for d in order), *(out.stride(d) for d in order),
        config=config, options=RESAMPLE_AA.options(), ACC=tl.float64 if acc == torch.float64 else tl.float32,
        BLOCK_L=block_l, BLOCK_I=block_i,
    )


def _served_dtype(t: torch.Tensor) -> bool:
    wide = t.dtype in (torch.float32, torch.float64)
    return wide or (t.dtype in (torch.float16, torch.bfloat16) and t.device.type != "cpu")


def _apply(x: torch.Tensor, result: torch.Tensor, in_hw: list[int], out_hw: list[int], scales: tuple[Any, ...],
           align: bool, cubic: bool, backward: bool) -> None:
    """``result`` <- the two passes over ``x`` (forward: ``in_hw`` -> ``out_hw``; backward:
    ``x`` of ``out_hw`` -> ``result`` of ``in_hw``)."""
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    given = list(scales[:2]) + [None] * (2 - len(scales[:2]))
    steps = [_step(n, m, align, s, acc == torch.float64) for n, m, s in zip(in_hw, out_hw, given)]
    passes = [(3, 1), (2, 0)] if not backward else [(2, 0), (3, 1)]
    current = x
    for n, (dim, axis) in enumerate(passes):
        size, out_size = in_hw[axis], out_hw[axis]
        if size == out_size and steps[axis] == 1.0:
            continue  # the identity: nothing to weigh
        shape = list(current.shape)
        shape[dim] = size if backward else out_size
        last = all(in_hw[a] == out_hw[a] and steps[a] == 1.0 for _, a in passes[n + 1:])
        target = result if last else torch.empty(shape, dtype=acc, device=x.device)
        _pass(current, target, dim, _tables(size, out_size, steps[axis], cubic, backward, acc, x.device))
        current = target
    if current is x:
        copy_into(result, x)


def _result(source: torch.Tensor, shape: list[int], out: torch.Tensor | None) -> torch.Tensor | None:
    """A tensor of ``shape`` in ``source``'s memory format (ATen's layout of the result), or
    None where ``out`` is of a dtype or device ATen rejects with its own error."""
    if out is not None:
        if out.dtype != source.dtype or out.device != source.device:
            return None
        assert_no_internal_overlap(out)
        assert_no_overlap(out, (source,))
    return torch.empty(shape, dtype=source.dtype, device=source.device, memory_format=suggest_memory_format(source))


def _forward(self: torch.Tensor, output_size: list[int], align: bool, scales: tuple[Any, ...], cubic: bool,
             out: torch.Tensor | None) -> Any:
    if not _served_dtype(self) or self.dim() != 4 or not _sizes_ok(list(self.shape), output_size, 2):
        return NotImplemented
    result = _result(self, [*self.shape[:2], *output_size], out)
    if result is None:
        return NotImplemented
    if result.numel():
        _apply(self, result, list(self.shape[2:]), output_size, scales, align, cubic, backward=False)
    return result if out is None else write_out(out, result)


def _backward(grad_output: torch.Tensor, output_size: list[int], input_size: list[int], align: bool,
              scales: tuple[Any, ...], cubic: bool, grad_input: torch.Tensor | None) -> Any:
    if (not _served_dtype(grad_output) or not _sizes_ok(list(input_size), output_size, 2)
            or list(grad_output.shape) != [*input_size[:2], *output_size]):
        return NotImplemented  # ATen raises its own error
    result = _result(grad_output, list(input_size), grad_input)
    if result is None:
        return NotImplemented
    if result.numel():
        _apply(grad_output, result, list(input_size[2:]), output_size, scales, align, cubic, backward=True)
    return result if grad_input is None else write_out(grad_input, result)


def _register(name: str, cubic: bool) -> None:
    def forward(self: torch.Tensor, output_size: list[int], align_corners: bool, *scales: Any) -> Any:
        return _forward(self, list(output_size), align_corners, scales, cubic, None)

    def forward_out(self: torch.Tensor, output_size: list[int], align_corners: bool, *scales: Any,
                    out: torch.Tensor) -> Any:
        return _forward(self, list(output_size), align_corners, scales, cubic, out)

    def backward(grad_output: torch.Tensor, output_size: list[int], input_size: list[int], align_corners: bool,
                 *scales: Any) -> Any:
        return _backward(grad_output, list(output_size), list(input_size), align_corners, scales, cubic, None)

    def backward_out(grad_output: torch.Tensor, output_size: list[int], input_size: list[int], align_corners: bool,
                     *scales: Any, grad_input: torch.Tensor) -> Any:
        return _backward(grad_output, list(output_size), list(input_size), align_corners, scales, cubic, grad_input)

    kind = "bicubic" if cubic else "bilinear"
    forward.__doc__ = f"F.interpolate(mode={kind!r}, antialias=True) of a 4-d tensor to ``output_size``."
    register_forms(name, forward, forward_out, backward, backward_out)


_register("_upsample_bilinear2d_aa", cubic=False)
_register("_upsample_bicubic2d_aa", cubic=True)
