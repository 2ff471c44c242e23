"""Random ops on Triton's Philox: uniform_, normal_ (and normal's Tensor overloads),
exponential_, bernoulli_, multinomial, and dropout (native_dropout and its backward).

The factories reach these: ``rand``/``rand_like`` are ATen composites of ``empty`` and
``uniform_``, ``randn``/``randn_like``/``normal.float_float`` of ``empty`` and ``normal_``,
so serving the in-place fills serves them too.

Every call takes a (seed, offset) pair from torch's generator (the given one, else the
device's default): results repeat after ``torch.manual_seed`` and successive calls differ.
A generator that keeps a Philox offset (an accelerator's) is advanced by the counters a call
uses; the CPU generator (a Mersenne twister, no offset) gives a fresh 62-bit seed per call.
Values are drawn in float32 (24 random bits) whatever the result dtype.

The kernels take the seed and the offset as four 32-bit halves and count in 32-bit Philox
(a call's element index, then the offset, in the counter's four words): a growing offset
never changes the kernel's argument types, so a long training run compiles each kernel
once, and the random stream stays one algorithm (64-bit counters would switch Philox to its
64-bit form once the offset passed 2^31).
"""

from __future__ import annotations

import threading
from typing import Any

import torch
import triton
import triton.language as tl

from .. import native, runtime
from ..codegen.pointwise import pointwise
from ..host_math import cdiv, next_power_of_2
from ..launch_cache import LaunchCache, recording
from ..registry import aten_op
from .factory import fill_tensor
from .indexing import device_check_options, host_checks_indices

UNIFORM, NORMAL, EXPONENTIAL, BERNOULLI = 0, 1, 2, 3  # the DIST of _fill_kernel
# the same as constexprs: compiled kernels may read no other globals (the interpreter does)
_UNIFORM, _NORMAL, _EXPONENTIAL = tl.constexpr(UNIFORM), tl.constexpr(NORMAL), tl.constexpr(EXPONENTIAL)
_BLOCK = 1024  # Philox counters per program; each gives four values
_TILE = 8192  # samples x categories compared per multinomial step
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@triton.jit
def _transform(r, a, b, DIST: tl.constexpr):
    # uniform: a + (b - a) u    normal: a + b n    exponential: -log(1 - u) / a (1 - u in (0, 1])
    # bernoulli: u < a
    if DIST == _UNIFORM:
        y = a + (b - a) * r
    elif DIST == _NORMAL:
        y = a + b * r
    elif DIST == _EXPONENTIAL:
        y = -tl.log(1.0 - r) / a
    else:
        y = tl.where(r < a, 1.0, 0.0)
    return y


@triton.jit
def _store(out_ptr, index, r, n, a, b, DIST: tl.constexpr):
    y = _transform(r, a, b, DIST).to(out_ptr.dtype.element_ty)
    if DIST == _UNIFORM:
        # a value rounded up to b in a narrow dtype goes back to a: the range stays [a, b)
        top = tl.full(y.shape, b, tl.float32).to(out_ptr.dtype.element_ty)
        y = tl.where(y == top, tl.full(y.shape, a, tl.float32).to(out_ptr.dtype.element_ty), y)
    tl.store(out_ptr + index, y, mask=index < n)


@triton.jit
def _uniform4(seed_lo, seed_hi, offset_lo, offset_hi, index):
    """Four blocks of float32 U(0, 1) for the counters ``index`` (an int64 block) of a call at
    Philox offset (offset_hi, offset_lo), keyed by the 64-bit seed (seed_hi, seed_lo); the
    halves are int32 reinterpretations of the unsigned words."""
    seed = (seed_hi.to(tl.uint32, bitcast=True).to(tl.uint64) << 32) | seed_lo.to(tl.uint32, bitcast=True).to(
        tl.uint64)
    c0 = (index & 0xFFFFFFFF).to(tl.uint32)
    c3 = (index >> 32).to(tl.uint32)
    c1 = tl.zeros_like(c0) + offset_lo.to(tl.uint32, bitcast=True)
    c2 = tl.zeros_like(c0) + offset_hi.to(tl.uint32, bitcast=True)
    r0, r1, r2, r3 = tl.philox(seed, c0, c1, c2, c3)
    return (tl.uint_to_uniform_float(r0), tl.uint_to_uniform_float(r1), tl.uint_to_uniform_float(r2),
            tl.uint_to_uniform_float(r3))


@triton.jit(do_not_specialize=["seed_lo", "seed_hi", "offset_lo", "offset_hi"])
def _fill_kernel(
    out_ptr,  # (n,) contiguous
    n,
    seed_lo,
    seed_hi,
    offset_lo,
    offset_hi,
    a,
    b,
    DIST: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # Philox counter pid * BLOCK + i gives four values: elements i, i + BLOCK, i + 2 BLOCK,
    # i + 3 BLOCK of this program's 4 * BLOCK
    pid = tl.program_id(0).to(tl.int64)
    lanes = tl.arange(0, BLOCK)
    r0, r1, r2, r3 = _uniform4(seed_lo, seed_hi, offset_lo, offset_hi, pid * BLOCK + lanes)
    if DIST == _NORMAL:
        r0, r1 = tl.pair_uniform_to_normal(r0, r1)
        r2, r3 = tl.pair_uniform_to_normal(r2, r3)
    base = pid * 4 * BLOCK + lanes
    _store(out_ptr, base, r0, n, a, b, DIST)
    _store(out_ptr, base + BLOCK, r1, n, a, b, DIST)
    _store(out_ptr, base + 2 * BLOCK, r2, n, a, b, DIST)
    _store(out_ptr, base + 3 * BLOCK, r3, n, a, b, DIST)


@triton.jit(do_not_specialize=["seed_lo", "seed_hi", "offset_lo", "offset_hi"])
def _dropout_kernel(
    x_ptr,  # (n,) contiguous
    out_ptr,  # (n,) contiguous
    mask_ptr,  # (n,) bool
    n,
    p,
    scale,
    seed_lo,
    seed_hi,
    offset_lo,
    offset_hi,
    BLOCK: tl.constexpr,
):
    # keep = u >= p (probability 1 - p); out = x * keep * scale, as ATen (NaN * 0 stays NaN)
    index = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    in_range = index < n
    u, _, _, _ = _uniform4(seed_lo, seed_hi, offset_lo, offset_hi, index)
    keep = u >= p
    x = tl.load(x_ptr + index, mask=in_range, other=0.0)
    y = x.to(tl.float32) * keep.to(tl.float32) * scale
    tl.store(out_ptr + index, y.to(out_ptr.dtype.element_ty), mask=in_range)
    tl.store(mask_ptr + index, keep, mask=in_range)


@triton.jit(do_not_specialize=["seed_lo", "seed_hi", "offset_lo", "offset_hi"])
def _multinomial_kernel(
    prob_ptr,  # (rows, C) row stride prob_stride, non-negative weights
    out_ptr,  # (rows, S) contiguous int64
    C,
    S,
    prob_stride,
    seed_lo,
    seed_hi,
    offset_lo,
    offset_hi,
    BLOCK_S: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    # sample j of a row: the number of categories k with cdf_k <= u_j * total, i.e. the first
    # k whose cdf passes the target; a zero-weight category repeats the cdf before it and is
    # never chosen (the last positive one bounds rounding at the top)
    row = tl.program_id(0).to(tl.int64)
    samples = tl.program_id(1) * BLOCK_S + tl.arange(0, BLOCK_S)
    cats = tl.arange(0, BLOCK_C)
    acc = tl.full((BLOCK_C,), 0.0, tl.float32)
    last = tl.full((BLOCK_C,), -1, tl.int32)
    for start in range(0, C, BLOCK_C):
        w = tl.load(prob_ptr + row * prob_stride + start + cats, mask=start + cats < C, other=0.0)
        acc += w.to(tl.float32)
        last = tl.maximum(last, tl.where(w > 0, start + cats, -1))
    total = tl.sum(acc, 0)
    last_positive = tl.max(last, 0)
    u, _, _, _ = _uniform4(seed_lo, seed_hi, offset_lo, offset_hi, row * S + samples)
    target = u * total
    count = tl.full((BLOCK_S,), 0, tl.int32)
    carry = 0.0
    for start in range(0, C, BLOCK_C):
        w = tl.load(prob_ptr + row * prob_stride + start + cats, mask=start + cats < C, other=0.0)
        cdf = tl.cumsum(w.to(tl.float32), 0) + carry
        below = (cdf[None, :] <= target[:, None]) & (start + cats < C)[None, :]
        count += tl.sum(below.to(tl.int32), 1)
        carry = tl.max(cdf, 0)
    choice = tl.minimum(count, last_positive)
    tl.store(out_ptr + row * S + samples, choice.to(tl.int64), mask=samples < S)


@triton.jit
def _race_part(w_ptr, cols, C, u, best, bad):
    """One quarter of a race step: (the best packed (key, column) so far, the invalid flags)."""
    mask = cols < C
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    bad |= (mask & ((w < 0) | (w != w) | (w == float("inf")))).to(tl.int32)
    key = w / -tl.log(u)  # E = -log(u) ~ Exp(1), u in [0, 1): E in (0, inf]
    # a key >= 0 orders as its float32 bits; the low word prefers the first column on ties
    packed = (key.to(tl.int32, bitcast=True).to(tl.int64) << 32) | (0x7FFFFFFF - cols).to(tl.int64)
    return tl.maximum(best, tl.where(mask & (w > 0), packed, -1)), bad


@triton.jit(do_not_specialize=["seed_lo", "seed_hi", "offset_lo", "offset_hi"])
def _race_kernel(
    w_ptr,  # (M, C), columns contiguous
    packed_ptr,  # (M + 1,) int64, -1 at first: each row's best packed key, then the invalid flag
    M, C, stride, chunk,  # chunk: the columns of one program, a multiple of 4 * QUARTER
    seed_lo, seed_hi, offset_lo, offset_hi,
    CHECK: tl.constexpr,  # assert valid weights on the device instead of raising the flag
    QUARTER: tl.constexpr,
):
    # one draw per row as the exponential race: the category with the largest w / E, E ~ Exp(1)
    row = tl.program_id(0).to(tl.int64)
    first = tl.program_id(1).to(tl.int64) * chunk
    q = tl.arange(0, QUARTER)
    base = w_ptr + row * stride
    best = tl.full((QUARTER,), -1, tl.int64)
    bad = tl.zeros((QUARTER,), tl.int32)
    counters = row * ((C + 3) // 4)  # one Philox counter gives four values
    for start in range(first, tl.minimum(first + chunk, C), 4 * QUARTER):
        u0, u1, u2, u3 = _uniform4(seed_lo, seed_hi, offset_lo, offset_hi, counters + start // 4 + q)
        cols = start + q
        best, bad = _race_part(base, cols, C, u0, best, bad)
        best, bad = _race_part(base, cols + QUARTER, C, u1, best, bad)
        best, bad = _race_part(base, cols + 2 * QUARTER, C, u2, best, bad)
        best, bad = _race_part(base, cols + 3 * QUARTER, C, u3, best, bad)
    tl.atomic_max(packed_ptr + row, tl.max(best, 0))
    if CHECK:
        tl.device_assert(tl.max(bad, 0) == 0, "multinomial: probability tensor contains either inf, nan or element < 0")
    else:
        tl.atomic_max(packed_ptr + M, tl.max(bad, 0).to(tl.int64))


@triton.jit
def _race_result_kernel(packed_ptr, out_ptr, M, CHECK: tl.constexpr, BLOCK: tl.constexpr):
    # each row's column from its packed key; a row with no positive weight is invalid
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = rows < M
    packed = tl.load(packed_ptr + rows, mask=mask, other=0)
    tl.store(out_ptr + rows, 0x7FFFFFFF - (packed & 0xFFFFFFFF), mask=mask)
    if CHECK:
        tl.device_assert((packed >= 0) | ~mask, "multinomial: invalid distribution (sum of probabilities <= 0)")
    else:
        tl.atomic_max(packed_ptr + M, tl.max((mask & (packed < 0)).to(tl.int64), 0))


@pointwise(kind="DEFAULT", promote=(0,), extras=("scale",))
@triton.jit
def _masked_scale(grad, mask, scale):
    # dx = dy * mask * scale
    return grad * mask.to(grad.dtype) * scale


_fill = LaunchCache(_fill_kernel, name="random_fill")
_dropout = LaunchCache(_dropout_kernel, name="dropout")
_multinomial = LaunchCache(_multinomial_kernel, name="multinomial")
_race = LaunchCache(_race_kernel, name="multinomial_race")
_race_result = LaunchCache(_race_result_kernel, name="multinomial_race_result")
_QUARTER = 256  # columns per quarter of a race step (a step draws four quarters)


def _one_draw(rows: torch.Tensor, generator: Any) -> torch.Tensor | None:
    """One category per row of the weights ``rows`` (M, C) by the exponential race, as an
    (M, 1) int64 tensor: one pass over the weights, split among programs that fill the chip.
    A weight that is negative, infinite or NaN, or a row with no positive weight, is an
    assertion on the device where indices are checked there (as ATen's CUDA kernels assert:
    no host synchronization); elsewhere a flag read back gives None, and ATen raises its
    error."""
    m, c = rows.shape
    rows = rows if rows.stride(-1) == 1 else rows.contiguous()
    step = 4 * _QUARTER
    programs = 4 * runtime.compute_units(rows.device.type, rows.device.index)
    splits = max(1, min(cdiv(c, step), cdiv(programs, m)))
    chunk = cdiv(cdiv(c, splits), step) * step
    packed = torch.empty(m + 1, dtype=torch.int64, device=rows.device)
    fill_tensor(packed, -1)
    state = philox_state(rows.device, m * cdiv(c, 4) * 4, generator)
    host = host_checks_indices(rows.device)
    check: dict[str, Any] = {"CHECK": not host, "options": {} if host else device_check_options({})}
    _race((m, cdiv(c, chunk)), rows, packed, m, c, rows.stride(0), chunk, *state, QUARTER=_QUARTER, **check)
    out = torch.empty((m, 1), dtype=torch.int64, device=rows.device)
    block = min(1024, next_power_of_2(m))
    _race_result((cdiv(m, block),), packed, out, m, BLOCK=block, **check)
    return None if host and int(packed[m]) > 0 else out


def philox_state(device: torch.device, counters: int, generator: torch.Generator | None) -> tuple[int, ...]:
    """(seed_lo, seed_hi, offset_lo, offset_hi) for a launch that uses ``counters`` Philox
    counters on ``device``: the kernels' 32-bit halves (:func:`_uniform4`). Under the native
    layer's recording, a draw from the device's default generator is noted for the recipe,
    which draws anew on every replay (``recording.philox``); any other makes the call
    unrepeatable."""
    seed, offset, by_offset = _seed_and_offset(device, counters, generator)
    words = _halves(seed, offset)
    if recording.native is not None:
        if by_offset and recording.philox is not None and (
                generator is None or generator is _default_generator(generator.device)):
            recording.philox.append((words, counters))
        else:
            recording.impure = True
    return words


def _halves(seed: int, offset: int) -> tuple[int, int, int, int]:
    """The low and high 32-bit words of the 64-bit seed and offset, each as the int32 of
    the same bits (an int argument at or past 2^31 would be passed as a 64-bit one)."""

    def signed(word: int) -> int:
        return word - (1 << 32) if word >= 1 << 31 else word

    seed, offset = seed & (2**64 - 1), offset & (2**64 - 1)
    return (signed(seed & 0xFFFFFFFF), signed(seed >> 32), signed(offset & 0xFFFFFFFF), signed(offset >> 32))


#: gems' draws read and advance a device generator's offset under this lock, so that calls in
#: several threads never take the same counters (ATen's own draws hold the generator's mutex)
_offsets = threading.Lock()


def _seed_and_offset(device: torch.device, counters: int, generator: torch.Generator | None
                     ) -> tuple[int, int, bool]:
    """(seed, offset, whether the generator's offset was advanced) for a launch that uses
    ``counters`` Philox counters on ``device``: a device generator's offset is read and
    advanced under the generator's own mutex where the native layer is loaded (its replays
    draw so too, as ATen's draws do), else under :data:`_offsets`; a generator without an
    offset (the CPU's) gives a seed drawn from it and offset 0."""
    gen = generator if generator is not None else _default_generator(device)
    if gen.device.type != "cpu":
        layer = native.loaded()
        try:
            if layer is not None and isinstance(gen, torch.Generator):
                seed, offset = layer.philox_advance(gen, counters)
                return seed, offset, True
            with _offsets:
                offset = gen.get_offset()
                gen.set_offset(offset + (counters + 3) // 4 * 4)
            return gen.initial_seed(), offset, True
        except (RuntimeError, AttributeError):
            pass
    seed = torch.randint(0, 2**62, (), generator=gen, dtype=torch.int64, device=gen.device)
    return int(seed), 0, False


def _default_generator(device: torch.device) -> torch.Generator:
    if device.type != "cpu":
        generators = getattr(getattr(torch, device.type, None), "default_generators", None)
        if generators:
            index = device.index if device.index is not None else torch.get_device_module(device).current_device()
            return generators[index]
    return torch.default_generator


def _fill_(self: torch.Tensor, dist: int, a: float, b: float, generator: torch.Generator | None) -> Any:
    if self.dtype not in _FLOATS:
        return NotImplemented
    n = self.numel()
    if n == 0:
        return self
    target = self if self.is_contiguous() else torch.empty(self.shape, dtype=self.dtype, device=self.device)
    programs = cdiv(n, 4 * _BLOCK)
    state = philox_state(self.device, programs * _BLOCK, generator)
    _fill((programs,), target, n, *state, float(a), float(b), DIST=dist, BLOCK=_BLOCK)
    if target is not self:
        self.copy_(target)
    return self


@aten_op("uniform_", native=False)
def uniform_(self: torch.Tensor, from_: float = 0.0, to: float = 1.0, *, generator: Any = None) -> Any:
    """Fill with U[from, to); the factories ``rand`` and ``rand_like`` come here."""
    if self.dtype not in _FLOATS:
        return NotImplemented
    limit = torch.finfo(self.dtype).max
    if not (-limit <= from_ <= to <= limit and to - from_ <= limit):
        return NotImplemented  # ATen raises its own error (reversed, infinite, NaN, too wide)
    return _fill_(self, UNIFORM, from_, to, generator)


@aten_op("normal_", native=False)
def normal_(self: torch.Tensor, mean: float = 0.0, std: float = 1.0, *, generator: Any = None) -> Any:
    """Fill with N(mean, std^2) (Box-Muller on Philox pairs); ``randn``, ``randn_like`` and
    ``normal(float, float, size)`` come here."""
    if not std >= 0:
        return NotImplemented
    return _fill_(self, NORMAL, mean, std, generator)


@aten_op("exponential_", native=False)
def exponential_(self: torch.Tensor, lambd: float = 1.0, *, generator: Any = None) -> Any:
    """Fill with Exp(lambd): -log(1 - u) / lambd."""
    if not lambd > 0:
        return NotImplemented
    return _fill_(self, EXPONENTIAL, lambd, 0.0, generator)


@aten_op("bernoulli_.float", native=False)
def bernoulli_(self: torch.Tensor, p: float = 0.5, *, generator: Any = None) -> Any:
    """Fill with 1 where u < p, else 0 (floating tensors; others go to ATen)."""
    if not 0 <= p <= 1:
        return NotImplemented
    return _fill_(self, BERNOULLI, p, 0.0, generator)


def _standard_normal(shape: torch.Size, like: torch.Tensor, generator: Any) -> Any:
    noise = torch.empty(shape, dtype=like.dtype, device=like.device)
    return _fill_(noise, NORMAL, 0.0, 1.0, generator)


@aten_op("normal.Tensor_float", native=False)
def normal_tensor_float(mean: torch.Tensor, std: float = 1.0, *, generator: Any = None) -> Any:
    """mean + std * N(0, 1), shaped like ``mean``."""
    if not std >= 0 or mean.dtype not in _FLOATS:
        return NotImplemented
    noise = _standard_normal(mean.shape, mean, generator)
    return noise if noise is NotImplemented else noise.mul_(std).add_(mean)


@aten_op("normal.float_Tensor", native=False)
def normal_float_tensor(mean: float, std: torch.Tensor, *, generator: Any = None) -> Any:
    """mean + std * N(0, 1), shaped like ``std``."""
    if std.dtype not in _FLOATS or bool((std < 0).any()):
        return NotImplemented
    noise = _standard_normal(std.shape, std, generator)
    return noise if noise is NotImplemented else noise.mul_(std).add_(mean)


@aten_op("normal.Tensor_Tensor", native=False)
def normal_tensor_tensor(mean: torch.Tensor, std: torch.Tensor, *, generator: Any = None) -> Any:
    """mean + std * N(0, 1), ``mean`` and ``std`` broadcast."""
    if mean.dtype not in _FLOATS or std.dtype != mean.dtype or bool((std < 0).any()):
        return NotImplemented
    noise = _standard_normal(torch.broadcast_shapes(mean.shape, std.shape), mean, generator)
    return noise if noise is NotImplemented else noise.mul_(std).add_(mean)


@aten_op("multinomial", native=False)
def multinomial(self: torch.Tensor, num_samples: int, replacement: bool = False, *, generator: Any = None) -> Any:
    """Category indices drawn from the rows of ``self`` (weights, not necessarily normalized).
    One draw (the sampling step of a generation): the exponential race, argmax of w / E with
    E ~ Exp(1), fused into one pass. More with replacement: inverse CDF. Without: the
    ``num_samples`` largest w / E, in that order. Invalid weights go to ATen, which raises."""
    if self.dim() not in (1, 2) or self.dtype not in _FLOATS or num_samples <= 0:
        return NotImplemented
    rows = self if self.dim() == 2 else self.unsqueeze(0)
    m, c = rows.shape
    if m == 0 or c == 0:
        return NotImplemented
    if num_samples == 1:  # (with or without replacement, one draw is the same)
        out = _one_draw(rows, generator)
        if out is None:
            return NotImplemented
        return out if self.dim() == 2 else out.view(1)
    if not bool(torch.isfinite(rows).all()) or bool((rows < 0).any()):
        return NotImplemented
    if bool((rows.sum(-1) <= 0).any()):
        return NotImplemented
    if not replacement:
        if num_samples > c or bool(((rows > 0).sum(-1) < num_samples).any()):
            return NotImplemented
        race = torch.empty(rows.shape, dtype=torch.float32, device=rows.device)
        _fill_(race, EXPONENTIAL, 1.0, 0.0, generator)
        out = torch.topk(rows.float() / race, num_samples, dim=-1).indices
    else:
        rows = rows if rows.stride(-1) == 1 else rows.contiguous()
        out = torch.empty((m, num_samples), dtype=torch.int64, device=rows.device)
        block_c = min(256, next_power_of_2(c))
        block_s = min(next_power_of_2(num_samples), max(16, _TILE // block_c))
        state = philox_state(rows.device, m * num_samples, generator)
        _multinomial((m, cdiv(num_samples, block_s)), rows, out, c, num_samples, rows.stride(0),
                     *state, BLOCK_S=block_s, BLOCK_C=block_c)
    return out if self.dim() == 2 else out.squeeze(0)


@aten_op("native_dropout")
def native_dropout(input: torch.Tensor, p: float, train: bool | None) -> Any:
    """(output, mask): mask is True with probability 1 - p, output = input * mask / (1 - p)
    (0 where p = 1). Not training: (a copy of input, all True). The native layer replays
    repeated calls, drawing the Philox counters of each from the device's default generator
    as this does (:func:`philox_state`)."""
    if input.dtype not in _FLOATS or input.numel() == 0:
        return NotImplemented
    if train is not None and not train:
        return input.clone(), torch.ones_like(input, dtype=torch.bool)
    x = input.contiguous()
    out = torch.empty_like(x)
    mask = torch.empty(x.shape, dtype=torch.bool, device=x.device)
    n = x.numel()
    scale = 0.0 if p == 1 else 1.0 / (1.0 - p)
    _dropout((cdiv(n, _BLOCK),), x, out, mask, n, float(p), scale, *philox_state(x.device, n, None), BLOCK=_BLOCK)
    return out, mask


@aten_op("native_dropout_backward")
def native_dropout_backward(grad_output: torch.Tensor, mask: torch.Tensor, scale: float) -> Any:
    """grad_output * mask * scale: the same mask the forward drew."""
    if mask.dtype != torch.bool or grad_output.dtype not in _FLOATS or mask.shape != grad_output.shape:
        return NotImplemented
    return _masked_scale(grad_output, mask, scale=float(scale))


@aten_op("dropout", autograd=True, native=False)
def dropout(input: torch.Tensor, p: float, train: bool) -> Any:
    """``F.dropout``: ATen's composite takes native_dropout only on accelerators; here it does
    on every backend (with its autograd formula, so the backward reuses the mask). p = 0, 1,
    eval and empty inputs keep ATen's composite."""
    if not train or not 0 < p < 1 or input.numel() == 0 or input.dtype not in _FLOATS:
        return NotImplemented
    return torch.native_dropout(input, p, True)[0]
