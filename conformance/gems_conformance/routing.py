"""Did gems' implementation of an overload run, or did the call reach ATen?

The dispatcher gives no answer, so the suite watches for the Python function gems registered
(or the backend's override of it) being entered, with a profile hook that removes itself on
the first hit: cheap on the gems path, and the ATen path runs no Python at all.
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
    """``with RouteWatch(codes) as watch: ...`` then ``watch.hit``: was any of ``codes``
    entered inside the block, or did the native dispatch layer replay a call of an overload
    they implement (a replay runs no Python: its recipe was recorded from gems' kernel)."""

    def __init__(self, codes: Iterable[CodeType]) -> None:
        self.codes = frozenset(codes)
        self.hit = False
        self._previous: Any = None
        self._ops: frozenset[str] | None = None  # the overloads ``codes`` implement, once needed
        self._replays = 0

    def _native_replays(self) -> int:
        from gems_core.dispatch import native_hits

        if not self.codes:
            return 0
        if self._ops is None:
            overrides = runtime.current().policy.overrides
            self._ops = frozenset(name for name, impl in registry.all_impls().items()
                                  if {_code_of(impl.fn), _code_of(overrides.get(name))} & self.codes)
        # counted over every registration, so a use_gems() block opened and closed inside
        # the watch still shows its replays at the exit
        return native_hits(self._ops)

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code in self.codes:
            self.hit = True
            sys.setprofile(self._previous)

    def __enter__(self) -> RouteWatch:  # noqa: PYI034
        self._replays = self._native_replays()
        self._previous = sys.getprofile()
        if self.codes:
            sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(self._previous)
        if not self.hit and self._native_replays() > self._replays:
            self.hit = True
