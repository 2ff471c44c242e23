"""What an ATen call gives, to compare gems' answer with: its value, or its error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def answer(fn: Callable[[], torch.Tensor]) -> Any:
    """``fn()``'s result as nested lists on the CPU, or ``"ErrorType: message"`` if it raises
    (ATen's CUDA kernels have no integer products, for instance, where the CPU's do)."""
    try:
        return fn().cpu().tolist()
    except Exception as exc:  # noqa: BLE001 - the error itself is what is compared
        return f"{type(exc).__name__}: {exc}"
