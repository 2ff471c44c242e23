"""Turning one call of a gems Python kernel into a recipe the native layer can repeat.

:func:`record_call` runs the kernel while watching it: every ATen operation it makes (a
``TorchDispatchMode``) and every compiled-kernel launch (``launch_cache.recording``). A call
is *repeatable* when all it did was allocate tensors, take views and launch compiled
kernels whose arguments are numbers or addresses inside the call's operands, its returned
outputs or buffers it allocated. Its recipe then lists

- ``allocations``: ``(sizes, strides, dtype)`` of each returned output and scratch buffer;
- ``launches``: ``(function, grid_x, grid_y, grid_z, block, shared, args)`` with each
  argument ``(kind, slot, byte_offset, value)`` (kinds: :data:`KINDS`); a TMA tensor map
  (launch code ``T``, a :class:`TensorMap` value) is addressed like a pointer and carries
  the rest of its encoding as its value, and the native layer encodes it on every launch;
- ``returns``: the slot of each returned tensor,
- (in ``launches``) the four int32 words of a Philox draw the call made from its device's
  default generator (``gems_core.ops.random.philox_state`` notes each in
  ``recording.philox``: seed low and high, offset low and high) as arguments
  ``(KINDS["philox"], draw, word, (counters, specialization))``: the layer draws
  ``counters`` anew on every replay, as the Python path would, and takes the Python path
  for a call whose words Triton would specialize otherwise (equal to 1, divisible by 16);
- and, where the op declares its calls length-generic (``recording.generic``), a fourth
  part: the recipe's integers as formulas in one size of the key (:func:`learn`), or None
  until the family's recordings give them (the layer then records the family's next new
  key on its first call rather than its second),

where slots ``0 .. n-1`` are the call's stack arguments, ``n + i`` its allocation ``i`` and
``2**20 + p * 1024 + j`` element ``j`` of list argument ``p`` (``Tensor[]``, ``Tensor?[]``;
dispatch_layer.cpp's kListSlot and kListWidth: the C++ side passes list elements to
:func:`record_call` at those slots, so nothing here decodes them).
A launch may also address a *resident* buffer (``launch_cache.keep_resident``): memory a
kernel keeps across calls, such as attention's merge counters, which lives for the rest of
the process and is passed as its address. Anything else (a host read of a result, an ATen
fallback, an op on the data outside a kernel, benchmarking of configs, an output that is a
view into a larger buffer) gives no recipe, and the call keeps the Python path.

The launch spec of a compiled kernel (``(function, block, shared, codes)``) is attached to
its launcher by :func:`gems_core.launch_cache.torch_launcher` (``launcher.native``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .. import logs, tuning
from ..launch_cache import is_resident, recording

#: argument kinds, as dispatch_layer.cpp numbers them
KINDS = {"pointer": 0, "null": 1, "i32": 2, "i64": 3, "u32": 4, "u64": 5, "f32": 6, "f64": 7,
         "i8": 8, "i16": 9, "u8": 10, "u16": 11, "tensor_map": 12, "philox": 13}

#: PyTorch's launcher argument codes (see launch_cache.torch_launcher) -> kinds
_CODE_KINDS = {"i": "i32", "l": "i64", "b": "i8", "h": "i16", "I": "u32", "K": "u64", "B": "u8",
               "H": "u16", "f": "f32", "d": "f64"}


class TensorMap(NamedTuple):
    """A TMA tensor map (CUDA's ``CUtensorMap``, passed to a kernel by value) as a launcher
    reports it: the address it maps and the rest of ``cuTensorMapEncodeTiled``'s arguments,
    dimensions innermost first (element strides 1, no interleave). The address becomes a
    slot and offset like a pointer's; the rest must follow from the call's key."""

    address: int
    data_type: int  # CUtensorMapDataType
    swizzle: int  # CUtensorMapSwizzle
    fill: int  # CUtensorMapFloatOOBfill
    promotion: int  # CUtensorMapL2promotion
    dims: tuple[int, ...]
    strides: tuple[int, ...]  # bytes, of dims 1 .. rank - 1
    box: tuple[int, ...]

    def encoding(self) -> tuple[Any, ...]:
        return (self.data_type, self.swizzle, self.fill, self.promotion, self.dims, self.strides, self.box)


_ALLOCATIONS = frozenset({"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided"})
#: operations that neither read nor write data (beyond views, which are told apart by schema)
_METADATA = frozenset({"sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "dim",
                       "is_contiguous", "is_strides_like_format", "is_non_overlapping_and_dense",
                       # answers that follow from what a key holds (sizes, strides, aliasing
                       # between operands, dtypes, the kinds of numbers): the overlap checks
                       # of writing ops and type promotion with a number
                       "_debug_has_internal_overlap", "result_type"})


_log = logs.get("native")


class NotRepeatable(Exception):
    """The call did something a recipe cannot repeat."""


class _Observer(TorchDispatchMode):
    """Sees every ATen operation the kernel's Python makes."""

    def __init__(self, device_type: str) -> None:
        super().__init__()
        self.device_type = device_type
        self.allocated: list[torch.Tensor] = []
        self.other: str | None = None

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        packet = func.overloadpacket.__name__
        if packet in _ALLOCATIONS:
            self.allocated.append(out)
        elif not (func.is_view or packet in _METADATA) and self.other is None:
            # host arithmetic on CPU tensors (a constant rounded to a dtype) cannot touch the
            # call's device memory; anything involving a tensor on the call's device can
            if any(t.device.type == self.device_type for t in _tensors((args, kwargs, out))):
                self.other = str(func)
        return out


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def record_call(
    kernel: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    tensors: Sequence[tuple[int, torch.Tensor]],
    count: int,
    family: tuple[tuple[int, ...], tuple[int, ...]] | None = None,
    op: str = "",
) -> tuple[Any, tuple[Any, ...] | bool | None]:
    """``kernel(*args, **kwargs)``, and its recipe (None where the call is not repeatable,
    False where it is not yet: ATen served it while its kernel compiles in the background,
    or it benchmarked configs).
    ``tensors`` are the call's tensor arguments with their stack positions; ``count`` is
    the number of stack arguments; ``family`` is the call's key with its tensors' sizes and
    strides left out, and those sizes and strides (:func:`learn`); ``op`` names the op in
    the log of refused calls."""
    if not tuning.cacheable():
        _refused(op, "configs are forced by a tool")
        return kernel(*args, **kwargs), None
    # a wrapped number (a Python scalar ATen made a 0-d tensor) reaches Python as a number
    tensors = [(i, t) for i, t in tensors if isinstance(t, torch.Tensor)]
    benchmarks = tuning.benchmarks_run
    device_type = next((t.device.type for _, t in tensors if t.device.type != "cpu"), "cpu")
    observer = _Observer(device_type)
    previous = (recording.native, recording.impure, recording.deferred,
                getattr(recording, "generic", None), getattr(recording, "generic_launches", None), recording.philox)
    recording.native, recording.impure, recording.deferred, recording.generic = [], False, False, None
    recording.generic_launches, recording.philox = None, []
    unhook = _watch_foreign_launches()
    try:
        with observer:
            result = kernel(*args, **kwargs)
        launches, impure, deferred = recording.native, recording.impure, recording.deferred
        bounds, draws = recording.generic, recording.philox
        if recording.generic_launches not in (None, len(launches)):
            bounds = None  # declared for the launches made before others were: not for the call
    finally:
        unhook()
        (recording.native, recording.impure, recording.deferred, recording.generic,
         recording.generic_launches, recording.philox) = previous
    if deferred:
        _refused(op, "not yet: ATen served it while its kernel compiles in the background")
        return result, False
    if tuning.benchmarks_run != benchmarks:
        # a key's first call may tune (the layer records some first calls): a later one will not
        _refused(op, "not yet: it benchmarked configs")
        return result, False
    if impure or observer.other is not None:
        if impure:
            _refused(op, "ATen, or a launch gems does not record, served part of it")
        else:
            _refused(op, f"it ran {observer.other} outside a kernel")
        return result, None
    try:
        recipe = build(result, tensors, count, observer.allocated, launches, draws)
    except NotRepeatable as exc:
        _refused(op, str(exc))
        return result, None
    if bounds is None or family is None or draws:
        return result, recipe
    spans = [_extent(t) for _, t in tensors] + [_extent(a) for a in observer.allocated if isinstance(a, torch.Tensor)]
    if max(spans, default=0) >= _LARGE:
        return result, recipe
    positions = []  # the bounds' kernel parameters as positions among the recorded arguments
    for launch, parameter, least, most in bounds:
        keep = launches[launch][0].native[4] if launch < len(launches) else ()
        if keep is not None and parameter not in keep:
            return result, recipe  # Triton made it a constant (equal to 1): nothing to bound
        positions.append((launch, parameter if keep is None else keep.index(parameter), least, most))
    generic = learn((op, *family[0]), family[1], recipe, [_constants(go, full) for go, _, full in launches], positions)
    if generic is None:
        return result, (*recipe, None)  # opted in: the family's next new keys are recorded at once
    if _log.isEnabledFor(logging.DEBUG):
        low, high = generic[1:3]
        within = f" in {low} .. {high}" if -_UNBOUNDED < low or high < _UNBOUNDED else ""
        _log.debug("%s: a length-generic recipe, for sizes and strides that follow one size%s",
                   op or "a call", within)
    return result, (*recipe, generic)


def _refused(op: str, reason: str) -> None:
    if _log.isEnabledFor(logging.DEBUG):
        logs.once(_log, ("native", op, reason), "%s: no native replay, %s", op or "a call", reason)


def _foreign_launch(*_args: Any, **_kwargs: Any) -> None:
    recording.impure = True


#: launchers ignore this hook when deciding whether launch hooks are in use
_foreign_launch.gems_marker = True  # type: ignore[attr-defined]


def _watch_foreign_launches() -> Callable[[], None]:
    """Mark the call impure if a kernel launches through Triton's own launcher (a kernel
    gems did not launch through its launch cache, whose launches are not recorded); returns
    the undo."""
    try:
        import triton

        runtime_knobs = triton.knobs.runtime
        hooks = runtime_knobs.launch_enter_hook
    except AttributeError:
        return lambda: None
    if hasattr(hooks, "add") and hasattr(hooks, "remove"):  # a chain of hooks
        hooks.add(_foreign_launch)
        return lambda: hooks.remove(_foreign_launch)
    if hooks is None:
        runtime_knobs.launch_enter_hook = _foreign_launch

        def undo() -> None:
            if runtime_knobs.launch_enter_hook is _foreign_launch:
                runtime_knobs.launch_enter_hook = None

        return undo
    return lambda: None  # someone else's hook: the explicit marks still apply


def _extent(t: torch.Tensor) -> int:
    """Bytes from ``t``'s data pointer to one past its last element."""
    if t.numel() == 0:
        return 0
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()) if size)
    return (last + 1) * t.element_size()


def build(
    result: Any,
    tensors: Sequence[tuple[int, torch.Tensor]],
    count: int,
    allocated: Sequence[torch.Tensor],
    launches: Sequence[tuple[Any, tuple[int, int, int], tuple[Any, ...]]],
    draws: Sequence[tuple[tuple[int, int, int, int], int]] = (),
) -> tuple[Any, ...]:
    """The recipe of a watched call (raises :class:`NotRepeatable`); ``draws``: the call's
    Philox draws, (words, counters) each."""
    if isinstance(result, torch.Tensor):
        returned: list[Any] = [result]
    elif isinstance(result, (tuple, list)) and result and all(isinstance(r, torch.Tensor) for r in result):
        returned = list(result)
    else:
        raise NotRepeatable("returns something other than tensors")
    device = next((t.device for _, t in tensors if t.device.type != "cpu" or t.dim()), None)
    if device is None:
        device = next((t.device for _, t in tensors), None)
    allocations: list[tuple[Any, ...]] = []
    # (slot, tensor) candidates for addresses: operands, then outputs, then scratch
    operands = [(position, t) for position, t in tensors]
    outputs: list[tuple[int, torch.Tensor]] = []
    returns: list[int] = []
    allocated_storages = {a.untyped_storage().data_ptr(): a for a in allocated if isinstance(a, torch.Tensor)}
    for r in returned:
        slot = next((position for position, t in operands if t is r), None)
        if slot is None:
            slot = next((s for s, t in outputs if t is r), None)
        if slot is None:
            storage = r.untyped_storage()
            if (device is not None and r.device != device) or storage.data_ptr() not in allocated_storages:
                raise NotRepeatable("returns a tensor it did not allocate")
            if r.storage_offset() != 0 or (r.numel() and _extent(r) != storage.nbytes()):
                raise NotRepeatable("returns a view into a larger buffer")
            if any(o.untyped_storage().data_ptr() == storage.data_ptr() and r.numel() for _, o in outputs):
                raise NotRepeatable("returns two views of one buffer")
            slot = count + len(allocations)
            allocations.append((tuple(r.shape), tuple(r.stride()), r.dtype))
            outputs.append((slot, r))
        returns.append(slot)
    output_storages = {o.untyped_storage().data_ptr() for _, o in outputs if o.numel()}
    scratch = [a for a in allocated if isinstance(a, torch.Tensor) and a.numel()
               and a.untyped_storage().data_ptr() not in output_storages]
    scratch_slots: dict[int, int] = {}

    def slot_of(address: int) -> tuple[int, int]:
        for slot, t in (*operands, *outputs):
            if t.numel() and t.data_ptr() == address:
                return slot, 0
        for slot, t in (*operands, *outputs):
            if t.numel() and t.data_ptr() <= address < t.data_ptr() + _extent(t):
                return slot, address - t.data_ptr()
        for index, a in enumerate(scratch):
            base = a.untyped_storage().data_ptr()
            if base <= address < base + a.untyped_storage().nbytes():
                if a.storage_offset() != 0 or _extent(a) != a.untyped_storage().nbytes():
                    raise NotRepeatable("scratch is a view into a larger buffer")
                if index not in scratch_slots:
                    scratch_slots[index] = count + len(allocations)
                    allocations.append((tuple(a.shape), tuple(a.stride()), a.dtype))
                return scratch_slots[index], address - a.data_ptr()
        raise NotRepeatable("a launch reads or writes memory the call does not own")

    if len(draws) > 1:
        # a replay whose draw Triton would specialize otherwise gives way to Python before
        # it draws: with two, the first would be drawn already
        raise NotRepeatable("more than one Philox draw")
    steps = []
    read = set()  # the draws some launch reads
    for go, grid, args in launches:
        spec = getattr(go, "native", None)
        if spec is None:
            raise NotRepeatable("a launch the native layer cannot make")
        function, block, shared, codes, keep = spec
        positions = list(keep) if keep is not None else list(range(min(len(args), len(codes))))
        words = _philox_words(args, draws, positions)
        read.update(draw for draw, _ in words.values())
        values = [args[i] for i in positions]
        values += [None] * (len(codes) - len(values))  # the launcher's trailing scratch pointers
        described = []
        for index, (code, value) in enumerate(zip(codes, values)):
            word = words.get(positions[index]) if index < len(positions) else None
            if word is not None:
                if code != "i":
                    raise NotRepeatable("a Philox word passed as other than an int32")
                draw, part = word
                described.append((KINDS["philox"], draw, part, (draws[draw][1], _class(value))))
                continue
            if code == "T":
                if not isinstance(value, TensorMap):
                    raise NotRepeatable("a tensor map argument the launcher did not describe")
                slot, offset = slot_of(value.address)
                described.append((KINDS["tensor_map"], slot, offset, value.encoding()))
            elif code == "O":
                if value is None:
                    described.append((KINDS["null"], 0, 0, 0))
                    continue
                address = value.data_ptr() if isinstance(value, torch.Tensor) else int(value)
                if address == 0:
                    described.append((KINDS["null"], 0, 0, 0))
                    continue
                if is_resident(address):  # the same memory on every call: a number
                    described.append((KINDS["u64"], 0, 0, address))
                    continue
                slot, offset = slot_of(address)
                described.append((KINDS["pointer"], slot, offset, 0))
            else:
                kind = _CODE_KINDS.get(code)
                if kind is None or isinstance(value, (torch.Tensor, TensorMap)):
                    raise NotRepeatable(f"a launch argument of type {code!r}")
                number = float(value) if kind in ("f32", "f64") else int(value)
                described.append((KINDS[kind], 0, 0, number))
        steps.append((function, grid[0], grid[1], grid[2], block, shared, tuple(described)))
    if len(read) != len(draws):
        raise NotRepeatable("a Philox draw no launch reads")
    return (tuple(allocations), tuple(steps), tuple(returns))


def _philox_words(args: Sequence[Any], draws: Sequence[tuple[tuple[int, int, int, int], int]],
                  kept: Sequence[int]) -> dict[int, tuple[int, int]]:
    """Argument position -> (draw, word) for each Philox draw a launch's arguments carry, as
    four consecutive integers (each passed: Triton made none a constant)."""
    found: dict[int, tuple[int, int]] = {}
    numbers = [a if isinstance(a, int) and not isinstance(a, bool) else None for a in args]
    for draw, (words, _) in enumerate(draws):
        for start in range(len(numbers) - 3):
            if tuple(numbers[start:start + 4]) == tuple(words):
                if not set(range(start, start + 4)) <= set(kept):
                    raise NotRepeatable("Triton made a Philox word a constant")
                found.update({start + part: (draw, part) for part in range(4)})
                break
    return found


# ---------------------------------------------------------------------------------------
# Length-generic recipes: one recipe for every length of a growing dimension.
#
# A decoding loop meets a new key/value length at every step, so an exact key is never seen
# again by a later step. An op whose Python path opts in (``recording.generic``: a list,
# maybe empty, of ``(launch, kernel parameter, low, high)`` bounds on integer arguments within
# which its host decisions stay the same; ``recording.generic_launches``, where set, the
# number of launches the declaration covers, which must be all of the call's) promises that
# over calls differing only in tensor sizes and strides, inside those bounds: its launches,
# kernels, argument kinds and numbers other than integers stay the same; its integers
# (arguments, byte offsets, the sizes and strides of what it allocates) are affine in one
# size; and each grid dimension is constant or the ceiling of an integer argument over one
# of the launch's constexprs (or 1). The recordings
# of such calls (keys equal but for sizes and strides) give each number's formula in one of
# those sizes, *x*: two recordings inside declared bounds, else three (the formulas of the
# first two checked against the third). The native layer
# then serves every later call whose sizes and strides follow the same formulas by the
# formulas, while Triton would pick the same compiled kernel: each integer argument keeps
# the recording's specialization (equal to 1, divisible by 16, within int32), each varying
# size its being 0 or 1; where several grid formulas fit the recordings, all must agree.

#: recordings kept per family (op and key without sizes) and families kept
_SAMPLES = 3
_FAMILIES = 1024
#: calls touching this many bytes or more are left out (kernels switch to 64-bit offsets)
_LARGE = 2**31
_UNBOUNDED = 2**62
_families: dict[tuple[Any, ...], list[tuple[tuple[int, ...], list[int]]]] = {}


def forget() -> None:
    """Forget the recordings kept for length-generic recipes (recipes were cleared)."""
    _families.clear()


def _constants(go: Any, full: Sequence[Any]) -> tuple[int, ...]:
    """The integer constexprs a launch was compiled with (candidate grid divisors)."""
    _, _, _, codes, keep = go.native
    kept = set(range(len(codes)) if keep is None else keep)
    return tuple(v for i, v in enumerate(full)
                 if i not in kept and isinstance(v, int) and not isinstance(v, bool) and v > 1)


def _zero_or_one(value: int) -> int:
    return (value == 0) | (value == 1) << 1


def _numbers(recipe: tuple[Any, ...]) -> tuple[tuple[Any, ...], list[int], list[tuple[Any, ...]]]:
    """(structure, numbers, roles) of a recipe: what must be equal between recordings, its
    integers in the order the native layer reads them (allocations' sizes and strides, then
    per launch its grid and each pointer's offset or integer's value), and each one's role:
    ("size",), ("grid", launch, dim), ("int", launch, argument) or ("offset",)."""
    allocations, steps, returns = recipe
    structure: list[Any] = [returns]
    numbers: list[int] = []
    roles: list[tuple[Any, ...]] = []
    for sizes, strides, dtype in allocations:
        structure.append((len(sizes), dtype))
        numbers += [*sizes, *strides]
        roles += [("size",)] * (2 * len(sizes))
    for index, (function, gx, gy, gz, block, shared, args) in enumerate(steps):
        structure.append((function, block, shared))
        numbers += [gx, gy, gz]
        roles += [("grid", index, 0), ("grid", index, 1), ("grid", index, 2)]
        for position, (kind, slot, offset, value) in enumerate(args):
            if kind in (KINDS["pointer"], KINDS["tensor_map"]):
                structure.append((kind, slot, value))
                numbers.append(offset)
                roles.append(("offset",))
            elif kind in (KINDS["null"], KINDS["f32"], KINDS["f64"], KINDS["u64"]):
                structure.append((kind, value))  # nulls, floats and resident addresses stay
            else:
                structure.append((kind,))
                numbers.append(value)
                roles.append(("int", index, position))
    return tuple(structure), numbers, roles


def _affine(xs: Sequence[int], values: Sequence[int]) -> tuple[int, int, int] | None:
    """(a, b, 1) with value = a + b * x at every sample (b an integer), or None."""
    dx, dv = xs[1] - xs[0], values[1] - values[0]
    if dv % dx:
        return None
    b = dv // dx
    a = values[0] - b * xs[0]
    return (a, b, 1) if all(a + b * x == v for x, v in zip(xs, values)) else None


def _evaluate(form: tuple[int, int, int], x: int) -> int:
    a, b, c = form
    return -(-(a + b * x) // c)


def _class(value: int) -> int:
    """What Triton specializes an integer argument on: 1, divisible by 16, within int32."""
    return (value == 1) | (value % 16 == 0) << 1 | (-(2**31) <= value < 2**31) << 2


def learn(family: tuple[Any, ...], entries: tuple[int, ...], recipe: tuple[Any, ...],
          constants: Sequence[tuple[int, ...]], bounds: Sequence[tuple[int, int, int, int]]) -> tuple[Any, ...] | None:
    """The length-generic form of this call's recipe from the last recordings of its family
    (None until three agree): ``(pivot, x_low, x_high, entries, numbers)``, ``pivot`` the
    position of *x* among the key's sizes and strides (``entries``), ``entries`` each one's
    ``(a, b, zero_or_one)``, ``numbers`` each number's ``(formulas, guard, expected)`` with
    formulas ``(a, b, c)`` for ceil((a + b x) / c). Guards: 0 none, 1 an integer argument's
    specialization equals ``expected`` (:func:`_class`), 2 a grid's x is 1 .. 2**31 - 1, 3
    its y or z 1 .. 65535, 4 a size's being 0 or 1 equals ``expected``'s."""
    structure, numbers, roles = _numbers(recipe)
    # recordings that launch other compiled kernels (another specialization of an argument)
    # or declare other bounds are learnt apart
    kind = (family, structure, tuple(constants), tuple(bounds))
    samples = _families.get(kind)
    if samples is None:
        if len(_families) >= _FAMILIES:
            _families.clear()
        samples = _families[kind] = []
    samples.append((entries, numbers))
    del samples[:-_SAMPLES]
    # bounds declare where the formulas hold: two recordings inside them give the formulas;
    # without, a third checks those of the first two
    needed = 2 if bounds else _SAMPLES
    if len(samples) < needed or any(len(s[0]) != len(entries) or len(s[1]) != len(numbers) for s in samples):
        return None
    samples = samples[-needed:]
    moved = [i for i in range(len(entries)) if len({s[0][i] for s in samples}) > 1]
    if not moved:
        return None
    pivot = min(moved, key=lambda i: abs(samples[1][0][i] - samples[0][0][i]) or _UNBOUNDED)
    xs = [s[0][pivot] for s in samples]
    if len(set(xs)) != len(xs):
        return None
    entry_forms = []
    for i, value in enumerate(entries):
        form = _affine(xs, [s[0][i] for s in samples])
        if form is None:
            return None
        entry_forms.append((form[0], form[1], _zero_or_one(value)))
    # every integer but the grids is affine in x; then each grid is constant, or an
    # integer argument of its launch (affine, not constant) over a constexpr (or 1)
    forms: dict[tuple[Any, ...], tuple[int, int, int]] = {}
    for i, role in enumerate(roles):
        if role[0] != "grid":
            form = _affine(xs, [s[1][i] for s in samples])
            if form is None:
                return None
            forms[i, *role] = form
    number_forms = []
    for i, (value, role) in enumerate(zip(numbers, roles)):
        values = [s[1][i] for s in samples]
        if role[0] == "int":
            number_forms.append(((forms[i, *role],), 1, _class(value)))
            continue
        if role[0] != "grid":
            size = role[0] == "size"
            number_forms.append(((forms[i, *role],), 4 if size else 0, _zero_or_one(value) if size else 0))
            continue
        candidates = [(value, 0, 1)] if len(set(values)) == 1 else []
        launch = role[1]
        for key, (a, b, _) in forms.items():
            if key[1:3] == ("int", launch) and b:
                for c in {1, *constants[launch]}:
                    if all(_evaluate((a, b, c), x) == v for x, v in zip(xs, values)):
                        candidates.append((a, b, c))
        if not candidates:
            return None
        number_forms.append((tuple(dict.fromkeys(candidates)), 2 if role[2] == 0 else 3, 0))
    arguments = {key[2:]: form for key, form in forms.items() if key[1] == "int"}
    low, high = -_UNBOUNDED, _UNBOUNDED
    for launch, position, least, most in bounds:
        form = arguments.get((launch, position))
        if form is None:
            return None
        a, b, _ = form
        if b == 0:
            continue  # the bounded argument does not move: the recordings were inside
        if b > 0:
            low, high = max(low, -(-(least - a) // b)), min(high, (most - a) // b)
        else:
            low, high = max(low, -(-(a - most) // -b)), min(high, (a - least) // -b)
    if low > high:
        return None
    return (pivot, low, high, tuple(entry_forms), tuple(number_forms))
