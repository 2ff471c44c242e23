"""The progress line on stderr: what is being checked, counts so far, and an estimate of the
time left. Redrawn in place on a terminal; one line per finished job elsewhere (CI logs)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from .records import STATUSES

_SHORT = {"PASS": "pass", "FALLBACK": "fallback", "NOT SUPPORTED": "n/s", "XFAIL": "xfail",
          "XPASS": "xpass", "FAIL": "FAIL", "ERROR": "ERROR"}


class Progress:
    def __init__(self, total: int, quiet: bool = False, stream: TextIO | None = None) -> None:
        self.total = total
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.done = 0
        self.counts = {status: 0 for status in STATUSES}
        self.current = ""
        self.started = time.monotonic()
        self._last_draw = 0.0

    def note(self, text: str) -> None:
        if not self.quiet:
            self._clear()
            print(text, file=self.stream, flush=True)

    def checking(self, what: str) -> None:
        self.current = what
        if self.tty and time.monotonic() - self._last_draw > 0.2:
            self._draw()

    def counted(self, status: str) -> None:
        self.counts[status] = self.counts.get(status, 0) + 1

    def job_done(self, what: str) -> None:
        self.done += 1
        self.current = what
        self._draw(newline=not self.tty)

    def requeued(self) -> None:
        self.total += 1

    def finish(self) -> None:
        if not self.quiet and self.tty:
            self._draw()
            print(file=self.stream, flush=True)

    def eta(self) -> str:
        if not self.done:
            return "?"
        left = (time.monotonic() - self.started) / self.done * max(self.total - self.done, 0)
        return f"{int(left // 60)}m{int(left % 60):02d}s"

    def line(self) -> str:
        counts = " ".join(f"{_SHORT[s]} {n}" for s, n in self.counts.items() if n)
        return f"[{self.done}/{self.total}] {self.current} | {counts or 'no results yet'} | ETA {self.eta()}"

    def _clear(self) -> None:
        if self.tty:
            self.stream.write("\r\033[K")

    def _draw(self, newline: bool = False) -> None:
        if self.quiet:
            return
        self._last_draw = time.monotonic()
        if self.tty:
            self.stream.write("\r\033[K" + self.line()[: 200])
            self.stream.flush()
        elif newline:
            print(self.line(), file=self.stream, flush=True)
