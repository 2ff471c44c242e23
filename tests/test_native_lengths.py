"""Length-generic recipes of the native dispatch layer (gems_core.native.recorder.learn): a
decoding loop's cat and attention at a key/value length no earlier call had are served from
one recipe for the growing length, launching exactly what the Python path launches there.

Without a GPU the kernels' launches are stubbed (the layer's fake launches, and a launch
cache that hands the recorder a launcher instead of running the interpreter), so these tests
hold the replayed launches against the Python path's; the results themselves are held
against ATen in float64 with the interpreter running the kernels.
"""

from __future__ import annotations

import struct
import zlib

import pytest
import torch
import torch.nn.functional as F

import gems_core
from gems_conformance.routing import RouteWatch, implementations
from gems_core import native
from gems_core.launch_cache import LaunchCache, recording

layer = native.load(quiet=True)
needs_layer = pytest.mark.skipif(layer is None, reason=f"native layer not built: {native.problem()}")


def _code(value):  # type: ignore[no-untyped-def]
    if isinstance(value, torch.Tensor) or value is None:
        return "O"
    if isinstance(value, float):
        return "f"
    return "i" if -(2**31) <= int(value) < 2**31 else "l"


_launchers: dict = {}


def _stub_launch(self, grid, *args, config=None, options=None, **constexprs):  # type: ignore[no-untyped-def]
    """A launch that runs nothing: the recorder gets a launcher whose function number stands
    for the compiled kernel (the launch cache's key: what Triton specializes on)."""
    grid3 = (grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1)
    constexprs = {**(config.params if config is not None else {}), **constexprs}
    key = (self.name, self._key(args, constexprs, config, options))
    go = _launchers.get(key)
    if go is None:
        def go(*_args):  # type: ignore[no-untyped-def]
            raise AssertionError("a stubbed launcher is never called")

        codes = "".join(map(_code, args))
        go.native = (zlib.crc32(repr(key).encode()) | 1, 128, 0, codes, tuple(range(len(args))))
        _launchers[key] = go
    recording.launched = True
    if recording.native is not None:
        recording.native.append((go, grid3, (*args, *constexprs.values())))


@pytest.fixture
def stubbed(monkeypatch):  # type: ignore[no-untyped-def]
    if gems_core.device != "cpu":
        pytest.skip("launches are stubbed on the CPU interpreter only; on a device the real ones run")
    monkeypatch.setenv("GEMS_NATIVE", "force")
    monkeypatch.setenv("GEMS_AUTOTUNE", "0")
    monkeypatch.setattr(LaunchCache, "__call__", _stub_launch)
    native.clear()
    layer.set_fake_launches(True)
    layer.take_launch_log()
    try:
        yield
    finally:
        layer.set_fake_launches(False)
        layer.take_launch_log()
        native.clear()


def _stats(op: str) -> dict:
    return next(s for s in gems_core.dispatch.native_stats() if s["op"] == op and not s.get("gate"))


def _place(address: int, tensors: list[torch.Tensor]):  # type: ignore[no-untyped-def]
    for i, t in enumerate(tensors):  # (a view's storage may start before it)
        start = t.untyped_storage().data_ptr()
        if t.numel() and start <= address < start + t.untyped_storage().nbytes():
            return ("tensor", i, address - t.data_ptr())
    return ("other",) if address else ("null",)


def _normal(function: int, grid, values, codes: str, tensors):  # type: ignore[no-untyped-def]
    args = []
    for code, value in zip(codes, values):
        if code == "O":
            address = value.data_ptr() if isinstance(value, torch.Tensor) else int(value or 0)
            args.append(_place(address, tensors))
        elif code == "f":
            args.append(struct.pack("<f", value))
        else:
            args.append(int(value))
    return function, tuple(grid), tuple(args)


def _replayed(calls):  # type: ignore[no-untyped-def]
    """The launches the layer made (stubbed) since the last look, addresses as places among
    the tensors of their call: ``calls`` lists the tensors of each call, which made the same
    number of launches."""
    log = layer.take_launch_log()
    assert log and len(log) % len(calls) == 0
    each = len(log) // len(calls)
    out = []
    for index, (_op, function, grid, _block, _shared, _stream, args) in enumerate(log):
        codes = next(go.native[3] for go in _launchers.values() if go.native[0] == function)
        out.append(_normal(function, grid, args, codes, calls[index // each]))
    return [out[i * each:(i + 1) * each] for i in range(len(calls))]


def _python_path(fn, tensors, *args, **kwargs):  # type: ignore[no-untyped-def]
    """The launches gems' Python kernel makes for these arguments, and its result."""
    previous, recording.native = recording.native, []
    try:
        result = fn(*args, **kwargs)
        launches = recording.native
    finally:
        recording.native = previous
    places = [*tensors, result]
    return [_normal(go.native[0], grid, full, go.native[3], places) for go, grid, full in launches], result


@needs_layer
def test_cat_at_new_lengths_replays_what_the_python_path_launches(stubbed):  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    new = torch.randn(1, 3, 1, 8)
    cache = torch.randn(1, 3, 1, 8)
    generic = 0
    with torch.inference_mode(), gems_core.use_gems(include=["cat"]):
        for length in range(1, 50):  # through 1 and multiples of 16
            assert cache.shape[2] == length
            before = _stats("cat")
            grown = torch.cat([cache, new], dim=2)
            again = torch.cat([cache, new], dim=2)  # the next layer: the same key
            after = _stats("cat")
            served_generic = after["generic_hits"] - before["generic_hits"]
            if served_generic:
                from gems_core.ops import copying  # (imported once the runtime chose the interpreter)

                generic += 1
                expected, result = _python_path(copying.cat, [cache, new], [cache, new], 2)
                assert _replayed([[cache, new, grown], [cache, new, again]]) == [expected, expected]
                assert grown.shape == again.shape == result.shape and grown.stride() == result.stride()
            else:
                layer.take_launch_log()
            assert after["hits"] + after["python_calls"] - before["hits"] - before["python_calls"] == 2
            cache = torch.randn(grown.shape)  # (a stubbed launch wrote nothing)
        stats = _stats("cat")
        # an empty cache is another layout (no launch for it): not the generic recipe's
        assert torch.cat([torch.randn(1, 3, 0, 8), new], dim=2).shape == (1, 3, 1, 8)
        with pytest.raises(RuntimeError, match="Sizes of tensors must match"):  # ATen's errors
            torch.cat([torch.randn(1, 3, 60, 9), new], dim=2)
        with pytest.raises(RuntimeError, match="zero-dimensional"):
            torch.cat([torch.tensor(1.0), new], dim=2)
        assert _stats("cat")["generic_hits"] == stats["generic_hits"]
    # Python for the first lengths (and length 1, whose size-1 dim is another layout), then
    # one generic recipe for each specialization of the copy's arguments
    assert generic >= 40 and stats["generic_recipes"] >= 1


@needs_layer
def test_cat_of_non_contiguous_inputs_keeps_exact_recipes(stubbed):  # type: ignore[no-untyped-def]
    with torch.inference_mode(), gems_core.use_gems(include=["cat"]):
        for length in range(2, 10):
            cache = torch.randn(1, 8, length, 3).transpose(1, 3)  # (1, 3, length, 8), not contiguous
            new = torch.randn(1, 3, 1, 8)
            for _ in range(2):
                torch.cat([cache, new], dim=2)
        stats = _stats("cat")
    assert stats["generic_hits"] == 0 and stats["generic_recipes"] == 0 and stats["python_calls"] == 16


@needs_layer
def test_copy_into_a_growing_contiguous_tensor_replays_what_the_python_path_launches(stubbed):  # type: ignore[no-untyped-def]
    """Grouped-query attention's repeated keys (``expand`` then ``reshape``: a copy into a
    new contiguous tensor) at a new length each step."""
    generic = 0
    with torch.inference_mode(), gems_core.use_gems(include=["copy_"]):
        for length in range(1, 40):
            src = torch.randn(1, 2, 1, length, 8).expand(1, 2, 3, length, 8)
            before = _stats("copy_")
            outs = [torch.empty(1, 2, 3, length, 8).copy_(src) for _ in range(2)]
            after = _stats("copy_")
            if after["generic_hits"] > before["generic_hits"]:
                from gems_core.ops import copying

                generic += 1
                reference = torch.empty(1, 2, 3, length, 8)
                expected, _ = _python_path(copying.copy_, [reference, src], reference, src)
                assert _replayed([[out, src] for out in outs]) == [expected, expected], length
            else:
                layer.take_launch_log()
        # into a tensor that is not contiguous: exact recipes only
        served = _stats("copy_")["generic_hits"]
        for length in range(40, 46):
            torch.empty(1, 2, 3, 8, length).transpose(3, 4).copy_(torch.randn(1, 2, 3, length, 8))
        assert _stats("copy_")["generic_hits"] == served
    assert generic >= 30


@needs_layer
@pytest.mark.parametrize("mask", [False, True])
def test_decode_attention_at_new_lengths_replays_what_the_python_path_launches(stubbed, mask):  # type: ignore[no-untyped-def]
    torch.manual_seed(1)
    q = torch.randn(1, 4, 8, 1).transpose(2, 3)  # (1, 4, 1, 8), not contiguous
    generic = python = 0
    with torch.inference_mode(), gems_core.use_gems(include=["scaled_dot_product_attention"]):
        for length in range(1, 150):  # through 1, multiples of 16 and of the key block (64)
            k, v = torch.randn(1, 2, length, 8), torch.randn(1, 2, length, 8)
            m = torch.randn(1, 1, 1, length) if mask else None
            before = _stats("scaled_dot_product_attention")
            outs = [F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True) for _ in range(2)]
            after = _stats("scaled_dot_product_attention")
            if after["generic_hits"] > before["generic_hits"]:
                from gems_core.ops import attention

                generic += 1
                inputs = [q, k, v, *([m] if mask else [])]
                expected, result = _python_path(attention.scaled_dot_product_attention, inputs, q, k, v, m,
                                                enable_gqa=True)
                assert _replayed([[*inputs, out] for out in outs]) == [expected, expected], length
                assert outs[0].shape == result.shape and outs[0].stride() == result.stride()
            else:
                python += 1
                layer.take_launch_log()
        served = _stats("scaled_dot_product_attention")["generic_hits"]
        # no keys, or keys of another head dim: not the generic recipe's (ATen's answer)
        empty = torch.randn(1, 2, 0, 8)
        assert F.scaled_dot_product_attention(q, empty, empty, enable_gqa=True).shape == (1, 4, 1, 8)
        with pytest.raises(RuntimeError, match="Expected size"):
            F.scaled_dot_product_attention(q, torch.randn(1, 2, 100, 7), torch.randn(1, 2, 100, 8), enable_gqa=True)
        assert _stats("scaled_dot_product_attention")["generic_hits"] == served
    # the first lengths of each key block (and its last, EVEN_KEYS), and lengths where an
    # argument's specialization changes (multiples of 16) take the Python path
    assert generic >= 100 and python >= 10


def _recipe(x, extra=0):  # type: ignore[no-untyped-def]
    """A recipe as recorder.build gives it: an allocation of (x + 1, 4), one launch over
    4x elements in blocks of 64, its second pointer 16 bytes further a step."""
    from gems_core.native.recorder import KINDS

    numel = 4 * x + extra
    args = ((KINDS["pointer"], 0, 0, 0), (KINDS["pointer"], 1, 16 * x, 0), (KINDS["i32"], 0, 0, numel))
    return ((((x + 1, 4), (4, 1), torch.float32),), ((7, -(-numel // 64), 1, 1, 128, 0, args),), (1,))


def test_learn_needs_three_agreeing_recordings_and_keeps_every_fitting_grid():
    from gems_core.native.recorder import forget, learn

    forget()
    family = ("op", 1, 2, 3)
    assert learn(family, (5, 4), _recipe(5), [(64,)], []) is None
    assert learn(family, (6, 4), _recipe(6), [(64,)], []) is None
    pivot, low, high, entries, numbers = learn(family, (7, 4), _recipe(7), [(64,)], [])
    assert pivot == 0 and (low, high) == (-(2**62), 2**62)
    assert entries == ((0, 1, 0), (4, 0, 0))
    assert numbers[:4] == ((((1, 1, 1),), 4, 0), (((4, 0, 1),), 4, 0), (((4, 0, 1),), 4, 0), (((1, 0, 1),), 4, 2))
    grid = numbers[4]
    assert set(grid[0]) == {(1, 0, 1), (0, 4, 64)} and grid[1] == 2  # constant so far, or 4x / 64
    # the second pointer's offset (16 bytes a step), numel: 28, not 1, not a multiple of 16, int32
    assert numbers[7:] == ((((0, 0, 1),), 0, 0), (((0, 16, 1),), 0, 0), (((0, 4, 1),), 1, 0b100))
    # a recording off the formulas gives nothing, nor do the next two that include it
    assert learn(family, (8, 4), _recipe(8, extra=1), [(64,)], []) is None
    assert learn(family, (9, 4), _recipe(9), [(64,)], []) is None
    assert learn(family, (10, 4), _recipe(10), [(64,)], []) is None
    assert learn(family, (11, 4), _recipe(11), [(64,)], []) is not None
    # another kernel (function): learnt apart
    other = _recipe(12)
    assert learn(family, (12, 4), (other[0], ((8, *other[1][0][1:]),), other[2]), [(64,)], []) is None


def test_learn_within_declared_bounds_takes_two_recordings():
    from gems_core.native.recorder import forget, learn

    forget()
    family, bounds = ("op", 1), [(0, 2, 1, 100)]  # numel (the launch's argument 2) in 1 .. 100
    assert learn(family, (5, 4), _recipe(5), [(64,)], bounds) is None
    pivot, low, high, _, numbers = learn(family, (6, 4), _recipe(6), [(64,)], bounds)
    assert (pivot, low, high) == (0, 1, 25)
    assert numbers[9] == (((0, 4, 1),), 1, 0b100)
    assert learn(family, (7, 4), _recipe(7), [(64,)], [(0, 2, 1, 20)]) is None  # other bounds: apart
    assert learn(family, (8, 4), _recipe(8), [(64,)], [(0, 2, 60, 100)]) is None  # x would be 15 .. 25
    assert learn(family, (20, 4), _recipe(20), [(64,)], [(0, 2, 60, 100)])[1:3] == (15, 25)
    assert learn(("op", 2), (1, 4), _recipe(1), [(64,)], [(0, 2, 1, 3)]) is None
    assert learn(("op", 2), (2, 4), _recipe(2), [(64,)], [(0, 2, 1, 3)]) is None  # no x in bounds is left


@pytest.mark.parametrize("length", [1, 2, 15, 16, 17, 63, 64, 65])
def test_results_at_growing_lengths_equal_aten_in_float64(monkeypatch, length):  # type: ignore[no-untyped-def]
    """The kernels (interpreted) behind the layer at lengths around the specialization
    boundaries: cat of a contiguous cache and a non-contiguous new token, and decode attention."""
    if gems_core.device == "cpu":
        monkeypatch.setenv("GEMS_NATIVE", "force")
    device = gems_core.device
    torch.manual_seed(length)
    cache = torch.randn(1, 2, length, 16, device=device)
    new = torch.randn(1, 16, 1, 2, device=device).transpose(1, 3)  # (1, 2, 1, 16)
    q = torch.randn(1, 4, 1, 16, device=device)
    codes = implementations(("cat", "scaled_dot_product_attention"))
    with torch.inference_mode(), gems_core.use_gems(include=["cat", "scaled_dot_product_attention"]):
        with RouteWatch(codes["cat"]) as joined:
            grown = torch.cat([cache, new], dim=2)
        with RouteWatch(codes["scaled_dot_product_attention"]) as attended:
            out = F.scaled_dot_product_attention(q, grown, grown * 1, enable_gqa=True)
    assert joined.hit and attended.hit, "gems did not serve the calls"
    expected = torch.cat([cache.double(), new.double()], dim=2)
    assert torch.equal(grown.double(), expected)
    reference = F.scaled_dot_product_attention(q.double(), expected, expected, enable_gqa=True)
    torch.testing.assert_close(out.double(), reference, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(gems_core.device == "cpu", reason="the interpreter's calls are never replayed")
def test_a_growing_cache_on_the_device_matches_aten():
    """A decoding loop on the device: two layers' caches grow by one token a step, and every
    result (from Python, exact recipes or length-generic ones) equals ATen's in float64."""
    if native.load(quiet=True) is None:
        pytest.skip(f"native layer not built: {native.problem()}")
    device = gems_core.device
    torch.manual_seed(3)
    caches = [[torch.randn(1, 2, 5, 16, device=device) for _ in range(2)] for _ in range(2)]
    q = torch.randn(1, 16, 1, 4, device=device).transpose(1, 3)  # (1, 4, 1, 16), not contiguous
    with torch.inference_mode(), gems_core.use_gems(include=["cat", "scaled_dot_product_attention"]):
        for _ in range(150):  # through multiples of 16 and of the key blocks
            for layer_caches in caches:
                new = torch.randn(1, 2, 1, 16, device=device)
                k, v = (torch.cat([c, new], dim=2) for c in layer_caches)
                out = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                reference = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), enable_gqa=True)
                assert torch.equal(k.double(), torch.cat([layer_caches[0].double(), new.double()], dim=2))
                torch.testing.assert_close(out.double(), reference, rtol=2e-5, atol=2e-5)
                layer_caches[:] = [k, v]
        stats = {s["op"]: s for s in gems_core.dispatch.native_stats() if not s.get("gate")}
    assert stats["cat"]["generic_hits"] > 100 and stats["scaled_dot_product_attention"]["generic_hits"] > 100


def _impl(name: str):  # type: ignore[no-untyped-def]
    from gems_core.registry import all_impls

    return all_impls()[name].fn


#: elementwise calls a decoding step makes once at each new length: (overload, the call,
#: its tensors at a length); contiguous operands, broadcast by size-1 dims
_POINTWISE = [
    ("add.Tensor", torch.add, lambda n: [torch.randn(1, 3, n), torch.randn(1, 1, n)]),
    ("mul.Tensor", torch.mul, lambda n: [torch.randn(1, n, 8), torch.randn(8)]),
    ("eq.Scalar", lambda t: t == 1, lambda n: [torch.randint(0, 3, (1, n))]),
    # the last token of a growing (1, n) sequence: a (1, 1) view whose row stride is n
    ("add.Tensor", torch.add, lambda n: [torch.randint(0, 9, (1, n + 1))[:, -1:], torch.randint(0, 9, (1, 1))]),
]


@needs_layer
@pytest.mark.parametrize("case", range(len(_POINTWISE)))
def test_pointwise_at_new_lengths_replays_what_the_python_path_launches(stubbed, case):  # type: ignore[no-untyped-def]
    """One call a length, as a decoding step makes it: the layer records a new key of a
    family it met at once, and serves later lengths from the learnt recipe."""
    overload, call, make = _POINTWISE[case]
    torch.manual_seed(case)
    generic = 0
    with torch.inference_mode(), gems_core.use_gems(include=[overload]):
        for length in range(1, 70):  # through 1 and multiples of 16
            inputs = make(length)
            before = _stats(overload)
            out = call(*inputs)
            after = _stats(overload)
            assert after["hits"] + after["python_calls"] - before["hits"] - before["python_calls"] == 1
            if after["generic_hits"] > before["generic_hits"]:
                generic += 1
                args = (*inputs, 1) if overload == "eq.Scalar" else inputs
                expected, result = _python_path(_impl(overload), inputs, *args)
                assert _replayed([[*inputs, out]]) == [expected], length
                assert out.shape == result.shape and out.stride() == result.stride() and out.dtype == result.dtype
            else:
                layer.take_launch_log()
    # Python for the first lengths of each specialization (a size or stride equal to 1 or
    # a multiple of 16, 16-byte alignment), then the learnt recipe
    assert generic >= 40, generic


@needs_layer
def test_pointwise_of_non_contiguous_operands_keeps_exact_recipes(stubbed):  # type: ignore[no-untyped-def]
    with torch.inference_mode(), gems_core.use_gems(include=["add.Tensor"]):
        for length in range(2, 12):
            torch.randn(length, 3).t() + torch.randn(3, length)  # (3, length), not contiguous
        stats = _stats("add.Tensor")
    assert stats["generic_hits"] == 0 and stats["generic_recipes"] == 0 and stats["python_calls"] == 10
    # the family's second key was recorded on its first call; that recording did not opt in,
    # so the next new keys are not recorded before they come again
    assert stats["recorded"] == 1


@needs_layer
def test_pointwise_declares_only_a_call_it_launches_alone(stubbed):  # type: ignore[no-untyped-def]
    """An elementwise kernel vouches for its own launch: a call that launches it and then
    another kernel gives an exact recipe, not a length-generic one."""
    from gems_core.native.recorder import forget, record_call

    forget()
    add, mul = _impl("add.Tensor"), _impl("mul.Tensor")
    with torch.inference_mode(), gems_core.use_gems(include=["add.Tensor"]):
        x = torch.randn(3, 8)
        operands = [(0, x), (1, x)]
        _, alone = record_call(add, (x, x), {}, operands, 2, family=((1,), (3, 8, 8, 1)), op="alone")
        _, both = record_call(lambda a, b: mul(add(a, b), b), (x, x), {}, operands, 2,
                              family=((2,), (3, 8, 8, 1)), op="both")
    # an opt-in whose formulas are not known yet: a fourth part, None
    assert len(alone) == 4 and alone[3] is None and len(alone[1]) == 1
    assert len(both) == 3 and len(both[1]) == 2


@pytest.mark.parametrize("length", [1, 2, 15, 16, 17, 63, 64, 65])
def test_pointwise_results_at_growing_lengths_equal_aten_in_float64(monkeypatch, length):  # type: ignore[no-untyped-def]
    """The elementwise kernels (interpreted on the CPU) behind the layer at lengths around
    the specialization boundaries, against ATen in float64."""
    if gems_core.device == "cpu":
        monkeypatch.setenv("GEMS_NATIVE", "force")
    device = gems_core.device
    torch.manual_seed(length)
    x = torch.randn(1, 3, length, device=device)
    bias = torch.randn(1, 1, length, device=device)
    positions = torch.randint(0, 3, (1, length), device=device)
    codes = implementations(("add.Tensor", "eq.Scalar"))
    with torch.inference_mode(), gems_core.use_gems(include=["add.Tensor", "eq.Scalar"]):
        with RouteWatch(codes["add.Tensor"]) as added:
            total = x + bias
        with RouteWatch(codes["eq.Scalar"]) as compared:
            mask = positions == 1
    assert added.hit and compared.hit, "gems did not serve the calls"
    torch.testing.assert_close(total.double(), x.double() + bias.double(), rtol=1e-6, atol=1e-6)
    assert torch.equal(mask, positions.double() == 1)


_lib = torch.library.Library("gems_lengths_test", "DEF")
_lib.define("grow(Tensor x) -> Tensor")


def _grow_kernel(generic: bool, first_calls_impure: bool):  # type: ignore[no-untyped-def]
    """A Python kernel that launches one (fake) kernel over ``x``'s elements into a new
    tensor; ``generic``: it opts in to length-generic recipes; ``first_calls_impure``: the
    first call of each shape does work outside a kernel (as a kernel allocating a buffer
    it keeps does), which later calls do not."""
    def go(*_args):  # type: ignore[no-untyped-def]
        raise AssertionError("a fake launcher is never called")

    go.native = (4321, 128, 0, "OOi", (0, 1, 2))
    shapes: set = set()

    def grow(x):  # type: ignore[no-untyped-def]
        out = torch.empty_like(x)
        if first_calls_impure and x.shape not in shapes:
            shapes.add(x.shape)
            recording.impure = True
        if recording.native is not None:
            recording.native.append((go, (x.numel(), 1, 1), (x, out, x.numel())))
            if generic:
                recording.generic = []
        return out

    return grow


@pytest.fixture
def grow_op():  # type: ignore[no-untyped-def]
    from gems_core.native.recorder import forget, record_call

    forget()
    layer.set_fake_launches(True)
    layer.take_launch_log()
    registrations = []

    def register(**how):  # type: ignore[no-untyped-def]
        reg = layer.Registration("gems_lengths_test", "CPU")
        reg.impl("grow", _grow_kernel(**how), record_call, 64)
        registrations.append(reg)
        return reg

    yield register
    for reg in registrations:
        reg.close()
    layer.set_fake_launches(False)
    layer.take_launch_log()


@needs_layer
def test_a_new_key_of_a_family_met_before_is_recorded_on_its_first_call(grow_op):  # type: ignore[no-untyped-def]
    reg = grow_op(generic=True, first_calls_impure=False)
    for length in range(3, 7):
        torch.ops.gems_lengths_test.grow(torch.randn(length, 3))
    stats = reg.stats()[0]
    # the first key ran Python; the next three were recorded at once and gave the formulas
    assert (stats["python_calls"], stats["recorded"], stats["generic_recipes"]) == (4, 3, 1)
    for length in range(7, 16):  # (3 * 16 elements would be another specialization)
        x = torch.randn(length, 3)
        out = torch.ops.gems_lengths_test.grow(x)
        (_, function, grid, _, _, _, args), = layer.take_launch_log()
        assert (function, grid, args[2]) == (4321, (3 * length, 1, 1), 3 * length)
        assert args[:2] == [x.data_ptr(), out.data_ptr()] and out.shape == x.shape
    stats = reg.stats()[0]
    assert stats["python_calls"] == 4 and stats["generic_hits"] == 9


@needs_layer
def test_a_family_whose_recording_did_not_opt_in_waits_for_a_keys_second_call(grow_op):  # type: ignore[no-untyped-def]
    reg = grow_op(generic=False, first_calls_impure=False)
    for length in range(3, 9):
        torch.ops.gems_lengths_test.grow(torch.randn(length, 4))
    assert reg.stats()[0]["recorded"] == 1  # the family's second key only
    for _ in range(3):
        torch.ops.gems_lengths_test.grow(torch.randn(8, 4))
    stats = reg.stats()[0]
    assert (stats["recorded"], stats["hits"], stats["generic_hits"]) == (2, 2, 0)


@needs_layer
def test_a_first_call_that_cannot_be_recorded_does_not_refuse_its_key(grow_op):  # type: ignore[no-untyped-def]
    reg = grow_op(generic=True, first_calls_impure=True)
    torch.ops.gems_lengths_test.grow(torch.randn(3, 4))
    for _ in range(3):  # recorded on its first call (refused), then its second (kept)
        torch.ops.gems_lengths_test.grow(torch.randn(5, 4))
    stats = reg.stats()[0]
    assert (stats["refused"], stats["recorded"], stats["hits"]) == (0, 1, 1)
