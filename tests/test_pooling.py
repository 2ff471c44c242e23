"""Pooling (gems_core/ops/pooling.py) against ATen: float64 references on random data in
every layout the kernels read (contiguous, channels-last, strided, expanded, no batch),
NaN and infinities, empty batches, the 1-d forms, out= forms and ATen's errors for bad
arguments. A call counts as served only where gems' function ran and launched a kernel, so a
silent fallback to ATen fails.

Shapes are small (the CPU interpreter is slow) but odd-sized, with windows that overlap
(stride < kernel), hang over the padding (ceil_mode) and skip elements (dilation)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from gems_conformance.routing import RouteWatch, implementations
from outcomes import answer

import gems_core
from gems_core import dispatch
from gems_core.launch_cache import LaunchCache
from gems_core.registry import all_impls

DEVICE = torch.device(gems_core.device)
#: every overload gems_core/ops/pooling.py registers (enabled alone: the tests need no other op)
OPS = tuple(name for name, impl in all_impls().items() if impl.module == "gems_core.ops.pooling")
KERNELS = ("pool", "pool_backward", "plane_mean")


def rand(*shape: int, dtype: torch.dtype = torch.float64, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g, dtype=torch.float64) * 6 - 3).to(dtype).to(DEVICE)


LAYOUTS: dict[str, Callable[[torch.dtype], torch.Tensor]] = {
    "contiguous": lambda dtype: rand(2, 3, 9, 10, dtype=dtype, seed=1),
    "channels_last": lambda dtype: rand(2, 9, 10, 3, dtype=dtype, seed=2).permute(0, 3, 1, 2),
    "strided": lambda dtype: rand(2, 3, 9, 20, dtype=dtype, seed=3)[..., ::2],
    "expanded": lambda dtype: rand(1, 3, 9, 10, dtype=dtype, seed=4).expand(2, 3, 9, 10),
    "3-d": lambda dtype: rand(3, 9, 10, dtype=dtype, seed=5),
}

MAX, AVG = "max_pool2d_with_indices", "avg_pool2d"
ADAPTIVE_AVG, ADAPTIVE_MAX = "_adaptive_avg_pool2d", "adaptive_max_pool2d"
#: name -> (the forward overload it reaches, a call returning the output or (output, indices))
POOLS: dict[str, tuple[str, Callable[[torch.Tensor], Any]]] = {
    "max": (MAX, lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True)),
    "max_dilated_ceil": (MAX, lambda x: F.max_pool2d(x, (3, 2), (2, 1), (1, 1), (2, 3), ceil_mode=True,
                                                     return_indices=True)),
    "avg": (AVG, lambda x: F.avg_pool2d(x, 3, 2, 1)),
    "avg_ceil_no_pad": (AVG, lambda x: F.avg_pool2d(x, (3, 2), 2, (1, 0), ceil_mode=True,
                                                    count_include_pad=False)),
    "avg_divisor": (AVG, lambda x: F.avg_pool2d(x, 2, 1, 1, divisor_override=-3)),
    "adaptive_avg": (ADAPTIVE_AVG, lambda x: F.adaptive_avg_pool2d(x, (4, 13))),
    "adaptive_avg_1x1": (ADAPTIVE_AVG, lambda x: torch.ops.aten._adaptive_avg_pool2d(x, [1, 1])),
    "adaptive_max": (ADAPTIVE_MAX, lambda x: F.adaptive_max_pool2d(x, (4, 13), return_indices=True)),
}


@contextmanager
def launches() -> Iterator[list[str]]:
    """gems enabled for the pooling ops; yields the names of the kernels launched."""
    launched: list[str] = []
    launch = LaunchCache.__call__

    def counted(self: LaunchCache, *args: Any, **kwargs: Any) -> Any:
        launched.append(self.name)
        return launch(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(LaunchCache, "__call__", counted)
        with gems_core.use_gems(include=OPS):
            yield launched


def watch(*overloads: str) -> RouteWatch:
    codes = frozenset().union(*implementations(overloads).values())
    assert codes, overloads
    return RouteWatch(codes)


@contextmanager
def served(*overloads: str) -> Iterator[list[str]]:
    """:func:`launches`, asserting on exit that gems' implementation of one of ``overloads``
    ran and launched a pooling kernel."""
    with launches() as launched, watch(*overloads) as route:
        yield launched
    assert route.hit, f"{overloads} ran on ATen"
    assert set(launched) & set(KERNELS), f"{overloads}: no pooling kernel launched"


def _pair(result: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    return result if isinstance(result, tuple) else (result, None)


def _assert_like(got: torch.Tensor, want: torch.Tensor, atol: float = 1e-12) -> None:
    """Values close to the float64 reference, dtype and strides (the memory format) as ATen's."""
    assert got.stride() == want.stride(), (got.stride(), want.stride())
    torch.testing.assert_close(got.cpu().double(), want.cpu().double(), atol=atol, rtol=atol)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("pool", sorted(POOLS))
def test_forward_matches_aten(pool: str, layout: str) -> None:
    x = LAYOUTS[layout](torch.float64)
    op, call = POOLS[pool]
    want, want_indices = _pair(call(x))
    with served(op):
        got, indices = _pair(call(x))
    assert got.dtype == x.dtype
    _assert_like(got, want)
    if want_indices is not None:
        assert indices is not None and indices.dtype == torch.int64
        assert indices.stride() == want_indices.stride() and torch.equal(indices, want_indices)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "3-d"])
@pytest.mark.parametrize("pool", sorted(POOLS))
def test_backward_matches_aten(pool: str, layout: str) -> None:
    x = LAYOUTS[layout](torch.float64)
    op, call = POOLS[pool]

    def grad(inp: torch.Tensor) -> torch.Tensor:
        leaf = inp.detach().requires_grad_()
        y = _pair(call(leaf))[0]
        return torch.autograd.grad(y, leaf, rand(*y.shape, seed=9))[0]

    want = grad(x)
    with served(f"{op}_backward"):
        got = grad(x)
    _assert_like(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_resnet_stem_in_low_precision_channels_last(dtype: torch.dtype) -> None:
    """ResNet's 3x3 stride-2 max pool on a channels-last batch, forward and backward,
    against float64 on the same (rounded) values; the maximum and its index are exact."""
    x = rand(2, 33, 12, 16, dtype=dtype, seed=6).permute(0, 3, 1, 2)
    leaf = x.detach().double().requires_grad_()
    want, want_indices = F.max_pool2d(leaf, 3, 2, 1, return_indices=True)
    g = rand(*want.shape, dtype=dtype, seed=7)
    (want_grad,) = torch.autograd.grad(want, leaf, g.double())
    mine = x.detach().requires_grad_()
    with served("max_pool2d_with_indices", "max_pool2d_with_indices_backward") as launched:
        got, indices = F.max_pool2d(mine, 3, 2, 1, return_indices=True)
        (got_grad,) = torch.autograd.grad(got, mine, g)
    assert launched == ["pool", "pool_backward"]
    assert got.is_contiguous(memory_format=torch.channels_last) and got.dtype == dtype
    assert torch.equal(got.double(), want) and torch.equal(indices, want_indices)
    # each input takes the gradients of at most four windows, summed in float32 and rounded
    # once to ``dtype``: exact in the half types, within an ulp of float32
    _assert_like(got_grad, want_grad.to(dtype), atol=1e-6)


@pytest.mark.parametrize("pool", ["max", "avg_ceil_no_pad", "adaptive_avg", "adaptive_max"])
def test_the_gradient_of_a_sum_is_read_through_its_zero_strides(pool: str) -> None:
    """``y.sum().backward()`` hands the backward an expanded gradient (every stride 0)."""
    op, call = POOLS[pool]
    x = LAYOUTS["channels_last"](torch.float64)
    leaf = x.detach().requires_grad_()
    _pair(call(leaf))[0].sum().backward()
    want = leaf.grad
    leaf = x.detach().requires_grad_()
    with served(f"{op}_backward"):
        _pair(call(leaf))[0].sum().backward()
    _assert_like(leaf.grad, want)


@pytest.mark.parametrize("pool", ["max", "avg_divisor", "adaptive_avg", "adaptive_avg_1x1", "adaptive_max"])
def test_64_bit_offsets(pool: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Offsets past 2^31 take 64-bit index arithmetic: that path, forced on small tensors."""
    from gems_core.ops import pooling

    monkeypatch.setattr(pooling, "_int64", lambda *tensors: True)
    op, call = POOLS[pool]
    x = LAYOUTS["strided"](torch.float64)

    def both(inp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        leaf = inp.detach().requires_grad_()
        y = _pair(call(leaf))[0]
        return y, torch.autograd.grad(y, leaf, rand(*y.shape, seed=13))[0]

    want = both(x)
    with served(op, f"{op}_backward"):
        got = both(x)
    _assert_like(got[0], want[0])
    _assert_like(got[1], want[1])


def test_nan_wins_and_moves_the_index_as_in_aten() -> None:
    x = rand(1, 2, 6, 6, dtype=torch.float32, seed=8)
    x[0, 0, 1, 1] = x[0, 0, 2, 2] = float("nan")  # two NaNs in one window: the later one's index
    x[0, 1, :3, :3] = float("-inf")  # a window of -inf: the first element's index
    x[0, 1, 4, 4] = float("inf")
    want, want_indices = F.max_pool2d(x, 3, 3, return_indices=True)
    want_adaptive = F.adaptive_max_pool2d(x, 2, return_indices=True)
    with served("max_pool2d_with_indices", "adaptive_max_pool2d"):
        got, indices = F.max_pool2d(x, 3, 3, return_indices=True)
        adaptive = F.adaptive_max_pool2d(x, 2, return_indices=True)
    assert want[0, 0, 0, 0].isnan() and want_indices[0, 0, 0, 0] == 2 * 6 + 2
    assert want[0, 1, 0, 0] == float("-inf") and want_indices[0, 1, 0, 0] == 0
    torch.testing.assert_close(got, want, equal_nan=True, atol=0, rtol=0)
    assert torch.equal(indices, want_indices)
    torch.testing.assert_close(adaptive[0], want_adaptive[0], equal_nan=True, atol=0, rtol=0)
    assert torch.equal(adaptive[1], want_adaptive[1])


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_global_average_reads_whole_planes(layout: str) -> None:
    """A 1x1 adaptive average is a mean over each plane, by its own kernel where H and W
    merge into one axis, by the window kernel where they do not (H and W transposed)."""
    x = LAYOUTS[layout](torch.float64)
    for inp, kernel in ((x, "plane_mean"), (x.transpose(2, 3), "pool")):
        with served("_adaptive_avg_pool2d") as launched:
            got = torch.ops.aten._adaptive_avg_pool2d(inp, [1, 1])
        assert launched == [kernel]
        _assert_like(got, torch.ops.aten._adaptive_avg_pool2d(inp, [1, 1]))


@pytest.mark.parametrize("pool", [
    lambda x: F.max_pool1d(x, 3, 2, 1), lambda x: F.avg_pool1d(x, 4, 3, 2, ceil_mode=True),
    lambda x: F.adaptive_avg_pool1d(x, 7), lambda x: F.adaptive_max_pool1d(x, 7),
], ids=["max", "avg", "adaptive_avg", "adaptive_max"])
def test_1d_pooling_reaches_the_2d_kernels(pool: Callable[[torch.Tensor], torch.Tensor]) -> None:
    x = rand(2, 3, 19, seed=10)
    leaf = x.detach().requires_grad_()  # with a gradient ATen's CPU takes the 2-d route too
    want = pool(leaf)
    (want_grad,) = torch.autograd.grad(want, leaf, torch.ones_like(want))
    leaf = x.detach().requires_grad_()
    with served(*OPS) as launched:
        got = pool(leaf)
        (got_grad,) = torch.autograd.grad(got, leaf, torch.ones_like(got))
    assert launched == ["pool", "pool_backward"]
    _assert_like(got, want)
    _assert_like(got_grad, want_grad)


@pytest.mark.parametrize("pool", sorted(POOLS))
def test_an_empty_batch_is_served_without_a_launch(pool: str) -> None:
    x = rand(0, 3, 9, 10)
    op, call = POOLS[pool]
    want = _pair(call(x))[0]
    with launches() as launched, watch(op) as route:
        got = _pair(call(x))[0]
    assert route.hit and launched == []
    assert got.shape == want.shape and want.shape[:2] == (0, 3)


def test_out_forms_resize_and_write_in_place() -> None:
    x = LAYOUTS["channels_last"](torch.float64)
    out, indices = torch.empty(5, dtype=x.dtype), torch.empty(0, dtype=torch.int64)
    want, want_indices = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    with pytest.warns(UserWarning, match="resized"), served("max_pool2d_with_indices.out"):
        result = torch.ops.aten.max_pool2d_with_indices.out(x, [3, 3], [2, 2], [1, 1], out=out, indices=indices)
    assert result[0] is out and result[1] is indices
    assert torch.equal(out, want) and torch.equal(indices, want_indices)
    grad_input = torch.empty(0, dtype=x.dtype)
    g = rand(*want.shape, seed=11)
    with served("avg_pool2d_backward.grad_input"):
        torch.ops.aten.avg_pool2d_backward.grad_input(g, x, [3, 3], [2, 2], [1, 1], False, True, None,
                                                      grad_input=grad_input)
    _assert_like(grad_input.contiguous(), torch.ops.aten.avg_pool2d_backward(g, x, [3, 3], [2, 2], [1, 1], False,
                                                                             True, None).contiguous())


BAD_CALLS: dict[str, Callable[[], Any]] = {
    "kernel 0": lambda: F.max_pool2d(rand(1, 2, 5, 5), 0),
    "stride 0": lambda: F.max_pool2d(rand(1, 2, 5, 5), 2, 0),
    "dilation 0": lambda: F.max_pool2d(rand(1, 2, 5, 5), 2, 1, 0, 0),
    "padding past half the kernel": lambda: F.max_pool2d(rand(1, 2, 5, 5), 2, 1, 2),
    "negative padding": lambda: F.avg_pool2d(rand(1, 2, 5, 5), 2, 1, -1),
    "three kernel sizes": lambda: torch.ops.aten.max_pool2d_with_indices(rand(1, 2, 5, 5), [2, 2, 2]),
    "output too small": lambda: F.max_pool2d(rand(1, 2, 2, 2), 3, dilation=2),
    "0-d input": lambda: torch.ops.aten.max_pool2d_with_indices(rand(), [1, 1]),
    "2-d input": lambda: F.max_pool2d(rand(5, 5), 2),
    "5-d input": lambda: torch.ops.aten.avg_pool2d(rand(1, 1, 2, 5, 5), [2, 2]),
    "no channels": lambda: F.avg_pool2d(rand(1, 0, 5, 5), 2),
    "divisor 0": lambda: F.avg_pool2d(rand(1, 2, 5, 5), 2, divisor_override=0),
    "adaptive output -1": lambda: torch.ops.aten._adaptive_avg_pool2d(rand(1, 2, 5, 5), [-1, 2]),
    "adaptive max of an empty plane": lambda: F.adaptive_max_pool2d(rand(1, 2, 0, 5), 2),
    "gradient of the wrong shape": lambda: torch.ops.aten.avg_pool2d_backward(
        rand(1, 2, 3, 3), rand(1, 2, 5, 5), [2, 2], [2, 2], [0, 0], False, True, None),
    "indices of the wrong shape": lambda: torch.ops.aten.max_pool2d_with_indices_backward(
        rand(1, 2, 2, 2), rand(1, 2, 5, 5), [2, 2], [2, 2], [0, 0], [1, 1], False,
        torch.zeros(1, 2, 3, 3, dtype=torch.int64)),
    "out of another dtype": lambda: torch.ops.aten.avg_pool2d.out(rand(1, 2, 5, 5), [2, 2],
                                                                  out=torch.empty(0, dtype=torch.float32)),
}


@pytest.mark.parametrize("call", sorted(BAD_CALLS))
def test_bad_arguments_raise_atens_error(call: str) -> None:
    want = answer(BAD_CALLS[call])
    assert isinstance(want, str) and "Error" in want.split(":")[0], want
    with launches() as launched:
        got = answer(BAD_CALLS[call])
    assert got == want and launched == []


def test_integer_inputs_go_to_aten() -> None:
    x = torch.randint(-50, 50, (1, 2, 6, 7), generator=torch.Generator().manual_seed(12)).to(DEVICE)
    want = answer(lambda: F.max_pool2d(x, 2))
    with launches() as launched, watch("max_pool2d_with_indices") as route:
        got = answer(lambda: F.max_pool2d(x, 2))
    assert route.entered and not route.hit  # gems' function saw the call and handed it on
    assert got == want and launched == []


def test_names_of_the_composites_select_the_pooling_ops() -> None:
    selected = dispatch.resolve(["max_pool2d", "adaptive_avg_pool1d"], None)
    assert selected == {"max_pool2d_with_indices", "max_pool2d_with_indices.out",
                        "max_pool2d_with_indices_backward", "max_pool2d_with_indices_backward.grad_input",
                        "_adaptive_avg_pool2d", "_adaptive_avg_pool2d.out", "_adaptive_avg_pool2d_backward",
                        "_adaptive_avg_pool2d_backward.out"}
    assert not {"avg_pool2d", "avg_pool2d_backward"} & dispatch.resolve(None, ["avg_pool1d"])
