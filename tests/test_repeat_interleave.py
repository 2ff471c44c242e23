"""repeat_interleave with a tensor of repeats on gems (gems_core/ops/repeat_interleave.py):
ATen's results (int32 and int64 repeats, zeros among them, strided, long, an output_size,
none at all, through ``torch.repeat_interleave(x, repeats, dim)`` and out=), served by gems,
and ATen's errors for bad repeats."""

from __future__ import annotations

import pytest
import torch
from outcomes import answer
from served import on_aten_and_gems

import gems_core

DEVICE = torch.device(gems_core.device)
OPS = ["repeat_interleave.Tensor", "repeat_interleave.Tensor_out"]
_g = torch.Generator().manual_seed(0)
REPEATS = torch.randint(0, 5, (2000 + 17,), generator=_g).to(DEVICE)
X = (torch.rand(5, 3, generator=_g, dtype=torch.float64) * 6 - 3).to(DEVICE)

CALLS = {
    "int32": lambda: torch.repeat_interleave(REPEATS[:9].int()),
    "long": lambda: torch.repeat_interleave(REPEATS),
    "strided": lambda: torch.repeat_interleave(REPEATS[::3]),
    "zeros": lambda: torch.repeat_interleave(torch.tensor([0, 0, 4, 0], device=DEVICE)),
    "none": lambda: torch.repeat_interleave(REPEATS[:0]),
    "output_size": lambda: torch.repeat_interleave(REPEATS[:6], output_size=int(REPEATS[:6].sum())),
    "rows": lambda: torch.repeat_interleave(X, REPEATS[:5], dim=0),
    "out": lambda: torch.ops.aten.repeat_interleave.Tensor_out(
        REPEATS[:8], out=torch.empty(int(REPEATS[:8].sum()), dtype=torch.int64, device=DEVICE)),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_matches_aten_and_is_served(call: str) -> None:
    want, got = on_aten_and_gems(CALLS[call], OPS)
    assert got.dtype == want.dtype and torch.equal(got, want)


@pytest.mark.parametrize("bad", [
    lambda: torch.repeat_interleave(REPEATS[:4].view(2, 2)),
    lambda: torch.repeat_interleave(torch.tensor([1, -1], device=DEVICE)),
    lambda: torch.repeat_interleave(torch.tensor([1.5], device=DEVICE)),
    lambda: torch.repeat_interleave(torch.tensor([2, 1], device=DEVICE), output_size=5),
])
def test_bad_repeats_raise_atens_errors(bad) -> None:
    want = answer(bad)
    with gems_core.use_gems(include=OPS):
        got = answer(bad)
    assert isinstance(want, str) and got == want  # ATen raises, and gems leaves the call to it
