"""Shipped tuning: a backend's tuned choices for its chips, as data in its package.

A table is a JSON file (or mapping) per device model, which the backend hands over through
``gems_tuned_table(device_model)``::

    {"format": 1, "backend": "nvidia", "device": "NVIDIA H100 80GB HBM3", "triton": "3.6",
     "tunables": {"mm": {"source": "<hash>", "choices": {"<repr(key)>": "<config.describe()>"}}}}

:meth:`gems_core.tuning.Tunable.choose` asks it after its in-memory choices and before the
on-disk cache, so a fresh machine benchmarks nothing the table covers. A choice holds for the
kernel it was measured on: each tunable's entry carries a hash of the module that defines the
kernel and of the tunable's parameters and candidate configs, and the table names the Triton
major.minor version; an entry whose hash or Triton differs is ignored (one warning), as is a
damaged table, and a choice that is not one of the kernel's current configs is never taken.
``GEMS_SHIPPED_TUNING=0`` ignores every table.

:func:`write_table` makes a table from the tuning cache of the device it runs on
(``python -m gems_core tune``).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from . import compat, launch_cache, runtime, settings
from .contract import KernelConfig
from .disk_cache import atomic_write_text, read_json, warn_once
from .registry import TUNABLES

FORMAT = 1
#: (backend, device model) -> {tunable: {repr(key): describe}} of the tables in use
_tables: dict[tuple[str, str], dict[str, dict[str, str]]] = {}
_hashes: dict[str, str] = {}


def triton_release() -> str:
    """The Triton major.minor a table is valid for."""
    return f"{compat.TRITON_VERSION.major}.{compat.TRITON_VERSION.minor}"


def file_name(device_model: str) -> str:
    """The file a package ships the table of ``device_model`` in (``tuned/<this>``)."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in device_model) + ".json"


def package_table(package: str, device_model: str) -> Path | None:
    """``<package>/tuned/<device model>.json`` when the package ships it: what a backend's
    ``gems_tuned_table`` hook returns."""
    module = sys.modules[package]
    path = Path(module.__file__ or "").parent / "tuned" / file_name(device_model)
    return path if path.is_file() else None


def _kernel_sources(module: Any) -> str:
    """The sources of the Triton kernels (jitted functions) a module defines, by name: what
    a tuning choice depends on, where an edit of the module's host code (its docs, its
    argument checks) leaves the choices valid. The whole module's source where it defines
    none."""
    found = []
    for name, value in sorted(vars(module).items()):
        fn = getattr(value, "fn", None)
        if callable(fn) and hasattr(value, "arg_names"):
            try:
                found.append(f"{name}:{inspect.getsource(fn)}")
            except (OSError, TypeError):
                pass
    if found:
        return "\n".join(found)
    try:
        return inspect.getsource(module)
    except (OSError, TypeError):  # no source to read: the hash covers less
        return ""


def source_hash(tunable: Any) -> str:
    """What a shipped choice of ``tunable`` was measured for: the sources of the kernels of
    the module that declares it (:func:`_kernel_sources`), its parameters and the configs it
    chooses from (the core's defaults or the backend's)."""
    what = repr((tunable.name, tunable.params, [c.describe() for c in tunable.configs()]))
    found = _hashes.get(what)
    if found is None:
        digest = hashlib.sha256(what.encode())
        for module in list(sys.modules.values()):
            if getattr(module, "__name__", "").startswith(("gems_core", "gems_backend")) and any(
                value is tunable for value in list(vars(module).values())
            ):
                digest.update(_kernel_sources(module).encode())
                break
        found = _hashes[what] = digest.hexdigest()[:16]
    return found


def device_model() -> str:
    """The model of the device kernels run on now (the current one, which gems makes the
    operands' device): what tuning choices are kept for. The selected device's name where
    nothing runs on a device (the interpreter, compile-only execution)."""
    rt = runtime.current()
    if rt.interpreter or rt.compile_only:
        return rt.selection.device_name
    return compat.device_name(launch_cache._current_device())


def lookup(tunable: Any, model: str, key: object, configs: Sequence[KernelConfig]) -> KernelConfig | None:
    """The shipped choice of ``tunable`` for ``key`` on ``model``, if one of ``configs``."""
    if not settings.get("GEMS_SHIPPED_TUNING"):
        return None
    stored = _table(model).get(tunable.name, {}).get(repr(key))
    return next((c for c in configs if c.describe() == stored), None) if stored else None


def _table(model: str) -> dict[str, dict[str, str]]:
    backend = runtime.current().selection.backend
    found = _tables.get((backend.name, model))
    if found is None:
        found = _tables[backend.name, model] = _load(backend, model)
    return found


def _load(backend: Any, model: str) -> dict[str, dict[str, str]]:
    try:
        source = backend.call("gems_tuned_table", device_model=model)
    except Exception as exc:  # noqa: BLE001 - a table never stops a kernel: it is tuned here
        return _ignored(f"the tuning table of {model}: {exc}")
    if source is None:
        return {}
    where = f"the tuning table {source}" if isinstance(source, (str, os.PathLike)) else (
        f"the tuning table of backend {backend.name!r} for {model}"
    )
    if isinstance(source, (str, os.PathLike)):
        try:
            source = json.loads(Path(source).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            return _ignored(f"{where} cannot be read ({str(exc)[:80]})")
    if not isinstance(source, Mapping) or not isinstance(source.get("tunables"), Mapping):
        return _ignored(f"{where} is not a gems tuning table")
    if source.get("format") != FORMAT:
        return _ignored(f"{where} has format {source.get('format')!r}, this gems-core reads {FORMAT}")
    if source.get("triton") != triton_release():
        return _ignored(f"{where} was tuned with Triton {source.get('triton')}, Triton {triton_release()} runs")
    kept: dict[str, dict[str, str]] = {}
    for name, entry in source["tunables"].items():
        tunable = TUNABLES.get(name)  # a kernel is being tuned: the ops are loaded
        choices = entry.get("choices") if isinstance(entry, Mapping) else None
        if tunable is None or not isinstance(choices, Mapping):
            warn_once(f"gems: {where}: ignoring {name!r}, not a tunable of this gems-core with choices")
        elif entry.get("source") != source_hash(tunable):
            warn_once(f"gems: {where}: ignoring the stale choices of {name!r} (its kernel changed since)")
        else:
            kept[name] = {str(k): v for k, v in choices.items() if isinstance(v, str)}
    return kept


def _ignored(message: str) -> dict[str, dict[str, str]]:
    warn_once(f"gems: ignoring {message}; kernels are tuned on this machine instead")
    return {}


def write_table(out: Path, model: str | None = None) -> dict[str, Any]:
    """Write the tuning cache's choices for ``model`` (default: the current device's) on the
    selected backend to the table ``out``, keeping the valid choices already there; returns
    the table. Covers the tunables of the ops loaded (after a workload ran)."""
    model = model or device_model()
    previous = read_json(out) if out.exists() else {}
    same = previous.get("format") == FORMAT and previous.get("triton") == triton_release()
    old = previous.get("tunables", {}) if same and previous.get("device") == model else {}
    table: dict[str, Any] = {
        "format": FORMAT,
        "backend": runtime.current().selection.backend.name,
        "device": model,
        "triton": triton_release(),
        "tunables": {},
    }
    for name, tunable in sorted(TUNABLES.items()):  # those of the ops that ran
        digest = source_hash(tunable)
        choices = dict(old[name]["choices"]) if old.get(name, {}).get("source") == digest else {}
        choices.update(read_json(tunable._cache_path(model)))
        if choices:
            table["tunables"][name] = {"source": digest, "choices": dict(sorted(choices.items()))}
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, json.dumps(table, indent=1) + "\n")
    _tables.clear()
    return table
