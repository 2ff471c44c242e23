"""The ``gems`` loggers and the settings module: ``GEMS_LOG=debug`` logs the selection and
each dispatch decision once per signature, not per call; tuning choices, compiles and
native-replay refusals go to their loggers at debug; every ``GEMS_*`` variable is parsed in
one place, and a value it does not take is an error that names the variable."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from test_tuning import gpu_like  # noqa: F401 - the fixture: a runtime that benchmarks

from gems_core import KernelConfig, launch_cache, logs, settings, tuning
from gems_core.native import recorder

_SCRIPT = """
import torch, gems_core
x = torch.randn(3, 5, dtype=torch.float64)
with gems_core.use_gems(include=["add", "index"]):
    for _ in range(3):
        y = x + x                 # served by gems
        z = x[x > 0]              # a boolean mask: gems' kernel declines, ATen serves it
assert torch.equal(y, torch.add(x, x)) and torch.equal(z, x.masked_select(x > 0))
"""


def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GEMS_") or k == "GEMS_CACHE_DIR"}
    return subprocess.run([sys.executable, "-c", _SCRIPT], env={**clean, **env},
                          capture_output=True, text=True, timeout=300)


def test_gems_log_debug_prints_selection_and_each_decision_once() -> None:
    done = _run({"GEMS_LOG": "debug"})
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines.count("gems.selection INFO: backend cpu: no accelerator backend detected its hardware") == 1
    assert lines.count("gems.dispatch DEBUG: add.Tensor (float64): gems") == 1
    fallback = [line for line in lines if line.startswith("gems.dispatch DEBUG: index.Tensor")]
    assert fallback == ["gems.dispatch DEBUG: index.Tensor (bool, float64): ATen, gems' kernel does "
                        "not take these arguments (NotImplemented)"]


def test_gems_is_silent_without_gems_log() -> None:
    done = _run({})
    assert done.returncode == 0, done.stderr
    assert not [line for line in done.stderr.splitlines() if line.startswith("gems.")]


@pytest.fixture
def fresh_log(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """caplog at debug for the ``gems`` loggers, with no signature logged before."""
    monkeypatch.setattr(logs, "_seen", set())
    caplog.set_level(logging.DEBUG, logger="gems")
    return caplog


def _messages(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger]


def test_tuning_choice_is_logged_once_with_its_timings(
    gpu_like: tuning.Tunable, fresh_log: pytest.LogCaptureFixture  # noqa: F811
) -> None:
    def bench(config: KernelConfig) -> float:
        return {64: 3.0, 128: 1.0, 256: 2.0}[config.params["BLOCK"]]

    for _ in range(3):
        assert gpu_like.choose(("log", 1), bench).params["BLOCK"] == 128
    messages = _messages(fresh_log, "gems.tuning")
    assert len(messages) == 1, messages
    assert messages[0].startswith("test_choose_kernel ('log', 1) on Fake GPU: BLOCK=128")
    assert "benchmarked BLOCK=64, num_warps=4, num_stages=2: 3 ms" in messages[0]
    assert "BLOCK=256, num_warps=4, num_stages=2: 2 ms" in messages[0]
    gpu_like._chosen.clear()  # a new process: the disk answers, and says so
    logs._seen.clear()
    assert gpu_like.choose(("log", 1), bench).params["BLOCK"] == 128
    assert "remembered in" in _messages(fresh_log, "gems.tuning")[-1]


def test_tuning_without_benchmarks_logs_why(
    gpu_like: tuning.Tunable, fresh_log: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    monkeypatch.setenv("GEMS_AUTOTUNE", "0")
    assert gpu_like.choose(("log", 2), lambda config: 1.0).params["BLOCK"] == 64
    assert _messages(fresh_log, "gems.tuning") == [
        "test_choose_kernel ('log', 2) on Fake GPU: BLOCK=64, num_warps=4, num_stages=2 "
        "(the first config: GEMS_AUTOTUNE=0)"
    ]


def test_compile_is_logged_with_its_signature(
    fresh_log: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel compiled (here a stand-in for a JIT function: the interpreter compiles
    nothing) is logged with its constexprs, warps, stages and argument specialization."""
    monkeypatch.setenv("GEMS_LAUNCHER", "triton")
    compiled = SimpleNamespace(_init_handles=lambda: None, run=None, function=None, packed_metadata=None)
    kernel = SimpleNamespace(arg_names=["x_ptr", "n", "BLOCK"], constexprs=[2], warmup=lambda *a, **k: compiled)
    launches = launch_cache.LaunchCache(kernel, name="stand_in_kernel")
    x = torch.randn(7)
    for _ in range(2):
        launches.entry_for((1, 1, 1), (x, 7), {"BLOCK": 64}, KernelConfig({}, num_warps=2), None)
    messages = _messages(fresh_log, "gems.launch")
    assert len(messages) == 1 and messages[0].startswith("stand_in_kernel compiled in "), messages
    assert "BLOCK=64, num_warps=2, num_stages=2" in messages[0] and "torch.float32" in messages[0]


def test_native_replay_refusal_is_logged_with_its_reason(fresh_log: pytest.LogCaptureFixture) -> None:
    x = torch.randn(4)
    for _ in range(2):
        result, recipe = recorder.record_call(lambda t: t.dim(), (x,), {}, [(0, x)], 1, op="stand_in.op")
        assert recipe is None and result == 1
    assert _messages(fresh_log, "gems.native") == [
        "stand_in.op: no native replay, returns something other than tensors"
    ]


def test_the_seen_set_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logs, "_seen", set())
    quiet = logging.getLogger("gems.test_bounded")
    for key in range(logs.SEEN_LIMIT * 2 + 5):
        logs.once(quiet, key, "%d", key)
    assert 0 < len(logs._seen) <= logs.SEEN_LIMIT


@pytest.mark.parametrize(("name", "value", "parsed"), [
    ("GEMS_AUTOTUNE", None, "on"), ("GEMS_AUTOTUNE", "0", "off"), ("GEMS_AUTOTUNE", " Off ", "off"),
    ("GEMS_AUTOTUNE", "Cached", "cached"), ("GEMS_AUTOTUNE", "yes", "on"),
    ("GEMS_EMULATE", "yes", True), ("GEMS_EMULATE", "", False),
    ("GEMS_MM_TMA", None, "auto"), ("GEMS_MM_TMA", "0", "off"), ("GEMS_MM_TMA", "FORCE", "force"),
    ("GEMS_NATIVE", "force, check", frozenset({"force", "check"})),
    ("GEMS_CHECK_INDICES", "Host", "host"), ("GEMS_DEVICE", " nvidia ", "nvidia"),
    ("GEMS_CONFORMANCE_THREADS", "3", 3), ("GEMS_CONFORMANCE_THREADS", None, None),
    ("GEMS_LOG", None, "off"), ("GEMS_LOG", "DEBUG", "debug"),
])
def test_settings_parse(name: str, value: str | None, parsed: object) -> None:
    environ = {} if value is None else {name: value}
    assert settings.get(name, environ) == parsed


@pytest.mark.parametrize(("name", "value"), [
    ("GEMS_AUTOTUNE", "maybe"), ("GEMS_LAUNCHER", "fast"), ("GEMS_NATIVE", "1,bogus"),
    ("GEMS_CONFORMANCE_THREADS", "-2"), ("GEMS_LOG", "verbose"), ("GEMS_DECODE_MERGE", "both"),
])
def test_a_bad_value_names_the_variable(name: str, value: str) -> None:
    with pytest.raises(ValueError, match=rf"^{name}={value!r} is not understood: {name} takes "):
        settings.get(name, {name: value})


def test_settings_follow_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMS_LAUNCHER", "direct")
    assert settings.get("GEMS_LAUNCHER") == "direct"
    monkeypatch.setenv("GEMS_LAUNCHER", "torch")
    assert settings.get("GEMS_LAUNCHER") == "torch"
    monkeypatch.delenv("GEMS_LAUNCHER")
    assert settings.get("GEMS_LAUNCHER") == "auto"
    with pytest.raises(KeyError, match="GEMS_NO_SUCH"):
        settings.get("GEMS_NO_SUCH")


def test_a_bad_gems_log_fails_the_selection_with_its_name() -> None:
    done = _run({"GEMS_LOG": "loud"})
    assert done.returncode != 0 and "GEMS_LOG='loud' is not understood" in done.stderr
