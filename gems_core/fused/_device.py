"""Which tensors the fused ops' kernels can read: those on the selected backend's device
type. The public functions hand others to their pure-PyTorch references; the custom ops
called directly refuse them with a clear error instead of launching on foreign memory."""

from __future__ import annotations

import torch

from .. import runtime


def foreign(*tensors: torch.Tensor | None) -> bool:
    """True when a tensor is not on the backend's device type."""
    kind = runtime.current().selection.execution.device_type
    return any(t is not None and t.device.type != kind for t in tensors)


def check(name: str, *tensors: torch.Tensor | None) -> None:
    """Raise for tensors the backend's kernels cannot read."""
    if foreign(*tensors):
        kind = runtime.current().selection.execution.device_type
        devices = sorted({str(t.device) for t in tensors if t is not None and t.device.type != kind})
        raise RuntimeError(
            f"gems.fused.{name}: tensors on {', '.join(devices)}, but the selected backend runs "
            f"on {kind} tensors (the public function gems_core.fused.{name} falls back to its "
            "PyTorch reference for other devices)"
        )
