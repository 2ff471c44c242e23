"""ATen's errors and edge answers for all/any, argmax, max/min, prod, var_mean,
vector_norm, cumsum, nll_loss and group_norm, the same with gems on."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import gems_core

DEVICE = torch.device(gems_core.device)
OPS = ["all", "any", "argmax", "max", "min", "prod", "var_mean", "linalg_vector_norm", "cumsum",
       "nll_loss_forward", "nll_loss2d_forward", "native_group_norm"]

#: out-of-range targets: checked on the host only for CPU tensors (by ATen and gems alike); on a
#: GPU a device-side assertion checks them, which ends the process's context
HOST_CHECKED = pytest.mark.skipif(DEVICE.type != "cpu", reason="checked by a device-side assertion there")
BAD_CALLS = [
    pytest.param(lambda: torch.max(torch.ones(0, 3, device=DEVICE)), RuntimeError, "numel\\(\\) == 0", id="max-empty"),
    pytest.param(lambda: torch.max(torch.ones(2, 0, device=DEVICE), 1), IndexError, "non-zero size",
                 id="max-dim-empty"),
    pytest.param(lambda: torch.argmax(torch.ones(0, device=DEVICE)), IndexError, "numel\\(\\) == 0", id="argmax-empty"),
    pytest.param(lambda: torch.argmax(torch.ones(3, dtype=torch.bool, device=DEVICE)), RuntimeError, "bool",
                 id="argmax-bool"),
    pytest.param(lambda: torch.argmax(torch.ones(2, 3, device=DEVICE), 2), IndexError, "Dimension out of range",
                 id="argmax-dim"),
    pytest.param(lambda: torch.all(torch.ones(2, 3, device=DEVICE), 3), IndexError, "Dimension out of range",
                 id="all-dim"),
    pytest.param(lambda: torch.var_mean(torch.ones(3, dtype=torch.int32, device=DEVICE)), RuntimeError,
                 "floating point", id="var-int"),
    pytest.param(lambda: torch.linalg.vector_norm(torch.ones(0, 3, device=DEVICE), float("inf")), RuntimeError,
                 "identity", id="norm-inf-empty"),
    pytest.param(lambda: torch.linalg.vector_norm(torch.ones(3, dtype=torch.int32, device=DEVICE)), RuntimeError,
                 "floating", id="norm-int"),
    pytest.param(lambda: torch.cumsum(torch.ones(2, 3, device=DEVICE), 2), IndexError, "Dimension out of range",
                 id="cumsum-dim"),
    pytest.param(lambda: F.cross_entropy(torch.randn(3, 5, device=DEVICE), torch.tensor([1, 7, 2], device=DEVICE)),
                 IndexError, "Target 7 is out of bounds", id="nll-target", marks=HOST_CHECKED),
    pytest.param(lambda: F.cross_entropy(torch.randn(2, 5, 3, 4, device=DEVICE),
                                         torch.full((2, 3, 4), -2, device=DEVICE)),
                 IndexError, "Target -2 is out of bounds", id="nll2d-target", marks=HOST_CHECKED),
    pytest.param(lambda: F.group_norm(torch.ones(2, 6, 3, device=DEVICE), 4), RuntimeError, "divisible",
                 id="group-norm-groups"),
]


@pytest.mark.parametrize("call,error,message", BAD_CALLS)
def test_bad_arguments_raise_atens_error(call, error, message) -> None:
    with pytest.raises(error, match=message):
        call()
    with gems_core.use_gems(include=OPS), pytest.raises(error, match=message):
        call()


def test_empty_identities() -> None:
    with gems_core.use_gems(include=OPS):
        assert torch.all(torch.ones(0, device=DEVICE)).item() is True
        assert torch.any(torch.ones(2, 0, device=DEVICE), 1).tolist() == [False, False]
        assert torch.prod(torch.ones(0, dtype=torch.int32, device=DEVICE)).item() == 1
        assert torch.linalg.vector_norm(torch.ones(0, 3, device=DEVICE), dim=0).tolist() == [0.0, 0.0, 0.0]
        assert torch.var_mean(torch.ones(0, device=DEVICE))[1].isnan()


def test_argmax_of_a_split_row_takes_the_first_tie_and_the_first_nan() -> None:
    x = torch.zeros(2, 20000, device=DEVICE)
    x[0, [9000, 13000]] = 5
    x[1, [17000, 15000]] = float("nan")
    with gems_core.use_gems(include=["argmax", "max"]):
        assert torch.argmax(x, 1).tolist() == [9000, 15000]
        values, indices = torch.max(x, 1)
    assert values[0] == 5 and values[1].isnan() and indices.tolist() == [9000, 15000]


def test_cumsum_carries_across_tiles_of_a_long_row() -> None:
    x = torch.ones(3, 5000, dtype=torch.int32, device=DEVICE)
    with gems_core.use_gems(include=["cumsum"]):
        y = torch.cumsum(x, 1)
    assert y.dtype == torch.int64 and y[:, -1].tolist() == [5000] * 3
