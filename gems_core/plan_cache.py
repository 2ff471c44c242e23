"""Per-call-signature launch plans: the host work a call signature settles, done once.

An op whose launch geometry depends only on its call's *signature* (operand dtypes, shapes,
strides and devices, plus its non-tensor arguments such as ``dim`` or ``keepdim``) builds a
plan on the first call of a signature: output shapes/strides, the chosen config, grids and
the static kernel arguments, bound to the compiled kernel through
:meth:`LaunchCache.bind <gems_core.launch_cache.LaunchCache.bind>`. A repeat call looks the
plan up by its signature and only allocates outputs and launches.

Rules for plans:

- Only what the signature decides goes into a plan; anything that depends on values (data
  pointers, numbers passed to the kernel) stays per call.
- A call whose validation fails raises before a plan exists, so every bad call raises.
- Nothing is stored while :func:`gems_core.tuning.forcing` overrides configs
  (:func:`gems_core.tuning.cacheable`): plans must not keep forced configs.
- Each cache is bounded: it is cleared when full (a new shape per step, as in decoding,
  would otherwise grow it without end).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch

from . import compat, launch_cache, tuning
from .contract import KernelConfig
from .launch_cache import LaunchCache, _arg_key, recording

DEFAULT_LIMIT = 4096

_CACHES: list[PlanCache] = []


def signature(t: torch.Tensor) -> tuple[Any, ...]:
    """What a plan may depend on of tensor ``t``: dtype, shape, strides, device."""
    return (t.dtype, t.shape, t.stride(), t.device)


def dense_strides(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether ``strides`` are the row-major strides of ``shape`` (as ``torch.empty`` would
    allocate): plans then allocate with ``torch.empty``, which costs less per call than
    ``torch.empty_strided``."""
    if len(shape) != len(strides):
        return False
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if stride != expected:
            return False
        expected *= max(size, 1)
    return True


def optional_signature(t: torch.Tensor | None) -> tuple[Any, ...] | None:
    return None if t is None else (t.dtype, t.shape, t.stride(), t.device)


class PlanCache:
    """Plans by call signature, for one op (or family of ops); bounded, thread-safe enough
    for the GIL (a lost store only costs a rebuild).

    The hit path is ``plan = cache.get(key)`` (a plain dict lookup); a miss builds the plan
    and offers it with :meth:`store`, which keeps it unless configs are being forced."""

    def __init__(self, name: str, limit: int = DEFAULT_LIMIT) -> None:
        self.name = name
        self.limit = limit
        self._plans: dict[Any, Any] = {}
        self.get = self._plans.get
        #: plans stored since creation (a test hook: a repeat call must not add one)
        self.stores = 0
        _CACHES.append(self)

    def __len__(self) -> int:
        return len(self._plans)

    def __contains__(self, key: Any) -> bool:
        return key in self._plans

    def store(self, key: Any, plan: Any) -> bool:
        """Keep ``plan`` for ``key``; False (nothing kept) while configs are forced."""
        if not tuning.cacheable():
            return False
        if len(self._plans) >= self.limit:
            self._plans.clear()
        self._plans[key] = plan
        self.stores += 1
        return True

    def clear(self) -> None:
        self._plans.clear()


class Launch:
    """One kernel launch of a plan: the kernel bound to its config, options and constexprs
    (:meth:`LaunchCache.bind`), the grid, and the static runtime arguments. A call passes
    the dynamic ones, which come before the static ones (``leading``: tensors) and, for some
    kernels, after them (``trailing``: numbers that vary per call).

    A Launch belongs to one plan, and a plan to one call signature, so the tensors at its
    leading positions always have the same dtypes: after the first launch, a call whose
    leading arguments are all tensors is launched straight from their addresses (the
    compiled kernel looked up by their 16-byte alignment alone)."""

    __slots__ = ("bound", "device_index", "fast", "grid", "static", "stream", "tail")

    def __init__(
        self,
        kernel: LaunchCache,
        grid: tuple[int, ...],
        leading: int,
        static: tuple[Any, ...],
        device: torch.device,
        config: KernelConfig | None = None,
        options: Mapping[str, Any] | None = None,
        trailing: int = 0,
        **constexprs: Any,
    ) -> None:
        first_trailing = leading + len(static)
        dynamic = (*range(leading), *range(first_trailing, first_trailing + trailing))
        self.bound = kernel.bind(dynamic, config=config, options=options, **constexprs)
        self.grid = (grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1)
        self.static = static
        self.device_index = device.index or 0
        #: alignment of the leading tensors (and, with trailing numbers, what Triton
        #: specializes of them) -> the compiled kernel's launcher; empty until a compiled
        #: (not interpreted) launch whose leading arguments are all tensors
        self.fast: dict[Any, Any] = {}
        self.tail: tuple[Any, ...] = ()  # the constexprs' values, which follow the arguments
        self.stream: Any = None

    def __call__(self, *leading: Any) -> None:
        if not (self.fast and self._direct(leading, ())):
            self.bound(self.grid, (*leading, *self.static), self.device_index)
            self._learn(leading, ())

    def with_trailing(self, leading: tuple[Any, ...], trailing: tuple[Any, ...]) -> None:
        if not (self.fast and self._direct(leading, trailing)):
            self.bound(self.grid, (*leading, *self.static, *trailing), self.device_index)
            self._learn(leading, trailing)

    def _direct(self, leading: tuple[Any, ...], trailing: tuple[Any, ...]) -> bool:
        """Launch through the launcher learnt for calls shaped like this one, if any."""
        try:
            addresses = [t.data_ptr() for t in leading]
        except AttributeError:  # not all tensors: the general path
            return False
        go = self.fast.get((tuple([a & 15 == 0 for a in addresses]), tuple(map(_arg_key, trailing)) if trailing else ()))
        if go is None or self.device_index != launch_cache._current_device():
            return False  # the general path makes the kernel's device current around it
        grid = self.grid
        full = (*addresses, *self.static, *trailing, *self.tail)
        recording.launched = True
        go(grid[0], grid[1], grid[2], self.stream(self.device_index), full)
        if recording.native is not None:
            recording.native.append((go, grid, full))
        return True

    def _learn(self, leading: tuple[Any, ...], trailing: tuple[Any, ...]) -> None:
        """After a compiled launch, remember its launcher for calls shaped like this one:
        keyed by the leading tensors' alignment and what Triton specializes of the numbers."""
        entry = self.bound.last_entry
        if entry is None or not all(isinstance(t, torch.Tensor) for t in leading):
            return
        go, self.tail = entry
        self.stream = compat.stream_function()
        alignment = tuple([t.data_ptr() & 15 == 0 for t in leading])
        self.fast[(alignment, tuple(map(_arg_key, trailing)))] = go


@contextmanager
def record() -> Iterator[list[tuple[Any, ...]]]:
    """Collect the kernel launches made on this thread inside the block (for
    :class:`Replay`)."""
    previous, recording.calls = recording.calls, []
    try:
        yield recording.calls
    finally:
        recording.calls = previous


class Replay:
    """A call's recorded launches, replayed for later calls of the same signature: for ops
    whose host path is long (several kernels, tuning lookups, workspace sizing) but whose
    launches depend only on the signature and the data pointers.

    ``slots`` are the call's tensors as the launches saw them; a later call passes its own
    tensors in the same order (any tensor with the same data pointer will do: only the
    address reaches the kernel). A recorded tensor that is not a slot is scratch memory the
    call allocated (a split-K workspace): a replay allocates one like it. Each launch must
    take its tensors first; otherwise, or when a launch saw a tensor it cannot place,
    :meth:`build` gives None and the op keeps its full path."""

    __slots__ = ("scratch", "steps")

    def __init__(self, scratch: list[tuple[Any, ...]], steps: list[tuple[Launch, tuple[int, ...]]]) -> None:
        self.scratch = scratch
        self.steps = steps

    @classmethod
    def build(cls, calls: list[tuple[Any, ...]], slots: tuple[torch.Tensor, ...]) -> Replay | None:
        places = {id(t): i for i, t in enumerate(slots)}
        scratch: list[tuple[Any, ...]] = []
        scratch_ids: dict[int, int] = {}
        steps = []
        for kernel, grid, args, config, options, constexprs in calls:
            leading = 0
            while leading < len(args) and isinstance(args[leading], torch.Tensor):
                leading += 1
            if any(isinstance(a, torch.Tensor) for a in args[leading:]) or not leading:
                return None
            refs = []
            for t in args[:leading]:
                if id(t) in places:
                    refs.append(places[id(t)])
                    continue
                if id(t) not in scratch_ids:  # allocated by the call itself
                    scratch_ids[id(t)] = len(scratch)
                    scratch.append((tuple(t.shape), t.stride(), t.dtype, t.device))
                refs.append(len(slots) + scratch_ids[id(t)])
            launch = Launch(kernel, grid, leading, tuple(args[leading:]), args[0].device,
                            config=config, options=options, **constexprs)
            steps.append((launch, tuple(refs)))
        return cls(scratch, steps)

    def __call__(self, *tensors: torch.Tensor) -> None:
        if self.scratch:
            tensors = (*tensors, *[torch.empty_strided(*spec[:2], dtype=spec[2], device=spec[3])
                                   for spec in self.scratch])
        for launch, refs in self.steps:
            launch(*[tensors[i] for i in refs])


def caches() -> list[PlanCache]:
    """Every plan cache created so far."""
    return list(_CACHES)


def _clear() -> None:
    for cache in list(_CACHES):
        cache.clear()


launch_cache.on_invalidate(_clear)


def clear_all() -> None:
    """Forget every plan (they are rebuilt on the next call of each signature), and the
    native layer's recipes, which were made from plans."""
    launch_cache.invalidate()
