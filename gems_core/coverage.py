"""What a model's run asks of ATen, and how much of it gems serves.

    python -m gems_core info --coverage model.py [ARGS...]

runs ``model.py`` once (as ``__main__``, with ``ARGS``) and counts every ATen call that
reaches a backend's kernel (after PyTorch's decompositions, backward passes included), then
sorts the overloads into:

- ``gems``: gems implements the overload and the selected backend leaves it to gems (for
  some dtypes only, where its gate names dtypes);
- ``gated``: gems implements it, the selected backend sends every call to ATen;
- ``parts``: ATen implements it by calling other ops (``_to_copy`` calls ``copy_``), which
  gems may serve;
- ``aten``: no gems kernel: the list to read when a model runs around gems.

Allocations, views and ops that make no tensor are left out: there is no kernel to serve.
"""

from __future__ import annotations

import runpy
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import runtime
from .registry import all_impls

#: ops that allocate, describe or reshape a tensor (views whose schemas say so are found by
#: :func:`no_kernel`), or read one scalar to the host: no kernel to serve
NO_KERNEL = frozenset({"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided",
                       "set_", "resize_", "lift_fresh", "detach", "detach_", "size", "stride",
                       "is_same_size", "result_type", "record_stream", "alias", "_unsafe_view",
                       "as_strided_", "_local_scalar_dense", "item", "is_nonzero"})
_view_cache: dict[str, bool] = {}


def no_kernel(packet: str) -> bool:
    """Allocations, views (every overload returns an alias of an input that it does not
    write) and ops that make no tensor."""
    if packet in NO_KERNEL:
        return True
    if packet.endswith("_"):  # in place: writes its input (a foreach op returns nothing)
        return False
    if packet not in _view_cache:
        op = getattr(torch.ops.aten, packet, None)
        schemas = [getattr(op, o)._schema for o in op.overloads()] if op is not None else []
        # overloads that produce or write a tensor; with none (a dtype, a bool), no kernel
        tensors = [s for s in schemas if any("Tensor" in str(r.type) for r in s.returns)
                   or any(a.alias_info is not None and a.alias_info.is_write for a in s.arguments)]
        _view_cache[packet] = all(
            all(r.alias_info is not None and not r.alias_info.is_write for r in s.returns) for s in tensors)
    return _view_cache[packet]


class _Count(TorchDispatchMode):
    def __init__(self, into: Counter[str]) -> None:
        super().__init__()
        self.into = into

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func.namespace == "aten" and not no_kernel(func._opname):
            self.into[f"{func._opname}.{func._overloadname}".removesuffix(".default")] += 1
        return func(*args, **(kwargs or {}))


@contextmanager
def counting() -> Iterator[Counter[str]]:
    """Count the ATen calls (overload name -> calls) made inside the block."""
    calls: Counter[str] = Counter()
    with _Count(calls):
        yield calls


def trace_script(script: str | Path, argv: Sequence[str] = ()) -> Counter[str]:
    """The ATen calls of one run of ``script`` (as ``__main__``, with ``argv``)."""
    saved = sys.argv
    sys.argv = [str(script), *argv]
    try:
        with counting() as calls:
            runpy.run_path(str(script), run_name="__main__")
    finally:
        sys.argv = saved
    return calls


def classify(calls: Counter[str]) -> list[dict[str, Any]]:
    """One row per overload called: op, calls, status (gems, gated, parts, aten), why."""
    impls = all_impls()
    policy = runtime.current().policy
    rows = []
    for op, count in calls.most_common():
        packet, _, overload = op.partition(".")
        func = getattr(getattr(torch.ops.aten, packet), overload or "default")
        gate = policy.gate_for(op) if op in impls else None
        if op in impls and gate is not None and not gate:  # an empty gate: every dtype
            status, why = "gated", "the backend leaves it to ATen"
        elif op in impls:
            status, why = "gems", f"ATen for {', '.join(sorted(gate))}" if gate else ""
        elif torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeExplicitAutograd"):
            status, why = "parts", "ATen's implementation calls other ops"
        else:
            status, why = "aten", "no gems kernel"
        rows.append({"op": op, "calls": count, "status": status, "why": why})
    return rows


def render(rows: list[dict[str, Any]], limit: int = 25) -> str:
    total = sum(r["calls"] for r in rows)
    by_status: Counter[str] = Counter()
    for r in rows:
        by_status[r["status"]] += r["calls"]
    share = (lambda s: f"{100 * by_status[s] / total:.1f} %") if total else (lambda s: "-")
    lines = [
        f"{total} ATen calls of {len(rows)} overloads: gems {share('gems')}, composites of other "
        f"ops {share('parts')}, gated to ATen {share('gated')}, no gems kernel {share('aten')}",
    ]
    missing = [r for r in rows if r["status"] in ("aten", "gated")]
    if missing:
        lines += ["", "Left to ATen (calls, overload, why):"]
        lines += [f"  {r['calls']:>7}  {r['op']:<40} {r['why']}" for r in missing[:limit]]
        if len(missing) > limit:
            lines.append(f"  ... and {len(missing) - limit} more (--json lists every overload)")
    return "\n".join(lines)


def main(script: str, argv: Sequence[str], as_json: bool, emit: Callable[[str], None] = print) -> int:
    import json

    rows = classify(trace_script(script, argv))
    emit(json.dumps(rows, indent=2) if as_json else render(rows))
    return 0
