"""bincount, isin (gems_core/ops/data_ops.py) and unique_consecutive (gems_core/ops/unique.py)
against ATen: random data, strided, transposed and expanded operands, empty and 0-d ones, and
ATen's errors for bad input. A call counts as served only where gems' function ran and
launched its kernel, so a silent hand-off to ATen fails. Counts, memberships and runs compare
exactly; weighted sums against a float64 reference, in ATen's result dtype. Sizes stay tiny:
the interpreter is slow, and the kernels' masked edges show at any size.

Each call is written for a device ``d``: gems runs it on the backend's device and the
reference is ATen's CPU kernel on the same values. Where ATen's CUDA kernels differ from its
CPU ones (isin compares a wider 0-d or number operand in the wider dtype; unique_consecutive
keeps the last of a run of -0.0 and 0.0, and its dim form leaves out the outputs not asked
for), gems follows the CPU kernels and the documented promotion."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from gems_conformance.routing import RouteWatch, implementations
from outcomes import answer

import gems_core
from gems_core.registry import load_ops

DEVICE = torch.device(gems_core.device)
_g = torch.Generator().manual_seed(0)
NAN, INF = float("nan"), float("inf")
Call = Callable[[Any], Any]  # a call on the tensors moved to device ``d``


def ints(*shape: int, low: int = 0, high: int = 9, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    return torch.randint(low, high, shape, generator=_g).to(dtype)


def floats(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return (torch.rand(shape, generator=_g, dtype=torch.float64) * 2 - 1).to(dtype)


@contextmanager
def launched(ops: list[str], module: str, kernels: tuple[str, ...],
             monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """gems enabled for ``ops``; yields the names of the ``kernels`` (launch caches of
    gems_core.ops.``module``) launched; asserts on exit that gems' implementation ran."""
    load_ops()  # the op modules define their kernels once the backend is selected
    owner = importlib.import_module(f"gems_core.ops.{module}")
    names: list[str] = []
    for kernel in kernels:
        cache = getattr(owner, kernel)

        def counted(*args: Any, _cache: Any = cache, _name: str = kernel, **kwargs: Any) -> Any:
            names.append(_name)
            return _cache(*args, **kwargs)

        monkeypatch.setattr(owner, kernel, counted)
    with RouteWatch(frozenset().union(*implementations(ops).values())) as watch, gems_core.use_gems(include=ops):
        yield names
    assert watch.hit, ops


def served(ops: list[str], module: str, kernel: str | None, call: Call,
           monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """(ATen's result on the CPU, gems' result on the device) of ``call``; fails unless gems
    launched ``kernel`` (None: unless it launched nothing)."""
    want = call(torch.device("cpu"))
    with launched(ops, module, (kernel,) if kernel else (), monkeypatch) as names:
        got = call(DEVICE)
    assert (kernel in names) if kernel else not names, f"{ops}: launched {names}, not {kernel}"
    return want, got


def same(got: Any, want: Any) -> bool:
    """Equal dtypes and shapes, and equal values (NaN equal to NaN, -0.0 not to 0.0); tuples
    of tensors elementwise."""
    if isinstance(want, (tuple, list)):
        return len(got) == len(want) and all(same(g, w) for g, w in zip(got, want))
    if (got.dtype, got.shape) != (want.dtype, want.shape):
        return False
    g, w = got.cpu(), want.cpu()
    if not g.is_floating_point():
        return torch.equal(g, w)
    g, w = g.double(), w.double()
    return bool((((g == w) & (g.signbit() == w.signbit())) | (g.isnan() & w.isnan())).all())


# -- bincount -------------------------------------------------------------------------------

BINCOUNT = ["bincount"]
VALUES = ints(33)

COUNTS: dict[str, Call] = {
    "int64": lambda d: torch.bincount(VALUES.to(d)),
    "uint8": lambda d: torch.bincount(VALUES.to(d, torch.uint8)),
    "int8": lambda d: torch.bincount(VALUES.to(d, torch.int8)),
    "int16": lambda d: torch.bincount(VALUES.to(d, torch.int16)),
    "int32": lambda d: torch.bincount(VALUES.to(d, torch.int32)),
    "strided": lambda d: torch.bincount(VALUES.to(d)[::3]),
    "expanded": lambda d: torch.bincount(VALUES.to(d)[:1].expand(7)),
    "minlength past the max": lambda d: torch.bincount(VALUES.to(d), minlength=20),
    "minlength short of the max": lambda d: torch.bincount(VALUES.to(d), minlength=2),
    "a long tail of bins": lambda d: torch.bincount(torch.tensor([0, 1500, 3], device=d)),
    "out= (its composite)": lambda d: torch.ops.aten.bincount.out(
        VALUES.to(d), out=torch.empty(0, dtype=torch.int64, device=d)),
}


@pytest.mark.parametrize("call", sorted(COUNTS))
def test_bincount_counts_match_aten(call: str, monkeypatch: pytest.MonkeyPatch) -> None:
    want, got = served(BINCOUNT, "data_ops", "_histogram", COUNTS[call], monkeypatch)
    assert same(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
                                   torch.bool], ids=str)
def test_bincount_weights_sum_in_atens_dtype(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    weights = (floats(66) * 4).to(dtype)

    def call(d: Any) -> torch.Tensor:
        return torch.bincount(VALUES.to(d), weights.to(d)[::2], 12)  # strided weights

    want, got = served(BINCOUNT, "data_ops", "_histogram", call, monkeypatch)
    assert got.dtype == want.dtype  # float32 stays float32, the rest become float64
    expected = torch.bincount(VALUES, weights[::2].double(), 12)
    tolerance = 1e-5 if got.dtype == torch.float32 else 1e-12
    torch.testing.assert_close(got.cpu().double(), expected, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("call", [
    lambda d: torch.bincount(VALUES.to(d)[:0], minlength=4),
    lambda d: torch.bincount(VALUES.to(d)[:0], floats(0).to(d), 3),
    lambda d: torch.bincount(VALUES.to(d)[:0], floats(5).to(d), 2),  # ATen checks no weights then
])
def test_bincount_of_nothing_is_minlength_zeros(call: Call, monkeypatch: pytest.MonkeyPatch) -> None:
    want, got = served(BINCOUNT, "data_ops", None, call, monkeypatch)
    assert same(got, want)


def test_weighted_bincount_goes_to_aten_under_deterministic_algorithms(monkeypatch: pytest.MonkeyPatch) -> None:
    """The atomic float sums have no fixed order; integer counts do. (ATen's CUDA kernel
    raises for weights there, its CPU kernel does not: gems' answer is ATen's either way.)"""
    values, weights = VALUES.to(DEVICE), floats(33).to(DEVICE)
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        want = answer(lambda: torch.bincount(values, weights))
        with launched(BINCOUNT, "data_ops", ("_histogram",), monkeypatch) as names:
            got = answer(lambda: torch.bincount(values, weights))
            counts = torch.bincount(values)
    finally:
        torch.use_deterministic_algorithms(was)
    assert names == ["_histogram"] and got == want and same(counts, torch.bincount(VALUES))


BINCOUNT_ERRORS: dict[str, Call] = {
    "negative": lambda d: torch.bincount(torch.tensor([2, -1, 0], device=d)),
    "2-d": lambda d: torch.bincount(VALUES.to(d).view(3, 11)),
    "0-d": lambda d: torch.bincount(VALUES.to(d)[0]),
    "weights of another length": lambda d: torch.bincount(VALUES.to(d), floats(32).to(d)),
    "2-d weights": lambda d: torch.bincount(VALUES.to(d)[:4], floats(2, 2).to(d)),
    "negative minlength": lambda d: torch.bincount(VALUES.to(d), minlength=-1),
    "floats": lambda d: torch.bincount(floats(4).to(d)),
    "bools": lambda d: torch.bincount(VALUES.to(d) > 3),
}


@pytest.mark.parametrize("bad", sorted(BINCOUNT_ERRORS))
def test_bincount_bad_input_raises_atens_error(bad: str) -> None:
    want = answer(lambda: BINCOUNT_ERRORS[bad](DEVICE))
    with gems_core.use_gems(include=BINCOUNT):
        got = answer(lambda: BINCOUNT_ERRORS[bad](DEVICE))
    assert isinstance(want, str) and got == want


# -- isin -----------------------------------------------------------------------------------

ISIN = ["isin.Tensor_Tensor", "isin.Tensor_Tensor_out", "isin.Scalar_Tensor", "isin.Scalar_Tensor_out"]
ISIN_SCALAR = ["isin.Tensor_Scalar", "isin.Tensor_Scalar_out"]
ELEMENTS = ints(5, 7, low=-20, high=20)
FEW = ints(9, low=-20, high=20)  # compared one by one
MANY = ints(100 + 17, low=-20, high=20)  # sorted and searched
SPECIAL = torch.tensor([NAN, INF, -INF, -0.0, 0.0, 1.5, -2.25])
TENTHS = torch.tensor([0.1, 0.5])  # float32; 0.1 differs from its float16 rounding

MEMBERSHIPS: dict[str, Call] = {
    "few": lambda d: torch.isin(ELEMENTS.to(d), FEW.to(d)),
    "many": lambda d: torch.isin(ELEMENTS.to(d), MANY.to(d)),
    "few inverted": lambda d: torch.isin(ELEMENTS.to(d), FEW.to(d), invert=True),
    "many inverted": lambda d: torch.isin(ELEMENTS.to(d), MANY.to(d), invert=True),
    "assume_unique": lambda d: torch.isin(torch.arange(-5, 5, device=d), FEW.unique().to(d), assume_unique=True),
    "transposed": lambda d: torch.isin(ELEMENTS.to(d).t(), MANY.to(d)),
    "expanded": lambda d: torch.isin(ELEMENTS.to(d)[:1].expand(4, 7), FEW.to(d)),
    "strided test": lambda d: torch.isin(ELEMENTS.to(d), MANY.to(d)[::3]),
    "2-d test": lambda d: torch.isin(ELEMENTS.to(d), MANY.to(d)[:100].view(10, 10)),
    "floats": lambda d: torch.isin(ELEMENTS.to(d).float() / 4, MANY.to(d).float() / 4),
    "float16": lambda d: torch.isin(ELEMENTS.to(d).half() / 4, FEW.to(d).half() / 4),
    "bfloat16": lambda d: torch.isin(ELEMENTS.to(d).bfloat16() / 4, MANY.to(d).bfloat16() / 4),
    "int vs float": lambda d: torch.isin(ELEMENTS.to(d), torch.tensor([2.5, 3.0, -4.0], device=d)),
    "uint8 vs negative int64": lambda d: torch.isin(ELEMENTS.to(d).abs().to(torch.uint8),
                                                    torch.tensor([-1, 3], device=d)),
    "float16 vs float32": lambda d: torch.isin(TENTHS.to(d).half(), TENTHS.to(d)),
    "float16 vs a 0-d float32 (compared in float16)": lambda d: torch.isin(TENTHS.to(d).half(), TENTHS.to(d)[0]),
    "special few": lambda d: torch.isin(SPECIAL.to(d), SPECIAL.to(d)[::2]),
    "special many": lambda d: torch.isin(SPECIAL.to(d), torch.cat([MANY.to(d).float(), SPECIAL.to(d)[:4]])),
    "0-d": lambda d: torch.isin(ELEMENTS.to(d)[0, 0], FEW.to(d)),
    "0-d test": lambda d: torch.isin(ELEMENTS.to(d), FEW.to(d)[0]),
    "empty test": lambda d: torch.isin(ELEMENTS.to(d), FEW.to(d)[:0]),
    "empty test inverted": lambda d: torch.isin(ELEMENTS.to(d), FEW.to(d)[:0], invert=True),
    "out=": lambda d: torch.isin(ELEMENTS.to(d), MANY.to(d), out=torch.empty(5, 7, dtype=torch.bool, device=d)),
    "a number in a tensor": lambda d: torch.isin(3, FEW.to(d)),
    "a float number in an int tensor": lambda d: torch.isin(2.5, FEW.to(d)),
    "a number in float16 (compared in float16)": lambda d: torch.isin(0.1, TENTHS.to(d).half()),
    "a number in many, inverted": lambda d: torch.isin(-7, MANY.to(d), invert=True),
    "a number, out= (empty)": lambda d: torch.isin(4, MANY.to(d), out=torch.empty(0, dtype=torch.bool, device=d)),
}


@pytest.mark.parametrize("call", sorted(MEMBERSHIPS))
def test_isin_matches_aten(call: str, monkeypatch: pytest.MonkeyPatch) -> None:
    want, got = served(ISIN, "data_ops", "_isin", MEMBERSHIPS[call], monkeypatch)
    assert same(got, want) and got.is_contiguous()


def test_isin_of_no_elements(monkeypatch: pytest.MonkeyPatch) -> None:
    want, got = served(ISIN, "data_ops", None, lambda d: torch.isin(ELEMENTS.to(d)[:0], FEW.to(d)), monkeypatch)
    assert same(got, want)  # nothing to look up


@pytest.mark.parametrize("call", [
    lambda d: torch.isin(ELEMENTS.to(d), FEW.to(d), out=torch.empty(3, dtype=torch.bool, device=d)),
    # ATen sizes a number's out= as (0,) first: a 0-d out= is resized twice
    lambda d: torch.isin(4, MANY.to(d), out=torch.empty((), dtype=torch.bool, device=d)),
])
def test_isin_out_of_another_shape_is_resized_with_atens_warning(call: Call, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.warns(UserWarning, match="was resized"):
        want = call(torch.device("cpu"))
    with pytest.warns(UserWarning, match="was resized"), launched(ISIN, "data_ops", ("_isin",), monkeypatch):
        got = call(DEVICE)
    assert same(got, want)


SCALAR_TESTS: dict[str, Call] = {
    "int": lambda d: torch.isin(ELEMENTS.to(d), 3),
    "float": lambda d: torch.isin(ELEMENTS.to(d), 3.0),
    "float not an int": lambda d: torch.isin(ELEMENTS.to(d), 2.5),
    "inverted": lambda d: torch.isin(ELEMENTS.to(d).t(), -2, invert=True),
    "uint8 vs -1 (wraps, as eq)": lambda d: torch.isin(torch.tensor([1, 255], dtype=torch.uint8, device=d), -1),
    "NaN": lambda d: torch.isin(SPECIAL.to(d), NAN, invert=True),
    "out=": lambda d: torch.isin(ELEMENTS.to(d), 5, out=torch.empty(5, 7, dtype=torch.bool, device=d)),
}


@pytest.mark.parametrize("call", sorted(SCALAR_TESTS))
def test_isin_of_a_test_number_matches_aten(call: str) -> None:
    """ATen's own definition: eq (ne) with the number, into a contiguous bool result."""
    want = SCALAR_TESTS[call](torch.device("cpu"))
    with RouteWatch(frozenset().union(*implementations(ISIN_SCALAR).values())) as watch, \
            gems_core.use_gems(include=ISIN_SCALAR):
        got = SCALAR_TESTS[call](DEVICE)
    assert watch.hit and same(got, want) and got.is_contiguous()


ISIN_ERRORS: dict[str, Call] = {
    "bool elements": lambda d: torch.isin(torch.tensor([True], device=d), torch.tensor([True], device=d)),
    "bool test": lambda d: torch.isin(FEW.to(d), torch.tensor([True], device=d)),
    "bool number": lambda d: torch.isin(FEW.to(d), True),
    "complex": lambda d: torch.isin(FEW.to(d).cfloat(), FEW.to(d).cfloat()),
    "out of another dtype": lambda d: torch.isin(FEW.to(d), MANY.to(d), out=torch.empty(9, dtype=torch.int64,
                                                                                         device=d)),
    "number out of another dtype": lambda d: torch.isin(FEW.to(d), 3, out=torch.empty(9, dtype=torch.int64,
                                                                                       device=d)),
}


@pytest.mark.parametrize("bad", sorted(ISIN_ERRORS))
def test_isin_bad_input_raises_atens_error(bad: str) -> None:
    want = answer(lambda: ISIN_ERRORS[bad](DEVICE))
    with gems_core.use_gems(include=[*ISIN, *ISIN_SCALAR]):
        got = answer(lambda: ISIN_ERRORS[bad](DEVICE))
    assert isinstance(want, str) and got == want


# -- unique_consecutive ---------------------------------------------------------------------

CONSECUTIVE = ["unique_consecutive"]
RUNS = ints(4, 37, high=3)
SPECIAL_RUNS = torch.tensor([0.0, -0.0, NAN, NAN, 1.5, 1.5, INF, -INF])
ROWS = torch.tensor([[0, 1], [0, 1], [2, 2], [0, 1], [0, 1], [0, 1]])
NAN_ROWS = torch.tensor([[NAN, 1.0], [NAN, 1.0], [-0.0, 2.0], [0.0, 2.0]])
U = torch.ops.aten.unique_consecutive

RUN_CALLS: dict[str, Call] = {
    "values, inverse and counts": lambda d: U(RUNS.to(d), True, True),
    "values only": lambda d: U(RUNS.to(d), False, False),
    "inverse only": lambda d: U(RUNS.to(d), True, False),
    "counts only": lambda d: U(RUNS.to(d), False, True),
    "transposed": lambda d: U(RUNS.to(d).t(), True, True),
    "expanded": lambda d: U(RUNS.to(d)[:1].expand(3, 37), True, True),
    "bool": lambda d: U(RUNS.to(d) > 0, True, True),
    "bfloat16 (the first of -0.0 and 0.0 kept)": lambda d: U(SPECIAL_RUNS.to(d, torch.bfloat16), True, True),
    "NaN and signed zeros (the first kept)": lambda d: U(SPECIAL_RUNS.to(d), True, True),
    "0-d": lambda d: U(RUNS.to(d)[0, 0], True, True),
    "1-d with dim 0 (the flat form)": lambda d: U(RUNS.to(d)[0], False, False, 0),
    "torch.unique_consecutive": lambda d: torch.unique_consecutive(RUNS.to(d, torch.float64)[0], return_counts=True),
    "dim 0": lambda d: U(ROWS.to(d), True, True, 0),
    "dim 1 (inverse and counts always)": lambda d: U(ROWS.to(d).t(), False, False, 1),
    "dim -1 of 1-d (the dim form)": lambda d: U(RUNS.to(d)[0], False, False, -1),
    "dim of 3-d": lambda d: U(ROWS.to(d).view(3, 2, 2).permute(1, 0, 2), True, True, 1),
    "dim with NaN rows": lambda d: U(NAN_ROWS.to(d), True, True, 0),
    "dim, torch.unique_consecutive": lambda d: torch.unique_consecutive(ROWS.to(d), dim=0, return_inverse=True),
}


@pytest.mark.parametrize("call", sorted(RUN_CALLS))
def test_unique_consecutive_matches_aten(call: str, monkeypatch: pytest.MonkeyPatch) -> None:
    want, got = served(CONSECUTIVE, "masked", "_compact", RUN_CALLS[call], monkeypatch)
    assert same(got, want)
    strides = [t.stride() for t in (got if isinstance(got, tuple) else (got,))]
    assert strides == [t.stride() for t in (want if isinstance(want, tuple) else (want,))]


def test_unique_consecutive_of_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    want, got = served(CONSECUTIVE, "masked", None, lambda d: U(RUNS.to(d)[:0], True, True), monkeypatch)
    assert same(got, want)


CONSECUTIVE_ERRORS: dict[str, Call] = {
    "dim out of range": lambda d: U(RUNS.to(d), True, True, 2),
    "dim of 0-d": lambda d: U(RUNS.to(d)[0, 0], True, True, 0),
    "empty along another dim": lambda d: U(RUNS.to(d)[:, :0], True, True, 0),
    "complex": lambda d: U(RUNS.to(d).cfloat(), True, True),
}


@pytest.mark.parametrize("bad", sorted(CONSECUTIVE_ERRORS))
def test_unique_consecutive_bad_input_raises_atens_error(bad: str) -> None:
    want = answer(lambda: CONSECUTIVE_ERRORS[bad](DEVICE)[0])
    with gems_core.use_gems(include=CONSECUTIVE):
        got = answer(lambda: CONSECUTIVE_ERRORS[bad](DEVICE)[0])
    assert isinstance(want, str) and got == want
