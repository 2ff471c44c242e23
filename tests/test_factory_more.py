"""linspace, logspace and eye on gems (gems_core/ops/factory_more.py): ATen's values (float64
within a unit of the last place, where ATen's vectorized loop rounds differently; narrower
floats within one of theirs), served by
gems, and ATen's errors for negative sizes and ends the dtype cannot hold; logspace into an
integer dtype stays on ATen."""

from __future__ import annotations

import pytest
import torch
from outcomes import answer
from served import on_aten_and_gems

import gems_core

DEVICE = torch.device(gems_core.device)
OPS = ["linspace", "linspace.out", "logspace", "logspace.out", "eye", "eye.m", "eye.out", "eye.m_out"]
F64 = torch.float64

CALLS = {
    "linspace float64": lambda: torch.linspace(-3.3, 7.1, 17, dtype=F64, device=DEVICE),
    "linspace decreasing": lambda: torch.linspace(6, -2.5, 1000 + 17, dtype=F64, device=DEVICE),
    "linspace int64": lambda: torch.linspace(0.5, 10.7, 7, dtype=torch.int64, device=DEVICE),
    "linspace one step": lambda: torch.linspace(2, -5, 1, dtype=F64, device=DEVICE),
    "linspace no steps": lambda: torch.linspace(2, -5, 0, dtype=F64, device=DEVICE),
    "linspace tensor ends": lambda: torch.linspace(torch.tensor(1.0), torch.tensor(5.0), 9, dtype=F64, device=DEVICE),
    "linspace out": lambda: torch.linspace(0, 1, 5, out=torch.empty(5, dtype=F64, device=DEVICE)),
    "logspace": lambda: torch.logspace(-2, 3, 11, dtype=F64, device=DEVICE),
    "logspace base 2": lambda: torch.logspace(4, -3, 9, base=2, dtype=F64, device=DEVICE),
    "eye": lambda: torch.eye(4, dtype=F64, device=DEVICE),
    "eye wide int32": lambda: torch.eye(3, 5, dtype=torch.int32, device=DEVICE),
    "eye bool": lambda: torch.eye(3, dtype=torch.bool, device=DEVICE),
    "eye empty": lambda: torch.eye(0, 2, device=DEVICE),
    "eye out": lambda: torch.eye(2, 3, out=torch.empty(2, 3, dtype=F64, device=DEVICE)),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_matches_aten_and_is_served(call: str) -> None:
    want, got = on_aten_and_gems(CALLS[call], OPS)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float16, torch.bfloat16))
def test_narrow_linspace_within_an_ulp(dtype: torch.dtype) -> None:
    want = torch.linspace(-1, 3, 101, dtype=torch.float64, device=DEVICE)
    _, got = on_aten_and_gems(lambda: torch.linspace(-1, 3, 101, dtype=dtype, device=DEVICE), OPS)
    assert got.dtype == dtype
    ulp = torch.finfo(dtype).eps * want.abs().clamp_min(1)
    assert ((got.double() - want).abs() <= ulp).all()


def test_integer_logspace_stays_on_aten(monkeypatch: pytest.MonkeyPatch) -> None:
    from gems_core.ops import factory_more

    launched = []
    monkeypatch.setattr(factory_more, "_fill_linspace", lambda *args: launched.append(args))
    want = torch.logspace(0, 4, 5, dtype=torch.int64, device=DEVICE)
    with gems_core.use_gems(include=OPS):
        got = torch.logspace(0, 4, 5, dtype=torch.int64, device=DEVICE)
    assert not launched and torch.equal(got, want)


@pytest.mark.parametrize("bad", [
    lambda: torch.linspace(0, 1, -2, device=DEVICE),
    lambda: torch.linspace(-3.5, 7, 5, dtype=torch.uint8, device=DEVICE),
    lambda: torch.linspace(0, 1e6, 5, dtype=torch.float16, device=DEVICE),
    lambda: torch.eye(-1, device=DEVICE),
])
def test_bad_arguments_raise_atens_errors(bad) -> None:
    want = answer(bad)
    with gems_core.use_gems(include=OPS):
        got = answer(bad)
    assert isinstance(want, str) and got == want  # ATen raises, and gems leaves the call to it
