"""A kernel that failed to compile on the chip sends its op to ATen (the model keeps
running); the accuracy tier must still report it, as ERROR with the recorded reason."""

from __future__ import annotations

import torch
from gems_conformance import records as R
from gems_conformance.accuracy import check_sample
from gems_conformance.cases import all_cases

from gems_core import runtime


def test_recorded_compile_failure_is_reported_error_with_its_reason(monkeypatch) -> None:
    case = all_cases()["add"]
    sample = next(iter(case.samples(torch.float32, torch.device(runtime.current().device_type), "quick")))
    fallbacks = {"add.Tensor": "pointwise: CompilationError: out of registers"}
    monkeypatch.setattr(runtime.current(), "runtime_fallbacks", fallbacks)
    outcome = check_sample(case, sample, 0, "float32", "run", "", frozenset())
    assert outcome.status == R.ERROR
    assert "failed to compile on this chip" in outcome.message
    assert "out of registers" in outcome.message


def test_no_recorded_failure_passes() -> None:
    case = all_cases()["add"]
    sample = next(iter(case.samples(torch.float32, torch.device(runtime.current().device_type), "quick")))
    outcome = check_sample(case, sample, 0, "float32", "run", "", frozenset())
    assert outcome.status == R.PASS, outcome.message
