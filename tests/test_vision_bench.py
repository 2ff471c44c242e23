"""benchmarks/vision.py runs on the cpu backend at tiny shapes and reports every case with
gems' results equal to ATen's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import gems_core

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import vision  # noqa: E402


def test_every_case_runs_and_agrees_with_aten(tmp_path: Path) -> None:
    out = tmp_path / "vision.jsonl"
    assert vision.main(["--quick", "--device", gems_core.device, "--batch", "2", "--rounds", "1",
                        "--dtype", "float32", "--out", str(out)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[0]["kind"] == "environment"
    rows = lines[1:]
    ops = {row["op"] for row in rows}
    assert ops == {"convolution", "convolution_backward", "native_batch_norm", "max_pool2d_with_indices",
                   "avg_pool2d", "_adaptive_avg_pool2d", "upsample_bilinear2d", "upsample_nearest2d"}
    for row in rows:
        assert row["max_rel_difference"] < 1e-4, row
        assert row["aten_ms"] > 0 and row["gems_ms"] > 0
