"""copy_, cat and index.Tensor on gems (gems_core/ops/copying.py, indexing.py): the same
values, dtypes, shapes and layouts as ATen, served by gems' kernels, and ATen's own errors
or results for every call gems hands back.

Copies and gathers are exact, so results are compared with torch.equal against ATen's on
float64 (or integer) random data. Shapes are small and odd (5, 7, 9) because the CPU
interpreter runs every kernel; layouts cover contiguous, transposed, sliced with a step,
broadcast (stride 0) and empty operands."""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch

import gems_core
from gems_core import plan_cache, runtime
from gems_core.launch_cache import BoundLaunch, LaunchCache
from gems_core.plan_cache import Launch
from gems_core.registry import load_ops

OPS = ("copy_", "cat", "cat.out", "index.Tensor")
DEVICE = torch.device(gems_core.device)
ALL_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
              torch.int16, torch.int8, torch.uint8, torch.bool)


def rand(*shape: int, dtype: torch.dtype = torch.float64, seed: int = 0) -> torch.Tensor:
    """Random data, never zeros: floats in [-3, 3), integers in [-100, 100) ([0, 200) uint8)."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        t = torch.rand(shape, generator=g) > 0.5
    elif dtype.is_floating_point:
        t = torch.rand(shape, generator=g, dtype=torch.float64) * 6 - 3
    else:
        low = 0 if dtype == torch.uint8 else -100
        t = torch.randint(low, low + 200, shape, generator=g)
    return t.to(dtype).to(DEVICE)


def served(op: str, *dtypes: torch.dtype) -> bool:
    """Whether the backend lets gems serve ``op`` on tensors of ``dtypes`` (its gates)."""
    gate = runtime.current().policy.gate_for(op)
    names = {str(dtype).removeprefix("torch.") for dtype in dtypes}
    return gate is None or (bool(gate) and not names & gate)


def outcome(fn: Callable[[], Any]) -> str:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the error itself is what is compared
        return f"{type(exc).__name__}: {exc}"
    return "ok"


@pytest.fixture(autouse=True)
def _fresh_plans() -> None:
    """Each test starts with no plans and no native recipes: its first call of a signature
    takes the Python path (where its launches are counted), whatever earlier tests ran."""
    plan_cache.clear_all()


#: the kernels a served call launches, by launch cache name
KERNELS = {"pointwise": "copy", "index_select": "gather", "fill": "fill"}


@contextmanager
def gems_launches(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """gems enabled for the ops under test; yields the kernels launched inside the block
    (each launch counted once, whichever of the launch paths it takes)."""
    load_ops()
    launched: list[str] = []
    depth = [0]

    def counted(original: Callable[..., Any], cache_of: Callable[[Any], LaunchCache]) -> Callable[..., Any]:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            if depth[0] == 0:
                launched.append(KERNELS.get(cache_of(self).name, cache_of(self).name))
            depth[0] += 1
            try:
                return original(self, *args, **kwargs)
            finally:
                depth[0] -= 1

        return call

    direct = Launch._direct

    def counted_direct(self: Launch, *args: Any) -> bool:
        went = direct(self, *args)
        if went and depth[0] == 0:
            launched.append(KERNELS.get(self.bound.cache.name, self.bound.cache.name))
        return went

    monkeypatch.setattr(LaunchCache, "__call__", counted(LaunchCache.__call__, lambda c: c))
    monkeypatch.setattr(BoundLaunch, "__call__", counted(BoundLaunch.__call__, lambda b: b.cache))
    monkeypatch.setattr(Launch, "_direct", counted_direct)
    with gems_core.use_gems(include=OPS):
        yield launched


def assert_same(got: torch.Tensor, want: torch.Tensor) -> None:
    """Equal values, dtype, shape, and strides along every dim of more than one element."""
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got, want)
    assert [s for s, n in zip(got.stride(), got.shape) if n > 1] == \
        [s for s, n in zip(want.stride(), want.shape) if n > 1]


# -- copy_ -------------------------------------------------------------------------------------

DESTINATIONS: dict[str, Callable[[], torch.Tensor]] = {
    "contiguous": lambda: torch.empty(5, 7, dtype=torch.float64, device=DEVICE),
    "transposed": lambda: torch.empty(7, 5, dtype=torch.float64, device=DEVICE).t(),
    "sliced": lambda: torch.empty(6, 15, dtype=torch.float64, device=DEVICE)[1:, 1::2],
}
SOURCES: dict[str, Callable[[], torch.Tensor]] = {
    "contiguous": lambda: rand(5, 7, seed=1),
    "transposed": lambda: rand(7, 5, seed=2).t(),
    "sliced": lambda: rand(5, 21, seed=3)[:, ::3],
    "row": lambda: rand(7, seed=4),
    "column": lambda: rand(5, 1, seed=5),
    "0-d": lambda: rand(seed=6),
}


@pytest.mark.parametrize("source", sorted(SOURCES))
@pytest.mark.parametrize("destination", sorted(DESTINATIONS))
def test_copy_into_any_layout_matches_aten(monkeypatch, destination: str, source: str) -> None:
    src = SOURCES[source]()
    want = DESTINATIONS[destination]().copy_(src)
    with gems_launches(monkeypatch) as launched:
        got = DESTINATIONS[destination]()
        result = got.copy_(src, non_blocking=True)
    assert launched == ["copy"] and result is got
    assert torch.equal(got, want)


@pytest.mark.parametrize("src_dtype", ALL_DTYPES, ids=str)
def test_copy_converts_every_dtype_as_aten(monkeypatch, src_dtype: torch.dtype) -> None:
    src = rand(4, 9, dtype=src_dtype, seed=7)
    if src_dtype.is_floating_point:
        src = (src * 30).to(src_dtype)  # values up to +-90: in range of every integer dtype
    wants = {dtype: torch.empty(4, 9, dtype=dtype, device=DEVICE).copy_(src) for dtype in ALL_DTYPES}
    with gems_launches(monkeypatch) as launched:
        gots = {dtype: torch.empty(4, 9, dtype=dtype, device=DEVICE).copy_(src) for dtype in ALL_DTYPES}
    assert len(launched) == sum(served("copy_", src_dtype, dtype) for dtype in ALL_DTYPES)
    for dtype in ALL_DTYPES:
        assert torch.equal(gots[dtype], wants[dtype]), f"{src_dtype} -> {dtype}"


def test_copy_truncates_floats_and_wraps_uint8_as_aten(monkeypatch) -> None:
    src = torch.tensor([-1.5, -3.7, 2.9, -0.2, 0.7, 100.9, -100.9, 120.5], dtype=torch.float64, device=DEVICE)
    with gems_launches(monkeypatch):
        got = {dtype: src.to(dtype) for dtype in (torch.int8, torch.int32, torch.int64, torch.uint8, torch.bool)}
    for dtype, value in got.items():
        assert torch.equal(value, src.to(dtype)), dtype


def test_copy_rounds_to_half_precision_through_float32_as_aten(monkeypatch) -> None:
    """float64 and int64 reach float16/bfloat16 through float32 in ATen: values whose float32
    rounding lands on a half-precision tie round differently from a single rounding."""
    doubles = torch.tensor([1 + 2**-11 + 2**-40, -(1 + 2**-8 + 2**-40), 3.3, -0.1], dtype=torch.float64)
    longs = torch.tensor([2**24 + 2**16 + 1, -(2**28 + 2**20 + 3), 123, -7], dtype=torch.int64)
    with gems_launches(monkeypatch):
        got = [src.to(DEVICE).to(dtype) for src in (doubles, longs) for dtype in (torch.float16, torch.bfloat16)]
    want = [src.to(DEVICE).to(dtype) for src in (doubles, longs) for dtype in (torch.float16, torch.bfloat16)]
    for g, w in zip(got, want):
        assert torch.equal(g, w)


def test_copy_keeps_special_values(monkeypatch) -> None:
    src = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 1e-310, 7.0], dtype=torch.float64,
                       device=DEVICE)
    dtypes = (torch.float32, torch.float16, torch.bfloat16, torch.bool)
    with gems_launches(monkeypatch) as launched:
        got = [src.to(dtype) for dtype in dtypes]
    assert len(launched) == sum(served("copy_", src.dtype, dtype) for dtype in dtypes)
    for g in got:
        w = src.to(g.dtype)
        assert torch.equal(g.isnan(), w.isnan()) and torch.equal(g[~w.isnan()], w[~w.isnan()])
    assert torch.equal(got[0].signbit(), src.float().signbit())


@pytest.mark.skipif(not runtime.current().interpreter, reason="a Triton interpreter quirk")
def test_interpreted_copies_round_to_bf16_as_aten() -> None:
    """Triton's interpreter truncates float32 to bf16; gems' interpreted launches round to
    nearest even as ATen does (ties included), so bf16 copies need no gate on the cpu backend."""
    load_ops()
    from gems_core.ops.copying import copy_into

    ties = [1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8 + 2**-12)]  # ties to even, and a round up
    src = torch.cat([torch.tensor(ties), rand(500, dtype=torch.float32, seed=3) * 1.001])
    got = torch.empty(src.shape, dtype=torch.bfloat16)
    copy_into(got, src)
    assert torch.equal(got, src.bfloat16())


def test_kv_cache_write_through_a_slice(monkeypatch) -> None:
    """``cache[:, :, pos:pos + L] = k``: the decoder's static KV cache update."""
    cache = rand(2, 3, 16, 8, seed=8)
    k = rand(2, 5, 3, 8, seed=9).transpose(1, 2)  # (B, H, L, D) from a (B, L, H, D) projection
    want = cache.clone()
    want[:, :, 4:9] = k
    with gems_launches(monkeypatch) as launched:
        cache[:, :, 4:9] = k
    assert launched == ["copy"]
    assert torch.equal(cache, want)


@pytest.mark.parametrize("call", [
    pytest.param(lambda x: x.t().contiguous(), id="contiguous"),
    pytest.param(lambda x: x[:, ::2].clone(), id="clone"),
    pytest.param(lambda x: x.t().to(torch.float16), id="to-dtype"),
    pytest.param(lambda x: x.t().clone(memory_format=torch.contiguous_format), id="clone-contiguous"),
])
def test_clone_contiguous_and_to_are_served(monkeypatch, call: Callable[[torch.Tensor], torch.Tensor]) -> None:
    x = rand(5, 7, seed=10)
    with gems_launches(monkeypatch) as launched:
        got = call(x)
    assert launched == ["copy"]
    assert_same(got, call(x))


def test_copy_of_empty_and_0d_tensors(monkeypatch) -> None:
    row, value, number = rand(3, seed=11), rand(seed=12), rand(dtype=torch.int64, seed=13)
    with gems_launches(monkeypatch) as launched:
        empty = torch.empty(0, 3, dtype=torch.float64, device=DEVICE).copy_(row)
        scalar = torch.empty((), dtype=torch.float32, device=DEVICE).copy_(value)
        filled = torch.empty(2, 3, dtype=torch.int32, device=DEVICE).copy_(number)
    assert launched == ["copy", "copy"]  # nothing to write into the empty one
    assert empty.shape == (0, 3)
    assert torch.equal(scalar, rand(seed=12).float())
    assert torch.equal(filled, rand(dtype=torch.int64, seed=13).int().expand(2, 3))


@pytest.mark.skipif(DEVICE.type == "cpu", reason="a 0-d CPU source is another device's only off the CPU")
def test_copy_of_a_cpu_scalar_into_device_memory(monkeypatch) -> None:
    load_ops()
    from gems_core.ops import copying

    fills: list[int] = []
    fill = copying.fill_tensor
    monkeypatch.setattr(copying, "fill_tensor", lambda *a: (fills.append(1), fill(*a))[1])
    src = torch.tensor(-2.75, dtype=torch.float64)
    with gems_core.use_gems(include=OPS):
        got = torch.empty(3, 4, dtype=torch.int32, device=DEVICE).t().copy_(src)
    assert fills and torch.equal(got.cpu(), torch.full((4, 3), -2, dtype=torch.int32))


def _expanded_destination() -> None:
    torch.empty(1, 4, dtype=torch.float64, device=DEVICE).expand(3, 4).copy_(rand(3, 4))


def _partial_overlap() -> None:
    x = rand(4, 5)
    x[1:].copy_(x[:-1])


def _transposed_onto_itself() -> None:
    x = rand(4, 4)
    x.copy_(x.t())


def _row_broadcast_onto_its_matrix() -> None:
    x = rand(4, 5)
    x.copy_(x[0])


def _bad_broadcast() -> None:
    torch.empty(3, dtype=torch.float64, device=DEVICE).copy_(rand(2, 3))


@pytest.mark.parametrize("call", [
    _expanded_destination, _partial_overlap, _transposed_onto_itself, _row_broadcast_onto_its_matrix,
    _bad_broadcast,
])
def test_bad_copies_raise_atens_error(monkeypatch, call: Callable[[], None]) -> None:
    expected = outcome(call)
    assert expected != "ok"
    with gems_launches(monkeypatch) as launched:
        assert outcome(call) == expected
    assert not launched


def test_copies_gems_does_not_serve_reach_aten(monkeypatch) -> None:
    x = rand(4, 6)
    want_interleaved = x.clone()
    want_interleaved[:, 0] = x[:, 1]
    z = torch.randn(3, dtype=torch.complex64, device=DEVICE)
    with gems_launches(monkeypatch) as launched:
        same = x.copy_(x)  # the same view: nothing to do
        x[:, 0].copy_(x[:, 1])  # one storage, elements apart: ATen's own copy
        complex_copy = torch.empty(3, dtype=torch.complex64, device=DEVICE).copy_(z.conj())
        negated = torch.empty(6, dtype=torch.float64, device=DEVICE).copy_(torch._neg_view(x[0]))
    assert not launched
    assert same is x and torch.equal(x, want_interleaved)
    assert torch.equal(complex_copy, z.conj_physical())
    assert torch.equal(negated, -x[0])


# -- cat ---------------------------------------------------------------------------------------

def _cat_inputs(layout: str) -> list[torch.Tensor]:
    if layout == "contiguous":
        return [rand(3, 5, seed=20), rand(3, 5, seed=21), rand(3, 5, seed=22)]
    if layout == "transposed":
        return [rand(5, 3, seed=23).t(), rand(5, 3, seed=24).t(), rand(3, 5, seed=25)]
    return [rand(3, 10, seed=26)[:, ::2], rand(6, 5, seed=27)[::2], rand(3, 5, seed=28)]


@pytest.mark.parametrize("dim", [0, 1, -1, -2])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_cat_matches_aten(monkeypatch, layout: str, dim: int) -> None:
    inputs = _cat_inputs(layout)
    inputs[1] = inputs[1].narrow(dim, 0, 2)  # a different size along the joined dim
    want = torch.cat(inputs, dim)
    with gems_launches(monkeypatch) as launched:
        got = torch.cat(inputs, dim)
    assert launched == ["copy"] * 3
    assert_same(got, want)


def test_cat_of_rotary_halves(monkeypatch) -> None:
    """rotate_half: ``torch.cat((-x2, x1), dim=-1)`` of the two halves of the head dim."""
    x = rand(2, 3, 5, 8, seed=29)
    x1, x2 = x[..., :4], x[..., 4:]
    with gems_launches(monkeypatch) as launched:
        got = torch.cat((-x2, x1), dim=-1)
    assert launched == ["copy", "copy"]
    assert_same(got, torch.cat((-x2, x1), dim=-1))


def test_cat_promotes_types_as_aten(monkeypatch) -> None:
    inputs = [rand(2, 3, dtype=torch.int32, seed=30), rand(2, 3, dtype=torch.float16, seed=31),
              rand(2, 3, dtype=torch.bool, seed=32)]
    bytes_and_bools = [rand(4, dtype=torch.uint8, seed=33), rand(4, dtype=torch.bool, seed=34)]
    with gems_launches(monkeypatch) as launched:
        mixed = torch.cat(inputs)
        small = torch.cat(bytes_and_bools)
    assert len(launched) == 5
    assert_same(mixed, torch.cat(inputs))
    assert_same(small, torch.cat(bytes_and_bools))


def test_cat_skips_1d_empty_tensors_as_aten(monkeypatch) -> None:
    """A (0,) tensor takes no part in the shape checks but still in type promotion."""
    skipped = torch.empty(0, dtype=torch.float64, device=DEVICE)
    x = rand(2, 3, dtype=torch.float32, seed=35)
    cases = [
        ([skipped, x, skipped], 1),
        ([x, torch.empty(0, 3, dtype=torch.float32, device=DEVICE), x], 0),
        ([skipped, torch.empty(0, dtype=torch.int32, device=DEVICE)], 1),
    ]
    with gems_launches(monkeypatch):
        gots = [torch.cat(tensors, dim) for tensors, dim in cases]
    for got, (tensors, dim) in zip(gots, cases):
        assert_same(got, torch.cat(tensors, dim))


@pytest.mark.parametrize("second", ["channels_last", "contiguous"])
def test_cat_keeps_channels_last_only_where_every_input_has_it(monkeypatch, second: str) -> None:
    a = rand(2, 3, 4, 5, seed=36).to(memory_format=torch.channels_last)
    b = rand(2, 2, 4, 5, seed=37)
    if second == "channels_last":
        b = b.to(memory_format=torch.channels_last)
    with gems_launches(monkeypatch) as launched:
        got = torch.cat([a, b], dim=1)
    assert launched
    assert_same(got, torch.cat([a, b], dim=1))


def test_cat_layout_rule_follows_aten_on_random_layouts() -> None:
    """The memory-format rule (ATen's reading of strides as channels-last) against ATen's own
    cat, no kernel run: permuted 3-d to 5-d inputs with size-1 dims, alone and mixed."""
    load_ops()
    from gems_core.ops.copying import _cat_memory_format

    rng = random.Random(1)
    for _ in range(400):
        rank = rng.choice([3, 4, 4, 5])
        shape = [rng.choice([1, 1, 2, 3]) for _ in range(rank)]
        inputs = [torch.empty(shape).permute(rng.sample(range(rank), rank)) for _ in range(rng.choice([1, 2]))]
        inputs = [t.reshape(inputs[0].shape) if t.shape != inputs[0].shape else t for t in inputs]
        want = torch.cat(inputs, dim=rng.randrange(rank))
        got = torch.empty(want.shape, memory_format=_cat_memory_format(inputs))
        assert got.stride() == want.stride(), [(t.shape, t.stride()) for t in inputs]


def test_cat_into_out(monkeypatch) -> None:
    inputs = [rand(3, 4, seed=38), rand(2, 4, seed=39).to(torch.float32)]
    out = torch.empty(4, 5, dtype=torch.float64, device=DEVICE).t()
    with gems_launches(monkeypatch) as launched:
        result = torch.cat(inputs, out=out)
    assert launched == ["copy", "copy"] and result is out
    assert torch.equal(out, torch.cat(inputs)) and out.stride() == (1, 5)


SCALAR = rand(seed=3)  # made here: moving a 0-d tensor to a device runs gems' fill
CAT_ERRORS = {
    "empty list": lambda: torch.cat([]),
    "sizes": lambda: torch.cat([rand(3, 4), rand(3, 5)]),
    "ranks": lambda: torch.cat([rand(3, 4), rand(3, 4, 1)]),
    "dim": lambda: torch.cat([rand(3, 4), rand(3, 4)], dim=2),
    "0-d": lambda: torch.cat([SCALAR, SCALAR]),
    "out dtype": lambda: torch.cat([rand(2)], out=torch.empty(2, dtype=torch.int64, device=DEVICE)),
    "out overlaps": lambda: (lambda x: torch.cat([x[:2], x[2:]], out=x))(rand(4, 3)),
}


@pytest.mark.parametrize("name", sorted(CAT_ERRORS))
def test_bad_cats_raise_atens_error(monkeypatch, name: str) -> None:
    expected = outcome(CAT_ERRORS[name])
    assert expected != "ok"
    with gems_launches(monkeypatch) as launched:
        assert outcome(CAT_ERRORS[name]) == expected
    assert not launched


@pytest.mark.parametrize("size", [0, 4])
def test_cat_into_out_of_another_shape_resizes_it_as_aten(monkeypatch, size: int) -> None:
    """Resized (with ATen's warning where it held elements) in cat's own layout."""
    inputs = [rand(2, 3, 4, 5, seed=40).to(memory_format=torch.channels_last),
              rand(2, 1, 4, 5, seed=41).to(memory_format=torch.channels_last)]
    want = torch.empty(size, dtype=torch.float64, device=DEVICE)
    with pytest.warns(UserWarning, match="was resized") if size else warnings.catch_warnings():
        torch.cat(inputs, dim=1, out=want)
    out = torch.empty(size, dtype=torch.float64, device=DEVICE)
    with gems_launches(monkeypatch) as launched, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cat(inputs, dim=1, out=out)
    assert launched == ["copy", "copy"]
    assert [str(w.message).startswith("An output with one or more elements was resized") for w in caught] == \
        [True] * bool(size)
    assert_same(out, want)


# -- index.Tensor ------------------------------------------------------------------------------

TABLES: dict[str, Callable[[], torch.Tensor]] = {
    "contiguous": lambda: rand(9, 7, seed=50),
    "transposed": lambda: rand(7, 9, seed=51).t(),
    "sliced": lambda: rand(18, 14, seed=52)[::2, 3:10],
}


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32], ids=str)
@pytest.mark.parametrize("table", sorted(TABLES))
def test_position_ids_gather_rows_of_a_table(monkeypatch, table: str, index_dtype: torch.dtype) -> None:
    """``cos_table[position_ids]``: a (B, L) index into dim 0 of a (max_pos, D) table."""
    x = TABLES[table]()
    position_ids = torch.tensor([[0, 3, 8, 3], [5, 1, 2, 7]], dtype=index_dtype, device=DEVICE)
    with gems_launches(monkeypatch) as launched:
        got = x[position_ids]
    assert launched == ["gather"]
    assert_same(got, x[position_ids])


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_index_on_any_dim_with_negative_indices(monkeypatch, dim: int) -> None:
    x = rand(4, 5, 6, seed=53)
    index = torch.tensor([[-1, 2, 0], [1, -x.size(dim), 3 % x.size(dim)]], device=DEVICE)
    indices = [None] * dim + [index]
    with gems_launches(monkeypatch) as launched:
        got = torch.ops.aten.index.Tensor(x, indices)
    assert launched == ["gather"]
    assert_same(got, torch.ops.aten.index.Tensor(x, indices))


@pytest.mark.parametrize("index", [
    pytest.param(lambda: torch.tensor(2), id="0-d"),
    pytest.param(lambda: torch.tensor([], dtype=torch.int64), id="empty"),
    pytest.param(lambda: torch.tensor([[1, 3, 0, 2]]).t(), id="column"),
    pytest.param(lambda: torch.tensor([[1, 3], [0, 2]]).t(), id="transposed"),
    pytest.param(lambda: torch.tensor([2]).expand(3), id="expanded"),
])
@pytest.mark.parametrize("layout", ["contiguous", "permuted"])
def test_index_shapes_and_layouts_match_aten(monkeypatch, index: Callable[[], torch.Tensor], layout: str) -> None:
    x = rand(4, 5, 6, seed=54)
    if layout == "permuted":
        x = rand(6, 4, 5, seed=55).permute(1, 2, 0)
    i = index().to(DEVICE)
    for dim in range(3):
        indices = [None] * dim + [i]
        with gems_launches(monkeypatch) as launched:
            got = torch.ops.aten.index.Tensor(x, indices)
        assert launched or i.numel() == 0
        assert_same(got, torch.ops.aten.index.Tensor(x, indices))


def test_result_layout_follows_aten_on_random_layouts() -> None:
    """The layout rule (ATen's TensorIterator order) against ATen itself, no kernel run."""
    load_ops()
    from gems_core.ops.indexing import _result_strides

    rng = random.Random(0)
    for _ in range(300):
        rank = rng.randint(1, 4)
        shape = [rng.choice([1, 2, 3, 4]) for _ in range(rank)]
        x = torch.empty([*shape, 2])[..., 0].permute(rng.sample(range(rank), rank))
        dim = rng.randrange(rank)
        index_shape = [rng.choice([1, 2, 3]) for _ in range(rng.randint(0, 2))]
        index = torch.zeros([*index_shape, 2], dtype=torch.int64)[..., 0]
        index = index.permute(rng.sample(range(index.dim()), index.dim()))
        want = torch.ops.aten.index.Tensor(x, [None] * dim + [index])
        strides = _result_strides(tuple(x.shape), x.stride(), dim, tuple(index.shape), index.stride())
        got = torch.empty_strided(want.shape, strides) if strides else torch.empty(want.shape)
        assert_same(got.zero_(), want.zero_())


def _index_out_of_range(dim: int, value: int) -> Callable[[], Any]:
    x = rand(4, 5)
    return lambda: torch.ops.aten.index.Tensor(x, [None] * dim + [torch.tensor([[0, value]], device=DEVICE)])


OUT_OF_RANGE = {
    "high": _index_out_of_range(0, 4),
    "low": _index_out_of_range(0, -5),
    "high on dim 1": _index_out_of_range(1, 5),
    "low on dim 1": _index_out_of_range(1, -6),
}
INDEX_ERRORS = {
    **OUT_OF_RANGE,
    "size 0": lambda: torch.empty(0, 3, device=DEVICE)[torch.tensor([0], device=DEVICE)],
    "too many": lambda: torch.ops.aten.index.Tensor(rand(3), [None, torch.tensor([0], device=DEVICE)]),
    "int16": lambda: rand(3)[torch.tensor([0], dtype=torch.int16, device=DEVICE)],
}


@pytest.mark.parametrize("name", sorted(INDEX_ERRORS))
def test_bad_indices_raise_atens_error(monkeypatch, name: str) -> None:
    load_ops()
    from gems_core.ops.indexing import host_checks_indices

    if name in OUT_OF_RANGE and not host_checks_indices(DEVICE):
        pytest.skip("checked by a device-side assertion there, which ends the process's context")
    expected = outcome(INDEX_ERRORS[name])
    assert expected.startswith("IndexError")
    with gems_launches(monkeypatch) as launched:
        assert outcome(INDEX_ERRORS[name]) == expected
    assert not launched


def test_repeated_index_calls_read_their_own_indices(monkeypatch) -> None:
    """A repeat of a call signature (served from its plan) gathers its own indices and,
    where indices are checked on the host, still checks every call's."""
    load_ops()
    from gems_core.ops.indexing import host_checks_indices

    table = rand(9, 4, seed=58)
    ids = [torch.tensor([[i, -1 - i, 2]], device=DEVICE) for i in range(3)]
    with gems_launches(monkeypatch) as launched:
        got = [table[i] for i in ids]
    # the third call is the native dispatch layer's replay where it fronts the op (CUDA):
    # no Python launch to count, and the comparison below checks what it gathered
    assert launched in (["gather"] * 3, ["gather"] * 2)
    for g, i in zip(got, ids):
        assert_same(g, table[i])
    if host_checks_indices(DEVICE):
        bad = torch.tensor([[0, 9, 1]], device=DEVICE)
        expected = outcome(lambda: table[bad])
        with gems_launches(monkeypatch):
            assert outcome(lambda: table[bad]) == expected


def test_repeated_cats_write_their_own_inputs(monkeypatch) -> None:
    """A repeat of a call signature (served from its layout) joins its own inputs; a negated
    view of the same signature still goes to ATen (whose cat may copy_ through gems)."""
    pairs = [(rand(2, 3, seed=60 + i), rand(2, 5, seed=70 + i)[:, ::2]) for i in range(3)]
    with gems_launches(monkeypatch) as launched:
        got = [torch.cat(p, dim=1) for p in pairs]
        assert launched in (["copy"] * 6, ["copy"] * 4)  # the third: a native replay on CUDA
        negated = torch.cat((pairs[0][0], torch._neg_view(pairs[0][1])), dim=1)
    for g, p in zip(got, pairs):
        assert_same(g, torch.cat(p, dim=1))
    assert torch.equal(negated, torch.cat((pairs[0][0], -pairs[0][1]), dim=1))


def test_bad_index_into_an_empty_result_is_not_read(monkeypatch) -> None:
    """ATen checks only the indices it reads: none when the result has no elements."""
    x = torch.empty(3, 0, dtype=torch.float64, device=DEVICE)
    with gems_launches(monkeypatch):
        got = x[torch.tensor([5, -7], device=DEVICE)]
    assert got.shape == (2, 0)


def test_other_indexing_reaches_aten(monkeypatch) -> None:
    x = rand(4, 5, seed=56)
    mask = x > 0
    rows, cols = torch.tensor([0, 3], device=DEVICE), torch.tensor([4, 1], device=DEVICE)
    with gems_launches(monkeypatch) as launched:
        masked = x[mask]
        pairs = x[rows, cols]
    assert not launched
    assert torch.equal(masked, x[mask]) and torch.equal(pairs, x[rows, cols])


def test_index_backward_runs_through_autograd(monkeypatch) -> None:
    table = rand(6, 3, seed=57).requires_grad_()
    ids = torch.tensor([[1, 1, 4], [0, 5, 1]], device=DEVICE)
    (expected,) = torch.autograd.grad(table[ids].sum(), table)
    with gems_launches(monkeypatch) as launched:
        (got,) = torch.autograd.grad(table[ids].sum(), table)
    assert "gather" in launched
    assert torch.equal(got, expected)
