"""The launch cache: compiled kernels keyed by what Triton specializes on.

A hit launches the compiled kernel directly (no binder, autotuner or heuristics wrapper); a
miss compiles through Triton once and stores the result. The key holds, per runtime argument,
what Triton's specialization looks at: a tensor's dtype and 16-byte alignment, an integer's
equality to 1, divisibility by 16 and 32/64-bit range; plus the constexprs, the launch
config and the device.

Convention for kernels launched through here: runtime arguments first (passed
positionally), constexprs after them (passed by keyword).
"""

from __future__ import annotations

import threading
from typing import Any, Mapping

import numpy
import torch

from . import compat
from .contract import KernelConfig

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_in_interpreted_kernel = threading.local()


class KernelCompileError(RuntimeError):
    """Triton could not compile a kernel for this chip (the op then goes to ATen)."""


def in_interpreted_kernel() -> bool:
    """True while the CPU interpreter runs a kernel on this thread: torch calls made by the
    interpreter itself must reach ATen, not gems."""
    return getattr(_in_interpreted_kernel, "active", False)


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
            _in_interpreted_kernel.active = True
            try:
                # masked-off lanes compute on filler values; numpy must not warn about them
                with numpy.errstate(all="ignore"):
                    self.kernel[grid3](*args, **constexprs)
            finally:
                _in_interpreted_kernel.active = False
            return
        num_warps = config.num_warps if config else 4
        num_stages = config.num_stages if config else 2
        extra = dict(options or {})
        if config is not None and config.options:
            extra.update(config.options)
        device = _device_of(args)
        key = (
            tuple(map(_arg_key, args)),
            tuple(constexprs.values()),
            tuple(constexprs),
            num_warps,
            num_stages,
            tuple(sorted(extra.items())),
            device,
        )
        entry = self._entries.get(key)
        if entry is None:
            entry = self._compile(key, grid3, args, constexprs, num_warps, num_stages, extra)
        run, function, packed, tail = entry
        stream = compat.current_stream(device)
        run(grid3[0], grid3[1], grid3[2], stream, function, packed, None, None, None, *args, *tail)

    def _compile(
        self,
        key: Any,
        grid: tuple[int, int, int],
        args: tuple[Any, ...],
        constexprs: Mapping[str, Any],
        num_warps: int,
        num_stages: int,
        extra: Mapping[str, Any],
    ) -> tuple[Any, Any, Any, tuple[Any, ...]]:
        if len(args) != self.runtime_count or set(constexprs) != set(self.constexpr_names):
            raise TypeError(
                f"{self.name}: pass {self.runtime_count} runtime arguments positionally and the "
                f"constexprs {self.constexpr_names} by keyword"
            )
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


def _device_of(args: tuple[Any, ...]) -> int:
    for arg in args:
        if isinstance(arg, torch.Tensor):
            return arg.device.index or 0
    return torch.cuda.current_device()
