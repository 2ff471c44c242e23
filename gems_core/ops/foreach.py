"""The ``_foreach_*`` ops an optimizer step issues (``torch.optim.Adam/AdamW/SGD(foreach=True)``,
gradient clipping): each call is one launch over every tensor of its lists.

The launch reads the tensors' addresses from a device table (:func:`.optimizer.address_table`:
rows out, self, other, third; one column per tensor), one program per chunk of each tensor, and applies
one of the elementwise rules below in float32 with a number that is either the call's (Scalar
overloads, ``alpha``) or the tensor's own (ScalarList overloads, one float per tensor read
from a small device table):

    add: a + s b (a + s without b)    sub: a - s b    mul: a * b (or s)    div: a / b (or s)
    lerp: a + s (b - a), from the nearer end    addcmul: a + s b c    addcdiv: a + s b / c
    maximum, minimum: NaN-propagating    sqrt, neg, abs, exp, reciprocal, zero: of a

Lists of one floating dtype (float32, bfloat16, float16), dense, on one device, of
matching sizes are served; any other call (integer or float64 lists, mixed dtypes) goes to
ATen whole. A ``Tensor`` scalar (0-d) on the lists' device is read by the kernel, so the host
never waits for its value (gradient clipping multiplies every gradient by such a tensor). The
ops are registered ``native=False``: a launch reads addresses from a table the call's
arguments do not show, so it cannot be replayed for other tensors of the same shapes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import triton
import triton.language as tl

from .. import native, tuning
from ..codegen.overlap import dense
from ..codegen.pointwise import TL_DTYPES
from ..launch_cache import LaunchCache
from ..registry import aten_op
from .optimizer import address_table, addresses, row_pointer, upload, work_item

_BLOCK = 1024
_CHUNK = 4 * _BLOCK
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@triton.jit
def _foreach_kernel(
    table,  # (4, T) int64: addresses of out, a, b, c per tensor
    sizes,  # (T,) int64
    work,  # one int64 a program (optimizer.address_table)
    scalars,  # (T,) float32: each tensor's number when PER_TENSOR; a 0-d tensor when AT_SCALAR
    T,
    s,  # the call's number (Scalar overloads, alpha)
    OP: tl.constexpr,
    HAS_B: tl.constexpr,
    PER_TENSOR: tl.constexpr,
    AT_SCALAR: tl.constexpr,  # the number is s times the value of a 0-d tensor on the device
    DTYPE: tl.constexpr,
    ALIGNED: tl.constexpr,  # every address of the table a multiple of 16 bytes
    CHUNK: tl.constexpr,
    BLOCK: tl.constexpr,
):
    t, start = work_item(work, CHUNK)
    n = tl.load(sizes + t)
    out = row_pointer(table, T, t, 0, DTYPE, ALIGNED)
    a_ptr = row_pointer(table, T, t, 1, DTYPE, ALIGNED)
    b_ptr = row_pointer(table, T, t, 2, DTYPE, ALIGNED)
    c_ptr = row_pointer(table, T, t, 3, DTYPE, ALIGNED)
    if PER_TENSOR:
        s = tl.load(scalars + t)
    if AT_SCALAR:
        s = s * tl.load(scalars).to(tl.float32)
    for i in range(0, CHUNK, BLOCK):
        offs = start + i + tl.arange(0, BLOCK)
        mask = offs < n
        a = tl.load(a_ptr + offs, mask=mask).to(tl.float32)
        if HAS_B:
            b = tl.load(b_ptr + offs, mask=mask).to(tl.float32)
        else:
            b = tl.full((BLOCK,), s, tl.float32)
        if OP == "add":
            if HAS_B:
                r = a + s * b
            else:
                r = a + b
        elif OP == "sub":
            if HAS_B:
                r = a - s * b
            else:
                r = a - b
        elif OP == "mul":
            r = a * b
        elif OP == "div":
            r = a / b
        elif OP == "lerp":
            d = b - a
            r = tl.where(tl.abs(s) < 0.5, a + s * d, b - d * (1.0 - s))
        elif OP == "addcmul":
            c = tl.load(c_ptr + offs, mask=mask).to(tl.float32)
            r = a + s * b * c
        elif OP == "addcdiv":
            c = tl.load(c_ptr + offs, mask=mask).to(tl.float32)
            r = a + s * (b / c)
        elif OP == "maximum":
            r = tl.where((a > b) | (a != a), a, b)
            r = tl.where(b != b, b, r)
        elif OP == "minimum":
            r = tl.where((a < b) | (a != a), a, b)
            r = tl.where(b != b, b, r)
        elif OP == "sqrt":
            r = tl.sqrt_rn(a)
        elif OP == "neg":
            r = -a
        elif OP == "abs":
            r = tl.abs(a)
        elif OP == "exp":
            r = tl.exp(a)
        elif OP == "reciprocal":
            r = 1.0 / a
        else:  # zero
            r = tl.zeros((BLOCK,), tl.float32)
        tl.store(out + offs, r.to(DTYPE), mask=mask)


_launch = LaunchCache(_foreach_kernel, name="foreach")


def _servable(lists: Sequence[Sequence[torch.Tensor]]) -> bool:
    """One dtype gems computes, one device, tensors dense without overlap (contiguous, or
    channels-last as a convolution's weight is), each list's shapes the first's (ATen refuses
    others, even of equal element counts) and each tensor's layout its first list's tensor's
    (the same strides, or both contiguous), so that the kernel, which runs over each tensor's
    memory, pairs the same elements. An optimizer step checks several lists of hundreds of
    tensors per call, so the checks are comprehensions over cheap accessors (the device's
    index, not a device object per tensor; its type once a list)."""
    first = lists[0]
    if not first or first[0].dtype not in _DTYPES:
        return False
    dtype, device = first[0].dtype, first[0].device
    index = first[0].get_device()
    shapes = [t.shape for t in first]
    plain = [t.is_contiguous() for t in first]
    for row in lists:
        if len(row) != len(shapes) or row[0].device.type != device.type:
            return False
        if row is not first and [t.shape for t in row] != shapes:
            return False
        if not all([t.dtype is dtype and t.get_device() == index for t in row]):
            return False
        if all(plain) and all([t.is_contiguous() for t in row]):
            continue
        if not all([dense(t)
                    and (t.stride() == f.stride() or (p and t.is_contiguous()))
                    for t, f, p in zip(row, first, plain)]):
            return False
    return True


def _checked(lists: Sequence[Sequence[torch.Tensor]]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The lists' :func:`~.optimizer.addresses` where :func:`_servable`, else None: checked in
    C++ where the native dispatch layer is loaded (the same checks, a tenth of the time)."""
    first = lists[0]
    if not first or first[0].dtype not in _DTYPES:
        return None
    layer = native.loaded()
    if layer is not None:
        return layer.foreach_addresses(lists)
    return addresses(lists) if _servable(lists) else None


#: page-locked sources of per-tensor scalars uploaded while a CUDA graph was captured
_CAPTURED: list[torch.Tensor] = []


def _apply(op: str, out: list[torch.Tensor] | None, inputs: list[list[torch.Tensor]], number: Any = 1.0,
           per_tensor: Sequence[Any] | None = None, at: torch.Tensor | None = None) -> Any:
    """Launch ``op`` over the lists (``inputs``: self, then up to two more lists), writing
    ``out`` (None: new tensors like self's, made once the lists pass); NotImplemented where
    the lists are not served. ``at``: a 0-d tensor on the lists' device whose value, read by
    the kernel, multiplies ``number``."""
    checked = _checked(inputs if out is None else [out, *inputs])
    if checked is None or (per_tensor is not None and len(per_tensor) != len(inputs[0])):
        return NotImplemented
    if isinstance(number, complex) or any(isinstance(v, complex) for v in per_tensor or ()):
        return NotImplemented
    pointers, counts = checked
    if out is None:  # tensors of self's sizes, strides, dtype and device: they pass too
        out = [torch.empty_like(t) for t in inputs[0]]
        pointers = tuple([t.data_ptr() for t in out]) + pointers
    rows = [out, *inputs]
    device = out[0].device
    pad = 4 - len(rows)  # the unused rows repeat self's
    pointers += pointers[len(out):2 * len(out)] * pad
    table, sizes, work, aligned = address_table(rows + [inputs[0]] * pad, device, _CHUNK, (pointers, counts))
    scalars = sizes
    if per_tensor is not None:
        # from page-locked memory behind the queued work: a pageable copy would stall the host
        scalars, host = upload(torch.tensor([float(v) for v in per_tensor], dtype=torch.float32), device)
        if tuning.capturing():
            _CAPTURED.append(host)  # a captured copy reads its source again at every replay
    if at is not None:
        scalars = at
    if work.numel():
        _launch((work.numel(),), table, sizes, work, scalars, len(out), float(number), OP=op,
                HAS_B=len(inputs) > 1, PER_TENSOR=per_tensor is not None, AT_SCALAR=at is not None,
                DTYPE=TL_DTYPES[out[0].dtype], ALIGNED=aligned, CHUNK=_CHUNK, BLOCK=_BLOCK)
    return out


def _inplace(op: str, self: list[torch.Tensor], *others: list[torch.Tensor], number: Any = 1.0,
             per_tensor: Sequence[Any] | None = None, at: torch.Tensor | None = None) -> Any:
    result = _apply(op, self, [self, *others], number, per_tensor, at)
    return NotImplemented if result is NotImplemented else None


def _functional(op: str, self: list[torch.Tensor], *others: list[torch.Tensor], number: Any = 1.0,
                per_tensor: Sequence[Any] | None = None, at: torch.Tensor | None = None) -> Any:
    return _apply(op, None, [self, *others], number, per_tensor, at)


def _tensor_scalar(other: torch.Tensor, alpha: Any, self: list[torch.Tensor]) -> tuple[Any, Any] | None:
    """A 0-d ``Tensor`` scalar as (number, tensor the kernel reads or None). On the lists'
    device the kernel reads its value when it runs, as ATen's does: the host never waits,
    and a CUDA graph's replay sees the value of its time (gradient clipping's coefficient).
    On the CPU beside device lists, its value times alpha. None for a tensor that is not
    0-d, is complex or is on another device (ATen then raises or serves it)."""
    if other.dim() != 0 or other.is_complex() or not self:
        return None
    if other.device == self[0].device:
        return alpha, other
    if other.device.type == "cpu":
        return other.item() * alpha, None
    return None


def _register_binary(op: str) -> None:
    """``_foreach_<op>`` and ``_foreach_<op>_`` with their List, Scalar, ScalarList and
    Tensor (a 0-d number) overloads; List and Tensor ones take ``alpha`` for add and sub."""
    scaled = op in ("add", "sub")

    def list_(self: list[torch.Tensor], other: list[torch.Tensor], *, alpha: Any = 1) -> Any:
        return _inplace(op, self, other, number=alpha)

    def list_out(self: list[torch.Tensor], other: list[torch.Tensor], *, alpha: Any = 1) -> Any:
        return _functional(op, self, other, number=alpha)

    def scalar_(self: list[torch.Tensor], scalar: Any) -> Any:
        return _inplace(op, self, number=scalar)

    def scalar_out(self: list[torch.Tensor], scalar: Any) -> Any:
        return _functional(op, self, number=scalar)

    def scalars_(self: list[torch.Tensor], scalars: list[Any]) -> Any:
        return _inplace(op, self, per_tensor=scalars)

    def scalars_out(self: list[torch.Tensor], scalars: list[Any]) -> Any:
        return _functional(op, self, per_tensor=scalars)

    def tensor_(self: list[torch.Tensor], other: torch.Tensor, *, alpha: Any = 1) -> Any:
        scalar = _tensor_scalar(other, alpha, self)
        return NotImplemented if scalar is None else _inplace(op, self, number=scalar[0], at=scalar[1])

    def tensor_out(self: list[torch.Tensor], other: torch.Tensor, *, alpha: Any = 1) -> Any:
        scalar = _tensor_scalar(other, alpha, self)
        return NotImplemented if scalar is None else _functional(op, self, number=scalar[0], at=scalar[1])

    variants = [(scalar_, "_.Scalar"), (scalar_out, ".Scalar"), (scalars_, "_.ScalarList"),
                (scalars_out, ".ScalarList")]
    if op != "sub":  # ATen has no _foreach_sub.Tensor
        variants += [(tensor_, "_.Tensor"), (tensor_out, ".Tensor")]
    if scaled:
        variants += [(list_, "_.List"), (list_out, ".List")]
    else:
        variants += [(lambda self, other, f=list_: f(self, other), "_.List"),
                     (lambda self, other, f=list_out: f(self, other), ".List")]
    for fn, suffix in variants:
        name = f"_foreach_{op}{suffix}"
        fn.__name__ = fn.__qualname__ = name.replace(".", "_")
        fn.__doc__ = f"_foreach_{op} over a tensor list, in one launch."
        aten_op(name, native=False)(fn)


def _register(name: str, op: str, overloads: Sequence[str], body: Any) -> None:
    for overload in overloads:
        def fn(*args: Any, _body: Any = body, **kwargs: Any) -> Any:
            return _body(*args, **kwargs)

        fn.__name__ = fn.__qualname__ = f"{name}_{overload}".replace(".", "_")
        fn.__doc__ = f"{name} ({op}) over tensor lists, in one launch."
        aten_op(f"{name}{overload}", native=False)(fn)


for _op in ("add", "sub", "mul", "div"):
    _register_binary(_op)
for _op in ("maximum", "minimum"):
    _register(f"_foreach_{_op}", _op, ("_.List",), lambda self, other, o=_op: _inplace(o, self, other))
    _register(f"_foreach_{_op}", _op, (".List",), lambda self, other, o=_op: _functional(o, self, other))
    _register(f"_foreach_{_op}", _op, ("_.Scalar",), lambda self, s, o=_op: _inplace(o, self, number=s))
    _register(f"_foreach_{_op}", _op, (".Scalar",), lambda self, s, o=_op: _functional(o, self, number=s))
for _op in ("sqrt", "neg", "abs", "exp", "reciprocal"):
    _register(f"_foreach_{_op}", _op, ("_",), lambda self, o=_op: _inplace(o, self))
    _register(f"_foreach_{_op}", _op, ("",), lambda self, o=_op: _functional(o, self))
_register("_foreach_zero", "zero", ("_",), lambda self: _inplace("zero", self))
_register("_foreach_lerp", "lerp", ("_.Scalar",), lambda self, end, weight: _inplace("lerp", self, end, number=weight))
_register("_foreach_lerp", "lerp", (".Scalar",),
          lambda self, end, weight: _functional("lerp", self, end, number=weight))
_register("_foreach_lerp", "lerp", ("_.ScalarList",),
          lambda self, end, weight: _inplace("lerp", self, end, per_tensor=weight))
_register("_foreach_lerp", "lerp", (".ScalarList",),
          lambda self, end, weight: _functional("lerp", self, end, per_tensor=weight))
for _op in ("addcmul", "addcdiv"):
    _register(f"_foreach_{_op}", _op, ("_.Scalar",),
              lambda self, t1, t2, value=1, o=_op: _inplace(o, self, t1, t2, number=value))
    _register(f"_foreach_{_op}", _op, (".Scalar",),
              lambda self, t1, t2, value=1, o=_op: _functional(o, self, t1, t2, number=value))
    _register(f"_foreach_{_op}", _op, ("_.ScalarList",),
              lambda self, t1, t2, scalars, o=_op: _inplace(o, self, t1, t2, per_tensor=scalars))
    _register(f"_foreach_{_op}", _op, (".ScalarList",),
              lambda self, t1, t2, scalars, o=_op: _functional(o, self, t1, t2, per_tensor=scalars))
