"""Where gems keeps files between runs, and how it writes them safely.

``GEMS_CACHE_DIR`` overrides the default (``$XDG_CACHE_HOME/gems`` or ``~/.cache/gems``).
Every write goes to a temporary file in the same folder and is renamed into place, so a
reader in another process sees the old file or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def cache_dir() -> Path:
    root = os.environ.get("GEMS_CACHE_DIR")
    if root:
        return Path(root).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gems"


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def read_json(path: Path) -> dict[str, Any]:
    """The JSON object at ``path``; an absent or unreadable file reads as empty."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError, OSError):
        return {}
    return data if isinstance(data, dict) else {}


def merge_json(path: Path, updates: dict[str, Any]) -> None:
    """Add ``updates`` to the JSON object at ``path``. Writers in several processes take
    turns (an advisory lock beside the file), so none loses another's keys."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a", encoding="utf-8") as lock:
        _lock(lock)
        try:
            data = read_json(path)
            data.update(updates)
            atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True))
        finally:
            _unlock(lock)


def _lock(handle: Any) -> None:
    try:
        import fcntl
    except ImportError:  # no POSIX locks: atomic replacement still keeps the file whole
        return
    fcntl.flock(handle.fileno(), fcntl.LOCK_EX)


def _unlock(handle: Any) -> None:
    try:
        import fcntl
    except ImportError:
        return
    fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
