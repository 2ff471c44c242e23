"""The shipped vendor backends under emulation: ``gems-conformance --emulate`` on the CPU
interpreter certifies each one's contract and accuracy tiers, labels the report emulated, and
reports each op x dtype as the vendor's declared policy says (gated ops FALLBACK, dtypes the
chip lacks NOT SUPPORTED).

The ops are few to keep the file to about a minute on two cores: ``softmax`` runs on gems'
kernels everywhere, with each vendor's tuned configs; ``cumsum``, ``std`` and ``full_float``
(which fills float64 too) are what some vendors gate, so their gates are exercised. Expectations come from each
backend's own policy, never from a per-vendor table here. The vendors' suites run side by
side, one single-threaded process each, as many at a time as there are cores.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from gems_core.policy import Policy, build_policy
from gems_core.selection import Selection, select

VENDORS = ("amd", "iluvatar", "kunlunxin", "metax", "nvidia")
OPS = "softmax,cumsum,std,full_float"
RAN = frozenset({"PASS", "XFAIL", "XPASS"})
REPO = Path(__file__).resolve().parents[1]


def installed(vendor: str) -> bool:
    return importlib.util.find_spec(f"gems_backend_{vendor}") is not None


def emulated_policy(vendor: str) -> tuple[Selection, Policy]:
    selection = select({"GEMS_DEVICE": vendor, "GEMS_EMULATE": "1"})
    return selection, build_policy(selection)


def expected_status(selection: Selection, policy: Policy, aten: list[str], dtype: str) -> set[str]:
    """What the policy says a record of these ATen ops and this dtype must show."""
    if dtype in selection.descriptor.dtypes.unsupported():
        return {"NOT SUPPORTED"}
    for op in aten:
        gate = policy.gate_for(op)
        if gate is not None and (not gate or dtype in gate):
            return {"FALLBACK"}
    return set(RAN)


def run_suite(vendor: str, report: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GEMS_DEVICE", "GEMS_EMULATE")}
    env.pop("TRITON_INTERPRET", None)
    # the checkout's core and suite, whatever is installed
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "conformance"), str(REPO),
                                                      env.get("PYTHONPATH")]))
    command = [
        sys.executable, "-m", "gems_conformance.cli", "--device", vendor, "--emulate", "--quick",
        "--tier", "contract,accuracy", "--ops", OPS, "--report", str(report), "--quiet",
        "--workers", "1",  # the suites run side by side already: one worker each
    ]
    return subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=600, check=False)


@pytest.fixture(scope="module")
def suites(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """vendor -> (the suite's process, its report folder), for the vendors the run selected."""
    wanted = sorted({item.callspec.params["vendor"] for item in request.session.items
                     if getattr(item, "originalname", "") == "test_emulated_conformance"})
    vendors = [v for v in wanted if installed(v)]
    folders = {v: tmp_path_factory.mktemp(f"emulated-{v}") for v in vendors}
    with ThreadPoolExecutor(max_workers=max(1, min(len(vendors), os.cpu_count() or 1))) as pool:
        return dict(zip(vendors, pool.map(lambda v: (run_suite(v, folders[v]), folders[v]), vendors)))


@pytest.mark.parametrize("vendor", VENDORS)
def test_emulated_conformance(vendor: str, suites: dict[str, Any]) -> None:
    if not installed(vendor):
        pytest.skip(f"gems-backend-{vendor} is not installed")
    result, folder = suites[vendor]
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((folder / "report.json").read_text())

    statement = report["statement"]
    assert statement["backend"] == vendor
    assert statement["emulated"] is True
    assert "emulated" in statement["device_name"]
    assert report["tiers"]["contract"]["ran"] and report["tiers"]["accuracy"]["ran"]
    assert report["tiers"]["performance"]["ran"] is False

    selection, policy = emulated_policy(vendor)
    accuracy = [r for r in report["records"] if r["tier"] == "accuracy"]
    assert accuracy
    wrong = [
        f"{r['op']} {r['dtype']} {r['sample']}: {r['status']} {r['message']}"
        for r in accuracy
        if r["status"] not in expected_status(selection, policy, r["aten"], r["dtype"])
    ]
    assert not wrong, "\n".join(wrong)
    # a gated record names why, as the vendor declared it
    for record in accuracy:
        if record["status"] in ("FALLBACK", "NOT SUPPORTED"):
            assert record["reason"], record


def test_ops_exercise_the_gates() -> None:
    """At least one shipped vendor gates one of OPS, and one lacks a dtype OPS covers: else
    the test above would only ever see PASS."""
    from gems_conformance.cases import all_cases

    chosen = [case for case in all_cases().values()
              if any(want == case.name or any(want in (a, a.split(".", 1)[0]) for a in case.aten)
                     for want in OPS.split(","))]
    pairs = {(op, str(dtype).removeprefix("torch.")) for case in chosen for op in case.aten
             for dtype in case.dtypes}
    statuses: set[str] = set()
    for vendor in filter(installed, VENDORS):
        selection, policy = emulated_policy(vendor)
        for op, dtype in pairs:
            statuses |= expected_status(selection, policy, [op], dtype)
    if not statuses - RAN:
        pytest.skip("none of the installed vendors gates these ops")
    assert {"FALLBACK", "NOT SUPPORTED"} <= statuses
