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


def _no_kernel(message: str, keyset: Any, *args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError(message)


def aten_kernel(op_name: str, dispatch_key: str) -> Callable[..., Any]:
    """ATen's own kernel for ``op_name`` ("aten::add.Tensor") on ``dispatch_key``, captured
    so gems can call it after overriding that key. Returns ``call(keyset, *args, **kwargs)``.

    A Python kernel receives a number where ATen had a "wrapped number" tensor (``x + 2``
    arrives as ``add.Tensor(x, 2)``), and the boxed call rejects a number there; such numbers
    go back as 0-d tensors of the promoted dtype, which promote exactly as the wrapped number
    did."""
    try:
        call = torch._C._dispatch_get_computed_kernel_for_dispatch_key(op_name, dispatch_key).call_boxed
    except RuntimeError:  # an operator ATen serves on other devices only (cudnn_batch_norm on the CPU)
        return functools.partial(_no_kernel, f"Could not run '{op_name}' with arguments from the '{dispatch_key}' backend.")
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
    try:
        return torch.tensor(value, dtype=dtype)
    except RuntimeError:  # a number the promoted dtype cannot hold (int8 + 1000, float16 + 1e300)
        # at its own width the number promotes as the wrapped number did (a 0-d tensor of the
        # same kind yields to the tensors with dimensions), and ATen's kernel converts it as it
        # converts a wrapped number: modulo for integers, to inf for floats
        return torch.tensor(value)


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


def gpu_triton_backend() -> str:
    """The Triton backend of the GPUs ``torch.cuda`` drives here: "hip" on ROCm builds of
    torch, else "cuda"."""
    return "hip" if torch.version.hip is not None else "cuda"


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
    _interpreter_fixes()
    _numpy_reductions()
    _interpreter_overflow_checks()
    rewrapped: dict[int, Any] = {}
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "triton.language" or name.startswith("triton.language.")):
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, JITFunction) and not isinstance(value, InterpretedFunction):
                if id(value) not in rewrapped:
                    rewrapped[id(value)] = InterpretedFunction(value.fn)
                setattr(module, attr, rewrapped[id(value)])


def _interpreter_overflow_checks() -> None:
    """Triton's interpreter checks every 32-bit integer add, subtract and multiply for
    overflow (its ``sanitize_overflow`` option: each operation redone in 64 bits, compared
    with the type's bounds and asserted). Compiled kernels carry that check only with
    ``debug``; in the interpreter it took two thirds of a small pointwise kernel's time
    (18 against 5.6 ms a call). Off, unless ``GEMS_INTERPRETER_OVERFLOW_CHECKS=1``; a
    kernel's launches that could pass 2^31 elements take 64-bit offsets (their ``INT64``
    flags) either way."""
    from triton.runtime import interpreter

    from . import settings

    builder = getattr(interpreter, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    if options is None or not dataclasses.is_dataclass(options) or not hasattr(options, "sanitize_overflow"):
        return
    wanted = bool(settings.get("GEMS_INTERPRETER_OVERFLOW_CHECKS"))
    if options.sanitize_overflow != wanted:
        builder.options = dataclasses.replace(options, sanitize_overflow=wanted)


#: combine functions (their Python functions) whose reductions the interpreter computes with
#: one NumPy call: the name of the NumPy reduction (:func:`reduce_in_numpy`)
_NUMPY_REDUCTIONS: dict[Any, str] = {}


def reduce_in_numpy(combine: Any, numpy_name: str) -> None:
    """Declare that a ``@triton.jit`` combine function of ``tl.reduce`` is NumPy's
    ``numpy_name`` reduction ("sum", "prod", "max" or "min", the last two NaN-propagating):
    Triton's interpreter then reduces with that one call instead of calling the combine once
    an element from Python (its fallback for any combine but its own library's), which
    made reductions most of the CPU backend's time. Compiled kernels are unaffected."""
    _NUMPY_REDUCTIONS[getattr(combine, "fn", combine)] = numpy_name


def _numpy_reductions() -> None:
    """The interpreter's ``tl.reduce`` with a combine declared by :func:`reduce_in_numpy`,
    over one operand of a dtype NumPy holds as itself (not bfloat16, float8 or int1, which
    the interpreter stores as other types), as one NumPy reduction. Floating sums may round
    differently from the element-by-element order (NumPy sums pairwise)."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    ops = getattr(interpreter, "ReduceOps", None)
    if ops is None or getattr(ops.apply_impl, "_gems_fixed", False):
        return
    original = ops.apply_impl
    plain = {tl.float16, tl.float32, tl.float64, tl.int8, tl.uint8, tl.int16, tl.uint16, tl.int32, tl.uint32,
             tl.int64, tl.uint64}
    functions = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}

    def apply_impl(self: Any, input: Any) -> Any:
        name = _NUMPY_REDUCTIONS.get(getattr(self.combine_fn, "fn", None))
        if name is None or len(input) != 1 or input[0].dtype not in plain:
            return original(self, input)
        x = input[0]
        return self.to_tensor(functions[name](x.handle.data, axis=self.axis, keepdims=self.keep_dims), x.dtype)

    apply_impl._gems_fixed = True  # type: ignore[attr-defined]
    ops.apply_impl = apply_impl


def _interpreter_fixes() -> None:
    """Scalars in Triton's interpreter before 3.9, brought to 3.9's handling, so that the CPU
    backend's kernels run on those releases too (triton >= 3.6):

    - a scalar used as an index (a ``range`` bound: ``range(0, n, BLOCK)``) became a Python
      int by ``int()`` of its one-element 1-d array, which NumPy 2.4 refuses ("only
      0-dimensional arrays can be converted"): every kernel with a runtime loop bound failed.
      The per-kernel patching of ``tl.tensor`` is wrapped to convert through ``squeeze()``.
    - a Python bool argument became an int32 array typed int1, which the interpreter's own
      check refuses: every call with a bool scalar (``mask | False``, ``where(c, x, True)``)
      failed. Bools get a bool array.
    - its builder had no bf16 constant (``tl.full`` of a number in bf16:
      ``where(c, bf16_tensor, 3)``). It gets 3.9's.

    Harmless where the interpreter does so already."""
    import numpy as np
    from triton.runtime import interpreter

    patch = getattr(interpreter, "_patch_lang_tensor", None)
    if patch is not None and not getattr(patch, "_gems_fixed", False):

        def patch_lang_tensor(tensor: Any, scope: Any) -> None:
            patch(tensor, scope)
            scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

        patch_lang_tensor._gems_fixed = True  # type: ignore[attr-defined]
        interpreter._patch_lang_tensor = patch_lang_tensor
    convert = getattr(interpreter, "_implicit_cvt", None)
    if convert is not None and not getattr(convert, "_gems_fixed", False):
        import triton.language as tl

        def implicit_cvt(arg: Any) -> Any:
            if isinstance(arg, bool):
                return tl.tensor(interpreter.TensorHandle(np.array([arg], dtype=np.bool_), tl.int1), tl.int1)
            return convert(arg)

        implicit_cvt._gems_fixed = True  # type: ignore[attr-defined]
        interpreter._implicit_cvt = implicit_cvt
    builder = getattr(interpreter, "InterpreterBuilder", None)
    if builder is not None and not hasattr(builder, "get_bf16") and hasattr(builder, "create_fp_trunc"):
        import triton.language as tl

        def get_bf16(self: Any, value: float) -> Any:
            """A bf16 constant (``tl.full`` of a number in bf16), stored as the interpreter
            stores bf16: the fp32 value's upper half (sign and -0.0 kept), rounded to even."""
            bits = int(np.array([value], dtype=np.float32).view(np.uint32)[0])
            rounded = 0x7FC0 if value != value else (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
            return interpreter.TensorHandle(np.array([rounded], dtype=np.uint16), tl.bfloat16)

        builder.get_bf16 = get_bf16


def is_interpreted(kernel: Any) -> bool:
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(kernel, InterpretedFunction)


@functools.cache
def device_interface() -> Any:
    """The running Triton driver's torch device module (``torch.cuda`` on NVIDIA and AMD):
    current device, device guard, streams."""
    return _driver.active.get_device_interface()


def current_device() -> int:
    return device_interface().current_device()


@functools.cache
def device_name(index: int) -> str:
    """Device ``index``'s model name (as the driver reports it)."""
    return str(device_interface().get_device_name(index))


def device_guard(index: int) -> Any:
    """A context manager that makes device ``index`` current inside it."""
    return device_interface().device(index)


#: a tensor's device index, -1 on the CPU (a CPU number next to device tensors is the op's
#: to judge, as in ATen)
_index_of = torch.Tensor.get_device


def on_operands_device(fn: Callable[..., Any], device_type: str) -> Callable[..., Any]:
    """``fn`` run with its operands' device current: kernels compile, tune and launch on the
    device their tensors are on, whichever device is current (one index comparison when it
    is the current one). Operands on two devices of ``device_type`` raise ATen's error."""
    current, guard, index_of, tensor = current_device_function(), device_guard, _index_of, torch.Tensor

    def on_device(*args: Any, **kwargs: Any) -> Any:
        found = -1
        for value in (*args, *kwargs.values()) if kwargs else args:
            if isinstance(value, tensor):
                items: Any = (value,)
            elif isinstance(value, (list, tuple)) and value and isinstance(value[0], tensor):
                items = value  # a tensor list (cat, stack): one device for all
            else:
                continue
            for item in items:
                index = index_of(item) if isinstance(item, tensor) else -1
                if index < 0 or index == found:
                    continue
                if found >= 0:
                    raise RuntimeError(
                        "Expected all tensors to be on the same device, but found at least two "
                        f"devices, {device_type}:{found} and {device_type}:{index}!"
                    )
                found = index
        if found < 0 or found == current():
            return fn(*args, **kwargs)
        with guard(found):
            return fn(*args, **kwargs)

    on_device.__wrapped__ = fn  # type: ignore[attr-defined]
    return on_device


def current_device_function() -> Callable[[], int]:
    """The cheapest way to ask for the current device's index, for per-launch paths."""
    try:
        interface = device_interface()
    except RuntimeError:  # no device driver (Triton's interpreter): CPU tensors, one device
        return lambda: 0
    if interface is torch.cuda and hasattr(torch._C, "_cuda_getDevice"):
        torch.cuda.init()  # the raw query assumes an initialized CUDA
        return torch._C._cuda_getDevice
    return interface.current_device


def prime_compile_key() -> None:
    """Compute Triton's hash of its own installation, part of every compile's cache key
    (hashing the package's files takes most of a second, once a process), before the first
    compile needs it. Triton versions without it have nothing to prime."""
    try:
        from triton.runtime.cache import triton_key
    except ImportError:
        return
    triton_key()


def source_class(kernel: Any) -> type:
    """The class of compile source Triton makes for a JIT function (a Gluon kernel has its
    own), also in a process where the function was never bound to a device, where Triton
    has not attached it yet."""
    cls = getattr(kernel, "ASTSource", None)
    if isinstance(cls, type):
        return cls
    is_gluon = getattr(kernel, "is_gluon", None)
    if callable(is_gluon) and is_gluon():
        from triton.experimental.gluon._runtime import GluonASTSource

        return GluonASTSource
    from triton.compiler import ASTSource

    return ASTSource
