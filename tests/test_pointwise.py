"""The pointwise code generator: promotion kinds, layouts, out=, in-place rules and errors.

Shapes stay tiny: every call runs in Triton's interpreter on this machine."""

from __future__ import annotations

import pytest
import torch

from gems_core import runtime

runtime.current()  # select the backend before kernels below are defined (interpreter or not)

import triton
import triton.language as tl  # noqa: F401  (the interpreter looks for it beside kernels)

import gems_core
from gems_core.codegen.pointwise import pointwise
from gems_core.disk_cache import cache_dir

DEVICE = gems_core.device


@pointwise(kind="ALWAYS_BOOL")
@triton.jit
def _greater(x, y):
    return x > y


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _halve(x):
    return x * 0.5


@pointwise(kind="BOOL_TO_LONG")
@triton.jit
def _plus_one(x):
    return x + 1


@pointwise(kind="NO_OPMATH")
@triton.jit
def _identity(x):
    return x


@pointwise(kind="DEFAULT", num_outputs=2)
@triton.jit
def _sum_and_difference(x, y):
    return x + y, x - y


def rand(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(shape, dtype=torch.float64).to(dtype).to(DEVICE)


@pytest.mark.parametrize(
    "op,inputs,expected_dtype",
    [
        (_greater, (rand(3, 4, dtype=torch.float16), 1), torch.bool),
        (_halve, (torch.arange(6, device=DEVICE),), torch.float32),
        (_plus_one, (torch.ones(4, dtype=torch.bool, device=DEVICE),), torch.int64),
        (_identity, (rand(5, dtype=torch.bfloat16),), torch.bfloat16),
    ],
    ids=["ALWAYS_BOOL", "INT_TO_FLOAT", "BOOL_TO_LONG", "NO_OPMATH"],
)
def test_promotion_kinds_give_atens_result_dtype(op, inputs, expected_dtype) -> None:
    result = op(*inputs)
    assert result.dtype == expected_dtype


def test_always_bool_matches_aten_comparison() -> None:
    x, y = rand(7, 5), rand(5)
    assert torch.equal(_greater(x, y), x > y)


def test_two_outputs() -> None:
    x, y = rand(4, 3), rand(4, 3)
    total, difference = _sum_and_difference(x, y)
    torch.testing.assert_close(total, x + y)
    torch.testing.assert_close(difference, x - y)


def test_float64_scalar_keeps_full_precision() -> None:
    x = rand(9, dtype=torch.float64)
    with gems_core.use_gems():
        result = x + 0.1
    assert torch.equal(result, x.add(0.1))


def test_int_tensor_with_float_scalar_promotes_to_default_float() -> None:
    x = torch.arange(-4, 4, device=DEVICE, dtype=torch.int32)
    with gems_core.use_gems():
        result = x * 2.5
    assert result.dtype == torch.float32
    assert torch.equal(result, x.double().mul(2.5).float())


def test_zero_dim_tensor_does_not_promote_a_dimensioned_one() -> None:
    x = rand(6, dtype=torch.float16)
    with gems_core.use_gems():
        result = x + torch.tensor(2.0, dtype=torch.float64, device=DEVICE)
    assert result.dtype == torch.float16


def test_transposed_input_gives_transposed_output_like_aten() -> None:
    x = rand(6, 4).t()
    with gems_core.use_gems():
        result = x * 3
    assert result.stride() == (x * 3).stride()
    torch.testing.assert_close(result, x.double().mul(3).float())


def test_out_with_its_own_strides() -> None:
    x, y = rand(5, 3), rand(5, 3)
    out = torch.empty(3, 5, device=DEVICE).t()
    with gems_core.use_gems():
        returned = torch.add(x, y, out=out)
    assert returned is out
    torch.testing.assert_close(out, (x.double() + y.double()).float())


def test_out_of_lower_dtype_raises_like_aten() -> None:
    x = rand(3)
    out = torch.empty(3, dtype=torch.int64, device=DEVICE)
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type Long"):
        torch.add(x, x, out=out)  # ATen's message, for comparison
    with gems_core.use_gems(), pytest.raises(RuntimeError, match="can't be cast to the desired output type Long"):
        torch.add(x, x, out=out)


def test_out_of_wrong_shape_is_resized_with_a_warning() -> None:
    x = rand(2, 3)
    out = torch.empty(4, device=DEVICE)
    with gems_core.use_gems(), pytest.warns(UserWarning, match="resized"):
        torch.mul(x, x, out=out)
    assert out.shape == (2, 3)
    torch.testing.assert_close(out, x * x)


def test_inplace_cannot_broadcast_self() -> None:
    x, y = rand(3), rand(2, 3)
    with gems_core.use_gems(), pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        x.add_(y)


def test_inplace_result_must_cast_back() -> None:
    x = torch.arange(4, device=DEVICE)
    with gems_core.use_gems(), pytest.raises(RuntimeError, match="can't be cast"):
        x.mul_(1.5)


def test_mismatched_shapes_raise_atens_error() -> None:
    with gems_core.use_gems(), pytest.raises(RuntimeError, match="must match the size"):
        rand(3) + rand(4)


def test_bool_subtraction_raises_atens_error() -> None:
    b = torch.ones(3, dtype=torch.bool, device=DEVICE)
    with gems_core.use_gems(), pytest.raises(RuntimeError, match="with two bool tensors is not supported"):
        b - b


def test_integer_division_by_zero_raises_on_cpu_as_aten_does() -> None:
    if DEVICE != "cpu":
        pytest.skip("ATen raises only in its CPU kernels")
    x = torch.arange(3, device=DEVICE)
    with gems_core.use_gems(), pytest.raises(RuntimeError, match="ZeroDivisionError"):
        torch.div(x, torch.zeros_like(x), rounding_mode="floor")


def test_empty_and_zero_dim_inputs() -> None:
    with gems_core.use_gems():
        empty = rand(0, 3) + rand(3)
        scalar = rand() * rand()
    assert empty.shape == (0, 3)
    assert scalar.shape == ()


def test_offsets_past_2_to_the_31_use_64_bit_indexing() -> None:
    if DEVICE != "cpu":
        pytest.skip("the 2 GiB allocation is only worth making on the CPU reference")
    big = torch.empty(2**31 + 64, dtype=torch.int8, device=DEVICE)
    view = big[:: 2**30]  # 3 elements, the last at offset 2^31
    view.copy_(torch.tensor([1, 2, 3], dtype=torch.int8))
    with gems_core.use_gems():
        result = view + 1
    assert result.tolist() == [2, 3, 4]


def test_generated_source_is_cached_on_disk() -> None:
    _identity(rand(3, 3))
    files = list((cache_dir() / "pointwise").rglob("pw_*.py"))
    assert files, "no generated kernel source under GEMS_CACHE_DIR"
    assert all("def pointwise_kernel(" in f.read_text() for f in files)


@pytest.mark.parametrize("call", [
    lambda x: x.clamp_min(1e-3), lambda x: x.clamp_max(-0.5), lambda x: x.clamp(-1.0, 2.0),
    lambda x: x.clamp(float("nan"), 2.0), lambda x: torch.clamp(x, min=-0.0),
], ids=["clamp_min", "clamp_max", "clamp", "nan-bound", "negative-zero"])
def test_float64_clamp_with_number_bounds(call) -> None:
    # float64 bounds travel as bit patterns; the NaN test of a bound once failed to run on
    # the CPU interpreter
    x = torch.randn(33, dtype=torch.float64, device=DEVICE) * 3
    x[::7] = float("nan")
    x[3] = -0.0
    expected = call(x)
    with gems_core.use_gems(include=["clamp", "clamp_min", "clamp_max"]):
        got = call(x)
    assert torch.equal(got.isnan(), expected.isnan())
    assert torch.equal(torch.nan_to_num(got), torch.nan_to_num(expected))
    assert torch.equal(torch.signbit(got), torch.signbit(expected))


def test_programs_are_sized_by_the_widest_operand() -> None:
    """A THREAD_BYTES config gives each thread about that many bytes of the widest operand
    (outputs and inputs read in full): a bf16 op twice the elements of a float32 one, a
    where() by the values it selects (not its bool condition), a broadcast or 0-d operand
    counting nothing, a cast by its wider side."""
    from gems_core import KernelConfig
    from gems_core.codegen.pointwise import _sized, widest_element

    a, b = torch.randn(4, 8, dtype=torch.bfloat16), torch.randn(4, 8, dtype=torch.bfloat16)
    row, scalar = torch.randn(8, dtype=torch.float64), torch.tensor(2.0, dtype=torch.float64)
    out = torch.empty(4, 8, dtype=torch.bfloat16)
    assert widest_element([a, b], [out], 32) == 2
    assert widest_element([a, row, scalar], [out], 32) == 2
    assert widest_element([a > 0, a.float(), b.float()], [out.float()], 32) == 4
    assert widest_element([a], [out.double()], 32) == 8
    assert widest_element([row], [out], 32) == 2
    config = KernelConfig({"BLOCK_SIZE": 1024, "THREAD_BYTES": 16}, num_warps=8)
    assert _sized(config, 4).params == {"BLOCK_SIZE": 1024}  # 4 elements a thread
    assert _sized(config, 2).params == {"BLOCK_SIZE": 2048}
    assert _sized(config, 8).params == {"BLOCK_SIZE": 512}
    assert _sized(config, 24).params == {"BLOCK_SIZE": 256}  # at least one element a thread
    assert _sized(config, 4).num_warps == 8
    plain = KernelConfig({"BLOCK_SIZE": 1024}, num_warps=4)
    assert _sized(plain, 2) == plain
