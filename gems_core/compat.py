"""Every difference between supported Triton and PyTorch versions, decided in one place.

Supported: Triton 3.6-3.9, PyTorch 2.11-2.13.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import torch
import triton
from packaging.version import Version

TRITON_VERSION = Version(triton.__version__.split("+")[0])
TORCH_VERSION = Version(torch.__version__.split("+")[0])

SUPPORTED_TRITON = ">=3.6,<3.10"
SUPPORTED_TORCH = ">=2.11,<2.14"


def aten_kernel(op_name: str, dispatch_key: str) -> Callable[..., Any]:
    """ATen's own kernel for ``op_name`` ("aten::add.Tensor") on ``dispatch_key``, captured
    so gems can call it after overriding that key. Returns ``call(keyset, *args, **kwargs)``."""
    kernel = torch._C._dispatch_get_computed_kernel_for_dispatch_key(op_name, dispatch_key)
    return kernel.call_boxed


@functools.cache
def options_class(backend: str) -> type | None:
    """The dataclass of compile options upstream Triton has for ``backend``, if any."""
    try:
        if backend == "cuda":
            from triton.backends.nvidia.compiler import CUDAOptions

            return CUDAOptions
        if backend == "hip":
            from triton.backends.amd.compiler import HIPOptions

            return HIPOptions
    except ImportError:
        return None
    return None


def accepted_options(backend: str | None) -> frozenset[str]:
    """Names of the compile options the running Triton accepts for ``backend``; the
    interpreter (``None``) accepts none beyond warps and stages, which it ignores."""
    cls = options_class(backend) if backend else None
    if cls is None:
        return frozenset()
    return frozenset(f.name for f in dataclasses.fields(cls))


def current_stream(device_index: int) -> int:
    from triton.runtime import driver

    return driver.active.get_current_stream(device_index)


def is_interpreted(kernel: Any) -> bool:
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(kernel, InterpretedFunction)
