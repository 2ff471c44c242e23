"""The compile tier: every kernel x tuned config compiled ahead of time for the chip's targets.

The checking itself is :func:`gems_conformance.compile_check.check_backend`; this module runs
it and turns its answers into report records.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from gems_core import runtime

from . import records as R
from .records import Record

_STATUS_WORDS = {
    "pass": R.PASS, "passed": R.PASS, "ok": R.PASS, "compiled": R.PASS,
    "fail": R.FAIL, "failed": R.FAIL, "error": R.FAIL, "over_limits": R.FAIL,
    "host_error": R.NOT_SUPPORTED, "not_exercised": R.NOT_SUPPORTED, "skip": R.NOT_SUPPORTED, "skipped": R.NOT_SUPPORTED, "not supported": R.NOT_SUPPORTED,
    "unsupported": R.NOT_SUPPORTED, "xfail": R.XFAIL, "xpass": R.XPASS,
}


def _as_dict(item: Any) -> dict[str, Any]:
    if isinstance(item, dict):
        return dict(item)
    if dataclasses.is_dataclass(item) and not isinstance(item, type):
        return {f.name: getattr(item, f.name) for f in dataclasses.fields(item)}
    return {k: v for k, v in vars(item).items() if not k.startswith("_")}


def _first(data: dict[str, Any], *names: str, default: Any = "") -> Any:
    for name in names:
        if data.get(name) not in (None, ""):
            return data[name]
    return default


def _status(data: dict[str, Any]) -> str:
    status = data.get("status")
    if isinstance(status, str):
        word = status.strip()
        return word if word in R.STATUSES else _STATUS_WORDS.get(word.lower(), R.ERROR)
    ok = _first(data, "ok", "passed", "compiled", default=None)
    if ok is not None:
        return R.PASS if ok else R.FAIL
    return R.FAIL if _first(data, "error", "message") else R.PASS


def to_record(item: Any) -> Record:
    """One answer of check_backend (a dataclass, object or dict) as a report record. A
    sample that stopped on the host is NOT SUPPORTED, not an ERROR: compile-only execution
    computes no values, so host code that reads a result (an index tensor an ATen op takes
    next, say) sees whatever the memory held, and the kernels it did not reach are reported
    as not exercised; the accuracy tier runs that host code for real."""
    data = _as_dict(item)
    target = _first(data, "target", "arch", default="-")
    if not isinstance(target, str):
        target = "/".join(str(getattr(target, f, "")) for f in ("backend", "arch")) or str(target)
    config = _first(data, "config", "config_name", default="default")
    if hasattr(config, "describe"):
        config = config.describe()
    extras = {k: v for k, v in data.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    needed_by = " ".join(str(data[k]) for k in ("op", "dtype", "sample") if data.get(k))
    detail = "; ".join(part for part in (
        f"{data['function']}({data.get('signature', '')})" if data.get("function") else "",
        f"first needed by {needed_by}" if needed_by else "",
    ) if part)
    return Record(
        tier="compile",
        op=str(_first(data, "kernel", "name", default="?")),
        dtype=str(target),
        # one config compiles once per specialization: the signature tells them apart
        sample=f"{config} | {data['signature']}" if data.get("signature") else str(config),
        status=_status(data),
        message=(("compile-only execution stopped on the host (it computes no values): "
                  if str(data.get("status", "")).lower() == "host_error" else "")
                 + str(_first(data, "error", "message", "reason"))),
        detail=detail,
        seconds=float(data.get("seconds") or 0.0),
        metrics=extras,
    )


def check_compile(ops: Sequence[str] = (), profile: str = "quick") -> tuple[list[Record], str]:
    """(records, "") or ([], why the tier was skipped). ``ops`` (op case names) and
    ``profile`` are passed on to check_backend; the quick profile compiles each kernel x
    config once (``dedupe="kernel"``), for the chip's own target."""
    descriptor = runtime.current().selection.descriptor
    if descriptor.interpreter and not descriptor.compile_targets:
        return [], "the backend runs kernels in the Triton interpreter: nothing to compile ahead of time"
    from .compile_check import check_backend

    name = runtime.current().selection.backend.name
    # quick: each kernel x config once per target, for the first argument types that reach
    # it; the full profile compiles every signature the samples specialize on
    dedupe = "kernel" if profile == "quick" else "signature"
    # and quick checks the chip's own target where the backend lists it, full every target
    from gems_core.selection import compile_targets

    targets = list(compile_targets(descriptor))
    if profile == "quick" and descriptor.target in targets:
        targets = [descriptor.target]
    records = check_backend(name, targets, ops=list(ops) if ops else None, profile=profile, dedupe=dedupe)
    return [to_record(item) for item in records], ""
