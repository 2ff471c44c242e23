"""The vendor statement every report starts with: what was certified, on what, when, how."""

from __future__ import annotations

import datetime
import platform
import shlex
import sys
from typing import Any

from . import __version__

#: the order reports print the statement in
FIELDS = (
    ("suite_version", "gems-conformance"),
    ("gems_core_version", "gems-core"),
    ("backend", "backend"),
    ("backend_version", "backend version"),
    ("backend_distribution", "backend distribution"),
    ("device_name", "device"),
    ("emulated", "emulated"),
    ("execution", "kernels run on"),
    ("lifted_gates", "backend gates lifted (GEMS_LIFT_GATES)"),
    ("triton_version", "Triton"),
    ("torch_version", "torch"),
    ("python_version", "Python"),
    ("profile", "sample profile"),
    ("date", "date"),
    ("command", "command line"),
)


def describe_backend(requested: str, load_error: str | None) -> dict[str, Any]:
    """What the worker process selected (call after GEMS_DEVICE is set)."""
    import torch
    import triton

    import gems_core

    facts: dict[str, Any] = {
        "gems_core_version": gems_core.__version__,
        "triton_version": triton.__version__,
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "backend": requested,
    }
    if load_error:
        facts.update(backend_version="?", device_name="?", emulated=False, execution="?",
                     interpreter=False, load_error=load_error)
        return facts
    from gems_core import runtime

    rt = runtime.current()
    sel = rt.selection
    facts.update(
        backend=sel.backend.name,
        backend_version=sel.backend.version or "?",
        backend_distribution=sel.backend.distribution or sel.backend.source,
        device_name=sel.device_name,
        emulated=sel.emulated,
        interpreter=rt.interpreter,
        execution="Triton interpreter (CPU)" if rt.interpreter else
        f"{sel.execution.device_type} via Triton {sel.execution.triton_backend}",
        arch=sel.arch,
    )
    from gems_core import settings

    lifted = settings.get("GEMS_LIFT_GATES")
    if lifted:  # the report certifies what the backend would leave to ATen as gems' own
        facts["lifted_gates"] = ", ".join(sorted(lifted))
    return facts


def complete(facts: dict[str, Any], profile: str, argv: list[str] | None = None) -> dict[str, Any]:
    """Add what the parent process knows: suite version, date, command line."""
    statement = dict(facts)
    statement.update(
        suite_version=__version__,
        profile=profile,
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        command=shlex.join(["gems-conformance", *(sys.argv[1:] if argv is None else argv)]),
    )
    return statement


def lines(statement: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) pairs in report order."""
    shown = []
    for key, label in FIELDS:
        if key in statement:
            value = statement[key]
            shown.append((label, "yes" if value is True else "no" if value is False else str(value)))
    if statement.get("load_error"):
        shown.append(("load error", str(statement["load_error"])))
    return shown
