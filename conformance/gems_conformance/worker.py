"""A worker process of the suite: ``python -m gems_conformance.worker``.

The CLI runs every check in workers like this one, so a kernel that kills its process
(segfault, abort, a hang) costs one sample, not the run. The protocol is JSON lines: jobs
arrive on stdin, messages leave on the process's original stdout; anything else that writes
to stdout (a kernel's print, a library's banner) is sent to stderr, which the CLI keeps as
the worker's log. GEMS_DEVICE and GEMS_EMULATE come from the environment the CLI sets.

Messages: ``ready`` (once: the backend's facts, the op cases, why performance is skipped),
then per job ``start`` (a sample about to run), ``outcome`` (one sample's result),
``record`` (a finished report record), ``skipped`` (a whole tier), and ``done``.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
from typing import Any, TextIO

#: an error after which the device is unusable for the rest of the process
POISONED = ("illegal memory access", "device-side assert", "CUDA error: unspecified launch failure",
            "hipErrorIllegalAddress", "an illegal instruction")


class Channel:
    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def send(self, kind: str, **payload: Any) -> None:
        self.stream.write(json.dumps({"type": kind, **payload}) + "\n")
        self.stream.flush()


def _load_backend() -> str | None:
    from gems_core import plugins, runtime, settings

    try:
        runtime.current()
        return None
    except plugins.BackendError as exc:
        requested = settings.get("GEMS_DEVICE")
        if requested and requested not in plugins.discover():
            raise  # a usage error, not a property of the backend
        return str(exc)


def _start_native_build() -> None:
    """The native dispatch layer builds in a thread where the backend launches through it
    (a minute on a new machine, once): samples run meanwhile, without it, instead of every
    worker's first sample waiting for the build in sync mode."""
    from gems_core import native, runtime

    execution = runtime.current().selection.execution
    if not execution.interpreter and execution.launch is not None and native.wanted():
        native.build_in_background()


def _ready(channel: Channel, load_error: str | None) -> None:
    from gems_core import settings

    from .cases import all_cases
    from .statement import describe_backend

    facts = describe_backend(settings.get("GEMS_DEVICE"), load_error)
    cases = {
        name: {"dtypes": [str(d).replace("torch.", "") for d in case.dtypes], "aten": list(case.aten)}
        for name, case in sorted(all_cases().items())
    }
    perf_skip = "the backend did not load"
    if not load_error:
        from .performance import skip_reason

        perf_skip = skip_reason()
    semantics: list[str] = []
    if not load_error:
        from .semantics_tier import GROUPS

        semantics = list(GROUPS)
    channel.send("ready", facts=facts, cases=cases, semantics=semantics, performance_skip=perf_skip)


def _run_accuracy(channel: Channel, job: dict[str, Any]) -> bool:
    """Returns False when the device is poisoned and this process must end."""
    import torch

    from .accuracy import check_case
    from .cases import all_cases

    case = all_cases()[job["case"]]
    dtype = getattr(torch, job["dtype"])

    def started(index: int, sample: Any) -> None:
        channel.send("start", id=job["id"], index=index, label=sample.label, description=sample.describe())

    healthy = True
    for outcome in check_case(case, dtype, job["profile"], job.get("skip", ()), started):
        channel.send("outcome", id=job["id"], outcome=outcome.to_json())
        if outcome.message and any(word in outcome.message for word in POISONED):
            healthy = False
            break
    return healthy


def _run(channel: Channel, job: dict[str, Any], load_error: str | None) -> bool:
    tier = job["tier"]
    healthy = True
    if tier == "contract":
        from .contract_tier import check_contract

        for record in check_contract(load_error):
            channel.send("record", id=job["id"], record=record.to_json())
    elif tier == "compile":
        from .compile_tier import check_compile

        found, why = check_compile(job.get("ops", ()), job.get("profile", "quick"))
        if why:
            channel.send("skipped", id=job["id"], tier=tier, reason=why)
        for record in found:
            channel.send("record", id=job["id"], record=record.to_json())
    elif tier == "accuracy":
        healthy = _run_accuracy(channel, job)
    elif tier == "semantics":
        from .semantics_tier import check_group

        for record in check_group(job["group"], tuple(job.get("ops", ())), job.get("profile", "full")):
            channel.send("record", id=job["id"], record=record.to_json())
            if any(word in record.message for word in POISONED):
                healthy = False
                break
    elif tier == "performance":
        import torch

        from .cases import all_cases
        from .performance import measure

        record = measure(all_cases()[job["case"]], getattr(torch, job["dtype"]), job["profile"])
        channel.send("record", id=job["id"], record=record.to_json())
    else:
        raise ValueError(f"unknown tier {tier!r}")
    channel.send("done", id=job["id"])
    return healthy


def main() -> int:
    channel = Channel(os.fdopen(os.dup(1), "w", buffering=1))
    os.dup2(2, 1)
    faulthandler.enable(file=sys.stderr, all_threads=True)
    try:
        from gems_core import settings

        threads = settings.get("GEMS_CONFORMANCE_THREADS")
        if threads:
            import torch

            torch.set_num_threads(threads)
        load_error = _load_backend()
        if load_error is None:
            _start_native_build()
        _ready(channel, load_error)
    except BrokenPipeError:
        raise
    except Exception as exc:  # noqa: BLE001 - sent to the CLI, which reports it
        channel.send("fatal", error=f"{type(exc).__name__}: {exc}")
        return 2
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        try:
            healthy = _run(channel, job, load_error)
        except Exception as exc:  # noqa: BLE001 - a bug in a check: report it against the job, keep going
            channel.send("failed", id=job["id"], error=f"{type(exc).__name__}: {exc}"[:1000])
            healthy = True
        if not healthy:
            return 3
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # the suite stopped reading (its run ended): nothing is lost
        os._exit(0)
