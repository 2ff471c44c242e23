"""Every op case of the conformance suite against ATen in float64, on the selected backend.

The shapes are the suite's quick profile (small: the CPU interpreter is slow); set
GEMS_TEST_PROFILE=full on a GPU for the full profile."""

from __future__ import annotations

import os

import pytest
import torch
from gems_conformance.accuracy import deviation_for, dtype_name
from gems_conformance.cases import all_cases, compare, to_reference

import gems_core

CASES = all_cases()
PROFILE = os.environ.get("GEMS_TEST_PROFILE", "quick")
PARAMS = [
    pytest.param(name, dtype, id=f"{name}-{str(dtype).replace('torch.', '')}")
    for name, case in sorted(CASES.items())
    for dtype in case.dtypes
]


@pytest.mark.parametrize("name,dtype", PARAMS)
def test_op_case_matches_aten(name: str, dtype: torch.dtype) -> None:
    case = CASES[name]
    device = torch.device(gems_core.device)
    checked = 0
    expected_failures: list[str] = []
    samples = list(case.samples(dtype, device, PROFILE))
    aten_results = [case.call(*sample.args, **sample.kwargs) for sample in samples]
    with gems_core.use_gems():  # registering every overload costs ms: once per test
        gems_results = [case.call(*sample.args, **sample.kwargs) for sample in samples]
    for sample, aten_result, result in zip(samples, aten_results, gems_results):
        reference = (case.reference or case.call)(*to_reference(sample.args), **to_reference(sample.kwargs))
        results = result if isinstance(result, (tuple, list)) else (result,)
        aten_results = aten_result if isinstance(aten_result, (tuple, list)) else (aten_result,)
        for got, want in zip(results, aten_results):
            if isinstance(want, torch.Tensor):
                assert got.dtype == want.dtype, f"{sample.describe()}: dtype {got.dtype} != ATen's {want.dtype}"
        outcome = compare(result, reference, case, sample)
        checked += 1
        if outcome.ok:
            continue
        declared = deviation_for(case, dtype_name(dtype), sample.label, "xfail")
        if declared is not None:
            expected_failures.append(f"{sample.label}: {declared.reason}")
            continue
        pytest.fail(f"{sample.describe()}: {outcome.message} (max abs {outcome.max_abs:g}, max rel {outcome.max_rel:g})")
    assert checked > 0
    if expected_failures:
        pytest.xfail("; ".join(expected_failures))

