"""Did gems' implementation of an overload serve a call, or did the call reach ATen?

The dispatcher gives no answer, so gems' dispatcher kernels count the calls they answer, per
overload (:func:`gems_core.dispatch.served_calls`), and the native layer the calls it replays
(:func:`gems_core.dispatch.native_hits`); a watch compares the counts before and after.
"""

from __future__ import annotations

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
    """``with RouteWatch(codes) as watch: ...`` then ``watch.hit``: did gems serve a call of
    an overload ``codes`` implement inside the block, through its Python kernel (a result,
    or an error it raised) or the native dispatch layer's replay of a recipe recorded from
    that kernel. Counted by the dispatcher's kernels, so a call on another thread counts as
    well (autograd runs a CUDA backward on a thread of its own), and a kernel that declines a
    call, which ATen then serves, does not."""

    def __init__(self, codes: Iterable[CodeType]) -> None:
        self.codes = frozenset(codes)
        self.hit = False
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

    def __enter__(self) -> RouteWatch:  # noqa: PYI034
        self._before = self._served()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._served() > self._before:
            self.hit = True
