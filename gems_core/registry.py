"""The operator registry: ops register themselves where they are defined.

    @aten_op("add.Tensor", "add.Scalar")
    def add(self, other, *, alpha=1): ...

No central table: importing an op module is what registers its overloads, and the tunable
kernels it declares (:class:`gems_core.tuning.Tunable`). The op modules are imported once a
backend is selected (kernels must be defined after the interpreter setting is known), by
:func:`load_ops`, which finds them by walking the package :mod:`gems_core.ops`.
"""

from __future__ import annotations

import importlib
import pkgutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from . import runtime
from .policy import check_tunables

_IMPLS: dict[str, OpImpl] = {}
#: tunable kernel name -> its :class:`gems_core.tuning.Tunable`, as the kernels declare them
TUNABLES: dict[str, Any] = {}
#: op module -> why it failed to import (shown by ``python -m gems_core info``)
FAILED_MODULES: dict[str, str] = {}
_loaded = False


@dataclass(frozen=True)
class OpImpl:
    name: str  # ATen overload, e.g. "add.Tensor"
    fn: Callable[..., Any]
    module: str
    #: registered on the backend's Autograd key: the op supplies its own backward (an
    #: autograd.Function) or must not be decomposed by a composite ATen implementation
    autograd: bool = False
    #: repeated calls may be served by the native dispatch layer (gems_core.native); False
    #: for ops whose launches take values the call's arguments do not determine (random
    #: numbers: a fresh seed or offset per call)
    native: bool = True
    #: named forms of its calls, each a predicate on the call's arguments (a backend's
    #: :class:`~gems_core.contract.OpGate` may keep a form on gems while it gates the rest)
    forms: tuple[tuple[str, Callable[..., bool]], ...] = ()
    #: its kernel declines every call with a tensor of more than zero dims on a device of
    #: another type (``copy_`` between host and device memory): the native layer sends such
    #: calls to ATen without Python
    foreign: bool = False

    @property
    def packet(self) -> str:
        return self.name.split(".", 1)[0]


def _check_schema(name: str) -> None:
    packet, _, overload = name.partition(".")
    try:
        torch._C._dispatch_find_schema_or_throw(f"aten::{packet}", overload or "")
    except RuntimeError as exc:
        raise ValueError(f"{name!r} is not an ATen operator overload") from exc


def aten_op(
    *names: str, autograd: bool = False, native: bool = True, forms: dict[str, Callable[..., bool]] | None = None,
    foreign: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as gems' implementation of ATen overloads ``names``
    (written as ``"packet.overload"``; ``"relu"`` for the default overload). The function
    takes the overload's ATen arguments and may return ``NotImplemented`` to hand a call it
    does not serve (an unusual dtype, say) to ATen.

    ``autograd=True`` registers on the backend's Autograd key (``AutogradCUDA``...): for ops
    whose ATen implementation is a composite that would decompose before reaching the
    backend key, and for ops that bring their own backward.

    ``native=False`` keeps every call on the Python path: for ops whose kernel arguments
    are not determined by the call's arguments alone (a random seed drawn per call).

    ``forms``: named classes of calls, each a predicate taking the call's arguments as the
    function does, that a backend may keep on gems while it gates the op to ATen
    (``OpGate(op, keep=(name,))``).

    ``foreign=True`` declares that the function returns ``NotImplemented`` for every call
    with a tensor argument of more than zero dims on a device of another type than the
    backend's (a copy between host and device memory): the native dispatch layer then sends
    those calls to ATen without calling it."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        for name in names:
            _check_schema(name)
            if name in _IMPLS and _IMPLS[name].fn is not fn:
                raise ValueError(f"{name} is registered twice: {_IMPLS[name].module} and {fn.__module__}")
            _IMPLS[name] = OpImpl(name=name, fn=fn, module=fn.__module__, autograd=autograd, native=native,
                                  forms=tuple((forms or {}).items()), foreign=foreign)
        return fn

    return decorate


def load_ops() -> dict[str, OpImpl]:
    """Import every module of :mod:`gems_core.ops` (once) and return the registry."""
    global _loaded
    if not _loaded:
        runtime.current()  # kernels must be defined after the interpreter setting is known

        ops = importlib.import_module(f"{__package__}.ops")
        for info in pkgutil.iter_modules(ops.__path__):
            name = f"{ops.__name__}.{info.name}"
            try:
                importlib.import_module(name)
            except Exception as exc:  # one broken op module must not take the others down
                FAILED_MODULES[name] = f"{type(exc).__name__}: {exc}"
                warnings.warn(f"gems: op module {name} failed to load: {exc}", RuntimeWarning, stacklevel=2)
        _loaded = True
    return _IMPLS


def all_impls() -> dict[str, OpImpl]:
    return dict(load_ops())


def forms(op: str) -> dict[str, list[str]]:
    """The named forms (:func:`aten_op`'s ``forms``) of ``op``'s overloads ("packet" or
    "packet.overload"), by overload: what a backend's gate may keep on gems."""
    return {name: [form for form, _ in impl.forms] for name, impl in load_ops().items()
            if op in (name, impl.packet) and impl.forms}


def _check_policy(rt: runtime.Runtime) -> None:
    """Check ``rt``'s policy against what the ops declare (loading them first)."""
    served = load_ops()
    rt.policy = check_tunables(rt.policy, rt.selection.backend.name, rt.limits, TUNABLES, served, forms)


runtime.on_select(_check_policy)
