"""The compile tier: every kernel x every tuned config of a backend, compiled ahead of time
for each of its Triton targets, with resource use checked against its limits. No device is
needed where the installed Triton targets the chip (upstream: cuda sm_80/sm_90, hip
gfx90a/gfx942).

    python -m gems_conformance.compile_check --device nvidia [--target cuda:90] [--json out.json]

Each target is checked in a child process in compile-only execution
(``GEMS_DEVICE=<name> GEMS_COMPILE_TARGET=<target>``, ``TRITON_INTERPRET`` unset): there
the backend's policy applies, every op is driven through the conformance suite's sample
inputs on CPU tensors, and each kernel launch is compiled for the target instead of run
(:mod:`gems_core.aot`). Every tunable kernel is driven once per config of its space. A
compile is identified by what Triton specializes on, and identical compiles are done once.
Outputs are never computed, so host code that reads them sees garbage; an op that fails on
the host is recorded, not fatal. gems' own ops read nothing back there: a result size a
kernel counts is replaced by a size the result can have (``gems_core.ops.masked.read_back``),
and indices are checked in the kernel, as on the chip.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gems_core.contract import KernelConfig, Limits, TritonTarget

OK, ERROR, OVER_LIMITS, HOST_ERROR, NOT_EXERCISED = (
    "ok", "error", "over_limits", "host_error", "not_exercised",
)
#: statuses that fail the tier
FAILING = frozenset({ERROR, OVER_LIMITS})


@dataclass
class CompileRecord:
    """One (kernel, config, target): compiled or not, and what it uses against the limits."""

    kernel: str  # the launch cache's name: "pointwise", "reduction", ...
    config: str  # KernelConfig.describe() of the config compiled
    target: str  # "cuda:90"
    status: str  # ok | error | over_limits | host_error | not_exercised
    message: str = ""
    function: str = ""  # the @triton.jit function compiled
    signature: str = ""  # runtime argument types, as Triton specialized them
    constexprs: str = ""  # the kernel's constexprs that are not config parameters
    op: str = ""  # the op case, dtype and sample that first needed this compile
    dtype: str = ""
    sample: str = ""
    shared: int | None = None  # bytes of shared memory per block
    shared_limit: int | None = None
    threads: int | None = None  # num_warps * warp size
    threads_limit: int | None = None
    registers: int | None = None  # per thread (VGPRs on AMD)
    spills: int | None = None  # bytes of spill stores (ptxas) or spilled registers (AMD)
    seconds: float = 0.0
    resources: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.status in FAILING


# --- the parent: one child process per target ------------------------------------------


def check_backend(
    name: str,
    targets: Sequence[TritonTarget] | None = None,
    ops: Sequence[str] | None = None,
    profile: str = "quick",
    dedupe: str = "signature",
    jobs: int | None = None,
    variants: bool = True,
) -> list[CompileRecord]:
    """Compile every kernel x config of backend ``name`` for ``targets`` (default: the
    descriptor's ``compile_targets``, else its ``target``). ``ops`` limits the op cases
    driven (case names or ATen names); ``dedupe`` is one of :data:`DEDUPE_LEVELS`;
    ``variants=False`` leaves out the backend's kernel variants (a backend whose own tests
    compile them). Targets are checked in parallel child processes."""
    if targets is None:
        from gems_core.selection import compile_targets

        targets = compile_targets(_descriptor(name))
    if not targets:
        return []
    cpus = jobs or os.cpu_count() or 1
    workers = max(1, min(len(targets), cpus))
    # each target's cases are split among child processes: one process compiling every
    # kernel of a backend takes tens of minutes
    shards = max(1, min(MAX_SHARDS, cpus // len(targets)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = pool.map(lambda t: _check_target(name, t, ops, profile, dedupe, shards, variants), targets)
        return [record for chunk in results for record in chunk]


def _descriptor(name: str) -> Any:
    from gems_core.plugins import BackendError, discover

    installed = discover()
    backend = installed.get(name)
    if backend is None or not backend.ok or backend.descriptor is None:
        known = ", ".join(sorted(installed))
        why = "is not installed" if backend is None else f"failed to load: {backend.error}"
        raise BackendError(f"gems backend {name!r} {why} (installed: {known})")
    return backend.descriptor


def _target_text(target: TritonTarget) -> str:
    return f"{target.backend}:{target.arch}"


def _compiler_missing(target: TritonTarget) -> str:
    """Why the installed Triton cannot compile for ``target`` ("" when it can): a chip whose
    Triton is a vendor fork is compile-checked with that fork installed."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    try:
        make_backend(GPUTarget(target.backend, target.arch, target.warp_size))
    except Exception as exc:  # noqa: BLE001 - Triton raises a bare RuntimeError here
        return (
            f"the installed Triton {triton.__version__} has no compiler for target "
            f"{_target_text(target)} ({exc}); run the compile check with the chip's own Triton"
        )
    return ""


#: child processes a target's cases are split among, at most
MAX_SHARDS = 8


def _check_target(
    name: str, target: TritonTarget, ops: Sequence[str] | None, profile: str, dedupe: str, shards: int = 1,
    variants: bool = True,
) -> list[CompileRecord]:
    missing = _compiler_missing(target)
    if missing:
        return [CompileRecord(kernel="*", config="-", target=_target_text(target),
                              status="not_exercised", message=missing)]
    with tempfile.TemporaryDirectory(prefix="gems-compile-check-") as tmp:
        env = dict(os.environ)
        env.pop("TRITON_INTERPRET", None)  # the interpreter compiles nothing
        env["GEMS_DEVICE"] = name
        env["GEMS_COMPILE_TARGET"] = f"{target.backend}:{target.arch}:{target.warp_size}"
        env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
        children = []
        for shard in range(shards):
            out = Path(tmp) / f"records-{shard}.json"
            # a cache of its own: every kernel is really compiled, and ptxas reports on each
            shard_env = {**env, "TRITON_CACHE_DIR": str(Path(tmp) / f"triton-cache-{shard}")}
            command = [sys.executable, "-m", "gems_conformance.compile_check", "--worker", "--json", str(out)]
            command += ["--profile", profile, "--dedupe", dedupe, "--shard", f"{shard}/{shards}"]
            if ops:
                command += ["--ops", ",".join(ops)]
            if not variants:
                command.append("--no-variants")
            children.append((out, subprocess.Popen(command, env=shard_env, stdout=subprocess.PIPE,
                                                   stderr=subprocess.PIPE, text=True)))
        found: list[list[CompileRecord]] = []
        failures = []
        for out, proc in children:
            stdout, stderr = proc.communicate()
            if proc.returncode == 0 and out.exists():
                found.append([CompileRecord(**row) for row in json.loads(out.read_text())["records"]])
            else:
                tail = "\n".join((stderr or stdout).strip().splitlines()[-15:])
                failures.append(CompileRecord(
                    kernel="*", config="-", target=_target_text(target), status=ERROR,
                    message=f"the compile check for this target failed (exit {proc.returncode}): {tail}",
                ))
        return failures + merge_shards(found, dedupe)


def merge_shards(shards: Sequence[Sequence[CompileRecord]], dedupe: str = "signature") -> list[CompileRecord]:
    """One target's records from its shards, as one process would have made them: a compile
    two shards both made (the same at the ``dedupe`` level) once, named for the first op case
    by name that needed it; a kernel "not exercised" only where no shard drove it."""
    driven = {r.kernel for chunk in shards for r in chunk if r.status != NOT_EXERCISED}
    chosen: dict[tuple[Any, ...], CompileRecord] = {}
    for chunk in shards:
        for record in chunk:
            if record.status == NOT_EXERCISED and record.kernel in driven:
                continue
            key = _merge_key(record, dedupe)
            held = chosen.get(key)
            if held is None or (record.op or "~") < (held.op or "~"):
                chosen[key] = record  # insertion order stays the first shard's
    return list(chosen.values())


def _merge_key(record: CompileRecord, dedupe: str) -> tuple[Any, ...]:
    if not record.function:  # not a compile (a host stop, a dropped option, a kernel not driven)
        return (record.kernel, record.config, record.target, record.status, record.message, record.op,
                record.dtype, record.sample)
    base = (record.kernel, record.function, record.target, record.config, record.status)
    if dedupe == "kernel":
        return base
    pointers = tuple(t for t in record.signature.split(", ") if t.startswith("*"))
    if dedupe == "signature":
        return (*base, record.constexprs, pointers)
    return (*base, record.constexprs, record.signature)


# --- the child: compile-only execution for one target ---------------------------------


@dataclass
class _Context:
    """What the worker is running while compiles happen, for the records."""

    op: str = ""
    dtype: str = ""
    sample: str = ""
    used: set[str] = field(default_factory=set)  # tunables picked during this op case


def check_in_process(
    ops: Sequence[str] | None = None, profile: str = "quick", dedupe: str = "signature",
    shard: tuple[int, int] = (0, 1), variants: bool = True,
) -> list[CompileRecord]:
    """The compile check in this process, which must run compile-only execution (see the
    module docstring); :func:`check_backend` runs it for each target. ``shard`` (index,
    count): this process drives every count-th op case from index; the first shard also
    compiles the backend's variants (unless ``variants`` is False)."""
    from gems_core import aot, runtime, tuning

    rt = runtime.current()
    if not rt.compile_only:
        raise RuntimeError("check_in_process needs GEMS_COMPILE_TARGET (see gems_conformance.compile_check)")
    target = rt.selection.execution.compile_target
    limits = rt.selection.descriptor.limits_for(target.arch)
    index, count = shard
    records = _dropped_option_records(rt.policy.dropped_options, target) if index == 0 else []
    spaces = {name: t.configs() for name, t in tuning.tunables().items()}
    context = _Context()
    compiled: set[str] = set()

    def on_compile(result: aot.AotCompile) -> None:
        compiled.add(result.name)
        records.append(_record(result, spaces, limits, context))

    cases = _select_cases(ops, profile)[index::count]
    rounds = max((len(c) for c in spaces.values()), default=1)
    used_by: dict[tuple[str, str], set[str]] = {}
    with aot.observe(on_compile), aot.deduplicating(_same_compile(dedupe, spaces)), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")  # compile failures are records here, not warnings
        for round_index in range(rounds):
            with tuning.forcing(_picker(spaces, round_index, context)):
                for case in cases:
                    _drive_case(case, round_index, spaces, used_by, context, records, target, rt)
    if index == 0 and variants:
        records += _variant_records(rt, target, limits, ops)
    for name, configs in spaces.items():
        if name not in compiled:
            records.append(CompileRecord(
                kernel=name, config="; ".join(c.describe() for c in configs),
                target=_target_text(target), status=NOT_EXERCISED,
                message="no op case drove this kernel: its configs were not compiled",
            ))
    return records


def _variant_records(rt: Any, target: TritonTarget, limits: Limits,
                     ops: Sequence[str] | None) -> list[CompileRecord]:
    """The selected backend's kernel variants compiled for ``target`` (each compile its
    ``compiles`` lists), within ``ops`` when given (a point belongs to its op)."""
    from gems_core import aot
    from gems_core.variants import POINT_OPS

    records = []
    for point, entry in sorted(rt.policy.variants.items()):
        op = POINT_OPS.get(point, "")
        if entry.compiles is None or (ops and op not in ops):
            continue
        name = f"{point} (variant)"
        try:
            wanted = list(entry.compiles(target))
        except Exception as exc:  # noqa: BLE001 - the backend's listing failed: a record, not a crash
            records.append(CompileRecord(kernel=name, config="-", target=_target_text(target), status=HOST_ERROR,
                                         message=f"listing its compiles failed: {type(exc).__name__}: {exc}"))
            continue
        for item in wanted:
            result = aot.compile_source(name, target, item.source, item.options)
            record = _record(result, {}, limits, _Context(op=op))
            record.config = item.config
            records.append(record)
    return records


#: how finely compiles are told apart (what is compiled once)
DEDUPE_LEVELS = {
    "kernel": "each kernel function x config, for the first argument types that reach it",
    "signature": "each kernel function x pointer dtypes x constexprs x config (default)",
    "exact": "every specialization Triton would compile (alignment, divisibility, int widths)",
}


def _same_compile(level: str, spaces: dict[str, Any]) -> Callable[[Any], Any] | None:
    if level not in DEDUPE_LEVELS:
        raise ValueError(f"dedupe level {level!r}: one of {', '.join(DEDUPE_LEVELS)}")
    if level == "exact":
        return None

    def key(result: Any) -> Any:
        config = (result.num_warps, result.num_stages, repr(sorted(result.options.items())))
        params = {p for c in spaces.get(result.name, ()) for p in c.params}
        constexprs = sorted((k, repr(v)) for k, v in result.constexprs.items()
                            if level == "signature" or k in params)
        if level == "kernel":
            return (result.function, result.target, config, tuple(constexprs))
        pointers = tuple(t for t in result.signature.split(", ") if t.startswith("*"))
        return (result.function, result.target, config, tuple(constexprs), pointers)

    return key


def _drive_case(
    case: _Case, round_index: int, spaces: dict[str, Any], used_by: dict[tuple[str, str], set[str]],
    context: _Context, records: list[CompileRecord], target: TritonTarget, rt: Any,
) -> None:
    from gems_core.dispatch import use_gems

    name, overloads, dtypes, call, samples = case
    todo = [
        dtype for dtype in dtypes
        # later rounds: only cases that reach a tunable with that many configs
        if not round_index or any(len(spaces[t]) > round_index for t in used_by.get((name, str(dtype)), ()))
    ]
    if not todo:
        return
    for dtype in todo:
        batch = list(samples(dtype))  # inputs are made by ATen, before gems serves anything
        context.op, context.dtype, context.used = name, _dtype_name(dtype), set()
        # only the case's own overloads on gems: what it derives from its inputs on the
        # host (``-y``) is then computed by ATen, not left uncomputed
        with use_gems(include=overloads):
            for sample in batch:
                context.sample = sample.label
                records.extend(_drive(call, sample, context, target, rt))
        used_by.setdefault((name, str(dtype)), set()).update(context.used)


def _picker(
    spaces: dict[str, tuple[KernelConfig, ...]], round_index: int, context: _Context
) -> Callable[[Any], KernelConfig]:
    def pick(tunable: Any) -> KernelConfig:
        context.used.add(tunable.name)
        configs = spaces.get(tunable.name) or tunable.configs()
        return configs[round_index] if round_index < len(configs) else configs[0]

    return pick


def _drive(call: Callable[..., Any], sample: Any, context: _Context, target: TritonTarget, rt: Any) -> list[CompileRecord]:
    try:
        call(*sample.args, **sample.kwargs)
    except Exception as exc:  # noqa: BLE001 - host code on uncomputed outputs, an op's check
        return [CompileRecord(
            kernel="-", config="-", target=_target_text(target), status=HOST_ERROR,
            message=f"{type(exc).__name__}: {exc}"[:500],
            op=context.op, dtype=context.dtype, sample=context.sample,
        )]
    finally:
        # a compile failure sent the op to ATen for good; the next config must compile anew
        rt.runtime_fallbacks.clear()
    return []


def _record(result: Any, spaces: dict[str, Any], limits: Limits, context: _Context) -> CompileRecord:
    from gems_core.aot import resource_usage

    params = {p for c in spaces.get(result.name, ()) for p in c.params}
    config = KernelConfig(
        {k: v for k, v in result.constexprs.items() if k in params},
        result.num_warps, result.num_stages, result.options,
    )
    others = {k: _plain(v) for k, v in result.constexprs.items() if k not in params}
    record = CompileRecord(
        kernel=result.name, config=config.describe(), target=_target_text(result.target),
        status=OK, function=result.function, signature=result.signature,
        constexprs=", ".join(f"{k}={v}" for k, v in others.items()),
        op=context.op, dtype=context.dtype, sample=context.sample,
        shared_limit=limits.shared_memory_per_block, threads_limit=limits.max_threads_per_block,
        seconds=round(result.seconds, 3),
    )
    if result.error is not None:
        record.status, record.message = ERROR, result.error
        return record
    usage = resource_usage(result)
    record.resources = usage
    record.shared = usage.get("shared")
    record.registers = usage.get("registers")
    record.spills = usage.get("spills")
    warp_size = usage.get("warp_size", result.target.warp_size)
    record.threads = result.num_warps * warp_size
    problems = _limit_problems(record, result, limits, warp_size, config)
    if problems:
        record.status, record.message = OVER_LIMITS, "; ".join(problems)
    elif _INEXACT_REMAINDER.search(_llvm_ir(result.compiled)):
        record.status, record.message = ERROR, (
            "a float remainder by LLVM's frem, which GPU targets compute as x - trunc(x / y) * y "
            "(wrong past 2^24 quotients in float32 and 2^53 in float64, -inf for a subnormal "
            "divisor): use gems_core.ops.kernel_lib.fmod_fn")
    return record


#: LLVM's remainder of floats, float64 included (its quotient passes 2^53 as well)
_INEXACT_REMAINDER = re.compile(r"\bfrem (?:[a-z]+ )*(?:float|half|bfloat|double|<\d+ x (?:float|half|bfloat|double)>)")


def _llvm_ir(compiled: Any) -> str:
    asm = getattr(compiled, "asm", None)
    text = asm.get("llir") if hasattr(asm, "get") else None
    return text if isinstance(text, str) else ""


def _limit_problems(
    record: CompileRecord, result: Any, limits: Limits, warp_size: int, config: KernelConfig
) -> list[str]:
    problems = []
    if warp_size != result.target.warp_size:
        problems.append(f"the compiler uses warps of {warp_size}, the target says {result.target.warp_size}")
    if record.shared is not None and record.shared > limits.shared_memory_per_block:
        problems.append(f"shared memory {record.shared} B > {limits.shared_memory_per_block} B per block")
    if record.threads is not None and record.threads > limits.max_threads_per_block:
        problems.append(f"{record.threads} threads > {limits.max_threads_per_block} per block")
    if result.num_warps > limits.max_warps:
        problems.append(f"num_warps {result.num_warps} > max_warps {limits.max_warps}")
    if limits.max_block_elements:
        for name, value in config.params.items():
            if name.startswith("BLOCK") and value > limits.max_block_elements:
                problems.append(f"{name}={value} > max_block_elements {limits.max_block_elements}")
    return problems


def _dropped_option_records(dropped: Iterable[str], target: TritonTarget) -> list[CompileRecord]:
    from gems_core.compat import TRITON_VERSION

    records = []
    for entry in dropped:  # "kernel: option=value"
        kernel, _, option = entry.partition(": ")
        records.append(CompileRecord(
            kernel=kernel, config=option, target=_target_text(target), status=ERROR,
            message=f"compiler option {option} is not an option of Triton {TRITON_VERSION} for "
            f"{target.backend}",
        ))
    return records


def _plain(value: Any) -> Any:
    return value if isinstance(value, (int, float, bool, str)) or value is None else str(value)


def _dtype_name(dtype: Any) -> str:
    return str(dtype).replace("torch.", "")


# --- what drives the ops: the conformance suite's op cases ----------------------------

_Case = tuple[str, tuple[str, ...], tuple[Any, ...], Callable[..., Any], Callable[[Any], Iterator[Any]]]


def _select_cases(ops: Sequence[str] | None, profile: str) -> list[_Case]:
    import torch

    from gems_core.registry import all_impls

    served = all_impls()
    wanted = set(ops or ())
    device = torch.device("cpu")
    cases: list[_Case] = []
    for name, case in sorted(_op_cases().items()):
        names = {name, *case.aten, *(a.split(".", 1)[0] for a in case.aten)}
        if wanted and not wanted & names:
            continue
        overloads = tuple(a for a in case.aten if a in served)
        if overloads:
            cases.append((name, overloads, tuple(case.dtypes), case.call, _sampler(case, device, profile)))
    return cases


def _sampler(case: Any, device: Any, profile: str) -> Callable[[Any], Iterator[Any]]:
    return lambda dtype: iter(case.samples(dtype, device, profile))


def _op_cases() -> dict[str, Any]:
    try:
        from .cases import all_cases
    except ImportError:
        return _builtin_cases()
    return all_cases()


def _builtin_cases() -> dict[str, Any]:
    """Without the conformance suite: one contiguous float32/float16 call per common op."""
    import torch

    @dataclass(frozen=True)
    class Sample:
        label: str
        args: tuple[Any, ...]
        kwargs: dict[str, Any] = field(default_factory=dict)

    @dataclass(frozen=True)
    class Case:
        aten: tuple[str, ...]
        call: Callable[..., Any]
        arity: int
        dtypes: tuple[Any, ...] = (torch.float32, torch.float16)

        def samples(self, dtype: Any, device: Any, profile: str) -> Iterator[Sample]:
            yield Sample("contiguous", tuple(torch.ones(33, 17, dtype=dtype, device=device)
                                             for _ in range(self.arity)))

    return {
        "add": Case(("add.Tensor",), torch.add, 2),
        "mul": Case(("mul.Tensor",), torch.mul, 2),
        "div": Case(("div.Tensor",), torch.div, 2),
        "neg": Case(("neg",), torch.neg, 1),
        "sum": Case(("sum.dim_IntList",), lambda x: torch.sum(x, dim=1), 1),
    }


# --- the command line -----------------------------------------------------------------


def summarize(records: Sequence[CompileRecord]) -> str:
    """A per-target summary, then every record that is not ok."""
    lines = []
    for target in sorted({r.target for r in records}):
        rows = [r for r in records if r.target == target]
        compiles = [r for r in rows if r.status in (OK, OVER_LIMITS) or (r.status == ERROR and r.function)]
        kernels = {r.kernel for r in compiles}
        functions = {r.function for r in compiles}
        configs = {(r.kernel, r.config) for r in compiles}
        counts = {s: sum(r.status == s for r in rows) for s in (OK, ERROR, OVER_LIMITS, HOST_ERROR, NOT_EXERCISED)}
        seconds = sum(r.seconds for r in rows)
        lines.append(
            f"{target}: {len(compiles)} compiles of {len(functions)} kernel functions "
            f"({len(kernels)} launch kernels, {len(configs)} kernel x config pairs) in "
            f"{seconds:.1f} s compile time; "
            + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        )
        regs = [r.registers for r in rows if r.registers is not None]
        shared = [r.shared for r in rows if r.shared is not None]
        if regs or shared:
            lines.append(
                f"  max registers/thread {max(regs, default=0)}, max shared {max(shared, default=0)} B, "
                f"spilling kernels {sum(1 for r in rows if r.spills)}"
            )
    for r in records:
        if r.status != OK:
            where = f" [{r.op} {r.dtype} {r.sample}]" if r.op else ""
            lines.append(f"{r.status.upper():14} {r.target} {r.kernel} ({r.config}){where}: {r.message}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gems_conformance.compile_check",
        description="Compile every gems kernel x tuned config of a backend ahead of time for "
        "its Triton targets, and check resource use against its limits.",
    )
    parser.add_argument("--device", help="the backend (a GEMS_DEVICE name)")
    parser.add_argument("--target", action="append", default=[],
                        help="backend:arch[:warp size], e.g. cuda:90 (repeatable; default: the "
                        "backend's compile targets)")
    parser.add_argument("--ops", default="", help="comma-separated op case or ATen names")
    parser.add_argument("--profile", default="quick", help="sample profile (default quick)")
    parser.add_argument("--dedupe", default="signature", choices=sorted(DEDUPE_LEVELS),
                        help="what is compiled once: "
                        + "; ".join(f"{k}: {v}" for k, v in DEDUPE_LEVELS.items()))
    parser.add_argument("--json", help="write the records here")
    parser.add_argument("--no-variants", dest="variants", action="store_false",
                        help="leave out the backend's kernel variants (its own kernels)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--shard", default="0/1", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    ops = [o for o in args.ops.split(",") if o] or None
    if args.worker:
        index, count = (int(part) for part in args.shard.split("/"))
        return _worker(ops, args.profile, args.dedupe, args.json, (index, count), args.variants)
    if not args.device:
        parser.error("--device is required")
    targets = None
    if args.target:
        from gems_core.selection import parse_target

        descriptor = _descriptor(args.device)
        targets = [parse_target(spec, descriptor) for spec in args.target]
    started = time.perf_counter()
    records = check_backend(args.device, targets, ops, args.profile, args.dedupe, variants=args.variants)
    print(summarize(records))
    print(f"wall time {time.perf_counter() - started:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in records], indent=1))
    return 1 if any(r.failed for r in records) else 0


def _worker(ops: Sequence[str] | None, profile: str, dedupe: str, out: str | None,
            shard: tuple[int, int] = (0, 1), variants: bool = True) -> int:
    started = time.perf_counter()
    records = check_in_process(ops, profile, dedupe, shard, variants)
    payload = {"seconds": time.perf_counter() - started, "records": [asdict(r) for r in records]}
    if out:
        Path(out).write_text(json.dumps(payload))
    else:
        print(json.dumps(payload))
    return 0


if __name__ == "__main__":
    sys.exit(main())
