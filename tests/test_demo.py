"""The README's demo: its model part runs and matches ATen, and the conformance summary it
starts is reachable as ``python -m gems_conformance``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_demo_model_runs_on_gems_and_matches_aten() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py"), "--no-conformance"],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ran on gems kernels" in proc.stdout
    assert "(ok)" in proc.stdout


def test_conformance_runs_as_a_module() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gems_conformance", "--help"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "--device" in proc.stdout
