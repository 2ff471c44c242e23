"""The performance tier: latency against ATen on the same device, and the share of measured
copy bandwidth the op reaches. Only meaningful on the chip itself: emulated runs and the CPU
interpreter skip it, with the reason."""

from __future__ import annotations

import functools
from typing import Any

import torch

import gems_core
from gems_core import runtime

from . import records as R
from .accuracy import dtype_name, route
from .cases import OpCase
from .records import Record

COPY_BYTES = 256 * 2**20


def skip_reason() -> str:
    """Why this run cannot measure performance; "" when it can."""
    rt = runtime.current()
    if rt.selection.emulated:
        return "emulated run: timings would be this device's, not the chip's"
    if rt.interpreter:
        return "kernels run in the Triton interpreter on the CPU: timings mean nothing"
    return ""


def _bench(fn: Any) -> float:
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))


@functools.cache
def copy_bandwidth(device: str) -> float:
    """Bytes per second of a plain device-to-device copy (read + write)."""
    source = torch.empty(COPY_BYTES // 4, dtype=torch.float32, device=device)
    target = torch.empty_like(source)
    ms = _bench(lambda: target.copy_(source))
    return 2 * COPY_BYTES / (ms * 1e-3)


def _bytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_bytes(v) for v in value)
    if isinstance(value, dict):
        return sum(_bytes(v) for v in value.values())
    return 0


def measure(case: OpCase, dtype: torch.dtype, profile: str) -> Record:
    """Time the largest contiguous sample with ATen and with gems."""
    name = dtype_name(dtype)
    record = Record(tier="performance", op=case.name, aten=case.aten, dtype=name, sample="contiguous",
                    status=R.PASS)
    mode, why = route(case, name)
    if mode != "run":
        record.status, record.reason = mode, why
        return record
    device = torch.device(runtime.current().device_type)
    try:
        candidates = [s for s in case.samples(dtype, device, profile) if s.label == "contiguous"]
        if not candidates:
            record.status, record.message = R.NOT_SUPPORTED, "the case has no contiguous sample"
            return record
        sample = max(candidates, key=lambda s: _bytes(s.args))
        record.detail = sample.describe()

        def call() -> Any:
            return case.call(*sample.args, **sample.kwargs)

        aten_ms = _bench(call)
        with gems_core.use_gems():
            result = call()
            gems_ms = _bench(call)
        moved = _bytes(sample.args) + _bytes(sample.kwargs) + _bytes(result)
        bandwidth = copy_bandwidth(str(device))
        record.metrics = {
            "gems_ms": gems_ms,
            "aten_ms": aten_ms,
            "speedup": aten_ms / gems_ms if gems_ms else 0.0,
            "bytes": moved,
            "pct_copy_bandwidth": 100.0 * moved / (gems_ms * 1e-3) / bandwidth if gems_ms else 0.0,
            "copy_bandwidth_gbs": bandwidth / 1e9,
        }
    except Exception as exc:  # noqa: BLE001 - reported as ERROR
        record.status, record.message = R.ERROR, f"{type(exc).__name__}: {exc}"[:500]
    return record
