"""Worker processes that survive what kernels do to them.

Each worker (``python -m gems_conformance.worker``) holds one job at a time, so when one dies
(a signal, an exit) or goes silent past the time limit (it is killed), the job and the sample
in flight are known exactly. The caller decides what a death means: it gets the job, the
sample that was running and what happened, and may queue the rest of the job again; a fresh
worker takes the place of the dead one.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

STARTUP_SECONDS = 300.0


@dataclass
class Crash:
    job: dict[str, Any]
    what: str  # "killed by signal SIGSEGV", "hung for more than 300 s", ...
    log_tail: str
    sample: dict[str, Any] | None  # the last "start" message of the job, if any


@dataclass
class _Worker:
    proc: subprocess.Popen
    log: Any
    buffer: bytes = b""
    ready: bool = False
    job: dict[str, Any] | None = None
    sample: dict[str, Any] | None = None
    last_seen: float = field(default_factory=time.monotonic)


class WorkerError(RuntimeError):
    """The workers cannot start (the backend cannot be selected, say)."""


class JobQueue:
    """Jobs waiting for a worker, by chain (``job["chain"]``; a job without one is a chain of
    its own). A worker takes the next job of the chain it ran last; a chain no live worker
    runs goes to the first worker free; the chains start in the order their first jobs came."""

    def __init__(self, jobs: list[dict[str, Any]] = ()) -> None:
        self.chains: dict[Any, deque] = {}
        self.order: deque = deque()  # chain keys, by their first job
        self.runner: dict[Any, Any] = {}  # chain key -> the worker running it
        self._unnamed = 0
        for job in jobs:
            self.add(job)

    def _key(self, job: dict[str, Any]) -> Any:
        if "chain" in job:
            return ("chain", job["chain"])
        self._unnamed += 1
        return ("job", self._unnamed)

    def add(self, job: dict[str, Any], front: bool = False) -> None:
        """Queue ``job``; ``front``: before everything else (a job run again after a crash)."""
        key = self._key(job) if not front else ("again", id(job))
        if key not in self.chains:
            self.chains[key] = deque()
            (self.order.appendleft if front else self.order.append)(key)
        self.chains[key].append(job)

    def __bool__(self) -> bool:
        return any(self.chains.values())

    def take(self, worker: Any, alive: list[Any]) -> dict[str, Any] | None:
        """The next job for ``worker``, or None where every waiting job is in a chain another
        live worker runs."""
        for key, runner in self.runner.items():
            if runner is worker and self.chains.get(key):
                return self.chains[key].popleft()
        for key in list(self.order):
            waiting = self.chains.get(key)
            if not waiting:
                self.order.remove(key)
                self.chains.pop(key, None)
                self.runner.pop(key, None)
                continue
            runner = self.runner.get(key)
            if runner is None or runner is worker or not any(w is runner for w in alive):
                self.runner[key] = worker
                return waiting.popleft()
        return None


class Pool:
    def __init__(self, size: int, env: Mapping[str, str], timeout: float) -> None:
        self.size = max(1, size)
        self.env = dict(env)
        self.timeout = timeout
        self.selector = selectors.DefaultSelector()
        self.workers: list[_Worker] = []
        self.ready_message: dict[str, Any] | None = None

    def _spawn(self) -> _Worker:
        log = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the worker
        proc = subprocess.Popen(
            [sys.executable, "-m", "gems_conformance.worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=self.env,
        )
        worker = _Worker(proc=proc, log=log)
        self.selector.register(proc.stdout, selectors.EVENT_READ, worker)  # type: ignore[arg-type]
        self.workers.append(worker)
        return worker

    def start(self) -> dict[str, Any]:
        """Start the workers; returns the first one's ``ready`` message."""
        for _ in range(self.size):
            self._spawn()
        while self.ready_message is None:
            self._poll(lambda *_: None, lambda crash: None, 1.0)
        return self.ready_message

    def run(self, jobs: list[dict[str, Any]], on_message: Callable[[dict[str, Any], dict[str, Any]], None],
            on_crash: Callable[[Crash], list[dict[str, Any]]], exclusive: bool = False) -> None:
        """Run ``jobs``; ``on_message(job, message)`` for every message, ``on_crash`` for every
        death, returning jobs to queue again. ``exclusive``: one job at a time in the whole
        pool (timings must not share the device). Jobs with the same ``"chain"`` run one after
        another in one worker, in order (jobs that compile the same kernels: the later ones
        find them compiled instead of compiling them at the same time elsewhere)."""
        queue = JobQueue(jobs)

        def requeue(crash: Crash) -> None:
            for job in reversed(on_crash(crash)):
                queue.add(job, front=True)

        while queue or any(w.job is not None for w in self.workers):
            for worker in self.workers:
                busy = any(w.job is not None for w in self.workers)
                if worker.ready and worker.job is None and queue and not (exclusive and busy):
                    job = queue.take(worker, self.workers)
                    if job is None:
                        continue  # what is left belongs to chains other workers are running
                    on_message(job, {"type": "sent"})
                    self._send(worker, job, on_crash, queue)
            self._poll(on_message, requeue, 1.0)

    def close(self) -> None:
        for worker in list(self.workers):
            self._retire(worker, kill=False)

    def _send(self, worker: _Worker, job: dict[str, Any], on_crash: Callable[[Crash], list[dict[str, Any]]],
              queue: JobQueue) -> None:
        worker.job, worker.sample, worker.last_seen = job, None, time.monotonic()
        try:
            worker.proc.stdin.write((json.dumps(job) + "\n").encode())  # type: ignore[union-attr]
            worker.proc.stdin.flush()  # type: ignore[union-attr]
        except (BrokenPipeError, OSError):
            crash = self._bury(worker, "was gone before its job started")
            for again in reversed(on_crash(crash) if crash is not None else []):
                queue.add(again, front=True)

    def _poll(self, on_message: Callable[[dict[str, Any], dict[str, Any]], None],
              on_crash: Callable[[Crash], None], wait: float) -> None:
        for key, _ in self.selector.select(timeout=wait):
            worker: _Worker = key.data
            if worker not in self.workers:
                continue  # retired earlier in this batch
            chunk = os.read(key.fd, 1 << 16)
            if not chunk:
                crash = self._bury(worker, None)
                if crash is not None:
                    on_crash(crash)
                continue
            worker.buffer += chunk
            worker.last_seen = time.monotonic()
            *lines, worker.buffer = worker.buffer.split(b"\n")
            for line in lines:
                if line.strip():
                    self._handle(worker, json.loads(line), on_message)
        now = time.monotonic()
        for worker in list(self.workers):
            if not worker.ready:
                limit = max(self.timeout, STARTUP_SECONDS)
            else:
                limit = float((worker.job or {}).get("timeout", self.timeout))
            if (worker.job is not None or not worker.ready) and now - worker.last_seen > limit:
                crash = self._bury(worker, f"hung for more than {limit:.0f} s and was killed")
                if crash is not None:
                    on_crash(crash)

    def _handle(self, worker: _Worker, message: dict[str, Any], on_message: Callable[..., None]) -> None:
        kind = message["type"]
        if kind == "fatal":
            raise WorkerError(message["error"])
        if kind == "ready":
            worker.ready = True
            if self.ready_message is None:
                self.ready_message = message
            return
        job = worker.job
        if job is None:
            return
        if kind == "start":
            worker.sample = message
        on_message(job, message)
        if kind in ("done", "failed"):
            worker.job, worker.sample = None, None

    def _bury(self, worker: _Worker, hung: str | None) -> Crash | None:
        """Remove a dead (or hung) worker, start another; the crash if it held a job."""
        was_ready = worker.ready
        job, sample = worker.job, worker.sample
        what = hung or self._death(worker)
        tail = self._retire(worker, kill=True)
        if not was_ready:
            raise WorkerError(f"a worker {what} while starting:\n{tail}")
        if len(self.workers) < self.size:
            self._spawn()
        if job is None:
            return None
        return Crash(job=job, what=what, log_tail=tail, sample=sample)

    @staticmethod
    def _death(worker: _Worker) -> str:
        try:
            code = worker.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            return "closed its output but did not exit"
        if code < 0:
            try:
                return f"was killed by signal {signal.Signals(-code).name}"
            except ValueError:
                return f"was killed by signal {-code}"
        return f"exited with code {code}"

    def _retire(self, worker: _Worker, kill: bool) -> str:
        self.selector.unregister(worker.proc.stdout)  # type: ignore[arg-type]
        self.workers.remove(worker)
        try:
            worker.proc.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass
        # nothing more is read from it: a worker still writing (its large ``ready`` message,
        # when the run ended before it was read) meets a closed pipe and exits, rather than
        # blocking on a full one until the wait below times out
        worker.proc.stdout.close()  # type: ignore[union-attr]
        if kill and worker.proc.poll() is None:
            worker.proc.kill()
        try:
            worker.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.proc.kill()
            worker.proc.wait()
        worker.log.seek(0)
        lines = worker.log.read().decode(errors="replace").splitlines()
        worker.log.close()
        return "\n".join(lines[-20:])
