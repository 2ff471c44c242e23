"""Tensor ops (factory, masked, indexing, shape, topk, unique): ATen's errors for bad
arguments with gems on, and which gems kernels ATen's composites reach."""

from __future__ import annotations

import pytest
import torch

import gems_core
from gems_core.registry import load_ops

DEVICE = torch.device(gems_core.device)
OPS = [
    "fill_", "zero_", "arange", "masked_fill_", "masked_fill", "masked_select", "nonzero",
    "index_select", "embedding", "embedding_dense_backward", "flip", "repeat", "constant_pad_nd",
    "topk", "_unique2",
]

#: indices out of range: checked on the host for CPU tensors; ATen's GPU kernels check them with a
#: device-side assertion, which ends the process's context
HOST_CHECKED = pytest.mark.skipif(DEVICE.type != "cpu", reason="checked by a device-side assertion there")
#: ATen's kernels for other devices word these errors differently (gems follows the CPU's)
CPU_WORDING = pytest.mark.skipif(DEVICE.type != "cpu", reason="ATen words this error differently there")
BAD_CALLS = [
    pytest.param(lambda: torch.empty(2, dtype=torch.int8, device=DEVICE).fill_(300), RuntimeError, "without overflow",
                 id="fill-overflow"),
    pytest.param(lambda: torch.empty(2, device=DEVICE).fill_(torch.ones(2, device=DEVICE)),
                 RuntimeError, "0-dimension value tensor", id="fill-tensor-dim"),
    pytest.param(lambda: torch.full((-2,), 1.0, device=DEVICE), RuntimeError, "negative dimension", id="full-negative"),
    pytest.param(lambda: torch.arange(0, 5, 0, device=DEVICE), RuntimeError, "step must be nonzero", id="arange-step"),
    pytest.param(lambda: torch.arange(0, 5, -1, device=DEVICE), RuntimeError, "inconsistent with step sign",
                 id="arange-sign"),
    pytest.param(lambda: torch.arange(0, float("inf"), device=DEVICE), RuntimeError, "unsupported range",
                 id="arange-inf"),
    pytest.param(lambda: torch.ones(3, device=DEVICE).masked_fill_(torch.ones(3, device=DEVICE), 1.0),
                 RuntimeError, "boolean masks", id="masked-fill-mask"),
    pytest.param(lambda: torch.ones(3, device=DEVICE).masked_fill(torch.ones(3, dtype=torch.bool, device=DEVICE),
                                                                  torch.ones(3, device=DEVICE)),
                 RuntimeError, "0-dimensional value", id="masked-fill-value"),
    pytest.param(lambda: torch.ones(3, 2, device=DEVICE).masked_fill_(
                     torch.ones(4, 3, 2, dtype=torch.bool, device=DEVICE), 1.0),
                 RuntimeError, "doesn't match the broadcast shape", id="masked-fill-broadcast", marks=CPU_WORDING),
    pytest.param(lambda: torch.masked_select(torch.ones(3, device=DEVICE), torch.ones(3, device=DEVICE)),
                 RuntimeError, "BoolTensor", id="masked-select-mask"),
    pytest.param(lambda: torch.index_select(torch.ones(3, 4, device=DEVICE), 0, torch.tensor([3], device=DEVICE)),
                 IndexError, "out of range", id="index-select-high", marks=HOST_CHECKED),
    pytest.param(lambda: torch.index_select(torch.ones(3, 4, device=DEVICE), 1, torch.tensor([-1], device=DEVICE)),
                 RuntimeError, "out of", id="index-select-negative", marks=HOST_CHECKED),
    pytest.param(lambda: torch.index_select(torch.ones(3, 4, device=DEVICE), 1, torch.tensor([1.0], device=DEVICE)),
                 RuntimeError, "int32 or int64", id="index-select-dtype", marks=CPU_WORDING),
    pytest.param(lambda: torch.index_select(torch.ones(3, 4, device=DEVICE), 1, torch.tensor([[1]], device=DEVICE)),
                 IndexError, "vector", id="index-select-rank", marks=CPU_WORDING),
    pytest.param(lambda: torch.index_select(torch.ones(3, 4, device=DEVICE), 2, torch.tensor([1], device=DEVICE)),
                 IndexError, "Dimension out of range", id="index-select-dim"),
    pytest.param(lambda: torch.embedding(torch.ones(3, 4, device=DEVICE), torch.tensor([3], device=DEVICE)),
                 IndexError, "index out of range", id="embedding-range", marks=HOST_CHECKED),
    pytest.param(lambda: torch.embedding(torch.ones(3, 4, device=DEVICE), torch.tensor([1.0], device=DEVICE)),
                 RuntimeError, "Long, Int", id="embedding-dtype"),
    pytest.param(lambda: torch.flip(torch.ones(3, 4, device=DEVICE), (0, 0)), RuntimeError, "appears multiple times",
                 id="flip-repeat"),
    pytest.param(lambda: torch.flip(torch.ones(3, 4, device=DEVICE), (2,)), IndexError, "Dimension out of range",
                 id="flip-dim"),
    pytest.param(lambda: torch.ones(3, 4, device=DEVICE).repeat(2), RuntimeError, "can not be smaller",
                 id="repeat-rank"),
    pytest.param(lambda: torch.ones(3, 4, device=DEVICE).repeat(2, -1), RuntimeError, "negative dimension",
                 id="repeat-negative"),
    pytest.param(lambda: torch.constant_pad_nd(torch.ones(3, 4, device=DEVICE), (1,)), RuntimeError, "must be even",
                 id="pad-odd"),
    pytest.param(lambda: torch.constant_pad_nd(torch.ones(3, 4, device=DEVICE), (1,) * 6),
                 RuntimeError, "no more than twice", id="pad-long"),
    pytest.param(lambda: torch.constant_pad_nd(torch.ones(3, 4, device=DEVICE), (-5, 0)), RuntimeError, "non-negative",
                 id="pad-negative-size"),
    pytest.param(lambda: torch.constant_pad_nd(torch.ones(3, dtype=torch.int8, device=DEVICE), (1, 1), 300),
                 RuntimeError, "without overflow", id="pad-overflow"),
    pytest.param(lambda: torch.topk(torch.ones(3, 4, device=DEVICE), 5), RuntimeError, "k out of range", id="topk-k"),
    pytest.param(lambda: torch.topk(torch.ones(3, 4, device=DEVICE), 1, dim=2), IndexError, "Dimension out of range",
                 id="topk-dim"),
]


@pytest.mark.parametrize("call,error,message", BAD_CALLS)
def test_bad_arguments_raise_atens_error(call, error, message) -> None:
    with pytest.raises(error, match=message):
        call()
    with gems_core.use_gems(include=OPS), pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize("size", [0, 4])
def test_index_error_is_raised_before_any_kernel(monkeypatch, size) -> None:
    load_ops()
    from gems_core.ops import indexing

    if not indexing.host_checks_indices(DEVICE):
        pytest.skip("checked by a device-side assertion there, which ends the process's context")
    monkeypatch.setattr(indexing, "_index_select_launch", lambda *a, **k: pytest.fail("kernel ran"))
    with gems_core.use_gems(include=["index_select"]), pytest.raises(IndexError):
        torch.index_select(torch.ones(3, size, device=DEVICE), 1, torch.tensor([size], device=DEVICE))


FACTORY_CALLS = [
    pytest.param(lambda: torch.ones(3, 4, device=DEVICE), "_fill_launch", id="ones"),
    pytest.param(lambda: torch.zeros(3, 4, dtype=torch.int32, device=DEVICE), "_fill_launch", id="zeros"),
    pytest.param(lambda: torch.full((5,), 2.5, dtype=torch.float16, device=DEVICE), "_fill_launch", id="full"),
    pytest.param(lambda: torch.ones_like(torch.empty(2, 3, device=DEVICE).t()), "_fill_launch", id="ones_like"),
    pytest.param(lambda: torch.zeros_like(torch.empty(2, 3, device=DEVICE)), "_fill_launch", id="zeros_like"),
    pytest.param(lambda: torch.full_like(torch.empty(4, device=DEVICE), 7), "_fill_launch", id="full_like"),
    pytest.param(lambda: torch.empty(3, device=DEVICE).new_ones(2), "_fill_launch", id="new_ones"),
    pytest.param(lambda: torch.arange(5, device=DEVICE), "_arange_launch", id="arange"),
    pytest.param(lambda: torch.arange(1.0, 2.0, 0.25, device=DEVICE), "_arange_launch", id="arange-float"),
]


@pytest.mark.parametrize("call,launcher", FACTORY_CALLS)
def test_factory_composites_reach_gems_kernels(monkeypatch, call, launcher) -> None:
    """A dispatch spy: ATen's factory composites end in fill_/zero_/arange.start_out on the
    backend key, so a gems kernel must run for each."""
    load_ops()
    from gems_core.ops import factory

    launches: list[str] = []
    original = getattr(factory, launcher)
    monkeypatch.setattr(factory, launcher, lambda *a, **k: (launches.append(launcher), original(*a, **k)))
    with gems_core.use_gems(include=["fill_", "zero_", "arange"]):
        result = call()
    assert launches, "no gems kernel ran"
    torch.testing.assert_close(result, call())


@pytest.mark.parametrize(("args", "kwargs"), [
    ((3, 9), {}), ((2, 20, 3), {}), ((True, 4), {}), ((0, 2.5, 0.5), {}), ((-1.5, 2.25, 0.25), {}),
    ((9, 1, -2), {"dtype": torch.int32}), ((0, 4), {"dtype": torch.bfloat16}), ((5, 5), {}),
])
def test_arange_allocates_its_result_at_size(monkeypatch, args, kwargs) -> None:
    """torch.arange(start, end[, step]) without out= is served by gems' functional overloads:
    the result is allocated at its size (nothing resized, so the native layer can repeat the
    call), with ATen's dtype inference and values."""
    from gems_conformance.routing import RouteWatch

    load_ops()
    from gems_core.ops import factory

    resized: list[tuple[int, ...]] = []
    original = torch.Tensor.resize_
    monkeypatch.setattr(torch.Tensor, "resize_", lambda t, *a, **k: (resized.append(tuple(t.shape)), original(t, *a, **k))[1])
    with RouteWatch([factory.arange.__code__]) as route, gems_core.use_gems(include=["arange"]):
        got = torch.arange(*args, device=DEVICE, **kwargs)
    monkeypatch.undo()
    want = torch.arange(*args, **kwargs)
    assert route.hit and not resized and got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)


def test_tile_and_masked_fill_composites_reach_gems(monkeypatch) -> None:
    load_ops()
    from gems_core.ops import shape

    launches: list[int] = []
    original = shape._launch
    monkeypatch.setattr(shape, "_launch", lambda *a, **k: (launches.append(1), original(*a, **k)))
    x = torch.randn(3, 4, device=DEVICE)
    with gems_core.use_gems(include=["repeat"]):
        result = torch.tile(x, (2, 1))
    assert launches and torch.equal(result, torch.tile(x, (2, 1)))


def test_embedding_backward_through_autograd_skips_padding() -> None:
    weight = torch.randn(6, 5, device=DEVICE, requires_grad=True)
    indices = torch.tensor([[0, 2, 2], [5, 2, 1]], device=DEVICE)
    with gems_core.use_gems(include=["embedding", "embedding_dense_backward"]):
        torch.nn.functional.embedding(indices, weight, padding_idx=2).sum().backward()
    expected = torch.zeros(6, 5, device=DEVICE)
    expected[[0, 5, 1]] = 1.0
    torch.testing.assert_close(weight.grad, expected)


def test_unique_unsorted_and_inverse_shape() -> None:
    x = torch.tensor([[3, 1, 3], [2, 1, 1]], device=DEVICE)
    with gems_core.use_gems(include=["_unique2"]):
        values, inverse, counts = torch.unique(x, sorted=False, return_inverse=True, return_counts=True)
    assert torch.equal(values, torch.tensor([1, 2, 3], device=DEVICE))
    assert torch.equal(values[inverse], x) and torch.equal(counts, torch.tensor([3, 1, 2], device=DEVICE))
