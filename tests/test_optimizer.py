"""Optimizer steps on gems: torch.optim's fused Adam/AdamW/SGD (one multi-tensor launch) and
foreach Adam/AdamW/SGD (the ``_foreach_*`` ops) take a few steps on random parameters on
gems, and agree with the same optimizer run by ATen in float64 from the same parameters and
gradients; the calls gems does not serve that way (float64, state or gradients laid out otherwise
than their parameters) reach ATen's kernels whole.

Tolerance: the parameter's dtype rounds every update, three steps: float32 1e-5 relative;
bfloat16 2^-5 absolute (a few half units in the last place of parameters of magnitude
below 4, where an update cancels most of a parameter) and its 1.6e-2 relative."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from gems_conformance.routing import RouteWatch, implementations
from outcomes import answer

import gems_core
from gems_core import runtime
from gems_core.policy import ALL_DTYPES

DEVICE = torch.device(gems_core.device)
STEPS = 3
TOLERANCE = {torch.float32: (1e-6, 1e-5), torch.bfloat16: (2**-5, 1.6e-2)}
FOREACH_OPS = tuple(name for name in gems_core.registry.all_impls() if name.startswith("_foreach_"))


def _params(dtype: torch.dtype) -> tuple[list[torch.Tensor], list[list[torch.Tensor]]]:
    """A model's mix of shapes (a matrix, a vector past one program's chunk, a 0-d and an
    empty tensor) and the gradients of each step, drawn on the CPU so that both runs see
    the same numbers."""
    g = torch.Generator().manual_seed(0)
    shapes = [(6, 5), (9000,), (), (0,)]
    params = [torch.randn(s, generator=g).to(dtype).to(DEVICE) for s in shapes]
    grads = [[torch.randn(s, generator=g).to(dtype).to(DEVICE) for s in shapes] for _ in range(STEPS)]
    return params, grads


def _train(make: Callable[[list[torch.Tensor]], torch.optim.Optimizer], dtype: torch.dtype, ops: tuple[str, ...],
           on_gems: bool) -> tuple[list[torch.Tensor], bool]:
    """Parameters and optimizer state after the steps, and whether gems' ``ops`` ran; off
    gems, the float64 reference: ATen's steps on float64 CPU copies."""
    if on_gems and any(runtime.current().policy.gate_for(op) == ALL_DTYPES for op in ops):
        pytest.skip(f"the {gems_core.backend().name} backend leaves {', '.join(ops)} to ATen")
    initial, grads = _params(dtype)
    if not on_gems:
        initial = [p.cpu().double() for p in initial]
        grads = [[g.cpu().double() for g in step] for step in grads]
    params = [p.clone().requires_grad_() for p in initial]
    optimizer = make(params)
    codes = frozenset().union(*implementations(ops).values())
    assert codes, ops
    with RouteWatch(codes) as watch, gems_core.use_gems() if on_gems else torch.no_grad():
        for step in range(STEPS):
            for p, grad in zip(params, grads[step]):
                p.grad = grad.clone()
            optimizer.step()
    state = [v for p in params for v in optimizer.state[p].values() if isinstance(v, torch.Tensor)]
    return [p.detach() for p in params] + state, watch.hit


def _assert_matches(got: list[torch.Tensor], want: list[torch.Tensor], dtype: torch.dtype) -> None:
    atol, rtol = TOLERANCE[dtype]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu().double(), w.to(g.dtype).double(), atol=atol, rtol=rtol)


OPTIONS = {
    "plain": {},
    "amsgrad": {"amsgrad": True},
    "maximize": {"maximize": True, "weight_decay": 0.1},
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("options", sorted(OPTIONS))
@pytest.mark.parametrize("cls", [torch.optim.AdamW, torch.optim.Adam], ids=lambda c: c.__name__)
def test_fused_adam_matches_aten(cls: type, options: str, dtype: torch.dtype) -> None:
    op = "_fused_adamw_" if cls is torch.optim.AdamW else "_fused_adam_"

    def make(params: list[torch.Tensor]) -> torch.optim.Optimizer:
        return cls(params, lr=0.01, fused=True, **OPTIONS[options])

    want, on_aten = _train(make, dtype, (op,), on_gems=False)
    got, served = _train(make, dtype, (op,), on_gems=True)
    assert served and not on_aten
    _assert_matches(got, want, dtype)


SGD_OPTIONS = {
    "momentum": {"momentum": 0.9},
    "nesterov": {"momentum": 0.9, "nesterov": True, "weight_decay": 0.01, "maximize": True},
    "plain": {},
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("options", sorted(SGD_OPTIONS))
def test_fused_sgd_matches_aten(options: str, dtype: torch.dtype) -> None:
    def make(params: list[torch.Tensor]) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=0.1, fused=True, **SGD_OPTIONS[options])

    want, _ = _train(make, dtype, ("_fused_sgd_",), on_gems=False)
    got, served = _train(make, dtype, ("_fused_sgd_",), on_gems=True)
    assert served
    _assert_matches(got, want, dtype)


@pytest.mark.parametrize("cls", [torch.optim.AdamW, torch.optim.SGD], ids=lambda c: c.__name__)
def test_learning_rate_as_a_tensor(cls: type) -> None:
    """The tensor_lr overloads: the kernel reads the rate from device memory."""
    op = "_fused_adamw_" if cls is torch.optim.AdamW else "_fused_sgd_"

    def make(params: list[torch.Tensor]) -> torch.optim.Optimizer:
        return cls(params, lr=torch.tensor(0.01, device=params[0].device), fused=True)

    want, _ = _train(make, torch.float32, (op,), on_gems=False)
    got, served = _train(make, torch.float32, (op,), on_gems=True)
    assert served
    _assert_matches(got, want, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", ["adamw", "adamw_amsgrad", "sgd_momentum"])
def test_foreach_optimizers_match_aten(name: str, dtype: torch.dtype, checker: str) -> None:
    def make(params: list[torch.Tensor]) -> torch.optim.Optimizer:
        if name == "sgd_momentum":
            return torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=True)
        return torch.optim.AdamW(params, lr=0.01, amsgrad=name.endswith("amsgrad"), foreach=True)

    want, _ = _train(make, dtype, FOREACH_OPS, on_gems=False)
    got, served = _train(make, dtype, FOREACH_OPS, on_gems=True)
    assert served
    _assert_matches(got, want, dtype)


def _state(params: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    """params, grads (8 everywhere), exp_avgs, exp_avg_sqs, steps (1) of a first AdamW step."""
    return [[p.clone() for p in params], [torch.full_like(p, 8.0) for p in params],
            [torch.zeros_like(p) for p in params], [torch.zeros_like(p) for p in params],
            [torch.tensor(1.0, device=p.device) for p in params]]


def _fused_step(state: list[list[torch.Tensor]], **options: Any) -> list[torch.Tensor]:
    params, grads, exp_avgs, exp_avg_sqs, steps = state
    torch._fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, [], steps, lr=0.1, beta1=0.9, beta2=0.99,
                        weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False, **options)
    return params + grads + exp_avgs


def _on_gems(op: str, fn: Callable[[], Any], answered: bool = True) -> Any:
    """``fn()`` under gems; asserts that gems' ``op`` answered the call (``answered``), or
    that its function was entered and handed the call to ATen."""
    if runtime.current().policy.gate_for(op) == ALL_DTYPES:
        pytest.skip(f"the {gems_core.backend().name} backend leaves {op} to ATen")
    with RouteWatch(implementations((op,))[op]) as watch, gems_core.use_gems():
        result = fn()
    assert (watch.hit if answered else watch.entered and not watch.hit), op
    return result


@pytest.mark.parametrize("found", [0.0, 1.0])
def test_grad_scale_unscales_and_found_inf_skips(found: float) -> None:
    """With grad_scale the gradients are divided by it and written back; found_inf != 0
    leaves everything as it was."""
    params = [torch.linspace(-1, 1, 7, device=DEVICE), torch.ones(3, device=DEVICE)]
    options = {"grad_scale": torch.tensor([4.0], device=DEVICE), "found_inf": torch.tensor([found], device=DEVICE)}
    want = _fused_step(_state(params), **options)
    state = _state(params)
    got = _on_gems("_fused_adamw_", lambda: _fused_step(state, **options))
    assert (got[2] == (8.0 if found else 2.0)).all()  # the unscaled gradient, or the untouched one
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("case", ["float64", "layouts differ"])
def test_unserved_calls_reach_aten_whole(case: str) -> None:
    """gems hands these to ATen (its function is entered and declines): same results. A
    transposed parameter whose gradient is contiguous holds its elements in another order."""
    if case == "float64":
        params = [torch.linspace(-1, 1, 7, device=DEVICE, dtype=torch.float64)]
    else:
        params = [torch.linspace(-1, 1, 14, device=DEVICE).view(7, 2).t()]

    def state() -> list[list[torch.Tensor]]:
        made = _state(params)
        made[1] = [g.contiguous() * torch.arange(g.numel(), device=DEVICE).view(g.shape) for g in made[1]]
        return made

    want = _fused_step(state())
    got_state = state()
    assert got_state[0][0].is_contiguous() == (case == "float64")  # clones keep a transposed layout
    got = _on_gems("_fused_adamw_", lambda: _fused_step(got_state), answered=False)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=0, rtol=0)


@pytest.mark.parametrize("fused", [False, True], ids=["foreach", "fused"])
def test_channels_last_and_transposed_parameters_are_served(fused: bool, checker: str) -> None:
    """A convolution's weight in channels-last and a transposed matrix are dense: the
    multi-tensor kernels serve their steps (the optimizer's state and the gradients laid out
    as the parameters), which agree with ATen's in float64 and keep the layouts."""
    g = torch.Generator().manual_seed(2)
    layouts = [lambda t: t.contiguous(memory_format=torch.channels_last), lambda t: t.t()]
    shapes = [(4, 3, 2, 2), (5, 3)]
    initial = [lay(torch.randn(s, generator=g)) for lay, s in zip(layouts, shapes)]
    grads = [[lay(torch.randn(s, generator=g)) for lay, s in zip(layouts, shapes)] for _ in range(STEPS)]
    assert not any(p.is_contiguous() for p in initial)
    # ops whose every list is parameter-shaped (the step counters' additions are served either way)
    ops = ("_fused_adamw_",) if fused else tuple(
        name for name in FOREACH_OPS if name.startswith(("_foreach_lerp_", "_foreach_addcmul_")))
    assert ops

    def run(on_gems: bool) -> tuple[list[torch.Tensor], bool]:
        move = (lambda t: t.to(DEVICE)) if on_gems else (lambda t: t.double())
        params = [move(p).requires_grad_() for p in initial]
        optimizer = torch.optim.AdamW(params, lr=0.01, weight_decay=0.1, fused=fused or None, foreach=not fused)
        with RouteWatch(frozenset().union(*implementations(ops).values())) as watch, \
                gems_core.use_gems() if on_gems else torch.no_grad():
            for step in range(STEPS):
                for p, grad in zip(params, grads[step]):
                    p.grad = move(grad)
                optimizer.step()
        state = [v for p in params for k, v in optimizer.state[p].items() if k != "step"]
        return [p.detach() for p in params] + state, watch.hit

    if fused and runtime.current().policy.gate_for("_fused_adamw_") == ALL_DTYPES:
        pytest.skip(f"the {gems_core.backend().name} backend leaves _fused_adamw_ to ATen")
    want, _ = run(on_gems=False)
    got, served = run(on_gems=True)
    assert served
    for tensor, like in zip(got, [*initial, *(p for p in initial for _ in range(2))], strict=True):
        assert tensor.stride() == like.stride()  # (each parameter's exp_avg and exp_avg_sq)
    _assert_matches(got, want, torch.float32)


def test_foreach_functional_ops_allocate_new_lists() -> None:
    a = [torch.randn(5, device=DEVICE), torch.randn(2, 3, device=DEVICE)]
    b = [torch.rand(5, device=DEVICE) + 0.5, torch.rand(2, 3, device=DEVICE) + 0.5]
    calls = {
        "_foreach_sqrt": lambda: torch._foreach_sqrt(b),
        "_foreach_add.List": lambda: torch._foreach_add(a, b, alpha=3),
        "_foreach_div.ScalarList": lambda: torch._foreach_div(a, [2.0, -4.0]),
        "_foreach_maximum.List": lambda: torch._foreach_maximum(a, b),
        "_foreach_lerp.Scalar": lambda: torch._foreach_lerp(a, b, 0.7),
    }
    for name, call in calls.items():
        want = call()
        got = _on_gems(name, call)
        assert all(g.data_ptr() not in (x.data_ptr() for x in a + b) for g in got)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("scalar_dtype", [torch.float32, torch.float64, torch.int64, torch.bfloat16])
def test_a_0d_tensor_on_the_lists_device_is_read_by_the_kernel(scalar_dtype: torch.dtype) -> None:
    """``_foreach_<op>.Tensor`` with a 0-d tensor on the lists' device (gradient clipping's
    coefficient): gems' kernel reads its value, of any real dtype, with ``alpha`` applied."""
    torch.manual_seed(3)
    a = [torch.randn(5, device=DEVICE), torch.randn(2, 3, device=DEVICE).t()[0], torch.randn(0, device=DEVICE)]
    a = [x.contiguous() for x in a]
    other = (torch.randn((), device=DEVICE) * 4).to(scalar_dtype)
    value = float(other)
    calls = {
        "_foreach_mul.Tensor": (lambda: torch._foreach_mul(a, other), lambda x: x * value),
        "_foreach_div.Tensor": (lambda: torch._foreach_div(a, other), lambda x: x / value),
        "_foreach_add.Tensor": (lambda: torch._foreach_add(a, other, alpha=-0.5), lambda x: x - 0.5 * value),
    }
    for name, (call, rule) in calls.items():
        got = _on_gems(name, call)
        for g, x in zip(got, a):
            torch.testing.assert_close(g.double(), rule(x.double()), atol=1e-6, rtol=1e-6)
    grads = [x.clone() for x in a]
    _on_gems("_foreach_mul_.Tensor", lambda: torch._foreach_mul_(grads, other))
    for g, x in zip(grads, a):
        torch.testing.assert_close(g.double(), x.double() * value, atol=1e-6, rtol=1e-6)


def test_gradient_clipping_is_served_whole() -> None:
    """``clip_grad_norm_`` (foreach) scales every gradient by a 0-d coefficient on the
    device in one gems launch, without a read of the coefficient by the host."""
    torch.manual_seed(4)
    params = [torch.nn.Parameter(torch.randn(n, device=DEVICE)) for n in (7, 300, 1)]
    for p in params:
        p.grad = torch.randn_like(p) * 3
    want = [p.grad.double() for p in params]
    norm = torch.sqrt(sum((g * g).sum() for g in want))
    want = [g * min(1.0, 0.5 / (float(norm) + 1e-6)) for g in want]
    _on_gems("_foreach_mul_.Tensor", lambda: torch.nn.utils.clip_grad_norm_(params, 0.5, foreach=True))
    for p, w in zip(params, want):
        torch.testing.assert_close(p.grad.double(), w, atol=1e-5, rtol=1e-5)


ERRORS = {
    "lists of two lengths": lambda: torch._foreach_add_([torch.ones(3, device=DEVICE)], [], alpha=2),
    "tensors of two sizes": lambda: torch._foreach_mul_([torch.ones(3, device=DEVICE)], [torch.ones(4, device=DEVICE)]),
    "scalars of another count": lambda: torch._foreach_div_([torch.ones(3, device=DEVICE)], [1.0, 2.0]),
    "adamw with too few steps": lambda: torch._fused_adamw_(
        [torch.ones(3, device=DEVICE)], [torch.ones(3, device=DEVICE)], [torch.zeros(3, device=DEVICE)],
        [torch.zeros(3, device=DEVICE)], [], [], lr=0.1, beta1=0.9, beta2=0.99, weight_decay=0.0, eps=1e-8,
        amsgrad=False, maximize=False),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_bad_lists_raise_atens_error(name: str) -> None:
    """gems declines malformed lists, so the error is ATen's own."""
    if name == "adamw with too few steps" and torch.device(DEVICE).type != "cpu":
        pytest.skip("ATen's CUDA _fused_adamw_ reads the missing step tensors (a crash, not an error)")
    expected = answer(ERRORS[name])
    assert isinstance(expected, str)  # ATen raised
    with gems_core.use_gems():
        assert answer(ERRORS[name]) == expected


def test_lists_of_unequal_sizes_cover_every_chunk() -> None:
    """A list of one large and several small tensors (an embedding beside norms), an empty
    one among them: every program's tensor and chunk come from the work table, so each
    element of each tensor is updated once."""
    torch.manual_seed(5)
    sizes = [3, 20000, 0, 8193, 1]
    a = [torch.randn(n, device=DEVICE) for n in sizes]
    b = [torch.randn(n, device=DEVICE) for n in sizes]
    want = [(x.double() + 0.5 * y.double()) for x, y in zip(a, b)]
    got = _on_gems("_foreach_add.List", lambda: torch._foreach_add(a, b, alpha=0.5))
    for g, w in zip(got, want):
        torch.testing.assert_close(g.double(), w, atol=1e-6, rtol=1e-6)
    params = [x.clone() for x in a]
    grads = [y.clone() for y in b]
    steps = [torch.tensor(1.0, device=DEVICE) for _ in sizes]
    expected = [p.clone() for p in params]
    torch._fused_adamw_(expected, grads, [torch.zeros_like(p) for p in params], [torch.zeros_like(p) for p in params],
                        [], [s.clone() for s in steps], lr=0.1, beta1=0.9, beta2=0.99, weight_decay=0.01, eps=1e-8,
                        amsgrad=False, maximize=False)
    _on_gems("_fused_adamw_", lambda: torch._fused_adamw_(
        params, grads, [torch.zeros_like(p) for p in params], [torch.zeros_like(p) for p in params], [], steps,
        lr=0.1, beta1=0.9, beta2=0.99, weight_decay=0.01, eps=1e-8, amsgrad=False, maximize=False))
    for p, e in zip(params, expected):
        torch.testing.assert_close(p, e, atol=1e-6, rtol=1e-5)


def _layer() -> Any:
    from gems_core import native

    layer = native.load(quiet=True)
    if layer is None:
        pytest.skip(f"the native layer is not built here: {native.problem()}")
    return layer


@pytest.fixture(params=["python", "native"])
def checker(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Foreach lists checked in Python, or in C++ by the native layer (where it is loaded)."""
    from gems_core import native

    layer = _layer() if request.param == "native" else None
    monkeypatch.setattr(native, "loaded", lambda: layer)
    return request.param


def test_native_list_checks_agree_with_python() -> None:
    """The native layer's check of foreach lists gives what the Python one gives (the
    addresses and counts of a served call, None for every kind of list it refuses)."""
    from gems_core.ops import foreach

    layer = _layer()
    a = [torch.randn(5), torch.randn(2, 3), torch.randn(0)]
    b = [torch.randn(5), torch.randn(2, 3), torch.randn(0)]
    cases = {
        "served": [a, b, a],
        "tuples": (tuple(a), tuple(b)),
        "one row": [a],
        "non-contiguous": [a, [b[0], torch.randn(3, 2).t(), b[2]]],
        "channels-last": [[a[0], torch.randn(4, 3, 2, 2).to(memory_format=torch.channels_last)],
                          [b[0], torch.randn(4, 3, 2, 2).to(memory_format=torch.channels_last)]],
        "layouts differ": [[a[0], torch.randn(4, 3, 2, 2).to(memory_format=torch.channels_last)],
                           [b[0], torch.randn(4, 3, 2, 2)]],
        "not dense": [[a[0], torch.randn(4, 6)[:, ::2]], [b[0], torch.randn(4, 6)[:, ::2]]],
        "dtype": [a, [b[0], b[1].double(), b[2]]],
        "sizes": [a, [b[0], b[1].view(3, 2), b[2]]],
        "length": [a, b[:2]],
        "not a tensor": [a, [b[0], 1.0, b[2]]],
        "empty": [[], []],
        "not lists": [a, None],
    }
    served = ("served", "tuples", "one row", "channels-last")
    for name, rows in cases.items():
        if name in served or name in ("non-contiguous", "dtype", "sizes", "length", "layouts differ", "not dense"):
            assert foreach._servable(rows) is (name in served), name
        want = foreach.addresses(rows) if name in served else None
        assert layer.foreach_addresses(rows) == want, name
    got = layer.foreach_addresses(cases["served"])
    assert got[1] == (5, 6, 0) and got[0][:2] == (a[0].data_ptr(), a[1].data_ptr())


@pytest.mark.parametrize("case", ["second list non-contiguous", "second list of another dtype", "two sizes at one index"])
def test_foreach_lists_gems_does_not_serve_reach_aten(case: str, checker: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Any tensor of any list that breaks the kernel's assumptions (contiguous, one dtype and
    device, each list's sizes the first's) sends the whole call to ATen: no launch, ATen's
    result (or ATen's error for sizes ATen refuses too), checked in Python and in C++."""
    from gems_core.ops import foreach

    a = [torch.randn(5, device=DEVICE), torch.randn(2, 3, device=DEVICE)]
    b = [torch.rand(5, device=DEVICE), torch.rand(3, 3, device=DEVICE)[:, 1:].t()]  # (2, 3), strided
    if case == "second list of another dtype":
        b[1] = torch.rand(3, 2, device=DEVICE).t().contiguous().double()
    elif case == "two sizes at one index":
        b[0] = torch.rand(6, device=DEVICE)[:5].view(5)  # equal sizes: served; then an unequal pair
        b[1] = torch.rand(6, device=DEVICE)
    launched: list[Any] = []
    monkeypatch.setattr(foreach, "_launch", lambda *args, **kwargs: launched.append(args))
    if case == "two sizes at one index":
        want = answer(lambda: torch._foreach_mul(a, b))
        assert isinstance(want, str)  # ATen raised
        assert _on_gems("_foreach_mul.List", lambda: answer(lambda: torch._foreach_mul(a, b)), answered=False) == want
    else:
        want = torch._foreach_mul(a, b)
        got = _on_gems("_foreach_mul.List", lambda: torch._foreach_mul(a, b), answered=False)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, atol=0, rtol=0)
    assert not launched


def test_address_tables_tell_whether_every_address_is_16_byte_aligned() -> None:
    """The multi-tensor kernels read 16-byte vectors through the table's addresses only when
    every address is a multiple of 16 bytes: a parameter that is a view one float32 into its
    storage (a flattened parameter's slice, say) turns that off for the whole launch, and
    the step still matches ATen's."""
    from gems_core.ops.optimizer import address_table

    storage = torch.randn(1 + 6 * 5 + 9000, device=DEVICE)
    fresh = [torch.randn(6, 5, device=DEVICE), torch.randn(9000, device=DEVICE)]
    shifted = [storage[1:31].view(6, 5), storage[31:]]  # 4 and 124 bytes past a 16-byte boundary
    assert [t.data_ptr() % 16 for t in shifted] == [4, 12] and all(t.data_ptr() % 16 == 0 for t in fresh)
    assert address_table([fresh, fresh], DEVICE, 8192)[3] is True
    assert address_table([fresh, shifted], DEVICE, 8192)[3] is False
    grads = [torch.randn_like(t) for t in shifted]
    params = [t.detach().double().requires_grad_() for t in shifted]  # float64 copies, on ATen
    for p, g in zip(params, grads):
        p.grad = g.double()
    torch.optim.AdamW(params, lr=0.01, foreach=False).step()
    served = [t.detach().requires_grad_() for t in shifted]
    for p, g in zip(served, grads):
        p.grad = g
    with RouteWatch(implementations(("_fused_adamw_",))["_fused_adamw_"]) as watch, gems_core.use_gems():
        torch.optim.AdamW(served, lr=0.01, fused=True).step()
    assert watch.hit
    for got, want in zip(served, params):  # float32 arithmetic against float64: one step's rounding
        torch.testing.assert_close(got.detach().double(), want.detach(), rtol=1e-4, atol=1e-5)
