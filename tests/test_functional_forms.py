"""fill and index_put (functional and out=) on gems (gems_core/ops/functional_forms.py):
ATen's values, dtype and layout on float64 random data, served by gems, and ATen's errors
(a value tensor that is not 0-d, an index out of range, values that do not broadcast)."""

from __future__ import annotations

import pytest
import torch
from served import on_aten_and_gems

import gems_core

DEVICE = torch.device(gems_core.device)
OPS = ["fill.Scalar", "fill.Tensor", "fill.Scalar_out", "index_put", "index_put.out"]
_g = torch.Generator().manual_seed(0)
X = (torch.rand(4, 5, generator=_g, dtype=torch.float64) * 6 - 3).to(DEVICE)
ROWS = torch.tensor([3, 0, -1], device=DEVICE)
V53 = (torch.rand(5, 3, generator=_g, dtype=torch.float64) * 6 - 3).to(DEVICE)
aten = torch.ops.aten

CALLS = {
    "fill transposed": lambda: torch.fill(X.t(), 2.5),
    "fill tensor value": lambda: torch.fill(X, torch.tensor(3)),
    "fill int64": lambda: torch.fill(X.long(), 7),
    "fill empty": lambda: torch.fill(X[:0], 1.0),
    "fill out": lambda: aten.fill.Scalar_out(X, -1.5, out=torch.empty_like(X)),
    "index_put rows": lambda: torch.index_put(X, (ROWS,), V53[:, 0]),
    "index_put columns accumulate": lambda: aten.index_put(X.t(), [None, ROWS], V53, True),
    "index_put repeated accumulate": lambda: torch.index_put(X, (torch.tensor([1, 1], device=DEVICE),), V53[:, :2].t(),
                                                             accumulate=True),
    "index_put out": lambda: aten.index_put.out(X, [ROWS], V53[:, 0], out=torch.empty_like(X)),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_matches_aten_and_is_served(call: str) -> None:
    want, got = on_aten_and_gems(CALLS[call], OPS)
    assert got.dtype == want.dtype and got.stride() == want.stride() and torch.equal(got, want)


@pytest.mark.parametrize("bad", [
    lambda: torch.fill(X, torch.ones(2)),
    lambda: torch.index_put(X, (ROWS,), V53[:4, 0]),
    pytest.param(lambda: torch.index_put(X, (torch.tensor([9]),), V53[:, 0]), marks=pytest.mark.skipif(
        DEVICE.type != "cpu", reason="ATen checks the index by a device-side assertion there, which ends the "
        "process's context")),
])
def test_bad_inputs_raise_atens_errors(bad) -> None:
    def error() -> tuple[type, str] | None:
        try:
            bad()
        except Exception as exc:  # noqa: BLE001 - the error itself is compared
            return type(exc), str(exc)
        return None

    want = error()
    with gems_core.use_gems(include=OPS):
        got = error()
    # an index out of range raises index_put_'s IndexError subclass
    assert want is not None and got is not None and issubclass(got[0], want[0]) and got[1] == want[1]
