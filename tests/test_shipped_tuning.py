"""Shipped tuning tables (gems_core.shipped): a backend's table answers before the on-disk
cache, with no benchmark; a stale, foreign or damaged table is ignored with one warning and
the kernel is tuned as usual; ``python -m gems_core tune``'s writer produces a table the
reader takes. On a stand-in runtime that benchmarks (the interpreter tunes nothing)."""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

import pytest
from test_tuning import gpu_like  # noqa: F401 - the stand-in runtime, a pytest fixture

from gems_core import KernelConfig, runtime, shipped, tuning
from gems_core.disk_cache import merge_json

MODEL = "Fake GPU"
KEY = ("k", 1)


@pytest.fixture
def table(gpu_like: tuning.Tunable, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # noqa: F811
    """``(tunable, write)``: ``write(data)`` makes ``data`` (text, or JSON-ready) the table
    the stand-in backend's ``gems_tuned_table`` hook returns for the fake device model."""
    path = tmp_path / "tuned" / shipped.file_name(MODEL)
    asked: list[str] = []

    def call(hook: str, **kwargs: object) -> object:
        assert hook == "gems_tuned_table"
        asked.append(str(kwargs["device_model"]))
        return path if path.exists() else None

    monkeypatch.setattr(runtime.current().selection.backend, "call", call)
    monkeypatch.setattr(shipped, "_tables", {})
    monkeypatch.delenv("GEMS_SHIPPED_TUNING", raising=False)

    def write(data: object) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(data if isinstance(data, str) else json.dumps(data))

    yield gpu_like, write, asked


def _table(tunable: tuning.Tunable, block: int, **changes: object) -> dict:
    config = next(c for c in tunable.defaults if c.params["BLOCK"] == block)
    entry = {"source": shipped.source_hash(tunable), "choices": {repr(KEY): config.describe()}}
    data = {"format": shipped.FORMAT, "backend": "fake", "device": MODEL, "triton": shipped.triton_release(),
            "tunables": {tunable.name: entry}}
    for name, value in changes.items():
        (entry if name == "source" else data)[name] = value
    return data


def _bench(timed: list[int]):
    def bench(config: KernelConfig) -> float:
        timed.append(config.params["BLOCK"])
        return {64: 3.0, 128: 1.0, 256: 2.0}[config.params["BLOCK"]]

    return bench


def _choose_warned(tunable: tuning.Tunable, timed: list[int]) -> tuple[int, list[str]]:
    """Two keys chosen (the table is read once); the first key's BLOCK and the warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        block = tunable.choose(KEY, _bench(timed)).params["BLOCK"]
        tunable.choose(("k", 2), _bench(timed))
    return block, [str(w.message) for w in caught if "tuning table" in str(w.message)]


def test_a_table_entry_is_used_before_the_disk_cache_with_no_benchmark(table) -> None:
    tunable, write, asked = table
    merge_json(tunable._cache_path(MODEL), {repr(KEY): tunable.defaults[1].describe()})  # BLOCK=128
    write(_table(tunable, 256))
    before = tuning.benchmarks_run

    def bench(config: KernelConfig) -> float:
        raise AssertionError("a shipped choice must not be benchmarked")

    assert tunable.choose(KEY, bench).params["BLOCK"] == 256
    assert tuning.benchmarks_run == before
    assert asked == [MODEL]
    # a key the table does not hold falls through to the disk cache, then to a benchmark
    tunable._chosen.clear()
    merge_json(tunable._cache_path(MODEL), {repr(("k", 9)): tunable.defaults[0].describe()})
    assert tunable.choose(("k", 9), bench).params["BLOCK"] == 64
    timed: list[int] = []
    assert tunable.choose(("k", 10), _bench(timed)).params["BLOCK"] == 128
    assert timed == [64, 128, 256] and asked == [MODEL]  # the hook is asked once per model


def test_autotune_cached_takes_shipped_and_remembered_choices_and_benchmarks_nothing(
        table, monkeypatch: pytest.MonkeyPatch) -> None:
    tunable, write, _ = table
    monkeypatch.setenv("GEMS_AUTOTUNE", "cached")
    write(_table(tunable, 256))
    merge_json(tunable._cache_path(MODEL), {repr(("k", 9)): tunable.defaults[1].describe()})
    before = tuning.benchmarks_run

    def bench(config: KernelConfig) -> float:
        raise AssertionError("GEMS_AUTOTUNE=cached benchmarks nothing")

    assert tunable.choose(KEY, bench).params["BLOCK"] == 256  # the shipped table
    assert tunable.choose(("k", 9), bench).params["BLOCK"] == 128  # remembered on disk
    assert tunable.choose(("k", 10), bench).params["BLOCK"] == 64  # neither: the first config
    assert tuning.benchmarks_run == before
    # GEMS_AUTOTUNE=0 takes the first config even where a choice is shipped
    monkeypatch.setenv("GEMS_AUTOTUNE", "0")
    tunable._chosen.clear()
    assert tunable.choose(KEY, bench).params["BLOCK"] == 64


def test_a_stale_entry_is_ignored_with_one_warning(table) -> None:
    tunable, write, _ = table
    write(_table(tunable, 256, source="0123456789abcdef"))  # measured for another kernel source
    timed: list[int] = []
    block, warned = _choose_warned(tunable, timed)
    assert block == 128 and timed == [64, 128, 256] * 2  # tuned here instead
    assert len(warned) == 1 and "stale" in warned[0] and tunable.name in warned[0], warned


def test_entries_tuned_among_other_configs_are_stale(table, monkeypatch: pytest.MonkeyPatch) -> None:
    """The backend's config list changed since the table was written (BLOCK=64 dropped):
    the choice among the old list is ignored, even though it is still a candidate."""
    tunable, write, _ = table
    write(_table(tunable, 128))
    monkeypatch.setitem(runtime.current().policy.configs, tunable.name, list(tunable.defaults[1:]))
    timed: list[int] = []
    block, warned = _choose_warned(tunable, timed)
    assert block == 128 and timed == [128, 256] * 2
    assert len(warned) == 1 and "stale" in warned[0], warned


def test_a_table_of_another_triton_is_ignored_with_one_warning(table) -> None:
    tunable, write, _ = table
    write(_table(tunable, 256, triton="2.9"))
    timed: list[int] = []
    block, warned = _choose_warned(tunable, timed)
    assert block == 128 and timed == [64, 128, 256] * 2
    assert len(warned) == 1 and "Triton 2.9" in warned[0], warned


@pytest.mark.parametrize("damage", ['{"format": 1, "tunables": {', "[1, 2]", "\x00\xff"])
def test_a_corrupted_table_is_ignored_with_one_warning(table, damage: str) -> None:
    tunable, write, _ = table
    write(damage)
    timed: list[int] = []
    block, warned = _choose_warned(tunable, timed)
    assert block == 128 and timed == [64, 128, 256] * 2
    assert len(warned) == 1 and "ignoring" in warned[0], warned


def test_a_hook_that_raises_is_ignored_with_one_warning(table, monkeypatch: pytest.MonkeyPatch) -> None:
    tunable, _, _ = table

    def call(hook: str, **kwargs: object) -> object:
        raise RuntimeError("gems backend 'fake': gems_tuned_table() raised OSError: disk gone")

    monkeypatch.setattr(runtime.current().selection.backend, "call", call)
    timed: list[int] = []
    block, warned = _choose_warned(tunable, timed)
    assert block == 128 and timed == [64, 128, 256] * 2
    assert len(warned) == 1 and "disk gone" in warned[0], warned


def test_a_choice_that_is_not_a_current_config_is_not_taken(table) -> None:
    tunable, write, _ = table
    data = _table(tunable, 256)
    data["tunables"][tunable.name]["choices"][repr(KEY)] = "BLOCK=512, num_warps=4, num_stages=3"
    write(data)
    timed: list[int] = []
    assert tunable.choose(KEY, _bench(timed)).params["BLOCK"] == 128
    assert timed == [64, 128, 256]


def test_gems_shipped_tuning_0_ignores_tables(table, monkeypatch: pytest.MonkeyPatch) -> None:
    tunable, write, asked = table
    write(_table(tunable, 256))
    monkeypatch.setenv("GEMS_SHIPPED_TUNING", "0")
    timed: list[int] = []
    assert tunable.choose(KEY, _bench(timed)).params["BLOCK"] == 128
    assert timed == [64, 128, 256] and asked == []


def test_the_writer_makes_a_table_the_reader_takes(table, tmp_path: Path) -> None:
    tunable, write, _ = table
    timed: list[int] = []
    assert tunable.choose(KEY, _bench(timed)).params["BLOCK"] == 128  # tuned: in the disk cache
    out = tmp_path / "out.json"
    written = shipped.write_table(out, MODEL)
    entry = written["tunables"][tunable.name]
    assert entry == {"source": shipped.source_hash(tunable), "choices": {repr(KEY): tunable.defaults[1].describe()}}
    assert (written["device"], written["triton"], written["backend"]) == (MODEL, shipped.triton_release(), "fake")
    # a fresh machine: no memory, no disk cache, only the table
    tunable._chosen.clear()
    tunable._cache_path(MODEL).unlink()
    write(out.read_text())
    shipped._tables.clear()

    def bench(config: KernelConfig) -> float:
        raise AssertionError("the written table must answer")

    assert tunable.choose(KEY, bench).params["BLOCK"] == 128
    # writing again keeps what the table held (and still holds for the same kernel)
    assert shipped.write_table(out, MODEL)["tunables"][tunable.name] == entry


def test_source_hash_follows_the_kernel_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    """A core tunable's hash covers the sources of the kernels of the module that declares
    it: the same sources give the same hash, an edited kernel another; the module's host
    code (docs, argument checks) is not read."""
    import inspect

    from gems_core.ops import softmax as module

    softmax = tuning.tunables()["softmax"]
    first = shipped.source_hash(softmax)
    monkeypatch.setattr(shipped, "_hashes", {})
    assert shipped.source_hash(softmax) == first
    kernels = {name for name, value in vars(module).items()
               if hasattr(value, "arg_names") and callable(getattr(value, "fn", None))}
    assert "_softmax_kernel" in kernels or any("softmax" in k for k in kernels), kernels
    real = inspect.getsource
    read: list[str] = []

    def edited(obj: object) -> str:
        read.append(getattr(obj, "__name__", ""))
        return real(obj) + ("# edited\n" if getattr(obj, "__module__", None) == module.__name__ else "")

    monkeypatch.setattr(shipped, "_hashes", {})
    monkeypatch.setattr(inspect, "getsource", edited)
    assert shipped.source_hash(softmax) != first
    assert read and module.__name__ not in read  # the kernels were read, not the whole module


def test_a_package_ships_its_table_in_tuned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "gems_backend_acmetest"
    (package / "tuned").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "tuned" / "ACME_X1_80GB.json").write_text("{}")
    monkeypatch.syspath_prepend(str(tmp_path))
    __import__("gems_backend_acmetest")
    assert shipped.package_table("gems_backend_acmetest", "ACME X1 80GB") == package / "tuned" / "ACME_X1_80GB.json"
    assert shipped.package_table("gems_backend_acmetest", "ACME X2") is None
    monkeypatch.delitem(sys.modules, "gems_backend_acmetest")


def test_the_nvidia_backend_answers_the_hook() -> None:
    """The NVIDIA plugin implements the hook (pluggy checks its arguments against the spec)
    and finds tables under its package's ``tuned/`` folder."""
    pytest.importorskip("gems_backend_nvidia")
    from gems_backend_nvidia import plugin

    from gems_core.plugins import _manager_for

    manager = _manager_for(plugin, "nvidia")
    found = manager.hook.gems_tuned_table(device_model="NVIDIA H100 80GB HBM3")
    expected = Path(plugin.__file__).parent / "tuned" / "NVIDIA_H100_80GB_HBM3.json"
    assert found == (expected if expected.is_file() else None)
    assert manager.hook.gems_tuned_table(device_model="No Such GPU") is None


def test_table_of_a_mapping_is_read(table, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hook may return the table itself rather than a path."""
    tunable, _, _ = table
    data = _table(tunable, 256)
    monkeypatch.setattr(runtime.current().selection.backend, "call", lambda hook, **kw: data)

    def bench(config: KernelConfig) -> float:
        raise AssertionError("a shipped choice must not be benchmarked")

    assert tunable.choose(KEY, bench).params["BLOCK"] == 256


def test_the_nvidia_tables_are_current() -> None:
    """Every choice the NVIDIA package ships (H100 and H200) was tuned for the kernels and the
    configs of this source tree: a kernel edited since would leave its choices stale, and
    they would be ignored on the chip. Checked with the NVIDIA backend's policy, emulated."""
    pytest.importorskip("gems_backend_nvidia")
    import subprocess

    code = """
import json, sys
from pathlib import Path
import gems_backend_nvidia
from gems_core import registry, shipped
registry.load_ops()
folder = Path(gems_backend_nvidia.__file__).parent / "tuned"
report = {}
for path in sorted(folder.glob("*.json")):
    table = json.loads(path.read_text())
    report[path.name] = {name: entry["source"] == shipped.source_hash(registry.TUNABLES[name])
                         for name, entry in table["tunables"].items()}
print(json.dumps(report))
"""
    env = {k: v for k, v in os.environ.items() if k not in ("GEMS_DEVICE", "GEMS_EMULATE", "GEMS_COMPILE_TARGET")}
    env.update(GEMS_DEVICE="nvidia", GEMS_EMULATE="1")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"NVIDIA_H100_80GB_HBM3.json", "NVIDIA_H200.json"} <= set(report)
    stale = {table: [name for name, ok in entries.items() if not ok] for table, entries in report.items()}
    assert not any(stale.values()), f"stale shipped choices (regenerate with python -m gems_core tune): {stale}"
    assert all(len(entries) >= 5 for entries in report.values())
