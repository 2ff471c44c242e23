"""Ahead-of-time compilation of one kernel launch for a Triton target, with no device.

In compile-only execution :class:`~gems_core.launch_cache.LaunchCache` hands each launch
here instead of running it. Signature, specialization attributes (16-byte alignment,
divisibility by 16, ...) and options come from Triton's own binder built for the target's
backend, so what compiles here is what Triton compiles for the same call on that chip.
Identical compiles are done once per process; observers (the compile check) see each one.

Relies on Triton internals that 3.9 has (``create_function_from_signature``,
``JITFunction._pack_args``); :func:`resource_usage` reads what ``ptxas -v`` and the AMDGPU
assembler metadata report.
"""

from __future__ import annotations

import contextlib
import io
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .contract import TritonTarget


@dataclass
class AotCompile:
    """One ahead-of-time compile: what was compiled, and the compiled kernel or the error."""

    name: str  # the LaunchCache's name ("pointwise", "reduction", ...)
    function: str  # the @triton.jit function, module-qualified
    target: TritonTarget
    num_warps: int
    num_stages: int
    options: Mapping[str, Any]
    constexprs: Mapping[str, Any]
    signature: str = ""
    compiled: Any = None  # triton's CompiledKernel
    log: str = ""  # what the compiler printed (ptxas -v on cuda)
    error: str | None = None
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


_observers: list[Callable[[AotCompile], None]] = []
#: set by :func:`deduplicating`: what makes two compiles the same; None = every specialization
_same_compile: Callable[[AotCompile], Any] | None = None
_done: dict[Any, AotCompile] = {}
_binders: dict[Any, tuple[Any, Any]] = {}
_lock = threading.RLock()


@contextmanager
def observe(callback: Callable[[AotCompile], None]) -> Iterator[None]:
    """Call ``callback`` with every compile done inside the block (not with repeats)."""
    _observers.append(callback)
    try:
        yield
    finally:
        _observers.remove(callback)


@contextmanager
def deduplicating(key: Callable[[AotCompile], Any]) -> Iterator[None]:
    """Inside the block, a compile whose ``key(result)`` (of a result not yet compiled:
    names, target, config, constexprs and signature are set) was seen already is not done
    again; the earlier result stands in. Outside, only what Triton would itself cache is."""
    global _same_compile
    previous, _same_compile = _same_compile, key
    try:
        yield
    finally:
        _same_compile = previous


def _gpu_target(target: TritonTarget) -> Any:
    from triton.backends.compiler import GPUTarget

    return GPUTarget(target.backend, target.arch, target.warp_size)


def _binder(kernel: Any, target: TritonTarget) -> tuple[Any, Any]:
    key = (id(kernel), target)
    found = _binders.get(key)
    if found is None:
        from triton.compiler import make_backend
        from triton.runtime.jit import create_function_from_signature

        backend = make_backend(_gpu_target(target))
        found = (backend, create_function_from_signature(kernel.signature, kernel.params, backend))
        _binders[key] = found
    return found


def _launch_kwargs(
    kernel: Any, constexprs: Mapping[str, Any], num_warps: int, num_stages: int, options: Mapping[str, Any]
) -> dict[str, Any]:
    from triton import knobs

    # what JITFunction.run adds to every launch's options
    kwargs: dict[str, Any] = {"debug": bool(getattr(kernel, "debug", None) or knobs.runtime.debug)}
    for knob in ("instrumentation_mode", "fpsan_homomorphic_casts"):  # as this Triton has them
        if hasattr(knobs.compilation, knob):
            kwargs[knob] = getattr(knobs.compilation, knob)
    kwargs.update(options)
    kwargs.update(constexprs)
    kwargs["num_warps"] = num_warps
    kwargs["num_stages"] = num_stages
    return kwargs


def _short(exc: BaseException) -> str:
    text = str(exc).strip()
    # ptxas failures carry the whole PTX after the tool's message: keep the message
    text = text.split("\nRepro command:", 1)[0]
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) > 12:  # the cause is at the end of a CompilationError, after the source
        lines = lines[:3] + [f"... ({len(lines) - 11} lines)"] + lines[-8:]
    return f"{type(exc).__name__}: " + "\n".join(lines)


def compile_launch(
    kernel: Any,
    name: str,
    target: TritonTarget,
    args: tuple[Any, ...],
    constexprs: Mapping[str, Any],
    num_warps: int,
    num_stages: int,
    options: Mapping[str, Any],
) -> AotCompile:
    """Compile ``kernel`` for ``target`` as Triton would for ``kernel[grid](*args, ...)``.
    Never raises for a compile failure: the result's ``error`` says what went wrong."""
    function = f"{getattr(kernel, 'module', '?')}.{getattr(kernel.fn, '__qualname__', name)}"
    result = AotCompile(
        name=name,
        function=function,
        target=target,
        num_warps=num_warps,
        num_stages=num_stages,
        options=dict(options),
        constexprs=dict(constexprs),
    )
    kwargs = _launch_kwargs(kernel, constexprs, num_warps, num_stages, options)
    try:
        backend, binder = _binder(kernel, target)
        bound, specialization, binder_options = binder(*args, **kwargs)
        parsed, signature, constants, attrs = kernel._pack_args(
            backend, kwargs, bound, specialization, binder_options
        )
    except Exception as exc:  # noqa: BLE001 - an option or config the compiler rejects
        if _same_compile is not None:
            key: Any = ("same", _same_compile(result))
        else:
            key = (getattr(kernel, "cache_key", id(kernel)), target, repr(sorted(kwargs.items(), key=str)))
        return _finish(key, result, error=_short(exc))
    result.signature = ", ".join(v for k, v in signature.items() if v != "constexpr")
    if _same_compile is not None:
        key = ("same", _same_compile(result))
    else:
        key = (
            kernel.cache_key,
            target,
            tuple(signature.items()),
            repr(sorted(constants.items())),
            repr(sorted(attrs.items())),
            repr(sorted(parsed.__dict__.items())),
        )
    with _lock:
        done = _done.get(key)
        if done is not None:
            return done
        return _compile(key, result, kernel, target, signature, constants, attrs, parsed)


def _compile(
    key: Any, result: AotCompile, kernel: Any, target: TritonTarget,
    signature: Any, constants: Any, attrs: Any, parsed: Any,
) -> AotCompile:
    from triton.compiler import ASTSource

    return _finish(key, result, error=_run(result, ASTSource(kernel, signature, constants, attrs), parsed.__dict__))


def _run(result: AotCompile, source: Any, options: Mapping[str, Any]) -> str | None:
    """Compile ``source`` for ``result.target`` into ``result`` (kernel, compiler log,
    seconds); the error text, or None."""
    import triton
    from triton import knobs

    log = io.StringIO()
    started = time.perf_counter()
    previous = knobs.nvidia.dump_ptxas_log, knobs.compilation.always_compile
    knobs.nvidia.dump_ptxas_log = True  # ptxas -v's report: registers and spills
    knobs.compilation.always_compile = True  # a cached kernel would come without that report
    try:
        # Triton prints the ptxas report, and a failing kernel's whole PTX, to stdout
        with contextlib.redirect_stdout(log):
            result.compiled = triton.compile(source, target=_gpu_target(result.target), options=dict(options))
    except Exception as exc:  # noqa: BLE001 - any failure is this kernel's compile error
        return _short(exc)
    finally:
        knobs.nvidia.dump_ptxas_log, knobs.compilation.always_compile = previous
        result.seconds = time.perf_counter() - started
        result.log = log.getvalue()
    return None


def compile_source(name: str, target: TritonTarget, source: Any, options: Mapping[str, Any]) -> AotCompile:
    """Compile a prepared ``source`` (an ``ASTSource``, or Gluon's) for ``target``: a
    backend's own kernel (a kernel variant), whose compiles the backend lists. Never raises
    for a compile failure; observers are not told."""
    fn = getattr(source, "fn", None)
    function = f"{getattr(fn, 'module', '?')}.{getattr(getattr(fn, 'fn', None), '__qualname__', name)}"
    result = AotCompile(
        name=name, function=function, target=target, num_warps=int(options.get("num_warps", 4)),
        num_stages=int(options.get("num_stages", 3)), options=dict(options), constexprs={},
    )
    result.error = _run(result, source, options)
    return result


def _finish(key: Any, result: AotCompile, error: str | None) -> AotCompile:
    with _lock:
        done = _done.get(key)
        if done is not None:
            return done
        result.error = error
        _done[key] = result
    for callback in tuple(_observers):
        callback(result)
    return result


def resource_usage(result: AotCompile) -> dict[str, Any]:
    """What the compiled kernel uses: ``shared`` (bytes), ``warp_size`` (the compiler's),
    ``registers`` (per thread; VGPRs on AMD), ``spills`` (bytes of spill stores for
    ptxas, spilled VGPRs + SGPRs on AMD) and the raw figures they come from. Absent keys
    were not obtainable."""
    compiled = result.compiled
    if compiled is None:
        return {}
    metadata = compiled.metadata
    usage: dict[str, Any] = {
        "shared": int(metadata.shared),
        "warp_size": int(getattr(metadata, "warp_size", result.target.warp_size)),
        "num_warps": int(metadata.num_warps),
    }
    ptxas = _ptxas_figures(result.log)
    if ptxas:
        usage.update(ptxas)
        usage["registers"] = ptxas.get("ptxas_registers")
        usage["spills"] = ptxas.get("ptxas_spill_stores")
    amdgcn = compiled.asm.get("amdgcn") if hasattr(compiled.asm, "get") else None
    if amdgcn:
        figures = _amdgcn_figures(amdgcn)
        usage.update(figures)
        if "vgpr_count" in figures:
            usage["registers"] = figures["vgpr_count"]
        if "vgpr_spill_count" in figures or "sgpr_spill_count" in figures:
            usage["spills"] = figures.get("vgpr_spill_count", 0) + figures.get("sgpr_spill_count", 0)
    return {k: v for k, v in usage.items() if v is not None}


_PTXAS = {
    "ptxas_registers": r"Used (\d+) registers",
    "ptxas_stack_frame": r"(\d+) bytes stack frame",
    "ptxas_spill_stores": r"(\d+) bytes spill stores",
    "ptxas_spill_loads": r"(\d+) bytes spill loads",
}
_AMDGCN = {
    "vgpr_count": r"\.vgpr_count:\s+(\d+)",
    "sgpr_count": r"\.sgpr_count:\s+(\d+)",
    "vgpr_spill_count": r"\.vgpr_spill_count:\s+(\d+)",
    "sgpr_spill_count": r"\.sgpr_spill_count:\s+(\d+)",
    "scratch_size": r"; ScratchSize: (\d+)",
    "lds_size": r"\.group_segment_fixed_size:\s+(\d+)",
}


def _first_ints(text: str, patterns: Mapping[str, str]) -> dict[str, int]:
    found = {}
    for name, pattern in patterns.items():
        match = re.search(pattern, text)
        if match:
            found[name] = int(match.group(1))
    return found


def _ptxas_figures(log: str) -> dict[str, int]:
    # the entry function's block: Triton inlines everything, so there is one
    entry = log.find("Compiling entry function")
    return _first_ints(log[entry:] if entry >= 0 else log, _PTXAS)


def _amdgcn_figures(asm: str) -> dict[str, int]:
    return _first_ints(asm, _AMDGCN)
