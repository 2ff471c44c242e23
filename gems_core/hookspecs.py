"""The vendor contract: every hook a gems backend plugin may implement.

A backend is a Python package that registers a module (or object) in the entry-point group
``gems_core.backends`` and implements these hooks with ``@gems_core.hookimpl``::

    [project.entry-points."gems_core.backends"]
    mychip = "gems_backend_mychip.plugin"

Only ``gems_descriptor`` and ``gems_detect`` are required. pluggy validates each
implementation against these specs when the plugin is registered: an argument name that is
not in the spec, or a hook name that does not exist here, is rejected with a precise message.

The hooks run once, when gems loads the backend; their answers are checked and frozen into
plain lookup tables (:mod:`gems_core.policy`): an entry that names no ATen operator, torch dtype
or core tunable, a config outside the descriptor's limits, or an answer of the wrong type is
left out with a ``PolicyWarning`` naming the backend and the hook, and an exception a hook
raises becomes a ``BackendError`` naming both. Nothing here is called while a model runs, so a
hook may be slow-ish, but it must not run vendor CLIs, edit ``sys.path`` or patch globals.

Names used in answers:

* op names are ATen names: ``"add.Tensor"`` for one overload, ``"add"`` for all of them;
* config keys are the names of the core's tunable kernels (``python -m gems_core info``
  lists them with their parameters); each config's ``params`` must be parameters of that
  kernel (``gems_core.configs`` has a typed constructor per tunable);
* dtype names are torch's (``"float32"``);
* variant points are the keys of ``gems_core.variants.POINTS``, which documents the
  signature of each (``gems_kernel_variants``).

A backend's own kernels (variants) that launch outside gems' launch cache report their
launches through :mod:`gems_core.launches`, so that the native dispatch layer repeats them:
that module, this one, :mod:`gems_core.contract`, ``gems_core.configs``,
``gems_core.shipped`` and the names ``gems_core`` exports are the public contract a backend
imports (:data:`PUBLIC_MODULES`); everything else in gems_core may change between releases.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence

import pluggy

from .contract import (
    BackendDescriptor,
    DetectedDevice,
    Deviation,
    KernelConfig,
    KernelOverride,
    KernelVariant,
    NativeLaunch,
    OpGate,
)

#: the gems_core modules a backend plugin may import
PUBLIC_MODULES = ("gems_core", "gems_core.contract", "gems_core.hookspecs", "gems_core.configs",
                  "gems_core.shipped", "gems_core.launches")

PROJECT = "gems_core"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec(firstresult=True)
def gems_descriptor() -> BackendDescriptor:  # type: ignore[empty-body]
    """Required. Who this backend is: name (the ``GEMS_DEVICE`` value), vendor, torch device
    type, dispatch key, Triton target, limits, dtype support, and the Triton and gems-core
    version ranges it supports."""


@hookspec(firstresult=True)
def gems_detect() -> DetectedDevice | None:
    """Required. Is this vendor's hardware present? Answer cheaply from what torch already
    knows (the build's ``torch.version`` fields, device names, vendor attributes on
    ``torch``) and return the device's name and arch key, or ``None``. Never start a vendor
    CLI."""


@hookspec(firstresult=True)
def gems_tuned_configs(arch: str) -> Mapping[str, Sequence[KernelConfig]]:
    """Configs per tunable kernel for the chip ``arch`` (as returned by detection, or the
    descriptor's target arch when emulating). One config fixes the choice; several are
    autotuned once per shape bucket and the choice is persisted. A kernel not named keeps
    the core's defaults."""


@hookspec(firstresult=True)
def gems_tuned_table(device_model: str) -> str | os.PathLike[str] | Mapping[str, object] | None:
    """The shipped tuning table of the device model ``device_model`` (as the driver names it),
    or ``None``: a path to a JSON file in the package (``gems_core.shipped.package_table``
    finds ``tuned/<model>.json``) or the table itself, as ``python -m gems_core tune`` writes
    it. Asked once per device model, the first time a kernel is tuned for it; its choices
    come before the on-disk tuning cache, and stale or damaged entries are ignored
    (:mod:`gems_core.shipped`)."""


@hookspec(firstresult=True)
def gems_unsupported_ops() -> Iterable[str | OpGate]:
    """ATen ops (or dtypes of an op, as :class:`OpGate`) that must stay on ATen on this chip.
    Dtypes the descriptor marks unsupported are gated for every op automatically."""


@hookspec(firstresult=True)
def gems_compiler_options(arch: str) -> Mapping[str, Mapping[str, object]]:
    """Extra options this chip's Triton accepts, per tunable kernel name (``"*"`` applies to
    every kernel). Options the running Triton does not know are dropped and reported."""


@hookspec(firstresult=True)
def gems_known_deviations() -> Iterable[Deviation]:
    """Accepted differences on this chip (tolerance overrides or expected failures), each
    with its reason. The conformance suite reports them as XFAIL, or XPASS once fixed."""


@hookspec(firstresult=True)
def gems_kernel_overrides() -> Iterable[KernelOverride]:
    """Rare: replacement implementations of single ATen overloads for this chip, only where
    the portable kernel cannot serve it."""


@hookspec(firstresult=True)
def gems_kernel_variants(arch: str) -> Iterable[KernelVariant]:
    """The chip's own kernels for the core's variant points (``gems_core.variants.POINTS``
    names them and their signatures): each is offered every call at its point and serves
    what it accepts; the portable kernel serves the rest. For a kernel a chip can run much
    faster in its own form (a vendor-specific language or instruction set) while the core's
    kernel stays the reference everywhere else."""


@hookspec(firstresult=True)
def gems_native_launch() -> NativeLaunch | None:
    """How compiled kernels are launched on this chip, for the native dispatch layer (which
    repeats a call's recorded launches from C++, :mod:`gems_core.native`): the driver's entry
    points as addresses (:class:`~gems_core.contract.NativeLaunch`; the NVIDIA backend looks
    them up in NVIDIA's driver library, a HIP backend would in HIP's). Asked once, when gems
    selects a backend that runs kernels on a device, of the backend whose hardware runs them
    (under ``GEMS_EMULATE``, the one that detects the device present). Without an answer the
    layer stays off and every call takes the Python path; an answer that raises, or whose
    addresses are not ints, turns it off with the reason in ``python -m gems_core info``."""
