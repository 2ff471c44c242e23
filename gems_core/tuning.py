"""Tunable kernels: config spaces as data, chosen once per shape bucket and remembered.

A kernel's config space comes from, in order: the selected backend's tuned configs for this
chip, else the op's defaults. One config is used as is; several are benchmarked once per
shape bucket on a real device, and the choice persists on disk keyed by device, Triton
version and kernel, so a second process starts with no tuning.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from . import background, compat, launch_cache, logs, runtime, settings
from .contract import KernelConfig
from .disk_cache import cache_dir, merge_json, read_json
from .registry import TUNABLES as _TUNABLES
from .registry import load_ops
from .shipped import device_model, lookup

_log = logs.get("tuning")
#: set by :func:`forcing` (tools only): picks every tunable's config, bypassing the choice
_forced_pick: Callable[[Tunable], KernelConfig] | None = None


@contextmanager
def forcing(pick: Callable[[Tunable], KernelConfig]) -> Iterator[None]:
    """Inside the block every tunable kernel uses ``pick(tunable)`` instead of its chosen
    config (nothing is remembered). Process-wide; for tools that walk every config, such as
    the compile check."""
    global _forced_pick
    launch_cache.invalidate()  # plans made before hold chosen configs: none may serve the block
    previous, _forced_pick = _forced_pick, pick
    try:
        yield
    finally:
        _forced_pick = previous
        launch_cache.invalidate()  # the native layer refused the block's calls: ask again after


def capturing() -> bool:
    """Whether the current CUDA stream is capturing a graph."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _autotune() -> bool:
    """Whether configs may be benchmarked. ``GEMS_AUTOTUNE=0`` turns that off: every kernel
    takes its first config (for test runs that want no tuning time, or reproducible configs);
    ``cached`` still takes a shipped or remembered choice (the conformance suite's workers,
    which check values, not speed)."""
    return settings.get("GEMS_AUTOTUNE") == "on"


#: how many times configs were benchmarked in this process (the native layer does not
#: record a call during which this changed)
benchmarks_run = 0


def cacheable() -> bool:
    """False while :func:`forcing` overrides choices: per-call plans must not keep them."""
    return _forced_pick is None


def tunables() -> dict[str, Tunable]:
    """Every tunable kernel the loaded ops declare, by name."""
    load_ops()
    return dict(_TUNABLES)


@dataclass(eq=False)
class Tunable:
    name: str
    params: tuple[str, ...]
    defaults: Sequence[KernelConfig]
    description: str = ""
    #: params a config may leave out (the kernel then does without them)
    optional: tuple[str, ...] = ()
    _chosen: dict[object, KernelConfig] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    #: (runtime, its compiler options for this kernel): the policy is frozen per runtime
    _options: tuple[object, dict[str, object]] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.name in _TUNABLES:
            raise ValueError(f"tunable {self.name!r} is declared twice")
        for config in self.defaults:
            self.validate(config)
        _TUNABLES[self.name] = self

    def validate(self, config: KernelConfig) -> None:
        unknown = set(config.params) - set(self.params)
        if unknown:
            raise ValueError(
                f"config for {self.name!r} sets {sorted(unknown)}, which are not parameters "
                f"of that kernel ({', '.join(self.params)})"
            )

    def configs(self) -> tuple[KernelConfig, ...]:
        override = runtime.current().policy.configs.get(self.name)
        return tuple(override) if override else tuple(self.defaults)

    def options(self) -> dict[str, object]:
        """The compiler options the runtime's policy gives this kernel (a fresh dict)."""
        rt = runtime.current()
        cached = self._options
        if cached is None or cached[0] is not rt:
            cached = self._options = (rt, dict(rt.policy.options_for(self.name)))
        return dict(cached[1])

    def choose(
        self,
        key: object,
        bench: Callable[[KernelConfig], float] | None = None,
        admit: Callable[[KernelConfig], bool] | None = None,
    ) -> KernelConfig:
        """The config for shape bucket ``key``; ``bench(config)`` returns milliseconds.
        ``admit(config)`` rules configs out for this call (e.g. a tile that needs more shared
        memory in this dtype than the chip has); ``key`` must then separate what it depends
        on."""
        if _forced_pick is not None:
            forced = _forced_pick(self)
            if admit is None or admit(forced):
                return forced
            return next((c for c in self.configs() if admit(c)), forced)
        # choices hold for one device model: a host may mix models
        model = device_model()
        chosen = self._chosen.get((model, key))
        if chosen is not None:
            return chosen
        with self._lock:
            chosen = self._chosen.get((model, key))
            if chosen is None:
                chosen, how = self._choose(key, bench, admit, model)
                if _log.isEnabledFor(logging.DEBUG):
                    logs.once(_log, ("tuning", self.name, model, key), "%s %r on %s: %s (%s)",
                              self.name, key, model, chosen.describe(), how)
                if not capturing():  # a pick made while capturing was not tuned: tune later
                    self._chosen[model, key] = chosen
        return chosen

    def _choose(
        self,
        key: object,
        bench: Callable[[KernelConfig], float] | None,
        admit: Callable[[KernelConfig], bool] | None = None,
        model: str = "",
    ) -> tuple[KernelConfig, str]:
        """The config for ``key`` and where it came from."""
        configs = self.configs()
        if admit is not None:
            configs = tuple(c for c in configs if admit(c)) or configs[:1]
        rt = runtime.current()
        why = ("it is the only one" if len(configs) == 1 else "no benchmark" if bench is None
               else "nothing runs on a device here" if rt.interpreter or rt.compile_only
               else "GEMS_AUTOTUNE=0" if settings.get("GEMS_AUTOTUNE") == "off" else "")
        if why:
            return configs[0], f"the first config: {why}"
        shipped = lookup(self, model, key, configs)  # the backend's table for this chip
        if shipped is not None:
            return shipped, "the backend's shipped table"
        path = self._cache_path(model)
        stored = read_json(path).get(repr(key))
        if stored is not None:
            for config in configs:
                if config.describe() == stored:
                    return config, f"remembered in {path}"
        if not _autotune():
            return configs[0], "the first config: GEMS_AUTOTUNE=cached and none is shipped or remembered"
        if background.mode(rt) == "background":
            # benchmarking compiles every candidate on the model's path; warmup and tune
            # (which compile synchronously) tune, and later processes find their choice
            return configs[0], "the first config: kernels compile in the background (GEMS_COMPILE)"
        if capturing():
            # a CUDA graph is being captured (torch.compile's "reduce-overhead", a serving
            # engine's decode graph): a benchmark's launches would join the graph and its timing
            # events are refused, so the graph keeps the first config
            return configs[0], "the first config: a CUDA graph is being captured"
        global benchmarks_run
        benchmarks_run += 1  # a call that benchmarked made extra launches: not one to record
        timings = []
        for config in configs:
            try:
                timings.append((bench(config), config))
            except Exception:  # a config this chip cannot compile or run is skipped
                continue
        if not timings:
            raise RuntimeError(f"no config of {self.name!r} ran for {key!r}")
        best = min(timings, key=lambda item: item[0])[1]
        merge_json(path, {repr(key): best.describe()})
        timed = ", ".join(f"{config.describe()}: {ms:.4g} ms" for ms, config in timings)
        return best, f"benchmarked {timed}"

    def _cache_path(self, model: str = ""):
        selection = runtime.current().selection
        device = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{selection.backend.name}-{model or selection.device_name}")
        return cache_dir() / "tuning" / f"{device}-triton{compat.TRITON_VERSION}" / f"{self.name}.json"
