"""layer_norm / rms_norm inputs read in place: rows a stride apart need no copy."""

from __future__ import annotations

import pytest
import torch
from gems_conformance.routing import RouteWatch, implementations

from gems_core import runtime

runtime.current()  # select the backend before kernels are defined

import gems_core
from gems_core.registry import load_ops

DEVICE = gems_core.device


def _norm() -> object:
    load_ops()
    from gems_core.ops import norm

    return norm


@pytest.mark.parametrize(("make", "dims", "expected"), [
    (lambda: torch.empty(4, 6, 33), 1, 33),
    (lambda: torch.empty(4, 6, 33)[:, -1], 1, 198),
    (lambda: torch.empty(8, 33)[::2], 1, 66),
    (lambda: torch.empty(1, 33).expand(5, 33), 1, 0),
    (lambda: torch.empty(4, 6, 33)[:, 1:4], 1, None),  # leading dims step unlike
    (lambda: torch.empty(4, 6, 33), 2, 198),
    (lambda: torch.empty(4, 6, 33)[:, :, ::2], 1, None),  # a row is not contiguous
    (lambda: torch.empty(33, 4).t(), 1, None),
    (lambda: torch.empty(2, 1, 33).transpose(0, 1), 1, 33),  # size-1 dims step as they like
])
def test_row_stride(make, dims: int, expected: int | None) -> None:
    assert _norm().row_stride(make(), dims) == expected


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_strided_rows_are_read_in_place(op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The last position of a sequence is normalized where it lies: no copy of the input,
    a contiguous result equal to float64 ATen's."""
    torch.manual_seed(0)
    seq = torch.randn(3, 5, 40, device=DEVICE)
    x = seq[:, -1]
    w, b = torch.randn(40, device=DEVICE), torch.randn(40, device=DEVICE)
    copies: list[tuple[int, ...]] = []
    original = torch.Tensor.contiguous

    def watch(t: torch.Tensor, *args, **kwargs):
        if not t.is_contiguous():
            copies.append(tuple(t.shape))
        return original(t, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "contiguous", watch)
    codes = frozenset().union(*implementations(("rms_norm", "native_layer_norm")).values())
    with RouteWatch(codes) as route, gems_core.use_gems(include=["rms_norm", "native_layer_norm"]):
        if op == "rms_norm":
            got = torch.rms_norm(x, [40], w, 1e-6)
        else:
            got = torch.nn.functional.layer_norm(x, [40], w, b, 1e-5)
    monkeypatch.undo()
    assert route.hit and copies == []
    xd = x.double().cpu()
    if op == "rms_norm":
        want = torch.rms_norm(xd, [40], w.double().cpu(), 1e-6)
    else:
        want = torch.nn.functional.layer_norm(xd, [40], w.double().cpu(), b.double().cpu(), 1e-5)
    assert got.is_contiguous()
    torch.testing.assert_close(got.cpu().double(), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("m", "n", "dtype"), [
    (5, 7, torch.float64),  # few rows: one slice writes the gradients itself
    (40, 40, torch.float32),  # row slices of 16 summed by a second launch, a partial last slice
    (33, 33, torch.bfloat16),
    (37, 130, torch.float16),  # two column blocks
    (0, 8, torch.float32),  # no rows: zero gradients
])
def test_weight_and_bias_gradients_over_row_slices(m: int, n: int, dtype: torch.dtype) -> None:
    """layer_norm's and rms_norm's weight and bias gradients (sums over every row, split in
    slices of rows) against ATen in float64, with gems serving the backward."""
    load_ops()
    g = torch.Generator().manual_seed(m + n)
    x, w, b, dy = (torch.randn(*shape, generator=g).to(dtype).to(DEVICE) for shape in ((m, n), (n,), (n,), (m, n)))
    tol = {torch.float64: 1e-9, torch.float32: 1e-4, torch.bfloat16: 3e-2, torch.float16: 3e-3}[dtype]
    for rms in (False, True):
        ref = [t.detach().cpu().double().requires_grad_() for t in (x, w, b)]
        got = [t.detach().clone().requires_grad_() for t in (x, w, b)]
        if rms:
            torch.nn.functional.rms_norm(ref[0], (n,), ref[1]).backward(dy.cpu().double())
            name = "rms_norm"
        else:
            torch.nn.functional.layer_norm(ref[0], (n,), ref[1], ref[2]).backward(dy.cpu().double())
            name = "native_layer_norm_backward"
        with RouteWatch(implementations([name])[name]) as watch, gems_core.use_gems():
            if rms:
                torch.nn.functional.rms_norm(got[0], (n,), got[1]).backward(dy)
            else:
                torch.nn.functional.layer_norm(got[0], (n,), got[1], got[2]).backward(dy)
        assert watch.hit, f"gems did not serve {name}"
        for mine, want in zip(got[: 2 if rms else 3], ref):
            torch.testing.assert_close(mine.grad.cpu().double(), want.grad, rtol=tol, atol=tol * max(1.0, m**0.5))
