"""The launch cache: compiled kernels keyed by what Triton specializes on.

A hit launches the compiled kernel directly (no binder, autotuner or heuristics wrapper); a
miss compiles through Triton once and stores the result. The key holds, per runtime argument,
what Triton's specialization looks at: a tensor's dtype and 16-byte alignment, an integer's
equality to 1, divisibility by 16 and 32/64-bit range; plus the constexprs, the launch
config and the device.

In compile-only execution (``GEMS_COMPILE_TARGET``, the compile tier) a launch is compiled
ahead of time for that target by :mod:`gems_core.aot` and not run; a compile failure raises
:class:`KernelCompileError` as it would on the chip.

Convention for kernels launched through here: runtime arguments first (passed
positionally), constexprs after them (passed by keyword).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import numpy
import torch

from . import compat
from .contract import KernelConfig

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


class _InterpreterState(threading.local):
    active = False  # per thread; the class default saves a getattr on the per-call path


interpreter_state = _InterpreterState()


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


class LaunchCache:
    """Launches one ``@triton.jit`` kernel; thread-safe."""

    def __init__(self, kernel: Any, name: str | None = None) -> None:
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
        self._entries: dict[Any, tuple[Any, Any, Any, tuple[Any, ...]]] = {}
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
            interpreter_state.active = True
            try:
                # masked-off lanes compute on filler values; numpy must not warn about them
                with numpy.errstate(all="ignore"):
                    self.kernel[grid3](*args, **constexprs)
            finally:
                interpreter_state.active = False
            return
        entry = self.entry_for(grid3, args, constexprs, config, options)
        if entry is None:
            return  # compile-only execution: compiled for the target, nothing to run
        run, function, packed, tail = entry
        stream = compat.current_stream(_device_of(args))
        run(grid3[0], grid3[1], grid3[2], stream, function, packed, None, None, None, *args, *tail)

    def entry_for(
        self,
        grid3: tuple[int, int, int],
        args: tuple[Any, ...],
        constexprs: Mapping[str, Any],
        config: KernelConfig | None,
        options: Mapping[str, Any] | None,
    ) -> tuple[Any, Any, Any, tuple[Any, ...]] | None:
        """The compiled kernel for these arguments (compiling on a miss); None where nothing
        runs (compile-only execution). ``constexprs`` already include the config's."""
        num_warps = config.num_warps if config else 4
        num_stages = config.num_stages if config else 2
        extra = dict(options or {})
        if config is not None and config.options:
            extra.update(config.options)
        key = (
            tuple(map(_arg_key, args)),
            tuple(constexprs.values()),
            tuple(constexprs),
            num_warps,
            num_stages,
            tuple(sorted(extra.items())),
            _device_of(args),
        )
        entry = self._entries.get(key)
        if entry is None:
            entry = self._compile(key, grid3, args, constexprs, num_warps, num_stages, extra)
        return entry

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
    ) -> tuple[Any, Any, Any, tuple[Any, ...]] | None:
        if len(args) != self.runtime_count or set(constexprs) != set(self.constexpr_names):
            raise TypeError(
                f"{self.name}: pass {self.runtime_count} runtime arguments positionally and the "
                f"constexprs {self.constexpr_names} by keyword"
            )
        target = _compile_target()
        if target is not None:
            from . import aot

            result = aot.compile_launch(
                self.kernel, self.name, target, args, constexprs, num_warps, num_stages, extra
            )
            if result.error is not None:
                raise KernelCompileError(f"{self.name}: {result.error}")
            return None
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
            tail = tuple(constexprs[name] for name in self.constexpr_names)
            entry = (compiled.run, compiled.function, compiled.packed_metadata, tail)
            self._entries[key] = entry
            return entry


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
        self._entries: dict[Any, tuple[Any, Any, Any, tuple[Any, ...]]] = {}

    def __call__(self, grid3: tuple[int, int, int], args: tuple[Any, ...], device: int) -> None:
        if self.cache.interpreted:
            self.cache(grid3, *args, config=self.config, options=self.options, **self.constexprs)
            return
        key = tuple([_arg_key(args[i]) for i in self.dynamic])
        entry = self._entries.get(key)
        if entry is None:
            entry = self.cache.entry_for(grid3, args, self.constexprs, self.config, self.options)
            if entry is None:
                return
            self._entries[key] = entry
        run, function, packed, tail = entry
        run(grid3[0], grid3[1], grid3[2], compat.current_stream(device), function, packed,
            None, None, None, *args, *tail)


def _compile_target() -> Any:
    """The Triton target of compile-only execution, or None when kernels run."""
    from . import runtime

    rt = runtime.peek()
    return rt.selection.execution.compile_target if rt is not None else None


def _device_of(args: tuple[Any, ...]) -> int:
    for arg in args:
        if isinstance(arg, torch.Tensor):
            return arg.device.index or 0
    return torch.cuda.current_device()
