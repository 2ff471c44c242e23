"""Casts to bfloat16 in Triton's interpreter (the ``cpu`` backend), rounded as ATen rounds.

A GPU converts fp32 to bf16 rounding to nearest, ties to even, as ATen does; Triton's
interpreter (3.6-3.9) drops the low 16 bits instead (and casts integers and fp64 to bf16 by
a numeric cast to its uint16 storage, and flushes bf16 subnormals read as fp32), so about a
quarter of bf16 results would differ from ATen's by one ulp. While :func:`aten_bf16_rounding`
is active, the interpreter's casts to bf16 go through fp32 (as ATen's conversions do) and
round to nearest even, NaN becoming ATen's quiet NaN 0x7FC0; casts from bf16 widen it to fp32
exactly first. Casts between other types are the interpreter's own.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import triton.language as tl
from triton.runtime.interpreter import InterpreterBuilder, TensorHandle

_interpreter_cast = InterpreterBuilder.cast_impl


def round_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """The bf16 bit patterns nearest to ``values`` (ties to even), through fp32."""
    f32 = np.array(values, dtype=np.float32)  # a copy of any shape, 0-d included
    bits = f32.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(f32), np.uint16(0x7FC0), rounded)


def _cast(builder: Any, src: Any, dst_type: Any) -> Any:
    target = dst_type.scalar
    # a handle's own dtype can be stale (a comparison of bf16 values holds bools labelled
    # bf16): bf16 is what is stored as uint16 under that label
    bf16_source = src.dtype.scalar == tl.bfloat16 and src.data.dtype == np.uint16
    if bf16_source and target != tl.bfloat16:
        # exact: bf16 is the top half of an fp32 (subnormals included)
        f32 = TensorHandle((src.data.astype(np.uint32) << 16).view(np.float32), tl.float32)
        return f32 if target == tl.float32 else _interpreter_cast(builder, f32, dst_type)
    if target == tl.bfloat16 and not bf16_source:
        return TensorHandle(round_to_bf16_bits(src.data), tl.bfloat16)
    return _interpreter_cast(builder, src, dst_type)


@contextmanager
def aten_bf16_rounding() -> Iterator[None]:
    """Inside the block, interpreted kernels cast to bf16 as ATen does. The caller holds
    the lock that runs one interpreted kernel at a time (the interpreter's own patching of
    ``triton.language`` is process-wide too)."""
    InterpreterBuilder.cast_impl = _cast  # type: ignore[method-assign]
    try:
        yield
    finally:
        InterpreterBuilder.cast_impl = _interpreter_cast  # type: ignore[method-assign]
