"""``python -m gems_core info --coverage``: what a model's run asks of ATen and what gems serves."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

from gems_core import coverage

SCRIPT = """
import sys
import torch
x = torch.randn(6, 5)
torch.fft.fft(x)
w = (x + float(sys.argv[1])).to(torch.float64)
(w.t() @ w).softmax(-1).view(-1)
"""


def test_counting_sorts_calls_into_gems_parts_and_aten() -> None:
    x = torch.randn(4, 3)
    with coverage.counting() as calls:
        torch.fft.fft(x)
        (x + 1).to(torch.float64).view(-1)
        torch.empty(3)
    rows = {r["op"]: r for r in coverage.classify(calls)}
    assert rows["add.Tensor"]["status"] == "gems" and rows["add.Tensor"]["calls"] == 1
    assert rows["_to_copy"]["status"] == "parts"  # ATen's calls copy_, which gems serves
    assert rows["_fft_r2c"]["status"] == "aten"
    assert "view" not in rows and "empty.memory_format" not in rows  # no kernel to serve


def test_the_cli_runs_a_script_with_its_arguments(tmp_path: Path) -> None:
    script = tmp_path / "model.py"
    script.write_text(SCRIPT)
    run = [sys.executable, "-m", "gems_core", "info", "--coverage", str(script), "2"]
    text = subprocess.run(run, capture_output=True, text=True, timeout=300, check=True).stdout
    assert "ATen calls of" in text and "_fft_r2c" in text
    rows = json.loads(subprocess.run([*run[:4], "--json", *run[4:]], capture_output=True, text=True,
                                     timeout=300, check=True).stdout)
    statuses = {r["op"]: r["status"] for r in rows}
    assert statuses["mm"] == "gems" and statuses["_softmax"] == "gems" and statuses["_fft_r2c"] == "aten"
    assert sum(r["calls"] for r in rows) >= 5


def test_the_cli_needs_a_script() -> None:
    done = subprocess.run([sys.executable, "-m", "gems_core", "info", "--coverage"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2 and "needs a script" in done.stderr
