"""The conformance tiers as pytest tests, run in this process on the backend that
``--gems-device`` (or GEMS_DEVICE) selects. Collected by ``pytest --pyargs gems_conformance``."""

from __future__ import annotations

import os

import pytest
import torch

from . import records as R
from .cases import all_cases
from .runner import select_cases

# each sample's first call must be served by gems, not by ATen while its kernel compiles
os.environ["GEMS_COMPILE"] = "sync"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case_name" not in metafunc.fixturenames:
        return
    cases = all_cases()
    info = {name: {"aten": list(case.aten)} for name, case in cases.items()}
    ops = tuple(o.strip() for o in metafunc.config.getoption("--gems-ops", default="").split(",") if o.strip())
    params = [pytest.param(name, dtype, id=f"{name}-{str(dtype).replace('torch.', '')}")
              for name in select_cases(info, ops) for dtype in cases[name].dtypes]
    metafunc.parametrize("case_name,dtype", params)


def _explain(records: list[R.Record]) -> str:
    return "\n".join(f"{r.status} {r.op} {r.dtype} {r.sample}: {r.message} [{r.detail}]"
                     + (f" max abs {r.max_abs:g} max rel {r.max_rel:g}" if r.max_abs is not None else "")
                     for r in records)


def _conclude(records: list[R.Record]) -> None:
    failing = [r for r in records if r.status in R.FAILING]
    if failing:
        pytest.fail(_explain(failing), pytrace=False)
    statuses = {r.status for r in records}
    if statuses and statuses <= {R.NOT_SUPPORTED}:
        pytest.skip(records[0].reason or "not supported")
    expected = [r for r in records if r.status == R.XFAIL]
    if expected:
        pytest.xfail("; ".join(f"{r.sample}: {r.reason}" for r in expected))


def test_contract() -> None:
    from .contract_tier import check_contract

    _conclude(check_contract())


def test_compile(request: pytest.FixtureRequest) -> None:
    from .compile_tier import check_compile

    found, why = check_compile(profile=request.config.getoption("--gems-profile"))
    if why:
        pytest.skip(why)
    _conclude(found)


def test_accuracy(case_name: str, dtype: torch.dtype, request: pytest.FixtureRequest) -> None:
    from .accuracy import check_case, dtype_name
    from .outcomes import aggregate

    case = all_cases()[case_name]
    outcomes = list(check_case(case, dtype, request.config.getoption("--gems-profile")))
    _conclude(aggregate(case.name, case.aten, dtype_name(dtype), outcomes))


def test_performance(case_name: str, dtype: torch.dtype, request: pytest.FixtureRequest) -> None:
    from .performance import measure, skip_reason

    why = skip_reason()
    if why:
        pytest.skip(why)
    record = measure(all_cases()[case_name], dtype, request.config.getoption("--gems-profile"))
    print(f"{record.op} {record.dtype}: {record.metrics}")
    _conclude([record])
