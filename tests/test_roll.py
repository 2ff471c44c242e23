"""roll on gems (gems_core/ops/roll.py): ATen's values and layout on float64 random data for
every layout, shifts past the size, negative shifts, several and repeated dims and flat
rolls; the call served by gems; ATen's own errors for bad shifts and dims."""

from __future__ import annotations

import pytest
import torch
from gems_conformance.routing import RouteWatch, implementations
from outcomes import answer

import gems_core

DEVICE = torch.device(gems_core.device)
X = torch.rand(4, 5, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64).to(DEVICE) * 6 - 3
INPUTS = {"contiguous": X, "transposed": X.transpose(0, 2), "sliced": X[:, ::2], "broadcast": X[:1].expand(3, 5, 6)}
ROLLS = [((1,), (0,)), ((-2, 3), (1, 2)), ((7,), ()), ((0,), (1,)), ((3, 4, 5), (0, 1, 2)), ((13,), (-1,)),
         ((2, 2), (1, 1))]


def _watch(op: str) -> RouteWatch:
    return RouteWatch(implementations([op])[op])


@pytest.mark.parametrize("layout", sorted(INPUTS))
@pytest.mark.parametrize(("shifts", "dims"), ROLLS)
def test_roll_matches_aten(layout: str, shifts: tuple[int, ...], dims: tuple[int, ...]) -> None:
    x = INPUTS[layout]
    want = torch.roll(x, shifts, dims)
    with _watch("roll") as watch, gems_core.use_gems(include=["roll"]):
        got = torch.roll(x, shifts, dims)
    assert watch.hit and got.stride() == want.stride() and torch.equal(got, want)


def test_roll_out_empty_and_0d() -> None:
    out = torch.empty(4, 5, 6, dtype=torch.float64, device=DEVICE)
    empty, scalar = torch.empty(0, 3, device=DEVICE), torch.tensor(2.5, device=DEVICE)
    with _watch("roll.out") as watch_out, gems_core.use_gems(include=["roll.out"]):
        result = torch.ops.aten.roll.out(X, [2], [1], out=out)
    with _watch("roll") as watch, gems_core.use_gems(include=["roll"]):
        rolled_empty, rolled_scalar = torch.roll(empty, 1, 1), torch.roll(scalar, 3)
    assert watch_out.hit and watch.hit and result is out and torch.equal(out, torch.roll(X, 2, 1))
    assert rolled_empty.shape == (0, 3) and torch.equal(rolled_scalar, scalar)


@pytest.mark.parametrize("bad", [
    lambda x: torch.roll(x, (1, 2), (0,)),
    lambda x: torch.roll(x, 1, 5),
    lambda x: torch.roll(x, (1, 2)),
    lambda x: torch.roll(x[0, 0, 0], 1, 0),
])
def test_bad_rolls_raise_atens_errors(bad) -> None:
    want = answer(lambda: bad(X))
    with gems_core.use_gems(include=["roll"]):
        got = answer(lambda: bad(X))
    assert isinstance(want, str) and got == want  # ATen raises, and gems leaves the call to it
