"""argmin/amin/aminmax, cumprod/cummax/cummin and sort/argsort against ATen on float64
references: NaN/inf, ties, non-contiguous, empty and 0-d inputs, out= and in-place forms,
bad dims. Every served call is checked to return from gems' implementation with a result
(not NotImplemented, not an exception that hands it to ATen)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from gems_conformance.routing import RouteWatch, implementations

import gems_core
from gems_core.registry import load_ops

DEVICE = torch.device(gems_core.device)
NAN, INF = float("nan"), float("inf")


def _served(ops: tuple[str, ...], fn: Callable[[], Any], expect: bool = True) -> Any:
    """``fn()`` under gems; asserts that one of ``ops``' implementations answered the call
    with a result or its own error (``expect``), or that none did (the call was left to ATen)."""
    codes = frozenset().union(*implementations(ops).values())
    assert codes, ops
    with RouteWatch(codes) as watch, gems_core.use_gems():
        result = fn()
    assert watch.served == expect, (ops, watch.hit, watch.served)
    return result


def _assert_same(got: Any, want: Any) -> None:
    """Values close to the float64 reference (NaN where it has NaN), integers exact."""
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape, (g.shape, w.shape)
        if w.is_floating_point():
            tol = 1e-2 if g.dtype in (torch.float16, torch.bfloat16) else 1e-5
            torch.testing.assert_close(g.double(), w, rtol=tol, atol=tol, equal_nan=True)
        else:
            assert torch.equal(g.cpu(), w.cpu()), (g, w)


def _data(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        x = torch.randn(*shape, generator=g) * 3
    else:
        x = torch.randint(-4 if dtype != torch.uint8 else 0, 5, shape, generator=g)
    return x.to(dtype).to(DEVICE) if dtype != torch.bool else (x > 0).to(DEVICE)


def _specials() -> torch.Tensor:
    """Rows with NaN, +-inf, -0.0 and ties (repeated values, repeated NaN)."""
    x = _data(4, 37).round()
    x[0, 3] = x[0, 20] = NAN
    x[1, 5], x[1, 6], x[1, 30] = INF, -INF, INF
    x[2, 0], x[2, 1] = -0.0, 0.0
    x[3, :] = 1.0
    x[3, 9] = NAN
    return x


def _ref(x: torch.Tensor) -> torch.Tensor:
    return x.double() if x.is_floating_point() else x


@pytest.fixture(autouse=True)
def _ops() -> None:
    load_ops()


# argmin / amin / aminmax


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_argmin_amin_aminmax_match_aten(dtype: torch.dtype) -> None:
    x = _specials().to(dtype) if dtype.is_floating_point else _data(4, 37, dtype=dtype)
    xt = _data(37, 4, dtype=dtype, seed=1).t()  # non-contiguous
    calls = [
        (("argmin",), lambda a: torch.argmin(a, 1)),
        (("argmin",), lambda a: torch.argmin(a)),
        (("argmin",), lambda a: torch.argmin(a, 0, keepdim=True)),
        (("amin",), lambda a: torch.amin(a, 1)),
        (("amin",), lambda a: torch.amin(a, (0, 1), keepdim=True)),
        (("aminmax",), lambda a: tuple(torch.aminmax(a, dim=0))),
    ]
    for ops, fn in calls:
        for a in (x, xt):
            _assert_same(_served(ops, lambda: fn(a)), fn(_ref(a)))
    # every element with keepdim: ATen's CPU kernel keeps the dims, its CUDA kernel returns
    # 0-d, and gems does as the device's ATen does
    for a in (x, xt):
        got = _served(("aminmax",), lambda: tuple(torch.aminmax(a, keepdim=True)))
        _assert_same(got, tuple(torch.aminmax(_ref(a), keepdim=True)))


def test_argmin_amin_aminmax_out_0d_and_empty() -> None:
    x, scalar = _specials(), torch.tensor(-2.5, device=DEVICE)
    out = torch.empty(0, dtype=torch.int64, device=DEVICE)
    _served(("argmin.out",), lambda: torch.argmin(x, 1, out=out))
    _assert_same(out, torch.argmin(x.double(), 1))
    low = torch.empty(0, device=DEVICE)
    _served(("amin.out",), lambda: torch.amin(x, 0, out=low))
    _assert_same(low, torch.amin(x.double(), 0))
    pair = (torch.empty(0, device=DEVICE), torch.empty(0, device=DEVICE))
    _served(("aminmax.out",), lambda: torch.aminmax(x, dim=1, out=pair))
    _assert_same(pair, tuple(torch.aminmax(x.double(), dim=1)))
    _assert_same(_served(("argmin",), lambda: torch.argmin(scalar, 0)), torch.argmin(scalar.double(), 0))
    _assert_same(_served(("aminmax",), lambda: tuple(torch.aminmax(scalar))), tuple(torch.aminmax(scalar.double())))
    empty = torch.empty(0, 3, device=DEVICE)
    _assert_same(_served(("amin",), lambda: torch.amin(empty, 1)), torch.amin(empty.double(), 1))


# cumprod


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32, torch.bool])
def test_cumprod_matches_aten(dtype: torch.dtype) -> None:
    # near one, so that products over a row of several tiles stay finite
    x = _data(3, 600, dtype=dtype) if not dtype.is_floating_point else (_data(3, 600) / 30 + 1).to(dtype)
    if dtype.is_floating_point:
        x[0, 7], x[1, 300], x[2, 10] = NAN, INF, 0.0
    xt = x[:, :40].t()  # non-contiguous, scanned along its outer dim
    for a, dim in ((x, 1), (x, -1), (xt, 0), (x[:, :40:3], 1)):
        got = _served(("cumprod",), lambda: torch.cumprod(a, dim))
        assert got.dtype == torch.cumprod(a, dim).dtype
        _assert_same(got, torch.cumprod(_ref(a), dim))


def test_cumprod_dtype_out_inplace_0d_empty() -> None:
    x = (_data(2, 50) / 30 + 1).half()
    got = _served(("cumprod",), lambda: torch.cumprod(x, 1, dtype=torch.float32))
    _assert_same(got, torch.cumprod(x.double(), 1))
    out = torch.empty(0, dtype=torch.int64, device=DEVICE)
    xi = _data(2, 9, dtype=torch.int8)
    _served(("cumprod.out",), lambda: torch.cumprod(xi, 1, out=out))
    _assert_same(out, torch.cumprod(xi, 1))
    y = _data(3, 20, seed=2) / 10 + 1
    want = torch.cumprod(y.double(), 0)
    _served(("cumprod_",), lambda: y.cumprod_(0))
    _assert_same(y, want)
    for a in (torch.tensor(1.5, device=DEVICE), torch.empty(0, 4, device=DEVICE)):
        _assert_same(_served(("cumprod",), lambda: torch.cumprod(a, 0)), torch.cumprod(a.double(), 0))


# cummax / cummin


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
@pytest.mark.parametrize("name", ["cummax", "cummin"])
def test_cummax_cummin_match_aten(name: str, dtype: torch.dtype) -> None:
    fn = getattr(torch, name)
    if dtype.is_floating_point:
        x = torch.cat([_specials(), _data(4, 263, seed=3).round()], 1).to(dtype)  # 300: tiles carried
        x[1, 280] = NAN
    else:
        x = _data(4, 300, dtype=dtype)
    for a, dim in ((x, 1), (x[:, ::7], -1), (x[:, :20].t(), 0)):
        _assert_same(_served((name,), lambda: tuple(fn(a, dim))), tuple(fn(_ref(a), dim)))


@pytest.mark.parametrize("name", ["cummax", "cummin"])
def test_cummax_cummin_out_0d_empty(name: str) -> None:
    fn = getattr(torch, name)
    x = _specials()
    outs = (torch.empty(0, device=DEVICE), torch.empty(0, dtype=torch.int64, device=DEVICE))
    _served((f"{name}.out",), lambda: fn(x, 1, out=outs))
    _assert_same(outs, tuple(fn(x.double(), 1)))
    for a in (torch.tensor(3.0, device=DEVICE), torch.empty(2, 0, device=DEVICE)):
        _assert_same(_served((name,), lambda: tuple(fn(a, -1))), tuple(fn(a.double(), -1)))


# sort / argsort


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int16, torch.bool])
@pytest.mark.parametrize("descending", [False, True])
def test_stable_sort_matches_aten(dtype: torch.dtype, descending: bool) -> None:
    """Values and indices exactly: equal values in index order, NaN last ascending and first
    descending, -0.0 equal to 0.0."""
    x = _specials().to(dtype) if dtype.is_floating_point else _data(4, 37, dtype=dtype)
    cube = _data(3, 5, 6, dtype=dtype, seed=4)
    for k, (a, dim) in enumerate(((x, 1), (x, 0), (x.t(), 1), (x[:, ::3], -1), (cube, 1),
                                  (cube.transpose(0, 2), 2))):
        want = tuple(torch.sort(_ref(a), dim=dim, descending=descending, stable=True))
        got = _served(("sort.stable",), lambda: tuple(torch.sort(a, dim=dim, descending=descending, stable=True)))
        _assert_same(got, want)
        if k == 0:  # argsort is sort.stable's indices: one layout
            got = _served(("sort.stable",), lambda: torch.argsort(a, dim=dim, descending=descending, stable=True))
            _assert_same(got, want[1])


def test_unstable_sort_is_a_sort() -> None:
    """stable=False may order ties either way: the values must be ATen's, and the indices
    must pick them."""
    x = _data(5, 30).round()
    values, indices = _served(("sort", "sort.stable"), lambda: torch.sort(x, 1, True))
    _assert_same(values, torch.sort(x.double(), 1, True)[0])
    assert torch.equal(x.gather(1, indices), values)
    assert torch.equal(indices.sort(1)[0], torch.arange(30, device=DEVICE).expand(5, 30))


def test_sort_out_0d_empty() -> None:
    x = _specials()
    outs = (torch.empty(0, device=DEVICE), torch.empty(0, dtype=torch.int64, device=DEVICE))
    _served(("sort.values_stable",), lambda: torch.sort(x, stable=True, descending=True, out=outs))
    _assert_same(outs, tuple(torch.sort(x.double(), stable=True, descending=True)))
    for a in (torch.tensor(-1.5, device=DEVICE), torch.empty(0, 6, device=DEVICE), torch.empty(3, 0, device=DEVICE)):
        got = _served(("sort.stable",), lambda: tuple(torch.sort(a, stable=True)))
        _assert_same(got, tuple(torch.sort(a.double(), stable=True)))


def test_rows_past_the_limit_and_64_bit_dtypes_go_to_aten(monkeypatch: pytest.MonkeyPatch) -> None:
    from gems_core.ops import sort

    monkeypatch.setattr(sort, "MAX_ROW", 16)
    x = _data(3, 17)
    want = tuple(torch.sort(x.double(), stable=True))
    _assert_same(_served(("sort.stable",), lambda: tuple(torch.sort(x, stable=True)), expect=False), want)
    _assert_same(_served(("sort.stable",), lambda: tuple(torch.sort(x[:, :16], stable=True))),
                 tuple(torch.sort(x[:, :16].double(), stable=True)))
    _assert_same(_served(("sort.stable",), lambda: tuple(torch.sort(x.double(), stable=True)), expect=False), want)


# bad inputs


BAD_CALLS = {
    "argmin dim": lambda: torch.argmin(torch.ones(2, 3, device=DEVICE), 2),
    "argmin empty": lambda: torch.argmin(torch.ones(0, device=DEVICE)),
    "argmin bool": lambda: torch.argmin(torch.ones(3, dtype=torch.bool, device=DEVICE)),
    "amin dim": lambda: torch.amin(torch.ones(2, 3, device=DEVICE), -3),
    "amin empty": lambda: torch.amin(torch.ones(2, 0, device=DEVICE), 1),
    "aminmax empty": lambda: torch.aminmax(torch.ones(0, 3, device=DEVICE)),
    "cumprod dim": lambda: torch.cumprod(torch.ones(2, 3, device=DEVICE), 2),
    "cummax dim": lambda: torch.cummax(torch.ones(2, 3, device=DEVICE), -3),
    "cummin 0-d dim": lambda: torch.cummin(torch.tensor(1.0, device=DEVICE), 1),
    "sort dim": lambda: torch.sort(torch.ones(2, 3, device=DEVICE), 2),
    "sort out dtype": lambda: torch.sort(torch.ones(3, device=DEVICE), out=(torch.empty(3, device=DEVICE),
                                                                              torch.empty(3, device=DEVICE))),
    "argsort dim": lambda: torch.argsort(torch.ones(4, device=DEVICE), -2),
}


def _error(call: Callable[[], Any]) -> tuple[type, str]:
    with pytest.raises(Exception) as info:
        call()
    return info.type, str(info.value)


@pytest.mark.parametrize("name", sorted(BAD_CALLS))
def test_bad_inputs_raise_atens_error(name: str) -> None:
    expected = _error(BAD_CALLS[name])
    with gems_core.use_gems():
        assert _error(BAD_CALLS[name]) == expected
