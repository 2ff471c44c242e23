"""The pointwise breadth beyond the op cases: every overload of the new modules registers,
rejected inputs raise ATen's own errors (through gems' hand-off), float64 inputs of the
float32-accurate ops go to ATen, and a small classifier trains through the new activation
and loss backwards on gems."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from gems_conformance.routing import RouteWatch, implementations
from outcomes import answer

import gems_core

DEVICE = torch.device(gems_core.device)
X = torch.tensor([[-2.5, 0.5, 1.0], [3.0, -0.25, 2.0]], device=DEVICE)
INTS = torch.tensor([5, -7, 9], device=DEVICE)

#: overloads of the issue's packets that must be gems' own (the aliases arcsinh, arctanh,
#: relu6, selu, celu, square and __or__ reach these through ATen's composites)
SERVED = (
    "acos", "addcdiv", "addcmul_", "asinh_", "atanh_", "atan", "atan2", "atan_", "ceil_", "copysign.Tensor",
    "cosh_", "elu", "elu_", "elu_backward", "exp2_", "expm1_", "floor_", "fmin", "glu", "glu_backward",
    "hardsigmoid", "hardswish_", "hardtanh", "hypot", "i0_", "lerp_.Scalar", "lerp.Tensor", "log", "log10_",
    "log1p_", "log_sigmoid_forward", "logaddexp", "logical_and_", "logical_not", "logical_or_", "logical_xor",
    "logit_", "remainder_.Tensor", "round_", "sgn_", "sigmoid_backward", "signbit", "sinh_", "softplus",
    "softshrink", "sqrt_", "tan_", "tanh_backward", "threshold", "threshold_backward", "mse_loss",
    "bitwise_left_shift.Tensor", "bitwise_right_shift.Tensor_Scalar",
)


def test_the_packets_are_registered() -> None:
    missing = [name for name in SERVED if name not in gems_core.registry.all_impls()]
    assert not missing


ERRORS = {
    "hypot of ints": lambda: torch.hypot(INTS, INTS),
    "shift of floats": lambda: torch.bitwise_left_shift(X, 1),
    "lerp of mixed dtypes": lambda: torch.lerp(X, X.double(), 0.5),
    "addcdiv of ints": lambda: torch.addcdiv(INTS, INTS, INTS),
    "sqrt_ of ints": lambda: INTS.clone().sqrt_(),
    "logical_and_ broadcast into a smaller self": lambda: torch.ones(3, device=DEVICE).logical_and_(X),
    "atan2 out of an integer dtype": lambda: torch.atan2(X, X, out=torch.empty(2, 3, dtype=torch.int64)),
    "glu of an odd dim": lambda: F.glu(X),
    "glu of a scalar": lambda: F.glu(X[0, 0]),
    "elu of ints": lambda: F.elu(INTS),
    "mse_loss of mismatched shapes": lambda: torch.ops.aten.mse_loss(X, torch.ones(4, device=DEVICE)),
    "signbit of complex": lambda: torch.signbit(torch.ones(2, dtype=torch.complex64)),
}
if torch.device(DEVICE).type == "cpu":  # a GPU's integer division by zero gives a value, not an error
    ERRORS["remainder by an integer zero"] = lambda: torch.remainder(INTS, torch.zeros_like(INTS))
    ERRORS["remainder_ by a scalar zero"] = lambda: INTS.clone().remainder_(0)


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_rejected_inputs_raise_atens_error(name: str) -> None:
    expected = answer(ERRORS[name])
    assert isinstance(expected, str)  # ATen raised
    with gems_core.use_gems():
        assert answer(ERRORS[name]) == expected


def _served(ops: tuple[str, ...], fn: Callable[[], Any]) -> tuple[bool, Any]:
    codes = frozenset().union(*implementations(ops).values())
    assert codes, ops
    with RouteWatch(codes) as watch, gems_core.use_gems():
        result = fn()
    return watch.hit, result


def test_float64_of_float32_accurate_ops_goes_to_aten() -> None:
    x = X.double() / 4
    for name in ("atan", "acos", "i0"):
        with RouteWatch(implementations([name])[name]) as watch, gems_core.use_gems():
            got = getattr(torch, name)(x)
        assert watch.entered and not watch.hit  # gems' function handed the call to ATen
        torch.testing.assert_close(got, getattr(torch, name)(x), rtol=0, atol=0)
    hit, got = _served(("atan",), lambda: torch.atan(X / 4))
    torch.testing.assert_close(got.double(), torch.atan(X.double() / 4), rtol=1e-6, atol=1e-7)


def test_integer_rounding_keeps_dtype_and_values() -> None:
    x = torch.tensor([-(2**40) - 3, 7, -1], device=DEVICE)
    for name in ("ceil", "floor", "round", "trunc"):
        hit, got = _served((name,), lambda n=name: getattr(torch, n)(x))
        assert hit and got.dtype == torch.int64 and torch.equal(got.cpu(), x.cpu())


def test_round_ties_to_even() -> None:
    x = torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 2.5000002, -0.4, 8388609.0], device=DEVICE)
    hit, got = _served(("round",), lambda: torch.round(x))
    assert hit
    assert got.cpu().tolist() == [-2.0, -2.0, -0.0, 0.0, 2.0, 2.0, 3.0, -0.0, 8388609.0]
    assert torch.signbit(got.cpu()).tolist() == torch.signbit(torch.round(x.cpu())).tolist()


def test_shift_counts_out_of_range() -> None:
    x = torch.tensor([-5, 5, -1, 100], dtype=torch.int8, device=DEVICE)
    count = torch.tensor([9, 8, -1, 3], dtype=torch.int8, device=DEVICE)
    for name in ("bitwise_left_shift", "bitwise_right_shift"):
        hit, got = _served((f"{name}.Tensor",), lambda n=name: getattr(torch, n)(x, count))
        assert hit and torch.equal(got.cpu(), getattr(torch, name)(x.cpu(), count.cpu()))


def test_classifier_trains_through_gems_backwards() -> None:
    """A two-layer net with elu, hardswish, softplus and logsigmoid, trained on an mse loss
    for three SGD steps: the losses and gradients match ATen's, and every backward ran on
    gems."""
    torch.manual_seed(0)
    layers = [torch.randn(6, 6, device=DEVICE, requires_grad=True) for _ in range(2)]
    x = torch.randn(5, 6, device=DEVICE)
    target = torch.randn(5, 6, device=DEVICE)

    def run() -> list[torch.Tensor]:
        params = [p.detach().clone().requires_grad_() for p in layers]
        results = []
        for _ in range(3):
            h = F.elu(x @ params[0], alpha=0.7) + F.hardswish(x)
            y = F.softplus(h @ params[1], beta=2.0) + F.logsigmoid(h)
            loss = F.mse_loss(y, target)
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                for p, g in zip(params, grads):
                    p -= 0.1 * g
            results += [loss.detach(), *grads]
        return results

    expected = run()
    backwards = ("elu_backward", "hardswish_backward", "softplus_backward", "log_sigmoid_backward",
                 "mse_loss_backward")
    for op in backwards:
        hit, got = _served((op,), run)
        assert hit, op
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)
