"""bincount and isin (``Tensor_Tensor``, ``Tensor_Scalar``, ``Scalar_Tensor`` and their out=
forms): counting and set membership, the data-processing ops whose results depend on the
values.

bincount: one kernel finds the smallest and largest value with atomics; both are read back
at once (one sync, where ATen syncs for each) to refuse a negative value and size the
result ``max(input) + 1`` (at least ``minlength``); a second kernel adds one (or the
element's weight) into the element's bin with atomics. Counts are int64; weighted sums are
float32 for float32 weights and float64 for every other weight dtype, as in ATen. The
atomic float sums have no fixed order, so weighted calls are left to ATen while
deterministic algorithms are requested. What ATen rejects (a non-1-d or negative input,
weights of another length, a negative ``minlength``) goes to ATen, which raises.

isin: both operands are converted to their common dtype (``torch.result_type``, as ATen
promotes them) and each element is looked up among the test elements by one kernel: every
test element compared in turn where they are few (``BRUTE_FORCE_MAX``), else a binary
search of the sorted test elements. NaN is in nothing, and -0.0 equals 0.0. The result
is contiguous bool, shaped as ``elements``. ``assume_unique`` needs no use: the answer is
exact either way (ATen's is unspecified for repeated elements). ``Tensor_Scalar`` is
ATen's own definition, ``eq``/``ne`` with the scalar into a contiguous bool result. Bool
and complex operands go to ATen, which raises.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from .. import runtime
from ..codegen.pointwise import TL_DTYPES
from ..contract import KernelConfig
from ..host_math import cdiv
from ..launch_cache import LaunchCache
from ..registry import aten_op
from ..tuning import Tunable
from .kernel_lib import comparable, program_offsets
from .masked import write_out

BINCOUNT = Tunable(
    "bincount",
    params=("BLOCK_SIZE",),
    defaults=[KernelConfig({"BLOCK_SIZE": 1024}, num_warps=4)],
    description="bincount: BLOCK_SIZE input elements per program, for the value range and the histogram",
)
ISIN = Tunable(
    "isin",
    params=("BLOCK_SIZE",),
    defaults=[KernelConfig({"BLOCK_SIZE": 256}, num_warps=4)],
    description="isin: BLOCK_SIZE elements looked up per program",
)

_INT32 = 2**31 - 1
_INT64_MAX = 2**63 - 1
_INTEGRAL = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
#: test elements compared one by one up to this many; more are sorted and searched
BRUTE_FORCE_MAX = 64
_TEST_BLOCK = 64


@triton.jit
def _bounds_kernel(
    x_ptr,  # (n,) integers, stride x_stride
    bounds_ptr,  # (2,) int64: [min, max], starting at [INT64_MAX, INT64_MIN]
    n,
    x_stride,
    INT64: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    offsets = program_offsets(BLOCK_SIZE, INT64)
    mask = offsets < n
    x = tl.load(x_ptr + offsets * x_stride, mask=mask, other=0).to(tl.int64)
    tl.atomic_min(bounds_ptr, tl.min(tl.where(mask, x, 0x7FFFFFFFFFFFFFFF), 0))
    tl.atomic_max(bounds_ptr + 1, tl.max(tl.where(mask, x, -0x7FFFFFFFFFFFFFFF - 1), 0))


@triton.jit
def _histogram_kernel(
    x_ptr,  # (n,) non-negative integers, stride x_stride
    weights_ptr,  # (n,), stride w_stride; unused unless HAS_WEIGHTS
    out_ptr,  # (nbins,) zeros: int64 counts, or float32/float64 sums of weights
    n,
    x_stride,
    w_stride,
    HAS_WEIGHTS: tl.constexpr,
    INT64: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    # out[x[i]] += weights[i] (or 1)
    offsets = program_offsets(BLOCK_SIZE, INT64)
    mask = offsets < n
    bins = tl.load(x_ptr + offsets * x_stride, mask=mask, other=0).to(tl.int64)
    if HAS_WEIGHTS:
        amount = tl.load(weights_ptr + offsets * w_stride, mask=mask, other=0).to(out_ptr.dtype.element_ty)
    else:
        amount = tl.full((BLOCK_SIZE,), 1, tl.int64)
    tl.atomic_add(out_ptr + bins, amount, mask=mask)


@triton.jit
def _isin_kernel(
    x_ptr,  # (n,) contiguous, in the common dtype
    test_ptr,  # (m,) contiguous, same dtype; ascending (NaN last) when SORTED
    out_ptr,  # (n,) bool
    n,
    m,
    steps,  # binary search steps: the bit length of m
    SORTED: tl.constexpr,
    INVERT: tl.constexpr,
    TEST_BLOCK: tl.constexpr,
    INT64: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    # out[i] = (x[i] == test[j] for some j), negated when INVERT
    offsets = program_offsets(BLOCK_SIZE, INT64)
    mask = offsets < n
    x = comparable(tl.load(x_ptr + offsets, mask=mask))
    if SORTED:
        # the first j with test[j] >= x (NaN probes count as greater), then compare
        low = tl.zeros((BLOCK_SIZE,), tl.int64)
        high = tl.zeros((BLOCK_SIZE,), tl.int64) + m
        for _ in range(steps):
            open_range = low < high
            mid = (low + high) // 2
            probe = comparable(tl.load(test_ptr + mid, mask=mask & open_range))
            below = open_range & (probe < x)
            low = tl.where(below, mid + 1, low)
            high = tl.where(open_range & ~below, mid, high)
        inside = mask & (low < m)
        found = inside & (comparable(tl.load(test_ptr + low, mask=inside)) == x)
    else:
        found = tl.zeros((BLOCK_SIZE,), tl.int1)
        for start in range(0, m, TEST_BLOCK):
            cols = start + tl.arange(0, TEST_BLOCK)
            valid = cols < m
            test = comparable(tl.load(test_ptr + cols, mask=valid))
            hit = (x[:, None] == test[None, :]) & valid[None, :]
            found = found | (tl.max(hit.to(tl.int8), 1) > 0)
    if INVERT:
        found = found == 0
    tl.store(out_ptr + offsets, found, mask=mask)


_bounds = LaunchCache(_bounds_kernel, name="bincount_bounds")
# named as its tunable, so that the compile check finds the tunable's configs compiled
_histogram = LaunchCache(_histogram_kernel, name="bincount")
_isin = LaunchCache(_isin_kernel, name="isin")


def _value_range(x: torch.Tensor, config: KernelConfig, int64: bool) -> tuple[int, int]:
    """(min, max) of the non-empty 1-d integer ``x``, read back in one sync. In compile-only
    execution, where no kernel runs, (0, numel - 1) stands in (a size the result can have)."""
    n = x.numel()
    bounds = torch.tensor([_INT64_MAX, -_INT64_MAX - 1], dtype=torch.int64, device=x.device)
    _bounds((cdiv(n, config.params["BLOCK_SIZE"]),), x, bounds, n, x.stride(0), config=config,
            options=BINCOUNT.options(), INT64=int64)
    if runtime.current().compile_only:
        return 0, n - 1
    low, high = bounds.tolist()
    return low, high


@aten_op("bincount")
def bincount(self: torch.Tensor, weights: torch.Tensor | None = None, minlength: int = 0) -> Any:
    """How often each value 0 .. max(self) occurs in the 1-d non-negative integer ``self``
    (at least ``minlength`` bins), or the sum of the ``weights`` of its occurrences."""
    if self.dtype not in _INTEGRAL or minlength < 0:
        return NotImplemented  # ATen raises
    if weights is not None and (weights.dtype not in TL_DTYPES or weights.device != self.device):
        return NotImplemented  # complex weights, or ATen's device error
    if self.dim() == 1 and self.numel() == 0:
        return torch.zeros(minlength, dtype=torch.int64, device=self.device)  # as ATen, weighted too
    if self.dim() != 1 or (weights is not None and (weights.dim() != 1 or weights.numel() != self.numel())):
        return NotImplemented  # ATen raises
    dtype = torch.int64 if weights is None else torch.float32 if weights.dtype == torch.float32 else torch.float64
    if weights is not None and torch.are_deterministic_algorithms_enabled():
        return NotImplemented  # the atomic sums of weights have no fixed order
    n = self.numel()
    config = BINCOUNT.choose("bincount")
    strides = (abs(self.stride(0)), 0 if weights is None else abs(weights.stride(0)))
    int64 = (n - 1) * max(strides) > _INT32 or n > _INT32
    low, high = _value_range(self, config, int64)
    if low < 0 or high >= _INT64_MAX:
        return NotImplemented  # ATen raises: negative values, or too many bins
    out = torch.zeros(max(high + 1, minlength), dtype=dtype, device=self.device)
    _histogram(
        (cdiv(n, config.params["BLOCK_SIZE"]),), self, self if weights is None else weights, out, n,
        self.stride(0), strides[1], config=config, options=BINCOUNT.options(), HAS_WEIGHTS=weights is not None,
        INT64=int64,
    )
    return out


def _searchable(dtype: torch.dtype) -> bool:
    return dtype in TL_DTYPES and dtype != torch.bool


def _isin_tensors(elements: torch.Tensor, test_elements: torch.Tensor, invert: bool,
                  out: torch.Tensor | None, common: torch.dtype | None = None) -> Any:
    """``common``: the dtype the operands are compared in, where ``elements`` stands for a
    number (default: their result type)."""
    if not (_searchable(elements.dtype) and _searchable(test_elements.dtype)):
        return NotImplemented  # ATen raises for bool and complex operands
    common = common or torch.result_type(elements, test_elements)
    if (not _searchable(common) or elements.device != test_elements.device
            or (out is not None and (out.dtype != torch.bool or out.device != elements.device))):
        return NotImplemented  # ATen raises
    result = torch.empty(elements.shape, dtype=torch.bool, device=elements.device)
    n = elements.numel()
    if n:
        x = elements.to(common).reshape(-1).contiguous()
        test = test_elements.to(common).reshape(-1)
        m = test.numel()
        ordered = m > BRUTE_FORCE_MAX
        test = torch.sort(test).values if ordered else test.contiguous()
        config = ISIN.choose("isin")
        _isin(
            (cdiv(n, config.params["BLOCK_SIZE"]),), x, test, result, n, m, m.bit_length(), config=config,
            options=ISIN.options(), SORTED=ordered, INVERT=invert, TEST_BLOCK=_TEST_BLOCK, INT64=n > _INT32,
        )
    return result if out is None else write_out(out, result)


def _number(value: Any) -> bool:
    """A real, non-bool Python number (ATen raises for a bool; complex goes to ATen too)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _isin_scalar(elements: torch.Tensor, test_element: Any, invert: bool, out: torch.Tensor | None) -> Any:
    if not _searchable(elements.dtype) or not _number(test_element):
        return NotImplemented
    if out is not None and (out.dtype != torch.bool or out.device != elements.device):
        return NotImplemented  # ATen raises
    result = torch.empty(elements.shape, dtype=torch.bool, device=elements.device)
    (torch.ne if invert else torch.eq)(elements, test_element, out=result)
    return result if out is None else write_out(out, result)


def _scalar_isin(element: Any, test_elements: torch.Tensor, invert: bool, out: torch.Tensor | None) -> Any:
    if not _number(element):
        return NotImplemented
    # ATen wraps the number in a 0-d tensor (float64 or int64), which yields to the test
    # elements' dtype in the promotion
    wrapped = torch.tensor(element, dtype=torch.float64 if isinstance(element, float) else torch.int64,
                           device=test_elements.device)
    if out is not None and out.dtype == torch.bool and _searchable(test_elements.dtype):
        # ATen sizes out= as (0,) first (warning where it held elements), then as the result
        write_out(out, torch.empty(0, dtype=torch.bool, device=out.device))
    return _isin_tensors(wrapped, test_elements, invert, out, torch.result_type(element, test_elements))


@aten_op("isin.Tensor_Tensor")
def isin(elements: torch.Tensor, test_elements: torch.Tensor, *, assume_unique: bool = False,
         invert: bool = False) -> Any:
    """Whether each element of ``elements`` is among ``test_elements`` (not, with ``invert``)."""
    return _isin_tensors(elements, test_elements, invert, None)


@aten_op("isin.Tensor_Tensor_out")
def isin_out(elements: torch.Tensor, test_elements: torch.Tensor, *, assume_unique: bool = False,
             invert: bool = False, out: torch.Tensor) -> Any:
    return _isin_tensors(elements, test_elements, invert, out)


@aten_op("isin.Tensor_Scalar")
def isin_tensor_scalar(elements: torch.Tensor, test_element: Any, *, assume_unique: bool = False,
                       invert: bool = False) -> Any:
    return _isin_scalar(elements, test_element, invert, None)


@aten_op("isin.Tensor_Scalar_out")
def isin_tensor_scalar_out(elements: torch.Tensor, test_element: Any, *, assume_unique: bool = False,
                           invert: bool = False, out: torch.Tensor) -> Any:
    return _isin_scalar(elements, test_element, invert, out)


@aten_op("isin.Scalar_Tensor")
def isin_scalar_tensor(element: Any, test_elements: torch.Tensor, *, assume_unique: bool = False,
                       invert: bool = False) -> Any:
    return _scalar_isin(element, test_elements, invert, None)


@aten_op("isin.Scalar_Tensor_out")
def isin_scalar_tensor_out(element: Any, test_elements: torch.Tensor, *, assume_unique: bool = False,
                           invert: bool = False, out: torch.Tensor) -> Any:
    return _scalar_isin(element, test_elements, invert, out)
