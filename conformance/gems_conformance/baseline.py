"""Comparison with a previous run's report.json: a record that passed before (PASS, XPASS or
FALLBACK) and now FAILs, ERRORs or is only expected to fail is a regression. Records the
previous run did not check, or this run did not, are not compared."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from . import records as R
from .records import Record

PASSED = frozenset({R.PASS, R.XPASS, R.FALLBACK})


@dataclass
class Regression:
    key: str
    before: str
    now: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"key": self.key, "before": self.before, "now": self.now, "message": self.message}


def load(path: str | Path) -> dict[str, str]:
    """key -> status of every record in a report.json."""
    data = json.loads(Path(path).read_text())
    return {Record.from_json(item).key: item["status"] for item in data.get("records", ())}


def regressions(before: dict[str, str], now: Iterable[Record]) -> list[Regression]:
    found = []
    for record in now:
        previous = before.get(record.key)
        if previous in PASSED and record.status not in R.ACCEPTABLE:
            found.append(Regression(record.key, previous, record.status, record.message))
    return found
