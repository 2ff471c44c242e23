"""The contract tier: the plugin loads, its descriptor is sound, and every name it mentions
exists (ATen operators for gates, deviations and overrides; torch dtypes; core tunables and
their parameters for configs and compiler options), with every config within the
descriptor's limits. The checks are the core's (:mod:`gems_core.policy`), which already
leaves out at load what fails them; those entries are reported here as failures. Needs no
device."""

from __future__ import annotations

import torch
from packaging.specifiers import InvalidSpecifier, SpecifierSet

from gems_core import policy as policy_checks
from gems_core import runtime, tuning
from gems_core.contract import PIPELINING, BackendDescriptor, Limits, TritonTarget
from gems_core.policy import Policy, aten_problem
from gems_core.registry import all_impls
from gems_core.selection import Execution, device_type_problem

from . import records as R
from .records import Record


def _record(op: str, check: str, problem: str, dtype: str = "-", detail: str = "") -> Record:
    status = R.FAIL if problem else R.PASS
    return Record(tier="contract", op=op, dtype=dtype, sample=check, status=status, message=problem,
                  detail=detail)


def _target_problems(target: TritonTarget) -> list[str]:
    problems = []
    if not target.backend:
        problems.append("target.backend is empty")
    if target.warp_size <= 0 or target.warp_size & (target.warp_size - 1):
        problems.append(f"target.warp_size {target.warp_size} is not a power of two")
    return problems


def _descriptor_checks(d: BackendDescriptor, emulated: bool) -> list[Record]:
    checks: dict[str, list[str]] = {"identity": [], "device": [], "target": [], "limits": [], "versions": []}
    if not d.name or not d.vendor:
        checks["identity"].append("name and vendor must be set")
    problem = device_type_problem(d, emulated)
    if problem:
        checks["device"].append(problem)
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
    for arch, limits in (("", lim), *d.arch_limits):
        if limits.pipelining not in PIPELINING:
            where = f"arch_limits[{arch!r}]" if arch else "limits"
            checks["limits"].append(f"{where}.pipelining {limits.pipelining!r} is not one of {PIPELINING}")
    for what, spec in (("triton_versions", d.triton_versions), ("gems_core_versions", d.gems_core_versions)):
        try:
            SpecifierSet(spec)
        except InvalidSpecifier:
            checks["versions"].append(f"{what} {spec!r} is not a PEP 440 specifier set")
    return [_record("descriptor", check, "; ".join(problems)) for check, problems in checks.items()]


#: the check each hook's entries are reported under
HOOK_CHECKS = {
    "gems_unsupported_ops": "unsupported op",
    "gems_known_deviations": "deviation",
    "gems_kernel_overrides": "kernel override",
    "gems_tuned_configs": "tuned configs",
    "gems_compiler_options": "compiler options",
    "gems_kernel_variants": "kernel variant",
    "gems_native_launch": "native launch",
}


def _launch_checks(execution: Execution) -> list[Record]:
    """The answer to ``gems_native_launch``, where the backend running the kernels was asked
    (kernels run on a device): a failure where it raised or answered something unusable."""
    if execution.launch_problem:
        return [_record("plugin", HOOK_CHECKS["gems_native_launch"], execution.launch_problem)]
    if execution.launch is not None:
        return [_record("plugin", HOOK_CHECKS["gems_native_launch"], "")]
    return []


def _problem_records(policy: Policy) -> list[Record]:
    """The entries the core left out at load: each a failure naming the hook."""
    return [_record(p.subject, HOOK_CHECKS.get(p.hook, p.hook), f"{p.hook}(): {p.message}")
            for p in policy.problems]


def _op_checks(policy: Policy) -> list[Record]:
    """The entries kept at load, checked again: they pass unless the core's checks did not run."""
    found = []
    for op, dtypes in sorted(policy.gates.items()):
        problems = [aten_problem(op)] + [policy_checks.dtype_problem(d) for d in sorted(dtypes)]
        found.append(_record(op, "unsupported op", "; ".join(p for p in problems if p)))
    for op in sorted(set(policy.gate_leaves) - set(policy.gates)):  # gates on forms alone
        found.append(_record(op, "unsupported op", aten_problem(op) or ""))
    for deviation in policy.deviations:
        problem = "; ".join(policy_checks.deviation_problems(deviation))
        found.append(_record(deviation.op, "deviation", problem,
                             dtype=",".join(deviation.dtypes) or "*", detail=deviation.reason))
    served = all_impls()
    for op in sorted(policy.overrides):
        problem = aten_problem(op) or ("" if op in served else f"gems serves no overload {op!r}")
        found.append(_record(op, "kernel override", problem))
    return found


def _config_checks(policy: Policy, limits: Limits) -> list[Record]:
    tunables = tuning.tunables()
    known = ", ".join(sorted(tunables))
    found = []
    for kernel, configs in sorted(policy.configs.items()):
        problems = []
        if kernel not in tunables:
            problems.append(f"{kernel!r} is not a core tunable (known: {known})")
        else:
            tunable = tunables[kernel]
            for config in configs:
                problems += policy_checks.config_problems(config, tunable.params, tunable.optional, limits)
        found.append(_record(kernel, "tuned configs", "; ".join(problems)))
    for kernel in sorted(set(policy.compiler_options) - {"*"}):
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
    found += _descriptor_checks(rt.selection.descriptor, rt.selection.emulated)
    found += _launch_checks(rt.selection.execution)
    found += _problem_records(rt.policy)
    found += _op_checks(rt.policy)
    found += _config_checks(rt.policy, rt.limits)
    return found
