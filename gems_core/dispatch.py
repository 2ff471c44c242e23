"""Turning gems on and off: registration of the op registry with torch's dispatcher.

``enable()`` registers every served overload with ``torch.library`` on the selected
backend's dispatch key, wrapped so that gated dtypes, ``NotImplemented`` answers and
compile failures reach ATen's own kernel (captured before gems overrides it).
"""

from __future__ import annotations

import collections
import difflib
import logging
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from . import background, compat, logs, native, runtime
from .background import NotReady
from .launch_cache import KernelCompileError, interpreter_state, recording
from .registry import OpImpl, all_impls


@dataclass
class _State:
    ops: frozenset[str]
    library: Any
    #: the native dispatch layer's registration (gems_core.native), where it serves
    native: Any = None
    #: its gates on the Autograd key (ops gems differentiates itself)
    native_autograd: Any = None

    def close(self) -> None:
        self.library._destroy()
        for registration in (self.native, self.native_autograd):
            if registration is not None:
                registration.close()


#: the use_gems() blocks open now, of every thread, in the order they were entered: each
#: a one-item list (compared by identity) of the ops it serves
_blocks: list[list[frozenset[str]]] = []
#: the ops enable() asked for (None: disabled), served while no block is open
_base: frozenset[str] | None = None
_current: _State | None = None
#: the ops the registration in _current was asked for
_requested: frozenset[str] | None = None
_lock = threading.RLock()
#: ATen's kernels by (overload, dispatch key), captured once per process: asking the
#: dispatcher again on every registration (each use_gems() block) costs memory it keeps
_aten_kernels: dict[tuple[str, str], Callable[..., Any]] = {}


def _names(items: Iterable[str] | str | None) -> list[str]:
    if items is None:
        return []
    return [items] if isinstance(items, str) else list(items)


#: names users know for ops PyTorch decomposes before they reach a backend (ATen composites
#: and torch.nn.functional names), and the packets gems serves for them, backward included
COMPOSITES: dict[str, tuple[str, ...]] = {
    "softmax": ("_softmax", "_softmax_backward_data"),
    "log_softmax": ("_log_softmax", "_log_softmax_backward_data"),
    "layer_norm": ("native_layer_norm", "native_layer_norm_backward"),
    "group_norm": ("native_group_norm", "native_group_norm_backward"),
    "nll_loss": ("nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward", "nll_loss2d_backward"),
    "cross_entropy": ("_log_softmax", "_log_softmax_backward_data", "nll_loss_forward",
                      "nll_loss_backward", "nll_loss2d_forward", "nll_loss2d_backward"),
    "linear": ("addmm", "mm"),
    "matmul": ("mm", "bmm", "mv"),
    **dict.fromkeys(("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"),
                    ("convolution", "convolution_backward")),
    "max_pool2d": ("max_pool2d_with_indices", "max_pool2d_with_indices_backward"),
    "max_pool1d": ("max_pool2d_with_indices", "max_pool2d_with_indices_backward"),
    "avg_pool1d": ("avg_pool2d", "avg_pool2d_backward"),
    "adaptive_avg_pool2d": ("_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward"),
    "adaptive_avg_pool1d": ("_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward"),
    "adaptive_max_pool1d": ("adaptive_max_pool2d", "adaptive_max_pool2d_backward"),
    # cudnn_/miopen_batch_norm: F.batch_norm's routes on NVIDIA and AMD GPUs where their libraries take the call
    "batch_norm": ("native_batch_norm", "native_batch_norm_backward", "cudnn_batch_norm", "cudnn_batch_norm_backward",
                   "miopen_batch_norm", "miopen_batch_norm_backward"),
}
COMPOSITES["cross_entropy_loss"] = COMPOSITES["cross_entropy"]


def _aten_packet(name: str) -> bool:
    packet, _, overload = name.partition(".")
    try:
        torch._C._dispatch_find_schema_or_throw(f"aten::{packet}", "" if overload == "default" else overload)
    except RuntimeError:
        return False
    return True


def resolve(include: Iterable[str] | str | None, exclude: Iterable[str] | str | None) -> frozenset[str]:
    """The overloads ``include``/``exclude`` select: ATen overloads ("add.Tensor"), packets
    ("add"), and the names of ops PyTorch decomposes ("softmax", "layer_norm", "linear",
    "cross_entropy"...: the ops gems serves for them). An ATen operator gems does not serve
    selects nothing; any other name is an error."""
    impls = all_impls()
    packets: dict[str, set[str]] = {}
    for name in impls:
        packets.setdefault(name.split(".", 1)[0], set()).add(name)

    def expand(name: str) -> set[str]:
        if name in packets:  # a bare name is the packet: every overload, the default one included
            return packets[name]
        if name in impls:
            return {name}
        if name.endswith(".default") and name[: -len(".default")] in impls:
            return {name[: -len(".default")]}
        composite = COMPOSITES.get(name.split(".", 1)[0])
        if composite is not None and (name in COMPOSITES or _aten_packet(name)):
            return set().union(*(packets.get(p, ()) for p in composite))
        if _aten_packet(name):
            return set()  # an operator gems leaves to ATen (max_pool3d, say)
        known = sorted(set(impls) | set(packets) | set(COMPOSITES))
        close = difflib.get_close_matches(name, known, n=5, cutoff=0.6)
        hint = f"; close matches: {', '.join(close)}" if close else ""
        raise ValueError(f"gems serves no ATen operator named {name!r}{hint}")

    chosen: set[str] = set(impls)
    include_names = _names(include)
    if include_names:
        chosen = set().union(*(expand(n) for n in include_names))
    for name in _names(exclude):
        chosen -= expand(name)
    return frozenset(chosen)


def _tensor_dtypes(values: Iterable[Any]) -> Iterator[torch.dtype]:
    """Dtypes a call involves: its tensors' and any dtype it asks for (``dtype=``)."""
    for value in values:
        if isinstance(value, torch.Tensor):
            yield value.dtype
        elif isinstance(value, torch.dtype):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from _tensor_dtypes(value)


_log = logs.get("dispatch")
_DECLINED = "gems' kernel does not take these arguments (NotImplemented)"
_COMPILING = "its kernel compiles in the background"


def _written(name: str) -> tuple[tuple[int, ...], tuple[str, ...]] | None:
    """The positions and names of the arguments overload ``name`` writes into (in-place,
    ``out=``); None where it writes none."""
    packet, _, overload = name.partition(".")
    schema = getattr(getattr(torch.ops.aten, packet), overload or "default")._schema
    if not schema.is_mutable:
        return None
    written = [(i, a.name) for i, a in enumerate(schema.arguments)
               if a.alias_info is not None and a.alias_info.is_write]
    return tuple(i for i, _ in written), tuple(n for _, n in written)


def _note(name: str, how: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Log how a call of op ``name`` was served, once per op, dtypes and outcome."""
    dtypes = sorted({str(d).removeprefix("torch.") for d in _tensor_dtypes((*args, *kwargs.values()))})
    logs.once(_log, ("dispatch", name, how, *dtypes), "%s (%s): %s", name, ", ".join(dtypes) or "no tensors", how)


def _torch_dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"{name!r} is not a torch dtype name")
    return dtype


def _make_kernel(
    impl: OpImpl, rt: runtime.Runtime, dispatch_key: str, with_keyset: bool = True
) -> Callable[..., Any]:
    """The function registered for ``impl`` on ``dispatch_key``; it takes the dispatcher's
    keyset first where ``with_keyset`` (kernels on Autograd keys, which redispatch)."""
    aten_kernel = _aten_kernels.get((impl.name, dispatch_key))
    if aten_kernel is None:  # registration holds _lock: gems does not serve this key now
        aten_kernel = compat.aten_kernel(f"aten::{impl.name}", dispatch_key)
        _aten_kernels[impl.name, dispatch_key] = aten_kernel

    def aten(why: str, keyset: Any, /, *args: Any, **kwargs: Any) -> Any:
        """ATen's kernel for the call; ``why`` (none for ATen calls gems' own kernels make
        in the interpreter) goes to the log."""
        recording.impure = True  # a call (partly) served by ATen is not one to repeat natively
        if writes is not None:
            positions, names = writes
            background.wrote_through_aten([*(args[i] for i in positions if i < len(args)),
                                           *(kwargs[n] for n in names if n in kwargs)])
        if why and _log.isEnabledFor(logging.DEBUG):
            _note(impl.name, f"ATen, {why}", args, kwargs)
        return aten_kernel(keyset, *args, **kwargs)

    fn = rt.policy.overrides.get(impl.name) or impl.fn
    if not (rt.interpreter or rt.compile_only):
        fn = compat.on_operands_device(fn, rt.device_type)
    # background compiles: a call may go to ATen until it launched a kernel (and an in-place
    # or out= op served by ATen inside another call counts as that call's write)
    deferring = background.mode(rt) == "background"
    writes = _written(impl.name) if deferring else None
    if deferring:
        fn = background.tracked(fn, free=writes is None)
    gate = rt.policy.gate_for(impl.name)
    gated = frozenset(_torch_dtype(d) for d in gate) if gate else frozenset()
    always_aten = gate is not None and not gate
    # a whole-op gate that keeps some forms of the op's calls on gems: the rest go to ATen
    forms = _kept_forms(impl, rt.policy) if always_aten else ()
    if forms:  # (the dtypes the chip lacks stay gated)
        gated = frozenset(_torch_dtype(d) for d in rt.policy.unsupported_dtypes)
        always_aten = False
    # forms of the op's calls the backend leaves to ATen (a gate on forms alone)
    left = _forms_named(impl, rt.policy.leaves_for(impl.name)) if not always_aten else ()
    interpreter = rt.interpreter
    name = impl.name
    failed = rt.runtime_fallbacks
    served = _served_calls
    interpreting = interpreter_state  # .active: the CPU interpreter runs a kernel now

    def kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        if interpreter and interpreting.active:
            return aten("", keyset, *args, **kwargs)
        if name in failed:
            return aten("it failed to compile before", keyset, *args, **kwargs)
        if gated and not gated.isdisjoint(_tensor_dtypes((*args, *kwargs.values()))):
            return aten("the backend leaves this dtype to ATen", keyset, *args, **kwargs)
        if forms and not any(test(*args, **kwargs) for test in forms):
            return aten("the backend leaves this op to ATen but for the forms it keeps", keyset, *args, **kwargs)
        if left and any(test(*args, **kwargs) for test in left):
            return aten("the backend leaves this form of the op's calls to ATen", keyset, *args, **kwargs)
        try:
            result = fn(*args, **kwargs)
        except KernelCompileError as exc:
            return compile_failed(exc, keyset, args, kwargs)
        except NotReady:
            if recording.native is not None:  # a call under recording: record it again later
                recording.deferred = True
            return aten(_COMPILING, keyset, *args, **kwargs)
        except BaseException:
            served[name] += 1  # gems answered the call with an error (ATen's, for bad input)
            raise
        if result is NotImplemented:
            return aten(_DECLINED, keyset, *args, **kwargs)
        served[name] += 1
        if _log.isEnabledFor(logging.DEBUG):
            _note(name, "gems", args, kwargs)
        return result

    def compile_failed(exc: KernelCompileError, keyset: Any, args: Any, kwargs: Any) -> Any:
        failed[name] = str(exc)
        warnings.warn(
            f"gems: {name} failed to compile on {rt.selection.backend.name} and now runs on "
            f"ATen: {exc}",
            RuntimeWarning,
            stacklevel=4,
        )
        return aten("it failed to compile", keyset, *args, **kwargs)

    if always_aten:
        return lambda keyset, *args, **kwargs: aten("the backend leaves this op to ATen", keyset, *args, **kwargs)
    if with_keyset:
        return kernel
    # A backend-key kernel has nothing to redispatch to, so the dispatcher need not build a
    # keyset object per call: ATen's kernel gets its own key when gems hands a call over.
    own_key = torch._C.DispatchKeySet(torch._C.DispatchKey.__members__[dispatch_key])

    if interpreter or gated or forms or left:

        def checked_kernel(*args: Any, **kwargs: Any) -> Any:
            return kernel(own_key, *args, **kwargs)

        checked_kernel.native_ready = True  # type: ignore[attr-defined]
        # the native layer may send a gated dtype's calls to ATen itself (what kernel() does
        # first for them, but noting ATen's writes while kernels compile in the background,
        # and logging each decision at debug level)
        if gated and writes is None and not _log.isEnabledFor(logging.DEBUG):
            checked_kernel.aten_dtypes = gated  # type: ignore[attr-defined]
        return checked_kernel

    def backend_kernel(*args: Any, **kwargs: Any) -> Any:
        # the common case on a chip: no per-call checks beyond the failure record
        if name in failed:
            return aten("it failed to compile before", own_key, *args, **kwargs)
        try:
            result = fn(*args, **kwargs)
        except KernelCompileError as exc:
            return compile_failed(exc, own_key, args, kwargs)
        except NotReady:
            if recording.native is not None:  # a call under recording: record it again later
                recording.deferred = True
            return aten(_COMPILING, own_key, *args, **kwargs)
        except BaseException:
            served[name] += 1
            raise
        if result is NotImplemented:
            return aten(_DECLINED, own_key, *args, **kwargs)
        served[name] += 1
        if _log.isEnabledFor(logging.DEBUG):
            _note(name, "gems", args, kwargs)
        return result

    backend_kernel.native_ready = True  # type: ignore[attr-defined]
    return backend_kernel


#: the kernels registrations made, for the next registration (a use_gems() block entered
#: again makes one or two per served op: several ms): by op, key, keyset flag and compile
#: mode, with the objects the kernel closed over, which must be the same ones (another
#: runtime, a replaced policy or failure record makes a new kernel). Kernels that track
#: background compiles are made afresh, as their compile state belongs to one registration.
_kernels: dict[tuple[str, str, bool, str], tuple[tuple[Any, ...], Callable[..., Any]]] = {}


def _kernel_for(impl: OpImpl, rt: runtime.Runtime, dispatch_key: str, with_keyset: bool,
                mode: str) -> Callable[..., Any]:
    """:func:`_make_kernel`'s kernel, kept from an earlier registration where nothing it
    depends on changed (``mode``: :func:`background.mode`, read once a registration)."""
    if mode == "background":  # its kernels keep per-op compile state (background.tracked)
        return _make_kernel(impl, rt, dispatch_key, with_keyset)
    key = (impl.name, dispatch_key, with_keyset, mode)
    made_from = (rt, impl, rt.policy, rt.runtime_fallbacks)
    found = _kernels.get(key)
    if found is not None and all(a is b for a, b in zip(found[0], made_from)):
        return found[1]
    kernel = _make_kernel(impl, rt, dispatch_key, with_keyset)
    _kernels[key] = (made_from, kernel)
    return kernel


def _aten_dtypes(kernel: Callable[..., Any]) -> list[torch.dtype]:
    """The dtypes whose calls the native layer may send to ATen itself (see _make_kernel)."""
    return sorted(getattr(kernel, "aten_dtypes", ()), key=str)


def _kept_forms(impl: OpImpl, policy: Any) -> tuple[Callable[..., bool], ...]:
    """The predicates of the forms of ``impl``'s calls its backend keeps on gems under a
    whole-op gate (``OpGate.keep``)."""
    return _forms_named(impl, policy.keeps_for(impl.name))


def _forms_named(impl: OpImpl, names: frozenset[str]) -> tuple[Callable[..., bool], ...]:
    """The predicates of ``impl``'s forms of these names."""
    return tuple(test for form, test in impl.forms if form in names)


def _register(ops: frozenset[str]) -> _State:
    rt = runtime.current()
    execution = rt.selection.execution
    key = execution.dispatch_key
    impls = all_impls()
    library = torch.library.Library("aten", "IMPL")
    registration = native.open_registration("aten", execution)
    gates = native.open_registration("aten", execution, autograd=True) if registration is not None else None
    served = set()
    mode = background.mode(rt)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Warning only once for all operators")
            for name in sorted(ops):
                gate = rt.policy.gate_for(name)
                impl = impls[name]
                if gate is not None and not gate and not _kept_forms(impl, rt.policy):
                    continue  # the backend leaves the whole op to ATen: do not touch it
                kernel = _kernel_for(impl, rt, key, False, mode)
                fronted = registration is not None and impl.native and getattr(kernel, "native_ready", False)
                to_aten = _aten_dtypes(kernel)
                if impl.autograd:
                    # the Autograd key serves calls that may need a graph; the backend key
                    # too, for calls that skip autograd (inference mode), which would
                    # otherwise reach ATen's decomposition of a composite op. Where the
                    # native layer fronts the backend key, a gate on the Autograd key sends
                    # calls that need no gradient (torch.no_grad(), or no input requiring
                    # one) there without Python.
                    op_key = f"Autograd{key}"
                    autograd_kernel = _kernel_for(impl, rt, op_key, True, mode)
                    if fronted:  # the gates' registration exists wherever the layer serves
                        native.gate(gates, name, autograd_kernel, to_aten)
                    else:
                        library.impl(name, autograd_kernel, op_key, with_keyset=True)
                if fronted:
                    # the recipes outlive this registration: the next one of this runtime
                    # (a use_gems() block entered again) starts from them
                    native.front(registration, name, kernel, f"{rt.number}/{key}/{name}",
                                 to_aten, impl.foreign and not _log.isEnabledFor(logging.DEBUG))
                else:
                    library.impl(name, kernel, key, with_keyset=False)
                served.add(name)
    except BaseException:
        # no half-registered state survives a failure
        _State(ops=frozenset(), library=library, native=registration, native_autograd=gates).close()
        raise
    return _State(ops=frozenset(served), library=library, native=registration, native_autograd=gates)


#: native replays of registrations since closed, per op: with the open one's, a count that
#: only grows (what a routing check compares before and after a block)
_retired_hits: dict[str, int] = {}


def _unregister(state: _State | None) -> None:
    if state is not None:
        for row in native.stats(state.native):
            _retired_hits[row["op"]] = _retired_hits.get(row["op"], 0) + row.get("hits", 0)
        state.close()


def native_stats() -> list[dict[str, Any]]:
    """Per op served by the native dispatch layer now: recipes kept, calls served from
    them (``hits``), calls that ran Python, calls recorded and refused, length-generic
    recipes kept and the calls of new keys they served (``generic_hits``, counted in
    ``hits`` too), calls sent to ATen from C++ (``aten_calls``: a dtype the backend leaves
    to ATen, a copy between host and device); for each gate on the Autograd key
    (``"gate": True``), calls sent below autograd, calls sent to ATen from C++ and calls that
    ran Python."""
    state = _current
    if state is None:
        return []
    return native.stats(state.native) + native.stats(state.native_autograd)


#: calls of each op that gems' Python kernel answered in this process: with a result, or with
#: an error it raised (ATen's, for bad input); not the calls it declined or left to ATen
_served_calls: collections.Counter[str] = collections.Counter()


def served_calls(ops: Iterable[str]) -> int:
    """Calls of ``ops`` that gems' Python kernels answered in this process, whichever thread
    made them (autograd runs a CUDA backward on a thread of its own). With
    :func:`native_hits`, every call gems served."""
    return sum(_served_calls[op] for op in set(ops))


def native_hits(ops: Iterable[str]) -> int:
    """Calls of ``ops`` the native dispatch layer has served from recipes in this process,
    over every registration so far (a replay runs no Python: it was recorded from gems'
    kernel)."""
    wanted = set(ops)
    total = sum(n for op, n in _retired_hits.items() if op in wanted)
    state = _current
    if state is not None:
        total += sum(row.get("hits", 0) for row in native.stats(state.native) if row["op"] in wanted)
    return total


def _switch(ops: frozenset[str] | None, force: bool = False) -> None:
    """Make the registration serve ``ops`` (None: none), keeping it where it does already
    (unless ``force``): blocks of several threads that serve the same ops share one
    registration, which none of them replaces under the others' running calls. A failed
    registration leaves the previous one in place. Callers hold :data:`_lock`."""
    global _current, _requested
    if not force and ops == _requested:
        return
    previous = _requested
    _unregister(_current)
    _current = _requested = None
    if ops is None:
        return
    try:
        _current = _register(ops)
    except BaseException:
        _current = _register(previous) if previous is not None else None
        _requested = previous
        raise
    _requested = ops


def enable(include: Iterable[str] | str | None = None, exclude: Iterable[str] | str | None = None) -> None:
    """Serve ATen operators with gems' Triton kernels on the selected backend, for the rest
    of the process (until :func:`disable`). ``include``/``exclude`` take ATen names:
    ``"add.Tensor"`` for one overload, ``"add"`` for all of them."""
    global _base
    ops = resolve(include, exclude)
    with _lock:
        _switch(ops, force=True)
        _base = ops


def disable() -> None:
    """Give every operator back to ATen."""
    global _base
    with _lock:
        _switch(None, force=True)
        _base = None


@contextmanager
def use_gems(
    include: Iterable[str] | str | None = None, exclude: Iterable[str] | str | None = None
) -> Iterator[None]:
    """Serve operators with gems inside the block; the previous state (enabled with other
    ops, or disabled) comes back on exit, also when the block raises. Blocks nest.

    The dispatcher is process-wide: while any thread's block is open, gems serves every
    thread, with the ops of the block entered last; threads whose blocks serve the same
    ops share one registration."""
    ops = resolve(include, exclude)
    block = [ops]
    with _lock:
        _switch(ops)
        _blocks.append(block)
    try:
        yield
    finally:
        with _lock:
            del _blocks[next(i for i, b in enumerate(_blocks) if b is block)]
            _switch(_blocks[-1][0] if _blocks else _base)


def registered_ops() -> list[str]:
    """The ATen overloads gems serves right now (empty when disabled)."""
    state = _current
    return sorted(state.ops) if state is not None else []
