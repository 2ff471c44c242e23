"""Per-sample outcomes of the accuracy tier, and how they fold into report records.

Kept free of torch and gems_core: the CLI process aggregates what its workers send.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from . import records as R
from .records import Record


@dataclass
class SampleOutcome:
    index: int
    label: str
    status: str
    description: str = ""
    message: str = ""
    reason: str = ""
    max_abs: float | None = None
    max_rel: float | None = None
    served_by: str = ""  # "gems" or "aten"
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def aggregate(case: str, aten: tuple[str, ...], dtype: str, outcomes: Iterable[SampleOutcome]) -> list[Record]:
    """One record per sample class: the worst status of its samples, with the sample that
    decided it."""
    groups: dict[str, list[SampleOutcome]] = {}
    for outcome in outcomes:
        groups.setdefault(outcome.label, []).append(outcome)
    found = []
    for label, group in groups.items():
        status = R.worst(o.status for o in group)
        decisive = next(o for o in group if o.status == status)
        served = {"gems": 0, "aten": 0}
        for o in group:
            if o.served_by:
                served[o.served_by] += 1
        found.append(Record(
            tier="accuracy", op=case, aten=aten, dtype=dtype, sample=label, status=status,
            message=decisive.message, detail=decisive.description, reason=decisive.reason,
            max_abs=max((o.max_abs for o in group if o.max_abs is not None), default=None),
            max_rel=max((o.max_rel for o in group if o.max_rel is not None), default=None),
            samples_checked=len(group), seconds=sum(o.seconds for o in group),
            metrics={"served_by": served},
        ))
    return found
