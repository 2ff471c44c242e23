"""pixel_shuffle and pixel_unshuffle on gems (gems_core/ops/pixel_shuffle.py): ATen's values
and layout (channels_last kept) on float64 random data of every layout and an extra batch
dim, served by gems, and ATen's errors for factors that do not divide."""

from __future__ import annotations

import pytest
import torch
from gems_conformance.routing import RouteWatch, implementations
from outcomes import answer

import gems_core

DEVICE = torch.device(gems_core.device)
OPS = ["pixel_shuffle", "pixel_unshuffle", "pixel_shuffle.out", "pixel_unshuffle.out"]
CODES = frozenset().union(*implementations(OPS).values())
X = (torch.rand(2, 8, 6, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 6 - 3).to(DEVICE)
INPUTS = {"contiguous": X, "channels_last": X.contiguous(memory_format=torch.channels_last),
          "transposed": X.transpose(2, 3), "5-d": X[None], "sliced": X[:, :, ::2]}


CALLS = [(layout, op, factor) for layout in sorted(INPUTS)
         for op, factor in ((torch.pixel_shuffle, 2), (torch.pixel_unshuffle, 2), (torch.pixel_shuffle, 1))
         if op is torch.pixel_shuffle or INPUTS[layout].shape[-2] % factor == 0]


@pytest.mark.parametrize(("layout", "op", "factor"), CALLS)
def test_matches_aten_and_is_served(layout: str, op, factor: int) -> None:
    x = INPUTS[layout]
    want = op(x, factor)
    with RouteWatch(CODES) as watch, gems_core.use_gems(include=OPS):
        got = op(x, factor)
    assert watch.hit and got.stride() == want.stride() and torch.equal(got, want)


def test_out() -> None:
    out = torch.empty(2, 32, 3, 2, dtype=torch.float64, device=DEVICE)
    with RouteWatch(CODES) as watch, gems_core.use_gems(include=OPS):
        result = torch.ops.aten.pixel_unshuffle.out(X, 2, out=out)
    assert watch.hit and result is out and torch.equal(out, torch.pixel_unshuffle(X, 2))


@pytest.mark.parametrize("bad", [lambda: torch.pixel_shuffle(X, 3), lambda: torch.pixel_unshuffle(X, 5),
                                 lambda: torch.pixel_shuffle(X[0, 0], 2)])
def test_bad_factors_raise_atens_errors(bad) -> None:
    want = answer(bad)
    with gems_core.use_gems(include=OPS):
        got = answer(bad)
    assert isinstance(want, str) and got == want  # ATen raises, and gems leaves the call to it
