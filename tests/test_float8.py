"""float8 conversions (copy_, ``.to``) and _scaled_mm on gems (gems_core/ops/float8.py).

Conversions are exact: gems' bytes must equal ATen's for every float8 byte read and for
values chosen at the formats' edges (rounding ties, subnormals, saturation, infinities,
NaN) and random data written. _scaled_mm is compared with the float64 product, within the
output dtype's tolerance for a K-long sum, and with ATen's own result dtype. Every check
asserts that gems served the call. Shapes are small and odd: the CPU interpreter runs them.
"""

from __future__ import annotations

import pytest
import torch
from gems_conformance.routing import RouteWatch, implementations
from gems_conformance.tolerances import tolerance
from outcomes import answer

import gems_core
from gems_core import runtime

DEVICE = torch.device(gems_core.device)
FLOAT8 = (torch.float8_e4m3fn, torch.float8_e5m2)
WIDE = (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
        torch.int8, torch.uint8, torch.bool)
EDGES = (0.0, -0.0, 1.0625, 1.1875, 448.0, 464.0, 480.0, 1e4, 57344.0, 61439.0, 61440.0, 2.0**-10,
         3 * 2.0**-11, 2.0**-17, 3 * 2.0**-18, 2.0**-6 * 0.99, float("inf"), float("-inf"), float("nan"))

pytestmark = pytest.mark.skipif(
    bool({"float8_e4m3fn", "float8_e5m2"} & runtime.current().selection.descriptor.dtypes.unsupported()),
    reason="the selected backend declares no float8 support",
)


def _watch(op: str) -> RouteWatch:
    return RouteWatch(implementations([op])[op])


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dtype in FLOAT8 else t


def _same(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape and got.stride() == want.stride()
    if got.is_floating_point() and got.dtype not in FLOAT8:
        assert torch.equal(got.isnan(), want.isnan())
        assert torch.equal(got.nan_to_num(), want.nan_to_num())
    else:
        assert torch.equal(_bytes(got), _bytes(want))


def _random(shape: tuple[int, ...], dtype: torch.dtype, seed: int, scale: float = 600.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return ((torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1) * scale).to(dtype).to(DEVICE)


@pytest.mark.parametrize("fmt", FLOAT8)
@pytest.mark.parametrize("src_dtype", (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int32))
def test_to_float8_matches_aten(fmt: torch.dtype, src_dtype: torch.dtype) -> None:
    edges = torch.tensor(EDGES, dtype=torch.float64)
    values = torch.cat([edges, -edges, _random((40,), torch.float64, 1), _random((20,), torch.float64, 2, 1e-3)])
    src = values.nan_to_num(0.0, 1e6, -1e6).to(src_dtype) if not src_dtype.is_floating_point else values.to(src_dtype)
    want = src.to(fmt)
    with _watch("copy_") as watch, gems_core.use_gems(include=["copy_"]):
        got = src.to(fmt)
    assert watch.hit
    _same(got, want)


@pytest.mark.parametrize(("fmt", "dst_dtype"), [(f, d) for f in FLOAT8 for d in WIDE + FLOAT8 if d != f])
def test_every_float8_byte_converts_as_aten(fmt: torch.dtype, dst_dtype: torch.dtype) -> None:
    src = torch.arange(256, dtype=torch.uint8, device=DEVICE).view(fmt)
    if not dst_dtype.is_floating_point and dst_dtype != torch.bool:
        # NaN and infinity have no integer value (the result is the platform's)
        src = src[~src.float().isnan() & ~src.float().isinf()]
    want = torch.empty(src.shape, dtype=dst_dtype).copy_(src)
    with _watch("copy_") as watch, gems_core.use_gems(include=["copy_"]):
        got = torch.empty(src.shape, dtype=dst_dtype, device=DEVICE).copy_(src)
    assert watch.hit
    _same(got, want)


@pytest.mark.parametrize("layout", ("transposed", "sliced", "broadcast", "empty", "0-d", "same dtype"))
def test_float8_copy_layouts(layout: str) -> None:
    fmt = torch.float8_e4m3fn
    src = {
        "transposed": _random((7, 5), torch.float32, 3).t(),
        "sliced": _random((5, 21), torch.float32, 4)[:, ::3],
        "broadcast": _random((7,), torch.float32, 5),
        "empty": _random((0, 7), torch.float32, 6),
        "0-d": _random((), torch.float32, 7),
        "same dtype": _random((7, 5), torch.float32, 8).to(fmt).t(),
    }[layout]
    rows = 0 if layout == "empty" else 5

    def destination() -> torch.Tensor:  # transposed: written through its strides
        return torch.empty(7, rows, dtype=fmt, device=DEVICE).t()

    want = destination().copy_(src)
    with _watch("copy_") as watch, gems_core.use_gems(include=["copy_"]):
        got = destination().copy_(src)
    assert watch.hit
    _same(got, want)


def _scaled_inputs(m: int, k: int, n: int, fmt_a: torch.dtype, fmt_b: torch.dtype, transposed: bool):
    a = _random((m, k), torch.float64, 10, 8.0).to(fmt_a)
    b = _random((n, k), torch.float64, 11, 8.0).to(fmt_b).t() if transposed else \
        _random((k, n), torch.float64, 12, 8.0).to(fmt_b)
    return a, b


@pytest.mark.parametrize("out_dtype", (torch.float32, torch.bfloat16, torch.float16))
@pytest.mark.parametrize("scales", ("tensor-wise", "row-wise"))
@pytest.mark.parametrize("bias", (False, True))
def test_scaled_mm_matches_float64(out_dtype: torch.dtype, scales: str, bias: bool) -> None:
    m, k, n = 9, 37, 11
    a, b = _scaled_inputs(m, k, n, torch.float8_e4m3fn, torch.float8_e5m2, transposed=bias)
    if scales == "row-wise":
        scale_a, scale_b = _random((m, 1), torch.float32, 13, 1.0).abs() + 0.5, _random((1, n), torch.float32, 14, 1.0).abs() + 0.5
    else:
        scale_a, scale_b = torch.tensor(0.75, device=DEVICE), torch.tensor(1.5, device=DEVICE)
    bias_t = _random((n,), out_dtype, 15, 4.0) if bias else None
    want_dtype = torch._scaled_mm(a, b, scale_a, scale_b, bias=bias_t, out_dtype=out_dtype).dtype
    with _watch("_scaled_mm") as watch, gems_core.use_gems(include=["_scaled_mm"]):
        got = torch._scaled_mm(a, b, scale_a, scale_b, bias=bias_t, out_dtype=out_dtype)
    assert watch.hit and got.dtype == want_dtype == out_dtype and got.shape == (m, n)
    want = (a.double() @ b.double()) * scale_a.double() * scale_b.double()
    if bias_t is not None:
        want = want + bias_t.double()
    atol, rtol = tolerance(out_dtype, k)
    torch.testing.assert_close(got.double(), want.to(out_dtype).double(), atol=atol, rtol=rtol)


def test_scaled_mm_out_and_empty() -> None:
    a, b = _scaled_inputs(6, 16, 5, torch.float8_e5m2, torch.float8_e5m2, transposed=False)
    one = torch.ones((), device=DEVICE)
    out = torch.empty(6, 5, dtype=torch.bfloat16, device=DEVICE)
    with _watch("_scaled_mm.out") as watch, gems_core.use_gems(include=["_scaled_mm.out"]):
        result = torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16, out=out)
    with _watch("_scaled_mm") as empty_watch, gems_core.use_gems(include=["_scaled_mm"]):
        empty = torch._scaled_mm(a[:0], b, one, one, out_dtype=torch.float32)
    assert watch.hit and empty_watch.hit and result is out and empty.shape == (0, 5)
    torch.testing.assert_close(out.double(), (a.double() @ b.double()).to(torch.bfloat16).double(),
                               atol=0, rtol=tolerance(torch.bfloat16, 16)[1])


@pytest.mark.parametrize("bad", ("shapes", "not a matrix", "float64 scale", "float input", "bias size"))
def test_scaled_mm_bad_inputs_raise_atens_errors(bad: str) -> None:
    a, b = _scaled_inputs(4, 8, 5, torch.float8_e4m3fn, torch.float8_e4m3fn, transposed=False)
    one = torch.ones((), device=DEVICE)
    args = {
        "shapes": (a, b[:7], one, one),
        "not a matrix": (a[None], b, one, one),
        "float64 scale": (a, b, one.double(), one),
        "float input": (a.float(), b, one, one),
        "bias size": (a, b, one, one, torch.ones(4, 5, device=DEVICE)),
    }[bad]
    want = answer(lambda: torch._scaled_mm(*args, out_dtype=torch.float32))
    with gems_core.use_gems(include=["_scaled_mm"]):
        got = answer(lambda: torch._scaled_mm(*args, out_dtype=torch.float32))
    # ATen's CPU kernel takes float64 scales in torch 2.13: gems hands what it
    # does not serve to ATen, so its answer is ATen's either way
    assert (isinstance(want, str) or bad == "float64 scale") and got == want


def test_float8_declared_by_the_descriptor() -> None:
    from gems_core.contract import DtypeSupport

    assert {"float8_e4m3fn", "float8_e5m2"} <= DtypeSupport().unsupported()  # off unless declared
    assert not {"float8_e4m3fn", "float8_e5m2"} & DtypeSupport(float8_e4m3fn=True, float8_e5m2=True).unsupported()


@pytest.mark.parametrize("saturates", (True, False))
def test_e4m3fn_past_448_follows_the_installed_torch(saturates: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch 2.13's cast saturates past 448; earlier releases round past 464 (and infinity)
    to NaN. gems asks the installed torch once and writes what that torch writes; here
    both rules are checked against the values they give."""
    from gems_core.ops import float8

    monkeypatch.setattr(float8, "aten_saturates_e4m3fn", lambda: saturates)
    values = torch.tensor([448.0, 460.0, 464.0, 465.0, 479.0, 480.0, 1e4, float("inf"), 1.0625, float("nan")])
    values = torch.cat([values, -values]).to(DEVICE)
    watch = _watch("copy_")
    with watch, gems_core.use_gems():
        got = torch.empty(values.shape, dtype=torch.float8_e4m3fn, device=DEVICE).copy_(values)
    assert watch.hit
    big = (values.abs() > 464).cpu()  # past the tie with 448, which rounds to even (448)
    # this torch's own cast for the values both rules agree on
    cast = values.cpu().clamp(-448, 448).to(torch.float8_e4m3fn).float()
    past = torch.full_like(cast, 448.0).copysign(values.cpu()) if saturates else torch.full_like(cast, float("nan"))
    expected = torch.where(big, past, cast)
    decoded = got.float().cpu()
    assert torch.equal(decoded.isnan(), expected.isnan())
    assert torch.equal(decoded.nan_to_num(), expected.nan_to_num())
