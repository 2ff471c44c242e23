"""Whether the selected backend leaves an op to ATen for a dtype: for ops that serve their
calls with another op's kernels (addr with addmm's, index_put with index_put_'s), which must
then leave the same calls to ATen (the backend's reason holds for the kernel, whichever op
runs it)."""

from __future__ import annotations

import torch

from .. import runtime


def leaves_to_aten(op: str, dtype: torch.dtype) -> bool:
    """True where the backend gates ``op`` (an ATen overload or packet) for ``dtype``."""
    return runtime.current().policy.leaves_to_aten(op, str(dtype).removeprefix("torch."))
