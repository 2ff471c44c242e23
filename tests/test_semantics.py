"""ATen's semantics on bad and edge input: every call of the conformance suite's semantics
tier on this backend, the tier's own verdicts (it must be able to fail), and the fixes it
holds in place beyond its fixed samples, on random data: bool addition, memory-overlap
errors, bf16 rounding in the interpreter, alpha = 0 in addmm.

Where a result is compared, gems must have served the call (a route watch on the Python
function gems registered); a call ATen refuses may reach ATen, whose error is then raised."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gems_conformance import records as R
from gems_conformance import semantics_tier as S
from gems_conformance.routing import RouteWatch, implementations
from gems_conformance.samples import make_tensor
from outcomes import answer

import gems_core
from gems_core import runtime
from gems_core.codegen.overlap import _status, assert_no_internal_overlap
from gems_core.registry import load_ops

DEVICE = torch.device(gems_core.device)
CASES = {case.name: case for case in S.all_cases()}


@contextmanager
def served(*overloads: str) -> Iterator[RouteWatch]:
    """gems on; ``watch.hit`` afterwards: whether gems' implementation of ``overloads`` ran."""
    load_ops()
    codes = frozenset().union(*implementations(overloads).values())
    assert codes, f"gems implements none of {overloads}"
    with RouteWatch(codes) as watch, gems_core.use_gems():
        yield watch


@pytest.mark.parametrize("name", sorted(CASES))
def test_semantics_case_matches_aten(name: str) -> None:
    case = CASES[name]
    record = S.check(case, DEVICE, "quick")
    if record.status == R.NOT_SUPPORTED:
        # only for a reason that is not gems' doing: memory, the device ATen's rule is for,
        # or an op gems does not serve
        assert case.needs_bytes or case.devices or record.reason.startswith("gems serves none"), record.reason
        pytest.skip(record.reason)
    assert record.status == R.PASS, f"{record.message} ({record.detail})"


def _fake(name: str, makes: list[Callable[[], Any]], aten: tuple[str, ...] = ("add.Tensor",)) -> S.SemanticCase:
    """A case whose ATen run and gems run call different functions (``makes`` in order)."""
    queue = list(makes)
    return S.SemanticCase(name, "test", aten, lambda d: queue.pop(0))


def test_the_tier_fails_a_different_result() -> None:
    x = make_tensor((3, 4), torch.float32, DEVICE, seed=4)
    record = S.check(_fake("values", [lambda: x + 1, lambda: x + 1.01]), DEVICE)
    assert record.status == R.FAIL and "values differ" in record.message


def test_the_tier_fails_a_result_where_aten_raises() -> None:
    x = make_tensor((3,), torch.float32, DEVICE, seed=5)
    record = S.check(_fake("raises", [lambda: x + torch.ones(4, device=DEVICE), lambda: x + 1]), DEVICE)
    assert record.status == R.FAIL and "gems returned a result" in record.message


def test_the_tier_fails_a_call_gems_did_not_serve() -> None:
    x = make_tensor((3,), torch.float32, DEVICE, seed=6)
    record = S.check(_fake("unserved", [lambda: x.clone(), lambda: x.clone()], aten=("mul.Tensor",)), DEVICE)
    assert record.status == R.FAIL and "did not serve" in record.message


@pytest.mark.parametrize(("got", "want", "why"), [
    ([1.0, float("nan")], [1.0, 2.0], "NaN"),
    ([1.0, float("inf")], [1.0, float("-inf")], "infinities"),
    ([1.0, 2.0], [1.0, 2.5], "values differ"),
])
def test_difference_names_what_differs(got: list[float], want: list[float], why: str) -> None:
    assert why in S.difference(torch.tensor(got), torch.tensor(want))
    assert S.difference(torch.tensor(want), torch.tensor(want)) == ""
    assert "dtype" not in S.difference(torch.tensor(want), torch.tensor(want))
    assert "float64" in S.difference(torch.tensor(want, dtype=torch.float64), torch.tensor(want))


def test_semantics_tier_runs_from_the_cli(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("GEMS_DEVICE", "GEMS_EMULATE")}
    command = [sys.executable, "-m", "gems_conformance.cli", "--device", "cpu", "--tier", "semantics",
               "--quick", "--ops", "clamp,index_select", "--workers", "1", "--quiet", "--report", str(tmp_path)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
    summary = tmp_path / "summary.md"
    assert done.returncode == 0, (done.stderr[-2000:], done.stdout[-2000:],
                                  summary.read_text()[-3000:] if summary.exists() else "")
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["tiers"]["semantics"]["ran"] is True
    chosen = [r for r in data["records"] if r["tier"] == "semantics"]
    assert {r["op"] for r in chosen} == {c.name for c in S.select(("clamp", "index_select"))}
    assert all(r["status"] in (R.PASS, R.NOT_SUPPORTED) for r in chosen)
    assert "semantics" in (tmp_path / "summary.md").read_text()


# --- bool addition ----------------------------------------------------------------------

@pytest.mark.parametrize("alpha", [1, True, False, 0, 3])
def test_bool_add_is_logical_or(alpha: Any) -> None:
    a = make_tensor((7, 9), torch.bool, DEVICE, seed=1)
    b = make_tensor((9,), torch.bool, DEVICE, seed=2)
    want = torch.add(a, b, alpha=alpha)
    with served("add.Tensor") as watch:
        got = torch.add(a, b, alpha=alpha)
    assert watch.hit and got.dtype == torch.bool and torch.equal(got, want)


def test_bool_add_in_place() -> None:
    a = make_tensor((5, 6), torch.bool, DEVICE, seed=3)
    b = make_tensor((5, 6), torch.bool, DEVICE, seed=4)
    want = a.clone().add_(b)
    with served("add_.Tensor") as watch:
        got = a.clone().add_(b)
    assert watch.hit and torch.equal(got, want)


def test_boolean_alpha_of_a_float_add_raises_atens_error() -> None:
    x = make_tensor((3,), torch.float32, DEVICE, seed=5)
    expected = answer(lambda: torch.add(x, x, alpha=True))
    assert str(expected).startswith("RuntimeError")
    with gems_core.use_gems():
        assert answer(lambda: torch.add(x, x, alpha=True)) == expected


# --- memory overlap ---------------------------------------------------------------------

def _base(seed: int = 0) -> torch.Tensor:
    return make_tensor((4, 6), torch.float32, DEVICE, seed=seed)


OVERLAPPING = {
    "add_ expanded": lambda: _base()[:1].expand(4, 6).add_(_base(1)),
    "sub_ expanded": lambda: _base()[:, :1].expand(4, 6).sub_(1.5),
    "neg out= expanded": lambda: torch.neg(_base(), out=_base(1)[:1].expand(4, 6)),
    "add out= shifted": lambda: (lambda b: torch.add(b[:20], 1, out=b[2:22]))(_base().reshape(-1)),
    "mul_ of a shifted view": lambda: (lambda b: b[1:].mul_(b[:-1]))(_base().reshape(-1)),
    "where out= overlapping": lambda: (lambda b: torch.where(b[:4] > 0, b[:4], b[8:12], out=b[2:6]))(
        _base().reshape(-1)),
    "index_select out= the index": lambda: (lambda i: torch.index_select(_base().reshape(-1).long(), 0, i, out=i))(
        torch.tensor([1, 0, 2], device=DEVICE)),
}


@pytest.mark.parametrize("name", sorted(OVERLAPPING))
def test_overlapping_writes_raise_atens_error(name: str) -> None:
    expected = answer(OVERLAPPING[name])
    assert str(expected).startswith("RuntimeError: unsupported operation")
    with gems_core.use_gems():
        assert answer(OVERLAPPING[name]) == expected


ALLOWED = {
    "add_ of itself": (("add_.Tensor",), lambda b: b.add_(b)),
    "mul out= the input": (("mul.out",), lambda b: torch.mul(b, 3.0, out=b)),
    "add_ of a transposed view": (("add_.Tensor",), lambda b: b.t().add_(b.t() * 2)),
    "add out= a disjoint slice of the same storage": (
        ("add.out",), lambda b: torch.add(b.view(-1)[:12], 1.0, out=b.view(-1)[12:])),
    "sub_ of a strided view": (("sub_.Tensor",), lambda b: b[:, ::2].sub_(b[:, 1::2])),
}


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_writes_that_do_not_overlap_partly_are_served(name: str) -> None:
    overloads, call = ALLOWED[name]
    want = _base(7)
    want_result = call(want)
    got = _base(7)
    with served(*overloads) as watch:
        got_result = call(got)
    assert watch.hit
    assert torch.equal(got, want) and torch.equal(got_result, want_result)


@pytest.mark.parametrize(("make", "status"), [
    (lambda b: (b[:4], b[2:6]), "partial"),
    (lambda b: (b[:4], b[4:8]), "no"),
    (lambda b: (b[:4], b[:4]), "full"),
    (lambda b: (b.view(2, 4)[:, :2], b[:4]), "too hard"),
    (lambda b: (b.view(2, 4), b.view(4, 2).t()), "partial"),
])
def test_overlap_status_follows_atens_rules(make: Callable[[torch.Tensor], Any], status: str) -> None:
    assert _status(*make(torch.empty(8, device=DEVICE))) == status


def test_an_output_overlapping_itself_is_refused() -> None:
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        assert_no_internal_overlap(torch.empty(1, 3, device=DEVICE).expand(2, 3))


# --- bf16 rounding on the interpreter -----------------------------------------------------

BF16_OPS = {
    "add": (("add.Tensor",), lambda x, y: x + y),
    "mul": (("mul.Tensor",), lambda x, y: x * y),
    "div": (("div.Tensor",), lambda x, y: x / y),
    "exp": (("exp",), lambda x, y: torch.exp(x)),
    "sigmoid": (("sigmoid",), lambda x, y: torch.sigmoid(x)),
    "to bf16": (("_to_copy", "copy_"), lambda x, y: (x.float() * y.float() * 1.001).bfloat16()),
}


@pytest.mark.skipif(not runtime.current().interpreter, reason="the interpreter's casts")
@pytest.mark.parametrize("name", sorted(BF16_OPS))
def test_bf16_results_round_as_aten_rounds(name: str) -> None:
    overloads, call = BF16_OPS[name]
    x = make_tensor((67, 33), torch.bfloat16, DEVICE, seed=8)
    y = make_tensor((67, 33), torch.bfloat16, DEVICE, seed=9)
    want = call(x, y)
    with served(*overloads) as watch:
        got = call(x, y)
    assert watch.hit and torch.equal(got, want)


def test_bf16_rounding_is_to_nearest_even() -> None:
    from gems_core.codegen.interpreted_casts import round_to_bf16_bits

    bits = torch.randint(0, 2**32, (20000,), generator=torch.Generator().manual_seed(0), dtype=torch.int64)
    values = torch.tensor(bits.numpy().astype(np.uint32).view(np.float32))
    special = torch.tensor([1 + 2**-8, 1 + 3 * 2**-8, 3.4e38, -3.39e38, 1e-40, -0.0, float("inf")])
    values = torch.cat([values, special])
    want = values.bfloat16()
    got = torch.from_numpy(round_to_bf16_bits(values.numpy()).view(np.int16)).view(torch.bfloat16)
    numbers = ~values.isnan()
    assert torch.equal(got[numbers].view(torch.int16), want[numbers].view(torch.int16))
    assert bool(got[~numbers].isnan().all())


# --- addmm with alpha = 0 -------------------------------------------------------------------

@pytest.mark.parametrize("beta", [0, 0.5, 1])
def test_addmm_alpha_zero_reads_no_product(beta: float) -> None:
    bias = make_tensor((5, 7), torch.float32, DEVICE, seed=10)
    a = make_tensor((5, 9), torch.float32, DEVICE, seed=11)
    b = make_tensor((9, 7), torch.float32, DEVICE, seed=12)
    a[1, 2], b[3, 4] = float("nan"), float("inf")
    want = beta * bias.double()
    with served("addmm") as watch:
        got = torch.addmm(bias, a, b, alpha=0, beta=beta)
    assert watch.hit and not got.isnan().any()
    torch.testing.assert_close(got.double(), want, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("value", [0.0, 5e-324, -0.0, 2.5])
def test_float64_fills_whose_bit_pattern_fits_32_bits(value: float) -> None:
    """A float64 fill passes its 64-bit pattern; 0.0 and subnormals have patterns that fit
    32 bits and reach the kernel as int32 arguments."""
    with RouteWatch(implementations(("fill_.Scalar",))["fill_.Scalar"]) as watch, gems_core.use_gems():
        got = torch.empty(5, dtype=torch.float64, device=DEVICE).fill_(value).cpu()
        zeros = torch.zeros(3, dtype=torch.float64, device=DEVICE).cpu()
        ramp = torch.arange(0.0, 3.0, 1.0, dtype=torch.float64, device=DEVICE).cpu()
    assert watch.hit
    assert torch.equal(got, torch.full((5,), value, dtype=torch.float64))
    assert torch.equal(got.signbit(), torch.full((5,), value, dtype=torch.float64).signbit())
    assert torch.equal(zeros, torch.zeros(3, dtype=torch.float64))
    assert torch.equal(ramp, torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64))


@pytest.mark.parametrize(("dtype", "number"), [(torch.int8, 1000), (torch.uint8, -3), (torch.float16, 1e300),
                                               (torch.int32, 2.5), (torch.bool, 7)])
def test_a_call_handed_to_aten_converts_numbers_as_aten_does(dtype: torch.dtype, number: Any) -> None:
    """A Python number a gems kernel hands back to ATen (say, for a dtype a backend leaves to
    ATen) is converted as ATen converts a wrapped number: int8 + 1000 wraps, a float too
    large for float16 becomes inf; never an overflow error ATen would not raise."""
    from gems_core.compat import aten_kernel

    x = make_tensor((7,), dtype, "cpu") if dtype != torch.bool else torch.tensor([True, False] * 3)
    call = aten_kernel("aten::add.Tensor", "CPU")
    keyset = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.CPU)
    got, want = call(keyset, x, number), torch.add(x, number)
    assert got.dtype == want.dtype
    assert torch.equal(got, want)
