"""Faults that must cost nothing but a warning: damaged or unwritable caches, and memory
kept by repeated use_gems() blocks and calls."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
import torch

import gems_core
from gems_core import disk_cache
from gems_core.launch_cache import LaunchCache

# A process that negates a tensor on gems' generated pointwise kernel and shows that it did.
NEGATE = """
import sys, torch, gems_core
x = torch.tensor([1.5, -2.0, 0.25], dtype=torch.float64)
with gems_core.use_gems(include="neg"):
    y = -x
assert any(name.startswith("gems_core._generated.pw_") for name in sys.modules), "not served"
print(y.tolist())
"""


def negate(cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GEMS_CACHE_DIR": str(cache), "PYTHONWARNINGS": "default"}
    done = subprocess.run([sys.executable, "-c", NEGATE], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[-1.5, 2.0, -0.25]"
    return done


@pytest.fixture(scope="module")
def healthy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("healthy")
    negate(cache)
    return cache


DAMAGE = {
    "bad bytes": lambda text: b"\xff\xfe\x80" + text,
    "bad syntax": lambda text: text.replace(b"def pointwise_kernel(", b"def pointwise_kernel(("),
    "truncated": lambda text: text[: len(text) // 2],
    "empty": lambda text: b"",
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_pointwise_source_is_rebuilt_with_one_warning(healthy_cache: Path, tmp_path: Path, damage: str) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(healthy_cache, cache)
    files = sorted(cache.rglob("pw_*.py"))
    assert files
    original = {f: f.read_bytes() for f in files}
    for f, text in original.items():
        f.write_bytes(DAMAGE[damage](text))
    done = negate(cache)
    assert done.stderr.count("discarding the damaged cache file") == len(files), done.stderr
    # the file is whole again, so the next process finds it as it was written
    assert {f: f.read_bytes() for f in files} == original


def test_an_unwritable_cache_folder_runs_pointwise_ops_from_a_temporary_one(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    done = negate(blocker / "cache")
    assert done.stderr.count("cannot write the cache folder") == 1, done.stderr


@pytest.fixture
def fresh_cache_dirs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(disk_cache, "_usable", {})
    monkeypatch.setattr(disk_cache, "_warned", set())


def stand_in_of(configured: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GEMS_CACHE_DIR", str(configured))
    with pytest.warns(RuntimeWarning, match="cannot write the cache folder") as caught:
        found = disk_cache.cache_dir()
        assert disk_cache.cache_dir() == found
    assert len(caught) == 1
    assert found != configured and found.is_dir()
    assert Path(tempfile.gettempdir()) in found.parents
    return found


def test_a_cache_folder_below_a_file_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_cache_dirs: None) -> None:
    (tmp_path / "file").write_text("x")
    found = stand_in_of(tmp_path / "file" / "gems", monkeypatch)
    assert disk_cache.cached_file("pointwise/a.py", "x = 1\n").read_text() == "x = 1\n"
    assert disk_cache.cached_file("pointwise/a.py", "x = 1\n").parent.parent == found


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes read-only folders")
def test_a_read_only_cache_folder_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_cache_dirs: None) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        stand_in_of(folder, monkeypatch)
    finally:
        folder.chmod(0o700)


def test_a_cache_folder_refusing_files_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_cache_dirs: None) -> None:
    """A read-only file system (or permissions, where the tests run as root and ignore them)."""
    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(disk_cache.tempfile, "mkstemp", refuse)
    stand_in_of(tmp_path / "ro", monkeypatch)


def test_a_cache_folder_that_stops_taking_writes_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_cache_dirs: None) -> None:
    monkeypatch.setenv("GEMS_CACHE_DIR", str(tmp_path / "full"))
    assert disk_cache.cache_dir() == tmp_path / "full"
    write = disk_cache.atomic_write_text

    def full(path: Path, text: str) -> None:
        if tmp_path in path.parents:
            raise OSError(28, "No space left on device")
        write(path, text)

    monkeypatch.setattr(disk_cache, "atomic_write_text", full)
    with pytest.warns(RuntimeWarning, match="cannot write the cache folder"):
        path = disk_cache.cached_file("pointwise/b.py", "y = 2\n")
    assert path.read_text() == "y = 2\n" and tmp_path not in path.parents
    with pytest.warns(RuntimeWarning, match="cannot write the cache file"):
        disk_cache.merge_json(tmp_path / "full" / "t.json", {"k": 1})  # a tuning choice is lost
    assert disk_cache.read_json(tmp_path / "full" / "t.json") == {}


def test_unwritable_tuning_file_warns_and_keeps_going(tmp_path: Path, fresh_cache_dirs: None) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.warns(RuntimeWarning, match="cannot write the cache file"):
        disk_cache.merge_json(tmp_path / "file" / "t.json", {"k": 1})


def test_damaged_json_warns_once_and_is_replaced(tmp_path: Path, fresh_cache_dirs: None) -> None:
    path = tmp_path / "mm.json"
    path.write_bytes(b"\xff{\"k\"")
    with pytest.warns(RuntimeWarning, match="damaged cache file") as caught:
        assert disk_cache.read_json(path) == {}
        assert disk_cache.read_json(path) == {}
    assert len(caught) == 1
    disk_cache.merge_json(path, {"k": 1})
    assert disk_cache.read_json(path) == {"k": 1}


def test_concurrent_writers_of_a_cached_file_never_show_part_of_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_cache_dirs: None) -> None:
    monkeypatch.setenv("GEMS_CACHE_DIR", str(tmp_path))
    text = "".join(f"line_{i} = {i}\n" for i in range(20000))
    path = tmp_path / "pointwise" / "c.py"
    seen: set[int] = set()
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                seen.add(len(path.read_bytes()))
            except FileNotFoundError:
                pass

    def write() -> None:
        for _ in range(20):
            disk_cache.atomic_write_text(path, text)
            disk_cache.cached_file("pointwise/c.py", text)

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write) for _ in range(3)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    stop.set()
    reader.join()
    assert seen == {len(text)}
    assert sorted(p.name for p in path.parent.iterdir()) == ["c.py"]


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads the resident size from /proc")
def test_use_gems_blocks_keep_no_memory() -> None:
    ops = ["add", "sub", "mul", "div", "neg"]  # 22 overloads: the old leak was ~40 bytes each
    gems_core.disable()
    for _ in range(200):
        with gems_core.use_gems(include=ops):
            pass
    before = rss_bytes()
    for _ in range(10_000):
        with gems_core.use_gems(include=ops):
            pass
    grown = rss_bytes() - before
    assert grown < 2 * 2**20, f"10^4 use_gems() blocks kept {grown / 2**20:.1f} MiB"


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads the resident size from /proc")
def test_calls_keep_no_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """10^5 calls through gems' host path (an empty tensor: everything a call does but the
    kernel, which the CPU interpreter runs at about a millisecond a call), and calls that
    launch, fewer."""
    launches = []
    launch = LaunchCache.__call__

    def counted(self: LaunchCache, *args: object, **kwargs: object) -> object:
        launches.append(self.name)
        return launch(self, *args, **kwargs)

    monkeypatch.setattr(LaunchCache, "__call__", counted)
    empty, small = torch.empty(0, dtype=torch.float64), torch.randn(3, dtype=torch.float64)
    with gems_core.use_gems(include="neg"):
        for x, count, bound in ((empty, 100_000, 4 * 2**20), (small, 300, 2**20)):
            for _ in range(50):
                torch.neg(x)
            before = rss_bytes()
            for _ in range(count):
                result = torch.neg(x)
            grown = rss_bytes() - before
            assert grown < bound, f"{count} calls on {tuple(x.shape)} kept {grown / 2**20:.1f} MiB"
    assert len(launches) == 350  # the small calls ran on gems' kernel, not ATen's
    torch.testing.assert_close(result, -small)
