"""trace, count_nonzero, equal and angle on gems (gems_core/ops/reduction_more.py): ATen's
results and dtypes on random data with zeros (float64 and int64, transposed and sliced
inputs, NaN), served by gems, and ATen's errors for what it rejects."""

from __future__ import annotations

import pytest
import torch
from outcomes import answer
from served import on_aten_and_gems

import gems_core

DEVICE = torch.device(gems_core.device)
OPS = ["trace", "trace.out", "count_nonzero", "count_nonzero.dim_IntList", "count_nonzero.out",
       "count_nonzero.dim_IntList_out", "equal", "angle", "angle.out"]
_g = torch.Generator().manual_seed(0)
X = (torch.rand(4, 5, generator=_g, dtype=torch.float64) * 6 - 3).to(DEVICE)
X[X < -1] = 0
XI = torch.randint(-3, 3, (4, 5), generator=_g).to(DEVICE)
NAN = torch.tensor([-1.0, float("nan"), -0.0, 2.0], dtype=torch.float64, device=DEVICE)

CALLS = {
    "trace": lambda: torch.trace(X),
    "trace int64": lambda: torch.trace(XI),
    "trace transposed slice": lambda: torch.trace(X.t()[:3]),
    "trace out": lambda: torch.ops.aten.trace.out(X, out=torch.empty((), dtype=torch.float64, device=DEVICE)),
    "count_nonzero": lambda: torch.count_nonzero(X),
    "count_nonzero dim": lambda: torch.count_nonzero(X.t(), 1),
    "count_nonzero dims int": lambda: torch.count_nonzero(XI, (0, 1)),
    "count_nonzero out": lambda: torch.ops.aten.count_nonzero.dim_IntList_out(
        X, [0], out=torch.empty(5, dtype=torch.int64, device=DEVICE)),
    "equal": lambda: torch.equal(X, X.clone()),
    "equal differs": lambda: torch.equal(X, X + 1e-12),
    "equal shapes": lambda: torch.equal(X, X[:3]),
    "equal NaN": lambda: torch.equal(NAN, NAN.clone()),
    "angle": lambda: torch.angle(NAN),
    "angle int": lambda: torch.angle(XI),
    "angle out": lambda: torch.angle(NAN, out=torch.empty_like(NAN)),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_matches_aten_and_is_served(call: str) -> None:
    want, got = on_aten_and_gems(CALLS[call], OPS)
    if isinstance(want, bool):
        assert got is want
    else:
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12, equal_nan=True)


@pytest.mark.parametrize("bad", [lambda: torch.trace(X[None]), lambda: torch.trace(X.bool()),
                                 lambda: torch.count_nonzero(X, 2), lambda: torch.count_nonzero(X, (1, 1))])
def test_bad_inputs_raise_atens_errors(bad) -> None:
    want = answer(bad)
    with gems_core.use_gems(include=OPS):
        got = answer(bad)
    assert isinstance(want, str) and got == want  # ATen raises, and gems leaves the call to it
