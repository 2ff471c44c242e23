"""gather, scatter, scatter_add, scatter_reduce, index_copy, index_add and index_put_
(gems_core/ops/indexing_more.py) against ATen: float64 references on random data, strided
and expanded inputs, empty indices, bad indices, overlapping writes and the calls gems
leaves to ATen. A call counts as served only where gems' function ran and launched its
kernel, so a silent fallback to ATen fails."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
import re
from typing import Any

import pytest
import torch
from gems_conformance.routing import RouteWatch, implementations
from outcomes import answer

import gems_core
from gems_core import runtime
from gems_core.policy import ALL_DTYPES
from gems_core.registry import load_ops

DEVICE = torch.device(gems_core.device)


def rand(*shape: int, dtype: torch.dtype = torch.float64, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=g, dtype=torch.float64) * 6 - 3).to(dtype).to(DEVICE)
    return torch.randint(-50, 50, shape, generator=g).to(dtype).to(DEVICE)


def positions(size: int, shape: tuple[int, ...], dim: int, seed: int = 0, unique: bool = True) -> torch.Tensor:
    """int64 indices in [0, size) of ``shape``, distinct along ``dim`` when ``unique``."""
    g = torch.Generator().manual_seed(seed)
    if not unique:
        return torch.randint(0, size, shape, generator=g).to(DEVICE)
    full = list(shape)
    full[dim] = size
    return torch.rand(full, generator=g).argsort(dim).narrow(dim, 0, shape[dim]).to(DEVICE)


@contextmanager
def on_gems(op: str, monkeypatch: pytest.MonkeyPatch, answered: bool = True) -> Iterator[list[int]]:
    """gems enabled; yields the list of kernel launches; asserts on exit that gems' ``op``
    answered the call (``answered``), or that its function was entered and handed the call
    to ATen."""
    if runtime.current().policy.gate_for(op) == ALL_DTYPES:
        pytest.skip(f"the {gems_core.backend().name} backend leaves {op} to ATen")
    load_ops()  # the op modules define their kernels once the backend is selected
    from gems_core.ops import indexing_more

    launches: list[int] = []

    def counted(name: str) -> Callable[..., Any]:
        kernel = getattr(indexing_more, name)

        def launch(*args: Any, **kwargs: Any) -> Any:
            launches.append(kwargs["MODE"])
            return kernel(*args, **kwargs)

        return launch

    for name in ("_scatter_gather", "_scatter_gather_rows"):  # any element, whole rows
        monkeypatch.setattr(indexing_more, name, counted(name))
    with RouteWatch(implementations((op,))[op]) as watch, gems_core.use_gems():
        yield launches
    assert (watch.hit if answered else watch.entered and not watch.hit), op


def served(op: str, fn: Callable[[], Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    with on_gems(op, monkeypatch) as launches:
        result = fn()
    assert launches, f"{op} went to ATen"
    return result


def reference(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn`` on float64 CPU copies of its tensor arguments."""
    return fn(*(a.detach().cpu().double() if isinstance(a, torch.Tensor) and a.is_floating_point()
                else a.cpu() if isinstance(a, torch.Tensor) else a for a in args))


def check(op: str, fn: Callable[..., Any], args: tuple[Any, ...], monkeypatch: pytest.MonkeyPatch,
          atol: float = 1e-6) -> None:
    want = reference(fn, *args)
    got = served(op, lambda: fn(*args), monkeypatch)
    assert got.dtype == args[0].dtype
    torch.testing.assert_close(got.cpu().to(want.dtype), want, atol=atol, rtol=1e-6)


LAYOUTS = {
    "contiguous": lambda: rand(6, 9, dtype=torch.float32, seed=1),
    "transposed": lambda: rand(9, 6, dtype=torch.float32, seed=2).t(),
    "strided": lambda: rand(6, 18, dtype=torch.float32, seed=3)[:, ::2],
    "expanded": lambda: rand(1, 9, dtype=torch.float32, seed=4).expand(6, 9),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("dim", [0, -1])
def test_gather(layout: str, dim: int, monkeypatch: pytest.MonkeyPatch) -> None:
    x = LAYOUTS[layout]()
    index = positions(x.size(dim), (7, 5), 0, unique=False).t()  # (5, 7), column-major
    index = index if dim else index.t()[:5]
    check("gather", torch.gather, (x, dim, index), monkeypatch)
    out = torch.empty(3, dtype=x.dtype, device=DEVICE)
    want = torch.gather(x, dim, index)
    with pytest.warns(UserWarning, match="resized"):
        got = served("gather.out", lambda: torch.gather(x, dim, index, out=out), monkeypatch)
    assert got is out and torch.equal(out, want)


def test_gather_of_an_expanded_lookup_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """BERT's token-type lookup: an expanded int64 buffer gathered along dim 1."""
    buffer = torch.arange(16, device=DEVICE).view(1, 16) % 2
    index = positions(16, (3, 11), 1, unique=False)
    check("gather", torch.gather, (buffer.expand(3, 16), 1, index), monkeypatch)


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_scatter_forms(dim: int, monkeypatch: pytest.MonkeyPatch) -> None:
    x = rand(5, 6, 7, seed=dim).transpose(0, 2)  # (7, 6, 5), strided
    shape = [4, 5, 3]
    shape[dim] = min(shape[dim], x.size(dim))
    index = positions(x.size(dim), tuple(shape), dim, seed=dim)
    src = rand(8, 8, 8, seed=9)[::2, 1:7, :5]
    check("scatter.src", torch.scatter, (x, dim, index, src), monkeypatch)
    check("scatter.value", lambda a, d, i: torch.scatter(a, d, i, -2.5), (x, dim, index), monkeypatch)
    check("scatter_.src", lambda a, d, i, s: a.clone().scatter_(d, i, s), (x, dim, index, src), monkeypatch)
    repeated = positions(x.size(dim), (4, 5, 3), 0, seed=dim, unique=False)
    check("scatter_add", torch.scatter_add, (x, dim, repeated, src), monkeypatch)
    check("scatter_add_", lambda a, d, i, s: a.clone().scatter_add_(d, i, s), (x, dim, repeated, src), monkeypatch)
    with pytest.warns(UserWarning, match="deprecated"):
        check("scatter.reduce", lambda a, d, i, s: torch.scatter(a, d, i, s, reduce="add"), (x, dim, repeated, src),
              monkeypatch)
    out = torch.empty(0, dtype=x.dtype, device=DEVICE)
    got = served("scatter_add.out", lambda: torch.scatter_add(x, dim, repeated, src, out=out), monkeypatch)
    torch.testing.assert_close(got, torch.scatter_add(x, dim, repeated, src))


@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce: str, include_self: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    x = rand(8, 5, seed=3).t()
    index = positions(8, (4, 6), 0, seed=4, unique=False)
    src = rand(4, 7, seed=5)
    check("scatter_reduce.two", lambda a, i, s: torch.scatter_reduce(a, 1, i, s, reduce, include_self=include_self),
          (x, index, src), monkeypatch)
    ints = rand(5, 8, dtype=torch.int64, seed=6)
    if reduce != "mean":  # integer means floor-divide: left to ATen
        check("scatter_reduce_.two", lambda a, i, s: a.clone().scatter_reduce_(1, i, s, reduce, include_self=include_self),
              (ints, index, src.to(torch.int64)), monkeypatch)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int8, torch.bool])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_copy(dtype: torch.dtype, dim: int, monkeypatch: pytest.MonkeyPatch) -> None:
    x = rand(5, 6, 7, dtype=torch.float64, seed=dim).transpose(0, 1)  # (6, 5, 7)
    source_shape = list(x.shape)
    source_shape[dim] = 3
    source = rand(*source_shape[::-1], seed=11).permute(2, 1, 0)
    x, source = (x > 0, source > 0) if dtype == torch.bool else (x.to(dtype), source.to(dtype))
    index = positions(x.size(dim), (3,), 0, seed=dim)
    check("index_copy", torch.index_copy, (x, dim, index, source), monkeypatch)
    check("index_copy_", lambda a, d, i, s: a.clone().index_copy_(d, i, s), (x, dim, index, source), monkeypatch)
    out = torch.empty(x.shape, dtype=dtype, device=DEVICE)
    got = served("index_copy.out", lambda: torch.index_copy(x, dim, index, source, out=out), monkeypatch)
    assert got is out and torch.equal(out, torch.index_copy(x, dim, index, source))


def test_index_copy_into_a_static_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """A KV-cache write: (batch, heads, max_len, head_dim) along dim 2 at the new positions."""
    cache = rand(2, 3, 16, 8, seed=1).to(torch.bfloat16)
    states = rand(2, 3, 8, 4, seed=2).to(torch.bfloat16).transpose(2, 3)  # (2, 3, 4, 8), strided
    where = torch.tensor([5, 6, 7, 8], device=DEVICE)
    want = cache.clone().index_copy_(2, where, states)
    got = cache.clone()
    assert served("index_copy_", lambda: got.index_copy_(2, where, states), monkeypatch) is got
    assert torch.equal(got, want)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.int32, torch.int64])
def test_index_add(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    x = rand(7, 5, seed=1).t().to(dtype)  # (5, 7)
    index = positions(7, (9,), 0, seed=2, unique=False).to(torch.int32)
    source = rand(5, 9, seed=3).to(dtype)
    atol = 1e-2 if dtype == torch.float16 else 1e-6
    check("index_add", lambda a, i, s: torch.index_add(a, 1, i, s), (x, index, source), monkeypatch, atol)
    check("index_add_", lambda a, i, s: a.clone().index_add_(1, i, s, alpha=2), (x, index, source), monkeypatch, atol)
    if not dtype.is_floating_point:  # alpha converted to the dtype first, as ATen does
        check("index_add_", lambda a, i, s: a.clone().index_add_(1, i, s, alpha=2.5), (x, index, source), monkeypatch)
    out = torch.empty(0, dtype=dtype, device=DEVICE)
    got = served("index_add.out", lambda: torch.index_add(x, 1, index, source, alpha=-1, out=out), monkeypatch)
    torch.testing.assert_close(got, torch.index_add(x, 1, index, source, alpha=-1), atol=atol, rtol=1e-3)


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put(accumulate: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    x = rand(4, 9, seed=1)[:, ::2].t()  # (5, 4), strided
    index = positions(5, (4,), 0, seed=2, unique=not accumulate)
    index = (index - 5 * (index % 2)).view(2, 2)  # odd rows counted from the end
    values = rand(4, 2, 2, seed=3).permute(1, 2, 0)  # (2, 2, 4), strided
    row = rand(4, seed=4)
    for v in (values, row):
        check("_index_put_impl_", lambda a, i, w: a.clone().index_put_((i,), w, accumulate=accumulate),
              (x, index, v), monkeypatch)

    def setitem(a: torch.Tensor, i: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        a = a.clone()
        a[i] = w
        return a

    if not accumulate:
        check("_index_put_impl_", setitem, (x, index, values), monkeypatch)


def test_index_put_on_a_later_dim(monkeypatch: pytest.MonkeyPatch) -> None:
    """A static KV-cache write by assignment: ``cache[:, :, positions] = states``."""
    load_ops()
    from gems_core.ops.indexing import host_checks_indices

    cache = rand(2, 3, 9, 4, seed=5)
    states = rand(2, 3, 4, 3, seed=6).transpose(2, 3)  # (2, 3, 3, 4), strided
    positions_ = torch.tensor([2, -1, 4], device=DEVICE)

    def write(c: torch.Tensor, p: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        c = c.clone()
        c[:, :, p] = s
        return c

    check("_index_put_impl_", write, (cache, positions_, states), monkeypatch)
    bad = torch.tensor([1, 9], device=DEVICE)
    message = "^index 9 is out of bounds for dimension 0 with size 9$"  # ATen's, on the CPU
    if host_checks_indices(DEVICE):
        with pytest.raises(IndexError, match=message):
            write(cache, bad, states[:, :, :2])
        with on_gems("_index_put_impl_", monkeypatch) as launches, pytest.raises(IndexError, match=message):
            write(cache, bad, states[:, :, :2])
        assert not launches


ROW_CALLS = {
    "index_add_": lambda x, i, s: x.clone().index_add_(0, i, s, alpha=0.5),
    "index_copy": lambda x, i, s: torch.index_copy(x, 0, i.unique(), s[: i.unique().numel()]),
    "_index_put_impl_": lambda x, i, s: x.clone().index_put_((i - 7,), s, accumulate=True),  # -7: from the end
    "index_put_ broadcast row": lambda x, i, s: x.clone().index_put_((i,), s[:1]),
    "index_put_ 0-d value": lambda x, i, s: x.clone().index_put_((i,), s[0, 0]),
    "gather": lambda x, i, s: torch.gather(x, 0, i.view(-1, 1).expand(-1, x.size(1))),
}


@pytest.mark.parametrize("call", sorted(ROW_CALLS))
@pytest.mark.parametrize("layout", ["contiguous", "sliced rows"])
def test_whole_rows_take_the_row_kernel(call: str, layout: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Updates of whole contiguous rows (an embedding's gradient, ``x[idx] += v``) run the
    tiled row kernel: one index read per row, runs of the row moved together; repeated
    indices add up, rows longer than a tile are split, a sliced target keeps its strides."""
    load_ops()
    from gems_core.ops import indexing_more

    width = indexing_more._MIN_RUN + 5 if layout == "contiguous" else indexing_more._MAX_RUN + 3
    x = rand(7, width, seed=1) if layout == "contiguous" else rand(14, width + 4, seed=1)[::2, 2:-2]
    index = positions(7, (11,), 0, seed=2, unique=False)
    source = rand(11, width, seed=3)
    op = call.split()[0]
    rows = indexing_more._scatter_gather_rows
    entered: list[int] = []

    def row_launch(*args: Any, **kwargs: Any) -> Any:
        entered.append(kwargs["MODE"])
        return rows(*args, **kwargs)

    monkeypatch.setattr(indexing_more, "_scatter_gather_rows", row_launch)
    want = reference(ROW_CALLS[call], x, index, source)
    with on_gems(op, monkeypatch) as launches:
        got = ROW_CALLS[call](x, index, source)
    assert entered and len(launches) == len(entered), "the row kernel did not serve every launch"
    torch.testing.assert_close(got.cpu(), want, atol=1e-12, rtol=1e-12)


EMPTY = {
    "gather": lambda x: torch.gather(x, 1, torch.empty(4, 0, dtype=torch.int64, device=DEVICE)),
    "scatter_add": lambda x: torch.scatter_add(x, 0, torch.empty(0, 5, dtype=torch.int64, device=DEVICE), x),
    "index_copy": lambda x: torch.index_copy(x, 1, torch.empty(0, dtype=torch.int64, device=DEVICE), x[:, :0]),
    "index_add": lambda x: torch.index_add(x, 0, torch.empty(0, dtype=torch.int64, device=DEVICE), x[:0]),
    "_index_put_impl_": lambda x: x.clone().index_put_((torch.empty(0, dtype=torch.int64, device=DEVICE),), x[0]),
}


@pytest.mark.parametrize("op", sorted(EMPTY))
def test_empty_index(op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    x = rand(4, 5, seed=7)
    want = EMPTY[op](x)
    with on_gems(op, monkeypatch) as launches:
        got = EMPTY[op](x)
    assert not launches  # nothing to do
    assert got.shape == want.shape and torch.equal(got, want)


X = rand(4, 5, seed=8)
BAD = {
    "gather": lambda x: torch.gather(x, 1, torch.tensor([[1, 7]], device=DEVICE)),
    "scatter_.src": lambda x: x.scatter_(0, torch.tensor([[1, -1]], device=DEVICE), X),
    "scatter_add_": lambda x: x.scatter_add_(1, torch.tensor([[5]], device=DEVICE), X),
    "scatter_reduce_.two": lambda x: x.scatter_reduce_(0, torch.tensor([[4]], device=DEVICE), X, "amax"),
    "index_copy_": lambda x: x.index_copy_(0, torch.tensor([0, 9], device=DEVICE), X[:2]),
    "index_add_": lambda x: x.index_add_(1, torch.tensor([-1], device=DEVICE), X[:, :1]),
    "_index_put_impl_": lambda x: x.index_put_((torch.tensor([2, -5], device=DEVICE),), X[0], accumulate=True),
}


@pytest.mark.parametrize("op", sorted(BAD))
def test_bad_indices_raise_atens_error_before_writing(op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    load_ops()
    from gems_core.ops.indexing import host_checks_indices

    if not host_checks_indices(DEVICE):
        pytest.skip("indices are checked on the device here")
    x = rand(4, 5, seed=9)
    with pytest.raises((IndexError, RuntimeError)) as aten:
        BAD[op](x.clone())
    got = x.clone()
    with on_gems(op, monkeypatch) as launches, pytest.raises(type(aten.value), match=f"^{re.escape(str(aten.value))}$"):
        BAD[op](got)
    assert not launches and torch.equal(got, x)


OVERLAP = {
    "scatter_.src": lambda: X[:1].expand(4, 5).scatter_(0, torch.tensor([[1]], device=DEVICE), 1.0),
    "index_copy_": lambda: X[:1].expand(4, 5).index_copy_(0, torch.tensor([1], device=DEVICE), X[:1]),
    "gather.out": lambda: torch.gather(X, 0, torch.tensor([[1, 2]], device=DEVICE), out=X[:1, :2]),
    "index_add_": lambda: (lambda y: y.index_add_(0, torch.tensor([0], device=DEVICE), y[1:2]))(X.clone()),
}


@pytest.mark.parametrize("op", sorted(OVERLAP))
def test_overlapping_writes_raise_atens_error(op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    want = answer(OVERLAP[op])
    assert str(want).startswith("RuntimeError: unsupported operation")
    with on_gems(op, monkeypatch) as launches:
        got = answer(OVERLAP[op])
    assert got == want and not launches


def test_index_put_into_an_expanded_tensor_warns_and_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    index = torch.tensor([1, 3], device=DEVICE)
    with pytest.warns(UserWarning, match="expanded tensors"):
        want = X.clone()[:1].expand(4, 5).index_put_((index,), X[0] * 2)
    got = X.clone()[:1].expand(4, 5)
    with pytest.warns(UserWarning, match="expanded tensors"):
        served("_index_put_impl_", lambda: got.index_put_((index,), X[0] * 2), monkeypatch)
    assert torch.equal(got, want)


UNSERVED = {
    "index_copy_": lambda: X.clone().index_copy_(0, torch.tensor([1], dtype=torch.int32, device=DEVICE), X[:1]),
    "gather": lambda: torch.gather(X, 0, torch.tensor([[1, 2, 3]], device=DEVICE).expand(2, 3).float()),
    "scatter_add": lambda: torch.scatter_add(X, 0, torch.tensor([[1, 2]], device=DEVICE), X[:, :1]),
    "scatter_reduce.two": lambda: torch.scatter_reduce(X, 0, torch.tensor([[1]], device=DEVICE), X, "prod"),
    "index_add": lambda: torch.index_add(X.to(torch.int8), 0, torch.tensor([1], device=DEVICE), X[:1].to(torch.int8)),
}


@pytest.mark.parametrize("op", sorted(UNSERVED))
def test_calls_gems_does_not_serve_reach_aten(op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bad argument, an index dtype or reduction gems does not take: ATen's answer."""
    want = answer(UNSERVED[op])
    with on_gems(op, monkeypatch, answered=False) as launches:
        got = answer(UNSERVED[op])
    assert got == want and not launches


def test_atomic_forms_go_to_aten_under_deterministic_algorithms(monkeypatch: pytest.MonkeyPatch) -> None:
    index = torch.tensor([[0, 0, 1]], device=DEVICE)
    src = rand(1, 3, seed=3)
    want = torch.scatter_add(X, 0, index, src)
    torch.use_deterministic_algorithms(True)
    try:
        with on_gems("scatter_add", monkeypatch, answered=False) as launches:
            got = torch.scatter_add(X, 0, index, src)
    finally:
        torch.use_deterministic_algorithms(False)
    assert not launches and torch.equal(got, want)
