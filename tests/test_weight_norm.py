"""weight_norm's kernels on gems (gems_core/ops/weight_norm.py): ``torch._weight_norm`` and
an ``nn.utils.weight_norm`` convolution in float64 against ATen (weights, norms and both
gradients, over the first and the last dim), served by gems; another dim stays on ATen's
composite."""

from __future__ import annotations

import pytest
import torch
from served import on_aten_and_gems

import gems_core

DEVICE = torch.device(gems_core.device)
OPS = ["_weight_norm_interface", "_weight_norm_interface_backward"]
_g = torch.Generator().manual_seed(0)


def rand(*shape: int) -> torch.Tensor:
    return (torch.rand(shape, generator=_g, dtype=torch.float64) * 6 - 3).to(DEVICE)


@pytest.mark.parametrize(("dim", "v", "g"), [(0, rand(4, 3, 5), rand(4, 1, 1)), (2, rand(4, 3, 5), rand(1, 1, 5)),
                                             (1, rand(6, 7).t(), rand(1, 6))])
def test_forward_and_gradients_match_aten(dim: int, v: torch.Tensor, g: torch.Tensor) -> None:
    def run() -> tuple[torch.Tensor, ...]:
        vv, gg = v.detach().requires_grad_(), g.detach().requires_grad_()
        w = torch._weight_norm(vv, gg, dim)
        w.backward(torch.linspace(-1, 1, w.numel(), dtype=w.dtype, device=DEVICE).view(w.shape))
        # (the norms of a contiguous v: ATen's CPU kernel reads a transposed one as if contiguous,
        # where the composite above makes it contiguous first)
        return w, vv.grad, gg.grad, torch._weight_norm_interface(v.contiguous(), g, dim)[1]

    want, got = on_aten_and_gems(run, OPS)
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype
        torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-13)


def test_weight_normed_convolution() -> None:
    conv = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(4, 6, 3, dtype=torch.float64)).to(DEVICE)
    x = rand(2, 4, 9)
    want, got = on_aten_and_gems(lambda: conv(x), OPS)
    torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-13)


def test_a_middle_dim_stays_on_atens_composite(monkeypatch: pytest.MonkeyPatch) -> None:
    from gems_core.ops import weight_norm

    normalized = []
    monkeypatch.setattr(weight_norm, "vector_norm", lambda *args, **kwargs: normalized.append(args))
    v, g = rand(4, 3, 5), rand(1, 3, 1)
    want = torch._weight_norm(v, g, 1)
    with gems_core.use_gems(include=OPS):
        got = torch._weight_norm(v, g, 1)
    assert not normalized
    torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-13)
