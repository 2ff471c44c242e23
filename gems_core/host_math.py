"""Integer helpers for host code on the per-call path.

Triton's own ``triton.cdiv`` and ``triton.next_power_of_2`` are constexpr functions in recent
versions, each host call costing microseconds; these are plain Python."""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for positive b."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()
