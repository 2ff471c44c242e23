"""Every ``GEMS_*`` environment variable gems reads: its name, default, parser and meaning.

:func:`get` is the one reader. It looks the variable up on every call, so a changed
environment takes effect at the next call, and keeps each raw value's parse, so a hot path
pays one environment lookup. A value the parser does not accept raises a ``ValueError``
that names the variable and what it takes. ``python -m gems_core --help`` lists the table.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True)
class Setting:
    name: str
    #: the raw value an unset (or empty) variable stands for
    default: str
    #: raw value (stripped) -> parsed value; raises ValueError with what the variable takes
    parse: Callable[[str], Any]
    doc: str


def _text(value: str) -> str:
    return value


def _flag(value: str) -> bool:
    lowered = value.lower()
    if lowered in _TRUE or lowered in _FALSE:
        return lowered in _TRUE
    raise ValueError(f"takes one of {', '.join(_TRUE + _FALSE)}")


def _choice(*choices: str, **aliases: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        lowered = value.lower()
        if lowered in choices:
            return lowered
        if lowered in aliases:
            return aliases[lowered]
        raise ValueError(f"takes one of {', '.join(dict.fromkeys((*choices, *aliases)))}")

    return parse


def _words(*allowed: str) -> Callable[[str], frozenset[str]]:
    def parse(value: str) -> frozenset[str]:
        words = frozenset(part.strip().lower() for part in value.split(",") if part.strip())
        unknown = sorted(words - set(allowed))
        if unknown:
            raise ValueError(f"takes a comma-separated list of {', '.join(allowed)} (not {', '.join(unknown)})")
        return words

    return parse


def _names(value: str) -> frozenset[str]:
    return frozenset(part.strip() for part in value.split(",") if part.strip())


def _count(value: str) -> int | None:
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValueError("takes a positive whole number")
    return int(value)


_OFF = dict.fromkeys(_FALSE, "off")
SETTINGS: dict[str, Setting] = {s.name: s for s in (
    Setting("GEMS_DEVICE", "", _text,
            "backend to select (cpu, nvidia, amd, ...); unset: the one that detects its chip"),
    Setting("GEMS_EMULATE", "0", _flag,
            "1: apply GEMS_DEVICE's whole policy on the device that is present"),
    Setting("GEMS_COMPILE_TARGET", "", _text,
            "backend:arch[:warp size]: compile kernels for a chip that is not here, run none"),
    Setting("GEMS_CACHE_DIR", "", _text,
            "where generated kernels, tuning choices and the native layer are kept (default ~/.cache/gems)"),
    Setting("GEMS_COMPILE", "auto", _choice("auto", "sync", "background"),
            "auto (default): background on accelerators, sync on the CPU interpreter; background: "
            "ATen serves a call whose kernel is not compiled yet while worker processes compile it, "
            "and untuned shapes take their first config (tune with python -m gems_core warmup); "
            "sync: compile (and tune) a kernel before its first call returns"),
    Setting("GEMS_AUTOTUNE", "on", _choice("on", "off", "cached", **dict.fromkeys(_TRUE, "on"), **_OFF),
            "0: take each kernel's first config instead of benchmarking the candidates; cached: "
            "take the backend's shipped or a remembered choice, else the first config (benchmark "
            "nothing)"),
    Setting("GEMS_SHIPPED_TUNING", "1", _flag, "0: ignore the backend's shipped tuning tables"),
    Setting("GEMS_NATIVE", "1", _words(*_TRUE, *_FALSE, "check", "force"),
            "0: no native dispatch layer; check: check its every replay against Python"),
    Setting("GEMS_LAUNCHER", "auto", _choice("auto", "torch", "direct", "triton"),
            "torch, direct or triton: how compiled kernels are launched (default: first that applies)"),
    Setting("GEMS_CHECK_INDICES", "device", _choice("device", "host"),
            "host: check indices on the host, synchronously, also on accelerators"),
    Setting("GEMS_INTERPRETER_OVERFLOW_CHECKS", "0", _flag,
            "1: Triton's interpreter checks every 32-bit integer operation for overflow (off, as "
            "compiled kernels are without debug: the check took two thirds of a small kernel's time)"),
    Setting("GEMS_MM_TMA", "auto", _choice("auto", "force", "off", **dict.fromkeys(_TRUE, "auto"), **_OFF),
            "0: no TMA matrix-product kernel; force: take it for every product it can serve"),
    Setting("GEMS_LIFT_GATES", "", _names,
            "ops (ATen overloads or packets, comma-separated) to serve on gems although the backend "
            "leaves them to ATen: its gates lifted, to measure or certify what it gates"),
    Setting("GEMS_CONV_TMA", "1", _flag,
            "0: no convolution kernel over tensor descriptors (unit-stride 2-d maps on Hopper)"),
    Setting("GEMS_KERNEL_VARIANTS", "1", _flag,
            "0: no backend kernel variants (the core's kernels everywhere)"),
    Setting("GEMS_DECODE_MERGE", "auto", _choice("auto", "fused", "kernel"),
            "fused or kernel: how decode attention merges its splits (default auto)"),
    Setting("GEMS_LOG", "off", _choice("off", "debug", "info", "warning", "error"),
            "debug, info or warning: log to stderr through the 'gems' logger at that level"),
    Setting("GEMS_CONFORMANCE_THREADS", "", _count,
            "CPU threads per conformance worker (set by gems-conformance)"),
)}

#: (name, raw value or None) -> parsed value
_parsed: dict[tuple[str, str | None], Any] = {}


def raw(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The variable's value as set (None where unset)."""
    if name not in SETTINGS:
        raise KeyError(f"{name} is not a gems setting")
    return (os.environ if environ is None else environ).get(name)


def get(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The parsed value of ``name`` in ``environ`` (default: the process environment)."""
    value = (os.environ if environ is None else environ).get(name)
    found = _parsed.get((name, value))
    if found is None:
        setting = SETTINGS[name]
        text = (value or "").strip() or setting.default
        try:
            found = setting.parse(text)
        except ValueError as exc:
            raise ValueError(f"{name}={value!r} is not understood: {name} {exc}") from None
        if len(_parsed) < 256:  # a process sets few values; a loop setting many keeps none
            _parsed[name, value] = found
    return found
