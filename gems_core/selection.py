"""Which backend gems runs on, and why.

Rules (explicit selection beats guessing):

* ``GEMS_DEVICE=<name>``: that backend. Unknown names raise and list what is installed; a
  backend that failed to load raises with its cause; one whose hardware is absent raises
  unless ``GEMS_EMULATE=1`` asks to apply its policy on the device that is here.
* unset: the one non-built-in backend whose hardware is detected; two detected raise and ask
  for ``GEMS_DEVICE``; none selects the built-in ``cpu`` reference backend.
* plugins that failed to load and are not selected are skipped with a warning.
* ``GEMS_COMPILE_TARGET=<backend>:<arch>[:<warp size>]`` (with ``GEMS_DEVICE``): compile-only
  execution, for the compile tier (``python -m gems_conformance.compile_check``). The backend's
  policy applies, tensors live on the CPU, and each kernel launch is compiled ahead of time
  for that Triton target instead of being run. The warp size may be left out for a target
  the backend's descriptor lists.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from . import compat, settings
from .contract import BackendDescriptor, NativeLaunch, TritonTarget
from .plugins import BackendError, InstalledBackend, check_triton_range, discover


@dataclass(frozen=True)
class Execution:
    """Where kernels actually run: the selected chip, or (emulated) the device present."""

    device_type: str
    dispatch_key: str
    interpreter: bool
    triton_backend: str | None  # the Triton backend compiling kernels; None = interpreter
    #: compile-only execution: launches are compiled for this target, never run
    compile_target: TritonTarget | None = None
    #: how compiled kernels are launched on the device, from the backend whose hardware runs
    #: them (``gems_native_launch``): the native dispatch layer is on only with it
    launch: NativeLaunch | None = None
    #: why there is no ``launch`` where a backend was asked for it ("" otherwise)
    launch_problem: str = ""
    #: under emulation, the installed backend of the device the kernels run on ("": none
    #: known); its gates and deviations hold on top of the emulated backend's
    host: str = ""


@dataclass(frozen=True)
class Selection:
    backend: InstalledBackend
    descriptor: BackendDescriptor
    arch: str
    device_name: str
    reason: str
    emulated: bool
    execution: Execution
    installed: Mapping[str, InstalledBackend]


def device_type_problem(descriptor: BackendDescriptor, emulated: bool) -> str:
    """Why tensors cannot live on the descriptor's ``device_type`` here; "" if they can.

    A chip registered through PrivateUse1 names its device type only once its runtime calls
    ``torch.utils.rename_privateuse1_backend``: under emulation (tensors on the device that is
    here) the name may be still unknown to torch, on the chip it must be the renamed key's."""
    renamed = torch._C._get_privateuse1_backend_name()
    if descriptor.dispatch_key == "PrivateUse1":
        if descriptor.device_type == renamed or (emulated and renamed == "privateuseone"):
            return ""
        return (f"device_type {descriptor.device_type!r} with dispatch_key 'PrivateUse1' needs the chip's "
                f"runtime to rename PrivateUse1 to {descriptor.device_type!r} "
                f"(torch.utils.rename_privateuse1_backend) before gems selects it; PrivateUse1 is "
                f"{renamed!r} here")
    try:
        torch.device(descriptor.device_type)
    except RuntimeError as exc:
        return f"device_type {descriptor.device_type!r}: {exc}"
    return ""


def _native_execution(backend: InstalledBackend) -> Execution:
    descriptor = backend.descriptor
    assert descriptor is not None
    problem = device_type_problem(descriptor, emulated=False)
    if problem:
        raise BackendError(f"backend {descriptor.name!r}: {problem}")
    execution = Execution(
        device_type=descriptor.device_type,
        dispatch_key=descriptor.dispatch_key,
        interpreter=descriptor.interpreter,
        triton_backend=None if descriptor.interpreter else descriptor.target.backend,
    )
    return execution if descriptor.interpreter else _with_launch(execution, backend)


def _emulated_execution(installed: Mapping[str, InstalledBackend]) -> Execution:
    if torch.cuda.is_available():
        execution = Execution("cuda", "CUDA", interpreter=False, triton_backend=compat.gpu_triton_backend())
        # kernels launch on the device present: as the backend that detects it launches them
        present = [b for b in installed.values() if b.ok and not b.builtin and b.detected]
        if len(present) != 1:
            return execution
        return _with_launch(dataclasses.replace(execution, host=present[0].name), present[0])
    host = next((b.name for b in installed.values() if b.ok and b.builtin and b.descriptor is not None
                 and b.descriptor.interpreter), "")
    return Execution("cpu", "CPU", interpreter=True, triton_backend=None, host=host)


def _with_launch(execution: Execution, backend: InstalledBackend) -> Execution:
    """``execution`` with ``backend``'s answer to ``gems_native_launch`` (or why it has none)."""
    try:
        launch = backend.call("gems_native_launch")
    except BackendError as exc:
        return dataclasses.replace(execution, launch_problem=str(exc))
    if launch is None:
        return execution
    if not isinstance(launch, NativeLaunch):
        problem = f"gems_native_launch() answered a {type(launch).__name__}, not a NativeLaunch"
    else:
        problem = launch.problem()
    if problem:
        return dataclasses.replace(execution, launch_problem=f"gems backend {backend.name!r}: {problem}")
    return dataclasses.replace(execution, launch=launch)


def _warn_failed(installed: Mapping[str, InstalledBackend], selected: str) -> None:
    for backend in installed.values():
        if not backend.ok and backend.name != selected:
            warnings.warn(
                f"gems backend {backend.name!r} ({backend.source}) failed to load and is "
                f"skipped: {backend.error}",
                RuntimeWarning,
                stacklevel=3,
            )


def _describe_installed(installed: Mapping[str, InstalledBackend]) -> str:
    rows = []
    for backend in installed.values():
        state = "loaded" if backend.ok else f"failed: {backend.error}"
        rows.append(f"{backend.name} ({state})")
    return ", ".join(rows)


def select(environ: Mapping[str, str] | None = None) -> Selection:
    installed = discover()
    requested = settings.get("GEMS_DEVICE", environ)
    emulate = settings.get("GEMS_EMULATE", environ)
    compile_target = settings.get("GEMS_COMPILE_TARGET", environ)

    if requested:
        backend = installed.get(requested)
        if backend is None:
            raise BackendError(
                f"GEMS_DEVICE={requested!r} names no installed gems backend. Installed: "
                f"{_describe_installed(installed)}. Install gems-backend-{requested} or unset "
                "GEMS_DEVICE."
            )
        if not backend.ok:
            raise BackendError(
                f"GEMS_DEVICE={requested!r} selects a backend that failed to load: {backend.error}"
            )
        _warn_failed(installed, requested)
        if compile_target:
            return _select_compile_only(backend, installed, compile_target)
        return _select_explicit(backend, installed, emulate)

    if compile_target:
        raise BackendError("GEMS_COMPILE_TARGET needs GEMS_DEVICE to name the backend to compile for")
    if emulate:
        raise BackendError("GEMS_EMULATE=1 needs GEMS_DEVICE to name the backend to emulate")
    _warn_failed(installed, "")
    detected = [b for b in installed.values() if b.ok and not b.builtin and b.detected]
    if len(detected) > 1:
        names = ", ".join(f"{b.name} ({b.detected.name})" for b in detected)  # type: ignore[union-attr]
        raise BackendError(
            f"several gems backends detect their hardware here: {names}. Set GEMS_DEVICE to "
            "one of them."
        )
    if detected:
        backend = detected[0]
        check_triton_range(backend.descriptor)  # type: ignore[arg-type]
        return _native(backend, installed, f"detected {backend.detected.name}")  # type: ignore[union-attr]
    cpu = installed["cpu"]
    if not cpu.ok:
        raise BackendError(f"the built-in cpu backend failed to load: {cpu.error}")
    return _native(cpu, installed, "no accelerator backend detected its hardware")


def _native(backend: InstalledBackend, installed: Mapping[str, InstalledBackend], reason: str) -> Selection:
    assert backend.descriptor is not None and backend.detected is not None
    return Selection(
        backend=backend,
        descriptor=backend.descriptor,
        arch=backend.detected.arch,
        device_name=backend.detected.name,
        reason=reason,
        emulated=False,
        execution=_native_execution(backend),
        installed=installed,
    )


def _select_explicit(
    backend: InstalledBackend, installed: Mapping[str, InstalledBackend], emulate: bool
) -> Selection:
    descriptor = backend.descriptor
    assert descriptor is not None
    if backend.builtin or (backend.detected is not None and not emulate):
        if not backend.builtin:
            check_triton_range(descriptor)
        return _native(backend, installed, f"GEMS_DEVICE={backend.name}")
    if not emulate:
        raise BackendError(
            f"GEMS_DEVICE={backend.name!r}: the {descriptor.vendor} backend found no "
            f"{descriptor.vendor} device here ({_detection_hint(backend)}). Set GEMS_EMULATE=1 "
            "to apply its policy on the device that is present."
        )
    execution = _emulated_execution(installed)
    where = "the CPU interpreter" if execution.interpreter else f"this {execution.device_type} GPU"
    return Selection(
        backend=backend,
        descriptor=descriptor,
        arch=str(descriptor.target.arch),
        device_name=f"{descriptor.vendor} (emulated on {where})",
        reason=f"GEMS_DEVICE={backend.name} with GEMS_EMULATE=1",
        emulated=True,
        execution=execution,
        installed=installed,
    )


def _detection_hint(backend: InstalledBackend) -> str:
    assert backend.descriptor is not None
    if backend.descriptor.detection:
        return f"looked for: {backend.descriptor.detection}"
    return "its gems_detect() returned None"


def compile_targets(descriptor: BackendDescriptor) -> tuple[TritonTarget, ...]:
    """The targets the compile tier checks for a backend: its ``compile_targets``, else its
    ``target``."""
    return tuple(descriptor.compile_targets) or (descriptor.target,)


def parse_target(spec: str, descriptor: BackendDescriptor | None = None) -> TritonTarget:
    """``"cuda:90"``, ``"hip:gfx942:64"``: a Triton target. A missing warp size is taken from
    the descriptor's targets with the same backend and arch."""
    parts = spec.strip().split(":")
    if len(parts) not in (2, 3) or not all(parts):
        raise BackendError(f"a Triton target reads <backend>:<arch>[:<warp size>], not {spec!r}")
    backend, arch_text = parts[0], parts[1]
    arch: int | str = int(arch_text) if arch_text.isdigit() else arch_text
    if len(parts) == 3:
        return TritonTarget(backend, arch, int(parts[2]))
    known = compile_targets(descriptor) if descriptor is not None else ()
    for target in known:
        if target.backend == backend and str(target.arch) == arch_text:
            return target
    listed = ", ".join(format_target(t) for t in known) or "none"
    raise BackendError(
        f"target {spec!r} is not one the backend lists ({listed}); give its warp size as "
        f"{spec}:<warp size>"
    )


def format_target(target: TritonTarget) -> str:
    return f"{target.backend}:{target.arch}"


def _select_compile_only(
    backend: InstalledBackend, installed: Mapping[str, InstalledBackend], spec: str
) -> Selection:
    descriptor = backend.descriptor
    assert descriptor is not None
    target = parse_target(spec, descriptor)
    if not backend.builtin:
        check_triton_range(descriptor)
    return Selection(
        backend=backend,
        descriptor=descriptor,
        arch=str(target.arch),
        device_name=f"{descriptor.vendor} (compile only, for {format_target(target)})",
        reason=f"GEMS_DEVICE={backend.name} with GEMS_COMPILE_TARGET={spec}",
        emulated=True,
        execution=Execution(
            "cpu", "CPU", interpreter=False, triton_backend=target.backend, compile_target=target
        ),
        installed=installed,
    )
