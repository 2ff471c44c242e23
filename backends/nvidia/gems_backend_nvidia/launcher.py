"""Kept launches of the NVIDIA backend's Gluon kernels.

A kernel's first launch of a signature goes through Triton (``kernel[grid](...)``, which
compiles on a miss; with background compiles, ATen serves the calls until a worker has
compiled it: :func:`gems_core.launches.before_compile`); the compiled kernel it returns is kept, and later calls of the
signature go to its launcher directly, without Triton's per-call binding and specialization
of the arguments (a few microseconds of Python per argument). This is safe only for kernels
that specialize nothing but their constexprs, which the signature key must name: their
integer arguments are declared ``do_not_specialize`` and their pointers
``do_not_specialize_on_alignment``.

Each launch is also reported to gems' native dispatch layer while it records a call
(:mod:`gems_core.launches`): the kernel's parameters as Triton's launcher passes them, host
tensor descriptors expanded into the TMA tensor map (a
:class:`~gems_core.launches.TensorMap`, which the layer encodes on each launch from
the operand's address) and the descriptor's sizes and strides. A call whose recipe repeats
the launch then runs from C++ with no Python. A kernel whose launch the layer could not
repeat (clusters, scratch memory, a Triton that passes its parameters otherwise) marks the
call unrepeatable instead.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch

from gems_core import launches
from gems_core.launches import LaunchedKernel, TensorMap

#: Triton's scalar parameter types -> the recorder's launch codes
_SCALAR_CODES = {"i8": "b", "i16": "h", "i32": "i", "i64": "l", "u8": "B", "u16": "H", "u32": "I", "u64": "K",
                 "fp32": "f", "f32": "f", "fp64": "d"}
#: CU_TENSOR_MAP_L2_PROMOTION_L2_128B, which Triton's launcher encodes its maps with
_L2_PROMOTION_128B = 2


class _Reported:
    """What the native layer needs to repeat a kept launch (``kernel``: function, block
    threads, dynamic shared memory, parameter codes) and how to expand a launch's arguments
    into the kernel's parameters (:meth:`parameters`)."""

    def __init__(self, kernel: LaunchedKernel, expand: tuple[Any, ...]) -> None:
        self.kernel = kernel
        self._expand = expand  # per argument: None (as is), "skip" (constexpr) or a descriptor's metadata

    def parameters(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        out: list[Any] = []
        for value, how in zip(args, self._expand):
            if how is None:
                out.append(value.data_ptr() if isinstance(value, torch.Tensor) else value)
            elif how != "skip":
                out.extend(_tensor_map(value, *how))
        return tuple(out)


def _tensor_map(desc: Any, data_type: int, swizzle: int, element_size: int,
                block: tuple[int, ...]) -> list[Any]:
    """A host descriptor as the launcher passes it: the tensor map, the sizes, the strides."""
    shape, strides = [int(s) for s in desc.shape], [int(s) for s in desc.strides]
    rank = len(shape)
    tensor_map = TensorMap(
        address=desc.base.data_ptr(),
        data_type=data_type,
        swizzle=swizzle,
        fill=1 if getattr(desc, "padding", "zero") == "nan" else 0,
        promotion=_L2_PROMOTION_128B,
        dims=tuple(reversed(shape)),
        strides=tuple(element_size * strides[i] for i in range(rank - 2, -1, -1)),
        box=tuple(reversed(block)),
    )
    return [tensor_map, *shape, *strides]


def reported(compiled: Any) -> _Reported | None:
    """How to report ``compiled``'s launches to the native layer; None where the layer could
    not make them as Triton's launcher does."""
    try:
        from triton.backends.nvidia.driver import TMA_DTYPE_DEVICE_TO_HOST
    except ImportError:
        return None
    metadata = compiled.metadata
    if not launches.plain_launch(metadata):
        return None
    packed = getattr(compiled, "packed_metadata", None)
    if not (isinstance(packed, tuple) and len(packed) == 3 and all(isinstance(v, int) for v in packed)):
        return None
    warps, ctas, shared = packed
    if ctas != 1:
        return None
    names = list(compiled.src.fn.arg_names)
    signature = compiled.src.signature
    descriptors = list(getattr(metadata, "tensordesc_meta", None) or ())
    codes: list[str] = []
    expand: list[Any] = []
    for index, name in enumerate(names):
        ty = signature.get(name, signature.get(index)) if isinstance(signature, dict) else None
        if not isinstance(ty, str):
            return None
        if ty == "constexpr":
            expand.append("skip")
        elif ty.startswith("tensordesc"):
            if not descriptors:
                return None
            meta = descriptors.pop(0)
            if not isinstance(meta, dict) or meta.get("fp4_padded") or meta.get("is_im2col"):
                return None
            block = tuple(int(b) for b in meta["block_size"])
            data_type = TMA_DTYPE_DEVICE_TO_HOST[meta["elem_type"]]
            expand.append((data_type, int(meta["swizzle"]), int(meta["elem_size"]), block))
            codes += ["T", *"i" * len(block), *"l" * len(block)]
        elif ty.startswith("*"):
            expand.append(None)
            codes.append("O")
        elif ty in _SCALAR_CODES:
            expand.append(None)
            codes.append(_SCALAR_CODES[ty])
        else:
            return None
    if descriptors:
        return None
    # Triton's launcher passes its scratch pointers after the kernel's parameters (null here)
    codes += ["O" for field in ("global_scratch_size", "profile_scratch_size") if hasattr(metadata, field)]
    return _Reported(LaunchedKernel(int(compiled.function), 32 * warps, shared, "".join(codes)), tuple(expand))


def _dims(grid: Sequence[int]) -> tuple[int, ...]:
    """A grid as three dimensions."""
    return tuple(grid) + (1,) * (3 - len(grid))


class KeptLauncher:
    """Launches ``kernel`` with ``options`` (``num_warps``, ``maxnreg``, ...), keeping the
    compiled kernel of each signature key."""

    def __init__(self, kernel: Any, **options: Any) -> None:
        self.kernel = kernel
        self.options = options
        self._compiled: dict[Hashable, Callable[[Sequence[int], int, tuple[Any, ...]], None]] = {}
        self._reported: dict[Hashable, _Reported | None] = {}

    def __call__(self, grid: Sequence[int], args: tuple[Any, ...], key: Hashable, device: int) -> None:
        """Launch on CUDA device ``device``; ``key`` names everything the compile depends on
        (dtypes, constexpr values) besides the device."""
        if device == torch.cuda.current_device():
            self._launch(grid, args, (device, key))
        else:  # kernels launch on the current device
            with torch.cuda.device(device):
                self._launch(grid, args, (device, key))

    def _launch(self, grid: Sequence[int], args: tuple[Any, ...], key: Hashable) -> None:
        launch = self._compiled.get(key)
        if launch is not None:
            launch(grid, launches.current_stream(key[0]), args)  # type: ignore[index]
        else:
            launches.before_compile(self.kernel, args, self.options, key)  # ATen may serve meanwhile
            kernel = self.kernel[tuple(grid)](*args, **self.options)
            run, function = getattr(kernel, "run", None), getattr(kernel, "function", None)
            packed = getattr(kernel, "packed_metadata", None)
            if run is None or function is None or packed is None:
                launches.unrepeatable()  # nothing to describe the launch with
                return  # a Triton whose launch returns no compiled kernel: every call goes through it

            def kept(grid: Sequence[int], stream: int, args: tuple[Any, ...]) -> None:
                run(*_dims(grid), stream, function, packed, None, None, None, *args)

            self._compiled[key] = kept
            try:
                self._reported[key] = reported(kernel)
            except (AttributeError, KeyError, TypeError, ValueError):
                self._reported[key] = None
        launches.launched()
        if launches.recording():
            self._report(grid, args, key)

    def _report(self, grid: Sequence[int], args: tuple[Any, ...], key: Hashable) -> None:
        how = self._reported.get(key)
        if how is None:
            launches.unrepeatable()
            return
        launches.report(how.kernel, grid, how.parameters(args))

    def kept(self) -> int:
        """How many signatures launch through their compiled kernel directly."""
        return len(self._compiled)
