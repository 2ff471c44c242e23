"""The on-disk caches: atomic writes, and several processes writing at once."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

from gems_core.disk_cache import atomic_write_text, merge_json, read_json


def _writer(path: str, worker: int, count: int) -> None:
    for i in range(count):
        merge_json(Path(path), {f"w{worker}-k{i}": i})


def test_concurrent_writers_lose_nothing_and_leave_valid_json(tmp_path: Path) -> None:
    path = tmp_path / "tuning" / "mm.json"
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_writer, args=(str(path), w, 25)) for w in range(4)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(timeout=120)
        assert p.exitcode == 0
    data = json.loads(path.read_text())
    assert len(data) == 100
    assert data["w3-k24"] == 24


def test_atomic_write_leaves_no_temporary_files(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b.txt"
    atomic_write_text(path, "one")
    atomic_write_text(path, "two")
    assert path.read_text() == "two"
    assert sorted(p.name for p in path.parent.iterdir()) == ["b.txt"]


def test_unreadable_file_reads_as_empty(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    assert read_json(path) == {}
    merge_json(path, {"k": 1})
    assert read_json(path) == {"k": 1}
