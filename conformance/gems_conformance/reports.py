"""The report folder: report.json, junit.xml, summary.md and report.html.

Every report starts with the vendor statement. Accuracy results are also shown as an
op x dtype matrix whose cells take the worst status of their sample classes.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import records as R
from .baseline import Regression
from .records import Record, TierResult
from .statement import lines

FORMAT_VERSION = 1
DETAIL_STATUSES = (R.ERROR, R.FAIL, R.XFAIL, R.XPASS)


@dataclass
class Report:
    statement: dict[str, Any]
    tiers: dict[str, TierResult]
    records: list[Record]
    regressions: list[Regression] = field(default_factory=list)
    #: why the run stopped before every job ran ("" when it finished); an unfinished run fails
    unfinished: str = ""

    @property
    def counts(self) -> dict[str, int]:
        return R.count(self.records)

    def tier_counts(self, tier: str) -> dict[str, int]:
        return R.count(r for r in self.records if r.tier == tier)

    @property
    def failed(self) -> bool:
        return any(r.status in R.FAILING for r in self.records) or bool(self.regressions) or bool(self.unfinished)

    def details(self) -> list[Record]:
        """Records whose story a reader needs: failures, errors, declared deviations."""
        order = {status: i for i, status in enumerate(DETAIL_STATUSES)}
        chosen = [r for r in self.records if r.status in order]
        return sorted(chosen, key=lambda r: (order[r.status], r.tier, r.op, r.dtype, r.sample))


@dataclass
class Cell:
    status: str
    counts: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def matrix(records: Iterable[Record], tier: str = "accuracy") -> tuple[list[str], list[str], dict[tuple[str, str], Cell]]:
    """(ops, dtypes, cells): the worst status per op x dtype with per-status counts."""
    cells: dict[tuple[str, str], Cell] = {}
    for record in records:
        if record.tier != tier:
            continue
        cell = cells.setdefault((record.op, record.dtype), Cell(R.PASS, {}))
        cell.counts[record.status] = cell.counts.get(record.status, 0) + 1
        cell.status = R.worst(cell.counts)
    ops = sorted({op for op, _ in cells})
    dtype_order = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool")
    dtypes = sorted({d for _, d in cells}, key=lambda d: (dtype_order.index(d) if d in dtype_order else 99, d))
    return ops, dtypes, cells


def to_json(report: Report) -> dict[str, Any]:
    return {
        "format_version": FORMAT_VERSION,
        "statement": report.statement,
        "tiers": {name: {"ran": t.ran, "reason": t.reason, "seconds": round(t.seconds, 3),
                         "counts": report.tier_counts(name)} for name, t in report.tiers.items()},
        "counts": report.counts,
        "passed": not report.failed,
        "unfinished": report.unfinished,
        "regressions": [r.to_json() for r in report.regressions],
        "records": [r.to_json() for r in report.records],
    }


def _error_text(record: Record) -> str:
    parts = [record.message]
    if record.detail:
        parts.append(f"sample: {record.detail}")
    if record.max_abs is not None:
        parts.append(f"max abs error {record.max_abs:g}, max rel error {record.max_rel:g}")
    if record.reason:
        parts.append(f"reason: {record.reason}")
    return "\n".join(p for p in parts if p)


def to_junit(report: Report) -> ET.Element:
    root = ET.Element("testsuites", name="gems-conformance")
    for tier_name, tier in report.tiers.items():
        chosen = [r for r in report.records if r.tier == tier_name]
        counts = R.count(chosen)
        suite = ET.SubElement(root, "testsuite", name=f"gems.{tier_name}", tests=str(len(chosen)),
                              failures=str(counts[R.FAIL]), errors=str(counts[R.ERROR]),
                              skipped=str(counts[R.XFAIL] + counts[R.NOT_SUPPORTED] + (0 if tier.ran else 1)),
                              time=f"{tier.seconds:.3f}")
        properties = ET.SubElement(suite, "properties")
        for label, value in lines(report.statement):
            ET.SubElement(properties, "property", name=label, value=value)
        if not tier.ran:
            case = ET.SubElement(suite, "testcase", classname=f"gems.{tier_name}", name="tier")
            ET.SubElement(case, "skipped", message=tier.reason)
        for record in chosen:
            case = ET.SubElement(suite, "testcase", classname=f"gems.{tier_name}.{record.op}",
                                 name=f"{record.dtype}-{record.sample}", time=f"{record.seconds:.3f}")
            text = _error_text(record)
            if record.status == R.FAIL:
                ET.SubElement(case, "failure", message=record.message[:200] or "FAIL").text = text
            elif record.status == R.ERROR:
                ET.SubElement(case, "error", message=record.message.splitlines()[0][:200] if record.message
                              else "ERROR").text = text
            elif record.status in (R.XFAIL, R.NOT_SUPPORTED):
                ET.SubElement(case, "skipped", message=f"{record.status}: {record.reason or record.message}")
            elif record.status != R.PASS:
                ET.SubElement(case, "system-out").text = f"{record.status}: {record.reason}"
    if report.regressions:
        suite = ET.SubElement(root, "testsuite", name="gems.baseline", tests=str(len(report.regressions)),
                              failures=str(len(report.regressions)), errors="0", skipped="0")
        for regression in report.regressions:
            case = ET.SubElement(suite, "testcase", classname="gems.baseline", name=regression.key)
            ET.SubElement(case, "failure", message=f"regression: {regression.before} -> {regression.now}")
    return root


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(report: Report) -> str:
    out = ["# gems conformance report", ""]
    out += ["| | |", "|---|---|"] + [f"| {label} | {_md_escape(value)} |" for label, value in lines(report.statement)]
    verdict = "**FAILED**" if report.failed else "**PASSED**"
    if report.unfinished:
        verdict += f" (incomplete: {report.unfinished})"
    out += ["", f"Result: {verdict}", "", "## Tiers", "",
            "| tier | ran | " + " | ".join(R.STATUSES) + " | note |",
            "|---|---|" + "---|" * len(R.STATUSES) + "---|"]
    for name, tier in report.tiers.items():
        counts = report.tier_counts(name)
        out.append(f"| {name} | {'yes' if tier.ran else 'skipped'} | "
                   + " | ".join(str(counts[s]) for s in R.STATUSES) + f" | {_md_escape(tier.reason)} |")
    totals = report.counts
    out.append("| **all** | | " + " | ".join(str(totals[s]) for s in R.STATUSES) + " | |")
    ops, dtypes, cells = matrix(report.records)
    if ops:
        out += ["", "## Accuracy: op x dtype", "", "Worst status over the sample classes of each cell.", "",
                "| op | " + " | ".join(dtypes) + " |", "|---|" + "---|" * len(dtypes)]
        for op in ops:
            row = [cells[(op, d)].status if (op, d) in cells else "" for d in dtypes]
            out.append(f"| {op} | " + " | ".join(row) + " |")
    if report.regressions:
        out += ["", "## Regressions against the baseline", ""]
        out += [f"- `{r.key}`: {r.before} -> {r.now} {_md_escape(r.message)}" for r in report.regressions]
    details = report.details()
    if details:
        out += ["", "## Details", ""]
        for record in details:
            out.append(f"### {record.status}: {record.tier} {record.op} {record.dtype} {record.sample}")
            out += ["", "```", _error_text(record), "```", ""]
    return "\n".join(out) + "\n"


def write_all(folder: str | Path, report: Report) -> dict[str, Path]:
    from .report_html import to_html

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {name: folder / name for name in ("report.json", "junit.xml", "summary.md", "report.html")}
    paths["report.json"].write_text(json.dumps(to_json(report), indent=1) + "\n")
    tree = ET.ElementTree(to_junit(report))
    ET.indent(tree)
    tree.write(paths["junit.xml"], encoding="utf-8", xml_declaration=True)
    paths["summary.md"].write_text(to_markdown(report))
    paths["report.html"].write_text(to_html(report))
    return paths
