"""special_i0e, special_i1, digamma (gems_core/ops/special.py), soft_margin_loss
(loss_more.py), rrelu_with_noise_backward (parametric_activation.py) and unfold_backward
(unfold_backward.py) on gems: ATen's float64 answers on random data (never zeros) in every
layout, empty and 0-d, float32 against the float64 reference, each call served by gems, and
ATen's own errors for the inputs it rejects.

Shapes stay tiny (the CPU interpreter is slow); the data spans both branches of each
expansion (the Bessel functions switch to the asymptotic series past 9 in float32 and 18 in
float64, digamma reflects negative inputs).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from outcomes import answer
from served import on_aten_and_gems

import gems_core

DEVICE = torch.device(gems_core.device)
#: (rtol, atol) against ATen's float64 answer, by the dtype gems computed in
TOLERANCES = {torch.float64: (1e-12, 1e-13), torch.float32: (2e-6, 2e-6)}
_g = torch.Generator().manual_seed(0)


def rand(*shape: int, low: float = -3.0, high: float = 3.0) -> torch.Tensor:
    return (torch.rand(shape, generator=_g, dtype=torch.float64) * (high - low) + low).to(DEVICE)


def layouts(x: torch.Tensor) -> dict[str, torch.Tensor]:
    """``x`` (2-d) contiguous, transposed, sliced with a step and expanded from a row."""
    return {"contiguous": x, "transposed": x.t().contiguous().t(), "sliced": torch.cat([x, x], 1)[:, ::2],
            "expanded": x[:1].expand_as(x), "empty": x[:0], "0-d": x[0, 0]}


def matching(t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``t`` (2-d, as many columns as ``x``) cut to ``x``'s rows, or its first element for 0-d ``x``."""
    return t[: x.shape[0]] if x.dim() else t[0, 0]


def close(got: torch.Tensor, want: torch.Tensor) -> None:
    """``got`` (of ``want``'s dtype, or float32 against a float64 ``want``) within tolerance."""
    assert got.shape == want.shape and got.dtype in (want.dtype, torch.float32)
    rtol, atol = TOLERANCES[got.dtype]
    torch.testing.assert_close(got.to(want.dtype), want, rtol=rtol, atol=atol, equal_nan=True)


# -- special functions -------------------------------------------------------------------------

SPECIAL: dict[str, tuple[Callable[..., torch.Tensor], float]] = {
    "special_i0e": (torch.special.i0e, 30.0),
    "special_i1": (torch.special.i1, 30.0),
    "digamma": (torch.digamma, 6.0),
}


@pytest.mark.parametrize("op", sorted(SPECIAL))
def test_special_function_matches_aten_in_float64(op: str) -> None:
    fn, width = SPECIAL[op]
    for layout, x in layouts(rand(4, 9, low=-width, high=width)).items():
        want, got = on_aten_and_gems(lambda x=x: fn(x), [op])
        close(got, want)
        assert got.stride() == want.stride(), layout


@pytest.mark.parametrize("op", sorted(SPECIAL))
def test_special_function_in_float32_is_float32_accurate(op: str) -> None:
    fn, width = SPECIAL[op]
    x = rand(64, low=-width, high=width).float()
    _, got = on_aten_and_gems(lambda: fn(x), [op])
    close(got, fn(x.double()))


@pytest.mark.parametrize("op", sorted(SPECIAL))
def test_special_function_special_values_follow_aten(op: str) -> None:
    fn, _ = SPECIAL[op]
    x = torch.tensor([float("nan"), float("inf"), float("-inf"), 0.0, -0.0, -2.0, 1e-300, 700.0], dtype=torch.float64,
                     device=DEVICE)
    want, got = on_aten_and_gems(lambda: fn(x), [op])
    close(got, want)


def test_special_out_and_inplace_overloads() -> None:
    x = rand(3, 5, low=-20, high=20)
    for op, fn in (("special_i0e.out", torch.special.i0e), ("special_i1.out", torch.special.i1),
                   ("digamma.out", torch.digamma)):
        out = torch.empty(3, 5, dtype=torch.float64, device=DEVICE)
        want, got = on_aten_and_gems(lambda fn=fn, out=out: fn(x, out=out), [op])
        assert got is out
        close(got, want)
    want, got = on_aten_and_gems(lambda: x.t().clone().digamma_(), ["digamma_"])
    close(got, want)


def test_special_functions_of_integers_give_float32() -> None:
    ints = torch.tensor([[3, -7, 1], [12, -1, 25]], device=DEVICE)
    for op, (fn, _) in SPECIAL.items():
        _, got = on_aten_and_gems(lambda fn=fn: fn(ints), [op])
        assert got.dtype == torch.float32
        close(got, fn(ints.double()))


SPECIAL_ERRORS = {
    "digamma_ of ints": lambda: torch.tensor([3, 4], device=DEVICE).digamma_(),
    "i0e out of an integer dtype": lambda: torch.special.i0e(rand(3), out=torch.empty(3, dtype=torch.int64,
                                                                                        device=DEVICE)),
    "i1 of complex": lambda: torch.special.i1(torch.ones(2, dtype=torch.complex64, device=DEVICE)),
}


@pytest.mark.parametrize("name", sorted(SPECIAL_ERRORS))
def test_special_rejected_inputs_raise_atens_error(name: str) -> None:
    expected = answer(SPECIAL_ERRORS[name])
    assert isinstance(expected, str)
    with gems_core.use_gems():
        assert answer(SPECIAL_ERRORS[name]) == expected


# -- soft_margin_loss --------------------------------------------------------------------------

REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


@pytest.mark.parametrize("reduction", sorted(REDUCTIONS))
def test_soft_margin_loss_and_gradient_match_aten(reduction: str) -> None:
    y_full = torch.where(rand(4, 6) > 0, 1.0, -1.0) * rand(4, 6, low=0.5, high=1.5)
    for x in layouts(rand(4, 6)).values():
        y = matching(y_full, x)

        def run(x: torch.Tensor = x, y: torch.Tensor = y) -> tuple[torch.Tensor, torch.Tensor]:
            xx = x.detach().requires_grad_()
            loss = F.soft_margin_loss(xx, y, reduction=reduction)
            (grad,) = torch.autograd.grad(loss, xx, torch.linspace(-1, 1, loss.numel(), dtype=loss.dtype,
                                                                   device=DEVICE).view(loss.shape))
            return loss, grad

        want, got = on_aten_and_gems(run, ["soft_margin_loss", "soft_margin_loss_backward"])
        for a, b in zip(got, want):
            close(a, b)


def test_soft_margin_loss_broadcasts_the_target() -> None:
    x, y = rand(3, 5), rand(5)
    want, got = on_aten_and_gems(lambda: torch.ops.aten.soft_margin_loss(x, y, 0), ["soft_margin_loss"])
    close(got, want)
    g = rand()
    want, got = on_aten_and_gems(lambda: torch.ops.aten.soft_margin_loss_backward(g, y, x, 1),
                                 ["soft_margin_loss_backward"])
    close(got, want)


def test_soft_margin_loss_out_overloads() -> None:
    x, y, g = rand(3, 5), rand(3, 5), rand(3, 5)
    for reduction in REDUCTIONS.values():
        out = torch.empty(0, dtype=torch.float64, device=DEVICE)
        want, got = on_aten_and_gems(lambda r=reduction, out=out: torch.ops.aten.soft_margin_loss.out(x, y, r, out=out),
                                     ["soft_margin_loss.out"])
        assert got is out
        close(got, want)
    grad_input = torch.empty(3, 5, dtype=torch.float64, device=DEVICE)
    want, got = on_aten_and_gems(
        lambda: torch.ops.aten.soft_margin_loss_backward.grad_input(g, x.t().contiguous().t(), y, 0,
                                                                    grad_input=grad_input),
        ["soft_margin_loss_backward.grad_input"])
    assert got is grad_input
    close(got, want)


def test_soft_margin_loss_does_not_overflow_in_float32() -> None:
    # -y x = 100: e^100 overflows float32, where ATen's float32 gradient is NaN
    x = torch.tensor([-100.0, 100.0, -60.0, 0.5], device=DEVICE)
    y = torch.tensor([1.0, -1.0, 1.5, -2.0], device=DEVICE)
    _, loss = on_aten_and_gems(lambda: F.soft_margin_loss(x, y, reduction="none"), ["soft_margin_loss"])
    _, grad = on_aten_and_gems(lambda: torch.ops.aten.soft_margin_loss_backward(torch.ones_like(x), x, y, 0),
                               ["soft_margin_loss_backward"])
    close(loss, F.soft_margin_loss(x.double(), y.double(), reduction="none"))
    close(grad, torch.ops.aten.soft_margin_loss_backward(torch.ones_like(x).double(), x.double(),
                                                                  y.double(), 0))


LOSS_ERRORS = {
    "soft_margin_loss of mismatched shapes": lambda: torch.ops.aten.soft_margin_loss(rand(3, 4), rand(5), 0),
    "soft_margin_loss_backward of a wider grad_output": lambda: torch.ops.aten.soft_margin_loss_backward(
        rand(3, 4), rand(4), rand(4), 0),
    "soft_margin_loss of ints": lambda: torch.ops.aten.soft_margin_loss(torch.ones(3, dtype=torch.int64),
                                                                        torch.ones(3, dtype=torch.int64), 0),
}


@pytest.mark.parametrize("name", sorted(LOSS_ERRORS))
def test_soft_margin_loss_rejected_inputs_raise_atens_error(name: str) -> None:
    expected = answer(LOSS_ERRORS[name])
    assert isinstance(expected, str)
    with gems_core.use_gems():
        assert answer(LOSS_ERRORS[name]) == expected


# -- rrelu_with_noise_backward ------------------------------------------------------------------


@pytest.mark.parametrize(("training", "self_is_result"), [(True, False), (False, False), (False, True)])
def test_rrelu_with_noise_backward_matches_aten(training: bool, self_is_result: bool) -> None:
    noise = rand(4, 6, low=0.1, high=0.3)
    g = rand(4, 6)
    for x in layouts(rand(4, 6)).values():
        gg, nn = matching(g, x), matching(noise, x)
        want, got = on_aten_and_gems(
            lambda x=x, gg=gg, nn=nn: torch.ops.aten.rrelu_with_noise_backward(gg, x, nn, 0.1, 0.3, training,
                                                                               self_is_result),
            ["rrelu_with_noise_backward"])
        close(got, want)
    x, out = rand(4, 6), torch.empty(4, 6, dtype=torch.float64, device=DEVICE)
    want, got = on_aten_and_gems(
        lambda: torch.ops.aten.rrelu_with_noise_backward.out(g, x, noise, 0.1, 0.3, training, self_is_result,
                                                             out=out),
        ["rrelu_with_noise_backward.out"])
    assert got is out
    close(got, want)


def test_rrelu_in_evaluation_trains_through_gems_backward() -> None:
    x = rand(3, 7)

    def run() -> torch.Tensor:
        xx = x.detach().requires_grad_()
        F.rrelu(xx, 0.05, 0.25, training=False).pow(2).sum().backward()
        return xx.grad

    want, got = on_aten_and_gems(run, ["rrelu_with_noise_backward"])
    close(got, want)


def test_rrelu_backward_of_a_negative_slope_from_the_result_raises_atens_error() -> None:
    def call() -> torch.Tensor:
        return torch.ops.aten.rrelu_with_noise_backward(rand(3), rand(3), rand(3), -0.5, -0.1, False, True)

    expected = answer(call)
    assert isinstance(expected, str)
    with gems_core.use_gems():
        assert answer(call) == expected


# -- unfold_backward ----------------------------------------------------------------------------

#: (input shape, dim, size, step): overlapping, gapped, a tail after the last window, the
#: last dim, a whole dim, a size-1 window, size 0
WINDOWS = [((3, 10, 2), 1, 3, 2), ((3, 10, 2), 1, 2, 4), ((9, 2), 0, 4, 3), ((2, 3, 7), -1, 3, 1),
           ((5, 4), 1, 4, 1), ((4, 3, 2), 0, 1, 2), ((6, 3), 0, 0, 2)]


@pytest.mark.parametrize(("shape", "dim", "size", "step"), WINDOWS)
def test_unfold_backward_matches_aten(shape: tuple[int, ...], dim: int, size: int, step: int) -> None:
    grad_shape = list(torch.empty(shape).unfold(dim, size, step).shape)
    grad = rand(*grad_shape)
    permuted = rand(*grad_shape[::-1]).permute(*reversed(range(len(grad_shape))))
    for g in (grad, permuted, grad[:1].expand(grad_shape)):
        want, got = on_aten_and_gems(lambda g=g: torch.ops.aten.unfold_backward(g, list(shape), dim, size, step),
                                     ["unfold_backward"])
        close(got, want)


def test_unfold_gradient_through_autograd() -> None:
    x, weight = rand(4, 11), rand(5, 4, 3)

    def run() -> torch.Tensor:
        xx = x.detach().requires_grad_()
        (xx.t().unfold(0, 3, 2) * weight).sum().backward()
        return xx.grad

    want, got = on_aten_and_gems(run, ["unfold_backward"])
    close(got, want)


def test_unfold_backward_empty_0d_and_out() -> None:
    for args in [(rand(0, 2, 3), [0, 4], 1, 3, 1), (rand(1), [], 0, 1, 1), (rand(0), [], 0, 0, 1)]:
        want, got = on_aten_and_gems(lambda args=args: torch.ops.aten.unfold_backward(*args), ["unfold_backward"])
        close(got, want)
    out = torch.empty(3, 10, dtype=torch.float64, device=DEVICE)
    g = rand(3, 4, 3)
    want, got = on_aten_and_gems(lambda: torch.ops.aten.unfold_backward.out(g, [3, 10], 1, 3, 2, out=out),
                                 ["unfold_backward.out"])
    assert got is out
    close(got, want)


def test_unfold_backward_float32() -> None:
    g = rand(5, 3, 5).float()
    _, got = on_aten_and_gems(lambda: torch.ops.aten.unfold_backward(g, [9, 3], 0, 5, 1), ["unfold_backward"])
    close(got, torch.ops.aten.unfold_backward(g.double(), [9, 3], 0, 5, 1))


UNFOLD_ERRORS = {
    "dim out of range": lambda: torch.ops.aten.unfold_backward(rand(4, 3), [10], 1, 3, 2),
    "step 0": lambda: torch.ops.aten.unfold_backward(rand(4, 3), [10], 0, 3, 0),
    "negative size": lambda: torch.ops.aten.unfold_backward(rand(4, 3), [10], 0, -3, 2),
}


@pytest.mark.parametrize("name", sorted(UNFOLD_ERRORS))
def test_unfold_backward_rejected_arguments_raise_atens_error(name: str) -> None:
    expected = answer(UNFOLD_ERRORS[name])
    assert isinstance(expected, str)
    with gems_core.use_gems():
        assert answer(UNFOLD_ERRORS[name]) == expected


@pytest.mark.parametrize(("grad_shape", "size"), [((5, 3), 3), ((4, 2), 3), ((4, 3), 11)])
def test_unfold_backward_of_a_mismatched_grad_raises(grad_shape: tuple[int, ...], size: int) -> None:
    # ATen does not check these and reads past grad_in; gems refuses them
    with gems_core.use_gems(include=["unfold_backward"]), pytest.raises(RuntimeError, match="not the gradient"):
        torch.ops.aten.unfold_backward(rand(*grad_shape), [10], 0, size, 2)
