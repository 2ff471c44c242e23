"""The contract tier: the plugin loads, its descriptor is sound, and every name it mentions
exists (ATen operators for gates, deviations and overrides; core tunables and their
parameters for configs and compiler options). Needs no device."""

from __future__ import annotations

import torch
from packaging.specifiers import InvalidSpecifier, SpecifierSet

from gems_core import runtime, tuning
from gems_core.contract import BackendDescriptor, TritonTarget
from gems_core.registry import all_impls

from . import records as R
from .records import Record

DEVIATION_KINDS = ("xfail", "tolerance")


def _record(op: str, check: str, problem: str, dtype: str = "-", detail: str = "") -> Record:
    status = R.FAIL if problem else R.PASS
    return Record(tier="contract", op=op, dtype=dtype, sample=check, status=status, message=problem,
                  detail=detail)


def aten_problem(name: str) -> str:
    """Why ``name`` ("packet" or "packet.overload") is not an ATen operator; "" if it is."""
    packet, _, overload = name.partition(".")
    try:
        torch._C._dispatch_find_schema_or_throw(f"aten::{packet}", "" if overload == "default" else overload)
    except RuntimeError:
        if not overload and hasattr(torch.ops.aten, packet):
            return ""  # a packet with no default overload ("add"): all its overloads
        return f"{name!r} is not an ATen operator"
    return ""


def _target_problems(target: TritonTarget) -> list[str]:
    problems = []
    if not target.backend:
        problems.append("target.backend is empty")
    if target.warp_size <= 0 or target.warp_size & (target.warp_size - 1):
        problems.append(f"target.warp_size {target.warp_size} is not a power of two")
    return problems


def _descriptor_checks(d: BackendDescriptor) -> list[Record]:
    checks: dict[str, list[str]] = {"identity": [], "device": [], "target": [], "limits": [], "versions": []}
    if not d.name or not d.vendor:
        checks["identity"].append("name and vendor must be set")
    try:
        torch.device(d.device_type)
    except RuntimeError as exc:
        checks["device"].append(f"device_type {d.device_type!r}: {exc}")
    if d.dispatch_key not in torch._C.DispatchKey.__members__:
        checks["device"].append(f"dispatch_key {d.dispatch_key!r} is not a torch DispatchKey")
    for target in (d.target, *d.compile_targets):
        checks["target"] += _target_problems(target)
    lim = d.limits
    for field in ("max_warps", "max_threads_per_block", "shared_memory_per_block"):
        if getattr(lim, field) <= 0:
            checks["limits"].append(f"limits.{field} must be positive")
    if lim.max_warps * d.target.warp_size > lim.max_threads_per_block:
        checks["limits"].append(
            f"max_warps {lim.max_warps} x warp_size {d.target.warp_size} exceeds "
            f"max_threads_per_block {lim.max_threads_per_block}")
    if len(lim.max_grid) != 3 or min(lim.max_grid) <= 0:
        checks["limits"].append(f"limits.max_grid {lim.max_grid} must be three positive sizes")
    for what, spec in (("triton_versions", d.triton_versions), ("gems_core_versions", d.gems_core_versions)):
        try:
            SpecifierSet(spec)
        except InvalidSpecifier:
            checks["versions"].append(f"{what} {spec!r} is not a PEP 440 specifier set")
    return [_record("descriptor", check, "; ".join(problems)) for check, problems in checks.items()]


def _op_checks(policy: object) -> list[Record]:
    found = []
    for op, dtypes in sorted(policy.gates.items()):  # type: ignore[attr-defined]
        problems = [aten_problem(op)] + [
            f"{d!r} is not a torch dtype" for d in sorted(dtypes)
            if not isinstance(getattr(torch, d, None), torch.dtype)]
        found.append(_record(op, "unsupported op", "; ".join(p for p in problems if p)))
    for deviation in policy.deviations:  # type: ignore[attr-defined]
        problems = [] if deviation.op == "*" else [aten_problem(deviation.op)]
        if deviation.kind not in DEVIATION_KINDS:
            problems.append(f"kind {deviation.kind!r} is not one of {', '.join(DEVIATION_KINDS)}")
        if not deviation.reason.strip():
            problems.append("a deviation needs a reason")
        if deviation.kind == "tolerance" and deviation.atol is None and deviation.rtol is None:
            problems.append("a tolerance deviation needs atol or rtol")
        found.append(_record(deviation.op, "deviation", "; ".join(p for p in problems if p),
                             dtype=",".join(deviation.dtypes) or "*", detail=deviation.reason))
    served = all_impls()
    for op in sorted(policy.overrides):  # type: ignore[attr-defined]
        problem = aten_problem(op) or (
            "" if op in served else
            f"gems serves no overload {op!r}: an override replaces one overload gems serves "
            "(e.g. 'add.Tensor', not 'add')")
        found.append(_record(op, "kernel override", problem))
    return found


def _config_checks(policy: object) -> list[Record]:
    tunables = tuning.tunables()
    known = ", ".join(sorted(tunables))
    found = []
    for kernel, configs in sorted(policy.configs.items()):  # type: ignore[attr-defined]
        problems = []
        if kernel not in tunables:
            problems.append(f"{kernel!r} is not a core tunable (known: {known})")
        else:
            for config in configs:
                try:
                    tunables[kernel].validate(config)
                except ValueError as exc:
                    problems.append(str(exc))
        found.append(_record(kernel, "tuned configs", "; ".join(problems)))
    # dropped entries read "kernel: option=value", or "kernel (config): ..." for a config's own
    kernels = {name.partition(":")[0].removesuffix(" (config)").strip()
               for name in policy.dropped_options}  # type: ignore[attr-defined]
    kernels |= set(policy.compiler_options)  # type: ignore[attr-defined]
    for kernel in sorted(kernels - {"*"}):
        problem = "" if kernel in tunables else f"{kernel!r} is not a core tunable (known: {known})"
        found.append(_record(kernel, "compiler options", problem))
    return found


def check_contract(load_error: str | None = None) -> list[Record]:
    """Every contract check of the selected backend; ``load_error`` when it did not load."""
    if load_error:
        return [_record("plugin", "loads", load_error)]
    rt = runtime.current()
    backend = rt.selection.backend
    found = [_record("plugin", "loads", "", detail=backend.source)]
    found += _descriptor_checks(rt.selection.descriptor)
    found += _op_checks(rt.policy)
    found += _config_checks(rt.policy)
    return found
