"""Antialiased upsampling on gems (gems_core/ops/resample_aa.py): F.interpolate(...,
antialias=True) in bilinear and bicubic mode against ATen in float64 (forward, and the input
gradient through autograd), for downscales that average wide windows, upscales, align_corners,
channels_last and transposed inputs, served by gems; uint8 stays on ATen (its fixed-point
rounding), and bad arguments raise ATen's errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from gems_conformance.routing import RouteWatch, implementations
from outcomes import answer

import gems_core

DEVICE = torch.device(gems_core.device)
OPS = [f"_upsample_{m}2d_aa{s}" for m in ("bilinear", "bicubic") for s in ("", "_backward", ".out")]
CODES = frozenset().union(*implementations(OPS).values())
_g = torch.Generator().manual_seed(0)
X = (torch.rand(2, 3, 11, 17, generator=_g, dtype=torch.float64) * 6 - 3).to(DEVICE)
INPUTS = {"contiguous": X, "channels_last": X.contiguous(memory_format=torch.channels_last),
          "transposed": X.transpose(2, 3).contiguous().transpose(2, 3)}
RESIZES = [{"size": (3, 4)}, {"size": (25, 9)}, {"scale_factor": 0.3}, {"scale_factor": (1.7, 0.45)}]


@pytest.mark.parametrize("mode", ("bilinear", "bicubic"))
@pytest.mark.parametrize("align", (False, True))
@pytest.mark.parametrize("layout", sorted(INPUTS))
@pytest.mark.parametrize("resize", range(len(RESIZES)))
def test_matches_aten_forward_and_backward(mode: str, align: bool, layout: str, resize: int) -> None:
    def run(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = x.detach().requires_grad_()
        y = F.interpolate(x, mode=mode, align_corners=align, antialias=True, **RESIZES[resize])
        (grad,) = torch.autograd.grad(y, x, torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view(y.shape))
        return y, grad

    want_y, want_grad = run(INPUTS[layout])
    with RouteWatch(CODES) as watch, gems_core.use_gems(include=OPS):
        got_y, got_grad = run(INPUTS[layout])
    assert watch.hit
    assert got_y.stride() == want_y.stride() and got_grad.stride() == want_grad.stride()
    torch.testing.assert_close(got_y, want_y, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-12, atol=1e-12)


def test_out_and_empty_batch() -> None:
    out = torch.empty(0, dtype=torch.float64, device=DEVICE)
    with RouteWatch(CODES) as watch, gems_core.use_gems(include=OPS):
        result = torch.ops.aten._upsample_bicubic2d_aa.out(X, [4, 5], False, None, None, out=out)
        empty = F.interpolate(X[:0], size=(4, 5), mode="bilinear", antialias=True)
    assert watch.hit and result is out and empty.shape == (0, 3, 4, 5)
    torch.testing.assert_close(out, F.interpolate(X, size=(4, 5), mode="bicubic", antialias=True), rtol=1e-12, atol=1e-12)


def test_uint8_stays_on_aten(monkeypatch: pytest.MonkeyPatch) -> None:
    from gems_core.ops import resample_aa

    applied = []
    monkeypatch.setattr(resample_aa, "_apply", lambda *args, **kwargs: applied.append(args))
    x = (X.abs() * 40).to(torch.uint8)
    want = F.interpolate(x, size=(4, 5), mode="bilinear", antialias=True)
    with gems_core.use_gems(include=OPS):
        got = F.interpolate(x, size=(4, 5), mode="bilinear", antialias=True)
        F.interpolate(X, size=(4, 5), mode="bilinear", antialias=True)  # a float64 call reaches the kernels
    assert len(applied) == 1 and torch.equal(got, want)


@pytest.mark.parametrize("bad", [
    lambda: torch.ops.aten._upsample_bilinear2d_aa(X, [0, 3], False),
    lambda: torch.ops.aten._upsample_bicubic2d_aa(X[0], [3, 3], False),
    lambda: torch.ops.aten._upsample_bilinear2d_aa_backward(X, [3, 3], [2, 3, 11, 17], False),
])
def test_bad_arguments_raise_atens_errors(bad) -> None:
    want = answer(bad)
    with gems_core.use_gems(include=OPS):
        got = answer(bad)
    assert isinstance(want, str) and got == want  # ATen raises, and gems leaves the call to it
