"""Every op case of the conformance suite against ATen in float64, on the selected backend.

The shapes are the suite's quick profile (small: the CPU interpreter is slow), every sample
for a case's first dtype and, for its others, the first sample and the first of the classes
whose values depend on the dtype (:func:`chosen`); a case that is another form of an op
(out=, through autograd, a backward's grad_input=) runs its first dtype only, as the op's
own cases run its kernels in every dtype. Set GEMS_TEST_PROFILE=full on a GPU
for the full profile, every sample of every case in every dtype. Gems must answer each call
(one of the case's overloads served by gems' implementation, not entered and handed back to
ATen), except where the backend gates them to ATen, when it must not enter it."""

from __future__ import annotations

import os

import pytest
import torch
from gems_conformance import records
from gems_conformance.accuracy import check_samples, dtype_name, route, watched_codes
from gems_conformance.cases import all_cases
from gems_conformance.routing import implementations

import gems_core

CASES = all_cases()
PROFILE = os.environ.get("GEMS_TEST_PROFILE", "quick")
#: the name endings of cases that call another form of an op
FORMS = ("_out", "_autograd", "_grad_input")


def dtypes(name: str) -> tuple[torch.dtype, ...]:
    """The dtypes a case runs in: all of them, but the first only for another form of an op
    in the quick profile."""
    case = CASES[name]
    return case.dtypes[:1] if PROFILE == "quick" and name.endswith(FORMS) else case.dtypes


PARAMS = [
    pytest.param(name, dtype, id=f"{name}-{str(dtype).replace('torch.', '')}")
    for name in sorted(CASES)
    for dtype in dtypes(name)
]


#: the name endings of cases that call the kernels of another case's op the same way: an
#: out= form, and a backward called with grad_input= (its ``_autograd`` case runs it too)
SAME_KERNELS = ("_out", "_grad_input")


#: the sample classes whose values depend on the dtype: every dtype runs their first sample
BY_VALUE = ("0-d", "special")


def chosen(case, dtype: torch.dtype, samples: list) -> list:
    """The samples a test runs. In the quick profile a case's first dtype runs every sample;
    its other dtypes run the first sample and the first of each class whose values meet the
    dtype (a 0-d operand's promotion; NaN, infinities, -0.0 and the dtype's limits), as the
    layouts (transposed, strided, expanded, broadcast, empty, ...) are addressing the first
    dtype checks. An out= or grad_input= form runs the first sample of each class, as the
    op's own case (or its autograd case) runs every sample through the same kernels. The
    suite's CI runs on two cores; the full profile runs every sample."""
    if PROFILE != "quick" or (dtype == case.dtypes[0] and not case.name.endswith(SAME_KERNELS)):
        return samples
    seen: set[str] = set()
    firsts = [s for s in samples if not (s.label in seen or seen.add(s.label))]
    if dtype == case.dtypes[0]:
        return firsts
    return [s for k, s in enumerate(firsts) if k == 0 or s.label in BY_VALUE]


@pytest.mark.parametrize("name,dtype", PARAMS)
def test_op_case_matches_aten(name: str, dtype: torch.dtype) -> None:
    """Each sample is judged as the conformance suite judges it (:func:`~gems_conformance.
    accuracy.judge`: the backend's gates, kept forms and declared deviations, ATen's CPU
    result where its kernel for this device refuses the sample); here gems must also have
    answered every call of an op the backend does not gate."""
    case = CASES[name]
    device = torch.device(gems_core.device)
    mode, why = route(case, dtype_name(dtype))
    if mode == records.NOT_SUPPORTED:
        pytest.skip(why)
    assert implementations(case.aten), f"gems implements none of {case.aten}"
    samples = chosen(case, dtype, list(case.samples(dtype, device, PROFILE)))
    assert samples, f"{name} made no sample"
    # a gated call must not even enter gems' function (the profile hook's check); a served
    # one is judged by the count of calls gems answered. One use_gems() block for them all:
    # registering every overload costs ms.
    outcomes = check_samples(case, list(enumerate(samples)), dtype_name(dtype), mode, why,
                             watched_codes(case, dtype_name(dtype), mode), entries=mode == records.FALLBACK)
    expected_failures: list[str] = []
    for sample, outcome in zip(samples, outcomes):
        # served_by is empty where ATen itself raised (the outcome is then an error)
        if mode != records.FALLBACK and outcome.served_by:
            # answered, not only entered: an implementation that declines (returns
            # NotImplemented) hands the call to ATen, a fallback this test must not pass
            assert outcome.served_by == "gems", (
                f"{sample.describe()}: ran on ATen, not on gems' implementation of {case.aten}")
        if outcome.status == records.XFAIL:
            expected_failures.append(f"{sample.label}: {outcome.reason}")
        elif outcome.status not in (records.PASS, records.FALLBACK, records.XPASS):
            pytest.fail(f"{sample.describe()}: {outcome.status}: {outcome.message} "
                        f"(max abs {outcome.max_abs}, max rel {outcome.max_rel})")
    if expected_failures:
        pytest.xfail("; ".join(expected_failures))


#: overloads gems registers that no op case can compare with ATen, and why
UNEXERCISED = {
    **dict.fromkeys(
        ("bernoulli_.float", "dropout", "exponential_", "multinomial", "native_dropout", "normal.Tensor_Tensor",
         "normal.Tensor_float", "normal.float_Tensor", "normal_", "uniform_"),
        "random: its draws differ from ATen's by design; tests/test_random.py checks their distributions",
    ),
}


def test_every_registered_overload_has_an_op_case() -> None:
    """A registered overload without a case is never compared with ATen nor routing-checked."""
    covered = {name.removesuffix(".default") for case in CASES.values() for name in case.aten}
    with gems_core.use_gems():
        registered = {name.removesuffix(".default") for name in gems_core.registered_ops()}
    assert registered, "gems registered nothing"
    missing = sorted(registered - covered - set(UNEXERCISED))
    assert not missing, f"registered overloads without an op case: {', '.join(missing)}"
    stale = sorted(set(UNEXERCISED) - registered)
    assert not stale, f"listed as unexercised but not registered: {', '.join(stale)}"
