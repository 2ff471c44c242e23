"""The process-wide runtime: the selected backend, its frozen policy, and failure records.

Selection happens on first use (``enable()``, ``backend()``, ``device``, ``registered_ops()``),
never at import: importing gems_core has no side effects beyond defining names.
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from . import compat, logs
from .contract import Limits
from .policy import Policy, build_policy
from .selection import Selection, select


_numbers = itertools.count(1)


@dataclass
class Runtime:
    selection: Selection
    policy: Policy
    #: overload -> why it went to ATen at run time (e.g. a compile failure on this chip)
    runtime_fallbacks: dict[str, str] = field(default_factory=dict)
    #: unique among this process's runtimes: the native layer shares recipes between
    #: registrations of one runtime only
    number: int = field(default_factory=lambda: next(_numbers), compare=False)

    @property
    def interpreter(self) -> bool:
        return self.selection.execution.interpreter

    @property
    def device_type(self) -> str:
        return self.selection.execution.device_type

    @property
    def limits(self) -> Limits:
        """The limits of the chip kernels are built for (a compile target's own, when
        compiling ahead of time)."""
        target = self.selection.execution.compile_target
        descriptor = self.selection.descriptor
        return descriptor.limits_for(target.arch) if target is not None else descriptor.limits

    @property
    def compile_only(self) -> bool:
        """Kernels are compiled for ``execution.compile_target``, never run (compile tier)."""
        return self.selection.execution.compile_target is not None


_runtime: Runtime | None = None
_lock = threading.Lock()
#: run on each runtime as it is selected, before :func:`current` hands it out
_on_select: list[Callable[[Runtime], None]] = []


def on_select(fn: Callable[[Runtime], None]) -> None:
    """Run ``fn(runtime)`` on each runtime as it is selected: the registry loads the ops
    there and checks the policy against the tunables they declare."""
    _on_select.append(fn)


def current() -> Runtime:
    """The runtime, selecting the backend on first call."""
    global _runtime
    if _runtime is None:
        with _lock:
            if _runtime is None:
                logs.configure()
                selection = select()
                logs.get("selection").info("backend %s: %s", selection.backend.name, selection.reason)
                if selection.execution.interpreter:
                    # Triton decides interpreter-or-compiler when a kernel is defined, so this
                    # must be set before any op module is imported.
                    compat.use_interpreter()
                elif selection.execution.compile_target is not None:
                    import triton

                    if triton.knobs.runtime.interpret:
                        raise RuntimeError(
                            "GEMS_COMPILE_TARGET compiles kernels, which the Triton interpreter "
                            "does not: unset TRITON_INTERPRET"
                        )
                _runtime = Runtime(selection=selection, policy=build_policy(selection))
                for fn in _on_select:  # they may ask for this runtime (loading the ops does)
                    fn(_runtime)
    return _runtime


def peek() -> Runtime | None:
    """The runtime if one was selected already; never selects."""
    return _runtime



def compute_units(device_type: str, index: int | None) -> int:
    """How many independent compute units (SMs, CUs) the device has, for sizing grids that
    must fill the chip; 8 where the device does not say (the CPU interpreter, whose programs
    run one after another, wants few). Kept per device index (``None``: the current device)."""
    if device_type == "cpu":
        return 8
    if index is None:
        try:
            import torch

            index = torch.get_device_module(device_type).current_device()
        except Exception:
            return 8
    return _compute_units(device_type, index)


@functools.cache
def _compute_units(device_type: str, index: int) -> int:
    try:
        import torch

        props = torch.get_device_module(device_type).get_device_properties(index)
        units = int(getattr(props, "multi_processor_count", 0))
    except Exception:
        units = 0
    return units if units > 0 else 8
