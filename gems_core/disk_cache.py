"""Where gems keeps files between runs, and how it writes them safely.

``GEMS_CACHE_DIR`` overrides the default (``$XDG_CACHE_HOME/gems`` or ``~/.cache/gems``).
Every write goes to a temporary file in the same folder and is renamed into place, so a
reader in another process sees the old file or the new one, never half of one.

A cache never stops gems: a folder that cannot be written is replaced, for the process, by a
temporary one (removed at exit), and a cached file whose contents are not what gems would
write (bad bytes, a truncated or foreign file) is rewritten; each warns once.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any

from . import settings

#: the folder in use per configured one (the configured folder, or its stand-in)
_usable: dict[Path, Path] = {}
_usable_lock = threading.Lock()
_warned: set[str] = set()


def configured_cache_dir() -> Path:
    """The folder ``GEMS_CACHE_DIR`` (or the default) names, usable or not."""
    root = settings.get("GEMS_CACHE_DIR")
    if root:
        return Path(root).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gems"


def cache_dir() -> Path:
    """The folder gems caches in: the configured one once it has taken a file, else (with one
    warning) a temporary folder of this process."""
    configured = configured_cache_dir()
    found = _usable.get(configured)
    if found is None:
        with _usable_lock:
            found = _usable.get(configured)
            if found is None:
                found = _usable[configured] = _probe(configured)
    return found


def _probe(folder: Path) -> Path:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".probe.")
        os.close(fd)
        os.unlink(probe)
        return folder
    except OSError as exc:
        return _stand_in(folder, exc)


def _stand_in(folder: Path, exc: OSError) -> Path:
    stand_in = Path(tempfile.mkdtemp(prefix="gems-cache-"))
    atexit.register(shutil.rmtree, stand_in, ignore_errors=True)
    warn_once(
        f"gems: cannot write the cache folder {folder} ({exc}); caching in {stand_in} for "
        "this process (set GEMS_CACHE_DIR to a writable folder to keep kernels between runs)"
    )
    return stand_in


def warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def cached_file(relative: str | Path, text: str) -> Path:
    """The cache's file at ``relative`` holding exactly ``text``: written when absent,
    rewritten (one warning) when its contents differ, in a stand-in folder when the cache
    folder stops taking writes."""
    path = cache_dir() / relative
    data = text.encode("utf-8")
    try:
        if path.read_bytes() == data:
            return path
        damaged = True
    except FileNotFoundError:
        damaged = False
    except OSError:  # unreadable (permissions, a folder in its place): written anew
        damaged = True
    if damaged:
        warn_once(f"gems: discarding the damaged cache file {path}; it is rebuilt")
    try:
        atomic_write_text(path, text)
    except OSError as exc:
        configured = configured_cache_dir()
        with _usable_lock:
            _usable[configured] = _stand_in(configured, exc)
        path = cache_dir() / relative
        atomic_write_text(path, text)
    return path


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
    """The JSON object at ``path``; an absent file reads as empty, and so does a damaged one
    (with one warning; the next :func:`merge_json` replaces it)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (ValueError, OSError) as exc:
        data = exc
    if isinstance(data, dict):
        return data
    warn_once(f"gems: ignoring the damaged cache file {path} ({str(data)[:80]}); it is rebuilt")
    return {}


def merge_json(path: Path, updates: dict[str, Any]) -> None:
    """Add ``updates`` to the JSON object at ``path``. Writers in several processes take
    turns (an advisory lock beside the file), so none loses another's keys. A file that
    cannot be written stays as it was (one warning)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_name(path.name + ".lock"), "a", encoding="utf-8") as lock:
            _lock(lock)
            try:
                data = read_json(path)
                data.update(updates)
                atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True))
            finally:
                _unlock(lock)
    except OSError as exc:  # a cache that stopped taking writes costs the memory, not the call
        warn_once(f"gems: cannot write the cache file {path} ({exc}); it is not updated")


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
