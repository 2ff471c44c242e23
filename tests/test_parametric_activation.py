"""celu and PReLU's kernels on gems (gems_core/ops/parametric_activation.py): ATen's values
in float64 (random data with its special values) for celu's three forms and for F.prelu
and its gradients (a weight per channel on a transposed input, and one weight), served by
gems; integer inputs and alpha 0 stay with ATen's errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from outcomes import answer
from served import on_aten_and_gems

import gems_core

DEVICE = torch.device(gems_core.device)
OPS = ["celu", "celu_", "celu.out", "_prelu_kernel", "_prelu_kernel_backward"]
_g = torch.Generator().manual_seed(0)
X = (torch.rand(2, 3, 5, generator=_g, dtype=torch.float64) * 6 - 3).to(DEVICE)
X[0, 0, :3] = torch.tensor([float("nan"), float("inf"), float("-inf")])
W = (torch.rand(3, generator=_g, dtype=torch.float64) - 0.5).to(DEVICE)


def _prelu(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
    y = F.prelu(x, w)
    return (y, *torch.autograd.grad(y, (x, w), torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view(y.shape)))


CALLS = {
    "celu": lambda: F.celu(X, 0.7),
    "celu_": lambda: F.celu(X.clone(), 1.3, inplace=True),
    "celu out": lambda: torch.ops.aten.celu.out(X, 2.0, out=torch.empty_like(X)),
    "prelu per channel": lambda: _prelu(X.transpose(1, 2).contiguous().transpose(1, 2), W),
    "prelu one weight": lambda: _prelu(X[1:].nan_to_num(), W[:1]),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_matches_aten_and_is_served(call: str) -> None:
    want, got = on_aten_and_gems(CALLS[call], OPS)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        # (values: a transposed input's PReLU result takes the pointwise generator's layout)
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12, equal_nan=True)


@pytest.mark.parametrize("bad", [lambda: F.celu(X, 0.0), lambda: F.celu(X.long()),
                                 lambda: torch.ops.aten._prelu_kernel(X.long(), W.long())])
def test_bad_inputs_raise_atens_errors(bad) -> None:
    want = answer(bad)
    with gems_core.use_gems(include=OPS):
        got = answer(bad)
    assert isinstance(want, str) and got == want  # ATen raises, and gems leaves the call to it
