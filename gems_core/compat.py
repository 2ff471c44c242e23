"""Every difference between supported Triton and PyTorch versions, decided in one place.

Supported: Triton 3.6-3.9, PyTorch 2.11-2.13.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import torch
import triton
from packaging.version import Version
from triton.runtime import driver as _driver

TRITON_VERSION = Version(triton.__version__.split("+")[0])
TORCH_VERSION = Version(torch.__version__.split("+")[0])

SUPPORTED_TRITON = ">=3.6,<3.10"
SUPPORTED_TORCH = ">=2.11,<2.14"


def aten_kernel(op_name: str, dispatch_key: str) -> Callable[..., Any]:
    """ATen's own kernel for ``op_name`` ("aten::add.Tensor") on ``dispatch_key``, captured
    so gems can call it after overriding that key. Returns ``call(keyset, *args, **kwargs)``.

    A Python kernel receives a number where ATen had a "wrapped number" tensor (``x + 2``
    arrives as ``add.Tensor(x, 2)``), and the boxed call rejects a number there; such numbers
    go back as 0-d tensors of the promoted dtype, which promote exactly as the wrapped number
    did."""
    call = torch._C._dispatch_get_computed_kernel_for_dispatch_key(op_name, dispatch_key).call_boxed
    packet, _, overload = op_name.removeprefix("aten::").partition(".")
    schema = getattr(getattr(torch.ops.aten, packet), overload or "default")._schema
    tensor_args = {
        i: arg.name for i, arg in enumerate(schema.arguments) if str(arg.type) == "Tensor"
    }
    if not tensor_args:
        return call
    names = set(tensor_args.values())

    def call_rewrapped(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        args = tuple(
            _as_tensor(a, tensors) if i in tensor_args and _is_number(a) else a
            for i, a in enumerate(args)
        )
        kwargs = {
            k: _as_tensor(v, tensors) if k in names and _is_number(v) else v for k, v in kwargs.items()
        }
        return call(keyset, *args, **kwargs)

    return call_rewrapped


def _is_number(value: Any) -> bool:
    return isinstance(value, (bool, int, float, complex))


def _as_tensor(value: Any, tensors: list[torch.Tensor]) -> torch.Tensor:
    dtype = torch.result_type(tensors[0], value) if tensors else None
    return torch.tensor(value, dtype=dtype)


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
    return _driver.active.get_current_stream(device_index)


def stream_function() -> Callable[[int], int]:
    """The running Triton driver's ``get_current_stream`` (device index -> stream handle),
    looked up once by callers on a per-call path."""
    return _driver.active.get_current_stream


def use_interpreter() -> None:
    """Run kernels defined from now on in Triton's interpreter.

    Triton decides interpreter-or-compiler when a function is decorated, and its own
    ``@triton.jit`` helpers (``tl.sum``, ``tl.max``, ``tl.cdiv``...) were decorated when
    triton was first imported, before gems knew its backend. Those helpers are wrapped again
    for the interpreter, in every loaded ``triton.language`` module."""
    import os
    import sys

    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    os.environ["TRITON_INTERPRET"] = "1"
    triton.knobs.runtime.interpret = True
    rewrapped: dict[int, Any] = {}
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "triton.language" or name.startswith("triton.language.")):
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, JITFunction) and not isinstance(value, InterpretedFunction):
                if id(value) not in rewrapped:
                    rewrapped[id(value)] = InterpretedFunction(value.fn)
                setattr(module, attr, rewrapped[id(value)])


def is_interpreted(kernel: Any) -> bool:
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(kernel, InterpretedFunction)
