"""benchmarks/coldstart.py at its tiny size on the cpu backend: fresh processes per provider
and workload, the JSON report, and a clear error for an unknown scenario."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "coldstart.py"


def test_a_tiny_cold_start_reports_each_provider(tmp_path: Path) -> None:
    out = tmp_path / "cold.json"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--tiny", "--scenarios", "empty", "--workloads", "generate",
         "--new-tokens", "3", "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    report = json.loads(out.read_text())
    rows = {r["provider"]: r for r in report["results"]}
    assert set(rows) == {"aten", "gems"} and report["tiny"] and report["new_tokens"] == 3
    for row in rows.values():
        assert row["scenario"] == "empty" and row["new_tokens"] == 3
        assert 0 < row["first_token_s"] <= row["generate_s"] < row["process_s"]
    assert rows["gems"]["shipped_table"] is None and rows["gems"]["benchmarks_run"] == 0  # interpreter
    assert "benchmarks_run" not in rows["aten"]
    assert "empty     generate  first_token_s" in done.stdout


def test_an_unknown_scenario_is_a_clear_error() -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--tiny", "--scenarios", "lukewarm"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "unknown scenarios: lukewarm (known: empty, warm, shipped)" in done.stderr


def test_a_tiny_training_start_matches_aten(tmp_path: Path) -> None:
    out = tmp_path / "train.json"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--tiny", "--scenarios", "empty", "--workloads", "train", "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    rows = {r["provider"]: r for r in json.loads(out.read_text())["results"]}
    for row in rows.values():
        assert 0 < row["second_step_s"] and 0 < row["first_step_s"] < row["process_s"]
    losses = [rows[p]["losses"] for p in ("aten", "gems")]
    assert len(losses[0]) == 2 and losses[0][1] < losses[0][0]  # the step learned
    for ours, theirs in zip(losses[1], losses[0]):
        assert abs(ours - theirs) <= 1e-5 * abs(theirs)
    assert "empty     train     first_step_s" in done.stdout


def test_a_process_over_its_time_is_an_error_row_not_a_crash(tmp_path: Path) -> None:
    out = tmp_path / "slow.json"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--tiny", "--scenarios", "empty", "--workloads", "forward",
         "--providers", "gems", "--timeout", "0.2", "--out", str(out)],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 1, done.stderr
    (row,) = json.loads(out.read_text())["results"]
    assert row["error"] == "the process took over 0.2 s" and row["provider"] == "gems"
    assert "empty/gems/forward: the process took over 0.2 s" in done.stdout
