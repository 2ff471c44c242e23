"""Did gems' implementation of an overload run, or did the call reach ATen?

The dispatcher gives no answer, so the suite watches for the Python function gems registered
(or the backend's override of it) being entered, with a profile hook that removes itself on
the first hit (cheap on the gems path; the ATen path runs no Python at all), and compares the
counts of calls gems' dispatcher kernels answered (:func:`gems_core.dispatch.served_calls`,
any thread) and the native layer replayed (:func:`gems_core.dispatch.native_hits`) before
and after.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from types import CodeType
from typing import Any

from gems_core import registry, runtime


def _code_of(fn: Callable[..., Any] | None) -> CodeType | None:
    if fn is None:
        return None
    for candidate in (fn, getattr(fn, "func", None), vars(type(fn)).get("__call__")):
        candidate = getattr(candidate, "__func__", candidate)
        code = getattr(candidate, "__code__", None)
        if isinstance(code, CodeType):
            return code
    return None


def implementations(overloads: Iterable[str]) -> dict[str, frozenset[CodeType]]:
    """For each overload gems implements: the code objects that mean "gems served it"."""
    impls = registry.all_impls()
    overrides = runtime.current().policy.overrides
    found: dict[str, frozenset[CodeType]] = {}
    for name in overloads:
        name = name.removesuffix(".default")
        if name not in impls:
            continue
        fns = [impls[name].fn, overrides.get(name)]
        found[name] = frozenset(code for fn in fns if fn is not None and (code := _code_of(fn)))
    return found


class RouteWatch:
    """``with RouteWatch(codes) as watch: ...`` then ``watch.hit``: did a call inside the block
    reach gems' implementation of an overload ``codes`` implement: its Python function was
    entered on the watching thread (a profile hook that removes itself on the first hit), or
    gems' dispatcher kernel answered a call of it on any thread (autograd runs a CUDA
    backward on a thread of its own), or the native layer replayed a recipe recorded from it.

    ``watch.served`` is stricter: gems answered a call (a result, or an error it raised),
    counted by the dispatcher's kernels and the native layer; a call gems' function entered
    and declined, which ATen then served, is not served."""

    def __init__(self, codes: Iterable[CodeType]) -> None:
        self.codes = frozenset(codes)
        self.hit = False
        self.served = False
        self._previous: Any = None
        self._ops: frozenset[str] | None = None  # the overloads ``codes`` implement, once needed
        self._before = 0

    def _served(self) -> int:
        from gems_core.dispatch import native_hits, served_calls

        if not self.codes:
            return 0
        if self._ops is None:
            overrides = runtime.current().policy.overrides
            self._ops = frozenset(name for name, impl in registry.all_impls().items()
                                  if {_code_of(impl.fn), _code_of(overrides.get(name))} & self.codes)
        # counted over every registration, so a use_gems() block opened and closed inside
        # the watch still shows its calls at the exit
        return served_calls(self._ops) + native_hits(self._ops)

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code in self.codes:
            self.hit = True
            sys.setprofile(self._previous)

    def __enter__(self) -> RouteWatch:  # noqa: PYI034
        self._before = self._served()
        self._previous = sys.getprofile()
        if self.codes:
            sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(self._previous)
        if self._served() > self._before:
            self.served = self.hit = True
