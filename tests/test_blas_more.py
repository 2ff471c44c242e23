"""dot, vdot, addmv and addr on gems (gems_core/ops/blas_more.py): ATen's results in float64
on random data (strided and expanded vectors, transposed matrices, broadcast ``self``, beta
0 ignoring NaN, empty sizes, out=), served by gems, and ATen's errors for bad shapes and
dtypes (and integer operands, left to ATen)."""

from __future__ import annotations

import pytest
import torch
from outcomes import answer
from served import on_aten_and_gems

import gems_core

DEVICE = torch.device(gems_core.device)
OPS = ["dot", "vdot", "addmv", "addr", "dot.out", "vdot.out", "addmv.out", "addr.out"]
_g = torch.Generator().manual_seed(0)


def rand(*shape: int) -> torch.Tensor:
    return (torch.rand(shape, generator=_g, dtype=torch.float64) * 6 - 3).to(DEVICE)


A, B = rand(37), rand(74)[::2]
M, V = rand(5, 37), rand(5)
NAN_SELF = torch.full((5,), float("nan"), dtype=torch.float64, device=DEVICE)
CALLS = {
    "dot": lambda: torch.dot(A, B),
    "vdot": lambda: torch.vdot(A, B),
    "dot empty": lambda: torch.dot(A[:0], B[:0]),
    "addmv": lambda: torch.addmv(V, M, A, beta=0.5, alpha=2),
    "addmv transposed, broadcast self": lambda: torch.addmv(V[:1], M.t().contiguous().t(), A),
    "addmv beta 0": lambda: torch.addmv(NAN_SELF, M, A, beta=0),
    "addr": lambda: torch.addr(M[:, :4], V, A[:4], alpha=3),
    "addr broadcast self": lambda: torch.addr(A[:4], V, A[:4].expand(4), beta=-1),
    "dot out": lambda: torch.dot(A, B, out=torch.empty((), dtype=torch.float64, device=DEVICE)),
    "addmv out": lambda: torch.addmv(V, M, A, out=torch.empty(5, dtype=torch.float64, device=DEVICE)),
    "addr out": lambda: torch.addr(M[:, :4], V, A[:4], out=torch.empty(5, 4, dtype=torch.float64, device=DEVICE)),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_matches_aten_and_is_served(call: str) -> None:
    want, got = on_aten_and_gems(CALLS[call], OPS)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("bad", [
    lambda: torch.dot(A, B[:3]),
    lambda: torch.dot(A, B.float()),
    lambda: torch.dot(M, M),
    lambda: torch.addmv(V, M, A[:3]),
    lambda: torch.addr(M, V, A[:3]),
    lambda: torch.dot(A.long(), B.long()),
])
def test_bad_inputs_match_aten(bad) -> None:
    want = answer(bad)
    with gems_core.use_gems(include=OPS):
        got = answer(bad)
    assert got == want  # ATen's error, or (addr of matching sizes, integer dot) its result
