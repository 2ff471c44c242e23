"""Launch reporting: the part of the vendor contract for a backend's own kernels that launch
outside gems' launch cache (``gems_kernel_variants``).

gems' native dispatch layer repeats a call from C++ once it has recorded what the call did:
the launches of the core's kernels are recorded by the launch cache, a variant's by the
variant itself. A variant function that sets ``fn.reports_launches = True`` reports, while
:func:`recording` is true, every launch it makes with :func:`report` (or, for one it cannot
describe, marks the call with :func:`unrepeatable`, and the call keeps the Python path).
Everything a reported launch reads must follow from the call's key: dtypes, shapes, strides,
16-byte alignment and argument values; addresses are taken apart into the operand they lie
in and an offset, and a :class:`TensorMap` is encoded again over each call's address.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from . import background
from .compat import current_stream
from .contract import LaunchedKernel
from .launch_cache import plain_launch
from .launch_cache import recording as _recording
from .native.recorder import TensorMap

__all__ = ["LaunchedKernel", "TensorMap", "before_compile", "current_stream", "launched", "plain_launch",
           "recording", "report", "unrepeatable"]

#: variants' background compiles, by (kernel name, signature key)
_pending: dict[Hashable, Any] = {}


def recording() -> bool:
    """Whether the native layer records the call this thread runs: report its launches."""
    return _recording.native is not None


def report(kernel: LaunchedKernel, grid: Sequence[int], parameters: Sequence[Any]) -> None:
    """Report one launch of ``kernel`` over ``grid`` (one to three dimensions) with its
    parameters in order, as ``kernel.codes`` types them: addresses as ints (or None),
    numbers, :class:`TensorMap` values. Nothing happens while no call is recorded."""
    launches = _recording.native
    if launches is not None:
        launches.append((kernel, tuple(grid) + (1,) * (3 - len(grid)), tuple(parameters)))


def unrepeatable() -> None:
    """The call this thread runs made a launch the layer cannot repeat: it keeps the Python
    path."""
    _recording.impure = True


def before_compile(kernel: Any, args: Sequence[Any], options: Mapping[str, Any], key: Hashable) -> None:
    """Call before a variant's first launch of a signature in this process (Triton's
    ``kernel[grid](*args, **options)``, which compiles on a miss); ``key`` names the
    signature. With background compiles (``GEMS_COMPILE``), while the call this thread runs has
    launched nothing, this starts the kernel's compile in a worker process and raises, so that
    ATen serves the call meanwhile; it returns when the call is to compile and launch: in sync
    mode, once the background compile is done (Triton's cache then holds it), or when the
    call has launched already and may not go to ATen (then it waits for a compile under way)."""
    name = getattr(getattr(kernel, "fn", kernel), "__name__", "kernel")
    background.await_compile(name, _pending, (name, key),
                             lambda: background.job_for(kernel, tuple(args), dict(options)))


def launched() -> None:
    """The call this thread runs launched a kernel of its own: from here on it is not handed
    to ATen whole (see :func:`before_compile`)."""
    _recording.launched = True
