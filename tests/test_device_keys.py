"""Device keying, checked without a GPU: the driver's device queries are replaced by stand-ins
for a host with several devices. Kernels run on their operands' device whichever is current
(a device guard around the call and the launch, that device's stream), operands on two devices
raise ATen's error, and what gems caches of a device is kept per device: tuning choices per
device model, compiled kernels, plans and compute-unit counts per device index."""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from gems_core import compat, launch_cache, runtime, tuning
from gems_core.contract import KernelConfig
from gems_core.launch_cache import LaunchCache
from gems_core.plan_cache import Launch
from test_tuning import gpu_like  # noqa: F401 - a fixture

DEVICE_MODEL = tuning.device_model


class Host:
    """Stand-in device queries: a current device that guards switch."""

    def __init__(self, current: int = 0) -> None:
        self.current = current
        self.guards: list[int] = []

    def current_device(self) -> int:
        return self.current

    @contextmanager
    def guard(self, index: int):
        self.guards.append(index)
        previous, self.current = self.current, index
        try:
            yield
        finally:
            self.current = previous


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch) -> Host:
    fake = Host()
    monkeypatch.setattr(compat, "current_device", fake.current_device)
    monkeypatch.setattr(compat, "device_guard", fake.guard)
    monkeypatch.setattr(launch_cache, "_current_device", fake.current_device)
    return fake


def _on(index: int, *shape: int) -> torch.Tensor:
    """A random float64 tensor that the stand-in device query places on device ``index``."""
    t = torch.randn(shape, dtype=torch.float64)
    t.fake_index = index
    return t


@pytest.fixture
def guarded(host: Host, monkeypatch: pytest.MonkeyPatch):
    """``guarded(fn)``: fn wrapped as dispatch wraps gems' kernels, on the stand-in host."""
    monkeypatch.setattr(compat, "current_device_function", lambda: host.current_device)
    monkeypatch.setattr(compat, "_index_of", lambda t: getattr(t, "fake_index", -1))
    return lambda fn: compat.on_operands_device(fn, "cuda")


def test_operands_device_is_made_current_around_the_call(host: Host, guarded) -> None:
    seen: list[int] = []

    def op(x: torch.Tensor, others: list[torch.Tensor], *, scale: float = 1.0) -> torch.Tensor:
        seen.append(host.current)
        return x * scale

    wrapped = guarded(op)
    x = _on(1, 3)
    torch.testing.assert_close(wrapped(x, [x, _on(1, 2)], scale=2.0), x * 2.0)
    assert seen == [1] and host.guards == [1] and host.current == 0  # guarded, then restored
    host.current = 1
    wrapped(x, [x])
    assert seen == [1, 1] and host.guards == [1]  # on the current device: no guard
    wrapped(torch.tensor(2.0), [])  # CPU tensors only: nothing to make current
    assert seen == [1, 1, 1] and host.guards == [1]
    host.current = 0
    wrapped(torch.tensor(2.0), [x], scale=_on(1))  # a CPU number beside device tensors
    assert seen[-1] == 1 and host.guards == [1, 1]


@pytest.mark.parametrize("where", ["args", "list", "kwargs"])
def test_cross_device_operands_raise_atens_error_before_the_op_runs(guarded, where: str) -> None:
    ran: list[bool] = []
    wrapped = guarded(lambda *args, **kwargs: ran.append(True))
    a, b = _on(0, 2), _on(1, 2)
    call = {"args": lambda: wrapped(a, b), "list": lambda: wrapped([a, b], 0), "kwargs": lambda: wrapped(a, out=b)}
    with pytest.raises(RuntimeError, match=r"^Expected all tensors to be on the same device, but found "
                       r"at least two devices, cuda:0 and cuda:1!$"):
        call[where]()
    assert not ran


def _fake_cache(monkeypatch: pytest.MonkeyPatch, host: Host) -> tuple[LaunchCache, list[tuple[Any, ...]], list[Any]]:
    """A launch cache as on a GPU whose compiles note the current device and whose launches
    note the current device and the stream they were given (device d's stream: 100 + d)."""
    import triton
    import triton.language as tl

    @triton.jit
    def scale(x_ptr, n, BLOCK: tl.constexpr):
        pass

    cache, launched, lookups = LaunchCache(scale, name="scale"), [], []
    cache.interpreted = False
    go = lambda gx, gy, gz, stream, args: launched.append((host.current, stream))  # noqa: E731
    monkeypatch.setattr(cache, "entry_for", lambda grid3, args, constexprs, *rest: (
        lookups.append(host.current), (go, (constexprs["BLOCK"],)))[1])
    monkeypatch.setattr(compat, "current_stream", lambda index: 100 + index)
    monkeypatch.setattr(compat, "stream_function", lambda: (lambda index: 100 + index))
    monkeypatch.setattr(launch_cache, "_compile_target", lambda: None)
    return cache, launched, lookups


def test_launch_runs_on_its_operands_device_and_stream(host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    cache, launched, lookups = _fake_cache(monkeypatch, host)
    x = torch.randn(8)  # device 0
    host.current = 1
    cache((1,), x, 8, BLOCK=16)
    assert lookups == [0] and launched == [(0, 100)] and host.guards == [0]
    host.current = 0
    cache((1,), x, 8, BLOCK=16)
    assert launched[-1] == (0, 100) and host.guards == [0]


def test_plan_launch_for_another_device_takes_the_guarded_path(host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    cache, launched, lookups = _fake_cache(monkeypatch, host)
    launch = Launch(cache, (2,), 1, (8,), torch.device("cuda", 1), BLOCK=16)
    x = torch.randn(8)
    launch(x)  # current device 0, the plan's device 1
    launch(x)
    assert launched == [(1, 101), (1, 101)] and host.guards == [1, 1]
    host.current = 1
    launch(x)  # now current: straight to the learnt launcher
    assert launched[-1] == (1, 101) and host.guards == [1, 1]


@pytest.fixture
def tunable(gpu_like: tuning.Tunable, monkeypatch: pytest.MonkeyPatch, host: Host) -> tuning.Tunable:
    """test_tuning's stand-in GPU runtime, on a host of two device models."""
    monkeypatch.setattr(tuning, "device_model", DEVICE_MODEL)  # the real one, on the stand-in host
    models = {0: "Model A", 1: "Model B", 2: "Model A"}
    monkeypatch.setattr(compat, "device_name", lambda index: models[index])
    return gpu_like


def test_tuning_choices_are_kept_per_device_model(tunable: tuning.Tunable, host: Host, tmp_path) -> None:
    timed: list[tuple[str, int]] = []
    fastest = {"Model A": 64, "Model B": 256}

    def bench(config: KernelConfig) -> float:
        model = compat.device_name(host.current)
        timed.append((model, config.params["BLOCK"]))
        return 1.0 if config.params["BLOCK"] == fastest[model] else 2.0

    assert tunable.choose("k", bench).params["BLOCK"] == 64
    host.current = 1
    assert tunable.choose("k", bench).params["BLOCK"] == 256  # another model: timed anew
    host.current = 2
    assert tunable.choose("k", bench).params["BLOCK"] == 64  # the first model's choice
    assert [model for model, _ in timed] == ["Model A"] * 3 + ["Model B"] * 3
    stored = sorted(p.parent.name for p in tmp_path.glob(f"tuning/*/{tunable.name}.json"))
    assert len(stored) == 2 and "Model_A" in stored[0] and "Model_B" in stored[1]


def test_compute_units_are_kept_per_device_index(monkeypatch: pytest.MonkeyPatch) -> None:
    host = Host(current=1)
    units = {0: 132, 1: 78}
    module = SimpleNamespace(
        current_device=host.current_device,
        get_device_properties=lambda index: SimpleNamespace(multi_processor_count=units[index]),
    )
    monkeypatch.setattr(torch, "get_device_module", lambda device_type: module)
    runtime._compute_units.cache_clear()
    try:
        assert runtime.compute_units("fakegpu", None) == 78  # the current device's
        host.current = 0
        assert runtime.compute_units("fakegpu", None) == 132
        assert runtime.compute_units("fakegpu", 1) == 78
        assert runtime.compute_units("cpu", None) == 8
    finally:
        runtime._compute_units.cache_clear()
