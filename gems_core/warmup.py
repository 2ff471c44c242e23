"""Ahead-of-time warm-up: compile and tune what a workload needs before it runs.

A workload is a list of op signatures (the ATen overload, and every argument: tensors as
dtype, shape, strides and storage offset, other values as they are), kept as JSON::

    {"format": 1, "signatures": [{"op": "mm", "args": [{"tensor": {...}}, ...], "kwargs": {}}]}

:func:`recording` captures the signatures of the ops gems serves while a model runs once;
:data:`SETS` names built-in ones (``smoke``, ``llama-decode``, ``llama-prefill``). :func:`run`
replays each signature with random inputs of its layout under ``use_gems()``: the kernels
compile, several configs are benchmarked where a kernel has them, and what results lands in
gems' cache folder and Triton's, where the workload's first run finds it. Compiling is spread
over worker processes; on a device that tunes, the workers compile every candidate config
into Triton's cache and one process then benchmarks them alone, so that no two measurements
share the device. ``GEMS_CACHE_DIR`` and ``TRITON_CACHE_DIR`` pointed at one folder make a
cache another machine with the same chip, driver, torch and Triton can use (baked into a
container image, say).
"""

from __future__ import annotations

import concurrent.futures
import inspect
import json
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import native, plan_cache, runtime, tuning
from .dispatch import use_gems
from .registry import all_impls
from .shipped import write_table

FORMAT = 1
Signature = dict[str, Any]


class Unrecordable(TypeError):
    """An argument a signature cannot hold (a generator, a symbolic size)."""


# ---------------------------------------------------------------- signatures


def _encode(value: Any, device_type: str, grad: bool = False) -> Any:
    """JSON for ``value``; a tensor keeps ``requires_grad`` only where ``grad`` (a call
    replayed with its backward pass: below autograd it means nothing)."""
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided or value.is_quantized:
            raise Unrecordable(f"a {value.layout} tensor")
        return {"tensor": {
            "dtype": str(value.dtype).removeprefix("torch."),
            "shape": list(value.shape),
            "stride": list(value.stride()),
            "offset": value.storage_offset(),
            "grad": grad and value.requires_grad,
            "host": value.device.type == "cpu" and device_type != "cpu",
        }}
    if isinstance(value, (list, tuple)):
        return [_encode(v, device_type, grad) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": None}
    if isinstance(value, (torch.memory_format, torch.layout)):
        return {type(value).__name__: str(value).removeprefix("torch.")}
    raise Unrecordable(f"an argument of type {type(value).__name__}")


def _tensor(spec: dict[str, Any], device: str) -> torch.Tensor:
    dtype = getattr(torch, spec["dtype"])
    shape, stride, offset = spec["shape"], spec["stride"], spec["offset"]
    size = offset + (1 + sum((n - 1) * s for n, s in zip(shape, stride)) if all(shape) else 0)
    where = "cpu" if spec.get("host") else device
    if dtype == torch.bool:
        base = torch.rand(size, device=where) < 0.5
    elif dtype.is_floating_point or dtype.is_complex:
        base = torch.randn(size, dtype=dtype, device=where)
    else:  # integers index tensors more often than not: 0 is in range of any non-empty dim
        base = torch.zeros(size, dtype=dtype, device=where)
    out = base.as_strided(shape, stride, offset)
    return out.requires_grad_() if spec.get("grad") else out


def _decode(value: Any, device: str) -> Any:
    if isinstance(value, list):
        return [_decode(v, device) for v in value]
    if not isinstance(value, dict):
        return value
    (kind, spec), = value.items()
    if kind == "tensor":
        return _tensor(spec, device)
    if kind == "device":
        return torch.device(device)
    return getattr(torch, spec)  # dtype, memory_format, layout


def _overload(name: str) -> Any:
    packet, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload or "default")


def signature(op: str, args: Sequence[Any], kwargs: dict[str, Any] | None = None,
              backward: bool = False) -> Signature:
    """The signature of calling ATen overload ``op`` (``"add.Tensor"``, ``"mm"``) with
    ``args``; ``backward`` replays a backward pass through its output too."""
    device_type = runtime.current().device_type
    sig: Signature = {
        "op": op,
        "args": _encode(list(args), device_type, backward),
        "kwargs": {k: _encode(v, device_type, backward) for k, v in (kwargs or {}).items()},
    }
    if backward:
        sig["backward"] = True
    return sig


def load(path: str | Path) -> list[Signature]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("signatures"), list):
        raise ValueError(f"{path} is not a gems signature file (format {FORMAT})")
    return data["signatures"]


def save(path: str | Path, signatures: Iterable[Signature]) -> None:
    lines = ",\n".join(json.dumps(sig) for sig in signatures)  # one signature a line
    Path(path).write_text(f'{{"format": {FORMAT}, "signatures": [\n{lines}\n]}}\n', encoding="utf-8")


# ---------------------------------------------------------------- recording


class Recording:
    """The distinct signatures of the gems ops called inside :func:`recording`."""

    def __init__(self) -> None:
        self._seen: dict[str, Signature] = {}
        self.skipped: dict[str, str] = {}  # op -> why a call of it could not be recorded
        self._lock = threading.Lock()

    @property
    def signatures(self) -> list[Signature]:
        return list(self._seen.values())

    def add(self, op: str, args: Sequence[Any], kwargs: dict[str, Any], backward: bool = False) -> None:
        try:
            sig = signature(op, args, kwargs, backward)
        except Unrecordable as exc:
            self.skipped[op] = str(exc)
            return
        with self._lock:
            self._seen.setdefault(json.dumps(sig, sort_keys=True), sig)


def _reaches_gems(func: Any, name: str, served: frozenset[str]) -> bool:
    """Whether a call of ``func`` runs a gems op: gems serves it, or it is a composite that
    calls ops gems may serve (``_to_copy`` and ``clone`` call ``copy_``); not a view."""
    if name in served:
        return True
    return (not func.is_view and "view" not in name
            and torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeExplicitAutograd"))


class _Calls(TorchDispatchMode):
    """The ATen calls that reach the backend's key (backward passes included)."""

    def __init__(self, served: frozenset[str], into: Recording) -> None:
        super().__init__()
        self.served, self.into = served, into
        self.kept: dict[Any, str | None] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = self.kept.get(func, "")
        if name == "":
            name = f"{func._opname}.{func._overloadname}".removesuffix(".default")
            name = self.kept[func] = name if _reaches_gems(func, name, self.served) else None
        if name is not None:
            self.into.add(name, args, kwargs)
        return func(*args, **kwargs)


@contextmanager
def recording() -> Iterator[Recording]:
    """Record every call of an op gems implements inside the block. Ops gems serves on the
    Autograd key (attention, rms_norm) are seen entering gems' function, on this thread and
    threads started inside the block; the others as they reach the dispatcher's backend key,
    also from autograd's threads."""
    into = Recording()
    impls = all_impls()
    plain = frozenset(name for name, impl in impls.items() if not impl.autograd)
    entered = {impl.fn.__code__: (name, inspect.signature(impl.fn)) for name, impl in impls.items()
               if impl.autograd and hasattr(impl.fn, "__code__")}
    previous = sys.getprofile()

    def profile(frame: Any, event: str, arg: Any) -> None:
        found = entered.get(frame.f_code) if event == "call" else None
        if found is not None:
            name, sig = found
            values = frame.f_locals
            args = [values[p.name] for p in sig.parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
            kwargs = {p.name: values[p.name] for p in sig.parameters.values() if p.kind is p.KEYWORD_ONLY}
            grad = torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)
            into.add(name, args, kwargs, backward=grad)
        if previous is not None:
            previous(frame, event, arg)

    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        with _Calls(plain, into):
            yield into
    finally:
        sys.setprofile(previous)
        threading.setprofile(previous)  # type: ignore[arg-type]


def record_script(script: str | Path, argv: Sequence[str] = ()) -> Recording:
    """Run ``script`` (as ``__main__``, with ``argv``) under ``use_gems()`` and record it. A
    script that ends with ``sys.exit(0)`` has run; another exit status is raised on."""
    import runpy

    saved = sys.argv
    sys.argv = [str(script), *argv]
    try:
        with recording() as rec, use_gems():
            try:
                runpy.run_path(str(script), run_name="__main__")
            except SystemExit as exc:
                if exc.code not in (None, 0):
                    raise
    finally:
        sys.argv = saved
    return rec


# ---------------------------------------------------------------- named sets


def _t(shape: Sequence[int], dtype: str | None = None, stride: Sequence[int] | None = None) -> dict[str, Any]:
    """A tensor of a built-in signature (contiguous unless ``stride`` says otherwise; the
    model's dtype unless ``dtype`` says otherwise)."""
    if stride is None:
        stride, step = [], 1
        for n in reversed(shape):
            stride.insert(0, step)
            step *= max(n, 1)
    return {"tensor": {"dtype": dtype or LLAMA["dtype"], "shape": list(shape), "stride": list(stride), "offset": 0,
                       "grad": False, "host": False}}


def _sig(op: str, *args: Any, **kwargs: Any) -> Signature:
    return {"op": op, "args": list(args), "kwargs": kwargs}


def _linear(n: int, k: int, m: int) -> Signature:
    """``x @ weight.T`` of a Linear without bias: weight is (m, k), read transposed."""
    return _sig("mm", _t([n, k]), _t([k, m], stride=[1, k]))


def _smoke() -> list[Signature]:
    """A few tiny ops, seconds on the CPU interpreter."""
    return [
        _sig("add.Tensor", _t([4, 8], "float32"), _t([8], "float32")),
        _sig("mul.Tensor", _t([4, 8], "float32", stride=[1, 4]), _t([4, 8], "float32")),
        _sig("mm", _t([8, 16], "float32"), _t([16, 8], "float32", stride=[1, 16])),
        _sig("_softmax", _t([4, 16], "float32"), -1, False),
    ]


#: the Hugging Face Llama the cold-start benchmark runs (benchmarks/coldstart.py)
LLAMA: dict[str, Any] = dict(hidden=2048, heads=32, kv_heads=4, head_dim=64, mlp=5632, vocab=32000,
                             prompt=384, dtype="bfloat16")


def _llama_layer(batch: int, tokens: int, kv: int) -> list[Signature]:
    """One decoder layer of :data:`LLAMA` at ``tokens`` new tokens over ``kv``."""
    h, heads, kv_heads, d, mlp = (LLAMA[k] for k in ("hidden", "heads", "kv_heads", "head_dim", "mlp"))
    n = batch * tokens
    q = _t([batch, heads, tokens, d], stride=[tokens * h, d, h, 1])  # (b, t, heads, d) transposed
    k = _t([batch, heads, kv, d])
    rows = [batch, tokens, h]
    sigs = [
        # Hugging Face's RMSNorm: in float32, then back
        _sig("_to_copy", _t(rows), dtype={"dtype": "float32"}),
        _sig("pow.Tensor_Scalar", _t(rows, "float32"), 2),
        _sig("mean.dim", _t(rows, "float32"), [-1], True),
        _sig("add.Scalar", _t([batch, tokens, 1], "float32"), 1e-6),
        _sig("rsqrt", _t([batch, tokens, 1], "float32")),
        _sig("mul.Tensor", _t(rows, "float32"), _t([batch, tokens, 1], "float32")),
        _sig("_to_copy", _t(rows, "float32"), dtype={"dtype": LLAMA["dtype"]}),
        _sig("mul.Tensor", _t([h]), _t(rows)),
        _linear(n, h, heads * d), _linear(n, h, kv_heads * d), _linear(n, heads * d, h),
        # rotary embedding: x * cos + rotate_half(x) * sin
        _sig("mul.Tensor", q, _t([batch, 1, tokens, d])),
        _sig("neg", _t([batch, heads, tokens, d // 2], stride=[tokens * h, d, h, 1])),
        _sig("cat", [_t([batch, heads, tokens, d // 2]), _t([batch, heads, tokens, d // 2])], -1),
        _sig("add.Tensor", _t([batch, heads, tokens, d]), _t([batch, heads, tokens, d])),
        _sig("scaled_dot_product_attention", _t([batch, heads, tokens, d]), k, k,
             None, 0.0, tokens > 1, scale=d ** -0.5),
        _sig("clone", _t([batch, tokens, heads, d], stride=[tokens * h, d, h, 1]),
             memory_format={"memory_format": "contiguous_format"}),
        _sig("add.Tensor", _t(rows), _t(rows)),
        _linear(n, h, mlp), _sig("silu", _t([batch, tokens, mlp])),
        _sig("mul.Tensor", _t([batch, tokens, mlp]), _t([batch, tokens, mlp])),
        _linear(n, mlp, h),
    ]
    if tokens < kv:  # the KV cache grows by concatenation
        past = _t([batch, kv_heads, kv - tokens, d])
        sigs.append(_sig("cat", [past, _t([batch, kv_heads, tokens, d])], -2))
    return sigs


def _llama_head(batch: int) -> list[Signature]:
    """The last position's logits and a greedy pick."""
    vocab = LLAMA["vocab"]
    return [
        _sig("embedding", _t([vocab, LLAMA["hidden"]]), _t([batch, 1], "int64")),
        _linear(batch, LLAMA["hidden"], vocab),
        _sig("_to_copy", _t([batch, vocab]), dtype={"dtype": "float32"}),
        _sig("argmax", _t([batch, vocab], "float32"), -1),
    ]


#: the KV lengths decode is warmed at: one per power-of-two bucket up to the model's 2048
DECODE_KV = (128, 256, 512, 1024, 2048)
BATCHES = (1, 2, 8)


def _llama_decode() -> list[Signature]:
    return [s for b in BATCHES for s in _llama_head(b) + [x for kv in DECODE_KV for x in _llama_layer(b, 1, kv)]]


def _llama_prefill() -> list[Signature]:
    t = LLAMA["prompt"]
    return [s for b in BATCHES for s in _llama_head(b) + _llama_layer(b, t, t)
            + [_sig("embedding", _t([LLAMA["vocab"], LLAMA["hidden"]]), _t([b, t], "int64"))]]


#: built-in signature sets, by name
SETS: dict[str, Callable[[], list[Signature]]] = {
    "smoke": _smoke,
    "llama-decode": _llama_decode,
    "llama-prefill": _llama_prefill,
}


def named(name: str) -> list[Signature]:
    if name not in SETS:
        raise ValueError(f"no signature set {name!r}; the sets are {', '.join(SETS)}")
    unique: dict[str, Signature] = {}
    for sig in SETS[name]():
        unique.setdefault(json.dumps(sig, sort_keys=True), sig)
    return list(unique.values())


# ---------------------------------------------------------------- replaying


def replay(sig: Signature) -> dict[str, Any]:
    """Call ``sig``'s op once under ``use_gems()`` with random inputs of its layout; the
    result counts the gems kernel launches (0: ATen served it) or says what failed."""
    device = runtime.current().device_type
    result: dict[str, Any] = {"op": sig["op"], "launches": 0}
    start = time.perf_counter()
    try:
        op = _overload(sig["op"])
        args = _decode(sig["args"], device)
        kwargs = {k: _decode(v, device) for k, v in sig["kwargs"].items()}
        plan_cache.clear_all()  # a call a kept plan serves launches unseen: count them all
        with use_gems(), plan_cache.record() as launches:
            out = op(*args, **kwargs)
            if sig.get("backward"):
                outs = [o for o in (out if isinstance(out, (tuple, list)) else [out])
                        if isinstance(o, torch.Tensor) and o.requires_grad]
                torch.autograd.backward(outs, [torch.randn_like(o) for o in outs])
        if device != "cpu":
            getattr(torch, device).synchronize()
        result["launches"] = len(launches)
    except Exception as exc:  # noqa: BLE001 - one signature that fails does not stop the rest
        result["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    result["seconds"] = time.perf_counter() - start
    return result


class Progress:
    """``label [#####     ] 12/40  30%  eta 0:07`` on ``stream``, redrawn in place on a
    terminal, every tenth elsewhere."""

    def __init__(self, total: int, label: str, stream: TextIO | None = None) -> None:
        self.total, self.label, self.done = total, label, 0
        self.stream = stream if stream is not None else sys.stderr
        self.start = time.perf_counter()
        self.tty = self.stream.isatty()
        self._shown = -1

    def advance(self) -> None:
        self.done += 1
        tenth = 10 * self.done // max(self.total, 1)
        if self.tty or tenth != self._shown or self.done == self.total:
            self._shown = tenth
            elapsed = time.perf_counter() - self.start
            eta = int(elapsed / self.done * (self.total - self.done))
            bar = "#" * (20 * self.done // max(self.total, 1))
            line = (f"{self.label} [{bar:<20}] {self.done}/{self.total} "
                    f"{100 * self.done // max(self.total, 1):3d}%  eta {eta // 60}:{eta % 60:02d}")
            end = "\n" if not self.tty or self.done == self.total else ""
            self.stream.write(("\r" if self.tty else "") + line + end)
            self.stream.flush()


def _worker_init(env: dict[str, str]) -> None:
    os.environ.update(env)


def _tunes() -> bool:
    rt = runtime.current()
    return not (rt.interpreter or rt.compile_only) and tuning._autotune()


def default_jobs() -> int:
    return max(1, min(16, (os.cpu_count() or 2) // 2))


def _in_workers(signatures: Sequence[Signature], jobs: int, env: dict[str, str],
                bar: Progress | None) -> list[dict[str, Any]]:
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context, initializer=_worker_init,
                                                initargs=(env,)) as pool:
        futures = [pool.submit(replay, sig) for sig in signatures]
        for _ in concurrent.futures.as_completed(futures):
            if bar:
                bar.advance()
    results = []
    for sig, future in zip(signatures, futures):
        try:
            results.append(future.result())
        except Exception as exc:  # noqa: BLE001 - a worker that died (a crash in a compiler, say)
            results.append({"op": sig["op"], "launches": 0, "seconds": 0.0,
                            "error": f"the worker process failed: {type(exc).__name__}: {exc}"})
    return results


def run(signatures: Sequence[Signature], jobs: int | None = None, progress: TextIO | None = None,
        quiet: bool = False) -> dict[str, Any]:
    """Replay ``signatures``: in this process when ``jobs`` is 1, else compiled in ``jobs``
    worker processes (and then tuned here, one signature at a time, where the device tunes).
    Returns the summary: every signature's result, with counts."""
    jobs = min(default_jobs() if jobs is None else jobs, len(signatures))
    start = time.perf_counter()
    tunes = _tunes()
    phases: list[str] = []
    results: list[dict[str, Any]] = []
    if jobs > 1:
        # the native dispatch layer (where this device has it) is built here, into the cache,
        # while the workers compile; they run without it
        execution = runtime.current().selection.execution
        threading.Thread(target=native.available_for, args=(execution,), name="gems-native-build",
                         daemon=True).start()
        with tempfile.TemporaryDirectory(prefix="gems-warmup-") as scratch:
            # where the device tunes, the workers' timings share it: their choices are thrown away
            env = {"GEMS_NATIVE": "0", **({"GEMS_CACHE_DIR": scratch} if tunes else {})}
            results = _in_workers(signatures, jobs, env,
                                  None if quiet else Progress(len(signatures), "compile", progress))
        phases.append(f"compile ({jobs} processes)")
    if jobs <= 1 or tunes:
        bar = None if quiet else Progress(len(signatures), "tune" if tunes else "compile", progress)
        results = []
        for sig in signatures:
            results.append(replay(sig))
            if bar:
                bar.advance()
        phases.append("tune (this process)" if tunes else "compile (this process)")
    return {
        "signatures": len(signatures),
        "gems": sum(1 for r in results if r["launches"] and "error" not in r),
        "aten": sum(1 for r in results if not r["launches"] and "error" not in r),
        "failed": sum(1 for r in results if "error" in r),
        "launches": sum(r["launches"] for r in results),
        "seconds": round(time.perf_counter() - start, 3),
        "phases": phases,
        "results": results,
    }


def summary_text(summary: dict[str, Any]) -> str:
    lines = [
        f"warm-up: {summary['signatures']} signatures in {summary['seconds']:.1f} s "
        f"({', '.join(summary['phases']) or 'nothing to do'}): {summary['gems']} ran gems kernels "
        f"({summary['launches']} launches), {summary['aten']} ran on ATen, {summary['failed']} failed"
    ]
    lines += [f"  failed: {r['op']}: {r['error']}" for r in summary["results"] if "error" in r]
    return "\n".join(lines)


# ---------------------------------------------------------------- the commands


def main(command: str, argv: Sequence[str]) -> int:
    """``python -m gems_core warmup ...`` and ``python -m gems_core tune ...``."""
    import argparse

    parser = argparse.ArgumentParser(
        prog=f"python -m gems_core {command}",
        usage=f"python -m gems_core {command} [options] [FILE ...]" + (
            "\n       python -m gems_core warmup --record SCRIPT [--out FILE] [-- SCRIPT ARGUMENTS]"
            if command == "warmup" else ""),
        description=(
            "Compile and tune, before a workload runs, the kernels its op signatures need "
            "(a signature file from --record, or a named set)." if command == "warmup" else
            "Tune the kernels of a workload on this device from an empty cache and write the "
            "choices as a backend's shipped tuning table (gems_core.shipped)."
        ),
    )
    parser.add_argument("files", nargs="*", metavar="FILE", help="signature files (from --record)")
    parser.add_argument("--set", action="append", default=[], choices=sorted(SETS), dest="sets",
                        help="a built-in signature set (repeatable)")
    parser.add_argument("--jobs", type=int, default=None,
                        help=f"compiling processes (default {default_jobs()}; 1: this process only)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    if command == "warmup":
        parser.add_argument("--record", metavar="SCRIPT",
                            help="run SCRIPT once under use_gems() and write the signatures of its gems ops")
        parser.add_argument("--out", default="gems-signatures.json", help="where --record writes")
        parser.add_argument("--cache-dir", help="keep gems' and Triton's caches here (GEMS_CACHE_DIR, "
                            "TRITON_CACHE_DIR=DIR/triton), e.g. to copy into a container image")
    else:
        parser.add_argument("--out", required=True, help="the table to write (merged with the one there)")
    argv = list(argv)
    split = argv.index("--") if "--" in argv else len(argv)  # after --: the script's arguments
    args = parser.parse_args(argv[:split])
    if not (command == "warmup" and args.record):
        # compiling and tuning is what these commands are for; a recording keeps the process's
        # own mode (on a GPU, ATen serves while workers compile: the script runs at its speed)
        os.environ["GEMS_COMPILE"] = "sync"

    if command == "warmup" and args.cache_dir:
        os.environ["GEMS_CACHE_DIR"] = args.cache_dir
        os.environ["TRITON_CACHE_DIR"] = str(Path(args.cache_dir) / "triton")
    if command == "warmup" and args.record:
        rec = record_script(args.record, argv[split + 1:])
        save(args.out, rec.signatures)
        print(f"recorded {len(rec.signatures)} signatures of gems ops to {args.out}")
        for op, why in sorted(rec.skipped.items()):
            print(f"  not recorded: {op} ({why})", file=sys.stderr)
        return 0
    try:
        signatures = [s for f in args.files for s in load(f)] + [s for n in args.sets for s in named(n)]
    except (OSError, ValueError) as exc:
        parser.error(str(exc))
    if not signatures:
        parser.error("name signature files or --set")
    if command == "tune":
        if not _tunes():
            print("gems: nothing is benchmarked here (the Triton interpreter, compile-only "
                  "execution or GEMS_AUTOTUNE=0): run this on the device the table is for",
                  file=sys.stderr)
            return 2
        # every choice is measured now, on this device: no cache, no table from before
        os.environ["GEMS_CACHE_DIR"] = tempfile.mkdtemp(prefix="gems-tune-")
        os.environ["GEMS_SHIPPED_TUNING"] = "0"
    summary = run(signatures, args.jobs)
    if command == "tune":
        table = write_table(Path(args.out))
        summary["table"] = {"path": args.out, "device": table["device"],
                            "choices": sum(len(t["choices"]) for t in table["tunables"].values())}
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print(summary_text(summary))
        if "table" in summary:
            t = summary["table"]
            print(f"wrote {t['choices']} tuned choices for {t['device']} to {t['path']}")
    return 1 if summary["failed"] == summary["signatures"] else 0
