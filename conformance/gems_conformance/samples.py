"""The one shared sample-input generator.

Every op case draws its inputs from here, so every op meets the same layouts: contiguous,
transposed, sliced with a step, broadcast, expanded (stride 0), empty, 0-d, sizes that are
not powers of two (2^k + 17), and special values where the op defines them. Data is random
(never zeros) and reproducible: each sample seeds its own generator.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

PROFILES = ("quick", "full", "large")

#: representative 2-d shapes per profile; the odd ones are 2^k + 17
SHAPES = {
    "quick": [(5, 7), (3, 33)],
    "full": [(64, 128), (1024 + 17, 257), (4, 4096 + 17)],
    "large": [(2**16, 2**15 + 17)],  # > 2^31 elements
}

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
INT_DTYPES = (torch.int32, torch.int64, torch.int16, torch.int8, torch.uint8)
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES + (torch.bool,)


@dataclass
class Sample:
    """One call's inputs. ``label`` is the sample class reports group by."""

    label: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        def one(x: Any) -> str:
            if isinstance(x, torch.Tensor):
                return f"Tensor{list(x.shape)}{tuple(x.stride())}:{str(x.dtype).replace('torch.', '')}"
            return repr(x)

        parts = [one(a) for a in self.args] + [f"{k}={one(v)}" for k, v in self.kwargs.items()]
        return f"{self.label}({', '.join(parts)})"


def _generator(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def make_tensor(
    shape: Sequence[int],
    dtype: torch.dtype,
    device: torch.device | str,
    seed: int = 0,
    *,
    low: float | None = None,
    high: float | None = None,
) -> torch.Tensor:
    """Random, non-zero-filled data of ``dtype`` made on the CPU and moved to ``device``."""
    g = _generator(seed)
    if dtype == torch.bool:
        t = torch.rand(shape, generator=g) > 0.5
    elif dtype.is_floating_point:
        lo = -3.0 if low is None else low
        hi = 3.0 if high is None else high
        t = (torch.rand(shape, generator=g, dtype=torch.float64) * (hi - lo) + lo).to(dtype)
    else:
        info = torch.iinfo(dtype)
        lo = max(info.min, -9 if low is None else int(low))
        hi = min(info.max, 10 if high is None else int(high))
        t = torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype)
    return t.to(device)


def layouts(
    shape: Sequence[int], dtype: torch.dtype, device: torch.device | str, seed: int = 0, **kw: Any
) -> Iterator[tuple[str, torch.Tensor]]:
    """The same logical shape in every memory layout (``shape`` must be rank 2 or more)."""
    shape = tuple(shape)
    yield "contiguous", make_tensor(shape, dtype, device, seed, **kw)
    yield "transposed", make_tensor(shape[::-1], dtype, device, seed + 1, **kw).transpose(0, -1)
    wide = shape[:-1] + (shape[-1] * 2,)
    yield "strided", make_tensor(wide, dtype, device, seed + 2, **kw)[..., ::2]
    row = (1,) + shape[1:]
    yield "expanded", make_tensor(row, dtype, device, seed + 3, **kw).expand(shape)


def ramp_like(y: torch.Tensor) -> torch.Tensor:
    """Upstream gradients for autograd checks: -1 .. 1 over ``y``'s elements in steps of
    1/64, in ``y``'s shape and dtype. Multiples of 1/64 are exact in every floating dtype, so
    the float64 reference and the device see the same gradients: a weight gradient that
    sums them to nearly zero is then compared on the op's error, not on rounding of the
    inputs. The step of element ``i`` of ``n`` is ``round(128 * i / (n - 1))``, computed in
    integers: a float32 (or half-precision) linspace would put an element whose position
    lies within its rounding error of a half step on the other side of it than the float64
    reference's linspace does, a different gradient there (by 1/64: 2 of the 1,083,392
    elements of a (4, 8, 529, 64) attention output, whose rows then failed the accuracy
    tier on gems and on ATen alike), and half precision gives inf and NaN past 2^16 points."""
    n = y.numel()
    steps = max(n - 1, 1)
    i = torch.arange(n, dtype=torch.int64, device=y.device)
    k = (256 * i + steps) // (2 * steps) - 64  # round(128 * i / steps) - 64; halves round up
    return (k.to(torch.float32) / 64).to(y.dtype).view_as(y)


def special_values(dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """NaN, +-Inf, -0.0, subnormals and ordinary values, for ops that define them."""
    if not dtype.is_floating_point:
        raise ValueError("special values exist for floating dtypes only")
    tiny = torch.finfo(dtype).tiny
    values = [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, tiny / 4, -tiny / 2, 1.5, -2.25, 7.0]
    return torch.tensor(values, dtype=torch.float64).to(dtype).to(device)


def elementwise(
    num_inputs: int,
    dtype: torch.dtype,
    device: torch.device | str,
    profile: str = "quick",
    *,
    special: bool = True,
    low: float | None = None,
    high: float | None = None,
) -> Iterator[Sample]:
    """Samples for an elementwise op of ``num_inputs`` tensor operands."""
    kw = {"low": low, "high": high}
    for n, shape in enumerate(SHAPES[profile]):
        for i, (label, first) in enumerate(layouts(shape, dtype, device, seed=100 * n, **kw)):
            rest = [make_tensor(shape, dtype, device, 100 * n + 10 * i + j, **kw) for j in range(1, num_inputs)]
            yield Sample(label, (first, *rest))
        if num_inputs > 1:
            # broadcast: a row and a column against the full shape
            rest = [make_tensor((shape[-1],) if j % 2 else (shape[0], 1), dtype, device, 7 + j, **kw)
                    for j in range(1, num_inputs)]
            yield Sample("broadcast", (make_tensor(shape, dtype, device, 5, **kw), *rest))
    yield Sample("empty", tuple(make_tensor((0, 3), dtype, device, j, **kw) for j in range(num_inputs)))
    yield Sample("0-d", tuple(make_tensor((), dtype, device, 11 + j, **kw) for j in range(num_inputs)))
    if special and dtype.is_floating_point:
        base = special_values(dtype, device)
        others = [base.roll(j) for j in range(1, num_inputs)]
        yield Sample("special", (base, *others))
