"""``gems-conformance``: certify a gems backend and write the report folder.

    gems-conformance --device mychip --report out/
    gems-conformance --device amd --emulate --tier contract,accuracy --quick --report out/
    gems-conformance --device mychip --report out/ --baseline last/report.json

Exit status: 0 when nothing FAILed, ERRORed or regressed against ``--baseline``; 1 when
something did; 2 when the run could not start (unknown device, bad arguments); 130 when it
was stopped (Ctrl-C or SIGTERM) before every job ran: the reports then hold what ran.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from . import __version__, baseline
from . import records as R
from .pool import WorkerError
from .reports import Report, write_all
from .runner import Options, run
from .statement import complete


def _list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gems-conformance", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", required=True, help="the gems backend to certify (GEMS_DEVICE value)")
    p.add_argument("--emulate", action="store_true",
                   help="apply the backend's policy on the device that is here (GEMS_EMULATE=1)")
    p.add_argument("--tier", default=",".join(R.TIERS),
                   help=f"comma-separated tiers to run (default: all of {','.join(R.TIERS)})")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", dest="profile", action="store_const", const="quick",
                      help="small sample shapes (minutes on the CPU interpreter)")
    size.add_argument("--large", dest="profile", action="store_const", const="large",
                      help="add shapes past 2^31 elements (needs a large device memory)")
    p.set_defaults(profile="full")
    p.add_argument("--ops", default="", help="comma-separated op cases or ATen ops to check (default: all)")
    p.add_argument("--report", required=True, type=Path, help="folder to write the reports to")
    p.add_argument("--baseline", type=Path, help="a previous report.json: fail on any regression")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds a worker may stay silent before it is killed as hung (default 300)")
    p.add_argument("--workers", type=int, default=0, help="worker processes (default: one per CPU, at most 16)")
    p.add_argument("--quiet", action="store_true", help="no progress display on stderr")
    p.add_argument("--version", action="version", version=f"gems-conformance {__version__}")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    tiers = _list(args.tier)
    unknown = [t for t in tiers if t not in R.TIERS]
    if unknown:
        parser().error(f"unknown tier(s) {', '.join(unknown)}; choose from {', '.join(R.TIERS)}")
    previous = None
    if args.baseline is not None:
        try:
            previous = baseline.load(args.baseline)
        except (OSError, ValueError) as exc:
            parser().error(f"--baseline {args.baseline}: {exc}")
    options = Options(device=args.device, emulate=args.emulate, tiers=tiers, profile=args.profile,
                      ops=_list(args.ops), timeout=args.timeout, workers=args.workers, quiet=args.quiet)
    def stop(signum: int, frame: object) -> None:
        # a time limit's SIGTERM ends the run as Ctrl-C does (the reports of what ran are
        # written); a second one does not interrupt that writing
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt

    previous_handler = signal.signal(signal.SIGTERM, stop)
    try:
        result = run(options)
    except (WorkerError, ValueError) as exc:
        print(f"gems-conformance: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gems-conformance: interrupted before any job ran; no reports written", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
    report = Report(
        statement=complete(result.facts, args.profile, sys.argv[1:] if argv is None else argv),
        tiers=result.tiers,
        records=result.records,
        regressions=baseline.regressions(previous, result.records) if previous is not None else [],
        unfinished=result.unfinished,
    )
    paths = write_all(args.report, report)
    counts = report.counts
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "no records"
    print(f"gems-conformance: {summary}; {len(report.regressions)} regression(s)")
    print(f"gems-conformance: reports in {paths['summary.md'].parent}")
    if report.unfinished:
        print(f"gems-conformance: incomplete: {report.unfinished}")
        return 130
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
