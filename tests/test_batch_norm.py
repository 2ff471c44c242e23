"""batch_norm: the cuDNN and MIOpen routes' overloads (served by gems here too), statistics of data far
from zero, every tuned config, layouts of incoming gradients, output masks, a BatchNorm2d
training step, long channels summed by several programs, the backward's out= and export
forms, float64, an empty batch's backward, and ATen's errors for what no kernel may serve.

Shapes are tiny (the CPU interpreter); each test checks against ATen in float64 and that
gems' kernel served the call."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from gems_conformance.routing import RouteWatch, implementations

import gems_core
from gems_core.registry import load_ops

DEVICE = gems_core.device
EPS = 1e-5
MOMENTUM = 0.1
#: (atol, rtol) of float32 results against float64 references over a few hundred positions
TOL = {"atol": 2e-5, "rtol": 2e-5}


def _watch(*overloads: str) -> RouteWatch:
    codes = frozenset().union(*implementations(overloads).values())
    assert codes, overloads
    return RouteWatch(codes)


def _rand(*shape: int, low: float = -1.0, high: float = 1.0, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g, dtype=torch.float64) * (high - low) + low).float().to(DEVICE)


def _params(c: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return _rand(c, low=0.5, high=2, seed=1), _rand(c, seed=2), _rand(c, seed=3), _rand(c, low=0.5, high=2, seed=4)


def _reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, rm: torch.Tensor, rv: torch.Tensor,
               training: bool) -> tuple[torch.Tensor, ...]:
    """(y, save_mean, save_invstd, running_mean, running_var) by ATen in float64."""
    rm, rv = rm.double().cpu(), rv.double().cpu()
    y, mean, invstd = torch.ops.aten.native_batch_norm(x.double().cpu(), w.double().cpu(), b.double().cpu(), rm, rv,
                                                       training, MOMENTUM, EPS)
    return y, mean, invstd, rm, rv


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("library", ["cudnn", "miopen"])
def test_gpu_library_routes_forward_and_backward(library: str, training: bool, channels_last: bool) -> None:
    """The overloads F.batch_norm reaches on NVIDIA (cuDNN) and AMD (MIOpen) GPUs, called
    directly: their results (statistics in the weight's dtype, empty outside training;
    cuDNN's reserve, empty) and their backward, against float64 ATen."""
    forward = getattr(torch.ops.aten, f"{library}_batch_norm")
    backward = getattr(torch.ops.aten, f"{library}_batch_norm_backward")
    x = _rand(3, 4, 5, 6, low=-1, high=4)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    w, b, rm, rv = _params(4)
    rm_gems, rv_gems = rm.clone(), rv.clone()
    with _watch(f"{library}_batch_norm") as route, gems_core.use_gems():
        y, mean, invstd, *reserve = forward(x, w, b, rm_gems, rv_gems, training, MOMENTUM, EPS)
    assert route.hit
    want_y, want_mean, want_invstd, want_rm, want_rv = _reference(x, w, b, rm, rv, training)
    torch.testing.assert_close(y.double().cpu(), want_y, **TOL)
    assert y.stride() == x.stride()
    if library == "cudnn":
        assert reserve[0].dtype == torch.uint8 and reserve[0].numel() == 0
    assert mean.dtype == invstd.dtype == w.dtype
    if training:
        torch.testing.assert_close(mean.double().cpu(), want_mean, **TOL)
        torch.testing.assert_close(invstd.double().cpu(), want_invstd, **TOL)
    else:
        assert mean.numel() == invstd.numel() == 0
    torch.testing.assert_close(rm_gems.double().cpu(), want_rm, **TOL)
    torch.testing.assert_close(rv_gems.double().cpu(), want_rv, **TOL)
    if not training:
        return
    dy = _rand(*x.shape, seed=9)
    with _watch(f"{library}_batch_norm_backward") as route, gems_core.use_gems():
        grads = backward(x, dy, w, rm, rv, mean, invstd, EPS, *reserve)
    assert route.hit
    want = torch.ops.aten.native_batch_norm_backward(dy.double().cpu(), x.double().cpu(), w.double().cpu(), None,
                                                     None, want_mean, want_invstd, True, EPS, [True] * 3)
    for got, expected in zip(grads, want):
        torch.testing.assert_close(got.double().cpu(), expected, **TOL)


def test_statistics_of_data_far_from_zero() -> None:
    """Sums of squares in float32 would lose the variance of data whose mean is large against
    its spread; the sums are taken about a value of each channel."""
    x = _rand(4, 3, 50, low=-1, high=1) + 1000.0
    with _watch("native_batch_norm") as route, gems_core.use_gems():
        y, mean, invstd = torch.ops.aten.native_batch_norm(x, None, None, None, None, True, MOMENTUM, EPS)
    assert route.hit
    want = torch.ops.aten.native_batch_norm(x.double().cpu(), None, None, None, None, True, MOMENTUM, EPS)
    torch.testing.assert_close(invstd.double().cpu(), want[2], atol=0, rtol=1e-4)
    torch.testing.assert_close(y.double().cpu(), want[0], atol=1e-3, rtol=1e-4)


@pytest.mark.parametrize("shape", [(3, 5, 33), (40, 6)], ids=["contiguous", "channels-inner"])
def test_every_config_gives_the_same_result(shape: tuple[int, ...]) -> None:
    """Each default config (tile shapes, hence splits and masks) forward and backward."""
    from gems_core import tuning

    load_ops()
    from gems_core.ops.batch_norm import BATCH_NORM

    x = _rand(*shape, low=-1, high=3)
    w, b, rm, rv = _params(shape[1])
    dy = _rand(*shape, seed=7)
    want_y, want_mean, want_invstd, _, _ = _reference(x, w, b, rm, rv, True)
    want_grads = torch.ops.aten.native_batch_norm_backward(dy.double().cpu(), x.double().cpu(), w.double().cpu(),
                                                           None, None, want_mean, want_invstd, True, EPS, [True] * 3)
    for config in BATCH_NORM.configs():
        with tuning.forcing(lambda t, config=config: config if t is BATCH_NORM else t.configs()[0]):
            with _watch("native_batch_norm", "native_batch_norm_backward") as route, gems_core.use_gems():
                y, mean, invstd = torch.ops.aten.native_batch_norm(x, w, b, None, None, True, MOMENTUM, EPS)
                grads = torch.ops.aten.native_batch_norm_backward(dy, x, w, None, None, mean, invstd, True, EPS,
                                                                  [True] * 3)
        assert route.hit
        torch.testing.assert_close(y.double().cpu(), want_y, **TOL, msg=config.describe)
        for got, expected in zip(grads, want_grads):
            torch.testing.assert_close(got.double().cpu(), expected, **TOL, msg=config.describe)


@pytest.mark.parametrize("train", [True, False])
def test_gradient_in_another_layout_than_the_input(train: bool) -> None:
    """A channels-last input's gradient may arrive contiguous, or expanded from a sum."""
    x = _rand(2, 3, 4, 5, low=0, high=2).to(memory_format=torch.channels_last)
    w, _, rm, rv = _params(3)
    _, mean, invstd = torch.ops.aten.native_batch_norm(x, w, None, None, None, True, MOMENTUM, EPS)
    for dy in (_rand(2, 3, 4, 5, seed=5), torch.ones(1, 1, 1, 1, device=DEVICE).expand(2, 3, 4, 5)):
        args = (x, w, rm, rv, mean, invstd, train, EPS, [True] * 3)
        want = torch.ops.aten.native_batch_norm_backward(dy.double().cpu(), *(
            a.double().cpu() if isinstance(a, torch.Tensor) else a for a in args))
        with _watch("native_batch_norm_backward") as route, gems_core.use_gems():
            got = torch.ops.aten.native_batch_norm_backward(dy, *args)
        assert route.hit
        assert got[0].stride() == x.stride()
        for g, e in zip(got, want):
            torch.testing.assert_close(g.double().cpu(), e, **TOL)


def test_output_mask_leaves_gradients_out() -> None:
    x = _rand(3, 2, 7)
    w, _, rm, rv = _params(2)
    _, mean, invstd = torch.ops.aten.native_batch_norm(x, w, None, None, None, True, MOMENTUM, EPS)
    dy = _rand(3, 2, 7, seed=3)
    want = torch.ops.aten.native_batch_norm_backward(dy, x, w, rm, rv, mean, invstd, True, EPS, [True] * 3)
    for mask in ([True, False, False], [False, True, False], [False, False, True], [False, True, True]):
        with _watch("native_batch_norm_backward") as route, gems_core.use_gems():
            got = torch.ops.aten.native_batch_norm_backward(dy, x, w, rm, rv, mean, invstd, True, EPS, mask)
        assert route.hit
        for wanted, g, e in zip(mask, got, want):
            assert (g is not None) == wanted
            if wanted:
                torch.testing.assert_close(g, e, **TOL)


def test_batchnorm2d_training_step_channels_last() -> None:
    """nn.BatchNorm2d as ResNet trains it: channels-last, running statistics updated with
    momentum, gradients for input, weight and bias; then its eval forward."""
    torch.manual_seed(0)
    module = torch.nn.BatchNorm2d(4).to(DEVICE)
    with torch.no_grad():
        module.weight.uniform_(0.5, 2)
        module.bias.uniform_(-1, 1)
    reference = torch.nn.BatchNorm2d(4).double()
    reference.load_state_dict({k: v.double().cpu() for k, v in module.state_dict().items()})
    x = _rand(3, 4, 5, 5, low=-2, high=3).to(memory_format=torch.channels_last).requires_grad_()
    xd = x.detach().double().cpu().requires_grad_()
    dy = _rand(3, 4, 5, 5, seed=11)
    with _watch("native_batch_norm", "native_batch_norm_backward") as route, gems_core.use_gems():
        y = module(x)
        y.backward(dy)
    assert route.hit
    want = reference(xd)
    want.backward(dy.double().cpu())
    torch.testing.assert_close(y.detach().double().cpu(), want.detach(), **TOL)
    torch.testing.assert_close(x.grad.double().cpu(), xd.grad, **TOL)
    torch.testing.assert_close(module.weight.grad.double().cpu(), reference.weight.grad, **TOL)
    torch.testing.assert_close(module.bias.grad.double().cpu(), reference.bias.grad, **TOL)
    torch.testing.assert_close(module.running_mean.double().cpu(), reference.running_mean, **TOL)
    torch.testing.assert_close(module.running_var.double().cpu(), reference.running_var, **TOL)
    module.eval()
    reference.eval()
    with _watch("native_batch_norm") as route, gems_core.use_gems(), torch.no_grad():
        y = module(x)
    assert route.hit
    torch.testing.assert_close(y.double().cpu(), reference(xd).detach(), **TOL)


def _raises_as_aten(call, *args) -> None:
    """gems raises what ATen raises (its type and message), for a call ATen answers safely."""
    with pytest.raises(Exception) as aten_error:
        call(*args)
    with gems_core.use_gems(), pytest.raises(type(aten_error.value)) as gems_error:
        call(*args)
    assert str(gems_error.value) == str(aten_error.value)


@pytest.mark.parametrize("make", [
    lambda: (torch.randn((), device=DEVICE), None),  # fewer than 2 dims: IndexError
    lambda: (torch.randn(3, device=DEVICE), None),
    lambda: (torch.randn(0, 3, 4, device=DEVICE), None),  # training on no positions
    lambda: (torch.ones(2, 3, 4, dtype=torch.int32, device=DEVICE), None),  # not floating
    lambda: (torch.randn(2, 3, 4, dtype=torch.float64, device=DEVICE), torch.ones(3, device=DEVICE)),  # mixed
], ids=["0-d", "1-d", "empty", "int", "mixed float64"])
def test_bad_inputs_raise_atens_errors(make) -> None:
    x, w = make()
    if x.numel() == 0 and x.device.type != "cpu":
        pytest.skip("ATen's CPU kernel raises for a batch of no positions; gems hands it to ATen on any device")
    _raises_as_aten(torch.ops.aten.native_batch_norm, x, w, None, None, None, True, MOMENTUM, EPS)


def test_functional_errors_are_atens() -> None:
    """F.batch_norm checks sizes before any kernel: the same errors under gems."""
    x = torch.randn(2, 3, 4, device=DEVICE)
    _raises_as_aten(F.batch_norm, x, torch.zeros(4, device=DEVICE), torch.ones(3, device=DEVICE))
    _raises_as_aten(F.batch_norm, x, None, None, torch.ones(5, device=DEVICE), None, True)
    _raises_as_aten(F.batch_norm, torch.randn(1, 3, device=DEVICE), None, None, None, None, True)


@pytest.mark.parametrize(("call", "message"), [
    # ATen's CPU kernel reads past these tensors or through a null pointer (a crash): gems
    # raises the errors ATen's batch_norm raises for them
    (lambda x, p: torch.ops.aten.native_batch_norm(x, p[:2], None, None, None, True, MOMENTUM, EPS),
     "weight should contain 3 elements not 2"),
    (lambda x, p: torch.ops.aten.native_batch_norm(x, None, None, p, p[:1], True, MOMENTUM, EPS),
     "running_var should contain 3 elements not 1"),
    (lambda x, p: torch.ops.aten.native_batch_norm(x, p, p, None, None, False, MOMENTUM, EPS),
     "running_mean must be defined in the evaluation mode"),
    (lambda x, p: torch.ops.aten.native_batch_norm_backward(x, x, p, None, None, None, None, True, EPS, [True] * 3),
     "save_mean must be defined in the training mode"),
    (lambda x, p: torch.ops.aten.native_batch_norm_backward(x, x, p, p, None, None, None, False, EPS, [True] * 3),
     "running_var must be defined in the evaluation mode"),
], ids=["weight size", "running_var size", "eval without statistics", "backward without statistics",
        "eval backward without running_var"])
def test_arguments_no_kernel_may_serve_raise(call, message: str) -> None:
    x, p = torch.randn(2, 3, 4, device=DEVICE), torch.ones(3, device=DEVICE)
    with gems_core.use_gems(), pytest.raises(RuntimeError, match=message):
        call(x, p)


@pytest.mark.parametrize("train", [True, False])
def test_backward_of_an_empty_batch_sums_to_zero(train: bool) -> None:
    """ATen's CPU kernel divides by the zero positions (a crash); gems gives an empty input
    gradient and zero weight and bias gradients, the sums over no positions."""
    x = torch.randn(0, 3, 4, device=DEVICE)
    w, _, rm, rv = _params(3)
    mean, invstd = (_rand(3, seed=5), _rand(3, low=0.5, high=1, seed=6)) if train else (None, None)
    with _watch("native_batch_norm_backward") as route, gems_core.use_gems():
        dx, dw, db = torch.ops.aten.native_batch_norm_backward(x, x, w, rm, rv, mean, invstd, train, EPS, [True] * 3)
    assert route.hit
    assert dx.shape == x.shape
    assert torch.equal(dw, torch.zeros_like(w)) and torch.equal(db, torch.zeros_like(w))


def test_float64_training_forward_and_backward() -> None:
    x = _rand(3, 4, 6, low=-1, high=3).double()
    w, b, rm, rv = (p.double() for p in _params(4))
    dy = _rand(3, 4, 6, seed=8).double()
    rm_gems, rv_gems = rm.clone(), rv.clone()
    with _watch("native_batch_norm", "native_batch_norm_backward") as route, gems_core.use_gems():
        y, mean, invstd = torch.ops.aten.native_batch_norm(x, w, b, rm_gems, rv_gems, True, MOMENTUM, EPS)
        grads = torch.ops.aten.native_batch_norm_backward(dy, x, w, rm, rv, mean, invstd, True, EPS, [True] * 3)
    assert route.hit
    rm_want, rv_want = rm.cpu().clone(), rv.cpu().clone()
    want = torch.ops.aten.native_batch_norm(x.cpu(), w.cpu(), b.cpu(), rm_want, rv_want, True, MOMENTUM, EPS)
    want_grads = torch.ops.aten.native_batch_norm_backward(dy.cpu(), x.cpu(), w.cpu(), None, None, want[1], want[2],
                                                           True, EPS, [True] * 3)
    for got, expected in zip((y, mean, invstd, rm_gems, rv_gems, *grads), (*want, rm_want, rv_want, *want_grads)):
        assert got.dtype == torch.float64
        torch.testing.assert_close(got.cpu(), expected, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize(("shape", "channels_last"), [((1, 2, 17000), False), ((2, 3, 48, 48), True)])
def test_long_channels_are_summed_by_several_programs(shape: tuple[int, ...], channels_last: bool) -> None:
    """The conformance cases' long samples: each channel's sums split over programs and
    added by the per-channel step."""
    load_ops()
    from gems_core.ops.batch_norm import _Layout, _splits

    x = _rand(*shape, low=-1, high=3)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    assert _splits(_Layout(x, channels_last), x) > 1
    w, b, rm, rv = _params(shape[1])
    rm_gems, rv_gems = rm.clone(), rv.clone()
    with _watch("native_batch_norm") as route, gems_core.use_gems():
        got = torch.ops.aten.native_batch_norm(x, w, b, rm_gems, rv_gems, True, MOMENTUM, EPS)
    assert route.hit
    want = _reference(x, w, b, rm, rv, True)
    for g, e in zip((*got, rm_gems, rv_gems), want):
        torch.testing.assert_close(g.double().cpu(), e, **TOL)


def test_out_and_export_backward_forms_are_served() -> None:
    """native_batch_norm_backward.out and batch_norm_backward (the conformance cases watch
    the forward they start with), against float64 ATen."""
    x = _rand(3, 4, 5, low=-1, high=2)
    w, _, rm, rv = _params(4)
    dy = _rand(3, 4, 5, seed=12)
    _, mean, invstd = torch.ops.aten.native_batch_norm(x, w, None, None, None, True, MOMENTUM, EPS)
    args = (dy, x, w, rm, rv, mean, invstd, True, EPS, [True] * 3)
    want = torch.ops.aten.native_batch_norm_backward(*(a.double() if isinstance(a, torch.Tensor) else a
                                                       for a in args))
    outs = {f"out{i}": torch.empty_like(t, dtype=x.dtype) for i, t in enumerate(want)}
    with _watch("native_batch_norm_backward.out") as route, gems_core.use_gems():
        torch.ops.aten.native_batch_norm_backward.out(*args, **outs)
    assert route.hit
    reserve = torch.empty(0, dtype=torch.uint8, device=DEVICE)
    with _watch("batch_norm_backward") as export_route, gems_core.use_gems():
        got = torch.ops.aten.batch_norm_backward(*args[:8], EPS, [True] * 3, reserve)
    assert export_route.hit
    for result in (tuple(outs.values()), got):
        for g, e in zip(result, want):
            torch.testing.assert_close(g.double().cpu(), e.cpu(), **TOL)


def test_backward_gradient_dtype_follows_the_device_kernel() -> None:
    """Without a weight, a half input's weight and bias gradients are float32 on the CPU (its
    kernel counts the float32 saved mean as a mixed type) and half on GPUs (their kernels look
    at the weight and running statistics only); a float32 running statistic makes them
    float32 everywhere."""
    from gems_core.ops.batch_norm import _backward_param_dtype

    for device, expected in (("cpu", torch.float32), ("meta", torch.bfloat16)):
        x = torch.empty(2, 3, 4, dtype=torch.bfloat16, device=device)
        stats = torch.empty(3, dtype=torch.bfloat16, device=device)
        save_mean = torch.empty(3, dtype=torch.float32, device=device)
        assert _backward_param_dtype(x, None, stats, stats, save_mean) == expected
        assert _backward_param_dtype(x, None, stats.float(), stats, save_mean) == torch.float32
        assert _backward_param_dtype(x, stats.half(), stats, stats, save_mean) == torch.float16
