"""Small @triton.jit helpers shared by kernels of several op modules.

Imported by op modules only (after the backend is selected), so the helpers are defined
for the interpreter or the compiler like the kernels that call them."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def program_offsets(BLOCK_SIZE: tl.constexpr, INT64: tl.constexpr):
    """The flat element offsets this program covers along grid axis 0: one block, in 64-bit
    arithmetic when INT64 (offsets that can pass 2^31)."""
    pid = tl.program_id(0)
    if INT64:
        pid = pid.to(tl.int64)
    return pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
