"""ATen's errors for bad reduction, softmax and norm arguments, raised the same way with gems on."""

from __future__ import annotations

import pytest
import torch

import gems_core

DEVICE = torch.device(gems_core.device)
BAD_CALLS = [
    pytest.param(lambda: torch.sum(torch.ones(2, 3, device=DEVICE), 2), IndexError, "Dimension out of range",
                 id="sum-dim"),
    pytest.param(lambda: torch.sum(torch.ones((), device=DEVICE), 1), IndexError, "Dimension out of range",
                 id="sum-0d-dim"),
    pytest.param(lambda: torch.sum(torch.ones(2, 3, device=DEVICE), [0, -2]), RuntimeError, "appears multiple times",
                 id="sum-repeat"),
    pytest.param(lambda: torch.mean(torch.ones(2, 3, dtype=torch.int64, device=DEVICE)), RuntimeError,
                 "could not infer output dtype", id="mean-int"),
    pytest.param(lambda: torch.amax(torch.ones(0, 3, device=DEVICE)), RuntimeError, "Expected reduction dim",
                 id="amax-empty"),
    pytest.param(lambda: torch.amax(torch.ones(0, 3, device=DEVICE), 0), IndexError, "non-zero size",
                 id="amax-empty-dim"),
    pytest.param(lambda: torch.softmax(torch.ones(2, 3, device=DEVICE), -3), IndexError, "Dimension out of range",
                 id="softmax-dim"),
    pytest.param(lambda: torch.softmax(torch.ones(2, 3, dtype=torch.int32, device=DEVICE), 0), RuntimeError,
                 "not implemented for 'Int'", id="softmax-int"),
    pytest.param(lambda: torch.layer_norm(torch.ones(2, 3, device=DEVICE), [4]), RuntimeError, "normalized_shape",
                 id="layer-norm-shape"),
    pytest.param(lambda: torch.rms_norm(torch.ones(2, 3, device=DEVICE), [4]), RuntimeError, "normalized_shape",
                 id="rms-norm-shape"),
]


@pytest.mark.parametrize("call,error,message", BAD_CALLS)
def test_bad_arguments_raise_atens_error(call, error, message) -> None:
    with pytest.raises(error, match=message):
        call()
    ops = ["sum", "mean", "amax", "_softmax", "native_layer_norm", "rms_norm"]
    with gems_core.use_gems(include=ops), pytest.raises(error, match=message):
        call()


def test_amax_propagates_nan_from_a_split_row() -> None:
    x = torch.randn(2, 5000, device=DEVICE)
    x[1, 4321] = float("nan")
    with gems_core.use_gems(include=["amax"]):
        result = torch.amax(x, 1)
    assert not result[0].isnan() and result[1].isnan()


def test_sum_out_resizes_and_keeps_out_dtype() -> None:
    out = torch.empty(0, dtype=torch.float64, device=DEVICE)
    x = torch.randn(3, 4, device=DEVICE)
    with gems_core.use_gems(include=["sum"]):
        torch.sum(x, 1, out=out)
    assert out.dtype == torch.float64 and out.shape == (3,)
    torch.testing.assert_close(out.cpu(), x.cpu().double().sum(1), rtol=1e-6, atol=1e-6)
