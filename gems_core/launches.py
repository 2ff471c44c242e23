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

from collections.abc import Sequence
from typing import Any

from .compat import current_stream
from .contract import LaunchedKernel
from .launch_cache import plain_launch
from .launch_cache import recording as _recording
from .native.recorder import TensorMap

__all__ = ["LaunchedKernel", "TensorMap", "current_stream", "plain_launch", "recording", "report",
           "unrepeatable"]


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
