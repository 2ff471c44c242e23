"""The fused Adam, AdamW and SGD steps (``torch.optim.Adam/AdamW/SGD(fused=True)``): one
launch updates every parameter of a list.

The launch reads a table of addresses (one row per role, one column per tensor: Adam's
param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq and step; SGD's param, grad and momentum
buffer) and each tensor's element count from device
memory; its grid is one program per CHUNK elements of each tensor (a work table names each
program's tensor and chunk). The tables depends only on the tensors'
addresses and sizes, which an optimizer keeps from step to step, so it is built and copied
to the device once and reused.

The update is ATen's, computed in float32 (float64 calls go to ATen): with ``grad_scale`` the
gradient is divided by it and written back unscaled; ``found_inf`` != 0 skips the update (the
optimizer takes the step count back after the call); ``maximize`` negates the gradient; AdamW decays
the parameter by ``lr * weight_decay`` first, Adam adds ``weight_decay * param`` to the
gradient; then, with ``t`` the tensor's step,

    m = beta1 m + (1 - beta1) g,   v = beta2 v + (1 - beta2) g^2,   v_max = max(v_max, v)
    param -= lr / (1 - beta1^t) * m / (sqrt(v or v_max) / sqrt(1 - beta2^t) + eps)

SGD: weight decay adds ``weight_decay * param`` to the gradient; with momentum the buffer
becomes the gradient on the first step and ``momentum * buf + (1 - dampening) * g`` after,
and the update uses ``g + momentum * buf`` (Nesterov) or ``buf``; ``param -= lr * update``.
The ``tensor_lr`` overloads read the learning rate from its one-element tensor in the kernel.

Calls gems does not serve this way go to ATen whole: float64 or mixed dtypes, tensors that
are not dense or not laid out as their parameters, on several devices, step counters that are not float32.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import triton
import triton.language as tl

from .. import tuning
from ..codegen.overlap import dense
from ..codegen.pointwise import TL_DTYPES
from ..launch_cache import LaunchCache
from ..registry import aten_op

_BLOCK = 1024  # elements per step of a program
_CHUNK = 8 * _BLOCK  # elements per program (the grid's second axis)
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@triton.jit
def row_pointer(table, T, t, row, DTYPE: tl.constexpr, ALIGNED: tl.constexpr):
    """Tensor ``t``'s address in ``row`` of an address table of T columns, as a pointer;
    ALIGNED: known to be a multiple of 16 bytes (every address of the table is), so that
    the loads and stores through it are 16-byte vectors, as they are through an argument."""
    pointer = tl.load(table + row * T + t).to(tl.pointer_type(DTYPE))
    if ALIGNED:
        pointer = tl.multiple_of(pointer, 16)
    return pointer


@triton.jit
def _step_numbers(sizes, t, lr, lr_ptr, scale_ptr, found_ptr, LR_TENSOR: tl.constexpr,
                  HAS_SCALE: tl.constexpr, HAS_FOUND: tl.constexpr):
    """Tensor ``t``'s element count (0 when found_inf is set: the step updates nothing), the
    learning rate (read from memory for the tensor_lr overloads) and 1 / grad_scale."""
    n = tl.load(sizes + t)
    if HAS_FOUND:
        n = tl.where(tl.load(found_ptr) != 0, 0, n)
    if LR_TENSOR:
        lr = tl.load(lr_ptr).to(tl.float32)
    inv_scale = 1.0
    if HAS_SCALE:
        inv_scale = 1.0 / tl.load(scale_ptr).to(tl.float32)
    return n, lr, inv_scale


@triton.jit
def _gradient(grad, offs, mask, inv_scale, DTYPE: tl.constexpr, HAS_SCALE: tl.constexpr,
              MAXIMIZE: tl.constexpr):
    """The gradient in float32: unscaled (and stored back so), negated to maximize."""
    g = tl.load(grad + offs, mask=mask).to(tl.float32)
    if HAS_SCALE:
        g = g * inv_scale
        tl.store(grad + offs, g.to(DTYPE), mask=mask)
    if MAXIMIZE:
        g = -g
    return g


@triton.jit
def work_item(work, CHUNK: tl.constexpr):
    """(tensor, first element) of this program's chunk."""
    item = tl.load(work + tl.program_id(0))
    return (item >> 32).to(tl.int32), (item & 0xFFFFFFFF) * CHUNK


@triton.jit
def _adam_kernel(
    table,  # (6, T) int64: addresses of param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step
    sizes,  # (T,) int64: each tensor's element count
    work,  # one int64 a program: its tensor (high 32 bits) and chunk of that tensor (low 32)
    T,
    lr,
    beta1,
    beta2,
    log2_beta1,  # log2(beta1), log2(beta2): beta^t = 2^(t log2 beta)
    log2_beta2,
    weight_decay,
    eps,
    lr_ptr,  # (1,) the learning rate when LR_TENSOR
    scale_ptr,  # (1,) grad_scale when HAS_SCALE
    found_ptr,  # (1,) found_inf when HAS_FOUND
    DTYPE: tl.constexpr,
    ADAMW: tl.constexpr,
    DECAY: tl.constexpr,
    AMSGRAD: tl.constexpr,
    MAXIMIZE: tl.constexpr,
    LR_TENSOR: tl.constexpr,
    HAS_SCALE: tl.constexpr,
    HAS_FOUND: tl.constexpr,
    ALIGNED: tl.constexpr,  # every address of the table a multiple of 16 bytes
    CHUNK: tl.constexpr,
    BLOCK: tl.constexpr,
):
    t, start = work_item(work, CHUNK)
    n, lr, inv_scale = _step_numbers(sizes, t, lr, lr_ptr, scale_ptr, found_ptr, LR_TENSOR, HAS_SCALE, HAS_FOUND)
    param = row_pointer(table, T, t, 0, DTYPE, ALIGNED)
    grad = row_pointer(table, T, t, 1, DTYPE, ALIGNED)
    exp_avg = row_pointer(table, T, t, 2, DTYPE, ALIGNED)
    exp_avg_sq = row_pointer(table, T, t, 3, DTYPE, ALIGNED)
    max_exp_avg_sq = row_pointer(table, T, t, 4, DTYPE, ALIGNED)
    step = tl.load(row_pointer(table, T, t, 5, tl.float32, False))
    step_size = lr / (1.0 - tl.exp2(step * log2_beta1))
    bias2_sqrt = tl.sqrt(1.0 - tl.exp2(step * log2_beta2))
    for i in range(0, CHUNK, BLOCK):
        offs = start + i + tl.arange(0, BLOCK)
        mask = offs < n
        p = tl.load(param + offs, mask=mask).to(tl.float32)
        g = _gradient(grad, offs, mask, inv_scale, DTYPE, HAS_SCALE, MAXIMIZE)
        m = tl.load(exp_avg + offs, mask=mask).to(tl.float32)
        v = tl.load(exp_avg_sq + offs, mask=mask).to(tl.float32)
        if DECAY:
            if ADAMW:
                p = p - lr * weight_decay * p
            else:
                g = g + weight_decay * p
        m = beta1 * m + (1.0 - beta1) * g
        v = beta2 * v + (1.0 - beta2) * g * g
        if AMSGRAD:
            v_max = tl.maximum(tl.load(max_exp_avg_sq + offs, mask=mask).to(tl.float32), v)
            tl.store(max_exp_avg_sq + offs, v_max.to(DTYPE), mask=mask)
            denom = tl.sqrt(v_max) / bias2_sqrt + eps
        else:
            denom = tl.sqrt(v) / bias2_sqrt + eps
        p = p - step_size * m / denom
        tl.store(param + offs, p.to(DTYPE), mask=mask)
        tl.store(exp_avg + offs, m.to(DTYPE), mask=mask)
        tl.store(exp_avg_sq + offs, v.to(DTYPE), mask=mask)


@triton.jit
def _sgd_kernel(
    table,  # (3, T) int64: addresses of param, grad, momentum_buffer
    sizes,  # (T,) int64
    work,  # as the Adam kernel's
    T,
    lr,
    weight_decay,
    momentum,
    dampening,
    lr_ptr,  # (1,) the learning rate when LR_TENSOR
    scale_ptr,  # (1,) grad_scale when HAS_SCALE
    found_ptr,  # (1,) found_inf when HAS_FOUND
    DTYPE: tl.constexpr,
    DECAY: tl.constexpr,
    MOMENTUM: tl.constexpr,
    FIRST: tl.constexpr,
    NESTEROV: tl.constexpr,
    MAXIMIZE: tl.constexpr,
    LR_TENSOR: tl.constexpr,
    HAS_SCALE: tl.constexpr,
    HAS_FOUND: tl.constexpr,
    ALIGNED: tl.constexpr,  # every address of the table a multiple of 16 bytes
    CHUNK: tl.constexpr,
    BLOCK: tl.constexpr,
):
    t, start = work_item(work, CHUNK)
    n, lr, inv_scale = _step_numbers(sizes, t, lr, lr_ptr, scale_ptr, found_ptr, LR_TENSOR, HAS_SCALE, HAS_FOUND)
    param = row_pointer(table, T, t, 0, DTYPE, ALIGNED)
    grad = row_pointer(table, T, t, 1, DTYPE, ALIGNED)
    buffer = row_pointer(table, T, t, 2, DTYPE, ALIGNED)
    for i in range(0, CHUNK, BLOCK):
        offs = start + i + tl.arange(0, BLOCK)
        mask = offs < n
        p = tl.load(param + offs, mask=mask).to(tl.float32)
        g = _gradient(grad, offs, mask, inv_scale, DTYPE, HAS_SCALE, MAXIMIZE)
        if DECAY:
            g = g + weight_decay * p
        if MOMENTUM:
            if FIRST:
                b = g
            else:
                b = momentum * tl.load(buffer + offs, mask=mask).to(tl.float32) + (1.0 - dampening) * g
            tl.store(buffer + offs, b.to(DTYPE), mask=mask)
            if NESTEROV:
                g = g + momentum * b
            else:
                g = b
        tl.store(param + offs, (p - lr * g).to(DTYPE), mask=mask)


_adam = LaunchCache(_adam_kernel, name="fused_adam")
_sgd = LaunchCache(_sgd_kernel, name="fused_sgd")

#: address tables by the tensors' addresses, and grids by their sizes (an optimizer repeats
#: its parameters and states every step; its gradients may be new tensors each step). Each
#: entry keeps its page-locked source: a copy captured in a CUDA graph reads it again at
#: every replay, so it must live (and stay unchanged) as long as the entry.
_TABLES: dict[tuple[Any, ...], tuple[torch.Tensor, torch.Tensor, bool]] = {}
_GRIDS: dict[tuple[Any, ...], tuple[torch.Tensor, ...]] = {}
_MAX_TABLES = 64


def upload(host: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(``host`` on ``device``, its host source) without stalling the host: copied from
    page-locked memory behind the stream's queued work (a copy from pageable memory waits
    for it), where the device's runtime has page-locked memory."""
    if device.type != "cpu":
        try:
            host = host.pin_memory()
        except RuntimeError:  # no page-locked memory for this device: a blocking copy
            return host.to(device), host
    return host.to(device, non_blocking=True), host


def _make_room(cache: dict[Any, Any]) -> None:
    # entries made while a graph was captured may be read by its replays: never dropped then
    if len(cache) >= _MAX_TABLES and not tuning.capturing():
        cache.clear()


def addresses(rows: Sequence[Sequence[torch.Tensor]]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(every row's data pointers, row after row; the first row's element counts)."""
    return tuple([t.data_ptr() for row in rows for t in row]), tuple([t.numel() for t in rows[0]])


def address_table(
    rows: Sequence[Sequence[torch.Tensor]], device: torch.device, chunk: int,
    known: tuple[tuple[int, ...], tuple[int, ...]] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool]:
    """(table, sizes, work, aligned): an int64 (len(rows), T) device tensor of the tensors'
    addresses, each row one role; the first row's element counts; whether every address is a
    multiple of 16 bytes (the kernels' ALIGNED); and one int64 a program, the grid's
    work: a tensor's index (high 32 bits) and one of its ``chunk``-element chunks (low 32
    bits). The grid covers each tensor's own chunks: a (tensor, chunk) grid sized by the
    largest tensor would start mostly idle programs where an embedding sits beside norms.
    ``known``: the rows' :func:`addresses`, where the caller has them."""
    pointers, counts = addresses(rows) if known is None else known
    grid_key = (device, chunk, counts)
    grid = _GRIDS.get(grid_key)
    if grid is None:
        sizes = torch.tensor(counts, dtype=torch.int64)
        chunks = (sizes + chunk - 1) // chunk
        tensor = torch.repeat_interleave(torch.arange(len(counts), dtype=torch.int64), chunks)
        first = torch.cumsum(chunks, 0) - chunks  # each tensor's first work item
        within = torch.arange(int(chunks.sum()), dtype=torch.int64) - torch.repeat_interleave(first, chunks)
        _make_room(_GRIDS)
        grid = _GRIDS[grid_key] = (*upload(sizes, device), *upload((tensor << 32) | within, device))
    key = (device, len(rows), *pointers)
    table = _TABLES.get(key)
    if table is None:
        _make_room(_TABLES)
        uploaded = upload(torch.tensor(pointers, dtype=torch.int64).view(len(rows), -1), device)
        table = _TABLES[key] = (*uploaded, all(p % 16 == 0 for p in pointers))
    return table[0], grid[0], grid[2], table[2]  # (device, host[, aligned]) entries


def _servable(lists: list[list[torch.Tensor]], steps: list[torch.Tensor] | None = None) -> bool:
    """One floating dtype gems computes in float32, tensors of matching sizes on one device,
    dense without overlap, each laid out as its parameter (contiguous, or channels-last as a
    convolution's weight and its gradient are), and (Adam) one float32 step counter per
    tensor there."""
    params = lists[0]
    if not params:
        return False
    dtype, device = params[0].dtype, params[0].device
    if dtype not in _DTYPES or any(len(row) != len(params) for row in lists):
        return False
    if steps is not None and len(steps) != len(params):
        return False
    for row in lists:
        for t, p in zip(row, params):
            if t.dtype != dtype or t.device != device or t.numel() != p.numel():
                return False
            if not (t.is_contiguous() and p.is_contiguous()) and not (
                    dense(t) and t.shape == p.shape and t.stride() == p.stride()):
                return False
    return all(s.dtype == torch.float32 and s.device == device and s.numel() == 1 for s in steps or ())


def _extras_served(device: torch.device, *extras: torch.Tensor | None) -> bool:
    """lr (tensor_lr overloads), grad_scale and found_inf: one number on the lists' device."""
    return all(x is None or (x.device == device and x.numel() == 1 and not x.is_complex()) for x in extras)


def _fused_adam(
    adamw: bool,
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    exp_avgs: list[torch.Tensor],
    exp_avg_sqs: list[torch.Tensor],
    max_exp_avg_sqs: list[torch.Tensor],
    state_steps: list[torch.Tensor],
    lr: float | torch.Tensor,
    beta1: float,
    beta2: float,
    weight_decay: float,
    eps: float,
    amsgrad: bool,
    maximize: bool,
    grad_scale: torch.Tensor | None,
    found_inf: torch.Tensor | None,
) -> Any:
    lists = [params, grads, exp_avgs, exp_avg_sqs] + ([max_exp_avg_sqs] if amsgrad else [])
    if not _servable(lists, state_steps) or not 0 < beta1 < 1 or not 0 < beta2 < 1:
        return NotImplemented
    lr_tensor = lr if isinstance(lr, torch.Tensor) else None
    if not _extras_served(params[0].device, lr_tensor, grad_scale, found_inf):
        return NotImplemented
    rows = [params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs if amsgrad else exp_avg_sqs, state_steps]
    table, sizes, work, aligned = address_table(rows, params[0].device, _CHUNK)
    if work.numel():
        _adam(
            (work.numel(),), table, sizes, work, len(params),
            0.0 if lr_tensor is not None else float(lr), float(beta1), float(beta2), math.log2(beta1),
            math.log2(beta2), float(weight_decay), float(eps), *_pointers(sizes, lr_tensor, grad_scale, found_inf),
            DTYPE=TL_DTYPES[params[0].dtype], ADAMW=adamw, DECAY=weight_decay != 0, AMSGRAD=amsgrad,
            MAXIMIZE=maximize, LR_TENSOR=lr_tensor is not None, HAS_SCALE=grad_scale is not None,
            HAS_FOUND=found_inf is not None, ALIGNED=aligned, CHUNK=_CHUNK, BLOCK=_BLOCK,
        )
    return None


def _pointers(dummy: torch.Tensor, *tensors: torch.Tensor | None) -> list[torch.Tensor]:
    """The optional one-number tensors as kernel pointers (``dummy`` where absent: the
    kernel does not read it)."""
    return [dummy if t is None else t for t in tensors]


_ADAM_DOC = """One {} step over every tensor of the lists, in one launch. Not native: the launch
    reads addresses the call's arguments do not show."""


@aten_op("_fused_adamw_", "_fused_adamw_.tensor_lr", native=False)
def fused_adamw_(params: list[torch.Tensor], grads: list[torch.Tensor], exp_avgs: list[torch.Tensor],
                 exp_avg_sqs: list[torch.Tensor], max_exp_avg_sqs: list[torch.Tensor],
                 state_steps: list[torch.Tensor], *, lr: float | torch.Tensor, beta1: float, beta2: float,
                 weight_decay: float, eps: float, amsgrad: bool, maximize: bool,
                 grad_scale: torch.Tensor | None = None, found_inf: torch.Tensor | None = None) -> Any:
    return _fused_adam(True, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1,
                       beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf)


@aten_op("_fused_adam_", "_fused_adam_.tensor_lr", native=False)
def fused_adam_(params: list[torch.Tensor], grads: list[torch.Tensor], exp_avgs: list[torch.Tensor],
                exp_avg_sqs: list[torch.Tensor], max_exp_avg_sqs: list[torch.Tensor],
                state_steps: list[torch.Tensor], *, lr: float | torch.Tensor, beta1: float, beta2: float,
                weight_decay: float, eps: float, amsgrad: bool, maximize: bool,
                grad_scale: torch.Tensor | None = None, found_inf: torch.Tensor | None = None) -> Any:
    return _fused_adam(False, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1,
                       beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf)


fused_adamw_.__doc__ = _ADAM_DOC.format("AdamW (decoupled weight decay)")
fused_adam_.__doc__ = _ADAM_DOC.format("Adam (L2 weight decay added to the gradient)")


@aten_op("_fused_sgd_", "_fused_sgd_.tensor_lr", native=False)
def fused_sgd_(params: list[torch.Tensor], grads: list[torch.Tensor], momentum_buffer_list: list[torch.Tensor], *,
               weight_decay: float, momentum: float, lr: float | torch.Tensor, dampening: float, nesterov: bool,
               maximize: bool, is_first_step: bool, grad_scale: torch.Tensor | None = None,
               found_inf: torch.Tensor | None = None) -> Any:
    """One SGD step (momentum, dampening, Nesterov) over the lists, in one launch; the
    momentum buffers are the gradients on the first step. Not native, as Adam's."""
    lists = [params, grads] + ([momentum_buffer_list] if momentum != 0 else [])
    if not _servable(lists):
        return NotImplemented
    lr_tensor = lr if isinstance(lr, torch.Tensor) else None
    if not _extras_served(params[0].device, lr_tensor, grad_scale, found_inf):
        return NotImplemented
    rows = [params, grads, momentum_buffer_list if momentum != 0 else grads]
    table, sizes, work, aligned = address_table(rows, params[0].device, _CHUNK)
    if work.numel():
        _sgd(
            (work.numel(),), table, sizes, work, len(params),
            0.0 if lr_tensor is not None else float(lr), float(weight_decay), float(momentum), float(dampening),
            *_pointers(sizes, lr_tensor, grad_scale, found_inf),
            DTYPE=TL_DTYPES[params[0].dtype], DECAY=weight_decay != 0, MOMENTUM=momentum != 0,
            FIRST=is_first_step, NESTEROV=nesterov, MAXIMIZE=maximize, LR_TENSOR=lr_tensor is not None,
            HAS_SCALE=grad_scale is not None, HAS_FOUND=found_inf is not None, ALIGNED=aligned, CHUNK=_CHUNK,
            BLOCK=_BLOCK,
        )
    return None
