"""The semantics tier: ATen's behaviour on bad and edge input, call by call.

Where the accuracy tier holds results against a float64 reference, this tier holds each call
against ATen itself on the same device: the same exception type where ATen raises (or a
subclass of it: what catches ATen's catches gems'), else the same result dtype and shape, NaN
and infinities in the same places, and values within the dtype's tolerance (exact for
integers and bools, and bit for bit where both round one exact value). A call whose result is compared must be
served by gems (else it FAILs, or is a FALLBACK where the backend gates the op to ATen); a
call ATen refuses may reach ATen (gems declining it is how ATen's own error is raised).

Calls are grouped in sample classes (:data:`GROUPS`), one job each: writes to memory that
overlaps itself or an input, ``out=`` arguments, bool and integer overflow, numbers that do
not fit, NaN and infinities, alpha/beta = 0, bad indices, random-fill bounds, rounding to
half types, and sizes past 2^31 elements (skipped where the device lacks the memory, and on the CPU interpreter).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

import gems_core
from gems_core import runtime

from . import records as R
from .records import Record
from .routing import RouteWatch, implementations
from .samples import make_tensor
from .tolerances import tolerance

NAN = float("nan")
INF = float("inf")


@dataclass(frozen=True)
class SemanticCase:
    name: str
    group: str
    #: ATen overloads the call reaches (routing checks and gates are decided by these)
    aten: tuple[str, ...]
    #: makes the inputs on the device and returns the call on them: made once for ATen's
    #: run and once for gems', before gems is switched on (an in-place call mutates them)
    make: Callable[[torch.device], Callable[[], Any]]
    dtype: str = "float32"
    #: the reduction length, which scales the tolerance of a float result
    length: int = 1
    #: bytes of device memory the call needs (a case past 2^31 elements)
    needs_bytes: int = 0
    #: float results bit for bit (each element one correctly rounded operation)
    exact: bool = False
    #: the device types the call is checked on (ATen's CPU kernels check indices on the host,
    #: its GPU kernels on the device); ("not cpu",): a call that needs a second device
    devices: tuple[str, ...] = ()


_CASES: list[SemanticCase] = []


def case(name: str, group: str, aten: tuple[str, ...], make: Callable[[torch.device], Callable[[], Any]],
         **kw: Any) -> None:
    _CASES.append(SemanticCase(name, group, aten, make, **kw))


def _on(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[[], Any]:
    """The call ``fn(*args, **kwargs)``, its inputs made now (before gems is switched on)."""
    return lambda: fn(*args, **kwargs)


def _t(values: Any, d: torch.device, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype, device=d)


def _rand(d: torch.device, *shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    return make_tensor(shape, dtype, d, seed)


def _with_specials(d: torch.device, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """(4, 6) random rows; row 1 holds a NaN, row 2 an inf and a -inf, row 3 only -inf."""
    x = make_tensor((4, 6), dtype, d, seed=1)
    x[1, 2] = NAN
    x[2, 0], x[2, 4] = INF, -INF
    x[3] = -INF
    return x


# --- writes to memory that overlaps itself or an input --------------------------------------
OVERLAP = "overlapping writes"
T = torch.Tensor
case("add_ expanded", OVERLAP, ("add_.Tensor", "add_.Scalar"),
     lambda d: _on(T.add_, _rand(d, 1, 3).expand(2, 3), 1))
case("mul_ expanded", OVERLAP, ("mul_.Tensor", "mul_.Scalar"),
     lambda d: _on(T.mul_, _rand(d, 1, 3).expand(2, 3), _rand(d, 2, 3)))
case("exp_ expanded", OVERLAP, ("exp_",), lambda d: _on(T.exp_, _rand(d, 3, 1).expand(3, 4)))
case("clamp_ expanded", OVERLAP, ("clamp_",), lambda d: _on(T.clamp_, _rand(d, 1, 5).expand(3, 5), -1, 1))
case("add out= expanded", OVERLAP, ("add.out",),
     lambda d: _on(torch.add, _rand(d, 2, 3), 1, out=_rand(d, 1, 3).expand(2, 3)))
case("add out= partly overlapping an input", OVERLAP, ("add.out",),
     lambda d: (lambda b: _on(torch.add, b[:4], 1, out=b[1:5]))(_rand(d, 6)))
case("add_ reading a shifted view of itself", OVERLAP, ("add_.Tensor",),
     lambda d: (lambda b: _on(T.add_, b[1:], b[:-1]))(_rand(d, 8)))
case("add_ of itself", OVERLAP, ("add_.Tensor",), lambda d: (lambda b: _on(T.add_, b, b))(_rand(d, 3, 5)))
case("mul out= the input itself", OVERLAP, ("mul.out",),
     lambda d: (lambda b: _on(torch.mul, b, 3, out=b))(_rand(d, 4, 5)))
case("index_select out=self", OVERLAP, ("index_select.out",),
     lambda d: (lambda x: _on(torch.index_select, x, 0, _t([1, 0], d, torch.int64), out=x))(_rand(d, 2, 3)))
case("masked_fill_ of an expanded view", OVERLAP, ("masked_fill_.Scalar",),
     lambda d: _on(T.masked_fill_, torch.zeros(1, 3, device=d).expand(2, 3), _t([True, False, True], d, torch.bool), 2.0))
case("copy_ into an expanded view", OVERLAP, ("copy_",),
     lambda d: _on(T.copy_, _rand(d, 1, 3).expand(2, 3), _rand(d, 2, 3, seed=1)))
case("copy_ from a partly overlapping view", OVERLAP, ("copy_",),
     lambda d: (lambda b: _on(T.copy_, b[1:5], b[:4]))(_rand(d, 6)))

# --- out= arguments ---------------------------------------------------------------------
OUT = "out= arguments"
case("add out= of a dtype the result cannot cast to", OUT, ("add.out",),
     lambda d: _on(torch.add, _rand(d, 3), 1.5, out=torch.empty(3, dtype=torch.int32, device=d)))
case("add out= that is an input and must grow", OUT, ("add.out",),
     lambda d: (lambda a: _on(torch.add, a, _rand(d, 3, 4), out=a))(_rand(d, 3, 1)))
case("add out= of another shape is resized", OUT, ("add.out",),
     lambda d: _on(torch.add, _rand(d, 3, 4), _rand(d, 4, seed=1), out=torch.empty(0, device=d)))
case("add out= of a wider dtype", OUT, ("add.out",),
     lambda d: _on(torch.add, _rand(d, 3, 4), 1, out=torch.empty(3, 4, dtype=torch.float64, device=d)))
case("_softmax.out of another dtype", OUT, ("_softmax.out",),
     lambda d: _on(torch._softmax, _rand(d, 2, 5), 1, False,
                   out=torch.empty(2, 5, dtype=torch.float64, device=d)))
case("_log_softmax.out of another dtype", OUT, ("_log_softmax.out",),
     lambda d: _on(torch._log_softmax, _rand(d, 2, 5), 1, False,
                   out=torch.empty(2, 5, dtype=torch.float16, device=d)))
case("add out= on another device", OUT, ("add.out",),
     lambda d: _on(torch.add, _rand(d, 3), 1, out=torch.empty(3)), devices=("not cpu",))

# --- bool and integer overflow ----------------------------------------------------------
OVERFLOW = "bool and integer overflow"
BOOLS = ([True, True, False, False], [True, False, True, False])


def _bools(d: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    return _t(BOOLS[0], d, torch.bool), _t(BOOLS[1], d, torch.bool)


case("bool + bool", OVERFLOW, ("add.Tensor",), lambda d: _on(torch.add, *_bools(d)), dtype="bool")
case("bool add_ bool", OVERFLOW, ("add_.Tensor",), lambda d: _on(T.add_, *_bools(d)), dtype="bool")
case("bool add alpha=True", OVERFLOW, ("add.Tensor",),
     lambda d: _on(torch.add, *_bools(d), alpha=True), dtype="bool")
case("bool add alpha=0", OVERFLOW, ("add.Tensor",), lambda d: _on(torch.add, *_bools(d), alpha=0), dtype="bool")
case("float add alpha=True", OVERFLOW, ("add.Tensor",),
     lambda d: _on(torch.add, _rand(d, 3), _rand(d, 3, seed=1), alpha=True))
case("int add alpha=0.5", OVERFLOW, ("add.Tensor",),
     lambda d: _on(torch.add, _t([1, 2], d, torch.int32), _t([1, 2], d, torch.int32), alpha=0.5), dtype="int32")
case("int8 add wraps", OVERFLOW, ("add.Tensor",),
     lambda d: _on(torch.add, _t([100, -100, 127], d, torch.int8), _t([100, -100, 1], d, torch.int8)), dtype="int8")
case("uint8 sub wraps", OVERFLOW, ("sub.Tensor",),
     lambda d: _on(torch.sub, _t([1, 0, 200], d, torch.uint8), _t([2, 1, 100], d, torch.uint8)), dtype="uint8")
case("int32 mul wraps", OVERFLOW, ("mul.Tensor",),
     lambda d: _on(torch.mul, _t([2**30, -(2**30), 3], d, torch.int32), 4), dtype="int32")
case("int8 sum in int64", OVERFLOW, ("sum",),
     lambda d: _on(torch.sum, _t([127] * 300, d, torch.int8)), dtype="int8")
case("bool sum in int64", OVERFLOW, ("sum.dim_IntList",),
     lambda d: _on(torch.sum, _rand(d, 5, 40, dtype=torch.bool), 1), dtype="bool")
case("int8 cumsum in int64", OVERFLOW, ("cumsum",),
     lambda d: _on(torch.cumsum, _t([100] * 400, d, torch.int8), 0), dtype="int8")

# --- numbers that do not fit -----------------------------------------------------------
NUMBERS = "numbers that do not fit"
case("where(c, int8, 1000)", NUMBERS, ("where.ScalarOther",),
     lambda d: _on(torch.where, _bools(d)[0][:2], _t([1, 2], d, torch.int8), 1000), dtype="int8")
case("where(c, -129, int8)", NUMBERS, ("where.ScalarSelf",),
     lambda d: _on(torch.where, _bools(d)[0][:2], -129, _t([1, 2], d, torch.int8)), dtype="int8")
case("where(c, uint8, -1) wraps", NUMBERS, ("where.ScalarOther",),
     lambda d: _on(torch.where, _bools(d)[1][:2], _t([1, 2], d, torch.uint8), -1), dtype="uint8")
case("clamp int8 to 300", NUMBERS, ("clamp",),
     lambda d: _on(torch.clamp, _t([1, 2], d, torch.int8), 1, 300), dtype="int8")
case("int8 + 1000 wraps", NUMBERS, ("add.Tensor",),
     lambda d: _on(torch.add, _t([1, -5], d, torch.int8), 1000), dtype="int8")
case("int8 == 1000", NUMBERS, ("eq.Scalar",), lambda d: _on(torch.eq, _t([-24, 1], d, torch.int8), 1000), dtype="int8")
case("fill_ int8 with 1000", NUMBERS, ("fill_.Scalar",),
     lambda d: _on(T.fill_, torch.empty(3, dtype=torch.int8, device=d), 1000), dtype="int8")

# --- NaN and infinities in ops that compare or accumulate -------------------------------
SPECIALS = "NaN and inf"
case("clamp NaN bounds", SPECIALS, ("clamp",), lambda d: _on(torch.clamp, _t([1.0, NAN, 3.0, -INF], d), NAN, 2.0))
case("clamp NaN input", SPECIALS, ("clamp",),
     lambda d: _on(torch.clamp, _t([1.0, NAN, 3.0, -INF, INF], d), -1.0, 2.0))
case("clamp_min NaN number", SPECIALS, ("clamp_min",),
     lambda d: _on(torch.clamp_min, _t([1.0, NAN, -INF], d), NAN))
case("clamp NaN tensor bounds", SPECIALS, ("clamp.Tensor",),
     lambda d: _on(torch.clamp, _t([1.0, NAN, 3.0, 0.5], d), _t([NAN, 0.0, 0.0, 0.0], d), _t([5.0, 5.0, NAN, 0.2], d)))
case("clamp fp16 NaN bound", SPECIALS, ("clamp",),
     lambda d: _on(torch.clamp, _t([1.0, NAN, 3.0], d, torch.float16), max=NAN), dtype="float16")
case("maximum with NaN", SPECIALS, ("maximum",),
     lambda d: _on(torch.maximum, _t([1.0, NAN, INF, -INF], d), _t([NAN, 2.0, NAN, 0.0], d)))
case("minimum with NaN", SPECIALS, ("minimum",),
     lambda d: _on(torch.minimum, _t([1.0, NAN, INF, -INF], d), _t([NAN, 2.0, NAN, 0.0], d)))
case("max.dim with NaN", SPECIALS, ("max.dim",), lambda d: _on(torch.max, _with_specials(d), 1), length=6)
case("min.dim with NaN", SPECIALS, ("min.dim",), lambda d: _on(torch.min, _with_specials(d), 1), length=6)
case("amax with NaN", SPECIALS, ("amax",), lambda d: _on(torch.amax, _with_specials(d), 1), length=6)
case("argmax with NaN", SPECIALS, ("argmax",), lambda d: _on(torch.argmax, _with_specials(d), 1), length=6)
case("argmin with NaN", SPECIALS, ("argmin",), lambda d: _on(torch.argmin, _with_specials(d), 1), length=6)
case("sum with NaN and inf", SPECIALS, ("sum.dim_IntList",), lambda d: _on(torch.sum, _with_specials(d), 1), length=6)
case("mean with NaN and inf", SPECIALS, ("mean.dim",), lambda d: _on(torch.mean, _with_specials(d), 1), length=6)
case("cumsum with NaN and inf", SPECIALS, ("cumsum",), lambda d: _on(torch.cumsum, _with_specials(d), 1), length=6)
case("cumsum fp16 with inf", SPECIALS, ("cumsum",),
     lambda d: _on(torch.cumsum, _with_specials(d, torch.float16), 1), dtype="float16", length=6)
case("softmax with NaN and inf", SPECIALS, ("_softmax",),
     lambda d: _on(torch.softmax, _with_specials(d), 1), length=6)
case("log_softmax with NaN and inf", SPECIALS, ("_log_softmax",),
     lambda d: _on(torch.log_softmax, _with_specials(d), 1), length=6)
case("rms_norm with NaN and inf", SPECIALS, ("rms_norm",),
     lambda d: _on(torch.rms_norm, _with_specials(d), [6], _rand(d, 6, seed=2)), length=6)
case("layer_norm with NaN and inf", SPECIALS, ("native_layer_norm",),
     lambda d: _on(torch.layer_norm, _with_specials(d), [6], _rand(d, 6, seed=2), _rand(d, 6, seed=3)), length=6)
case("vector_norm with NaN and inf", SPECIALS, ("linalg_vector_norm",),
     lambda d: _on(torch.linalg.vector_norm, _with_specials(d), dim=1), length=6)
case("topk with NaN", SPECIALS, ("topk",), lambda d: _on(torch.topk, _t([1.0, NAN, 3.0, -INF, 0.5, 2.0], d), 3))

# --- alpha and beta = 0 -------------------------------------------------------------------
SCALES = "alpha and beta = 0"
_NAN_MATRIX = [[NAN, 1.0, 2.0], [1.0, INF, 0.5]]
case("addmm alpha=0 ignores NaN in mat1", SCALES, ("addmm",),
     lambda d: _on(torch.addmm, _rand(d, 2, 2), _t(_NAN_MATRIX, d), _rand(d, 3, 2), alpha=0, beta=0.5), length=3)
case("addmm alpha=0 beta=0", SCALES, ("addmm",),
     lambda d: _on(torch.addmm, _t([[NAN, 1.0]], d), _t(_NAN_MATRIX, d), _rand(d, 3, 2), alpha=0, beta=0), length=3)
case("addmm beta=0 ignores NaN in the input", SCALES, ("addmm",),
     lambda d: _on(torch.addmm, _t([[NAN, INF]], d), _rand(d, 2, 3), _rand(d, 3, 2), beta=0), length=3)
case("addmm.out alpha=0", SCALES, ("addmm.out",),
     lambda d: _on(torch.addmm, _rand(d, 2, 2), _t(_NAN_MATRIX, d), _rand(d, 3, 2), alpha=0,
                   out=torch.empty(2, 2, device=d)), length=3)
case("baddbmm beta=0 ignores NaN in the input", SCALES, ("baddbmm",),
     lambda d: _on(torch.baddbmm, _t([[[NAN, INF]]], d), _rand(d, 1, 2, 3), _rand(d, 1, 3, 2), beta=0), length=3)
case("add alpha=0 with inf", SCALES, ("add.Tensor",),
     lambda d: _on(torch.add, _rand(d, 3), _t([INF, 1.0, NAN], d), alpha=0))

# --- bad indices ------------------------------------------------------------------------
INDICES = "bad indices"
LONG = torch.int64
case("index_select out of range", INDICES, ("index_select",),
     lambda d: _on(torch.index_select, _rand(d, 3, 4), 0, _t([0, 3], d, LONG)), devices=("cpu",))
case("index_select float index", INDICES, ("index_select",),
     lambda d: _on(torch.index_select, _rand(d, 3), 0, _t([0.0], d)))
case("index_select int16 index", INDICES, ("index_select",),
     lambda d: _on(torch.index_select, _rand(d, 3), 0, _t([0], d, torch.int16)))
case("index_select 2-d index", INDICES, ("index_select",),
     lambda d: _on(torch.index_select, _rand(d, 3), 0, _t([[0]], d, LONG)))
case("index_select of a 0-d tensor, 2 indices", INDICES, ("index_select",),
     lambda d: _on(torch.index_select, _rand(d), 0, _t([0, 0], d, LONG)))
case("index_select of a 0-d tensor, 1 index", INDICES, ("index_select",),
     lambda d: _on(torch.index_select, _rand(d), 0, _t([0], d, LONG)))
case("index_select negative dim", INDICES, ("index_select",),
     lambda d: _on(torch.index_select, _rand(d, 3, 4), -1, _t([3, 0, 3], d, LONG)))
case("embedding out of range", INDICES, ("embedding",),
     lambda d: _on(torch.nn.functional.embedding, _t([1, 5], d, LONG), _rand(d, 5, 3)), devices=("cpu",))
case("x[idx] out of range", INDICES, ("index.Tensor",),
     lambda d: _on(T.__getitem__, _rand(d, 4, 3), _t([0, -5], d, LONG)), devices=("cpu",))

# --- random fills -----------------------------------------------------------------------
RANDOM = "random bounds"
case("uniform_(0, inf)", RANDOM, ("uniform_",), lambda d: _on(T.uniform_, torch.empty(4, device=d), 0, INF))
case("uniform_(-inf, 0)", RANDOM, ("uniform_",), lambda d: _on(T.uniform_, torch.empty(4, device=d), -INF, 0))
case("uniform_(0, nan)", RANDOM, ("uniform_",), lambda d: _on(T.uniform_, torch.empty(4, device=d), 0, NAN))
case("uniform_(1, 0)", RANDOM, ("uniform_",), lambda d: _on(T.uniform_, torch.empty(4, device=d), 1, 0))
case("uniform_ fp16 past its range", RANDOM, ("uniform_",),
     lambda d: _on(T.uniform_, torch.empty(4, dtype=torch.float16, device=d), 0, 1e5), dtype="float16")
case("normal_ std < 0", RANDOM, ("normal_",), lambda d: _on(T.normal_, torch.empty(4, device=d), 0, -1))

# --- rounding to half types: one correctly rounded operation per element, bit for bit ----
ROUNDING = "rounding to half types"
for _dtype in ("bfloat16", "float16"):
    _half = getattr(torch, _dtype)
    case(f"{_dtype} add", ROUNDING, ("add.Tensor",),
         lambda d, h=_half: _on(torch.add, _rand(d, 64, 33, dtype=h), _rand(d, 64, 33, dtype=h, seed=1)),
         dtype=_dtype, exact=True)
    case(f"{_dtype} mul", ROUNDING, ("mul.Tensor",),
         lambda d, h=_half: _on(torch.mul, _rand(d, 64, 33, dtype=h), _rand(d, 33, dtype=h, seed=1)),
         dtype=_dtype, exact=True)
    case(f"float32 to {_dtype}", ROUNDING, ("_to_copy", "copy_"),
         lambda d, h=_half: _on(T.to, _rand(d, 64, 33, seed=2) * 1.001, h), dtype=_dtype, exact=True)
    case(f"int64 to {_dtype}", ROUNDING, ("_to_copy", "copy_"),
         lambda d, h=_half: _on(T.to, _rand(d, 999, dtype=LONG) * 1237, h), dtype=_dtype, exact=True)

# --- past 2^31 elements -----------------------------------------------------------------
LARGE = "past 2^31 elements"
_BIG = 2**31 + 8192
case("int8 sum past 2^31 elements", LARGE, ("sum",),
     lambda d: _on(torch.sum, torch.ones(_BIG, dtype=torch.int8, device=d)), dtype="int8", needs_bytes=2 * _BIG)
case("fp16 add past 2^31 elements", LARGE, ("add.Tensor",),
     lambda d: _on(torch.add, torch.ones(_BIG, dtype=torch.float16, device=d), 1), dtype="float16",
     needs_bytes=3 * 2 * _BIG)

GROUPS = tuple(dict.fromkeys(c.group for c in _CASES))


def all_cases() -> list[SemanticCase]:
    return list(_CASES)


def select(ops: tuple[str, ...] = ()) -> list[SemanticCase]:
    """The cases naming one of ``ops`` (a case name, an ATen overload or packet); all without."""
    if not ops:
        return all_cases()
    return [c for c in _CASES if any(want == c.name or any(want in (a, a.split(".", 1)[0]) for a in c.aten)
                                     for want in ops)]


def _outcome(call: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return call(), None
        except Exception as exc:  # noqa: BLE001 - the exception is what is compared
            return None, exc


def _tensors(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (tuple, list)) else [value]


def difference(got: Any, want: Any, length: int = 1, exact: bool = False) -> str:
    """Why ``got`` is not ATen's ``want`` ("" when it is): dtype, shape, NaN and inf
    positions exact; values within the dtype's tolerance (exact for integers and bools, and
    for floats where ``exact``)."""
    got_all, want_all = _tensors(got), _tensors(want)
    if len(got_all) != len(want_all):
        return f"{len(got_all)} results where ATen gives {len(want_all)}"
    for i, (g, w) in enumerate(zip(got_all, want_all)):
        where = f"result {i}: " if len(want_all) > 1 else ""
        if not isinstance(w, torch.Tensor) or not isinstance(g, torch.Tensor):
            if g != w:
                return f"{where}{g!r} where ATen gives {w!r}"
            continue
        if g.dtype != w.dtype or g.shape != w.shape:
            return f"{where}{g.dtype} {list(g.shape)} where ATen gives {w.dtype} {list(w.shape)}"
        g, w = g.cpu(), w.cpu()
        if not (g.is_floating_point() or g.is_complex()):
            if not torch.equal(g, w):
                return f"{where}{(g != w).sum().item()} of {w.numel()} values differ from ATen's"
            continue
        if not torch.equal(g.isnan(), w.isnan()):
            return f"{where}NaN where ATen has none, or the reverse ({g.tolist()} vs ATen's {w.tolist()})"[:400]
        if not torch.equal(g.isinf() & (g > 0), w.isinf() & (w > 0)) or \
                not torch.equal(g.isinf() & (g < 0), w.isinf() & (w < 0)):
            return f"{where}infinities differ from ATen's ({g.tolist()} vs {w.tolist()})"[:400]
        finite = torch.isfinite(w)
        atol, rtol = (0.0, 0.0) if exact else tolerance(w.dtype, length)
        gf, wf = g[finite].double(), w[finite].double()
        bad = (gf - wf).abs() > atol + rtol * wf.abs()
        if bool(bad.any()):
            return f"{where}{int(bad.sum())} of {w.numel()} values differ from ATen's beyond (atol {atol:g}, rtol {rtol:g})"
    return ""


def _room(case: SemanticCase, device: torch.device, profile: str) -> str:
    """Why ``case`` cannot run here ("" when it can)."""
    wanted = case.devices
    if wanted == ("not cpu",) and device.type == "cpu":
        return "needs a device besides the CPU"
    if wanted and wanted != ("not cpu",) and device.type not in wanted:
        return f"ATen's behaviour checked here is that of its {' / '.join(wanted)} kernels"
    if not case.needs_bytes:
        return ""
    if profile == "quick":
        return "left out of the quick profile"
    if runtime.current().selection.descriptor.interpreter:
        return "past 2^31 elements is more than the CPU interpreter runs in reasonable time"
    module = getattr(torch, device.type, None)
    free = getattr(module, "mem_get_info", None)
    if free is None:
        return f"no way to ask {device.type} for its free memory"
    if free()[0] < case.needs_bytes:
        return f"needs {case.needs_bytes / 2**30:.1f} GiB of free device memory"
    return ""


def _gated(case: SemanticCase) -> list[str]:
    """The ops of ``case`` the backend's policy sends to ATen in its dtype."""
    policy = runtime.current().policy
    return [op for op in case.aten if policy.leaves_to_aten(op, case.dtype)]


def check(case: SemanticCase, device: torch.device, profile: str = "full") -> Record:
    """Run ``case`` on ATen, then with gems on, and compare (``profile``: the sample
    profile, "quick" leaving out the cases past 2^31 elements)."""
    record = Record(tier="semantics", op=case.name, aten=case.aten, dtype=case.dtype, sample=case.group,
                    status=R.PASS, samples_checked=1)
    start = time.perf_counter()
    why = _room(case, device, profile)
    if why:
        record.status, record.reason = R.NOT_SUPPORTED, why
        return record
    impls = implementations(case.aten)
    if not impls:
        record.status, record.reason = R.NOT_SUPPORTED, f"gems serves none of {', '.join(case.aten)}"
        return record
    expected, aten_error = _outcome(case.make(device))
    call = case.make(device)
    gated = _gated(case)
    # a gated case is judged by its gated ops: its others may run on gems
    judged = implementations(gated) if gated else impls
    watch = RouteWatch(frozenset().union(*judged.values()) if judged else frozenset())
    with watch, gems_core.use_gems():
        got, error = _outcome(call)
    # a gated call must not even enter gems' function; another must be answered by gems
    served = watch.entered if gated else watch.hit
    record.metrics = {"served_by": "gems" if served else "aten"}
    record.seconds = time.perf_counter() - start
    if aten_error is not None:
        record.detail = f"ATen raises {type(aten_error).__name__}: {aten_error}"[:500]
        if error is None:
            record.status, record.message = R.FAIL, f"ATen raises {type(aten_error).__name__}; gems returned a result"
        elif not isinstance(error, type(aten_error)):
            record.status, record.message = R.FAIL, f"gems raised {type(error).__name__}: {error}"[:500]
        return record
    if error is not None:
        record.status, record.message = R.FAIL, f"ATen returns a result; gems raised {type(error).__name__}: {error}"[:500]
        return record
    problem = difference(got, expected, case.length, case.exact)
    if problem:
        record.status, record.message = R.FAIL, problem
    elif gated:
        record.status, record.reason = (R.FAIL, "") if served else (R.FALLBACK, f"{gated[0]} gated to ATen")
        if served:
            record.message = "gated to ATen, but gems' implementation ran"
    elif not served:
        record.status, record.message = R.FAIL, "gems did not serve the call: it ran on ATen"
    return record


def check_group(group: str, ops: tuple[str, ...] = (), profile: str = "full") -> Iterator[Record]:
    device = torch.device(runtime.current().device_type)
    for chosen in select(ops):
        if chosen.group == group:
            yield check(chosen, device, profile)
