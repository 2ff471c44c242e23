"""report.html: one self-contained page (no external files or network): the vendor statement,
counts per tier, the op x dtype matrix coloured by status, a filter box, and the details of
every failure, error and declared deviation."""

from __future__ import annotations

from html import escape

from . import records as R
from .reports import Report, _error_text, matrix
from .statement import lines

COLOURS = {
    R.PASS: "#2e9d4a", R.FALLBACK: "#5b8def", R.NOT_SUPPORTED: "#9aa0a6", R.XFAIL: "#e0a526",
    R.XPASS: "#8e6bd1", R.FAIL: "#d93025", R.ERROR: "#7b1fa2",
}

STYLE = """
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #202124; }
table { border-collapse: collapse; margin: .5em 0 1.2em; }
th, td { border: 1px solid #dadce0; padding: 3px 7px; text-align: left; }
th { background: #f1f3f4; }
#matrix td.cell { text-align: center; color: #fff; font-weight: 600; min-width: 5.5em; }
#matrix td.cell small { font-weight: 400; opacity: .9; }
#matrix td.cell a { color: inherit; text-decoration: none; }
#matrix td.empty { background: #fafafa; }
.verdict-pass { color: #2e9d4a; } .verdict-fail { color: #d93025; }
.legend span { display: inline-block; padding: 2px 8px; margin-right: 4px; color: #fff; border-radius: 3px; }
#filter { width: 28em; padding: 4px; font-size: 14px; }
pre { background: #f8f9fa; padding: .6em; white-space: pre-wrap; }
details { margin: .4em 0; } summary { cursor: pointer; font-weight: 600; }
.hidden { display: none; }
"""

SCRIPT = """
(function () {
  var box = document.getElementById('filter');
  var rows = Array.prototype.slice.call(document.querySelectorAll('#matrix tbody tr'));
  var details = Array.prototype.slice.call(document.querySelectorAll('details.detail'));
  var records = Array.prototype.slice.call(document.querySelectorAll('#records tbody tr'));
  function apply() {
    var words = box.value.toLowerCase().split(/\\s+/).filter(Boolean);
    function match(text) { return words.every(function (w) { return text.indexOf(w) >= 0; }); }
    var shown = 0;
    rows.forEach(function (row) {
      var on = match(row.getAttribute('data-text')); row.classList.toggle('hidden', !on); if (on) shown++;
    });
    details.concat(records).forEach(function (el) {
      el.classList.toggle('hidden', !match(el.getAttribute('data-text')));
    });
    document.getElementById('shown').textContent = shown + ' of ' + rows.length + ' ops shown';
  }
  box.addEventListener('input', apply);
  var tally = {};
  document.querySelectorAll('#matrix td.cell').forEach(function (cell) {
    var s = cell.getAttribute('data-status'); tally[s] = (tally[s] || 0) + 1;
  });
  document.getElementById('matrix-tally').textContent = Object.keys(tally).sort().map(function (s) {
    return s + ': ' + tally[s];
  }).join(', ');
  apply();
})();
"""


def _slug(*parts: str) -> str:
    return "d-" + "-".join("".join(c if c.isalnum() else "_" for c in p) for p in parts)


def _statement(report: Report) -> list[str]:
    rows = [f"<tr><th>{escape(label)}</th><td>{escape(value)}</td></tr>" for label, value in lines(report.statement)]
    return ['<table id="statement">', *rows, "</table>"]


def _counts(report: Report) -> list[str]:
    head = "".join(f"<th>{escape(s)}</th>" for s in R.STATUSES)
    out = ['<table id="counts">', f"<tr><th>tier</th><th>ran</th>{head}<th>note</th></tr>"]
    for name, tier in report.tiers.items():
        counts = report.tier_counts(name)
        cells = "".join(f'<td data-tier="{name}" data-status="{escape(s)}">{counts[s]}</td>' for s in R.STATUSES)
        ran = "yes" if tier.ran else "skipped"
        out.append(f"<tr><td>{name}</td><td>{ran}</td>{cells}<td>{escape(tier.reason)}</td></tr>")
    totals = report.counts
    cells = "".join(f'<td id="count-{s.replace(" ", "_")}">{totals[s]}</td>' for s in R.STATUSES)
    out += [f"<tr><th>all</th><td></td>{cells}<td></td></tr>", "</table>"]
    return out


def _matrix(report: Report) -> list[str]:
    ops, dtypes, cells = matrix(report.records)
    if not ops:
        return ["<p>No accuracy results.</p>"]
    legend = "".join(f'<span style="background:{c}">{escape(s)}</span>' for s, c in COLOURS.items())
    out = [f'<p class="legend">{legend}</p>', '<table id="matrix">',
           "<thead><tr><th>op</th>" + "".join(f"<th>{escape(d)}</th>" for d in dtypes) + "</tr></thead><tbody>"]
    for op in ops:
        row_statuses = " ".join(cells[(op, d)].status for d in dtypes if (op, d) in cells)
        tds = []
        for dtype in dtypes:
            cell = cells.get((op, dtype))
            if cell is None:
                tds.append('<td class="empty"></td>')
                continue
            tally = ", ".join(f"{s} {n}" for s, n in cell.counts.items())
            label = escape(cell.status)
            if cell.status in (R.FAIL, R.ERROR, R.XFAIL, R.XPASS):
                label = f'<a href="#{_slug(op, dtype)}">{label}</a>'
            tds.append(f'<td class="cell" data-status="{escape(cell.status)}" title="{escape(tally)}" '
                       f'style="background:{COLOURS.get(cell.status, "#555")}">{label}<br>'
                       f"<small>{cell.counts.get(cell.status, 0)}/{cell.total}</small></td>")
        text = escape(f"{op} {row_statuses}".lower())
        out.append(f'<tr data-op="{escape(op)}" data-text="{text}"><th>{escape(op)}</th>{"".join(tds)}</tr>')
    out += ["</tbody></table>", '<p>Cells by status: <span id="matrix-tally"></span></p>']
    return out


def _details(report: Report) -> list[str]:
    details = report.details()
    if not details:
        return ["<p>No failures, errors or declared deviations.</p>"]
    out, anchored = [], set()
    for record in details:
        anchor = _slug(record.op, record.dtype)
        id_attr = f' id="{anchor}"' if record.tier == "accuracy" and anchor not in anchored else ""
        anchored.add(anchor)
        title = f"{record.status}: {record.tier} / {record.op} / {record.dtype} / {record.sample}"
        text = escape(f"{record.status} {record.tier} {record.op} {record.dtype} {record.sample}".lower())
        out.append(f'<details class="detail" data-status="{escape(record.status)}" data-text="{text}"{id_attr} open>'
                   f"<summary>{escape(title)}</summary><pre>{escape(_error_text(record))}</pre></details>")
    return out


def _records(report: Report) -> list[str]:
    out = ["<details><summary>Every record</summary>", '<table id="records"><thead><tr>',
           ("<th>tier</th><th>op</th><th>dtype</th><th>sample class</th><th>status</th><th>samples</th>"
           "<th>note</th></tr></thead><tbody>")]
    for r in report.records:
        text = escape(f"{r.status} {r.tier} {r.op} {r.dtype} {r.sample}".lower())
        note = r.reason or r.message.splitlines()[0] if (r.reason or r.message) else ""
        if r.metrics and r.tier == "performance":
            note = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.metrics.items())
        out.append(f'<tr data-text="{text}"><td>{r.tier}</td><td>{escape(r.op)}</td><td>{escape(r.dtype)}</td>'
                   f"<td>{escape(r.sample)}</td><td>{escape(r.status)}</td><td>{r.samples_checked}</td>"
                   f"<td>{escape(note)}</td></tr>")
    out += ["</tbody></table></details>"]
    return out


def to_html(report: Report) -> str:
    verdict = ('<p class="verdict-fail"><b>FAILED</b></p>' if report.failed
               else '<p class="verdict-pass"><b>PASSED</b></p>')
    if report.unfinished:
        verdict = f'<p class="verdict-fail"><b>FAILED</b>: incomplete, {escape(report.unfinished)}</p>'
    regressions = []
    if report.regressions:
        regressions = [(f'<details id="regressions"><summary>{len(report.regressions)} regression(s) against '
                        "the baseline</summary><ul>")] + [
            f"<li><code>{escape(r.key)}</code>: {r.before} &rarr; {r.now} {escape(r.message)}</li>"
            for r in report.regressions] + ["</ul></details>"]
    name = escape(str(report.statement.get("backend", "?")))
    body = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>gems conformance: {name}</title><style>{STYLE}</style></head><body>",
        f"<h1>gems conformance report: {name}</h1>", *_statement(report), verdict,
        "<h2>Tiers</h2>", *_counts(report), *regressions,
        "<h2>Accuracy: op &times; dtype</h2>",
        ('<p><input id="filter" type="search" placeholder="filter: op, dtype or status (e.g. fail, float16)"> '
        '<span id="shown"></span></p>'), *_matrix(report),
        "<h2>Details</h2>", *_details(report), *_records(report),
        f"<script>{SCRIPT}</script></body></html>",
    ]
    return "\n".join(body) + "\n"
