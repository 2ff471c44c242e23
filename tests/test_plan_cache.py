"""Per-call-signature plans of the row ops (sum/mean/amax, softmax/log_softmax, layer_norm,
rms_norm) and of pointwise ops: a repeat call reuses its plan, a changed signature builds a
new one, results stay right on every hit, errors are raised on every bad call, and nothing
is kept while configs are forced.

Shapes stay tiny: every call runs in Triton's interpreter on this machine."""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F

import gems_core
from gems_core import plan_cache, runtime, tuning
from gems_core.codegen.pointwise import POINTWISE
from gems_core.registry import load_ops

DEVICE = gems_core.device


def op_module(name: str) -> ModuleType:
    load_ops()  # op modules define kernels: after the backend (interpreter or not) is known
    return importlib.import_module(f"gems_core.ops.{name}")


reduction, softmax, norm = (op_module(n) for n in ("reduction", "softmax", "norm"))


def rand(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(shape, dtype=torch.float64).to(dtype).to(DEVICE)


def close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    assert actual.stride() == expected.stride()
    torch.testing.assert_close(actual, expected, equal_nan=True)


class Stores:
    """Counts the plans a PlanCache stores inside the block."""

    def __init__(self, cache: plan_cache.PlanCache) -> None:
        self.cache = cache
        self.start = cache.stores

    @property
    def count(self) -> int:
        return self.cache.stores - self.start


def run_twice(fn, *inputs_pairs):
    """fn on each input tuple, under gems."""
    with gems_core.use_gems():
        return [fn(*inputs) for inputs in inputs_pairs]


@pytest.fixture(autouse=True)
def fresh_plans():
    plan_cache.clear_all()
    yield
    plan_cache.clear_all()


def test_sum_repeat_call_hits_its_plan_and_stays_correct() -> None:
    stores = Stores(reduction._plans)
    a, b = rand(3, 40), rand(3, 40)
    with gems_core.use_gems():
        first = a.sum(-1)
        assert stores.count == 1
        second = b.sum(-1)
        third = torch.sum(a, -1)
        assert stores.count == 1  # both hits
    close(first, a.sum(-1))
    close(second, b.sum(-1))
    close(third, a.sum(-1))


@pytest.mark.parametrize(
    "call",
    [
        lambda x: x.sum(-1),
        lambda x: x.sum(0),
        lambda x: x.sum((0, 1)),
        lambda x: x.sum(-1, keepdim=True),
        lambda x: x.sum(0, keepdim=True),
        lambda x: torch.sum(x),
        lambda x: x.sum(-1, dtype=torch.float64),
        lambda x: x.mean(-1),
        lambda x: x.mean(0, keepdim=True),
        lambda x: torch.mean(x),
        lambda x: x.amax(-1),
        lambda x: x.amax((0, 1), keepdim=True),
        lambda x: torch.max(x),
        lambda x: torch.prod(x, 1),
    ],
)
@pytest.mark.parametrize(
    "make",
    [
        lambda: rand(4, 6, 10),
        lambda: rand(6, 4, 10).transpose(0, 1),  # kept dims swapped
        lambda: rand(4, 6, 20)[:, :, ::2],  # strided reduced dim
        lambda: rand(10, 6, 4).permute(2, 1, 0),  # reduced dim outermost in memory
        lambda: rand(4, 3, 6, 10).permute(0, 2, 1, 3)[:, :, 0],  # sliced
        lambda: rand(4, 10, 6).permute(1, 0, 2).permute(1, 2, 0),  # copies (does not merge)
    ],
)
def test_reductions_stay_correct_across_hits(call, make) -> None:
    inputs = [make() for _ in range(3)]
    results = run_twice(call, *[(x,) for x in inputs])
    for x, result in zip(inputs, results):
        close(result, call(x))


def test_reduction_split_rows_and_partials_across_hits() -> None:
    # a short output of long rows splits each row over several programs
    inputs = [rand(2, 5000), rand(2, 5000)]
    stores = Stores(reduction._plans)
    results = run_twice(lambda x: x.sum(-1), *[(x,) for x in inputs])
    assert stores.count == 1
    for x, result in zip(inputs, results):
        torch.testing.assert_close(result, x.sum(-1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "first,second",
    [
        (lambda: (rand(4, 8), -1, False), lambda: (rand(8, 4).t(), -1, False)),  # strides
        (lambda: (rand(4, 8), -1, False), lambda: (rand(4, 8, dtype=torch.float64), -1, False)),  # dtype
        (lambda: (rand(4, 8), -1, False), lambda: (rand(4, 8), 0, False)),  # dim
        (lambda: (rand(4, 8), -1, False), lambda: (rand(4, 8), 1, False)),  # same dim, other spelling
        (lambda: (rand(4, 8), -1, False), lambda: (rand(4, 8), -1, True)),  # keepdim
        (lambda: (rand(4, 8), -1, False), lambda: (rand(5, 8), -1, False)),  # shape
    ],
)
def test_a_changed_signature_misses(first, second) -> None:
    stores = Stores(reduction._plans)
    calls = [first(), second()]
    with gems_core.use_gems():
        results = [x.sum(dim, keepdim=keepdim) for x, dim, keepdim in calls]
    assert stores.count == 2
    for (x, dim, keepdim), result in zip(calls, results):
        close(result, x.sum(dim, keepdim=keepdim))


def test_sum_and_mean_of_one_signature_keep_separate_plans() -> None:
    x = rand(3, 7)
    with gems_core.use_gems():
        results = [x.sum(-1), x.mean(-1), x.amax(-1), x.sum(-1), x.mean(-1), x.amax(-1)]
    assert len(reduction._plans) == 3
    for result, expected in zip(results, [x.sum(-1), x.mean(-1), x.amax(-1)] * 2):
        close(result, expected)


def test_empty_inputs_and_outputs() -> None:
    empty_rows = rand(0, 5)
    with gems_core.use_gems():
        for _ in range(2):
            close(empty_rows.sum(-1), torch.empty(0, device=DEVICE))
            close(empty_rows.sum(0), torch.zeros(5, device=DEVICE))
            assert torch.isnan(empty_rows.mean(0)).all()


@pytest.mark.parametrize(
    "call,error",
    [
        (lambda x: x.sum(5), IndexError),
        (lambda x: x.sum((0, 0)), RuntimeError),
        (lambda x: x.amax(-4), IndexError),
        (lambda x: torch.softmax(x, 3), IndexError),
        (lambda x: torch.log_softmax(x, -3), IndexError),
        (lambda x: F.layer_norm(x, (7,)), RuntimeError),
    ],
)
def test_errors_are_raised_on_every_call(call, error) -> None:
    x = rand(3, 5)
    with gems_core.use_gems():
        for _ in range(3):
            x.sum(-1), torch.softmax(x, -1), F.layer_norm(x, (5,))  # valid calls of the signature
            with pytest.raises(error):
                call(x)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize(
    "make,dim",
    [
        (lambda: rand(4, 33), -1),
        (lambda: rand(4, 33), 0),
        (lambda: rand(33, 4).t(), -1),  # not contiguous: copied first
        (lambda: rand(3, 5, 7)[:, ::2], 1),
        (lambda: rand(2, 3000), -1),  # a row longer than one tile
        (lambda: rand(5, dtype=torch.float64), 0),
    ],
)
def test_softmax_hits_and_stays_correct(log, make, dim) -> None:
    fn = torch.log_softmax if log else torch.softmax
    inputs = [make() for _ in range(3)]
    stores = Stores(softmax._plans)
    results = run_twice(lambda x: fn(x, dim), *[(x,) for x in inputs])
    assert stores.count == 1
    for x, result in zip(inputs, results):
        torch.testing.assert_close(result, fn(x, dim))


@pytest.mark.parametrize("log", [False, True])
def test_softmax_backward_hits_and_stays_correct(log) -> None:
    fn = torch.log_softmax if log else torch.softmax
    cases = [(rand(4, 9).requires_grad_(), rand(4, 9)) for _ in range(3)]
    with gems_core.use_gems():
        grads = []
        for x, g in cases:
            fn(x, -1).backward(g)
            grads.append(x.grad)
    assert len(softmax._plans) == 2  # one forward, one backward
    for (x, g), grad in zip(cases, grads):
        ref = x.detach().clone().requires_grad_()
        fn(ref, -1).backward(g)
        torch.testing.assert_close(grad, ref.grad)


def test_softmax_out_overloads_stay_unplanned() -> None:
    x = rand(3, 6)
    out = torch.empty(3, 6, device=DEVICE)
    expected = torch.softmax(x, -1)
    with gems_core.use_gems():
        for _ in range(2):
            torch.ops.aten._softmax.out(x, -1, False, out=out)
            torch.testing.assert_close(out, expected)
    assert len(softmax._plans) == 0


@pytest.mark.parametrize("weight,bias", [(True, True), (True, False), (False, False)])
@pytest.mark.parametrize("make", [lambda: rand(4, 3, 8), lambda: rand(8, 3, 4).transpose(0, 2)])
def test_layer_norm_hits_with_this_calls_eps(weight, bias, make) -> None:
    w = rand(3, 8) if weight else None
    b = rand(3, 8) if bias else None
    inputs = [(make(), eps) for eps in (1e-5, 10.0, 1e-5)]  # eps is not part of the plan
    stores = Stores(norm._layer_norm_plans)
    with gems_core.use_gems():
        results = [torch.native_layer_norm(x, (3, 8), w, b, eps) for x, eps in inputs]
    assert stores.count == 1
    for (x, eps), result in zip(inputs, results):
        expected = torch.native_layer_norm(x, (3, 8), w, b, eps)
        for actual, ref in zip(result, expected):
            torch.testing.assert_close(actual, ref, rtol=1e-4, atol=1e-5)
            assert actual.shape == ref.shape


def test_layer_norm_with_non_contiguous_weight_across_hits() -> None:
    w = rand(16)[::2]
    b = rand(8)
    inputs = [rand(5, 8) for _ in range(2)]
    with gems_core.use_gems():
        results = [F.layer_norm(x, (8,), w, b) for x in inputs]
    for x, result in zip(inputs, results):
        torch.testing.assert_close(result, F.layer_norm(x, (8,), w, b), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("weight", [True, False])
def test_rms_norm_hits_with_this_calls_eps_and_grads(weight) -> None:
    w = rand(8).requires_grad_() if weight else None
    cases = [(rand(4, 8).requires_grad_(), eps) for eps in (None, 5.0, None)]
    stores = Stores(norm._rms_norm_plans)
    with gems_core.use_gems():
        results = []
        for x, eps in cases:
            y = F.rms_norm(x, (8,), w, eps)
            y.sum().backward()
            results.append((y.detach(), x.grad))
    assert stores.count == 2  # eps None and eps float are two signatures
    for (x, eps), (y, grad) in zip(cases, results):
        ref_x = x.detach().clone().requires_grad_()
        ref = F.rms_norm(ref_x, (8,), w, eps)
        ref.sum().backward()
        torch.testing.assert_close(y, ref.detach(), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(grad, ref_x.grad, rtol=1e-4, atol=1e-5)


def test_pointwise_plans_live_in_a_plan_cache() -> None:
    a, b = rand(4, 5), rand(4, 5)
    with gems_core.use_gems():
        first = a + b
        counts = [c.stores for c in plan_cache.caches()]
        second = b + a
        assert [c.stores for c in plan_cache.caches()] == counts
    close(first, a + b)
    close(second, a + b)


def test_forcing_keeps_no_plans_and_drops_earlier_ones() -> None:
    x = rand(3, 9)
    expected = x.sum(-1)
    with gems_core.use_gems():
        x.sum(-1), torch.softmax(x, -1), x + x
        assert len(reduction._plans) == 1 and len(softmax._plans) == 1
        with tuning.forcing(lambda tunable: tunable.configs()[0]):
            assert len(reduction._plans) == 0 and len(softmax._plans) == 0
            for _ in range(2):
                close(x.sum(-1), expected)
                torch.softmax(x, -1), x + x, F.layer_norm(x, (9,)), F.rms_norm(x, (9,))
            assert all(len(c) == 0 for c in plan_cache.caches())
        x.sum(-1)
        assert len(reduction._plans) == 1


def test_plan_cache_is_bounded() -> None:
    cache = plan_cache.PlanCache("test-bounded", limit=3)
    for i in range(7):
        assert cache.store(i, object())
        assert len(cache) <= 3
    assert cache.stores == 7
    assert 6 in cache and cache.get(0) is None


def test_options_are_cached_per_runtime_and_returned_fresh() -> None:
    first = POINTWISE.options()
    first["mutated"] = True
    assert "mutated" not in POINTWISE.options()
    assert POINTWISE.options() == dict(runtime.current().policy.options_for("pointwise"))


def test_out_and_inplace_calls_repeat_through_plans() -> None:
    from gems_core.ops import arithmetic

    stores = Stores(arithmetic._add._plans)
    pairs = [(rand(5, 8), rand(8)) for _ in range(3)]
    with gems_core.use_gems():
        outs = []
        for a, b in pairs:  # out=: the first call stores, the others hit
            out = torch.empty(5, 8, device=DEVICE)
            assert torch.add(a, b, out=out) is out
            outs.append(out)
        assert stores.count == 1
        targets = [a.clone() for a, _ in pairs]
        for target, (_, b) in zip(targets, pairs):  # in place, broadcasting b: the same launch
            assert target.add_(b) is target
        assert stores.count == 1
        wrong = torch.empty(5, 8, dtype=torch.int32, device=DEVICE)  # a new signature: checked again
        with pytest.raises(RuntimeError, match="can't be cast"):
            torch.add(pairs[0][0], pairs[0][1], out=wrong)
        resized = torch.empty(0, device=DEVICE)  # resized on its first call: not stored then
        torch.add(pairs[0][0], pairs[0][1], out=resized)
        assert stores.count == 1
    for (a, b), out, target in zip(pairs, outs, targets):
        close(out, a + b)
        close(target, a + b)
    close(resized, pairs[0][0] + pairs[0][1])


def test_reduction_out_calls_repeat_through_plans() -> None:
    stores = Stores(reduction._plans)
    inputs = [rand(6, 40) for _ in range(3)]
    with gems_core.use_gems():
        outs = []
        for x in inputs:
            out = torch.empty(6, device=DEVICE)
            assert torch.sum(x, -1, out=out) is out
            outs.append(out)
        assert stores.count == 1
        means = [torch.mean(x, 0, keepdim=True, out=torch.empty(1, 40, device=DEVICE)) for x in inputs]
        assert stores.count == 2
    for x, out, m in zip(inputs, outs, means):
        close(out, x.sum(-1))
        close(m, x.mean(0, keepdim=True))
