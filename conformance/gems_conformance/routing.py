"""Did gems' implementation of an overload run, or did the call reach ATen?

The suite compares the counts of calls gems' dispatcher kernels answered
(:func:`gems_core.dispatch.served_calls`, any thread) and the native layer replayed
(:func:`gems_core.dispatch.native_hits`) before and after a block; a gated call is also
watched for entering the Python function gems registered (or the backend's override of it),
with a profile hook that removes itself on the first entry.
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


_by_code: tuple[Any, dict[CodeType, list[str]]] | None = None


def _overloads_by_code() -> dict[CodeType, list[str]]:
    """code object -> the overloads whose implementation (or the backend's override) it is,
    built once per registry and policy (a watch per sample would otherwise scan every
    registered overload)."""
    global _by_code
    impls = registry.load_ops()
    overrides = runtime.current().policy.overrides
    # what each name is bound to now (a test may register or replace an implementation)
    key = (tuple((name, id(impl.fn)) for name, impl in impls.items()),
           tuple((name, id(fn)) for name, fn in overrides.items()))
    if _by_code is None or _by_code[0] != key:
        found: dict[CodeType, list[str]] = {}
        for name, impl in impls.items():
            for fn in (impl.fn, overrides.get(name)):
                code = _code_of(fn)
                if code is not None and name not in found.setdefault(code, []):
                    found[code].append(name)
        _by_code = (key, found)
    return _by_code[1]


class RouteWatch:
    """``with RouteWatch(codes) as watch: ...`` then ``watch.hit``: did gems answer a call
    inside the block of an overload ``codes`` implement (with a result, or an error it raised)?
    Counted by gems' dispatcher kernels on any thread (autograd runs a CUDA backward on a
    thread of its own) and by the native layer's replays. A call gems' function entered and
    declined (it returned NotImplemented), which ATen then served, is not a hit: that is the
    silent fallback a test of gems must fail on. ``watch.served`` is ``watch.hit``.

    ``watch.entered`` is looser: gems' Python function was entered on the watching thread (a
    profile hook that removes itself on the first entry), or a call was answered. A call the
    backend gates to ATen must not even enter it. ``entries=False`` leaves the hook out
    (``entered`` then means answered): nothing is paid per Python call of the block."""

    def __init__(self, codes: Iterable[CodeType], entries: bool = True) -> None:
        self.codes = frozenset(codes)
        self.entries = entries
        self.entered = False
        self.hit = False
        self._previous: Any = None
        self._ops: frozenset[str] | None = None  # the overloads ``codes`` implement, once needed
        self._before = 0

    @property
    def served(self) -> bool:
        return self.hit

    def _served(self) -> int:
        from gems_core.dispatch import native_hits, served_calls

        if not self.codes:
            return 0
        if self._ops is None:
            by_code = _overloads_by_code()
            self._ops = frozenset(name for code in self.codes for name in by_code.get(code, ()))
        # counted over every registration, so a use_gems() block opened and closed inside
        # the watch still shows its calls at the exit
        return served_calls(self._ops) + native_hits(self._ops)

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code in self.codes:
            self.entered = True
            sys.setprofile(self._previous)

    def __enter__(self) -> RouteWatch:  # noqa: PYI034
        self._before = self._served()
        self._previous = sys.getprofile()
        if self.codes and self.entries:
            sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(self._previous)
        if self._served() > self._before:
            self.entered = self.hit = True
