"""The native dispatch layer (gems_core/native): keys, recipes, replay, check mode.

Without a GPU the layer's launches are recorded instead of made (``set_fake_launches``), on
a test operator registered on the CPU key; on a CUDA machine the real ops are checked for
repeated calls with new data.
"""

from __future__ import annotations

import pytest
import torch

import gems_core
from gems_core import native
from gems_core.launch_cache import keep_resident, recording
from gems_core.native import recorder
from gems_core.native.recorder import KINDS, NotRepeatable, TensorMap, build, record_call

layer = native.load(quiet=True)
needs_layer = pytest.mark.skipif(layer is None, reason=f"native layer not built: {native.problem()}")

_lib = torch.library.Library("gems_native_test", "DEF")
_lib.define("twice(Tensor x, float s, *, int k=3) -> Tensor")
_lib.define("pair(Tensor(a!) x, Tensor y) -> (Tensor(a!), Tensor)")
_lib.define("bump(Tensor(a!) x) -> Tensor(a!)")
_lib.define("fails(Tensor x) -> Tensor")
_lib.define("join(Tensor[] xs, int dim) -> Tensor")
_lib.define("pick(Tensor x, Tensor?[] indices) -> Tensor")
_lib.define("both(Tensor x, Tensor y) -> Tensor")
_lib.define("mapped(Tensor x) -> Tensor")
_lib.define("ramp(int n, *, Device? device=None) -> Tensor")
_lib.define("typed(Tensor x, Tensor[] more, *, ScalarType? dtype=None) -> Tensor")
_lib.define("drawn(Tensor x) -> Tensor")


def _launcher(function: int, codes: str, keep: tuple[int, ...]):  # type: ignore[no-untyped-def]
    def go(*_args):  # type: ignore[no-untyped-def]
        raise AssertionError("a fake launcher is never called")

    go.native = (function, 128, 0, codes, keep)
    return go


TWICE = _launcher(1234, "OOifO", (0, 1, 2, 3))
calls: list[tuple] = []


def twice(x: torch.Tensor, s: float, *, k: int = 3) -> torch.Tensor:
    calls.append((tuple(x.shape), s, k))
    out = torch.empty_like(x)
    if recording.native is not None:
        recording.native.append((TWICE, (x.numel(), 1, 1), (x, out, x.numel(), s, 7)))
    return out


@pytest.fixture
def fake():  # type: ignore[no-untyped-def]
    layer.set_fake_launches(True)
    layer.take_launch_log()
    registrations = []

    def register(name, fn):  # type: ignore[no-untyped-def]
        reg = layer.Registration("gems_native_test", "CPU")
        reg.impl(name, fn, record_call, 16)
        registrations.append(reg)
        return reg

    yield register
    for reg in registrations:
        reg.close()
    layer.set_fake_launches(False)
    layer.set_check(False)
    layer.take_launch_log()


@needs_layer
def test_second_call_is_recorded_and_later_calls_replay(fake):  # type: ignore[no-untyped-def]
    reg = fake("twice", twice)
    calls.clear()
    x = torch.randn(4, 3)
    outs = [torch.ops.gems_native_test.twice(x, 0.5) for _ in range(4)]
    stats = reg.stats()[0]
    assert (stats["python_calls"], stats["recorded"], stats["hits"], stats["recipes"]) == (2, 1, 2, 1)
    assert len(calls) == 2  # the Python kernel ran for the first two calls only
    log = layer.take_launch_log()
    assert len(log) == 2
    for (op, function, grid, block, shared, _stream, args), out in zip(log, outs[2:]):
        assert (op, function, grid, block, shared) == ("twice", 1234, (12, 1, 1), 128, 0)
        # operand, the fresh output, the numbers, the unused trailing pointer as null
        assert args == [x.data_ptr(), out.data_ptr(), 12, 0.5, 0]
    for out in outs:
        assert out.shape == x.shape and out.stride() == x.stride() and out.dtype == x.dtype
    assert len({o.data_ptr() for o in outs[2:]}) == 2 or outs[2].data_ptr() != x.data_ptr()


RAMP = _launcher(99, "Oi", (0, 1))


def ramp(n: int, *, device: torch.device | None = None) -> torch.Tensor:
    out = torch.empty(n, device=device)
    if recording.native is not None:
        recording.native.append((RAMP, (n, 1, 1), (out, n)))
    return out


@needs_layer
def test_a_factory_call_is_keyed_by_its_device_argument(fake):  # type: ignore[no-untyped-def]
    """A call with no tensor (a factory op such as arange) runs on the device it names: with
    an indexed device of the layer's type it is recorded and replayed there; naming none, it
    keeps the Python path."""
    reg = fake("ramp", ramp)
    cpu = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)  # as BackendSelect sends a factory call

    def call(**kwargs):  # type: ignore[no-untyped-def]
        return torch.ops.gems_native_test.ramp.default.redispatch(cpu, 6, **kwargs)

    device = torch.device("cpu", 0)
    outs = [call(device=device) for _ in range(4)]
    stats = reg.stats()[0]
    assert (stats["python_calls"], stats["recorded"], stats["hits"]) == (2, 1, 2)
    log = layer.take_launch_log()
    assert [entry[6] for entry in log] == [[out.data_ptr(), 6] for out in outs[2:]]
    assert all(out.shape == (6,) and out.device.type == "cpu" for out in outs)
    for _ in range(3):
        call()
    stats = reg.stats()[0]
    assert (stats["python_calls"], stats["hits"]) == (5, 2)


@needs_layer
def test_registrations_on_one_shelf_share_their_recipes(fake):  # type: ignore[no-untyped-def]
    """A registration of an op on the shelf of an earlier one (a use_gems() block entered
    again) replays its recipes at once; another shelf, or after clear_all, starts afresh."""
    layer.clear_all()
    x = torch.randn(5)

    def calls_on(shelf: str, count: int) -> dict:
        reg = layer.Registration("gems_native_test", "CPU")
        try:
            reg.impl("twice", twice, record_call, 16, shelf)
            for _ in range(count):
                torch.ops.gems_native_test.twice(x, 0.25)
            return reg.stats()[0]
        finally:
            reg.close()

    first = calls_on("test-shelf", 2)
    assert (first["python_calls"], first["recorded"], first["hits"]) == (2, 1, 0)
    again = calls_on("test-shelf", 2)
    assert (again["python_calls"], again["hits"], again["recipes"]) == (0, 2, 1)
    other = calls_on("another-shelf", 1)
    assert (other["python_calls"], other["hits"]) == (1, 0)
    unshared = calls_on("", 1)
    assert (unshared["python_calls"], unshared["hits"]) == (1, 0)
    layer.clear_all()
    cleared = calls_on("test-shelf", 1)
    assert (cleared["python_calls"], cleared["hits"]) == (1, 0)
    assert len(layer.take_launch_log()) == 2  # the two replays on the shelf


@needs_layer
def test_keys_separate_what_the_python_path_depends_on(fake):  # type: ignore[no-untyped-def]
    reg = fake("twice", twice)
    calls.clear()
    base = torch.randn(6, 4)
    variants = [
        (base, 0.5, 3),
        (base, 0.25, 3),  # another number
        (base, 0.5, 4),  # another keyword value
        (base.t(), 0.5, 3),  # other strides
        (base[:3], 0.5, 3),  # another shape
        (base.double(), 0.5, 3),  # another dtype
        (base.flatten()[1:].view(1, 23), 0.5, 3),  # misaligned data pointer
    ]
    for x, s, k in variants:
        for _ in range(3):
            torch.ops.gems_native_test.twice(x, s, k=k)
    stats = reg.stats()[0]
    assert stats["recipes"] == len(variants)
    assert stats["hits"] == len(variants)
    assert len(calls) == 2 * len(variants)
    log = layer.take_launch_log()
    assert [entry[6][3] for entry in log] == [0.5, 0.25, 0.5, 0.5, 0.5, 0.5, 0.5]


@needs_layer
def test_arguments_reach_python_as_pytorch_passes_them(fake):  # type: ignore[no-untyped-def]
    seen = []

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append((len(args), sorted(kwargs)))
        return torch.empty_like(args[0])

    fake("twice", spy)
    x = torch.randn(3)
    torch.ops.gems_native_test.twice(x, 2.0)
    torch.ops.gems_native_test.twice(x, 2.0, k=5)
    assert seen == [(2, []), (2, ["k"])]  # defaulted keyword arguments are left out


@needs_layer
def test_python_exceptions_keep_their_type(fake):  # type: ignore[no-untyped-def]
    def fails(x):  # type: ignore[no-untyped-def]
        raise IndexError("index 9 is out of bounds")

    fake("fails", fails)
    for _ in range(3):  # also on the recorded (second) call
        with pytest.raises(IndexError, match="out of bounds"):
            torch.ops.gems_native_test.fails(torch.randn(2))


@needs_layer
def test_in_place_and_tuple_results(fake):  # type: ignore[no-untyped-def]
    go = _launcher(77, "OOOi", (0, 1, 2, 3))

    def pair(x, y):  # type: ignore[no-untyped-def]
        extra = torch.empty(y.shape[0], 2, dtype=torch.int64)
        if recording.native is not None:
            recording.native.append((go, (1, 1, 1), (x, y[1:], extra, 5)))
        return x, extra

    reg = fake("pair", pair)
    x, y = torch.randn(5), torch.randn(4)
    results = [torch.ops.gems_native_test.pair(x, y) for _ in range(3)]
    assert reg.stats()[0]["hits"] == 1
    first, extra = results[2]
    assert first is x or first.data_ptr() == x.data_ptr()  # the operand itself comes back
    assert extra.shape == (4, 2) and extra.dtype == torch.int64 and extra.stride() == (2, 1)
    (_, _, _, _, _, _, args), = layer.take_launch_log()
    # y[1:] is y's address plus one float32; the scratch-free output is the new tensor
    assert args == [x.data_ptr(), y.data_ptr() + 4, extra.data_ptr(), 5]


@needs_layer
def test_calls_that_do_more_than_launch_are_not_recorded(fake):  # type: ignore[no-untyped-def]
    def impure(x):  # type: ignore[no-untyped-def]
        out = torch.empty_like(x)
        out.copy_(x)  # work outside a kernel: a recipe would skip it
        return out

    reg = fake("fails", impure)
    x = torch.randn(3)
    for _ in range(4):
        assert torch.equal(torch.ops.gems_native_test.fails(x), x)
    stats = reg.stats()[0]
    # recorded once (the second call), refused, and left to Python from then on
    assert stats["recipes"] == 0 and stats["hits"] == 0 and stats["refused"] == 1 and stats["recorded"] == 0


@needs_layer
def test_aten_fallback_and_interpreted_launches_are_not_recorded(fake):  # type: ignore[no-untyped-def]
    def falls_back(x):  # type: ignore[no-untyped-def]
        recording.impure = True  # what gems' ATen fallback marks
        return torch.empty_like(x)

    reg = fake("fails", falls_back)
    for _ in range(4):
        torch.ops.gems_native_test.fails(torch.randn(3))
    assert reg.stats()[0]["recipes"] == 0


@needs_layer
def test_gated_dtypes_go_to_the_kernel_before_gems_without_python():  # type: ignore[no-untyped-def]
    """A dtype the backend leaves to ATen: its calls go from C++ to the kernel registered
    for the key before gems' (here a test's own, standing for ATen's), whether the dtype is a
    tensor's, a list element's or asked for; other calls reach gems' Python kernel."""
    before = torch.library.Library("gems_native_test", "IMPL")
    before.impl("typed", lambda x, more, *, dtype=None: x + 1, "CPU")
    python_calls: list[torch.dtype] = []

    def gems_kernel(x, more, *, dtype=None):  # type: ignore[no-untyped-def]
        python_calls.append(x.dtype)
        return x - 1

    reg = layer.Registration("gems_native_test", "CPU")
    try:
        reg.impl("typed", gems_kernel, record_call, 16, "", [torch.empty(0, dtype=torch.float64)])
        x32, x64 = torch.randn(5), torch.randn(5, dtype=torch.float64)
        typed = torch.ops.gems_native_test.typed
        assert torch.equal(typed(x64, []), x64 + 1)  # a tensor's dtype
        assert torch.equal(typed(x32, [x32, x64]), x32 + 1)  # a list element's
        assert torch.equal(typed(x32, [], dtype=torch.float64), x32 + 1)  # asked for
        assert python_calls == []
        assert torch.equal(typed(x32, [x32], dtype=torch.float32), x32 - 1)
        assert python_calls == [torch.float32]
        assert reg.stats()[0]["aten_calls"] == 3
    finally:
        reg.close()
        before._destroy()


@needs_layer
def test_tensors_on_another_device_type_go_to_the_kernel_before_gems_where_declared():  # type: ignore[no-untyped-def]
    """An op whose Python kernel declines tensors on a device of another type (``copy_``
    between host and device) has them sent from C++ to the kernel before gems'. Here the
    layer fronts the Meta key, so a CPU tensor stands for host memory next to device tensors;
    a 0-d one (a host number, which gems reads) still reaches Python, and so does everything
    where the op does not declare it."""
    before = torch.library.Library("gems_native_test", "IMPL")
    before.impl("both", lambda x, y: torch.empty_like(x, dtype=torch.float64), "Meta")
    python_calls: list[str] = []

    def gems_kernel(x, y):  # type: ignore[no-untyped-def]
        python_calls.append(y.device.type)
        return torch.empty_like(x, dtype=torch.float16)

    both = torch.ops.gems_native_test.both
    x, host, number = torch.empty(3, 4, device="meta"), torch.randn(3, 4), torch.tensor(2.0)
    for foreign in (True, False):
        python_calls.clear()
        reg = layer.Registration("gems_native_test", "Meta")
        try:
            reg.impl("both", gems_kernel, record_call, 16, "", [], foreign)
            to_aten = both(x, host)
            assert to_aten.device.type == "meta" and to_aten.shape == (3, 4)
            assert to_aten.dtype == (torch.float64 if foreign else torch.float16)
            assert both(x, number).dtype == torch.float16
            assert both(x, torch.empty(3, 4, device="meta")).dtype == torch.float16
            assert python_calls == (["cpu", "meta"] if foreign else ["cpu", "cpu", "meta"])
            assert reg.stats()[0]["aten_calls"] == (1 if foreign else 0)
        finally:
            reg.close()
    before._destroy()


@needs_layer
def test_a_gate_sends_gated_dtypes_that_need_a_graph_to_the_kernel_before_gems(fake):  # type: ignore[no-untyped-def]
    """On the Autograd key, a call that needs a gradient and involves a dtype the backend
    leaves to ATen goes from C++ to the key's kernel before gems' (ATen's autograd kernel, or
    a composite op's decomposition) with its keyset; other such calls run gems' Python
    autograd kernel, and calls that need no gradient still go below autograd."""
    fake("twice", twice)
    before = torch.library.Library("gems_native_test", "IMPL")
    seen: list = []

    def atens(keyset, x, s, *, k=3):  # type: ignore[no-untyped-def]
        seen.append(keyset.has(torch._C.DispatchKey.AutogradCPU))
        return x * 3

    before.impl("twice", atens, "AutogradCPU", with_keyset=True)
    autograd_calls: list = []

    def autograd_kernel(keyset, *args, **kwargs):  # type: ignore[no-untyped-def]
        autograd_calls.append(args[0].dtype)
        with torch._C._AutoDispatchBelowAutograd():
            return torch.ops.gems_native_test.twice(*args, **kwargs) * 1

    gates = layer.Registration("gems_native_test", "AutogradCPU")
    try:
        native.gate(gates, "twice", autograd_kernel, [torch.float64])
        x64 = torch.randn(4, dtype=torch.float64, requires_grad=True)
        assert torch.equal(torch.ops.gems_native_test.twice(x64, 0.5), x64 * 3)
        assert seen == [True] and autograd_calls == []
        torch.ops.gems_native_test.twice(torch.randn(4, requires_grad=True), 0.5)
        assert autograd_calls == [torch.float32]
        torch.ops.gems_native_test.twice(torch.randn(4, dtype=torch.float64), 0.5)  # no graph needed
        (gate,) = [row for row in gates.stats() if row.get("gate")]
        assert (gate["aten_calls"], gate["python_calls"], gate["below_autograd"]) == (1, 1, 1)
        assert seen == [True]
    finally:
        gates.close()
        before._destroy()


@needs_layer
def test_gems_own_earlier_kernel_is_never_taken_for_atens():  # type: ignore[no-untyped-def]
    """A registration made while another of gems' is open finds gems' kernel on the key:
    its gated calls keep the Python path rather than going round to it."""
    first = layer.Registration("gems_native_test", "CPU")
    second = layer.Registration("gems_native_test", "CPU")
    try:
        first.impl("typed", lambda x, more, *, dtype=None: x - 1, record_call, 16)
        second.impl("typed", lambda x, more, *, dtype=None: x - 2, record_call, 16, "",
                    [torch.empty(0, dtype=torch.float64)])
        x = torch.randn(3, dtype=torch.float64)
        assert torch.equal(torch.ops.gems_native_test.typed(x, []), x - 2)
        assert second.stats()[0]["aten_calls"] == 0
    finally:
        second.close()
        first.close()


@needs_layer
def test_a_call_aten_served_while_its_kernel_compiles_is_recorded_later(fake):  # type: ignore[no-untyped-def]
    compiling = [True, True]  # the first two calls find the kernel compiling in the background

    def deferred_then_twice(x, s, *, k=3):  # type: ignore[no-untyped-def]
        if compiling:
            compiling.pop()
            if recording.native is not None:  # what gems marks when ATen serves a compiling call
                recording.deferred = True
            return torch.empty_like(x)
        return twice(x, s, k=k)

    reg = fake("twice", deferred_then_twice)
    x = torch.randn(4, 3)
    for _ in range(5):
        torch.ops.gems_native_test.twice(x, 0.5)
    stats = reg.stats()[0]
    # the second call (recorded while deferred) is neither kept nor refused; the third is kept
    assert (stats["refused"], stats["recorded"], stats["recipes"], stats["hits"]) == (0, 1, 1, 2)
    assert recording.deferred is False


@needs_layer
def test_check_mode_catches_a_recipe_that_misses_work(fake):  # type: ignore[no-untyped-def]
    go = _launcher(5, "O", (0,))

    def bump(x):  # type: ignore[no-untyped-def]
        x.numpy()[...] += 1  # work the recorder cannot see (it sees ATen ops and launches)
        if recording.native is not None:
            recording.native.append((go, (1, 1, 1), (x,)))
        return x

    layer.set_check(True)
    fake("bump", bump)
    x = torch.zeros(3)
    with pytest.raises(RuntimeError, match="gems native check: bump"):
        torch.ops.gems_native_test.bump(x)


def test_build_maps_addresses_to_operands_outputs_and_scratch():
    x = torch.randn(8)
    out = torch.empty(4)
    scratch = torch.empty(2, 3)
    go = _launcher(9, "OOOOlf", (0, 1, 2, 3, 4, 5))
    recipe = build(out, [(0, x)], 2, [out, scratch],
                   [(go, (2, 1, 1), (x[2:], out, scratch.data_ptr() + 4, None, 2**40, 1.5))])
    allocations, steps, returns = recipe
    assert allocations == (((4,), (1,), torch.float32), ((2, 3), (3, 1), torch.float32))
    assert returns == (2,)
    (function, gx, gy, gz, block, shared, args), = steps
    assert (function, gx, gy, gz, block, shared) == (9, 2, 1, 1, 128, 0)
    assert args == ((KINDS["pointer"], 0, 8, 0), (KINDS["pointer"], 2, 0, 0), (KINDS["pointer"], 3, 4, 0),
                    (KINDS["null"], 0, 0, 0), (KINDS["i64"], 0, 0, 2**40), (KINDS["f32"], 0, 0, 1.5))


MAPPED = _launcher(77, "TiillTiilliOO", None)


def _map_of(t: torch.Tensor, rows: int) -> TensorMap:
    """A tensor map over a 2-D tensor's rows, blocks of (rows, 4)."""
    return TensorMap(t.data_ptr(), 7, 3, 0, 2, (t.shape[1], t.shape[0]), (t.stride(0) * t.element_size(),),
                     (4, rows))


def mapped(x: torch.Tensor) -> torch.Tensor:
    """A kernel taking tensor maps of its operand's second row on and of its output."""
    out = torch.empty_like(x)
    if recording.native is not None:
        body = x[1:]
        recording.native.append((MAPPED, (3, 1, 1), (_map_of(body, 2), *body.shape, *body.stride(),
                                                     _map_of(out, 8), *out.shape, *out.stride(), 5)))
    return out


def test_build_describes_tensor_maps_by_slot():
    x = torch.randn(6, 4)
    out = torch.empty(6, 4)
    recipe = build(out, [(0, x)], 1, [out], [(MAPPED, (3, 1, 1), (_map_of(x[1:], 2), 5, 4, 4, 1,
                                                                  _map_of(out, 8), 6, 4, 4, 1, 5))])
    (*_, args), = recipe[1]
    assert args[0] == (KINDS["tensor_map"], 0, 16, (7, 3, 0, 2, (4, 5), (16,), (4, 2)))
    assert args[5] == (KINDS["tensor_map"], 1, 0, (7, 3, 0, 2, (4, 6), (16,), (4, 8)))
    assert args[1:5] == ((KINDS["i32"], 0, 0, 5), (KINDS["i32"], 0, 0, 4), (KINDS["i64"], 0, 0, 4),
                         (KINDS["i64"], 0, 0, 1))
    assert args[10] == (KINDS["i32"], 0, 0, 5)
    assert args[-2:] == ((KINDS["null"], 0, 0, 0), (KINDS["null"], 0, 0, 0))  # the scratch pointers
    with pytest.raises(NotRepeatable, match="did not describe"):
        build(out, [(0, x)], 1, [out], [(MAPPED, (3, 1, 1), (x, 5, 4, 4, 1, out, 6, 4, 4, 1, 5))])
    with pytest.raises(NotRepeatable, match="does not own"):
        build(out, [(0, x)], 1, [out], [(MAPPED, (3, 1, 1), (_map_of(torch.randn(6, 4), 2), 5, 4, 4, 1,
                                                              _map_of(out, 8), 6, 4, 4, 1, 5))])


@needs_layer
def test_tensor_maps_are_encoded_over_each_calls_addresses(fake):  # type: ignore[no-untyped-def]
    reg = fake("mapped", mapped)
    xs = [torch.randn(6, 4) for _ in range(4)]
    outs = [torch.ops.gems_native_test.mapped(x) for x in xs]
    stats = reg.stats()[0]
    assert (stats["python_calls"], stats["recorded"], stats["hits"]) == (2, 1, 2)
    log = layer.take_launch_log()
    assert len(log) == 2
    for (op, function, grid, block, _shared, _stream, args), x, out in zip(log, xs[2:], outs[2:]):
        assert (op, function, grid, block) == ("mapped", 77, (3, 1, 1), 128)
        assert args[0] == ("tensor_map", x.data_ptr() + 16, 7, 3, 0, 2, (4, 5), (16,), (4, 2))
        assert args[5] == ("tensor_map", out.data_ptr(), 7, 3, 0, 2, (4, 6), (16,), (4, 8))
        assert args[1:5] == [5, 4, 4, 1] and args[6:] == [6, 4, 4, 1, 5, 0, 0]


def test_build_refuses_what_it_cannot_repeat():
    x = torch.randn(8)
    go = _launcher(9, "OO", (0, 1))
    stranger = torch.randn(8)
    with pytest.raises(NotRepeatable, match="does not own"):
        build(x, [(0, x)], 1, [], [(go, (1, 1, 1), (x, stranger))])
    with pytest.raises(NotRepeatable, match="did not allocate"):
        build(stranger, [(0, x)], 1, [], [])
    big = torch.empty(16)
    with pytest.raises(NotRepeatable, match="view into a larger buffer"):
        build(big[:8], [(0, x)], 1, [big], [])
    with pytest.raises(NotRepeatable, match="cannot make"):
        build(x, [(0, x)], 1, [], [(lambda *a: None, (1, 1, 1), (x,))])
    with pytest.raises(NotRepeatable, match="other than tensors"):
        build(3, [(0, x)], 1, [], [])


def test_build_passes_a_resident_buffer_by_address():
    x = torch.randn(8)
    counters = keep_resident(torch.zeros(16, dtype=torch.int32))
    go = _launcher(9, "OOO", (0, 1, 2))
    recipe = build(x, [(0, x)], 1, [], [(go, (1, 1, 1), (x, counters, counters.data_ptr() + 8))])
    (*_, args), = recipe[1]
    assert args == ((KINDS["pointer"], 0, 0, 0), (KINDS["u64"], 0, 0, counters.data_ptr()),
                    (KINDS["u64"], 0, 0, counters.data_ptr() + 8))
    with pytest.raises(NotRepeatable, match="does not own"):  # memory next to it is still foreign
        build(x, [(0, x)], 1, [], [(go, (1, 1, 1), (x, torch.zeros(4), x))])


def _gated(fake, autograd_calls):  # type: ignore[no-untyped-def]
    """``twice`` fronted by the layer on the CPU key, and a gate on AutogradCPU in front of
    a Python autograd kernel that notes its calls and then redispatches as gems' does."""
    reg = fake("twice", twice)
    gates = layer.Registration("gems_native_test", "AutogradCPU")

    def autograd_kernel(keyset, *args, **kwargs):  # type: ignore[no-untyped-def]
        autograd_calls.append((keyset, args, kwargs))
        with torch._C._AutoDispatchBelowAutograd():
            return torch.ops.gems_native_test.twice(*args, **kwargs) * 1

    native.gate(gates, "twice", autograd_kernel)
    return reg, gates


@needs_layer
def test_gate_sends_calls_that_need_no_gradient_below_autograd(fake):  # type: ignore[no-untyped-def]
    autograd_calls: list = []
    reg, gates = _gated(fake, autograd_calls)
    try:
        calls.clear()
        x = torch.randn(4, 3)
        for _ in range(3):
            assert torch.ops.gems_native_test.twice(x, 0.5, k=4).shape == (4, 3)
        with torch.no_grad():
            torch.ops.gems_native_test.twice(x.requires_grad_(), 0.5, k=4)
        assert autograd_calls == []
        (gate,) = [s for s in gates.stats() if s.get("gate")]
        assert (gate["op"], gate["below_autograd"], gate["python_calls"]) == ("twice", 4, 0)
        # below autograd the native kernel ran: two Python calls, then its recipe
        assert reg.stats()[0]["hits"] == 2 and len(calls) == 2
    finally:
        gates.close()


@needs_layer
def test_gate_runs_the_python_autograd_kernel_when_a_gradient_is_needed(fake):  # type: ignore[no-untyped-def]
    import torch.autograd.forward_ad as fwAD

    autograd_calls: list = []
    _, gates = _gated(fake, autograd_calls)
    try:
        x = torch.randn(4, 3, requires_grad=True)
        torch.ops.gems_native_test.twice(x, 0.25, k=5)
        with fwAD.dual_level():  # a forward-mode gradient needs the autograd kernel too
            torch.ops.gems_native_test.twice(fwAD.make_dual(torch.randn(2), torch.randn(2)), 1.0)
        assert len(autograd_calls) == 2
        keyset, args, kwargs = autograd_calls[0]
        assert isinstance(keyset, torch._C.DispatchKeySet) and keyset.has(torch._C.DispatchKey.AutogradCPU)
        assert args[0] is x and args[1:] == (0.25,) and kwargs == {"k": 5}
        assert autograd_calls[1][1][1:] == (1.0,) and autograd_calls[1][2] == {}  # defaults left out
        (gate,) = [s for s in gates.stats() if s.get("gate")]
        assert (gate["below_autograd"], gate["python_calls"]) == (0, 2)
        def fails(keyset, *args, **kwargs):  # type: ignore[no-untyped-def]
            raise ValueError("from the autograd kernel")
        gates.close()
        gates = layer.Registration("gems_native_test", "AutogradCPU")
        native.gate(gates, "twice", fails)
        with pytest.raises(ValueError, match="from the autograd kernel"):
            torch.ops.gems_native_test.twice(x, 0.25)
    finally:
        gates.close()


@needs_layer
def test_gated_autograd_ops_through_the_layer(monkeypatch):  # type: ignore[no-untyped-def]
    """rms_norm (gems' own backward) with the layer in front of it: calls that need no
    gradient pass the gate, the others build a graph; both stay correct."""
    if gems_core.device == "cpu":
        monkeypatch.setenv("GEMS_NATIVE", "force")
    device = gems_core.device
    torch.manual_seed(1)
    with gems_core.use_gems(include=["rms_norm"]):
        for _ in range(3):
            x = torch.randn(5, 24, device=device)
            w = torch.randn(24, device=device)
            expected = torch.nn.functional.rms_norm(x.cpu().double(), (24,), w.cpu().double())
            torch.testing.assert_close(torch.nn.functional.rms_norm(x, (24,), w).cpu().double(), expected,
                                       rtol=1e-5, atol=1e-5)
        w.requires_grad_()
        out = torch.nn.functional.rms_norm(x, (24,), w)
        assert out.grad_fn is not None
        out.sum().backward()
        w64 = w.detach().cpu().double().requires_grad_()
        torch.nn.functional.rms_norm(x.cpu().double(), (24,), w64).sum().backward()
        torch.testing.assert_close(w.grad.cpu().double(), w64.grad, rtol=1e-4, atol=1e-4)
        with torch.no_grad():
            assert torch.nn.functional.rms_norm(x, (24,), w).grad_fn is None
        (gate,) = [s for s in gems_core.dispatch.native_stats() if s.get("gate")]
    assert gate["op"] == "rms_norm" and gate["below_autograd"] >= 4 and gate["python_calls"] >= 1


def test_observer_flags_device_work_but_not_host_arithmetic():
    observer = recorder._Observer("cpu")
    with observer:
        torch.empty(3).t()
    assert observer.other is None and len(observer.allocated) == 1
    with observer:
        torch.ones(2) + 1
    assert observer.other is not None
    device_observer = recorder._Observer("cuda")
    with device_observer:
        torch.tensor(0.1, dtype=torch.float64).to(torch.float16).item()
    assert device_observer.other is None  # CPU-only arithmetic cannot touch device memory


def test_observer_lets_checks_that_follow_from_the_key_through():
    # the overlap check of a writing op and type promotion with a number read no data; a
    # call making them stays repeatable (copy_, cat and eq.Scalar make them every call)
    x = torch.randn(4, 3)
    observer = recorder._Observer("cpu")
    with observer:
        torch._debug_has_internal_overlap(x.expand(2, 4, 3))
        torch.result_type(x, 2)
    assert observer.other is None
    with observer:
        x.sum()
    assert observer.other == "aten.sum.default"


@needs_layer
def test_real_ops_through_the_layer_on_this_backend(monkeypatch):  # type: ignore[no-untyped-def]
    """With the layer in front of gems' kernels (forced on the CPU interpreter, where calls
    are never replayed; on a GPU, where they are) repeated calls stay correct."""
    if gems_core.device == "cpu":
        monkeypatch.setenv("GEMS_NATIVE", "force")
    device = gems_core.device
    torch.manual_seed(0)
    with gems_core.use_gems(include=["add.Tensor", "sum", "_softmax", "mul.Tensor"]):
        for _ in range(4):
            a = torch.randn(33, 17, device=device)
            b = torch.randn(17, device=device)
            expected = a.double() + b.double()
            torch.testing.assert_close((a + b).double(), expected)
            torch.testing.assert_close((a.t() * 2).double(), a.t().double() * 2)
            torch.testing.assert_close(a.sum().double(), a.double().sum(), rtol=1e-5, atol=1e-4)
            torch.testing.assert_close(torch.softmax(a, -1).double(), torch.softmax(a.double(), -1),
                                       rtol=1e-5, atol=1e-6)
            empty = torch.empty(0, 5, device=device)
            assert (empty + empty).shape == (0, 5)
        stats = gems_core.dispatch.native_stats()
    assert {s["op"] for s in stats} >= {"add.Tensor", "sum"}
    if device == "cuda":
        assert sum(s["hits"] for s in stats) > 0


@needs_layer
def test_launches_through_tritons_own_launcher_make_a_call_unrepeatable(fake):  # type: ignore[no-untyped-def]
    import triton

    def jit_launch(x):  # type: ignore[no-untyped-def]
        out = torch.empty_like(x)
        triton.knobs.runtime.launch_enter_hook(None)  # what Triton's launcher calls per launch
        return out

    reg = fake("fails", jit_launch)
    for _ in range(4):
        torch.ops.gems_native_test.fails(torch.randn(3))
    assert reg.stats()[0]["recipes"] == 0
    # the recorder's marker does not stop compiled kernels from using PyTorch's launcher
    from gems_core.launch_cache import _hook_in_use

    assert not _hook_in_use(triton.knobs.runtime.launch_enter_hook)


JOIN = _launcher(777, "OOi", (0, 1, 2))
BOTH = _launcher(4321, "OOifO", (0, 1, 2, 3, 4))


def _join(xs: list[torch.Tensor], dim: int) -> torch.Tensor:
    calls.append(("join", len(xs), dim))
    out = torch.empty(sum(x.shape[0] for x in xs), *xs[0].shape[1:])
    if recording.native is not None:
        for x in xs:  # one launch per input: its data, the output, its length
            recording.native.append((JOIN, (1, 1, 1), (x, out, x.shape[0])))
    return out


def _pick(x: torch.Tensor, indices: list[torch.Tensor | None]) -> torch.Tensor:
    calls.append(("pick",))
    index = next(i for i in indices if i is not None)
    out = torch.empty(index.shape[0], *x.shape[1:])
    if recording.native is not None:
        recording.native.append((JOIN, (1, 1, 1), (index, out, 0)))
    return out


def _both(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    calls.append(("both",))
    out = torch.empty_like(x)
    if recording.native is not None:
        recording.native.append((BOTH, (1, 1, 1), (x, y, 1, 1.0, out)))
    return out


@needs_layer
def test_list_arguments_are_keyed_and_their_elements_addressed(fake):  # type: ignore[no-untyped-def]
    reg = fake("join", _join)
    calls.clear()
    for _ in range(2):  # Python, then recorded
        torch.ops.gems_native_test.join([torch.randn(2, 3), torch.randn(5, 3)], 0)
    layer.take_launch_log()
    a, b = torch.randn(2, 3), torch.randn(5, 3)
    out = torch.ops.gems_native_test.join([a, b], 0)
    log = layer.take_launch_log()
    # replayed with this call's elements: each launch reads its own input
    assert [entry[6] for entry in log] == [[a.data_ptr(), out.data_ptr(), 2], [b.data_ptr(), out.data_ptr(), 5]]
    assert out.shape == (7, 3) and len(calls) == 2
    # another list length or element shape is another key
    torch.ops.gems_native_test.join([a, b, a.clone()], 0)
    torch.ops.gems_native_test.join([b, a], 0)
    assert len(calls) == 4
    assert reg.stats()[0]["hits"] == 1

    fake("pick", _pick)
    calls.clear()
    x = torch.randn(6, 4)
    for _ in range(2):
        torch.ops.gems_native_test.pick(x, [None, torch.tensor([1, 2])])
    layer.take_launch_log()
    index = torch.tensor([3, 0])
    got = torch.ops.gems_native_test.pick(x, [None, index])
    assert layer.take_launch_log()[0][6][:2] == [index.data_ptr(), got.data_ptr()]
    torch.ops.gems_native_test.pick(x, [index, None])  # the None elsewhere: another key
    assert len(calls) == 3


@needs_layer
def test_operands_that_alias_do_not_share_a_key_with_operands_apart(fake):  # type: ignore[no-untyped-def]
    fake("both", _both)
    calls.clear()
    x = torch.randn(8)
    for _ in range(3):  # recorded with both operands the same tensor, then replayed
        torch.ops.gems_native_test.both(x, x)
    assert len(calls) == 2
    layer.take_launch_log()
    a, b = torch.randn(8), torch.randn(8)
    torch.ops.gems_native_test.both(a, b)
    assert len(calls) == 3  # Python: not the aliasing call's recipe
    assert layer.take_launch_log() == []
    for _ in range(2):
        torch.ops.gems_native_test.both(a, b)
    out = torch.ops.gems_native_test.both(b, a)
    log = layer.take_launch_log()
    assert log[-1][6][:2] == [b.data_ptr(), a.data_ptr()] and log[-1][6][4] == out.data_ptr()


@needs_layer
def test_operands_that_overlap_do_not_share_a_key_with_operands_apart(fake):  # type: ignore[no-untyped-def]
    fake("both", _both)
    calls.clear()
    base = torch.randn(16)
    for _ in range(3):  # apart: recorded, then replayed
        torch.ops.gems_native_test.both(base[:8], torch.randn(8))
    assert len(calls) == 2
    torch.ops.gems_native_test.both(base[:8], base[4:12])  # meeting halves: not that recipe
    assert len(calls) == 3


def test_a_build_left_unfinished_by_a_dead_process_does_not_block_the_next(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """torch's build marker ("lock") that a process stopped mid-build leaves is removed
    under gems' OS lock, which no dead process holds; while a live process holds that lock,
    another one waits for it (and then finds the finished build)."""
    import subprocess
    import sys

    from torch.utils import cpp_extension

    pytest.importorskip("fcntl")
    (tmp_path / "lock").write_text("")  # what a killed build leaves
    seen = []
    monkeypatch.setattr(native, "build_directory", lambda: tmp_path)
    monkeypatch.setattr(cpp_extension, "load", lambda **kw: seen.append((tmp_path / "lock").exists()) or "built")
    assert native._build(quiet=True) == "built" and seen == [False]

    probe = ("import fcntl, sys; f = open(sys.argv[1], 'a')\n"
             "try:\n    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept OSError:\n    sys.exit(3)\n")
    with native.build_lock(tmp_path):
        held = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "gems-build.lock")], timeout=60)
    free = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "gems-build.lock")], timeout=60)
    assert (held.returncode, free.returncode) == (3, 0)


# -- what a kernel does outside its launches -------------------------------------------------------


@pytest.mark.parametrize("op", ["sum.dim_IntList", "cumsum", "argmax", "var.correction", "embedding",
                                "embedding_dense_backward", "nll_loss_forward"])
def test_a_kernel_that_copies_its_input_does_so_in_ways_a_recording_owns(
    op: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A layout the reduction kernels cannot read in place (a reduced middle dim of a tensor
    whose last two dims are swapped: the key gradient of grouped-query attention), or indices
    with no flat view for an embedding, are copied densely first. The copy must be an
    allocation and a gems launch, both of which the recorder sees and repeats;
    ``.contiguous()`` is a dispatcher call of its own, whose buffer the recording does not
    own, so a training step's reductions ran gems' Python every time. The same holds for the
    zeroed buffers of a training step's loss and embedding gradient (``torch.zeros`` is an ATen
    call of its own; gems' fill kernel zeroes them) and the loss's check of its targets (an
    assert in the kernel, as on a GPU, rather than ATen's ``_assert_async`` of a flag)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from gems_core import registry
    from gems_core.launch_cache import interpreter_state

    g = torch.Generator().manual_seed(3)
    device = torch.device(gems_core.device)  # the kernels are called directly: no dispatcher routes them
    x = torch.randn(3, 2, 4, 6, 5, generator=g, dtype=torch.float64).float().to(device).transpose(-1, -2)
    tokens = torch.randint(0, 5, (3, 7), generator=g).to(device)
    targets = torch.tensor([4, 0, -100, 2, 3], device=device)
    log_probs = torch.randn(5, 6, generator=g).log_softmax(-1).to(device)
    calls = {
        "sum.dim_IntList": (lambda f: f(x, [2], True), lambda t: t.sum([2], keepdim=True)),
        "cumsum": (lambda f: f(x, 2), lambda t: t.cumsum(2)),
        "argmax": (lambda f: f(x, 2), lambda t: t.argmax(2)),
        "var.correction": (lambda f: f(x, [2]), lambda t: t.var([2])),
        # the next-token inputs of a training batch, tokens[:, :-1]: no flat view of them
        "embedding": (lambda f: f(x[0, 0, 0], tokens[:, :-1]), lambda t: t[0, 0, 0][tokens[:, :-1]]),
        # the gradient of the embedding above, each row scaled by its lookup count
        "embedding_dense_backward": (
            lambda f: f(x[:, 0, 0].transpose(1, 2), tokens[:, :-1], 5, 1, True),
            lambda t: torch.ops.aten.embedding_dense_backward(t[:, 0, 0].transpose(1, 2), tokens[:, :-1], 5, 1,
                                                              True)),
        # a mean over the targets, -100 ignored as in a causal LM's loss
        "nll_loss_forward": (
            lambda f: f(log_probs, targets, None, 1, -100)[0],
            lambda t: torch.ops.aten.nll_loss_forward(log_probs.double(), targets, None, 1, -100)[0]),
    }
    call, reference = calls[op]
    kernel = registry.all_impls()[op].fn
    seen: list[str] = []

    class Seen(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if not (interpreter_state.active or func.is_view):  # the interpreter's own work aside
                seen.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    with gems_core.use_gems():
        from gems_core.ops import indexing, loss  # (imported once the runtime is set up)

        # indices checked in the kernel, as on a GPU (the CPU backend reads them on the host)
        monkeypatch.setattr(indexing, "host_checks_indices", lambda device: False)
        monkeypatch.setattr(loss, "host_checks_indices", lambda device: False)
        call(kernel)  # settles the config
        with Seen():
            got = call(kernel)
    want = reference(x.double())
    if want.dtype == torch.int64:
        assert torch.equal(got, want)
    else:
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    outside = [name for name in seen if name not in recorder._ALLOCATIONS]
    assert not outside, f"{op} ran {outside} outside its kernels"


@needs_layer
def test_attention_that_needs_a_gradient_launches_through_gems_ops_the_layer_fronts(monkeypatch):  # type: ignore[no-untyped-def]
    """scaled_dot_product_attention in training: its autograd function's forward and backward
    call gems::attention_forward and gems::attention_backward, which the layer fronts (on a
    GPU the repeated calls are replayed; on the CPU interpreter each takes Python through
    the layer); gradients stay those of float64 ATen. Calls with dropout keep Python.
    float16: backends may leave float32 attention to ATen."""
    if gems_core.device == "cpu":
        monkeypatch.setenv("GEMS_NATIVE", "force")
    device = gems_core.device
    torch.manual_seed(2)
    rounds = 4
    with gems_core.use_gems(include=["scaled_dot_product_attention"]):
        from gems_core.ops import attention  # defined once the backend is selected

        def counts() -> dict[str, int]:  # calls of each op so far (the registration outlives tests)
            if not attention._fronted():
                return {}
            return {row["op"]: row["python_calls"] + row["hits"] for row in native.stats(attention._fronting[1])}

        before = counts()
        for _ in range(rounds):
            q, k, v = (torch.randn(2, 4 if i == 0 else 2, 20, 16, device=device, dtype=torch.float16,
                                   requires_grad=True) for i in range(3))
            grad = torch.randn(2, 4, 20, 16, device=device, dtype=torch.float16)
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            out.backward(grad)
            reference = [t.detach().cpu().double().requires_grad_() for t in (q, k, v)]
            expected = torch.nn.functional.scaled_dot_product_attention(*reference, is_causal=True, enable_gqa=True)
            expected.backward(grad.cpu().double())
            torch.testing.assert_close(out.detach().cpu().double(), expected.detach(), rtol=4e-3, atol=4e-3)
            for got, want in zip((q, k, v), reference):
                torch.testing.assert_close(got.grad.cpu().double(), want.grad, rtol=1e-2, atol=1e-2)
        assert attention._fronted()
        served = counts()
        assert {op: n - before.get(op, 0) for op, n in served.items()} == {
            "attention_forward": rounds, "attention_backward": rounds}
        q.grad = None
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.25, enable_gqa=True)
        out.sum().backward()
        assert q.grad is not None and torch.isfinite(q.grad).all()
        after = counts()
    assert after == served  # the dropout call took the Python path


DRAWN = _launcher(4321, "OOiiiiii", (0, 1, 2, 3, 4, 5, 6, 7))


def drawing(words: tuple[int, int, int, int], counters: int):  # type: ignore[no-untyped-def]
    """A kernel that draws ``counters`` Philox counters (noting the draw as
    gems_core.ops.random.philox_state does) and passes the words between two numbers."""

    def drawn(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        if recording.native is not None:
            recording.philox.append((words, counters))
            recording.native.append((DRAWN, (1, 1, 1), (x, out, x.numel(), *words, 3)))
        return out

    return drawn


@needs_layer
def test_a_recipe_draws_new_philox_counters_on_every_replay(fake):  # type: ignore[no-untyped-def]
    """A call that drew Philox counters is replayed with a new draw each time: the offset
    words advance by the counters (to a multiple of 4), the rest of the launch stays."""
    reg = fake("drawn", drawing((0, 0, 0, 0), 64))  # the words' classes: those of the fake draws
    x = torch.randn(6)
    for _ in range(5):
        torch.ops.gems_native_test.drawn(x)
    stats = reg.stats()[0]
    assert (stats["python_calls"], stats["recipes"], stats["hits"]) == (2, 1, 3)
    log = layer.take_launch_log()
    offsets = [args[5] for *_, args in log]
    assert [args[:5] + args[6:] for *_, args in log] == [[x.data_ptr(), args[1], 6, 0, 0, 0, 3] for *_, args in log]
    assert offsets[1] - offsets[0] == offsets[2] - offsets[1] == 64 and offsets[0] % 64 == 0


@needs_layer
def test_a_replay_whose_draw_triton_would_specialize_otherwise_takes_python(fake):  # type: ignore[no-untyped-def]
    """The recorded offset word (8) is not divisible by 16, the fake draws' are: the kernel
    was compiled for the one, so each replay gives way to the Python path, drawing nothing
    (the Python path then draws what it would have drawn)."""

    def replayed_offset() -> int:  # the offset a recipe's next replay draws from
        good = fake("drawn", drawing((0, 0, 0, 0), 64))
        for _ in range(3):
            torch.ops.gems_native_test.drawn(torch.randn(6))
        good.close()
        (*_, args), = layer.take_launch_log()
        return args[5]

    before = replayed_offset()
    reg = fake("drawn", drawing((0, 0, 8, 0), 64))
    for _ in range(4):
        torch.ops.gems_native_test.drawn(torch.randn(6))
    stats = reg.stats()[0]
    assert (stats["recipes"], stats["hits"], stats["python_calls"]) == (1, 0, 4)
    assert layer.take_launch_log() == []
    reg.close()
    assert replayed_offset() == before + 64


def test_build_refuses_draws_it_cannot_repeat():
    x = torch.randn(4)
    out = torch.empty_like(x)
    words = (5, 0, 32, 0)
    launch = (DRAWN, (1, 1, 1), (x, out, 4, *words, 3))
    recipe = build(out, [(0, x)], 1, [out], [launch], [(words, 40)])
    assert [a for a in recipe[1][0][6] if a[0] == KINDS["philox"]] == [
        (KINDS["philox"], 0, part, (40, recorder._class(w))) for part, w in enumerate(words)]
    with pytest.raises(NotRepeatable, match="no launch reads"):
        build(out, [(0, x)], 1, [out], [launch], [((9, 9, 9, 9), 8)])
    with pytest.raises(NotRepeatable, match="more than one"):
        build(out, [(0, x)], 1, [out], [launch], [(words, 40), ((9, 9, 9, 9), 8)])
    constant = (_launcher(4321, "OOiiiii", (0, 1, 2, 3, 5, 6, 7)), (1, 1, 1), (x, out, 4, *words, 3))
    with pytest.raises(NotRepeatable, match="a constant"):
        build(out, [(0, x)], 1, [out], [constant], [(words, 40)])


@needs_layer
def test_dropout_replays_draw_as_the_python_path_does(monkeypatch):  # type: ignore[no-untyped-def]
    """native_dropout through the layer: every call draws a new mask (replays included on a
    GPU), the same seed gives the same masks, the output is input * mask / (1 - p)."""
    if gems_core.device == "cpu":
        monkeypatch.setenv("GEMS_NATIVE", "force")
    device = gems_core.device
    x = torch.randn(64, 96, device=device) + 3
    with gems_core.use_gems(include=["native_dropout"]):
        runs = []
        for _ in range(2):
            torch.manual_seed(5)
            runs.append([torch.native_dropout(x, 0.3, True) for _ in range(5)])
        stats = [s for s in gems_core.dispatch.native_stats() if s["op"] == "native_dropout"]
    for out, mask in runs[0]:
        assert mask.dtype == torch.bool and 0.6 < mask.float().mean().item() < 0.8
        torch.testing.assert_close(out.double(), x.double() * mask / 0.7, rtol=1e-6, atol=1e-6)
    masks = [mask for _, mask in runs[0]]
    assert all(not torch.equal(a, b) for i, a in enumerate(masks) for b in masks[i + 1:])
    assert all(torch.equal(a[1], b[1]) for a, b in zip(*runs))
    assert stats and stats[0]["python_calls"] + stats[0]["hits"] == 10
    if device == "cuda":
        assert stats[0]["hits"] >= 6
