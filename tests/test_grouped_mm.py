"""``torch._grouped_mm`` on gems (gems_core/ops/grouped_mm.py): its four layouts (2d x 3d,
3d x 2d, 2d x 2d with offsets, 3d x 3d without) in float32, float16 and bfloat16 against a
float64 loop of per-group products, with ATen's result shape, dtype and strides; row- and
column-major operands, an expanded batch, empty groups, offsets past the ragged dim, empty
operands; and ATen's errors for what it rejects. A call counts as served only where gems'
kernel ran. ATen's layout (shape, dtype, strides) is taken from its CPU kernel, which admits
any group sizes: its CUDA bf16 kernel asserts on the device where a group's rows are not a
multiple of 16 bytes, which gems' kernel does not need. On the cpu backend bf16 goes through the same kernel, its tiles widened to fp32
before ``tl.dot`` (the interpreter misreads bf16 operands), so bf16 is checked here too.

Shapes are tiny (the interpreter is slow): M = 13 spans a partial tile, K = 16 and N = 24
keep the 16-byte aligned strides ATen requires; entries in [-1, 1]."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from gems_conformance.routing import RouteWatch, implementations
from outcomes import answer

import gems_core
from gems_core.registry import load_ops

DEVICE = torch.device(gems_core.device)
OPS = ["_grouped_mm"]
#: dtype -> (rtol, atol) against the float64 reference: one rounding of an O(1) result
TOLERANCE = {torch.float32: (1e-5, 1e-5), torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1e-2)}
G, M, K, N = 3, 13, 16, 24
_g = torch.Generator().manual_seed(0)


def rand(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return (torch.rand(shape, generator=_g, dtype=torch.float64) * 2 - 1).to(dtype).to(DEVICE)


def column_major(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    """Column-major in the last two dims, the leading stride padded to a multiple of 8."""
    rows = shape[-2]
    return rand(*shape[:-2], shape[-1], -(-rows // 8) * 8, dtype=dtype)[..., :rows].transpose(-1, -2)


def ends(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32, device=DEVICE)


def spans(offs: torch.Tensor) -> list[tuple[int, int]]:
    stops = offs.tolist()
    return list(zip([0, *stops[:-1]], stops))


def reference(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None) -> torch.Tensor:
    """The float64 per-group products (the rows or columns the offsets cover)."""
    a, b = a.cpu().double(), b.cpu().double()
    if offs is None:
        return torch.stack([a[g] @ b[g] for g in range(a.shape[0])])
    if a.dim() == 2 and b.dim() == 3:
        return torch.cat([a[s:e] @ b[g] for g, (s, e) in enumerate(spans(offs))])
    if a.dim() == 3:
        return torch.cat([a[g] @ b[:, s:e] for g, (s, e) in enumerate(spans(offs))], 1)
    return torch.stack([a[:, s:e] @ b[s:e] for s, e in spans(offs)])


def on_gems(call: Callable[[], torch.Tensor], monkeypatch: pytest.MonkeyPatch) -> tuple[torch.Tensor, list[dict]]:
    """gems' result of ``call`` and the constexprs of each launch of its kernel; fails unless
    gems' implementation ran."""
    load_ops()
    from gems_core.ops import grouped_mm

    launches: list[dict[str, Any]] = []
    kernel = grouped_mm._grouped_mm

    def counted(*args: Any, **kwargs: Any) -> Any:
        launches.append(kwargs)
        return kernel(*args, **kwargs)

    monkeypatch.setattr(grouped_mm, "_grouped_mm", counted)
    with RouteWatch(implementations(OPS)["_grouped_mm"]) as watch, gems_core.use_gems(include=OPS):
        result = call()
    assert watch.hit
    return result, launches


def on_aten_cpu(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None) -> torch.Tensor:
    def cpu(t: torch.Tensor) -> torch.Tensor:
        """A CPU copy with ``t``'s strides (ATen checks them): the memory ``t`` spans, viewed
        alike."""
        if not t.numel():
            return t.cpu()
        span = 1 + sum((n - 1) * stride for n, stride in zip(t.shape, t.stride()))
        memory = t.as_strided((span,), (1,)).cpu()
        return memory.as_strided(t.shape, t.stride())

    return torch._grouped_mm(cpu(a), cpu(b), None if offs is None else offs.cpu())


def check(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None, monkeypatch: pytest.MonkeyPatch,
          covered: int | None = None) -> list[dict]:
    """gems' result against the float64 reference (over the first ``covered`` rows or
    columns of the ragged dim when the offsets stop short) and ATen's result's layout."""
    want = on_aten_cpu(a, b, offs)
    got, launches = on_gems(lambda: torch._grouped_mm(a, b, offs), monkeypatch)
    assert launches, "gems' kernel did not run"
    assert (got.shape, got.stride(), got.dtype, got.device) == (want.shape, want.stride(), want.dtype, a.device)
    expected = reference(a, b, offs)
    if covered is not None:
        got = got[:covered] if a.dim() == 2 else got[:, :covered]
    rtol, atol = TOLERANCE[a.dtype]
    torch.testing.assert_close(got.cpu().double(), expected, rtol=rtol, atol=atol)
    return launches


DTYPES = list(TOLERANCE)
LAYOUTS = {
    "row-major": lambda *shape, dtype: rand(*shape, dtype=dtype),
    "column-major": column_major,
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_tokens_by_expert(dtype: torch.dtype, layout: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """2d x 3d: rows of ``a`` grouped by expert, one weight matrix per expert; the second
    group is empty."""
    make = LAYOUTS[layout]
    check(make(M, K, dtype=dtype), make(G, K, N, dtype=dtype), ends(5, 5, M), monkeypatch)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_columns_by_group(dtype: torch.dtype, layout: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """3d x 2d: columns of ``b`` grouped; group g multiplies ``a[g]``."""
    make = LAYOUTS[layout]
    check(make(G, M, K, dtype=dtype), make(K, 40, dtype=dtype), ends(8, 8, 40), monkeypatch)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_contraction_by_group(dtype: torch.dtype, layout: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """2d x 2d: K split into groups (weight gradients per expert); an empty group gives zeros."""
    make = LAYOUTS[layout]
    a, b = make(M, 80, dtype=dtype), make(80, N, dtype=dtype)
    check(a, b, ends(40, 40, 80), monkeypatch)
    got, _ = on_gems(lambda: torch._grouped_mm(a, b, ends(40, 40, 80)), monkeypatch)
    assert not got[1].any()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_batched(dtype: torch.dtype, layout: str, monkeypatch: pytest.MonkeyPatch) -> None:
    make = LAYOUTS[layout]
    check(make(G, M, K, dtype=dtype), make(G, K, N, dtype=dtype), None, monkeypatch)


def test_an_operand_expanded_over_the_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    a = rand(1, M, K, dtype=torch.float32).expand(G, M, K)
    check(a, rand(G, K, N, dtype=torch.float32), None, monkeypatch)


def test_a_result_row_that_is_not_a_multiple_of_16_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """N = 6 float32s (a column-major ``b`` admits it): ATen pads the result's rows to 8
    elements, strides (8, 1); gems' result has them too."""
    check(rand(M, K, dtype=torch.float32), column_major(G, K, 6, dtype=torch.float32), ends(4, 9, M), monkeypatch)


def test_offsets_past_the_end_are_clamped_as_in_aten(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = rand(M, K, dtype=torch.float32), rand(G, K, N, dtype=torch.float32)
    check(a, b, ends(4, 20, 30), monkeypatch, covered=M)  # ATen's slices end at M
    want = on_aten_cpu(a, b, ends(4, 20, 30))
    got, _ = on_gems(lambda: torch._grouped_mm(a, b, ends(4, 20, 30)), monkeypatch)
    torch.testing.assert_close(got.cpu(), want)


def test_rows_past_the_last_offset_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = rand(M, K, dtype=torch.float32), rand(G, K, N, dtype=torch.float32)
    check(a, b, ends(2, 6, 9), monkeypatch, covered=9)  # ATen leaves rows 9.. unwritten too


def test_bf16_takes_the_same_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """bf16 is served on every backend; only the interpreter widens its tiles to fp32."""
    a, b = rand(M, K, dtype=torch.bfloat16), rand(G, K, N, dtype=torch.bfloat16)
    launches = check(a, b, ends(5, 9, M), monkeypatch)
    assert launches[0]["WIDEN"] == gems_core.runtime.current().interpreter


@pytest.mark.parametrize("case", ["no rows", "no groups", "no batch"])
def test_empty_operands(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, offs = {
        "no rows": (rand(0, K, dtype=torch.float32), rand(2, K, N, dtype=torch.float32), ends(0, 0)),
        "no groups": (rand(M, K, dtype=torch.float32), rand(0, K, N, dtype=torch.float32), ends()),
        "no batch": (rand(0, M, K, dtype=torch.float32), rand(0, K, N, dtype=torch.float32), None),
    }[case]
    want = on_aten_cpu(a, b, offs)
    got, launches = on_gems(lambda: torch._grouped_mm(a, b, offs), monkeypatch)
    assert not launches and (got.shape, got.stride(), got.dtype) == (want.shape, want.stride(), want.dtype)


A, B3, OFFS = rand(M, K, dtype=torch.float32), rand(G, K, N, dtype=torch.float32), ends(4, 9, M)
ERRORS = {
    "float64": lambda: torch._grouped_mm(A.double(), B3.double(), OFFS),
    "mixed dtypes": lambda: torch._grouped_mm(A, B3.bfloat16(), OFFS),
    "a bias": lambda: torch._grouped_mm(A, B3, OFFS, bias=rand(G, N, dtype=torch.float32)),
    "another out_dtype": lambda: torch._grouped_mm(A.bfloat16(), B3.bfloat16(), OFFS, out_dtype=torch.float32),
    "int64 offsets": lambda: torch._grouped_mm(A, B3, OFFS.long()),
    "no offsets for 2d": lambda: torch._grouped_mm(A, B3),
    "offsets for 3d x 3d": lambda: torch._grouped_mm(B3.transpose(1, 2).contiguous(), B3, OFFS),
    "group counts differ": lambda: torch._grouped_mm(A, B3, OFFS[:2]),
    "contractions differ": lambda: torch._grouped_mm(A, rand(G, 8, N, dtype=torch.float32), OFFS),
    "unaligned stride": lambda: torch._grouped_mm(rand(M, 6, dtype=torch.float32), rand(G, 6, N, dtype=torch.float32),
                                                  OFFS),
    "neither row- nor column-major": lambda: torch._grouped_mm(rand(M, 2 * K, dtype=torch.float32)[:, ::2], B3, OFFS),
    "1-d": lambda: torch._grouped_mm(A[0], B3, OFFS),
}


@pytest.mark.parametrize("bad", sorted(ERRORS))
def test_rejected_inputs_raise_atens_error(bad: str) -> None:
    want = answer(ERRORS[bad])
    with gems_core.use_gems(include=OPS):
        got = answer(ERRORS[bad])
    assert isinstance(want, str) and got == want
