"""A selected backend's answers, frozen into plain lookup tables.

Built once at selection; the per-op path reads dicts and frozensets only.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .compat import accepted_options
from .contract import Deviation, KernelConfig, KernelOverride, KernelVariant, OpGate
from .selection import Selection

ALL_DTYPES = frozenset()  # an empty gate set means "every dtype"


@dataclass(frozen=True)
class Policy:
    configs: Mapping[str, tuple[KernelConfig, ...]] = field(default_factory=dict)
    #: ATen name (overload or packet) -> gated dtype names; empty set = the whole op
    gates: Mapping[str, frozenset[str]] = field(default_factory=dict)
    gate_reasons: Mapping[str, str] = field(default_factory=dict)
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

    def gate_for(self, overload: str) -> frozenset[str] | None:
        """Dtype names that send ``overload`` to ATen (empty = always); None = never."""
        dtypes: set[str] = set(self.unsupported_dtypes)
        whole = False
        for name in (overload, overload.split(".", 1)[0]):
            if name in self.gates:
                if not self.gates[name]:
                    whole = True
                dtypes |= self.gates[name]
        if whole:
            return ALL_DTYPES
        return frozenset(dtypes) if dtypes else None

    def options_for(self, kernel: str) -> Mapping[str, Any]:
        merged = dict(self.compiler_options.get("*", {}))
        merged.update(self.compiler_options.get(kernel, {}))
        return merged


def _as_gate(entry: str | OpGate) -> OpGate:
    if isinstance(entry, OpGate):
        return entry
    if isinstance(entry, str):
        return OpGate(op=entry)
    raise TypeError(f"gems_unsupported_ops entries must be str or OpGate, got {entry!r}")


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


def build_policy(selection: Selection) -> Policy:
    backend = selection.backend
    arch = selection.arch
    configs = backend.call("gems_tuned_configs", arch=arch) or {}
    gates: dict[str, set[str]] = {}
    reasons: dict[str, str] = {}
    for entry in backend.call("gems_unsupported_ops") or ():
        gate = _as_gate(entry)
        whole = not gate.dtypes or (gate.op in gates and not gates[gate.op])
        gates[gate.op] = set() if whole else gates.get(gate.op, set()) | set(gate.dtypes)
        if gate.reason:
            reasons[gate.op] = gate.reason
    raw_options = backend.call("gems_compiler_options", arch=arch) or {}
    accepted = accepted_options(selection.execution.triton_backend)
    kept: dict[str, dict[str, Any]] = {}
    dropped: list[str] = []
    for kernel, options in raw_options.items():
        for key, value in options.items():
            if key in accepted:
                kept.setdefault(kernel, {})[key] = value
            else:
                dropped.append(f"{kernel}: {key}={value!r}")
    overrides: dict[str, Callable[..., Any]] = {}
    for override in backend.call("gems_kernel_overrides") or ():
        if not isinstance(override, KernelOverride):
            raise TypeError(f"gems_kernel_overrides entries must be KernelOverride, got {override!r}")
        overrides[override.op] = override.fn
    from .variants import POINTS  # it imports the runtime, which imports this module

    variants: dict[str, KernelVariant] = {}
    offered = () if os.environ.get("GEMS_KERNEL_VARIANTS", "1") in ("0", "off") else (
        backend.call("gems_kernel_variants", arch=arch) or ())
    for entry in offered:
        if not isinstance(entry, KernelVariant):
            raise TypeError(f"gems_kernel_variants entries must be KernelVariant, got {entry!r}")
        if entry.point not in POINTS:
            raise ValueError(f"gems_kernel_variants: {entry.point!r} is not a variant point of this gems-core "
                             f"(points: {', '.join(sorted(POINTS))})")
        if not callable(entry.fn):
            raise TypeError(f"gems_kernel_variants: the {entry.point!r} variant's fn is not callable: {entry.fn!r}")
        if entry.point in variants:
            raise ValueError(f"gems_kernel_variants: two variants for {entry.point!r}")
        variants[entry.point] = entry
    kept_configs: dict[str, tuple[KernelConfig, ...]] = {}
    for name, cfgs in configs.items():
        kept_configs[name] = tuple(_accepted_config(name, c, accepted, dropped) for c in cfgs)
    return Policy(
        configs=kept_configs,
        gates={op: frozenset(d) for op, d in gates.items()},
        gate_reasons=reasons,
        unsupported_dtypes=selection.descriptor.dtypes.unsupported(),
        compiler_options=kept,
        dropped_options=tuple(dropped),
        deviations=tuple(backend.call("gems_known_deviations") or ()),
        overrides=overrides,
        variants=variants,
    )
