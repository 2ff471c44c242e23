"""What the suite reports: one record per checked thing, with a status from a fixed set.

Accuracy records are keyed by op case x dtype x sample class; semantics records by the call
checked (``op``) and its sample class; contract and compile records name the checked item in
``op`` and the check in ``sample``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

PASS = "PASS"
FALLBACK = "FALLBACK"
NOT_SUPPORTED = "NOT SUPPORTED"
XFAIL = "XFAIL"
XPASS = "XPASS"
FAIL = "FAIL"
ERROR = "ERROR"

#: worst first: a group of outcomes takes the first of these that occurs in it
SEVERITY = (ERROR, FAIL, XFAIL, XPASS, FALLBACK, NOT_SUPPORTED, PASS)
STATUSES = tuple(reversed(SEVERITY))
#: statuses that make the run fail
FAILING = frozenset({FAIL, ERROR})
#: statuses a record may move between without being a regression
ACCEPTABLE = frozenset({PASS, XPASS, FALLBACK, NOT_SUPPORTED})

TIERS = ("contract", "compile", "accuracy", "semantics", "performance")


@dataclass
class Record:
    tier: str
    op: str
    dtype: str
    sample: str
    status: str
    #: ATen overloads the op case exercises (accuracy and performance tiers)
    aten: tuple[str, ...] = ()
    message: str = ""
    #: the sample that decided the status, described (shapes, strides, dtypes)
    detail: str = ""
    reason: str = ""
    max_abs: float | None = None
    max_rel: float | None = None
    samples_checked: int = 0
    seconds: float = 0.0
    metrics: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.tier}/{self.op}/{self.dtype}/{self.sample}"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["aten"] = list(self.aten)
        for key in ("max_abs", "max_rel"):
            value = data[key]
            if value is not None and not math.isfinite(value):
                data[key] = str(value)  # JSON has no inf or nan
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Record:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["aten"] = tuple(known.get("aten", ()))
        for key in ("max_abs", "max_rel"):
            if isinstance(known.get(key), str):
                known[key] = float(known[key])
        return cls(**known)


def worst(statuses: Iterable[str]) -> str:
    present = set(statuses)
    for status in SEVERITY:
        if status in present:
            return status
    return PASS


def count(records: Iterable[Record]) -> dict[str, int]:
    counts = {status: 0 for status in STATUSES}
    for record in records:
        counts[record.status] = counts.get(record.status, 0) + 1
    return counts


@dataclass
class TierResult:
    """A tier as a whole: run, or skipped with the reason."""

    name: str
    ran: bool
    reason: str = ""
    seconds: float = 0.0
