"""One conformance run: plan the jobs of each tier, run them in workers, turn what comes back
(and what kills a worker) into report records."""

from __future__ import annotations

import difflib
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import records as R
from .outcomes import SampleOutcome, aggregate
from .pool import Crash, Pool
from .progress import Progress
from .records import Record, TierResult

#: deaths of one op case x dtype after which its remaining samples are given up
MAX_CRASHES = 3
COMPILE_SECONDS = 1800.0
#: what ``--quick`` times in the performance tier (each in one dtype): the ops that carry a
#: transformer's or a CNN's time, rather than every case x dtype (thousands of exclusive jobs)
QUICK_PERFORMANCE = (
    "add", "mul", "exp", "silu", "gelu", "sum", "mean", "amax", "argmax", "softmax", "log_softmax",
    "layer_norm", "rms_norm", "cross_entropy", "mm", "bmm", "addmm", "scaled_dot_product_attention",
    "embedding", "index_select", "cumsum", "topk", "sort", "cat", "copy_", "where", "gather",
    "scatter_add", "var_mean", "convolution", "max_pool2d_with_indices", "batch_norm",
    "upsample_nearest2d", "foreach_add_list_", "fused_adamw_",
)
#: the dtype a quick timing takes, the first of these a case has
QUICK_PERFORMANCE_DTYPES = ("bfloat16", "float16", "float32")
#: default workers: one per CPU up to this many (compiling kernels is what a worker's CPU does)
MAX_WORKERS = 16


@dataclass
class Options:
    device: str
    emulate: bool = False
    tiers: tuple[str, ...] = R.TIERS
    profile: str = "full"
    ops: tuple[str, ...] = ()
    timeout: float = 300.0
    workers: int = 0  # 0: one per CPU, at most MAX_WORKERS
    quiet: bool = False


@dataclass
class Result:
    facts: dict[str, Any]
    tiers: dict[str, TierResult]
    records: list[Record]
    #: why the run stopped before every job ran ("" when it finished)
    unfinished: str = ""


@dataclass
class _CaseState:
    """What came back for one accuracy job (op case x dtype), across worker deaths."""

    aten: tuple[str, ...]
    outcomes: list[SampleOutcome] = field(default_factory=list)
    crashes: int = 0


def worker_env(options: Options, timing: bool = False) -> dict[str, str]:
    """The workers' environment; ``timing``: for the performance tier, which measures the
    configs a process tunes."""
    env = dict(os.environ)
    env["GEMS_DEVICE"] = options.device
    if options.emulate:
        env["GEMS_EMULATE"] = "1"
    else:
        env.pop("GEMS_EMULATE", None)
    env["GEMS_CONFORMANCE_THREADS"] = str(max(1, (os.cpu_count() or 1) // worker_count(options)))
    env["GEMS_COMPILE"] = "sync"  # each sample's first call must be served by gems, not ATen
    # the suite checks values: a kernel takes its shipped (or remembered) config, else its
    # first, and no sample benchmarks candidates (over half a GPU run's time otherwise);
    # the compile tier compiles every config. GEMS_AUTOTUNE set by the caller wins.
    if not timing:
        env.setdefault("GEMS_AUTOTUNE", "cached")
    return env


def worker_count(options: Options) -> int:
    if options.workers > 0:
        return options.workers
    return max(1, min(MAX_WORKERS, os.cpu_count() or 1))


def select_cases(cases: Mapping[str, Any], ops: tuple[str, ...]) -> list[str]:
    """Case names matching ``ops``: a case name, an ATen overload, or an ATen packet."""
    if not ops:
        return sorted(cases)
    chosen = set()
    for want in ops:
        hits = {name for name, info in cases.items()
                if want == name or any(want in (aten, aten.split(".", 1)[0]) for aten in info["aten"])}
        if not hits:
            known = sorted(set(cases) | {a.split(".", 1)[0] for info in cases.values() for a in info["aten"]})
            close = difflib.get_close_matches(want, known, n=5, cutoff=0.6)
            hint = f" (close: {', '.join(close)})" if close else ""
            raise ValueError(f"--ops: no op case or ATen op named {want!r}{hint}")
        chosen |= hits
    return sorted(chosen)


def _plan(options: Options, ready: dict[str, Any], tiers: dict[str, TierResult]) -> list[dict[str, Any]]:
    load_error = ready["facts"].get("load_error")
    cases = select_cases(ready["cases"], options.ops)
    jobs: list[dict[str, Any]] = []
    for tier in R.TIERS:
        if tier not in options.tiers:
            tiers[tier] = TierResult(tier, ran=False, reason="not requested (--tier)")
        elif load_error and tier != "contract":
            tiers[tier] = TierResult(tier, ran=False, reason=f"the backend did not load: {load_error}")
        elif tier == "performance" and ready["performance_skip"]:
            tiers[tier] = TierResult(tier, ran=False, reason=ready["performance_skip"])
        else:
            tiers[tier] = TierResult(tier, ran=True)
            if tier == "contract":
                jobs.append({"tier": tier})
            elif tier == "semantics":
                # one job per sample class: each call is checked against ATen on the device
                jobs += [{"tier": tier, "group": group, "ops": list(options.ops), "profile": options.profile}
                         for group in ready.get("semantics", ())]
            elif tier == "compile":
                # one job that compiles everything: it may stay silent for long
                jobs.append({"tier": tier, "ops": cases if options.ops else [], "profile": options.profile,
                             "timeout": max(options.timeout, COMPILE_SECONDS)})
            elif tier == "performance" and options.profile == "quick":
                # timings of the quick profile's tiny shapes would measure launch cost only: the
                # full profile's shapes, for a representative set (all of it where --ops names)
                for name in (cases if options.ops else [c for c in QUICK_PERFORMANCE if c in cases]):
                    dtypes = ready["cases"][name]["dtypes"]
                    dtype = next((d for d in QUICK_PERFORMANCE_DTYPES if d in dtypes), dtypes[0] if dtypes else None)
                    if dtype is not None:
                        jobs.append({"tier": tier, "case": name, "dtype": dtype, "profile": "full"})
            else:
                jobs += _chained([{"tier": tier, "case": name, "dtype": dtype, "profile": options.profile}
                                  for name in cases for dtype in ready["cases"][name]["dtypes"]], ready)
    for number, job in enumerate(jobs):
        job["id"] = number
    return jobs


def _chained(jobs: list[dict[str, Any]], ready: dict[str, Any]) -> list[dict[str, Any]]:
    """Accuracy jobs chained by the ATen op their case calls first and the dtype (add, add_,
    add.out and their forms in float32 run the same kernels: one worker runs them one after
    another, finding the kernels compiled), the longest chains first (so none starts last)."""
    for job in jobs:
        aten = ready["cases"][job["case"]]["aten"]
        packet = aten[0].split(".", 1)[0].rstrip("_") if aten else job["case"]
        job["chain"] = f"{packet} {job['dtype']}"
    sizes = Counter(job["chain"] for job in jobs)
    return sorted(jobs, key=lambda job: -sizes[job["chain"]])  # stable: cases keep their order


def _describe(job: dict[str, Any]) -> str:
    return " ".join(str(job[k]) for k in ("tier", "case", "dtype", "group") if k in job)


class _Collector:
    def __init__(self, ready: dict[str, Any], tiers: dict[str, TierResult], progress: Progress) -> None:
        self.cases = ready["cases"]
        self.tiers = tiers
        self.progress = progress
        self.records: list[Record] = []
        self.accuracy: dict[tuple[str, str], _CaseState] = {}
        self.started: dict[str, float] = {}

    def _state(self, job: dict[str, Any]) -> _CaseState:
        key = (job["case"], job["dtype"])
        if key not in self.accuracy:
            self.accuracy[key] = _CaseState(aten=tuple(self.cases[job["case"]]["aten"]))
        return self.accuracy[key]

    def on_message(self, job: dict[str, Any], message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "sent":
            self.started.setdefault(job["tier"], time.monotonic())
        elif kind == "start":
            self.progress.checking(f"{job['case']} {job['dtype']} {message['label']}")
        elif kind == "outcome":
            outcome = SampleOutcome(**message["outcome"])
            self._state(job).outcomes.append(outcome)
            self.progress.counted(outcome.status)
            if outcome.status in R.FAILING:
                self._announce(outcome.status, f"{job['case']} {job['dtype']}", outcome.description
                               or outcome.label, outcome.message, outcome.max_abs, outcome.max_rel)
        elif kind == "record":
            record = Record.from_json(message["record"])
            self.records.append(record)
            self.progress.counted(record.status)
            if record.status in R.FAILING:
                self._announce(record.status, f"{record.tier} {record.op} {record.dtype}", record.sample,
                               record.message, None, None)
        elif kind == "skipped":
            self.tiers[message["tier"]] = TierResult(message["tier"], ran=False, reason=message["reason"])
        elif kind == "failed":
            self._error(job, f"the check itself raised: {message['error']}")
        if kind in ("done", "failed"):
            self._tier_time(job["tier"])
            self.progress.job_done(_describe(job))

    def _announce(self, status: str, what: str, sample: str, message: str,
                  max_abs: float | None, max_rel: float | None) -> None:
        """A FAIL or ERROR is printed when it happens: a long run shows its failures early
        and keeps them even if it is stopped before the reports are written."""
        errors = f" max abs {max_abs:.3g}, max rel {max_rel:.3g}" if max_abs is not None and max_rel is not None else ""
        detail = " ".join(message.split())[:300]
        self.progress.note(f"{status} {what} {sample}{errors}{': ' + detail if detail else ''}")

    def _tier_time(self, tier: str) -> None:
        self.tiers[tier].seconds = time.monotonic() - self.started.get(tier, time.monotonic())

    def _error(self, job: dict[str, Any], message: str) -> None:
        if job["tier"] == "accuracy":
            state = self._state(job)
            state.outcomes.append(SampleOutcome(-1, "setup", R.ERROR, message=message))
        else:
            self.records.append(Record(tier=job["tier"], op=job.get("case", job.get("group", job["tier"])),
                                       dtype=job.get("dtype", "-"), sample="-", status=R.ERROR,
                                       message=message))
        self.progress.counted(R.ERROR)

    def on_crash(self, crash: Crash) -> list[dict[str, Any]]:
        job = crash.job
        what = f"worker process {crash.what}"
        log = f"\n--- last lines of the worker's stderr ---\n{crash.log_tail}" if crash.log_tail else ""
        self.progress.note(f"gems-conformance: {_describe(job)}: {what}")
        if job["tier"] != "accuracy":
            self._error(job, what + log)
            self.progress.job_done(_describe(job))
            return []
        state = self._state(job)
        state.crashes += 1
        done = {o.index for o in state.outcomes}
        sample = crash.sample
        if sample is None or sample["index"] in done:
            state.outcomes.append(SampleOutcome(-1, "setup", R.ERROR, message=f"{what} outside any sample{log}"))
            self.progress.counted(R.ERROR)
            self.progress.job_done(_describe(job))
            return []
        state.outcomes.append(SampleOutcome(sample["index"], sample["label"], R.ERROR, sample["description"],
                                            message=f"{what} while running this sample{log}"))
        self.progress.counted(R.ERROR)
        if state.crashes >= MAX_CRASHES:
            state.outcomes.append(SampleOutcome(-1, "remaining", R.ERROR, message=(
                f"not run: the worker died {state.crashes} times on this op case and dtype")))
            self.progress.job_done(_describe(job))
            return []
        self.progress.requeued()
        self.progress.job_done(_describe(job))
        return [{**job, "skip": sorted(done | {sample["index"]})}]

    def finish(self) -> list[Record]:
        found = list(self.records)
        for (case, dtype), state in sorted(self.accuracy.items()):
            found += aggregate(case, state.aten, dtype, sorted(state.outcomes, key=lambda o: o.index))
        return found


def run(options: Options) -> Result:
    if threading.current_thread() is not threading.main_thread():
        return _run(options)  # signals reach the main thread only
    previous_sigint = signal.getsignal(signal.SIGINT)
    try:
        return _run(options)
    finally:
        signal.signal(signal.SIGINT, previous_sigint)


def _run(options: Options) -> Result:
    pool = Pool(worker_count(options), worker_env(options), options.timeout)
    progress = Progress(total=0, quiet=options.quiet)
    try:
        progress.note(f"gems-conformance: starting {pool.size} worker(s) for {options.device}"
                      f"{' (emulated)' if options.emulate else ''}")
        ready = pool.start()
        tiers: dict[str, TierResult] = {}
        jobs = _plan(options, ready, tiers)
        progress.total = len(jobs)
        for tier in tiers.values():
            if not tier.ran:
                progress.note(f"gems-conformance: {tier.name} tier skipped: {tier.reason}")
        collector = _Collector(ready, tiers, progress)
        unfinished = ""
        try:
            pool.run([j for j in jobs if j["tier"] != "performance"], collector.on_message, collector.on_crash)
            timed = [j for j in jobs if j["tier"] == "performance"]
            if timed:
                # fresh workers that tune as a user's process does (the others take configs
                # without benchmarking them)
                pool.close()
                pool = Pool(worker_count(options), worker_env(options, timing=True), options.timeout)
                pool.start()
                pool.run(timed, collector.on_message, collector.on_crash, exclusive=True)
        except KeyboardInterrupt:
            # stopped (Ctrl-C, SIGTERM from a time limit): what ran is still reported, and a
            # second Ctrl-C (a time limit signals the whole process group) does not stop that
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGINT, signal.SIG_IGN)
            unfinished = f"interrupted after {progress.done} of {progress.total} jobs"
            progress.note(f"gems-conformance: {unfinished}; writing the reports of what ran")
        progress.finish()
        return Result(facts=ready["facts"], tiers=tiers, records=collector.finish(), unfinished=unfinished)
    finally:
        pool.close()
