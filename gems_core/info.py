"""``python -m gems_core info``: what gems would run on here, and why.

Versions, every installed backend and its state, the selected backend and the reason, the
policy it applies (ops and dtypes left to ATen, configs, compiler options kept and dropped,
known deviations, overrides, kernel variants, run-time fallbacks), the ops gems serves and
the tunable kernels. The text is short unless ``--verbose`` asks for every config, op and
tunable; ``--json`` prints the whole report for machines. A selection that fails prints the
installed backends and the error, and exits 2.

:func:`collect` builds the report in-process too, so run-time fallbacks recorded while a
model ran can be inspected from the same process.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import textwrap
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import triton

from . import background, native, runtime, settings
from ._version import __version__
from .contract import GATEABLE_DTYPES, KernelConfig, KernelOverride
from .plugins import ENTRY_POINT_GROUP, BackendError, InstalledBackend, discover
from .policy import gate_names
from .registry import all_impls
from .tuning import tunables as all_tunables

EXIT_SELECTION_FAILED = 2
_SELECTION_VARIABLES = ("GEMS_DEVICE", "GEMS_EMULATE", "GEMS_COMPILE_TARGET", "GEMS_LIFT_GATES")
#: the environment variables gems reads, with their meaning (``--help`` lists them)
ENVIRONMENT = {name: setting.doc for name, setting in settings.SETTINGS.items()}


# ---------------------------------------------------------------- the report, as plain data


def _backend_row(backend: InstalledBackend, selected: str | None) -> dict[str, Any]:
    descriptor, detected = backend.descriptor, backend.detected
    state = "failed" if not backend.ok else "detected" if detected else "not detected"
    return {
        "name": backend.name,
        "selected": backend.name == selected,
        "builtin": backend.builtin,
        "source": backend.source,
        "distribution": "gems-core" if backend.builtin else backend.distribution,
        "version": backend.version,
        "state": state,
        "device": detected.name if detected else None,
        "arch": detected.arch if detected else None,
        "vendor": descriptor.vendor if descriptor else None,
        "looked_for": descriptor.detection if descriptor else None,
        "error": backend.error,
    }


def _configs(configs: Sequence[KernelConfig]) -> list[dict[str, Any]]:
    return [{**dataclasses.asdict(c), "text": c.describe()} for c in configs]


def _selection_section(rt: Any) -> dict[str, Any]:
    selection = rt.selection
    execution = selection.execution
    if settings.get("GEMS_DEVICE"):
        how = "environment"
    elif selection.backend.builtin:
        how = "default"
    else:
        how = "detection"
    target = getattr(execution, "compile_target", None)
    if target is not None:
        runs_on = f"no device: kernels are compiled for {target.backend}:{target.arch}, not run"
    elif execution.interpreter:
        runs_on = "the Triton interpreter on CPU tensors"
    else:
        backend = execution.triton_backend
        runs_on = f"{execution.device_type} tensors, compiled by Triton's {backend} backend"
    return {
        "backend": selection.backend.name,
        "vendor": selection.descriptor.vendor,
        "how": how,
        "reason": selection.reason,
        "device": selection.device_name,
        "arch": selection.arch,
        "emulated": selection.emulated,
        "runs_on": runs_on,
        "dispatch_key": execution.dispatch_key,
        "device_type": execution.device_type,
        "interpreter": execution.interpreter,
        "triton_backend": execution.triton_backend,
        "native_layer": native.describe(execution),
        "compile": background.describe(),
    }


def _policy_section(rt: Any, tunables: Mapping[str, Any]) -> dict[str, Any]:
    policy = rt.policy
    # the policy keeps each override's function only; its reason is asked for again
    overrides = rt.selection.backend.call("gems_kernel_overrides") or ()
    reasons = {o.op: o.reason for o in overrides if isinstance(o, KernelOverride)}
    configs = {}
    for name in sorted(set(tunables) | set(policy.configs)):
        tunable = tunables.get(name)
        configs[name] = {
            "known": tunable is not None,
            "backend": _configs(policy.configs.get(name, ())),
            "core_defaults": _configs(tunable.defaults) if tunable is not None else [],
        }
    return {
        "aten_ops": [
            {"op": op, "dtypes": sorted(dtypes), "reason": policy.gate_reasons.get(op, ""),
             "keeps": sorted(policy.gate_keeps.get(op, ()))}
            for op, dtypes in sorted(policy.gates.items())
        ],
        "aten_forms": [
            {"op": op, "forms": sorted(forms), "reason": policy.leave_reasons.get(op, "")}
            for op, forms in sorted(policy.gate_leaves.items())
        ],
        "unsupported_dtypes": sorted(policy.unsupported_dtypes),
        "supported_dtypes": [d for d in GATEABLE_DTYPES if d not in policy.unsupported_dtypes],
        "configs": configs,
        "compiler_options": {k: dict(v) for k, v in sorted(policy.compiler_options.items())},
        "dropped_options": list(policy.dropped_options),
        "triton": triton.__version__,
        "triton_backend": rt.selection.execution.triton_backend or "interpreter",
        "deviations": [dataclasses.asdict(d) for d in policy.deviations],
        "overrides": [
            {
                "op": op,
                "fn": f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}",
                "reason": reasons.get(op, ""),
            }
            for op, fn in sorted(policy.overrides.items())
        ],
        "variants": [
            {
                "point": point,
                "fn": f"{getattr(v.fn, '__module__', '?')}.{getattr(v.fn, '__qualname__', repr(v.fn))}",
                "reason": v.reason,
            }
            for point, v in sorted(policy.variants.items())
        ],
        "runtime_fallbacks": dict(sorted(rt.runtime_fallbacks.items())),
        "problems": [dataclasses.asdict(p) for p in policy.problems],
    }


def _op_gate(gates: Mapping[str, frozenset[str]], overload: str) -> Any:
    """The backend's own gate on ``overload`` (the descriptor's dtype gates, which apply to
    every op, are listed once in the policy): None, "all", or the gated dtype names."""
    found = [gates[n] for n in gate_names(overload) if n in gates]
    if not found:
        return None
    if any(not dtypes for dtypes in found):
        return "all"
    return sorted(set().union(*found))


def _ops_section(rt: Any) -> dict[str, Any]:
    packets: dict[str, list[dict[str, Any]]] = {}
    for name, impl in sorted(all_impls().items()):
        packets.setdefault(impl.packet, []).append(
            {
                "name": name,
                "aten": _op_gate(rt.policy.gates, name),
                "override": name in rt.policy.overrides,
                "autograd_key": impl.autograd,
            }
        )
    entries = [e for group in packets.values() for e in group]
    return {
        "count": len(entries),
        "aten_all": sum(e["aten"] == "all" for e in entries),
        "aten_some_dtypes": sum(isinstance(e["aten"], list) for e in entries),
        "aten_dtypes_every_op": sorted(rt.policy.unsupported_dtypes),
        "packets": packets,
    }


def collect() -> dict[str, Any]:
    """The whole report as JSON-ready data; ``error`` is set when no backend is selected."""
    report: dict[str, Any] = {
        "versions": {
            "gems-core": __version__,
            "torch": torch.__version__,
            "triton": triton.__version__,
            "python": platform.python_version(),
        },
        "environment": {k: settings.raw(k) for k in _SELECTION_VARIABLES},
        "entry_point_group": ENTRY_POINT_GROUP,
        "error": None,
        "warnings": [],
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            rt = runtime.current()
        except Exception as exc:  # noqa: BLE001 - a failed selection is reported, not raised
            rt = None
            cause = f"{type(exc).__name__}: {exc}"
            report["error"] = str(exc) if isinstance(exc, BackendError) else cause
    report["warnings"] = sorted({str(w.message) for w in caught})
    if rt is None:
        installed = discover()
        report["backends"] = [_backend_row(b, None) for b in installed.values()]
        return report
    tunables = all_tunables()
    report["backends"] = [
        _backend_row(b, rt.selection.backend.name) for b in rt.selection.installed.values()
    ]
    report["selection"] = _selection_section(rt)
    report["policy"] = _policy_section(rt, tunables)
    report["ops"] = _ops_section(rt)
    report["tunables"] = [
        {
            "name": t.name,
            "params": list(t.params),
            "optional": list(t.optional),
            "description": t.description,
            "defaults": _configs(t.defaults),
        }
        for t in sorted(tunables.values(), key=lambda t: t.name)
    ]
    return report


# ---------------------------------------------------------------- the report, as text


def _indent(text: str, prefix: str) -> str:
    lines = text.splitlines() or [""]
    return lines[0] + "".join(f"\n{prefix}{line}" for line in lines[1:])


def _backend_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = [f"Installed backends (built-in, and entry-point group {ENTRY_POINT_GROUP}):"]
    if not rows:
        return lines + ["  none"]
    width = max(len(r["name"]) for r in rows)
    dists = [f"{r['distribution'] or '?'} {r['version'] or '?'}" for r in rows]
    dist_width = max(len(d) for d in dists)
    for row, dist in zip(rows, dists):
        mark = "*" if row["selected"] else " "
        head = f"  {mark} {row['name']:<{width}}  {dist:<{dist_width}}  "
        if row["state"] == "failed":
            lines.append(head + "failed to load:")
            lines += [f"      {line}" for line in (row["error"] or "").splitlines()]
        elif row["state"] == "detected":
            lines.append(head + f"loaded, detected ({row['device']}, {row['arch']})")
        else:
            lines.append(head + "loaded, not detected")
            if row["looked_for"]:
                lines += _wrap(f"looked for: {row['looked_for']}", "      ")
    if any(r["selected"] for r in rows):
        lines.append("  (* = selected)")
    return lines


def _selection_lines(sel: Mapping[str, Any]) -> list[str]:
    why = f"{sel['how']}: {sel['reason']}"
    if sel["how"] == "default":
        why += ", so the built-in reference backend"
    emulated = f"yes, on {sel['runs_on']}" if sel["emulated"] else "no"
    return [
        f"Selected backend: {sel['backend']} (vendor {sel['vendor']})",
        f"  why:          {why}",
        f"  device:       {sel['device']}, arch {sel['arch']}",
        f"  runs on:      {sel['runs_on']}; dispatch key {sel['dispatch_key']}",
        f"  emulated:     {emulated}",
        f"  native layer: {sel.get('native_layer', 'unknown')}",
        f"  compiles:     {sel.get('compile', 'unknown')}",
    ]


def _wrap(text: str, indent: str, hang: int = 2) -> list[str]:
    return textwrap.wrap(
        text,
        width=max(100, len(indent) + 40),
        initial_indent=indent,
        subsequent_indent=" " * (len(indent) + hang),
        break_on_hyphens=False,
    )


def _config_lines(
    label: str, configs: Sequence[Mapping[str, Any]], indent: str, width: int = 0
) -> list[str]:
    """``label: first config`` and the others beneath it, one a line."""
    head = f"{indent}{label + ':':<{width}} "
    texts = [c["text"] for c in configs] or ["-"]
    return [head + texts[0]] + [" " * len(head) + text for text in texts[1:]]


def _policy_lines(name: str, pol: Mapping[str, Any], verbose: bool = True) -> list[str]:
    lines = [f"Policy of {name}:"]

    def block(title: str, items: Sequence[str], empty: str = "none") -> None:
        if not items:
            lines.append(f"  {title + ':':<27} {empty}")
            return
        lines.append(f"  {title}:")
        lines.extend(f"    {_indent(item, '      ')}" for item in items)

    block(
        "ops left to ATen",
        [
            f"{g['op']}: {'all dtypes' if not g['dtypes'] else ', '.join(g['dtypes'])}"
            + (f", but its {' and '.join(g['keeps'])} form{'s' if len(g['keeps']) > 1 else ''} on gems"
               if g.get("keeps") else "")
            + (f"  ({g['reason']})" if g["reason"] else "")
            for g in pol["aten_ops"]
        ]
        + [
            f"{g['op']}: its {' and '.join(g['forms'])} form{'s' if len(g['forms']) > 1 else ''} (the rest on gems)"
            + (f"  ({g['reason']})" if g["reason"] else "")
            for g in pol.get("aten_forms", ())
        ],
    )
    if pol["problems"]:
        block("POLICY ERRORS, left out", [f"{p['hook']}(): {p['message']}" for p in pol["problems"]])
    supported = ", ".join(pol["supported_dtypes"]) or "none"
    block(
        "dtype gates (descriptor)",
        [
            f"{d}: not supported by the chip, every op goes to ATen"
            for d in pol["unsupported_dtypes"]
        ],
        empty=f"none ({supported} supported)",
    )
    # the core's defaults are listed once, under the tunables; here only the backend's own
    tuned = {kernel: entry for kernel, entry in pol["configs"].items() if entry["backend"]}
    if not verbose:
        block("backend configs", [", ".join(tuned)] if tuned else [], empty="none (the core's defaults)")
    else:
        lines.append("  backend configs:" if tuned else "  backend configs:           none (the core's defaults)")
        for kernel, entry in tuned.items():
            unknown = "" if entry["known"] else " (no such tunable in this gems-core)"
            lines += _config_lines(kernel + unknown, entry["backend"], "    ")
    block(
        "compiler options kept",
        [
            f"{kernel}: " + ", ".join(f"{k}={v!r}" for k, v in opts.items())
            for kernel, opts in pol["compiler_options"].items()
        ],
    )
    block(
        f"compiler options dropped (Triton {pol['triton']}, {pol['triton_backend']})",
        list(pol["dropped_options"]),
    )
    deviations = []
    for d in pol["deviations"]:
        scope = [f"dtypes {', '.join(d['dtypes'])}"] if d["dtypes"] else []
        scope += [f"samples {', '.join(d['samples'])}"] if d["samples"] else []
        where = f" ({'; '.join(scope)})" if scope else ""
        tol = f" atol={d['atol']} rtol={d['rtol']}" if d["kind"] == "tolerance" else ""
        deviations.append(f"op {d['op']}{where}: {d['kind']}{tol}\n  {d['reason']}")
    block("known deviations", deviations)
    block(
        "kernel overrides",
        [
            f"{o['op']}: {o['fn']}" + (f"  ({o['reason']})" if o["reason"] else "")
            for o in pol["overrides"]
        ],
    )
    block(
        "kernel variants",
        [
            f"{v['point']}: {v['fn']}" + (f"  ({v['reason']})" if v["reason"] else "")
            for v in pol["variants"]
        ],
    )
    block(
        "run-time fallbacks",
        [f"{op}: {why}" for op, why in pol["runtime_fallbacks"].items()],
        empty="none recorded in this process",
    )
    return lines


def _ops_lines(ops: Mapping[str, Any], verbose: bool = True) -> list[str]:
    lines = [f"Ops served: {ops['count']} ATen overloads in {len(ops['packets'])} packets"]
    if ops["aten_all"] or ops["aten_some_dtypes"]:
        lines[0] += (
            f"; gated to ATen by the backend{' (marked)' if verbose else ''}: {ops['aten_all']} entirely, "
            f"{ops['aten_some_dtypes']} for some dtypes"
        )
    if ops["aten_dtypes_every_op"]:
        lines.append(f"  (every op runs on ATen for {', '.join(ops['aten_dtypes_every_op'])})")
    if not verbose:
        return lines
    width = max((len(p) for p in ops["packets"]), default=0)
    for packet, entries in ops["packets"].items():
        names = []
        for e in entries:
            text = e["name"]
            if e["aten"] == "all":
                text += " [ATen]"
            elif e["aten"]:
                text += f" [ATen for {','.join(e['aten'])}]"
            if e["override"]:
                text += " [override]"
            names.append(text)
        lines += _wrap(", ".join(names), f"  {packet:<{width}}  ", hang=0)
    return lines


def _tunable_lines(tunables: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = ["Tunables:" if tunables else "Tunables: none"]
    for t in tunables:
        params = [p + (" (optional)" if p in t.get("optional", ()) else "") for p in t["params"]]
        lines.append(f"  {t['name']}: params {', '.join(params) or '-'}")
        if t["description"]:
            lines.append(f"    {t['description']}")
        lines += _config_lines("core defaults", t["defaults"], "    ")
    return lines


def render(report: Mapping[str, Any], verbose: bool = True) -> str:
    """The report as plain text; short (no configs, ops by packet or tunables) unless
    ``verbose``."""
    v = report["versions"]
    lines = [
        (
            f"gems-core {v['gems-core']}   torch {v['torch']}   triton {v['triton']}   "
            f"python {v['python']}"
        ),
        "",
        *_backend_lines(report["backends"]),
    ]
    if report["warnings"]:
        lines += ["", "Warnings:"] + [f"  {_indent(w, '    ')}" for w in report["warnings"]]
    if report["error"]:
        env = ", ".join(f"{k}={val}" for k, val in report["environment"].items() if val)
        lines += ["", f"Error: no gems backend could be selected ({env or 'GEMS_DEVICE unset'}):"]
        lines += [f"  {line}" for line in report["error"].splitlines()]
        return "\n".join(lines)
    lines += ["", *_selection_lines(report["selection"])]
    lines += ["", *_policy_lines(report["selection"]["backend"], report["policy"], verbose)]
    lines += ["", *_ops_lines(report["ops"], verbose)]
    if verbose:
        lines += ["", *_tunable_lines(report["tunables"])]
    else:
        lines += ["", f"Tunables: {len(report['tunables'])}. --verbose lists them with their "
                  "configs, and every op served with the backend's gates."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m gems_core info [--verbose | --json]`` (also the ``gems-info`` command)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("warmup", "tune"):
        from .warmup import main as warmup_main

        return warmup_main(argv[0], argv[1:])
    width = max(len(name) for name in ENVIRONMENT) + 2
    parser = argparse.ArgumentParser(
        prog="python -m gems_core",
        description="Show what gems runs on here: backends, selection, policy, ops, tunables. "
        "Installed as the gems-info command too. 'warmup --help' and 'tune --help': compile "
        "and tune a workload's kernels ahead of time, write a shipped tuning table.",
        epilog="environment variables:\n"
        + "\n".join(f"  {name:<{width}}{meaning}" for name, meaning in ENVIRONMENT.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", nargs="?", default="info", choices=["info", "warmup", "tune"])
    parser.add_argument("--version", action="version", version=f"gems-core {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="every config, op and tunable (the default is a summary)")
    parser.add_argument("--json", action="store_true", help="the whole report, machine-readable")
    parser.add_argument("--coverage", metavar="SCRIPT", nargs=argparse.REMAINDER,
                        help="run SCRIPT [ARGS...] once and list the ATen ops it calls that gems "
                        "does not serve, with the share of calls gems serves")
    args = parser.parse_args(argv)
    if args.coverage is not None:
        if not args.coverage:
            parser.error("--coverage needs a script to run")
        from .coverage import main as coverage_main

        return coverage_main(args.coverage[0], args.coverage[1:], args.json)
    report = collect()
    if args.json:
        print(json.dumps(report, indent=2, default=repr))
    else:
        print(render(report, args.verbose))
    if report["error"]:
        print(f"gems: {report['error'].splitlines()[0]}", file=sys.stderr)
        return EXIT_SELECTION_FAILED
    return 0
