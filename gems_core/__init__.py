"""gems: Triton kernels that replace PyTorch's ATen operators, on any AI chip.

    import gems_core
    gems_core.enable()              # every op gems serves, for the rest of the process
    with gems_core.use_gems():      # or only inside a block
        y = model(x)

``GEMS_DEVICE`` selects the backend (see ``python -m gems_core info``).
"""

from __future__ import annotations

from typing import Any

from ._version import __version__
from .contract import (
    BackendDescriptor,
    DetectedDevice,
    Deviation,
    DtypeSupport,
    KernelConfig,
    KernelOverride,
    KernelVariant,
    Limits,
    OpGate,
    TritonTarget,
    VariantCompile,
)
from .dispatch import disable, enable, registered_ops, use_gems
from .hookspecs import hookimpl
from .plugins import BackendError

__all__ = [
    "BackendDescriptor",
    "BackendError",
    "DetectedDevice",
    "Deviation",
    "DtypeSupport",
    "KernelConfig",
    "KernelOverride",
    "KernelVariant",
    "Limits",
    "OpGate",
    "TritonTarget",
    "VariantCompile",
    "__version__",
    "backend",
    "device",
    "disable",
    "enable",
    "fused",
    "hookimpl",
    "registered_ops",
    "use_gems",
]


def backend() -> BackendDescriptor:
    """The selected backend's descriptor (selects one on first call)."""
    from . import runtime

    return runtime.current().selection.descriptor


def __getattr__(name: str) -> Any:
    if name == "device":
        from . import runtime

        return runtime.current().device_type
    if name in ("fused", "configs"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'gems_core' has no attribute {name!r}")
