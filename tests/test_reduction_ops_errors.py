"""ATen's errors and edge answers for all/any, argmax, max/min, prod, var_mean,
vector_norm, cumsum, nll_loss and group_norm, the same with gems on."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import gems_core

OPS = ["all", "any", "argmax", "max", "min", "prod", "var_mean", "linalg_vector_norm", "cumsum",
       "nll_loss_forward", "nll_loss2d_forward", "native_group_norm"]

BAD_CALLS = [
    pytest.param(lambda: torch.max(torch.ones(0, 3)), RuntimeError, "numel\\(\\) == 0", id="max-empty"),
    pytest.param(lambda: torch.max(torch.ones(2, 0), 1), IndexError, "non-zero size", id="max-dim-empty"),
    pytest.param(lambda: torch.argmax(torch.ones(0)), IndexError, "numel\\(\\) == 0", id="argmax-empty"),
    pytest.param(lambda: torch.argmax(torch.ones(3, dtype=torch.bool)), RuntimeError, "bool", id="argmax-bool"),
    pytest.param(lambda: torch.argmax(torch.ones(2, 3), 2), IndexError, "Dimension out of range", id="argmax-dim"),
    pytest.param(lambda: torch.all(torch.ones(2, 3), 3), IndexError, "Dimension out of range", id="all-dim"),
    pytest.param(lambda: torch.var_mean(torch.ones(3, dtype=torch.int32)), RuntimeError, "floating point",
                 id="var-int"),
    pytest.param(lambda: torch.linalg.vector_norm(torch.ones(0, 3), float("inf")), RuntimeError, "identity",
                 id="norm-inf-empty"),
    pytest.param(lambda: torch.linalg.vector_norm(torch.ones(3, dtype=torch.int32)), RuntimeError, "floating",
                 id="norm-int"),
    pytest.param(lambda: torch.cumsum(torch.ones(2, 3), 2), IndexError, "Dimension out of range", id="cumsum-dim"),
    pytest.param(lambda: F.cross_entropy(torch.randn(3, 5), torch.tensor([1, 7, 2])), IndexError,
                 "Target 7 is out of bounds", id="nll-target"),
    pytest.param(lambda: F.cross_entropy(torch.randn(2, 5, 3, 4), torch.full((2, 3, 4), -2)), IndexError,
                 "Target -2 is out of bounds", id="nll2d-target"),
    pytest.param(lambda: F.group_norm(torch.ones(2, 6, 3), 4), RuntimeError, "divisible", id="group-norm-groups"),
]


@pytest.mark.parametrize("call,error,message", BAD_CALLS)
def test_bad_arguments_raise_atens_error(call, error, message) -> None:
    with pytest.raises(error, match=message):
        call()
    with gems_core.use_gems(include=OPS), pytest.raises(error, match=message):
        call()


def test_empty_identities() -> None:
    with gems_core.use_gems(include=OPS):
        assert torch.all(torch.ones(0)).item() is True
        assert torch.any(torch.ones(2, 0), 1).tolist() == [False, False]
        assert torch.prod(torch.ones(0, dtype=torch.int32)).item() == 1
        assert torch.linalg.vector_norm(torch.ones(0, 3), dim=0).tolist() == [0.0, 0.0, 0.0]
        assert torch.var_mean(torch.ones(0))[1].isnan()


def test_argmax_of_a_split_row_takes_the_first_tie_and_the_first_nan() -> None:
    x = torch.zeros(2, 20000)
    x[0, [9000, 13000]] = 5
    x[1, [17000, 15000]] = float("nan")
    with gems_core.use_gems(include=["argmax", "max"]):
        assert torch.argmax(x, 1).tolist() == [9000, 15000]
        values, indices = torch.max(x, 1)
    assert values[0] == 5 and values[1].isnan() and indices.tolist() == [9000, 15000]


def test_cumsum_carries_across_tiles_of_a_long_row() -> None:
    x = torch.ones(3, 5000, dtype=torch.int32)
    with gems_core.use_gems(include=["cumsum"]):
        y = torch.cumsum(x, 1)
    assert y.dtype == torch.int64 and y[:, -1].tolist() == [5000] * 3
