"""A selected backend's answers, checked and frozen into plain lookup tables.

Built once at selection; the per-op path reads dicts and frozensets only. Every answer is
checked here with the checks of the conformance suite's contract tier (ATen op names, dtype
names, tunables and their parameters, the descriptor's limits, the types hooks return): an
entry gems cannot use is left out with a :class:`PolicyWarning` that names the backend and
the hook, and kept in :attr:`Policy.problems`, which ``info`` shows and the contract tier
fails. Configs and compiler options are checked against the core's tunables once the ops are
loaded (:func:`check_tunables`, which the registry runs as the runtime is selected), since
declaring the tunables needs the runtime.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from . import settings
from .compat import accepted_options
from .contract import (
    VARIANT_POINTS,
    Deviation,
    KernelConfig,
    KernelOverride,
    KernelVariant,
    Limits,
    OpGate,
)
from .selection import Selection

ALL_DTYPES = frozenset()  # an empty gate set means "every dtype"

#: packets gems computes with another packet's kernels (ops/blas_more.py: dot and vdot are
#: products of views on mm's kernel, addmv and addr on addmm's): a backend's gate of the
#: kernel's packet covers them too, so a gated dtype goes to ATen before gems' function is
#: entered, as the backend asked, instead of being declined there
BUILT_ON = {"dot": "mm", "vdot": "mm", "addmv": "addmm", "addr": "addmm"}


def gate_names(overload: str) -> tuple[str, ...]:
    """The names whose gates apply to ``overload``: itself, its packet, and the packet its
    kernels belong to (:data:`BUILT_ON`)."""
    packet = overload.split(".", 1)[0]
    base = BUILT_ON.get(packet)
    return (overload, packet) if base is None else (overload, packet, base)


DEVIATION_KINDS = ("xfail", "tolerance")


class PolicyWarning(RuntimeWarning):
    """An entry of a backend's policy that gems cannot use and leaves out."""


@dataclass(frozen=True)
class PolicyProblem:
    """One entry of a hook's answer that was left out, and why."""

    hook: str
    subject: str  # the op, kernel or entry concerned
    message: str


@dataclass(frozen=True)
class Policy:
    configs: Mapping[str, tuple[KernelConfig, ...]] = field(default_factory=dict)
    #: ATen name (overload or packet) -> gated dtype names; empty set = the whole op
    gates: Mapping[str, frozenset[str]] = field(default_factory=dict)
    gate_reasons: Mapping[str, str] = field(default_factory=dict)
    #: ATen name (overload or packet) gated whole -> forms of its calls kept on gems
    gate_keeps: Mapping[str, frozenset[str]] = field(default_factory=dict)
    #: ATen name (overload or packet) -> forms of its calls left to ATen (the rest on gems),
    #: and why
    gate_leaves: Mapping[str, frozenset[str]] = field(default_factory=dict)
    leave_reasons: Mapping[str, str] = field(default_factory=dict)
    #: dtypes the chip lacks: gated for every op
    unsupported_dtypes: frozenset[str] = frozenset()
    #: per tunable kernel ("*" for all): options the running Triton accepts
    compiler_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: "kernel: option" the running Triton does not accept, dropped
    dropped_options: tuple[str, ...] = ()
    deviations: tuple[Deviation, ...] = ()
    overrides: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    #: variant point (gems_core.variants.POINTS) -> the backend's entry there
    variants: Mapping[str, KernelVariant] = field(default_factory=dict)
    #: entries of the backend's answers left out at load
    problems: tuple[PolicyProblem, ...] = ()

    def gate_for(self, overload: str) -> frozenset[str] | None:
        """Dtype names that send ``overload`` to ATen (empty = always); None = never. A gate
        of the packet an op is built on (:data:`BUILT_ON`) applies to it too."""
        dtypes: set[str] = set(self.unsupported_dtypes)
        whole = False
        for name in gate_names(overload):
            if name in self.gates:
                if not self.gates[name]:
                    whole = True
                dtypes |= self.gates[name]
        if whole:
            return ALL_DTYPES
        return frozenset(dtypes) if dtypes else None

    def reason_for(self, overload: str) -> str:
        """Why the backend gates ``overload`` (its own reason, its packet's, or that of the
        packet it is built on); "" where it gave none."""
        packet = overload.split(".", 1)[0]
        why = self.gate_reasons.get(overload) or self.gate_reasons.get(packet, "")
        base = BUILT_ON.get(packet)
        if not why and base is not None and base in self.gates:
            why = f"computed by {base}'s kernels, which the backend gates: {self.gate_reasons.get(base) or 'gated'}"
        return why

    def leaves_to_aten(self, overload: str, dtype: str) -> bool:
        """Whether ``overload`` (or its packet) is gated to ATen for ``dtype`` (a name)."""
        gate = self.gate_for(overload)
        return gate is not None and (not gate or dtype in gate)

    def leaves_for(self, overload: str) -> frozenset[str]:
        """Forms of ``overload``'s calls that the backend leaves to ATen (``OpGate.leave``)."""
        found: frozenset[str] = frozenset()
        for name in (overload, overload.split(".", 1)[0]):
            found |= self.gate_leaves.get(name, frozenset())
        return found

    def keeps_for(self, overload: str) -> frozenset[str]:
        """Forms of ``overload``'s calls that gems keeps serving under its whole-op gate."""
        found: frozenset[str] = frozenset()
        for name in (overload, overload.split(".", 1)[0]):
            found |= self.gate_keeps.get(name, frozenset())
        return found

    def options_for(self, kernel: str) -> Mapping[str, Any]:
        merged = dict(self.compiler_options.get("*", {}))
        merged.update(self.compiler_options.get(kernel, {}))
        return merged


def aten_problem(name: object) -> str:
    """Why ``name`` ("packet" or "packet.overload") is not an ATen operator; "" if it is."""
    if not isinstance(name, str) or not name:
        return f"{name!r} is not an ATen operator name"
    packet, _, overload = name.partition(".")
    try:
        torch._C._dispatch_find_schema_or_throw(f"aten::{packet}", "" if overload == "default" else overload)
    except RuntimeError:
        if not overload and hasattr(torch.ops.aten, packet):
            return ""  # a packet with no default overload ("add"): all its overloads
        return f"{name!r} is not an ATen operator"
    return ""


def dtype_problem(name: object) -> str:
    """Why ``name`` is not a torch dtype's name as gems spells dtypes ("float32"); "" if it is."""
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    if isinstance(dtype, torch.dtype) and str(dtype) == f"torch.{name}":
        return ""
    hint = f" (write {str(dtype).removeprefix('torch.')!r})" if isinstance(dtype, torch.dtype) else ""
    return f"{name!r} is not a torch dtype name{hint}"


def config_problems(config: object, params: Iterable[str], optional: Iterable[str],
                    limits: Limits) -> list[str]:
    """Why ``config`` cannot configure a kernel with these parameters on a chip with these
    limits; empty when it can."""
    if not isinstance(config, KernelConfig):
        return [f"{config!r} is not a KernelConfig"]
    params = tuple(params)
    problems = []
    unknown = sorted(set(config.params) - set(params))
    if unknown:
        problems.append(f"sets {unknown}, which are not parameters of the kernel "
                        f"({', '.join(params) or 'none'})")
    missing = sorted(set(params) - set(optional) - set(config.params))
    if missing:
        problems.append(f"leaves out {missing}, which the kernel needs")
    for name, value in config.params.items():
        if type(value) is not int or value <= 0:
            problems.append(f"{name}={value!r} is not a positive integer")
        elif limits.max_block_elements and name.startswith("BLOCK") and value > limits.max_block_elements:
            problems.append(f"{name}={value} exceeds the descriptor's max_block_elements "
                            f"{limits.max_block_elements}")
    warps = config.num_warps
    if type(warps) is not int or warps <= 0 or warps & (warps - 1):
        problems.append(f"num_warps={warps!r} is not a power of two")
    elif warps > limits.max_warps:
        problems.append(f"num_warps={warps} exceeds the descriptor's max_warps {limits.max_warps}")
    if type(config.num_stages) is not int or config.num_stages < 1:
        problems.append(f"num_stages={config.num_stages!r} is not a positive integer")
    if not isinstance(config.options, Mapping):
        problems.append(f"options {config.options!r} is not a mapping")
    return problems


def deviation_problems(deviation: object) -> list[str]:
    if not isinstance(deviation, Deviation):
        return [f"{deviation!r} is not a Deviation"]
    problems = [] if deviation.op == "*" else [aten_problem(deviation.op)]
    problems += [dtype_problem(d) for d in deviation.dtypes]
    if deviation.kind not in DEVIATION_KINDS:
        problems.append(f"kind {deviation.kind!r} is not one of {', '.join(DEVIATION_KINDS)}")
    if not isinstance(deviation.reason, str) or not deviation.reason.strip():
        problems.append("a deviation needs a reason")
    if deviation.kind == "tolerance" and deviation.atol is None and deviation.rtol is None:
        problems.append("a tolerance deviation needs atol or rtol")
    return [p for p in problems if p]


class _Problems:
    """The problems found in one backend's answers, each warned about once as found."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.found: list[PolicyProblem] = []

    def add(self, hook: str, subject: object, message: str) -> None:
        problem = PolicyProblem(hook, str(subject), message)
        self.found.append(problem)
        warnings.warn(f"gems backend {self.backend!r}, {hook}(): {message}; left out", PolicyWarning,
                      stacklevel=4)

    def answer(self, hook: str, value: object, expected: type, what: str) -> Any:
        """``value`` when it is an ``expected``; else empty, with a problem. A string is an
        iterable but never a list of names: ``"topk"`` would gate t, o, p and k."""
        empty: Any = {} if expected is Mapping else ()
        if value is None:
            return empty
        if isinstance(value, expected) and not isinstance(value, (str, bytes)):
            return value
        self.add(hook, "result", f"returned {type(value).__name__} {value!r}, not {what}")
        return empty


def _as_gate(entry: object) -> OpGate | None:
    if isinstance(entry, OpGate):
        return entry
    if isinstance(entry, str):
        return OpGate(op=entry)
    return None


@dataclass
class _Leaves:
    """Forms of ops' calls a backend leaves to ATen (``OpGate.leave``), and why."""

    forms: dict[str, set[str]] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)


def _gates(backend: Any, problems: _Problems,
           leaves: _Leaves) -> tuple[dict[str, set[str]], dict[str, str], dict[str, set[str]]]:
    """The backend's (gates, reasons, kept forms) by ATen name; its gates on forms alone
    are added to ``leaves``."""
    hook = "gems_unsupported_ops"
    gates: dict[str, set[str]] = {}
    reasons: dict[str, str] = {}
    keeps: dict[str, set[str]] = {}
    for entry in problems.answer(hook, backend.call(hook), Iterable, "an iterable of op names or OpGates"):
        gate = _as_gate(entry)
        if gate is None:
            problems.add(hook, entry, f"{entry!r} is not an op name or an OpGate")
            continue
        if isinstance(gate.dtypes, str):
            problems.add(hook, gate.op, f"dtypes of {gate.op!r} is the string {gate.dtypes!r}, "
                                        "not a tuple of names")
            continue
        bad = [p for p in [aten_problem(gate.op)] + [dtype_problem(d) for d in gate.dtypes] if p]
        if not isinstance(gate.keep, tuple) or not all(isinstance(f, str) for f in gate.keep):
            bad.append(f"keep of {gate.op!r} is {gate.keep!r}, not a tuple of form names")
        elif gate.keep and gate.dtypes:
            bad.append(f"keep of {gate.op!r} applies to a whole-op gate, not to one of dtypes")
        leave = gate.leave
        if not isinstance(leave, tuple) or not all(isinstance(f, str) for f in leave):
            bad.append(f"leave of {gate.op!r} is {leave!r}, not a tuple of form names")
        elif leave and (gate.dtypes or gate.keep):
            bad.append(f"leave of {gate.op!r} is a gate on forms alone, without dtypes or keep")
        if bad:
            problems.add(hook, gate.op, "; ".join(bad))
            continue
        if leave:  # a gate on these forms only: the op stays on gems otherwise
            leaves.forms.setdefault(gate.op, set()).update(leave)
            if gate.reason:
                leaves.reasons[gate.op] = gate.reason
            continue
        if gate.keep:
            keeps.setdefault(gate.op, set()).update(gate.keep)
        whole = not gate.dtypes or (gate.op in gates and not gates[gate.op])
        gates[gate.op] = set() if whole else gates.get(gate.op, set()) | set(gate.dtypes)
        if gate.reason:
            reasons[gate.op] = gate.reason
    return gates, reasons, keeps


def _accepted_config(
    kernel: str, config: KernelConfig, accepted: frozenset[str], dropped: list[str]
) -> KernelConfig:
    """``config`` without the options the running Triton does not accept (listed in
    ``dropped``): an emulated chip's options would otherwise fail every compile."""
    rejected = {k: v for k, v in config.options.items() if k not in accepted}
    if not rejected:
        return config
    for key, value in rejected.items():
        entry = f"{kernel} (config): {key}={value!r}"
        if entry not in dropped:
            dropped.append(entry)
    kept = {k: v for k, v in config.options.items() if k in accepted}
    return KernelConfig(config.params, config.num_warps, config.num_stages, kept)


def _configs(backend: Any, arch: str, accepted: frozenset[str], dropped: list[str],
             problems: _Problems) -> dict[str, tuple[KernelConfig, ...]]:
    hook = "gems_tuned_configs"
    kept: dict[str, tuple[KernelConfig, ...]] = {}
    answer = problems.answer(hook, backend.call(hook, arch=arch), Mapping, "a mapping of kernel to configs")
    for name, configs in answer.items():
        configs = problems.answer(hook, configs, Iterable, f"a sequence of KernelConfig for {name!r}")
        usable = []
        for config in configs:
            if isinstance(config, KernelConfig) and isinstance(config.options, Mapping):
                usable.append(_accepted_config(name, config, accepted, dropped))
            else:
                problems.add(hook, name, f"{config!r} is not a KernelConfig")
        if usable:
            kept[name] = tuple(usable)
    return kept


def _compiler_options(backend: Any, arch: str, accepted: frozenset[str], dropped: list[str],
                      problems: _Problems) -> dict[str, dict[str, Any]]:
    hook = "gems_compiler_options"
    kept: dict[str, dict[str, Any]] = {}
    answer = problems.answer(hook, backend.call(hook, arch=arch), Mapping, "a mapping of kernel to options")
    for kernel, options in answer.items():
        options = problems.answer(hook, options, Mapping, f"a mapping of options for {kernel!r}")
        for key, value in options.items():
            if key in accepted:
                kept.setdefault(kernel, {})[key] = value
            else:
                dropped.append(f"{kernel}: {key}={value!r}")
    return kept


def _deviations(backend: Any, problems: _Problems) -> tuple[Deviation, ...]:
    hook = "gems_known_deviations"
    kept = []
    for deviation in problems.answer(hook, backend.call(hook), Iterable, "an iterable of Deviation"):
        found = deviation_problems(deviation)
        if found:
            problems.add(hook, getattr(deviation, "op", deviation), "; ".join(found))
        else:
            kept.append(deviation)
    return tuple(kept)


def _overrides(backend: Any, problems: _Problems) -> dict[str, Callable[..., Any]]:
    hook = "gems_kernel_overrides"
    overrides: dict[str, Callable[..., Any]] = {}
    for override in problems.answer(hook, backend.call(hook), Iterable, "an iterable of KernelOverride"):
        if not isinstance(override, KernelOverride):
            problems.add(hook, override, f"{override!r} is not a KernelOverride")
        elif aten_problem(override.op) or not callable(override.fn):
            problem = aten_problem(override.op) or f"fn {override.fn!r} is not callable"
            problems.add(hook, override.op, problem)
        else:
            overrides[override.op] = override.fn
    return overrides


def _variants(backend: Any, arch: str, problems: _Problems) -> dict[str, KernelVariant]:
    hook = "gems_kernel_variants"
    variants: dict[str, KernelVariant] = {}
    if not settings.get("GEMS_KERNEL_VARIANTS"):
        return variants
    answer = problems.answer(hook, backend.call(hook, arch=arch), Iterable, "an iterable of KernelVariant")
    for entry in answer:
        if not isinstance(entry, KernelVariant):
            problems.add(hook, entry, f"{entry!r} is not a KernelVariant")
        elif entry.point not in VARIANT_POINTS:
            problems.add(hook, entry.point, f"{entry.point!r} is not a variant point of this gems-core "
                                            f"(points: {', '.join(sorted(VARIANT_POINTS))})")
        elif not callable(entry.fn):
            problems.add(hook, entry.point, f"the {entry.point!r} variant's fn is not callable: {entry.fn!r}")
        elif entry.point in variants:
            problems.add(hook, entry.point, f"two variants for {entry.point!r}")
        else:
            variants[entry.point] = entry
    return variants


def build_policy(selection: Selection) -> Policy:
    backend = selection.backend
    arch = selection.arch
    problems = _Problems(backend.name)
    accepted = accepted_options(selection.execution.triton_backend)
    dropped: list[str] = []
    configs = _configs(backend, arch, accepted, dropped, problems)
    leaves = _Leaves()
    gates, reasons, keeps = _gates(backend, problems, leaves)
    _lift(gates, keeps, settings.get("GEMS_LIFT_GATES"), backend.name, leaves)
    deviations = _deviations(backend, problems)
    host = selection.installed.get(selection.execution.host) if selection.emulated else None
    if host is not None and host.name != backend.name:
        deviations += _with_host(host, gates, reasons, keeps, leaves)
    return Policy(
        configs=configs,
        gates={op: frozenset(d) for op, d in gates.items()},
        gate_reasons=reasons,
        gate_keeps={op: frozenset(forms) for op, forms in keeps.items()},
        gate_leaves={op: frozenset(forms) for op, forms in leaves.forms.items()},
        leave_reasons=dict(leaves.reasons),
        unsupported_dtypes=selection.descriptor.dtypes.unsupported(),
        compiler_options=_compiler_options(backend, arch, accepted, dropped, problems),
        dropped_options=tuple(dropped),
        deviations=deviations,
        overrides=_overrides(backend, problems),
        variants=_variants(backend, arch, problems),
        problems=tuple(problems.found),
    )


def _lift(gates: dict[str, set[str]], keeps: dict[str, set[str]], lifted: frozenset[str], backend: str,
          leaves: _Leaves) -> None:
    """Drop, in place, the backend's gates (and the forms they keep or leave) on the ops that
    ``GEMS_LIFT_GATES`` names: an overload's gate, or a packet's and each of its overloads'
    (an overload whose packet is gated stays gated unless the packet is named). A name that
    lifts no gate is warned about. The chip's unsupported dtypes and, under emulation, the
    host's gates stay."""
    if not lifted:
        return
    left = leaves.forms
    found = {name for name in lifted for op in [*gates, *left] if name in (op, op.split(".", 1)[0])}
    for op in [op for op in gates if op in lifted or op.split(".", 1)[0] in lifted]:
        del gates[op]
        keeps.pop(op, None)
    for op in [op for op in left if op in lifted or op.split(".", 1)[0] in lifted]:
        del left[op]
    if lifted - found:
        warnings.warn(f"gems: GEMS_LIFT_GATES names {', '.join(sorted(lifted - found))}, which backend "
                      f"{backend!r} does not gate", PolicyWarning, stacklevel=4)


def _with_host(host: Any, gates: dict[str, set[str]], reasons: dict[str, str],
               keeps: dict[str, set[str]], leaves: _Leaves | None = None) -> tuple[Deviation, ...]:
    """Add the gates of ``host`` (the backend whose device runs an emulated backend's
    kernels) to the emulated backend's ``gates``, ``reasons`` and ``keeps``, in place, and
    return the host's deviations: what the device present cannot do holds under emulation
    too, or an emulated run of a correct plugin fails where its host does. Each is labelled
    as the host's. Problems in the host's own answers are warned under its name and kept
    out of this policy's list."""
    label = f"the host's ({host.name})"
    host_problems = _Problems(host.name)
    host_leaves = _Leaves()
    host_gates, host_reasons, host_keeps = _gates(host, host_problems, host_leaves)
    if leaves is not None:  # the forms the host leaves to ATen are left under emulation too
        for op, forms in host_leaves.forms.items():
            leaves.forms.setdefault(op, set()).update(forms)
            why = f"{label}: {host_leaves.reasons.get(op) or 'left there'}"
            leaves.reasons[op] = f"{leaves.reasons[op]}; {why}" if op in leaves.reasons else why
    for op, dtypes in host_gates.items():
        mine = gates.get(op)
        if mine is not None and not mine:  # the emulated backend gates the whole op already
            if not dtypes:  # so does the host: the forms both keep stay on gems
                keeps[op] = keeps.get(op, set()) & host_keeps.get(op, set())
            continue
        if mine is not None and dtypes and dtypes <= mine:
            continue
        if not dtypes:
            keeps[op] = set(host_keeps.get(op, set()))
        why = f"{label}: {host_reasons.get(op) or 'gated there'}"
        reasons[op] = f"{reasons[op]}; {why}" if mine is not None and op in reasons else why
        gates[op] = set() if not dtypes else (mine or set()) | dtypes
    return tuple(dataclasses.replace(d, reason=f"{label}: {d.reason}")
                 for d in _deviations(host, host_problems))


def _defined_forms(named: Mapping[str, frozenset[str]], forms: Callable[[str], Mapping[str, Iterable[str]]] | None,
                   verb: str, problems: _Problems) -> dict[str, frozenset[str]]:
    """``named`` (op -> forms a gate keeps or leaves) without the forms the op's
    implementations do not define (``forms(op)``), each reported."""
    found = {}
    for op, names in named.items():
        defined = set().union(*map(set, forms(op).values())) if forms else set()
        unknown = sorted(names - defined)
        if unknown:
            problems.add("gems_unsupported_ops", op, f"{op!r} defines no form {', '.join(map(repr, unknown))} "
                         f"to {verb} (its forms: {', '.join(sorted(defined)) or 'none'})")
        if names & defined:
            found[op] = frozenset(names & defined)
    return found


def check_tunables(policy: Policy, backend: str, limits: Limits, known: Mapping[str, Any],
                   served: Iterable[str],
                   forms: Callable[[str], Mapping[str, Iterable[str]]] | None = None) -> Policy:
    """``policy`` without the configs and compiler options that name no core tunable (in
    ``known``, by name: objects with ``params`` and ``optional``) or do not fit it or the
    chip's ``limits``, nor overrides of overloads gems does not serve (not in ``served``),
    nor kept forms of gated ops that their implementations do not define (``forms(op)``:
    overload -> its form names, as :func:`gems_core.registry.forms`); each left out with a
    warning. Forms a gate leaves to ATen that the implementations do not define are left out
    alike."""
    problems = _Problems(backend)
    names = ", ".join(sorted(known))
    configs = {}
    for kernel, found in policy.configs.items():
        tunable = known.get(kernel)
        if tunable is None:
            problems.add("gems_tuned_configs", kernel, f"{kernel!r} is not a core tunable (known: {names})")
            continue
        kept = []
        for config in found:
            bad = config_problems(config, tunable.params, tunable.optional, limits)
            if bad:
                problems.add("gems_tuned_configs", kernel,
                             f"{kernel} config {config.describe()}: {'; '.join(bad)}")
            else:
                kept.append(config)
        if kept:
            configs[kernel] = tuple(kept)
    # options the running Triton does not accept are dropped already ("kernel: option=value")
    named = set(policy.compiler_options) | {entry.partition(":")[0] for entry in policy.dropped_options
                                            if " (config)" not in entry}
    for kernel in sorted(named - set(known) - {"*"}):
        problems.add("gems_compiler_options", kernel, f"{kernel!r} is not a core tunable (known: {names})")
    options = {k: v for k, v in policy.compiler_options.items() if k == "*" or k in known}
    served = frozenset(served)
    overrides = {}
    for op, fn in policy.overrides.items():
        if op in served:
            overrides[op] = fn
        else:
            problems.add("gems_kernel_overrides", op, f"gems serves no overload {op!r}: an override "
                         "replaces one overload gems serves (e.g. 'add.Tensor', not 'add')")
    keeps = _defined_forms(policy.gate_keeps, forms, "keep", problems)
    leaves = _defined_forms(policy.gate_leaves, forms, "leave", problems)
    if not problems.found:
        return policy
    return dataclasses.replace(policy, configs=configs, compiler_options=options, overrides=overrides,
                               gate_keeps=keeps, gate_leaves=leaves, problems=policy.problems + tuple(problems.found))
