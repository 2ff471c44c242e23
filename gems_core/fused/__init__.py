"""Fused LLM ops that are not ATen operators: call them by name.

    from gems_core import fused
    y = fused.silu_and_mul(x)                      # silu(x[..., :d]) * x[..., d:]
    normed, residual = fused.skip_rms_norm(x, residual, weight)
    q, k = fused.apply_rotary_position_embedding(q, k, cos, sin)

Each is also a ``torch.library`` custom op in the ``gems`` namespace (``torch.ops.gems.*``)
with a fake kernel, so ``torch.compile`` traces through it, and an autograd formula whose
backward runs on Triton kernels too. A pure-PyTorch ``*_reference`` sits next to each op.

The kernels are defined on first use, once the backend (and so the Triton interpreter
setting) is known: importing this package selects nothing.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

#: public name -> defining submodule
_EXPORTS = {
    "silu_and_mul": "gated_activation",
    "gelu_and_mul": "gated_activation",
    "silu_and_mul_reference": "gated_activation",
    "gelu_and_mul_reference": "gated_activation",
    "skip_rms_norm": "skip_norm",
    "skip_layer_norm": "skip_norm",
    "skip_rms_norm_reference": "skip_norm",
    "skip_layer_norm_reference": "skip_norm",
    "apply_rotary_position_embedding": "rotary",
    "apply_rotary_position_embedding_reference": "rotary",
}
_lock = threading.Lock()

__all__ = [
    "apply_rotary_position_embedding",
    "apply_rotary_position_embedding_reference",
    "gelu_and_mul",
    "gelu_and_mul_reference",
    "load",
    "silu_and_mul",
    "silu_and_mul_reference",
    "skip_layer_norm",
    "skip_layer_norm_reference",
    "skip_rms_norm",
    "skip_rms_norm_reference",
]


#: the native dispatch layer's registration in front of the custom ops (when it serves)
_native_registration: Any = None
_loaded = False


def load() -> None:
    """Define the kernels and register the ``gems::*`` custom ops (once)."""
    global _loaded
    with _lock:
        if _loaded:
            return
        from .. import runtime

        runtime.current()  # kernels must be defined after the interpreter setting is known
        modules = [importlib.import_module(f"{__name__}.{module}") for module in sorted(set(_EXPORTS.values()))]
        _front_with_native_layer(modules)
        _loaded = True


def _front_with_native_layer(modules: list[Any]) -> None:
    """Put the native dispatch layer (gems_core.native) in front of the custom ops on the
    backend's dispatch key, as ``enable()`` does for ATen operators: a repeated call then
    skips their Python implementation. Calls needing a gradient still pass through the
    Python autograd wrapper first; inference-mode calls reach the backend key directly."""
    global _native_registration
    import torch

    from .. import native, runtime

    registration = native.open_registration("gems", runtime.current().selection.execution)
    if registration is None:
        return
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, torch._library.custom_ops.CustomOpDef) and value._namespace == "gems":
                native.front(registration, value._name, value._init_fn)
    _native_registration = registration


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    load()
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups are plain attribute reads, not this function
    return value
