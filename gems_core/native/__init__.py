"""gems' native dispatch layer: a C++ kernel in front of the Python kernels on a GPU's
dispatch key, so that a repeated call of an op (same dtypes, shapes, strides, alignment,
aliasing between operands and arguments; tensor lists such as ``cat``'s included) allocates
its outputs and launches its compiled kernels with no Python at all.

How it works (``dispatch_layer.cpp``): each served overload gets a C++ boxed kernel on the
backend key. It keys a call by what gems' Python path decides from; the first call of a key
runs the Python kernel, the second runs it once more under recording
(:func:`gems_core.native.recorder.record_call`), which turns what the call did into a
*recipe* (outputs and scratch to allocate, compiled kernels to launch with their arguments as
numbers or addresses), and later calls run the recipe in C++. Calls the recorder cannot
describe (a host read of a result, an ATen fallback, random numbers from a generator
other than the device's default one, anything but allocations, views and launches) keep the
Python path; a draw of Philox counters from the default generator is made anew by each
replay (``native_dropout``). Ops whose Python path declares it
(cat of contiguous tensors, copy_ into a contiguous tensor, decode attention, elementwise
ops of contiguous operands) also get *length-generic* recipes: from a few recordings of calls
that differ only in sizes, each number of the recipe as a formula in one size, so that a
decoding loop's new key/value length at each step is served without Python
(:func:`gems_core.native.recorder.learn`). A new key of a family met before (the key with its
sizes and strides left out) is recorded on its first call, unless the family's latest
recording did not opt in: a decoding step meets each length once. Ops gems differentiates itself get a
gate on the Autograd key too (:func:`gate`): their calls that need no gradient reach the
native kernel without Python.

The layer is built from source the first time a process needs it (a C++ compiler and the
torch headers, which torch's wheels ship; no CUDA toolkit) and cached under
``GEMS_CACHE_DIR/native``. With background compiles (``GEMS_COMPILE=background``)
that build runs in a thread while the Python kernels serve, and the layer fronts the
registrations made once it is ready (the next ``use_gems()`` block or ``enable()``). ``GEMS_NATIVE=0`` turns it off; where it cannot be built, gems
warns once and runs its Python kernels as before. ``GEMS_NATIVE=check`` records every call
and runs each new recipe at once on copies of the operands, holding its results against the
Python kernel's (a mismatch raises): the way to validate the layer on a chip, e.g. under the
conformance suite's accuracy tier. Settings combine with commas (``force,check``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import sys
import threading
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from .. import background, launch_cache, settings

_SOURCE = Path(__file__).with_name("dispatch_layer.cpp")
_lock = threading.Lock()
_module: ModuleType | None = None
_problem: str | None = None
_tried = False
_building: threading.Thread | None = None


def _settings() -> frozenset[str]:
    return settings.get("GEMS_NATIVE")


def wanted() -> bool:
    """Whether the layer is switched on (``GEMS_NATIVE``, default on)."""
    return not _settings() & {"0", "off", "false", "no"}


def build_directory() -> Path:
    from ..disk_cache import cache_dir

    digest = hashlib.sha256(_SOURCE.read_bytes()).hexdigest()[:12]
    tag = f"torch{torch.__version__.replace('+', '_')}-py{sys.version_info[0]}{sys.version_info[1]}-{digest}"
    return cache_dir() / "native" / tag


def load(quiet: bool = False) -> ModuleType | None:
    """The compiled layer (built on first use), or None where it cannot be had; the reason
    is then :func:`problem`."""
    global _module, _problem, _tried
    if _module is not None or _tried:
        return _module
    with _lock:
        if _module is not None or _tried:
            return _module
        _tried = True
        try:
            _module = _build(quiet)
            _module.set_check("check" in _settings())
        except Exception as exc:  # no compiler, no headers, a failed build: Python kernels
            _problem = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
            warnings.warn(f"gems: the native dispatch layer is not available ({_problem}); "
                          "gems runs its Python kernels", RuntimeWarning, stacklevel=3)
            return None
        return _module


@contextlib.contextmanager
def build_lock(directory: Path) -> Iterator[None]:
    """Hold the build folder against other processes with an OS lock, which ends with its
    holder however that ends. torch's build marks a folder busy with a plain file that a
    process stopped mid-build (killed, or exiting while a thread built) leaves behind, and
    every later build there would wait on it forever: under this lock no live process is
    building, so such a file is stale and is removed."""
    try:
        import fcntl
    except ImportError:  # no POSIX locks: torch's own marker only
        yield
        return
    with open(directory / "gems-build.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            (directory / "lock").unlink(missing_ok=True)
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(quiet: bool) -> ModuleType:
    from torch.utils import cpp_extension

    directory = build_directory()
    directory.mkdir(parents=True, exist_ok=True)
    name = "gems_native_" + directory.name.rsplit("-", 1)[-1]
    built = any(directory.glob(f"{name}*.so"))
    if not built and not quiet:
        print(f"gems: building the native dispatch layer for torch {torch.__version__} "
              f"(once; about a minute) in {directory}", file=sys.stderr, flush=True)
    with build_lock(directory):
        return cpp_extension.load(
            name=name,
            sources=[str(_SOURCE)],
            build_directory=str(directory),
            extra_cflags=["-O2", "-std=c++17"],
            verbose=False,
        )


def loaded() -> ModuleType | None:
    """The layer where this process has loaded it already; never builds or waits."""
    return _module


def problem() -> str | None:
    """Why the layer is not available (None when it is, or before the first try)."""
    return _problem


def forced() -> bool:
    """``GEMS_NATIVE=force``: the layer also fronts the CPU interpreter's kernels (whose
    calls it cannot repeat, so every call takes its Python path through the layer): tests
    of the layer's argument and result conversion on machines without a GPU."""
    return "force" in _settings()


def _built() -> bool:
    directory = build_directory()
    return directory.exists() and any(directory.glob("gems_native_*.so"))


def _load_without_waiting() -> ModuleType | None:
    """The layer if it is loaded or built already; otherwise None while a thread builds it (a
    minute the first call must not wait): with background compiles, or after
    :func:`build_in_background`; else built now."""
    if _module is not None or _tried or _built():
        return load()
    if _building is None and background.mode() != "background":
        return load()
    build_in_background()
    return None


def build_in_background() -> None:
    """Start building (or loading) the layer in a thread, if no thread has; until it is
    ready, registrations run without it, in any compile mode. For processes that want gems'
    synchronous compiles without waiting a minute for the layer first (the conformance
    suite's workers)."""
    global _building
    if _building is not None or _module is not None or _tried:
        return  # started, built or given up: never wait on the build's lock here
    with _lock:
        if _building is None and _module is None and not _tried:
            _building = threading.Thread(target=load, name="gems-native-build", daemon=True)
            _building.start()


def available_for(execution: Any) -> ModuleType | None:
    """The layer, where it serves this execution and is switched on: where the backend whose
    hardware runs the kernels supplies their launch (``execution.launch``, from the hook
    ``gems_native_launch``), or in the CPU interpreter under ``GEMS_NATIVE=force``."""
    global _problem
    if execution.interpreter:
        return _load_without_waiting() if forced() else None
    launch = execution.launch
    if launch is None or not wanted():
        if execution.launch_problem:
            _problem = execution.launch_problem
        return None
    module = _load_without_waiting()
    if module is None:
        return None
    reason = module.set_driver(**{name: getattr(launch, name) for name in _DRIVER_ENTRIES})
    if reason:
        _problem = reason
        return None
    return module


#: the entry points of a :class:`~gems_core.contract.NativeLaunch` (``set_driver``'s arguments)
_DRIVER_ENTRIES = ("launch", "context_get", "context_set", "device_get", "primary_context_retain",
                   "error_string", "encode_tensor_map")


#: recipes (and keys seen once, and keys refused) kept per op before it starts afresh
LIMIT = 4096


def open_registration(namespace: str, execution: Any, autograd: bool = False) -> Any | None:
    """A registration block of native kernels for ``namespace``'s ops on the execution's
    dispatch key, or its Autograd key where ``autograd`` (:func:`front` and :func:`gate` add
    to it; ``close()`` removes them all), or None where the layer does not serve."""
    layer = available_for(execution)
    if layer is None:
        return None
    key = f"Autograd{execution.dispatch_key}" if autograd else execution.dispatch_key
    return layer.Registration(namespace, key)


def front(registration: Any, name: str, kernel: Any, shelf: str = "", gated: Iterable[torch.dtype] = (),
          foreign: bool = False) -> None:
    """Put a native kernel in front of the Python ``kernel`` of op ``name``. Kernels given
    the same ``shelf`` share what they learn (recipes, keys seen and refused), so a later
    registration of the same op and runtime starts from an earlier one's recipes; "" keeps
    them to this kernel. Calls involving a ``gated`` dtype (the backend leaves it to ATen)
    go to ATen's kernel from C++, without the Python kernel; so do calls with a tensor of
    more than zero dims on a device of another type, where ``foreign`` says the Python kernel
    declines those (``copy_`` between host and device: every training step's batch)."""
    from .recorder import record_call

    registration.impl(name, kernel, functools.partial(record_call, op=name), LIMIT, shelf, _carriers(gated),
                      foreign)


def gate(registration: Any, name: str, autograd_kernel: Any, gated: Iterable[torch.dtype] = ()) -> None:
    """Put a gate in front of op ``name``'s Python kernel on an Autograd key: a call that needs
    no gradient goes below autograd to the backend key (and the native kernel
    :func:`front` put there) without Python; a call that needs one and involves a ``gated``
    dtype goes to ATen's kernel for the key (a composite op's decomposition) from C++; others
    call ``autograd_kernel(keyset, ...)``."""
    registration.gate(name, autograd_kernel, _carriers(gated))


def _carriers(dtypes: Iterable[torch.dtype]) -> list[torch.Tensor]:
    """The layer takes dtypes as empty tensors of them (pybind11 knows tensors, not dtypes)."""
    return [torch.empty(0, dtype=dtype) for dtype in dtypes]


def clear() -> None:
    """Forget every recipe (plans were cleared: configs or settings changed)."""
    if _module is not None:
        from .recorder import forget

        _module.clear_all()
        forget()


launch_cache.on_invalidate(clear)


def stats(registration: Any) -> list[dict[str, Any]]:
    return list(registration.stats()) if registration is not None else []


def describe(execution: Any) -> str:
    """One line on the layer for ``python -m gems_core info`` (builds nothing)."""
    if execution.interpreter and not forced():
        return "not used (the CPU interpreter's calls cannot be replayed)"
    if execution.compile_target is not None:
        return "not used (compile-only execution)"
    if not execution.interpreter and execution.launch is None:
        if execution.launch_problem:
            return f"unavailable: {execution.launch_problem}"
        return "not used (the backend supplies no kernel launch for it: gems_native_launch)"
    if not wanted():
        return "off (GEMS_NATIVE=0)"
    if _problem is not None:
        return f"unavailable: {_problem}"
    directory = build_directory()
    state = f"built in {directory}" if _built() else "built on first use (about a minute, once)"
    mode = ", check mode" if "check" in _settings() else ""
    return f"on{mode}; {state}"

