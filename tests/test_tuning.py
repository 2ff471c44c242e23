"""Tunable.choose on a device that benchmarks (a stand-in runtime): several configs are
timed once per key and the choice persists on disk; GEMS_AUTOTUNE=0 takes the first config
without timing anything."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gems_core import KernelConfig, runtime, tuning


def _configs() -> list[KernelConfig]:
    return [KernelConfig({"BLOCK": size}, num_warps=4) for size in (64, 128, 256)]


@pytest.fixture
def gpu_like(monkeypatch: pytest.MonkeyPatch, tmp_path) -> tuning.Tunable:
    """A tunable under a runtime that is neither the interpreter nor compile-only."""
    monkeypatch.setenv("GEMS_CACHE_DIR", str(tmp_path))
    fake = SimpleNamespace(
        interpreter=False, compile_only=False,
        policy=SimpleNamespace(configs={}, options_for=lambda name: {}),
        selection=SimpleNamespace(backend=SimpleNamespace(name="fake"), device_name="Fake GPU"),
    )
    monkeypatch.setattr(runtime, "current", lambda: fake)
    tunable = tuning.Tunable("test_choose_kernel", params=("BLOCK",), defaults=_configs())
    yield tunable
    tuning._TUNABLES.pop("test_choose_kernel", None)


def test_choose_benchmarks_once_and_persists(gpu_like: tuning.Tunable) -> None:
    timed: list[int] = []

    def bench(config: KernelConfig) -> float:
        timed.append(config.params["BLOCK"])
        return {64: 3.0, 128: 1.0, 256: 2.0}[config.params["BLOCK"]]

    assert gpu_like.choose(("k", 1), bench).params["BLOCK"] == 128
    assert gpu_like.choose(("k", 1), bench).params["BLOCK"] == 128
    assert timed == [64, 128, 256]  # once per key
    gpu_like._chosen.clear()  # a new process: the disk answers
    assert gpu_like.choose(("k", 1), bench).params["BLOCK"] == 128
    assert timed == [64, 128, 256]


def test_autotune_off_takes_the_first_config(gpu_like: tuning.Tunable, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMS_AUTOTUNE", "0")

    def bench(config: KernelConfig) -> float:
        raise AssertionError("nothing may be timed with GEMS_AUTOTUNE=0")

    assert gpu_like.choose(("k", 2), bench).params["BLOCK"] == 64


def test_a_config_that_fails_is_skipped(gpu_like: tuning.Tunable) -> None:
    def bench(config: KernelConfig) -> float:
        if config.params["BLOCK"] == 64:
            raise RuntimeError("out of resources")
        return float(config.params["BLOCK"])

    assert gpu_like.choose(("k", 3), bench).params["BLOCK"] == 128
