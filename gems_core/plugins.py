"""Discovery and validation of backend plugins.

Each plugin gets a pluggy ``PluginManager`` of its own, so its answers cannot mix with
another vendor's and pluggy's signature validation names the offending plugin. Hooks are
called here, once; what they answer is checked and kept as plain data.
"""

from __future__ import annotations

import importlib
import traceback
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import pluggy
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from . import hookspecs
from ._version import __version__
from .contract import BackendDescriptor, DetectedDevice

ENTRY_POINT_GROUP = "gems_core.backends"
BUILTIN_BACKENDS = {"cpu": "gems_core.backends.cpu"}


class BackendError(RuntimeError):
    """A backend cannot be selected or loaded; the message says why and what to do."""


@dataclass
class InstalledBackend:
    """One backend as found: from an entry point, or built in."""

    name: str
    source: str  # "entry point <value>" or "built-in"
    distribution: str | None = None
    version: str | None = None
    builtin: bool = False
    status: str = "unloaded"  # loaded | failed
    error: str | None = None
    traceback: str | None = None
    descriptor: BackendDescriptor | None = None
    detected: DetectedDevice | None = None
    manager: pluggy.PluginManager | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return self.status == "loaded"

    def call(self, hook: str, **kwargs: Any) -> Any:
        """Call one of this plugin's hooks (load time only); what it raises comes back as a
        :class:`BackendError` that names the backend and the hook."""
        assert self.manager is not None, f"backend {self.name} is not loaded"
        try:
            return getattr(self.manager.hook, hook)(**kwargs)
        except Exception as exc:  # name the plugin and the hook, not only the bare error
            raise BackendError(f"gems backend {self.name!r}: {hook}() raised {type(exc).__name__}: {exc}") from exc


def _manager_for(plugin: object, name: str) -> pluggy.PluginManager:
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    manager.register(plugin, name=name)
    manager.check_pending()
    return manager


def _check_range(descriptor: BackendDescriptor, what: str, spec_text: str, installed: Version) -> None:
    if not spec_text:
        return
    try:
        spec = SpecifierSet(spec_text)
    except InvalidSpecifier as exc:
        raise BackendError(f"backend {descriptor.name!r}: invalid {what} range {spec_text!r}") from exc
    if not spec.contains(installed, prereleases=True):
        raise BackendError(
            f"backend {descriptor.name!r} supports {what} {spec_text}, but {what} "
            f"{installed} is installed"
        )


def check_core_range(descriptor: BackendDescriptor) -> None:
    _check_range(descriptor, "gems-core", descriptor.gems_core_versions, Version(__version__))


def check_triton_range(descriptor: BackendDescriptor) -> None:
    """Checked when the backend runs on its own chip; emulation runs on this Triton instead."""
    from .compat import TRITON_VERSION

    _check_range(descriptor, "triton", descriptor.triton_versions, TRITON_VERSION)


def _load(backend: InstalledBackend, target: str) -> None:
    try:
        module_name, _, attr = target.partition(":")
        plugin: object = importlib.import_module(module_name)
        if attr:
            for part in attr.split("."):
                plugin = getattr(plugin, part)
        backend.manager = _manager_for(plugin, backend.name)
        for required in ("gems_descriptor", "gems_detect"):
            if not backend.manager.hook.__dict__[required].get_hookimpls():
                raise BackendError(f"backend {backend.name!r} does not implement the required hook {required}()")
        descriptor = backend.call("gems_descriptor")
        if not isinstance(descriptor, BackendDescriptor):
            raise BackendError(
                f"gems_descriptor() of {backend.name!r} returned {type(descriptor).__name__}, "
                "not a gems_core.BackendDescriptor"
            )
        if descriptor.name != backend.name:
            raise BackendError(
                f"entry point {backend.name!r} names a backend whose descriptor says "
                f"{descriptor.name!r}; they must agree"
            )
        check_core_range(descriptor)
        backend.descriptor = descriptor
        detected = backend.call("gems_detect")
        if detected is not None and not isinstance(detected, DetectedDevice):
            raise BackendError(f"gems_detect() of {backend.name!r} must return DetectedDevice or None")
        backend.detected = detected
        backend.status = "loaded"
    except Exception as exc:  # a broken plugin must never break the others
        backend.status = "failed"
        backend.error = f"{type(exc).__name__}: {exc}"
        backend.manager = None
        backend.traceback = traceback.format_exc()


def discover() -> dict[str, InstalledBackend]:
    """Every installed backend, loaded (or marked failed with the cause), built-ins first."""
    found: dict[str, InstalledBackend] = {}
    for name, module in BUILTIN_BACKENDS.items():
        backend = InstalledBackend(name=name, source="built-in", builtin=True, version=__version__)
        _load(backend, module)
        found[name] = backend
    for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if ep.name in found:
            continue  # a duplicate registration (e.g. an editable and a regular install)
        dist = getattr(ep, "dist", None)
        backend = InstalledBackend(
            name=ep.name,
            source=f"entry point {ep.value}",
            distribution=dist.metadata["Name"] if dist is not None else None,
            version=dist.version if dist is not None else None,
        )
        _load(backend, ep.value)
        found[ep.name] = backend
    return found
