"""What the NVIDIA backend's Gluon kernels for Hopper (sm_90) share: Gluon and its Hopper
module (``gluon`` is None where the installed Triton has none: Triton 3.5 and later have it),
the bulk-copy entry points under their current or Triton 3.6 names, and the chip check."""

from __future__ import annotations

import functools

import torch

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
except ImportError:  # pragma: no cover - an older Triton: no variant is offered
    gluon = gl = fence_async_shared = mbarrier = tma = warpgroup_mma = warpgroup_mma_wait = None
    TensorDescriptor = tma_load = tma_store = None
else:
    # the copy entry points were renamed after Triton 3.6
    tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
    tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global

__all__ = ["TensorDescriptor", "available", "cdiv", "fence_async_shared", "gl", "gluon", "is_hopper", "mbarrier", "tma",
           "tma_load", "tma_store", "warpgroup_mma", "warpgroup_mma_wait"]


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for positive b, for the kernels' host code: plain Python, where a host call
    of Triton's ``cdiv`` (a constexpr function) costs microseconds."""
    return -(-a // b)


def available() -> bool:
    """Whether the installed Triton has Gluon's Hopper module."""
    return gluon is not None


@functools.lru_cache(maxsize=None)
def is_hopper(index: int) -> bool:
    """Whether CUDA device ``index`` is a Hopper GPU (compute capability 9.0)."""
    return torch.cuda.get_device_capability(index) == (9, 0)
