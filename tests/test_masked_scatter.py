"""masked_scatter(_) on gems (gems_core/ops/masked_scatter.py): ATen's values and layout on
float64 random data (non-contiguous self and mask, broadcast mask and self, a source longer
than needed, an all-false and an empty mask), served by gems, and ATen's own errors for a
short source, a non-bool mask, mismatched dtypes and shapes that do not broadcast."""

from __future__ import annotations

import pytest
import torch
from outcomes import answer
from served import on_aten_and_gems

import gems_core

DEVICE = torch.device(gems_core.device)
OPS = ["masked_scatter", "masked_scatter_", "masked_scatter.out"]
_g = torch.Generator().manual_seed(0)
X = (torch.rand(4, 5, generator=_g, dtype=torch.float64) * 6 - 3).to(DEVICE)
MASK = (torch.rand(4, 5, generator=_g) > 0.5).to(DEVICE)
SOURCE = (torch.rand(30, generator=_g, dtype=torch.float64) * 6 - 3).to(DEVICE)

CALLS = {
    "functional": lambda: X.masked_scatter(MASK, SOURCE),
    "in place": lambda: X.clone().masked_scatter_(MASK, SOURCE),
    "transposed": lambda: X.t().clone().masked_scatter_(MASK.t(), SOURCE.view(5, 6)),
    "transposed functional": lambda: X.t().masked_scatter(MASK.t(), SOURCE),
    "broadcast mask": lambda: X.masked_scatter(MASK[0], SOURCE),
    "broadcast self": lambda: X[0].masked_scatter(MASK, SOURCE),
    "all false": lambda: X.clone().masked_scatter_(torch.zeros(5, dtype=torch.bool, device=DEVICE), SOURCE[:2]),
    "empty": lambda: X[:0].masked_scatter(MASK[0], SOURCE),
    "out": lambda: torch.ops.aten.masked_scatter.out(X, MASK, SOURCE, out=torch.empty_like(X)),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_matches_aten_and_is_served(call: str) -> None:
    want, got = on_aten_and_gems(CALLS[call], OPS)
    assert got.stride() == want.stride() and torch.equal(got, want)


@pytest.mark.parametrize("bad", [
    lambda: X.clone().masked_scatter_(MASK, SOURCE[:3]),
    lambda: X.clone().masked_scatter_(MASK.int(), SOURCE),
    lambda: X.clone().masked_scatter_(MASK, SOURCE.float()),
    lambda: X[0].clone().masked_scatter_(MASK, SOURCE),
])
def test_bad_inputs_raise_atens_errors(bad) -> None:
    want = answer(bad)
    with gems_core.use_gems(include=OPS):
        got = answer(bad)
    assert isinstance(want, str) and got == want  # ATen raises, and gems leaves the call to it
