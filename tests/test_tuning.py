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
        selection=SimpleNamespace(backend=SimpleNamespace(name="fake", call=lambda hook, **kwargs: None), device_name="Fake GPU"),
    )
    monkeypatch.setattr(runtime, "current", lambda: fake)
    monkeypatch.setattr(tuning, "device_model", lambda: "Fake GPU")  # no driver to ask here
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


def test_a_capture_takes_the_stored_or_first_config_and_tunes_later(
    gpu_like: tuning.Tunable, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a CUDA graph is captured (torch.compile's reduce-overhead mode captures a
    model's first calls) nothing is benchmarked: the graph gets the stored choice or the
    first config, and the shape is tuned when it is met outside a capture."""
    timed: list[int] = []

    def bench(config: KernelConfig) -> float:
        timed.append(config.params["BLOCK"])
        return {64: 3.0, 128: 1.0, 256: 2.0}[config.params["BLOCK"]]

    monkeypatch.setattr(tuning, "capturing", lambda: True)
    assert gpu_like.choose(("k", 7), bench).params["BLOCK"] == 64
    assert timed == []
    monkeypatch.setattr(tuning, "capturing", lambda: False)
    assert gpu_like.choose(("k", 7), bench).params["BLOCK"] == 128
    assert timed == [64, 128, 256]
    gpu_like._chosen.clear()  # a new process that captures first: the disk's choice serves
    monkeypatch.setattr(tuning, "capturing", lambda: True)
    assert gpu_like.choose(("k", 7), bench).params["BLOCK"] == 128
    assert timed == [64, 128, 256]
