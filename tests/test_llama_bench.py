"""benchmarks/llama.py runs end to end at tiny sizes on whatever backend is selected (the cpu
backend here) and reports every field a GPU run is read for."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "llama.py"


def _bench():
    spec = importlib.util.spec_from_file_location("gems_bench_llama", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_quick_run_reports_latency_error_and_kernel_share(tmp_path: Path) -> None:
    out = tmp_path / "llama.json"
    bench = _bench()
    assert bench.main(["--quick", "--providers", "aten,gems,gems-fused", "--json", str(out)]) == 0
    payload = json.loads(out.read_text())
    for key in ("device", "backend", "torch", "triton", "dtype", "batch", "prompt",
                "decode_steps", "config", "results"):
        assert key in payload, key
    assert payload["config"]["layers"] == 2 and payload["config"]["kv_heads"] == 2
    rows = {row["provider"]: row for row in payload["results"]}
    assert set(rows) == {"aten", "gems", "gems-fused"}
    for row in rows.values():
        assert "error" not in row, row
        for key in ("prefill_ms", "decode_ms_per_token", "logits_rel_error", "gems_kernel_share"):
            assert key in row, key
        assert row["prefill_ms"] > 0 and row["decode_ms_per_token"] > 0
    assert rows["aten"]["logits_rel_error"] == 0.0
    assert rows["gems"]["logits_rel_error"] < 1e-4
    # the fused ops compute the same function
    assert rows["gems-fused"]["logits_rel_error"] < 1e-4


def test_kernels_are_classified_by_name() -> None:
    bench = _bench()
    known = bench.triton_kernel_names()
    assert {"_mm_kernel", "_mm_decode_kernel", "_gemv_kernel", "pointwise_kernel"} <= known
    assert bench.is_triton_kernel("_mm_decode_kernel", known)
    assert not bench.is_triton_kernel("nvjet_tst_64x8_64x16_4x1_v_bz_TNN", known)
    assert not bench.is_triton_kernel(
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", known
    )
