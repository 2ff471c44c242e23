"""The launch cache: compiled kernels keyed by what Triton specializes on.

A hit launches the compiled kernel directly (no binder, autotuner or heuristics wrapper); a
miss compiles through Triton once and stores the result. The key holds, per runtime argument,
what Triton's specialization looks at: a tensor's dtype and 16-byte alignment, an integer's
equality to 1, divisibility by 16 and 32/64-bit range; plus the constexprs, the launch
config and the device.

In compile-only execution (``GEMS_COMPILE_TARGET``, the compile tier) a launch is compiled
ahead of time for that target by :mod:`gems_core.aot` and not run; a compile failure raises
:class:`KernelCompileError` as it would on the chip.

With background compiles (``GEMS_COMPILE``, :mod:`gems_core.background`) a miss met by a call
that has launched nothing yet starts the compile in a worker and raises ``NotReady``, which
hands the call to ATen; the miss is compiled here once that compile is done (a hit in
Triton's cache), or at once where the call has launched already.

Convention for kernels launched through here: runtime arguments first (passed
positionally), constexprs after them (passed by keyword).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import torch

from . import background, compat, logs, runtime, settings
from .contract import KernelConfig
from .recording import recording

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


class _InterpreterState(threading.local):
    active = False  # per thread; the class default saves a getattr on the per-call path


interpreter_state = _InterpreterState()
#: Triton's interpreter patches ``triton.language`` for the kernel it runs and restores it
#: after, process-wide: interpreted kernels of several threads run one at a time
_interpreter_lock = threading.RLock()


#: buffers kernels keep across calls, by data pointer (:func:`keep_resident`); never released
_resident: dict[int, torch.Tensor] = {}


def keep_resident(buffer: torch.Tensor) -> torch.Tensor:
    """Keep ``buffer`` for the rest of the process, so that the native layer's recipes may
    address it: a buffer a kernel uses across calls (counters it leaves as it found them),
    which the Python path keeps per device and stream (the layer keys recipes by stream too)."""
    _resident[buffer.untyped_storage().data_ptr()] = buffer
    return buffer


def is_resident(address: int) -> bool:
    """Whether ``address`` lies in a buffer :func:`keep_resident` kept."""
    return any(base <= address < base + t.untyped_storage().nbytes() for base, t in _resident.items())


#: what :func:`invalidate` runs: the clearing of every cache built from chosen configs and
#: kernels (per-call plans, the native layer's recipes), each registered by its module
_on_invalidate: list[Callable[[], None]] = []


def on_invalidate(clear: Callable[[], None]) -> None:
    """Run ``clear()`` on every :func:`invalidate`."""
    _on_invalidate.append(clear)


def invalidate() -> None:
    """Forget everything built from the kernels and configs chosen so far (configs are
    forced, a variant point is turned off): each cache rebuilds on its next call."""
    for clear in list(_on_invalidate):
        clear()


class KernelCompileError(RuntimeError):
    """Triton could not compile a kernel for this chip (the op then goes to ATen)."""


def in_interpreted_kernel() -> bool:
    """True while the CPU interpreter runs a kernel on this thread: torch calls made by the
    interpreter itself must reach ATen, not gems."""
    return interpreter_state.active


def _arg_key(arg: Any) -> Any:
    if isinstance(arg, torch.Tensor):
        return (arg.dtype, arg.data_ptr() % 16 == 0)
    if isinstance(arg, bool):
        return ("b", arg)
    if isinstance(arg, int):
        return (arg == 1, arg % 16 == 0, _INT32_MIN <= arg <= _INT32_MAX)
    if isinstance(arg, float):
        return "f"
    return arg


def _args_key(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """:func:`_arg_key` of each argument, the common types inlined: a launch of the Python
    path keys its arguments on every call (46 of them for attention's backward kernels)."""
    return tuple([
        (a.dtype, a.data_ptr() % 16 == 0) if isinstance(a, torch.Tensor)
        else ("b", a) if a is True or a is False
        else (a == 1, a % 16 == 0, _INT32_MIN <= a <= _INT32_MAX) if type(a) is int
        else "f" if type(a) is float
        else _arg_key(a)
        for a in args
    ])


_ALL: weakref.WeakSet[LaunchCache] = weakref.WeakSet()
_log = logs.get("launch")


def all_caches() -> list[LaunchCache]:
    """Every launch cache defined so far (for tools)."""
    return list(_ALL)


class LaunchCache:
    """Launches one ``@triton.jit`` kernel; thread-safe."""

    def __init__(self, kernel: Any, name: str | None = None) -> None:
        _ALL.add(self)
        self.kernel = kernel
        self.name = name or getattr(kernel, "__name__", None) or kernel.fn.__name__
        self.interpreted = compat.is_interpreted(kernel)
        params = kernel.arg_names
        constexpr_positions = set(kernel.constexprs) if not self.interpreted else set()
        if self.interpreted:
            import inspect

            sig = inspect.signature(kernel.fn)
            constexpr_positions = {
                i for i, p in enumerate(sig.parameters.values()) if "constexpr" in str(p.annotation)
            }
        if sorted(constexpr_positions) != list(range(len(params) - len(constexpr_positions), len(params))):
            raise TypeError(f"{self.name}: constexpr parameters must come after runtime parameters")
        self.constexpr_names = tuple(params[i] for i in sorted(constexpr_positions))
        self.runtime_count = len(params) - len(self.constexpr_names)
        self._constexpr_set = frozenset(self.constexpr_names)
        self._entries: dict[Any, _Entry] = {}
        #: the compiled kernels by launch key (for tools: profiling, inspection)
        self.compiled: dict[Any, Any] = {}
        #: background compiles by launch key (futures; gems_core.background)
        self._pending: dict[Any, Any] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def __call__(
        self,
        grid: tuple[int, ...],
        *args: Any,
        config: KernelConfig | None = None,
        options: Mapping[str, Any] | None = None,
        **constexprs: Any,
    ) -> None:
        grid3 = (grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1)
        calls = recording.calls
        if calls is not None:
            calls.append((self, grid3, args, config, options, dict(constexprs)))
        if config is not None:
            constexprs = {**config.params, **constexprs}
        if self.interpreted:
            # the compiler insists on exactly the kernel's constexprs; hold the interpreter,
            # which would ignore an extra one, to the same rule so CPU runs catch it
            if len(args) != self.runtime_count or constexprs.keys() != self._constexpr_set:
                raise TypeError(
                    f"{self.name}: pass {self.runtime_count} runtime arguments positionally and "
                    f"the constexprs {self.constexpr_names} by keyword (got {sorted(constexprs)})"
                )
            if recording.native is not None:
                recording.impure = True  # an interpreted launch is nothing the native layer can repeat
            # masked-off lanes compute on filler values; numpy must not warn about them
            import numpy  # the interpreter runs on numpy; only interpreted launches need it

            from .codegen.interpreted_casts import aten_bf16_rounding

            if recording.may_defer() or self._pending:
                # the interpreter compiles nothing, but a background compile may be simulated
                key = self._key(args, constexprs, config, options)
                background.await_compile(self.name, self._pending, key, lambda: None)
            recording.launched = True
            with _interpreter_lock, numpy.errstate(all="ignore"), aten_bf16_rounding():
                interpreter_state.active = True
                try:
                    self.kernel[grid3](*args, **constexprs)
                finally:
                    interpreter_state.active = False
            return
        device = _device_of(args)
        if device != _current_device() and _compile_target() is None:
            # compiled kernels load into, and launch on, the current device
            with compat.device_guard(device):
                self._run(grid3, args, constexprs, config, options, device)
            return
        self._run(grid3, args, constexprs, config, options, device)

    def _run(self, grid3: tuple[int, int, int], args: tuple[Any, ...], *how: Any) -> None:
        """Launch on ``device`` (current): ``how`` is (constexprs, config, options, device)."""
        constexprs, config, options, device = how
        entry = self.entry_for(grid3, args, constexprs, config, options)
        if entry is None:
            return  # compile-only execution: compiled for the target, nothing to run
        go, tail = entry
        full = (*args, *tail)
        recording.launched = True
        go(grid3[0], grid3[1], grid3[2], compat.current_stream(device), full)
        if recording.native is not None:
            recording.native.append((go, grid3, full))

    def entry_for(
        self,
        grid3: tuple[int, int, int],
        args: tuple[Any, ...],
        constexprs: Mapping[str, Any],
        config: KernelConfig | None,
        options: Mapping[str, Any] | None,
    ) -> _Entry | None:
        """The compiled kernel for these arguments (compiling on a miss); None where nothing
        runs (compile-only execution). ``constexprs`` already include the config's."""
        key = self._key(args, constexprs, config, options)
        entry = self._entries.get(key)
        if entry is None:
            _, _, _, num_warps, num_stages, extra, _ = key
            entry = self._compile(key, grid3, args, constexprs, num_warps, num_stages, dict(extra))
        return entry

    @staticmethod
    def _key(
        args: tuple[Any, ...],
        constexprs: Mapping[str, Any],
        config: KernelConfig | None,
        options: Mapping[str, Any] | None,
    ) -> tuple[Any, ...]:
        """The launch key: what the compiled kernel depends on (see the module docstring)."""
        extra = dict(options or {})
        if config is not None and config.options:
            extra.update(config.options)
        return (
            _args_key(args),
            tuple(constexprs.values()),
            tuple(constexprs),
            config.num_warps if config else 4,
            config.num_stages if config else 2,
            tuple(sorted(extra.items())),
            _device_of(args),
        )

    def bind(
        self,
        dynamic: tuple[int, ...],
        config: KernelConfig | None = None,
        options: Mapping[str, Any] | None = None,
        **constexprs: Any,
    ) -> BoundLaunch:
        """A launcher for calls whose arguments differ only at positions ``dynamic`` (data
        pointers, numbers): the rest of the specialization key is settled once."""
        return BoundLaunch(self, dynamic, config, options, constexprs)

    def _compile(
        self,
        key: Any,
        grid: tuple[int, int, int],
        args: tuple[Any, ...],
        constexprs: Mapping[str, Any],
        num_warps: int,
        num_stages: int,
        extra: Mapping[str, Any],
    ) -> _Entry | None:
        if len(args) != self.runtime_count or set(constexprs) != set(self.constexpr_names):
            raise TypeError(
                f"{self.name}: pass {self.runtime_count} runtime arguments positionally and the "
                f"constexprs {self.constexpr_names} by keyword"
            )
        target = _compile_target()
        start = time.perf_counter()
        if target is not None:
            from . import aot

            result = aot.compile_launch(
                self.kernel, self.name, target, args, constexprs, num_warps, num_stages, extra
            )
            if result.error is not None:
                raise KernelCompileError(f"{self.name}: {result.error}")
            self._compiled(key, constexprs, start)
            return None
        how = (key, grid, args, constexprs, num_warps, num_stages, extra)
        if recording.may_defer() or key in self._pending:
            background.await_compile(self.name, self._pending, key, lambda: self._job(how))
        return self._compile_now(how, start)

    def _compile_now(self, how: tuple[Any, ...], start: float | None = None) -> _Entry:
        """Compile launch ``how`` (``_compile``'s arguments) in this thread."""
        key, grid, args, constexprs, num_warps, num_stages, extra = how
        start = time.perf_counter() if start is None else start
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                return entry
            try:
                compiled = self.kernel.warmup(
                    *args, grid=grid, num_warps=num_warps, num_stages=num_stages,
                    **extra, **constexprs,
                )
                compiled._init_handles()
            except Exception as exc:
                raise KernelCompileError(f"{self.name}: {type(exc).__name__}: {exc}") from exc
            self._compiled(key, constexprs, start)
            tail = tuple(constexprs[name] for name in self.constexpr_names)
            entry = (launcher_for(compiled), tail)
            self.compiled[key] = compiled
            self._entries[key] = entry
            self._pending.pop(key, None)
            return entry

    def _job(self, how: tuple[Any, ...]) -> Any:
        """The background compile of launch ``how``: for a worker process, or, for a kernel
        no worker can import, a call of ``_compile_now`` in a compile thread."""
        from . import aot

        key, _, args, constexprs, num_warps, num_stages, extra = how
        try:
            return background.job_for(self.kernel, args, aot._launch_kwargs(
                self.kernel, constexprs, num_warps, num_stages, extra))
        except LookupError:
            device = key[-1]

            def in_thread() -> None:
                with compat.device_guard(device):
                    self._compile_now(how)

            return in_thread

    def _compiled(self, key: Any, constexprs: Mapping[str, Any], start: float) -> None:
        """Log a compile (once per launch key, as compiles are) with its specialization."""
        if _log.isEnabledFor(logging.DEBUG):
            arguments, _, _, num_warps, num_stages, options, device = key
            settled = ", ".join(f"{k}={v}" for k, v in constexprs.items())
            _log.debug("%s compiled in %.2f s: %s, num_warps=%d, num_stages=%d, options %s, "
                       "device %s; arguments %s", self.name, time.perf_counter() - start, settled,
                       num_warps, num_stages, dict(options), device, arguments)


class BoundLaunch:
    """The per-call fast path: looks up the compiled kernel by the specialization of the
    dynamic arguments alone and launches it."""

    def __init__(
        self,
        cache: LaunchCache,
        dynamic: tuple[int, ...],
        config: KernelConfig | None,
        options: Mapping[str, Any] | None,
        constexprs: Mapping[str, Any],
    ) -> None:
        self.cache = cache
        self.dynamic = dynamic
        self.config = config
        self.options = options
        self.constexprs = {**(config.params if config else {}), **constexprs}
        self._entries: dict[Any, _Entry] = {}
        self._stream: Callable[[int], int] | None = None
        #: the compiled kernel's entry of the latest launch (None when interpreted or when
        #: nothing ran): read by plan launches to take the direct path next time
        self.last_entry: _Entry | None = None

    def __call__(self, grid3: tuple[int, int, int], args: tuple[Any, ...], device: int) -> None:
        if self.cache.interpreted:
            self.cache(grid3, *args, config=self.config, options=self.options, **self.constexprs)
            return
        self.last_entry = None
        if device != _current_device():
            with compat.device_guard(device):
                return self._launch(grid3, args, device)
        self._launch(grid3, args, device)

    def _launch(self, grid3: tuple[int, int, int], args: tuple[Any, ...], device: int) -> None:
        # Tensors at dynamic positions go to the launcher as their addresses: their dtype,
        # shape, strides and device were settled by the plan's signature, and a plain
        # integer spares the launcher a method call and a driver query per pointer.
        values = list(args)
        key = []
        for i in self.dynamic:
            arg = values[i]
            if isinstance(arg, torch.Tensor):
                address = values[i] = arg.data_ptr()
                key.append((arg.dtype, address & 15 == 0))
            else:
                key.append(_arg_key(arg))
        key_t = tuple(key)
        entry = self._entries.get(key_t)
        if entry is None:
            entry = self.cache.entry_for(grid3, args, self.constexprs, self.config, self.options)
            if entry is None:
                return
            self._entries[key_t] = entry
        self.last_entry = entry
        go, tail = entry
        stream = self._stream
        if stream is None:
            stream = self._stream = compat.stream_function()
        full = (*values, *tail)
        recording.launched = True
        go(grid3[0], grid3[1], grid3[2], stream(device), full)
        if recording.native is not None:
            recording.native.append((go, grid3, full))


#: launches a compiled kernel: ``go(grid_x, grid_y, grid_z, stream, args)`` where ``args`` are
#: the runtime arguments followed by the constexprs' values
Launcher = Callable[[int, int, int, int, tuple[Any, ...]], None]
_Entry = tuple[Launcher, tuple[Any, ...]]


_TORCH_ARG_TYPES = {
    "i1": "i", "i8": "b", "i16": "h", "i32": "i", "i64": "l", "u1": "I", "u8": "B", "u16": "H",
    "u32": "I", "u64": "K", "fp16": "f", "bf16": "f", "fp32": "f", "f32": "f", "fp64": "d",
}


def plain_launch(metadata: Any) -> bool:
    """Whether a compiled kernel launches with the driver's plain kernel launch (the one
    :class:`~gems_core.contract.NativeLaunch` hands the native layer): one CTA per program
    and no cluster, no cooperative or programmatic-dependent launch, no scratch memory for
    the launcher to allocate."""
    if getattr(metadata, "num_ctas", 1) != 1 or any(
        getattr(metadata, flag, False) for flag in ("launch_cooperative_grid", "launch_pdl")
    ):
        return False
    if getattr(metadata, "global_scratch_size", 0) or getattr(metadata, "profile_scratch_size", 0):
        return False
    return tuple(getattr(metadata, "cluster_dims", (1, 1, 1)) or (1, 1, 1)) in ((1, 1, 1), (1,), ())


def torch_launcher(compiled: Any) -> Launcher | None:
    """A launch through PyTorch's own launcher for Triton-compiled kernels (the one
    ``torch.compile`` uses), reusing the kernel Triton loaded: a fixed C++ entry point with
    no per-launch Python. Used where the backend running the kernels says it launches them
    (``NativeLaunch.torch_launcher``: :func:`launcher_for`). None where it does not apply (a
    torch without it, clusters, cooperative or programmatic-dependent launches, tensor
    descriptors, launch hooks, scratch memory)."""
    impl = getattr(torch._C, "_StaticCudaLauncher", None)
    if impl is None:
        return None
    metadata = compiled.metadata
    if not plain_launch(metadata):
        return None
    if getattr(metadata, "tensordesc_meta", None):
        return None
    try:
        import triton

        hooks = (triton.knobs.runtime.launch_enter_hook, triton.knobs.runtime.launch_exit_hook)
        if any(_hook_in_use(h) for h in hooks):
            return None
    except AttributeError:
        pass
    names = list(compiled.src.fn.arg_names)
    signature = compiled.src.signature
    keep: list[int] = []
    types = []
    for index, name in enumerate(names):
        ty = signature.get(name, signature.get(index)) if isinstance(signature, dict) else None
        if ty is None:
            return None
        if ty == "constexpr":
            continue
        code = "O" if ty.startswith("*") else _TORCH_ARG_TYPES.get(ty)
        if code is None:
            return None
        keep.append(index)
        types.append(code)
    # kernels of these Triton versions take scratch pointers after their own arguments
    scratch = tuple(
        None for field in ("global_scratch_size", "profile_scratch_size") if hasattr(metadata, field)
    )
    arg_types = "".join(types) + "O" * len(scratch)
    function, warps, shared = compiled.function, metadata.num_warps, metadata.shared
    launch = impl._launch_kernel
    count = len(keep)
    # what the native dispatch layer needs to make the same launch from C++
    native = (int(function), 32 * warps, shared, arg_types, tuple(keep))
    if keep == list(range(count)):

        def torch_prefix(gx: int, gy: int, gz: int, stream: int, args: tuple[Any, ...]) -> None:
            launch(function, gx, gy, gz, warps, shared, arg_types, args[:count] + scratch, stream)

        torch_prefix.native = native  # type: ignore[attr-defined]
        return torch_prefix

    def torch_selected(gx: int, gy: int, gz: int, stream: int, args: tuple[Any, ...]) -> None:
        launch(function, gx, gy, gz, warps, shared, arg_types, (*[args[i] for i in keep], *scratch), stream)

    torch_selected.native = native  # type: ignore[attr-defined]
    return torch_selected


def _hook_in_use(hook: Any) -> bool:
    """Whether a launch hook (or chain of hooks) would do something: the native layer's
    recorder's own marker (``gems_marker``) does not count."""
    if hook is None:
        return False
    calls = getattr(hook, "calls", None)
    if calls is None:
        return not getattr(hook, "gems_marker", False)
    return any(not getattr(call, "gems_marker", False) for call in calls)


def launcher_for(compiled: Any) -> Launcher:
    """How a compiled kernel is launched: ``GEMS_LAUNCHER`` picks ``torch`` (PyTorch's
    launcher, :func:`torch_launcher`, where the backend running the kernels allows it),
    ``direct`` (Triton's native launch function, called directly: :func:`fast_launcher`) or
    ``triton`` (Triton's launcher object as is); the default takes the first of those that
    applies."""
    choice = settings.get("GEMS_LAUNCHER")
    if choice in ("auto", "torch") and _torch_launches():
        launcher = torch_launcher(compiled)
        if launcher is not None:
            return launcher
    return fast_launcher(compiled, direct=choice != "triton")


def fast_launcher(compiled: Any, direct: bool = True) -> Launcher:
    """A direct call of ``compiled``'s native launch function, skipping the Python layer of
    Triton's launcher object where that layer has nothing to do (no scratch memory to
    allocate, no sanitizer), which is most kernels. How the launcher forwards its arguments
    differs between Triton versions, so it is observed once, with placeholder values, rather
    than assumed; anything unexpected keeps Triton's own launcher."""
    run, function, packed = compiled.run, compiled.function, compiled.packed_metadata

    def standard(gx: int, gy: int, gz: int, stream: int, args: tuple[Any, ...]) -> None:
        run(gx, gy, gz, stream, function, packed, None, None, None, *args)

    native = getattr(run, "launch", None)
    if native is None or not direct:
        return standard
    if getattr(run, "global_scratch_size", 1) or getattr(run, "profile_scratch_size", 1):
        return standard
    if getattr(run, "gsan_enabled", False):
        return standard
    grid_and_function = tuple(object() for _ in range(5))
    meta = tuple(object() for _ in range(4))  # packed metadata, launch metadata, two hooks
    placeholders = (object(), object())
    seen: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    run.launch = lambda *a, **k: seen.append((a, k))
    try:
        run(*grid_and_function, *meta, *placeholders)
    except Exception:
        return standard
    finally:
        run.launch = native
    if len(seen) != 1 or seen[0][1]:
        return standard
    forwarded = seen[0][0]
    if len(forwarded) < 5 or any(a is not b for a, b in zip(forwarded[:5], grid_and_function)):
        return standard
    if forwarded[-1] == placeholders and type(forwarded[-1]) is tuple:
        as_tuple, middle = True, forwarded[5:-1]
    elif len(forwarded) >= 7 and all(a is b for a, b in zip(forwarded[-2:], placeholders)):
        as_tuple, middle = False, forwarded[5:-2]
    else:
        return standard
    actual = dict(zip(map(id, meta), (packed, None, None, None)))
    if any(m is p for m in middle for p in (*grid_and_function, *placeholders)):
        return standard
    fixed = tuple(actual.get(id(m), m) for m in middle)
    if as_tuple:

        def direct_tuple(gx: int, gy: int, gz: int, stream: int, args: tuple[Any, ...]) -> None:
            native(gx, gy, gz, stream, function, *fixed, args)

        return direct_tuple

    def direct(gx: int, gy: int, gz: int, stream: int, args: tuple[Any, ...]) -> None:
        native(gx, gy, gz, stream, function, *fixed, *args)

    return direct


def _torch_launches() -> bool:
    """Whether the backend running the kernels launches them through PyTorch's launcher."""
    rt = runtime.peek()
    launch = rt.selection.execution.launch if rt is not None else None
    return launch is not None and launch.torch_launcher


def _compile_target() -> Any:
    """The Triton target of compile-only execution, or None when kernels run."""
    rt = runtime.peek()
    return rt.selection.execution.compile_target if rt is not None else None


def _device_of(args: tuple[Any, ...]) -> int:
    for arg in args:
        if isinstance(arg, torch.Tensor):
            return arg.device.index or 0
    return compat.current_device()


def _current_device() -> int:
    """The current device's index (looked up on first use: the interpreter has no driver)."""
    global _current_device
    _current_device = compat.current_device_function()
    return _current_device()
