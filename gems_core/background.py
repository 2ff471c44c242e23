"""First calls without waiting for the compiler (``GEMS_COMPILE``).

A Triton kernel compiles on the user's machine the first time a signature is met, which
takes seconds; ATen's kernels ship compiled. In background mode (``GEMS_COMPILE=background``,
or ``auto``, the default, on an accelerator) the first call of a signature whose
kernel is not compiled yet runs on ATen at once, while the kernel compiles elsewhere; the
calls after that switch to gems' kernel when it is ready. ``GEMS_COMPILE=sync`` compiles (and tunes) before the call returns.

- **Only whole calls go to ATen.** :func:`tracked` wraps each dispatched call: a call of
  an in-place or ``out=`` op may be handed to ATen (:class:`NotReady`) only while it has
  launched no kernel, on this thread, itself or through the gems ops it calls, and no
  in-place or ``out=`` op it called was served by ATen writing its arguments. Past that point
  a kernel that is not ready is compiled (or awaited) in the call, so such an op is never
  left half-written. A functional op's call (one writing none of its arguments) may go to
  ATen at any point: what it launched wrote only tensors it made. What is seen is what runs
  gems' Python: kernels launched and ops called through the dispatcher, not a call the
  native layer replays in C++; so an op's code calls in-place ops on its own arguments only
  after its first launch.
- **Compiles run in worker processes.** A worker compiles the same kernel as the process
  would (the function imported from its module, the signature, constexprs, attributes,
  options and target the process's own Triton binder gave), into Triton's on-disk cache; the
  process's own compile of the signature is then a cache hit, which costs milliseconds. A
  worker checks that its source hashes as the process's does. Workers are a small pool of
  fresh interpreters started on first need (not ``multiprocessing``, whose ``spawn`` would run
  the user's script again in each), at a lower priority, with the GPUs hidden: compiling needs
  no device. A worker also builds the kernel's launcher where the process's Triton compiles
  one per signature (3.6), and the process hashes Triton's installation (part of every
  compile's cache key) in a thread meanwhile, so loading a kernel a worker compiled costs
  milliseconds. Compiling in a thread of the process instead would share the model thread's GIL
  with Triton's code generator, which is Python, and leave one compile at a time; a thread
  is used only for a kernel no worker can import (one defined inside a function).
- **Failures degrade.** A worker that dies turns background compiles off for the process,
  with one warning; a kernel the worker could not compile is compiled by the process (its
  error, if any, is then the usual :class:`~gems_core.launch_cache.KernelCompileError`).
- **Tuning waits.** In background mode a tunable kernel whose bucket has no choice yet (no
  shipped table entry, nothing remembered on disk) takes its first config, and nothing is
  benchmarked on the model's path: ``python -m gems_core warmup`` and ``tune`` (which
  compile synchronously) tune, and the next process finds their choices.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import importlib
import importlib.util
import logging
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Hashable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import torch

from . import compat, logs, runtime, settings
from .recording import recording

_log = logs.get("launch")


class NotReady(BaseException):  # noqa: N818 - a signal, like StopIteration
    """The kernel a call needs compiles in the background: ATen serves the call. A
    ``BaseException`` so that op code handling its own errors (``except Exception``) lets
    it through to the dispatcher. Its arguments: the kernel's name and the compile's future."""


def mode(rt: runtime.Runtime | None = None) -> str:
    """``"background"`` or ``"sync"``: how a kernel not compiled yet is met (``GEMS_COMPILE``;
    auto: background on an accelerator, sync on the CPU interpreter). Compile-only execution
    and a process whose workers failed are always sync."""
    chosen = settings.get("GEMS_COMPILE")
    if chosen == "sync" or _failure is not None:
        return "sync"
    rt = rt or runtime.peek()
    if rt is None or rt.compile_only:
        return "sync"
    return "background" if chosen == "background" or not rt.interpreter else "sync"


def describe() -> str:
    """One line for ``python -m gems_core info``."""
    how = mode(runtime.current())
    if _failure is not None:
        return f"sync (background compiles failed: {_failure})"
    if how == "sync":
        return "sync: a kernel compiles (and tunes) before its first call returns"
    workers = pool_size()
    return (f"background: ATen serves a call whose kernel is not compiled yet while "
            f"{workers} worker process{'es' if workers > 1 else ''} compile{'' if workers > 1 else 's'} it")


def tracked(fn: Callable[..., Any], free: bool = False) -> Callable[..., Any]:
    """``fn`` (an op's implementation) keeping, per thread, whether its call launched a
    kernel yet (``recording.launched``: False until the call launches one, when the launch
    sets it); what the call launched counts for the calls around it. A ``free`` op (one that
    writes none of its arguments) may go to ATen whole after it launched too: its kernels
    wrote only tensors it made, which ATen's call replaces; so an op of several kernels
    whose second is not compiled yet goes to ATen instead of waiting for it.

    While the compile that sent the op's last call to ATen runs, the op's next calls go to
    ATen at once, without running ``fn`` up to the same wait: in the seconds compiles take, a
    model meets each op hundreds of times, and ``fn``'s Python before its launch costs several
    times ATen's whole call. (A call of other shapes may so wait for that compile too: it
    runs on gems once it is done.)"""
    waiting: list[Any] = [None]  # NotReady's (kernel, future) of the op's last call

    def call(*args: Any, **kwargs: Any) -> Any:
        compiling = waiting[0]
        if compiling is not None:
            if not compiling[1].done():
                raise NotReady(*compiling)
            waiting[0] = None
        outer, outer_args, outer_free = recording.launched, recording.call_args, recording.free
        recording.launched, recording.call_args, recording.free = False, (args, kwargs), free
        try:
            return fn(*args, **kwargs)
        except NotReady as exc:
            waiting[0] = exc.args if len(exc.args) > 1 else None
            raise
        finally:
            recording.launched = None if outer is None else outer or recording.launched
            recording.call_args, recording.free = outer_args, outer_free

    return call


def wrote_through_aten(written: Iterable[Any] = ()) -> None:
    """An in-place or ``out=`` op called inside another call was served by ATen, writing
    ``written`` (tensors, lists of tensors): where that is memory of the outer call's
    arguments, the outer call may no longer be handed to ATen. Tensors the call made itself
    (a buffer it zeroes, an upload into a new device tensor) do not bind it."""
    if recording.may_defer() and _touches_arguments(written):
        recording.launched, recording.free = True, False


def _storages(values: Iterable[Any]) -> set[int] | None:
    """The addresses of the storages of the tensors among ``values`` (and in their lists);
    None where one has no storage to tell."""
    found: set[int] = set()
    for value in values:
        for tensor in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(tensor, torch.Tensor):
                try:
                    found.add(tensor.untyped_storage().data_ptr())
                except (RuntimeError, NotImplementedError):
                    return None
    return found


def _touches_arguments(written: Iterable[Any]) -> bool:
    called = recording.call_args
    if called is None:
        return True
    targets = _storages(written)
    sources = _storages((*called[0], *called[1].values()))
    if targets is None or sources is None:
        return True
    return bool((targets - {0}) & sources)  # an empty tensor (address 0) is not written


@dataclass(frozen=True)
class CompileJob:
    """What a worker compiles: the kernel as its module defines it, and the compile Triton's
    binder set up for the call (see :func:`job_for`)."""

    module: str
    qualname: str
    path: str  # where the module's source is, for a module loaded from a file (generated code)
    requires: tuple[str, ...]  # modules to import first (those of the JIT functions it calls)
    signature: Mapping[str, Any]
    constexprs: Mapping[Any, Any]
    attrs: Mapping[Any, Any]
    options: Mapping[str, Any]
    target: Any  # triton's GPUTarget
    source_hash: str
    cache_dir: str  # Triton's cache folder as the process has it
    #: the class of the process's driver that makes a compiled kernel's launcher when the
    #: process loads it (``module:qualname``; "" where unknown), built here too: Triton
    #: versions that compile a C launcher per signature (3.6: a C compiler run, about a
    #: quarter second) then find it in their cache
    launcher: str = ""


def job_for(kernel: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any],
            binder: tuple[Any, Any, Any] | None = None) -> CompileJob:
    """The compile that ``kernel.warmup(*args, **kwargs)`` would do, for a worker: taken
    from the kernel's own binder for the current device, or ``binder`` (target, backend,
    binding function) where given. Raises where a worker could not import the kernel."""
    from triton import knobs
    from triton.runtime.jit import JITFunction

    fn = kernel.fn
    if "<locals>" in fn.__qualname__ or fn.__module__ == "__main__":
        raise LookupError(f"{fn.__module__}.{fn.__qualname__} cannot be imported elsewhere")
    if binder is None:
        from triton.runtime import driver

        *_, target, backend, bind = kernel.device_caches[driver.active.get_current_device()]
    else:
        target, backend, bind = binder
    bound, specialization, options = bind(*args, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(backend, dict(kwargs), bound, specialization, options)
    requires = sorted({value.fn.__module__ for value in fn.__globals__.values()
                       if isinstance(value, JITFunction) and not value.fn.__module__.startswith("triton")}
                      - {fn.__module__})
    return CompileJob(
        module=fn.__module__, qualname=fn.__qualname__, path=fn.__code__.co_filename,
        requires=tuple(requires), signature=dict(signature), constexprs=dict(constexprs),
        attrs=dict(attrs), options=dict(options.__dict__), target=target,
        source_hash=compat.source_class(kernel)(kernel, signature, constexprs, attrs).hash(),
        cache_dir=knobs.cache.dir,
        launcher=_launcher_class() if binder is None else "",
    )


def _launcher_class() -> str:
    """Where the active driver's launcher class is defined, as ``module:qualname``."""
    from triton.runtime import driver

    cls = getattr(driver.active, "launcher_cls", None)
    if not isinstance(cls, type) or "<locals>" in cls.__qualname__:
        return ""
    return f"{cls.__module__}:{cls.__qualname__}"


def _build_launcher(job: CompileJob, compiled: Any) -> None:
    """Make ``compiled``'s launcher as the process's first load of it would, leaving what it
    builds in Triton's cache. A launcher that needs a device (Triton versions with one
    launcher for all signatures reach for the driver) fails here harmlessly: the process
    makes its own."""
    if not job.launcher:
        return
    module, _, qualname = job.launcher.partition(":")
    try:
        _attribute(importlib.import_module(module), qualname)(compiled.src, compiled.metadata)
    except Exception:  # noqa: BLE001 - an optimization: the process builds what is missing
        pass


def _attribute(root: Any, qualname: str) -> Any:
    """``root``'s attribute at dotted ``qualname``."""
    for part in qualname.split("."):
        root = getattr(root, part)
    return root


def compile_job(job: CompileJob) -> float:
    """Compile ``job`` into Triton's cache (in a worker); the seconds it took."""
    import triton
    from triton import knobs

    started = time.perf_counter()
    for name in job.requires:
        importlib.import_module(name)
    try:
        module = importlib.import_module(job.module)
    except ModuleNotFoundError:  # generated code, loaded from its file as the process did
        spec = importlib.util.spec_from_file_location(job.module, job.path)
        if spec is None or spec.loader is None:
            raise LookupError(f"cannot import {job.module} from {job.path}") from None
        module = importlib.util.module_from_spec(spec)
        sys.modules[job.module] = module
        spec.loader.exec_module(module)
    kernel = _attribute(module, job.qualname)
    source = compat.source_class(kernel)(kernel, dict(job.signature), dict(job.constexprs), dict(job.attrs))
    if source.hash() != job.source_hash:
        raise LookupError(f"{job.module}.{job.qualname} hashes differently in a worker")
    knobs.cache.dir = job.cache_dir
    compiled = triton.compile(source, target=job.target, options=dict(job.options))
    _build_launcher(job, compiled)
    return time.perf_counter() - started


# ---------------------------------------------------------------- waiting for compiles

#: why background compiles were turned off for the process (a worker died); None while on
_failure: str | None = None


class WorkerFailed(RuntimeError):
    """A worker process died or stopped answering."""


def _start(name: str, job: Any) -> concurrent.futures.Future[Any]:
    """Start ``job`` (kernel ``name``'s compile): a :class:`CompileJob` goes to a worker, a callable to a compile
    thread; None (nothing to compile: the interpreter's kernels) is done at once."""
    if job is None:
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        done.set_result(0.0)
        return done
    if isinstance(job, CompileJob):
        return _pool().submit(job)
    return _threads().submit(job)


#: seconds a call that may not go to ATen waits for its kernel's compile under way in a worker
#: before it compiles the kernel itself
WAIT_LIMIT = 120.0

#: starts a kernel's compile job and gives its future: the seam through which tests make
#: compiles slow
compiler: Callable[[str, Any], concurrent.futures.Future[Any]] = _start


def await_compile(name: str, pending: MutableMapping[Hashable, Any], key: Hashable,
                  make_job: Callable[[], Any]) -> None:
    """Return when the kernel ``name`` for launch ``key`` is to be compiled in this call
    (its background compile is done, or this call may not go to ATen: then it waits for one
    under way); raise :class:`NotReady` when ATen serves the call meanwhile. ``pending``
    holds the background compiles by key; ``make_job()`` describes one (:func:`_start`)."""
    deferrable = recording.may_defer() and mode() == "background"
    future = pending.get(key)
    if future is None:
        if not deferrable:
            return
        try:
            job = make_job()
        except Exception as exc:  # noqa: BLE001 - Triton internals this version lacks
            if _log.isEnabledFor(logging.DEBUG):
                logs.once(_log, ("background", name, "in call"), "%s: compiled in the call (%s: %s)",
                          name, type(exc).__name__, exc)
            return
        future = pending[key] = compiler(name, job)
    if not future.done():
        if deferrable:
            if _log.isEnabledFor(logging.DEBUG):
                logs.once(_log, ("background", name, key), "compiling %s in the background; ATen serves", name)
            raise NotReady(name, future)
        # this call may not go to ATen: it compiles a job still queued itself, and waits for
        # one under way (for a while: a worker that hangs must not hang the call)
        if future.cancel() or not concurrent.futures.wait([future], timeout=WAIT_LIMIT).done:
            return
    if future.cancelled():
        return
    error = future.exception()
    if isinstance(error, WorkerFailed):
        _turn_off(str(error))
    elif error is not None and _log.isEnabledFor(logging.DEBUG):
        logs.once(_log, ("background", name, "failed", key), "%s: the background compile failed (%s); "
                  "compiling in the call", name, error)


def _turn_off(reason: str) -> None:
    global _failure
    if _failure is None:
        _failure = reason
        warnings.warn(f"gems: background compiles failed ({reason}); kernels now compile before "
                      "their first call returns", RuntimeWarning, stacklevel=5)


# ---------------------------------------------------------------- workers

def pool_size() -> int:
    """Worker processes: up to 8, leaving at least half the cores to the model's own host
    threads (a cold Llama forward and training step meet 30-60 kernels: with 4 workers on an
    H100 host the last compiled about 30 s after the first call)."""
    return max(1, min(8, (os.cpu_count() or 2) // 2 - 1))


def _worker_command() -> list[str]:
    return [sys.executable, "-c", "from gems_core.background import serve; serve()"]


def _worker_environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    # a worker compiles for the target it is given: no device, no driver context
    env.update(CUDA_VISIBLE_DEVICES="", HIP_VISIBLE_DEVICES="", ROCR_VISIBLE_DEVICES="")
    return env


_HEADER = struct.Struct("<Q")


def _send(stream: Any, data: bytes) -> None:
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _pickled(value: Any) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def _receive(stream: Any) -> Any:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError("the stream ended")
    size = _HEADER.unpack(header)[0]
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the stream ended")
    return pickle.loads(data)


def serve() -> None:
    """A worker's loop: a job from stdin, its outcome to stdout, until stdin ends."""
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # what the compiler prints must not mix with the replies
    try:
        os.nice(5)
    except (AttributeError, OSError):
        pass
    requests = sys.stdin.buffer
    while True:
        try:
            job = _receive(requests)
        except EOFError:
            return
        try:
            outcome: tuple[bool, Any] = (True, compile_job(job))
        except BaseException as exc:  # noqa: BLE001 - reported to the process, which compiles itself
            outcome = (False, f"{type(exc).__name__}: {str(exc).strip()[-2000:]}")
        _send(replies, _pickled(outcome))


def _exit_status(process: subprocess.Popen[bytes] | None) -> int | None:
    """The status of a worker whose pipe broke (it may take a moment to exit); None if it
    runs on."""
    try:
        return process.wait(timeout=5) if process is not None else None
    except subprocess.TimeoutExpired:
        return None


class _Pool:
    """Worker processes fed from one queue, each through a thread of this process that
    waits on it (blocked in a read, without the GIL)."""

    def __init__(self, size: int) -> None:
        self.jobs: queue.SimpleQueue[tuple[bytes, concurrent.futures.Future[Any]] | None] = queue.SimpleQueue()
        self.processes: list[subprocess.Popen[bytes]] = []
        self.lock = threading.Lock()
        for i in range(size):
            threading.Thread(target=self._serve, name=f"gems-compile-{i}", daemon=True).start()

    def submit(self, job: CompileJob) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            self.jobs.put((_pickled(job), future))
        except (pickle.PickleError, TypeError, AttributeError) as exc:  # a constexpr no worker can take
            future.set_exception(RuntimeError(f"the compile cannot be sent to a worker: {exc}"))
        return future

    def _serve(self) -> None:
        process: subprocess.Popen[bytes] | None = None
        while True:
            item = self.jobs.get()
            if item is None:
                return
            job, future = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                if process is None:
                    process = subprocess.Popen(_worker_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                               stderr=subprocess.DEVNULL, env=_worker_environment())
                    with self.lock:
                        self.processes.append(process)
                _send(process.stdin, job)
                ok, value = _receive(process.stdout)
            except (OSError, EOFError, pickle.UnpicklingError) as exc:
                code = _exit_status(process)
                reason = f"a compile worker exited with status {code}" if code is not None else f"a compile worker failed: {exc}"
                self._fail(WorkerFailed(reason), future)
                return
            if ok:
                future.set_result(value)
            else:
                future.set_exception(RuntimeError(value))

    def _fail(self, error: WorkerFailed, future: concurrent.futures.Future[Any]) -> None:
        future.set_exception(error)
        while True:  # what is queued will not be compiled in the background either
            try:
                item = self.jobs.get_nowait()
            except queue.Empty:
                return
            if item is not None and item[1].set_running_or_notify_cancel():
                item[1].set_exception(error)

    def close(self) -> None:
        with self.lock:
            for process in self.processes:
                if process.stdin is not None:
                    process.stdin.close()  # the worker's loop ends at the end of its input


_pools: dict[str, Any] = {}
_pools_lock = threading.Lock()
if hasattr(os, "register_at_fork"):  # a forked child has none of the parent's threads
    os.register_at_fork(after_in_child=_pools.clear)


def _pool() -> _Pool:
    with _pools_lock:
        pool = _pools.get("workers")
        if pool is None:
            pool = _pools["workers"] = _Pool(pool_size())
            atexit.register(pool.close)
            # the process's first own load of a compiled kernel needs this: made meanwhile
            threading.Thread(target=compat.prime_compile_key, name="gems-compile-key", daemon=True).start()
        return pool


def _threads() -> concurrent.futures.ThreadPoolExecutor:
    with _pools_lock:
        pool = _pools.get("threads")
        if pool is None:
            pool = _pools["threads"] = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="gems-compile-thread")
        return pool
