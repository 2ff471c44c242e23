"""Op cases: how the suite calls each op, on which inputs and dtypes, and how it compares.

An op module in gems_core is tested by adding a case in ``gems_conformance/opcases/``::

    register(OpCase(
        name="add",
        aten=("add.Tensor",),
        call=lambda x, y: torch.add(x, y),
        samples=lambda dtype, device, profile: samples.elementwise(2, dtype, device, profile),
        dtypes=samples.ALL_DTYPES,
    ))

The reference is the same ``call`` run by ATen on float64 CPU copies of the inputs (integer
and bool inputs keep their dtype); the result is compared with the tolerance of its dtype.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from .samples import Sample
from .tolerances import tolerance


@dataclass(frozen=True)
class OpCase:
    name: str
    #: ATen overloads this case exercises (routing checks and gates are decided by these)
    aten: tuple[str, ...]
    call: Callable[..., Any]
    samples: Callable[[torch.dtype, torch.device, str], Iterable[Sample]]
    dtypes: tuple[torch.dtype, ...]
    #: "close" (tolerance by dtype), "exact", or "index" (compare the values selected)
    compare: str = "close"
    #: the reduction length of a sample, which scales the tolerance
    reduction_length: Callable[[Sample], int] | None = None
    #: a custom float64 reference; default: ``call`` on float64 CPU copies
    reference: Callable[..., Any] | None = None


def nan_input_takes_the_upper_branch(call: Callable[..., Any], index: int) -> Callable[..., Any]:
    """The float64 reference of a piecewise backward formula (``elu_backward``,
    ``hardswish_backward``) whose argument ``index`` is the input the pieces are chosen by:
    ``call`` with that input's NaNs read as +inf. ATen's CUDA kernels and its scalar CPU loop
    test ``x <= 0`` (``x < -3``, ``x <= 3``), which a NaN fails, so they take the upper piece
    (the gradient times its constant slope); ATen's vectorized float64 CPU loop tests the
    other way round on some instruction sets and returns NaN there, so the float64 reference
    depends on the machine that computes it."""

    def reference(*args: Any, **kwargs: Any) -> Any:
        args = list(args)
        x = args[index]
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            args[index] = torch.where(torch.isnan(x), torch.full_like(x, float("inf")), x)
        return call(*args, **kwargs)

    return reference


_CASES: dict[str, OpCase] = {}
_loaded = False


def register(case: OpCase) -> OpCase:
    if case.name in _CASES:
        raise ValueError(f"op case {case.name!r} is registered twice")
    _CASES[case.name] = case
    return case


def all_cases() -> dict[str, OpCase]:
    global _loaded
    if not _loaded:
        from . import opcases

        for info in pkgutil.iter_modules(opcases.__path__):
            importlib.import_module(f"{opcases.__name__}.{info.name}")
        _loaded = True
    return dict(_CASES)


def to_reference(value: Any) -> Any:
    """A float64 CPU copy of ``value`` (tensors inside lists too); non-float tensors keep
    their dtype."""
    if isinstance(value, torch.Tensor):
        v = value.detach().cpu()
        return v.double() if v.is_floating_point() else v.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(to_reference(v) for v in value)
    if isinstance(value, dict):
        return {k: to_reference(v) for k, v in value.items()}
    return value


@dataclass
class Comparison:
    ok: bool
    max_abs: float = 0.0
    max_rel: float = 0.0
    message: str = ""


def compare(
    actual: Any,
    expected: Any,
    case: OpCase,
    sample: Sample,
    tolerance_override: tuple[float | None, float | None] | None = None,
) -> Comparison:
    """Compare a gems result with the float64 reference (tensors or tuples of tensors).
    ``tolerance_override`` is a declared deviation's (atol, rtol); None keeps the table's."""
    if isinstance(expected, (tuple, list)):
        if not isinstance(actual, (tuple, list)) or len(actual) != len(expected):
            return Comparison(False, message=f"expected {len(expected)} results, got {type(actual).__name__}")
        for a, e in zip(actual, expected):
            result = compare(a, e, case, sample, tolerance_override)
            if not result.ok:
                return result
        return Comparison(True)
    if not isinstance(expected, torch.Tensor):
        ok = actual == expected
        return Comparison(bool(ok), message="" if ok else f"{actual!r} != {expected!r}")
    if not isinstance(actual, torch.Tensor):
        return Comparison(False, message=f"expected a tensor, got {type(actual).__name__}")
    if tuple(actual.shape) != tuple(expected.shape):
        return Comparison(False, message=f"shape {list(actual.shape)} != {list(expected.shape)}")
    got = actual.detach().cpu()
    length = case.reduction_length(sample) if case.reduction_length else 1
    atol, rtol = tolerance(actual.dtype, length)
    if tolerance_override is not None:
        atol = atol if tolerance_override[0] is None else tolerance_override[0]
        rtol = rtol if tolerance_override[1] is None else tolerance_override[1]
    if case.compare == "exact" or (atol == 0 and rtol == 0):
        exp = expected.to(got.dtype) if not expected.is_floating_point() or got.is_floating_point() else expected
        equal = torch.equal(got, exp) if not got.is_floating_point() else bool(
            ((got.double() == exp.double()) | (got.isnan() & exp.double().isnan())).all()
        )
        return Comparison(equal, message="" if equal else "results differ (exact comparison)")
    g = got.double()
    # round the reference to the result dtype first: a value past that dtype's range is
    # inf there, as it is in ATen's result
    e = expected.to(got.dtype).double() if got.is_floating_point() else expected.double()
    both_nan = g.isnan() & e.isnan()
    same_inf = torch.isinf(g) & (g == e)
    diff = (g - e).abs()
    diff = torch.where(both_nan | same_inf, torch.zeros_like(diff), diff)
    bad = ~(diff <= atol + rtol * e.abs()) & ~(both_nan | same_inf)
    max_abs = float(diff.nan_to_num(float("inf")).max()) if diff.numel() else 0.0
    rel = diff / e.abs().clamp_min(1e-30)
    max_rel = float(rel.nan_to_num(float("inf")).max()) if rel.numel() else 0.0
    ok = not bool(bad.any())
    return Comparison(ok, max_abs, max_rel, "" if ok else f"{int(bad.sum())} of {bad.numel()} elements off")
