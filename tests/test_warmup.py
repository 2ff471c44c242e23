"""Ahead-of-time warm-up (gems_core.warmup, ``python -m gems_core warmup``): recording a
model's gems op signatures, replaying them (gems kernels launch, the cache fills), the named
sets, and the commands' errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gems_core import warmup

SCRIPT = """
import sys
import torch
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())
rows = int(sys.argv[1])
x = torch.randn(rows, 3)[:, :, None].expand(rows, 3, 8)[::2, 1]  # non-contiguous, broadcast
probs = net(x).softmax(-1)
q = torch.randn(1, 2, 4, 8, requires_grad=True)
torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
"""


def _by_op(signatures: list[dict]) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for sig in signatures:
        found.setdefault(sig["op"], []).append(sig)
    return found


def _layout(arg: dict) -> tuple:
    spec = arg["tensor"]
    return spec["dtype"], spec["shape"], spec["stride"]


def test_record_captures_a_small_models_signatures(tmp_path: Path) -> None:
    script = tmp_path / "model.py"
    script.write_text(SCRIPT)
    out = tmp_path / "sigs.json"
    assert warmup.main("warmup", ["--record", str(script), "--out", str(out), "--", "20"]) == 0
    signatures = warmup.load(out)
    ops = _by_op(signatures)
    (addmm,) = ops["addmm"]
    assert [_layout(a) for a in addmm["args"]] == [
        ("float32", [4], [1]), ("float32", [10, 8], [6, 0]), ("float32", [8, 4], [1, 8])
    ]
    assert addmm["args"][1]["tensor"]["offset"] == 1
    assert [_layout(s["args"][0]) for s in ops["relu"]] == [("float32", [10, 4], [4, 1])]
    assert ops["_softmax"][0]["args"][1:] == [-1, False]
    (sdpa,) = ops["scaled_dot_product_attention"]
    assert sdpa.get("backward") and sdpa["args"][3:] == [None, 0.0, True]  # mask, dropout, causal
    assert sdpa["args"][0]["tensor"]["grad"] is True
    # the file replays: each of the model's gems ops launches gems kernels again
    summary = warmup.run(signatures, jobs=1, quiet=True)
    assert summary["failed"] == 0, summary["results"]
    launched = {r["op"] for r in summary["results"] if r["launches"]}
    assert {"addmm", "relu", "_softmax", "scaled_dot_product_attention"} <= launched
    sdpa_result = next(r for r in summary["results"] if r["op"] == "scaled_dot_product_attention")
    assert sdpa_result["launches"] > 2  # forward and backward kernels


@pytest.mark.parametrize("status", [0, 3])
def test_a_script_that_exits_is_recorded_only_when_it_succeeded(tmp_path: Path, status: int) -> None:
    """``sys.exit(0)`` at a script's end (a CLI's ``sys.exit(main())``) still writes its
    signatures; a failing exit status is the command's, with nothing written."""
    script = tmp_path / "model.py"
    script.write_text(SCRIPT + f"sys.exit({status})\n")
    out = tmp_path / "sigs.json"
    if status:
        with pytest.raises(SystemExit) as exited:
            warmup.main("warmup", ["--record", str(script), "--out", str(out), "--", "20"])
        assert exited.value.code == status and not out.exists()
    else:
        assert warmup.main("warmup", ["--record", str(script), "--out", str(out), "--", "20"]) == 0
        assert "scaled_dot_product_attention" in _by_op(warmup.load(out))


def test_warmup_of_the_smoke_set_compiles_into_the_cache(tmp_path: Path) -> None:
    """The command, with two worker processes: every signature runs gems kernels, the
    progress bar and its counts go to stderr, the kernels gems generates land in the cache
    folder named, and the summary is JSON with --json."""
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if k not in ("GEMS_CACHE_DIR", "TRITON_CACHE_DIR")}
    done = subprocess.run(
        [sys.executable, "-m", "gems_core", "warmup", "--set", "smoke", "--jobs", "2",
         "--cache-dir", str(cache), "--json"],
        capture_output=True, text=True, env={**env, "GEMS_DEVICE": "cpu"}, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["signatures"] == len(warmup.named("smoke")) == summary["gems"]
    assert summary["failed"] == 0 and all(r["launches"] > 0 for r in summary["results"])
    assert summary["phases"] == ["compile (2 processes)"]
    assert "4/4 100%" in done.stderr and "eta" in done.stderr
    assert list((cache / "pointwise").rglob("*.py")), "no generated kernel in the cache"


def test_the_llama_sets_are_valid_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """The llama sets' signatures, at a tiny size in float32 (the CPU interpreter leaves
    bf16 products to ATen), all run gems kernels."""
    monkeypatch.setitem(warmup.LLAMA, "dtype", "float32")
    for name, value in dict(hidden=16, heads=2, kv_heads=1, head_dim=8, mlp=24, vocab=20, prompt=3).items():
        monkeypatch.setitem(warmup.LLAMA, name, value)
    monkeypatch.setattr(warmup, "DECODE_KV", (5,))
    monkeypatch.setattr(warmup, "BATCHES", (2,))
    for name in ("llama-decode", "llama-prefill"):
        summary = warmup.run(warmup.named(name), jobs=1, quiet=True)
        assert summary["failed"] == 0, summary["results"]
        assert summary["gems"] == summary["signatures"], [r for r in summary["results"] if not r["launches"]]


def test_the_full_size_llama_sets_cover_batches_and_kv_buckets() -> None:
    decode = warmup.named("llama-decode")
    attention = [s for s in decode if s["op"] == "scaled_dot_product_attention"]
    seen = {(s["args"][0]["tensor"]["shape"][0], s["args"][1]["tensor"]["shape"][2]) for s in attention}
    assert seen == {(b, kv) for b in warmup.BATCHES for kv in warmup.DECODE_KV}
    assert all(s["args"][0]["tensor"]["dtype"] == "bfloat16" for s in attention)
    assert len(decode) == len({json.dumps(s, sort_keys=True) for s in decode})  # no repeats


def test_a_signature_that_fails_is_reported_not_raised() -> None:
    sig = warmup.signature("mm", [torch.randn(2, 3), torch.randn(4, 5)])
    result = warmup.run([sig, warmup.named("smoke")[0]], jobs=1, quiet=True)
    assert result["failed"] == 1 and result["gems"] == 1
    assert "RuntimeError" in result["results"][0]["error"]


def test_bad_inputs_are_clear_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="no signature set 'llama'; the sets are smoke"):
        warmup.named("llama")
    bad = tmp_path / "bad.json"
    bad.write_text('{"signatures": 3}')
    with pytest.raises(ValueError, match="not a gems signature file"):
        warmup.load(bad)
    with pytest.raises(SystemExit) as exit_info:
        warmup.main("warmup", [str(bad)])
    assert exit_info.value.code == 2 and "not a gems signature file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        warmup.main("warmup", [])
    assert "name signature files or --set" in capsys.readouterr().err
    with pytest.raises(warmup.Unrecordable, match="Generator"):
        warmup.signature("bernoulli", [torch.rand(3)], {"generator": torch.Generator()})


def test_tune_refuses_where_nothing_is_benchmarked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "table.json"
    assert warmup.main("tune", ["--set", "smoke", "--out", str(out), "--jobs", "1"]) == 2
    assert "run this on the device the table is for" in capsys.readouterr().err
    assert not out.exists()


def test_where_the_device_tunes_workers_compile_and_this_process_tunes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers' timings would share the device: they compile into a scratch cache (removed
    after), and this process replays every signature again, alone, for the choices kept."""
    seen: dict = {}

    def workers(signatures, jobs, env, bar):
        seen.update(jobs=jobs, env=dict(env))
        return [{"op": s["op"], "launches": 0, "seconds": 0.0, "error": "not measured"} for s in signatures]

    monkeypatch.setattr(warmup, "_in_workers", workers)
    monkeypatch.setattr(warmup, "_tunes", lambda: True)
    summary = warmup.run(warmup.named("smoke"), jobs=3, quiet=True)
    assert summary["phases"] == ["compile (3 processes)", "tune (this process)"]
    scratch = Path(seen["env"]["GEMS_CACHE_DIR"])
    assert seen["jobs"] == 3 and not scratch.exists() and str(scratch) != os.environ.get("GEMS_CACHE_DIR")
    assert summary["failed"] == 0 and summary["gems"] == summary["signatures"] == 4
