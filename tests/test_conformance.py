"""The conformance CLI end to end: reports, statuses, crash isolation, the HTML page.

Each scenario is one ``gems-conformance`` run (a few seconds on the CPU interpreter with
``--quick --ops``), shared by the tests that read its reports. Test backends are a throwaway
distribution on PYTHONPATH with a dist-info, so gems discovers them through entry points
exactly as it discovers a vendor's package.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch
from gems_conformance import baseline, records
from gems_conformance.cases import all_cases
from gems_conformance.records import Record

COMMON = textwrap.dedent("""
    import os
    import torch
    from gems_core import (BackendDescriptor, Deviation, DtypeSupport, KernelConfig, KernelOverride,
                           Limits, OpGate, TritonTarget, hookimpl)


    def descriptor(name):
        return BackendDescriptor(
            name=name, vendor="test", device_type="cuda", dispatch_key="CUDA",
            target=TritonTarget("cuda", 90, 32), limits=Limits(32, 1024, 232448),
            dtypes=DtypeSupport(bfloat16=False), detection="never present (a test plugin)")


    def correct_mul(self, other):
        from gems_core import registry
        return registry.all_impls()["mul.Tensor"].fn(self, other)


    @hookimpl
    def gems_detect():
        return None
""")

WRONG = COMMON + textwrap.dedent("""
    @hookimpl
    def gems_descriptor():
        return descriptor("testwrong")


    @hookimpl
    def gems_unsupported_ops():
        return [OpGate("mul.Tensor", dtypes=("int64",), reason="int64 multiply stays on ATen"), "not_an_op"]


    @hookimpl
    def gems_known_deviations():
        return [Deviation("mul.Tensor", reason="float16 multiply is known wrong", dtypes=("float16",)),
                Deviation("add", reason="float32 add was wrong once", dtypes=("float32",))]


    @hookimpl
    def gems_tuned_configs(arch):
        return {"pointwise": [KernelConfig({"BLOCK_SIZE": 256})], "no_such_kernel": [KernelConfig()]}


    @hookimpl
    def gems_kernel_overrides():
        return [KernelOverride("mul.Tensor", lambda self, other: torch.ops.aten.add.Tensor(self, other))]
""")

CRASH = COMMON + textwrap.dedent("""
    import time


    def crashing_mul(self, other):
        if self.numel() == 0 and self.dtype == torch.int16:
            os.abort()
        if self.numel() == 0 and self.dtype == torch.int8:
            time.sleep(3600)
        return correct_mul(self, other)


    @hookimpl
    def gems_descriptor():
        return descriptor("testcrash")


    @hookimpl
    def gems_kernel_overrides():
        return [KernelOverride("mul.Tensor", crashing_mul)]
""")


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    package = site / "gems_backend_conftest"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "wrong.py").write_text(WRONG)
    (package / "crash.py").write_text(CRASH)
    info = site / "gems_backend_conftest-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gems-backend-conftest\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[gems_core.backends]\n"
        "testwrong = gems_backend_conftest.wrong\n"
        "testcrash = gems_backend_conftest.crash\n"
    )
    return site


def run_cli(report: Path, *args: str, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("GEMS_DEVICE", None)
    env.pop("GEMS_EMULATE", None)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "gems_conformance.cli", "--quick", "--report", str(report), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)


def load(report: Path) -> dict:
    return json.loads((report / "report.json").read_text())


def find(data: dict, op: str, dtype: str, sample: str | None = None, tier: str = "accuracy") -> list[dict]:
    return [r for r in data["records"] if r["tier"] == tier and r["op"] == op and r["dtype"] == dtype
            and (sample is None or r["sample"] == sample)]


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    report = tmp_path_factory.mktemp("cpu")
    return report, run_cli(report, "--device", "cpu", "--ops", "add,mul", "--tier", "contract,accuracy")


@pytest.fixture(scope="module")
def wrong_run(tmp_path_factory: pytest.TempPathFactory, plugin_path: Path, cpu_run: tuple) -> tuple[Path, subprocess.CompletedProcess]:
    report = tmp_path_factory.mktemp("wrong")
    previous = cpu_run[0] / "report.json"
    return report, run_cli(report, "--device", "testwrong", "--emulate", "--ops", "add,mul",
                           "--tier", "contract,accuracy", "--baseline", str(previous), pythonpath=plugin_path)


@pytest.fixture(scope="module")
def crash_run(tmp_path_factory: pytest.TempPathFactory, plugin_path: Path) -> tuple[Path, subprocess.CompletedProcess]:
    report = tmp_path_factory.mktemp("crash")
    return report, run_cli(report, "--device", "testcrash", "--emulate", "--ops", "mul.Tensor",
                           "--tier", "accuracy", "--timeout", "10", pythonpath=plugin_path)


def expected_accuracy_records(ops: set[str]) -> int:
    """Op case x dtype x sample class of the cases --ops selects, counted from the cases."""
    total = 0
    for case in all_cases().values():
        if case.name in ops or any(a.split(".", 1)[0] in ops for a in case.aten):
            for dtype in case.dtypes:
                total += len({s.label for s in case.samples(dtype, torch.device("cpu"), "quick")})
    return total


def test_cpu_run_writes_four_reports_with_matching_counts(cpu_run: tuple) -> None:
    report, proc = cpu_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {p.name for p in report.iterdir()} >= {"report.json", "junit.xml", "summary.md", "report.html"}
    data = load(report)
    accuracy = [r for r in data["records"] if r["tier"] == "accuracy"]
    assert len(accuracy) == expected_accuracy_records({"add", "mul"})
    assert data["counts"][records.FAIL] == data["counts"][records.ERROR] == 0
    assert sum(data["counts"].values()) == len(data["records"])
    assert data["statement"]["backend"] == "cpu" and data["statement"]["emulated"] is False
    assert data["tiers"]["performance"]["ran"] is False and data["tiers"]["performance"]["reason"]
    junit = ET.parse(report / "junit.xml").getroot()
    assert sum(int(s.get("tests")) for s in junit.iter("testsuite")) == len(data["records"])
    summary = (report / "summary.md").read_text()
    assert summary.startswith("# gems conformance report") and "| gems-core | " in summary
    assert f"| **all** | | {data['counts']['PASS']} |" in summary


def test_wrong_kernel_is_reported_fail_with_sample_and_error(wrong_run: tuple) -> None:
    report, proc = wrong_run
    assert proc.returncode == 1
    data = load(report)
    failed = [r for r in find(data, "mul", "float32") if r["status"] == records.FAIL]
    assert failed, find(data, "mul", "float32")
    record = next(r for r in failed if r["sample"] == "contiguous")
    assert record["detail"].startswith("contiguous(Tensor[")
    assert float(record["max_abs"]) > 0 and "elements off" in record["message"]
    assert data["statement"]["emulated"] is True and data["statement"]["backend"] == "testwrong"
    # printed when it happened, with the sample and the error, before the reports
    live = [line for line in proc.stderr.splitlines() if line.startswith("FAIL mul float32 contiguous(")]
    assert live and "max abs" in live[0], proc.stderr[-2000:]


def test_declared_deviation_is_xfail_with_reason(wrong_run: tuple) -> None:
    data = load(wrong_run[0])
    contiguous = find(data, "mul", "float16", "contiguous")[0]
    assert contiguous["status"] == records.XFAIL
    assert contiguous["reason"] == "float16 multiply is known wrong"
    assert find(data, "add", "float32", "contiguous")[0]["status"] == records.XPASS
    assert "float16 multiply is known wrong" in (wrong_run[0] / "summary.md").read_text()


def test_gated_op_falls_back_and_missing_dtype_is_not_supported(wrong_run: tuple) -> None:
    data = load(wrong_run[0])
    # the override is wrong, so FALLBACK also shows the call reached ATen
    assert {r["status"] for r in find(data, "mul", "int64")} == {records.FALLBACK}
    assert {r["status"] for r in find(data, "mul", "bfloat16")} == {records.NOT_SUPPORTED}


def test_contract_names_unknown_ops_and_tunables(wrong_run: tuple) -> None:
    data = load(wrong_run[0])
    failed = {r["op"] for r in data["records"] if r["tier"] == "contract" and r["status"] == records.FAIL}
    assert failed == {"not_an_op", "no_such_kernel"}


def test_regression_against_baseline_is_reported(wrong_run: tuple) -> None:
    data = load(wrong_run[0])
    keys = {r["key"] for r in data["regressions"]}
    assert "accuracy/mul/float32/contiguous" in keys
    assert "accuracy/mul/int64/contiguous" not in keys  # PASS -> FALLBACK is no regression


def test_baseline_compares_only_records_both_runs_checked() -> None:
    before = {"accuracy/mul/float32/contiguous": records.PASS, "accuracy/add/int8/empty": records.PASS}
    now = [Record("accuracy", "mul", "float32", "contiguous", records.XFAIL),
           Record("accuracy", "div", "float32", "contiguous", records.FAIL)]
    assert [r.key for r in baseline.regressions(before, now)] == ["accuracy/mul/float32/contiguous"]


def test_crashing_kernel_is_error_and_run_completes(crash_run: tuple) -> None:
    report, proc = crash_run
    assert proc.returncode == 1, proc.stderr
    data = load(report)
    aborted = find(data, "mul", "int16", "empty")[0]
    assert aborted["status"] == records.ERROR and "SIGABRT" in aborted["message"]
    hung = find(data, "mul", "int8", "empty")[0]
    assert hung["status"] == records.ERROR and "hung" in hung["message"]
    # the samples after the crash ran in a fresh worker
    assert find(data, "mul", "int16", "0-d")[0]["status"] == records.PASS
    assert {r["status"] for r in find(data, "mul", "float32")} == {records.PASS}


def _chromium() -> str | None:
    return next(filter(None, (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome"))), None)


def test_html_report_shows_matrix_with_counts_in_a_browser(wrong_run: tuple, tmp_path: Path) -> None:
    browser = _chromium()
    if browser is None:
        pytest.skip("no chromium to open report.html in (apt-get install -y chromium)")
    report = wrong_run[0]
    dom = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path}",
         "--dump-dom", (report / "report.html").as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    ).stdout
    data = load(report)
    for status, n in data["counts"].items():
        assert f'id="count-{status.replace(" ", "_")}">{n}</td>' in dom
    accuracy_ops = {r["op"] for r in data["records"] if r["tier"] == "accuracy"}
    assert {"add", "mul"} <= accuracy_ops
    assert dom.count('<tr data-op="') == len(accuracy_ops)  # one matrix row per op case
    assert 'class="cell" data-status="FAIL"' in dom
    # filled in by the page's script: the browser ran it
    assert 'id="matrix-tally">FAIL: ' in dom


def test_stopped_run_still_reports_what_ran(tmp_path: Path) -> None:
    """SIGTERM (a CI time limit) mid-run: the reports hold what ran, marked incomplete."""
    env = dict(os.environ)
    env.pop("GEMS_DEVICE", None)
    command = [sys.executable, "-m", "gems_conformance.cli", "--quick", "--report", str(tmp_path),
               "--device", "cpu", "--tier", "accuracy", "--ops", "add,mul,sub,div", "--workers", "1"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        seen = ""
        while "] accuracy" not in seen:  # a job has finished
            line = proc.stderr.readline()
            assert line and time.monotonic() < deadline, seen[-2000:]
            seen += line
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, out + err
    data = load(tmp_path)
    assert data["passed"] is False and data["unfinished"].startswith("interrupted after ")
    assert data["records"] and all(r["tier"] == "accuracy" for r in data["records"])
    assert "incomplete: interrupted after" in (tmp_path / "summary.md").read_text()
