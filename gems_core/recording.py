"""What the calls running on each thread launch: the record the launch cache writes on every
launch, and per-call plans (:mod:`gems_core.plan_cache`), the native layer's recorder and
background compiles (:mod:`gems_core.background`) read."""

from __future__ import annotations

import threading
from typing import Any


class _Recording(threading.local):
    #: while set, every launch on this thread is appended as (cache, grid3, args, config,
    #: options, constexprs): see :func:`gems_core.plan_cache.record`
    calls: list[tuple[Any, ...]] | None = None
    #: while set, every compiled launch on this thread is appended as (launcher, grid3,
    #: arguments): the native layer's recorder (gems_core.native.recorder)
    native: list[tuple[Any, ...]] | None = None
    #: set when a gems kernel handed (part of) a call to ATen: such a call is not repeatable
    impure = False
    #: False inside a dispatched op call that has launched no kernel yet (which ATen may then
    #: still serve whole: gems_core.background); every launch sets it
    launched: bool | None = None
    #: that call's (args, kwargs): what ATen serving an in-place op inside it may not touch
    call_args: tuple[tuple[Any, ...], dict[str, Any]] | None = None
    #: that call is of a functional op (it writes none of its arguments): what it launched
    #: wrote only tensors it made, so ATen may still serve it whole after a launch
    free = False
    #: set when ATen served a call because its kernel still compiles in the background: the
    #: native layer records the call again later instead of refusing it for good
    deferred = False
    #: while the native layer records a call: its Philox draws from a device's default
    #: generator, ((seed_lo, seed_hi, offset_lo, offset_hi), counters) each, which a replay
    #: draws anew (gems_core.ops.random.philox_state notes them)
    philox: list[tuple[tuple[int, int, int, int], int]] | None = None

    def may_defer(self) -> bool:
        """Whether ATen may still serve the dispatched call this thread runs whole: it has
        launched nothing yet, or it is of a functional op."""
        return self.launched is False or self.free


recording = _Recording()
