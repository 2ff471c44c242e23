"""The accuracy tier: every op case x dtype x sample against the float64 ATen reference.

A sample is checked as ``tests/test_op_cases.py`` checks it (result dtype equal to ATen's,
values within the dtype's tolerance of the float64 reference), and gets a status from the
backend's policy: dtypes the chip lacks are NOT SUPPORTED, gated ops must reach ATen and stay
correct (FALLBACK), declared deviations turn failures into XFAIL (or XPASS once fixed).
Outcomes are per sample; :func:`gems_conformance.outcomes.aggregate` folds them into one
record per sample class.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

import gems_core
from gems_core import runtime

from . import records as R
from .cases import OpCase, compare, to_reference
from .outcomes import SampleOutcome
from .routing import RouteWatch, implementations
from .samples import Sample


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def deviation_for(case: OpCase, dtype: str, label: str, kind: str) -> Any:
    for deviation in runtime.current().policy.deviations:
        if deviation.kind == kind and any(deviation.applies(op, dtype, label) for op in case.aten):
            return deviation
    return None


def gated(case: OpCase, dtype: str) -> list[str]:
    """The ops of ``case`` the backend's policy sends to ATen in ``dtype``."""
    policy = runtime.current().policy
    return [op for op in case.aten if policy.leaves_to_aten(op, dtype)]


def route(case: OpCase, dtype: str) -> tuple[str, str]:
    """("run" | "fallback" | "not supported", why) for this case and dtype on this backend."""
    rt = runtime.current()
    if dtype in rt.selection.descriptor.dtypes.unsupported():
        return R.NOT_SUPPORTED, f"{rt.selection.descriptor.name} declares no {dtype} support"
    ops = gated(case, dtype)
    if not ops:
        return "run", ""
    op, policy = ops[0], rt.policy
    why = policy.reason_for(op)
    scope = "every dtype" if not policy.gate_for(op) else dtype
    return R.FALLBACK, f"{op} gated to ATen for {scope}" + (f": {why}" if why else "")


def _keeps_forms(case: OpCase) -> bool:
    """Whether the backend's whole-op gate on an op of ``case`` keeps forms of its calls on
    gems (``OpGate.keep``): the dispatcher tells them apart per call, so a call that
    entered gems' implementation is one of them."""
    policy = runtime.current().policy
    return any(policy.keeps_for(op) for op in case.aten)


def _results(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _dtype_mismatch(result: Any, aten_result: Any) -> str:
    for got, want in zip(_results(result), _results(aten_result)):
        if isinstance(want, torch.Tensor) and isinstance(got, torch.Tensor) and got.dtype != want.dtype:
            return f"result dtype {dtype_name(got.dtype)} != ATen's {dtype_name(want.dtype)}"
    return ""


def _error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]


def _compile_failure(case: OpCase) -> str:
    """Why an op of ``case`` now runs on ATen after failing to compile on this chip (the
    model keeps running; the report must still show it), or ""."""
    recorded = runtime.current().runtime_fallbacks
    packets = {op.split(".", 1)[0] for op in case.aten}
    hits = [f"{op}: {why}" for op, why in recorded.items()
            if op in case.aten or op.split(".", 1)[0] in packets]
    if not hits:
        return ""
    return ("failed to compile on this chip and ran on ATen: " + "; ".join(hits))[:500]


@dataclass
class AtenSide:
    """ATen's answer to a sample on the backend's device: its ``result``, or the ``error`` it
    raised there. ``refused`` says that ATen's kernel for this device raised and ``result`` is
    ATen's on the CPU instead (a dtype, an empty or strided input its CPU kernel takes)."""

    result: Any = None
    error: Exception | None = None
    refused: str = ""


@dataclass
class GemsSide:
    """A sample's call under gems: its ``result`` or ``error``, and what the
    :class:`~.routing.RouteWatch` around it saw (gems' function entered; gems answered)."""

    result: Any = None
    error: Exception | None = None
    entered: bool = False
    hit: bool = False


def aten_side(case: OpCase, sample: Sample, mode: str) -> AtenSide:
    """Call ``sample`` on ATen (gems off)."""
    try:
        return AtenSide(case.call(*sample.args, **sample.kwargs))
    except Exception as exc:  # noqa: BLE001 - the case is wrong for this dtype, not the backend
        host = _on_host(case, sample) if mode != R.FALLBACK else None
        if host is None:
            return AtenSide(error=exc)
        return AtenSide(host[0], refused=f"ATen on this device raises here ({_error(exc)}); "
                                         "the result is held to ATen's on the CPU")


def runs_gems(aten: AtenSide, mode: str) -> bool:
    """Whether a sample's call under gems is made: not where ATen raises on this device and
    on the CPU (the case is wrong for the sample), unless the op is gated, where ATen's error
    is what users get and the call under gems must raise it too."""
    return aten.error is None or mode == R.FALLBACK


def gems_call(case: OpCase, sample: Sample, codes: frozenset[Any], entries: bool = True) -> GemsSide:
    """Call ``sample`` inside ``gems_core.use_gems()`` (or inside the caller's) and watch the
    route: ``codes`` are the implementations that count."""
    watch = RouteWatch(codes, entries=entries)
    side = GemsSide()
    try:
        with watch, gems_core.use_gems():
            side.result = case.call(*sample.args, **sample.kwargs)
    except Exception as exc:  # noqa: BLE001 - any exception of the op is a result to report
        side.error = exc
    side.entered, side.hit = watch.entered, watch.hit
    return side


def judge(case: OpCase, sample: Sample, index: int, dtype: str, mode: str, why: str, aten: AtenSide,
          gems: GemsSide | None) -> SampleOutcome:
    """A sample's outcome from ATen's answer and gems' (None where :func:`runs_gems` said no
    call); the status follows the backend's policy."""
    out = SampleOutcome(index, sample.label, R.PASS, description=sample.describe())
    if aten.error is not None and mode != R.FALLBACK:
        out.status, out.message = R.ERROR, f"ATen itself raised on this sample: {_error(aten.error)}"
        return out
    if aten.error is not None:
        # a sample ATen refuses on this device (an FP8 product cuBLASLt does not offer, say)
        # of an op the backend gates: FALLBACK where the call under gems reaches ATen and
        # raises the same, as a gated call must; FAIL where gems' implementation ran
        out.status, out.message = R.ERROR, f"ATen itself raised on this sample: {_error(aten.error)}"
        out.reason = why
        if gems.entered:
            out.status, out.message = R.FAIL, "gated to ATen, but gems' implementation ran"
        elif type(gems.error) is type(aten.error):
            out.status, out.message = R.FALLBACK, f"ATen raises on this sample here, under gems too: {_error(aten.error)}"
        return out
    failure = ""
    out.served_by = "gems" if gems.hit else "aten"  # answered, not entered and declined
    try:
        if gems.error is not None:
            raise gems.error
        result = gems.result
        reference = (case.reference or case.call)(*to_reference(sample.args), **to_reference(sample.kwargs))
        failure = _dtype_mismatch(result, aten.result)
        if not failure:
            tolerance = deviation_for(case, dtype, sample.label, "tolerance")
            override = (tolerance.atol, tolerance.rtol) if tolerance is not None else None
            if tolerance is not None:
                out.reason = tolerance.reason
            if _empty_as_on_device(result, aten.result, reference):
                out.reason = ("ATen's kernels for this device and the CPU give this empty result "
                              "different shapes: it has the device's")
            else:
                comparison = compare(result, reference, case, sample, override)
                out.max_abs, out.max_rel = comparison.max_abs, comparison.max_rel
                if not comparison.ok:
                    failure = comparison.message
            if aten.refused and not failure:
                out.reason = aten.refused
        status_if_failed = R.FAIL
        compile_failure = _compile_failure(case)
        if compile_failure:
            failure, status_if_failed = compile_failure, R.ERROR
    except Exception as exc:  # noqa: BLE001 - any exception of the op is a result to report
        failure, status_if_failed = _error(exc), R.ERROR

    if mode == R.FALLBACK and gems.entered and _keeps_forms(case):
        # a call of a form the backend keeps on gems under its gate: judged as gems' own
        out.reason = f"{why}; this call is of a form kept on gems"
    elif mode == R.FALLBACK:
        out.reason = why
        if gems.entered:
            out.status, out.message = R.FAIL, "gated to ATen, but gems' implementation ran"
        elif failure:
            out.status, out.message = status_if_failed, f"on ATen: {failure}"
        else:
            out.status = R.FALLBACK
        return out
    expected = deviation_for(case, dtype, sample.label, "xfail")
    if expected is not None:
        out.reason = expected.reason
        out.status, out.message = (R.XFAIL, failure) if failure else (R.XPASS, "")
    elif failure:
        out.status, out.message = status_if_failed, failure
    return out


def check_sample(case: OpCase, sample: Sample, index: int, dtype: str, mode: str, why: str,
                 codes: frozenset[Any]) -> SampleOutcome:
    """Run one sample on ATen and with gems on, and judge it (:func:`judge`)."""
    return next(check_samples(case, [(index, sample)], dtype, mode, why, codes))


def watched_codes(case: OpCase, dtype: str, mode: str) -> frozenset[Any]:
    """The implementations whose calls judge ``case``'s samples: a gated case's gated ops
    only (its other ops may run on gems: cross_entropy's _log_softmax where a backend gates
    only nll_loss2d_forward), else all of its ops'."""
    judged = implementations(gated(case, dtype) if mode == R.FALLBACK else case.aten)
    return frozenset().union(*judged.values()) if judged else frozenset()


def _on_host(case: OpCase, sample: Sample) -> tuple[Any] | None:
    """ATen's result for ``sample`` moved to the CPU (dtypes kept), in a 1-tuple; None where
    the sample is on the CPU already or ATen raises there too."""
    moved = _to_host((sample.args, sample.kwargs))
    if moved is None:
        return None
    try:
        return (case.call(*moved[0], **moved[1]),)
    except Exception:  # noqa: BLE001 - then the case itself is wrong for this sample
        return None


def _to_host(value: Any) -> Any:
    """``value`` with its tensors copied to the CPU; None where none was elsewhere."""
    found = []

    def move(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            found.append(v.device.type != "cpu")
            return v.detach().cpu()
        if isinstance(v, (list, tuple)):
            return type(v)(move(x) for x in v)
        if isinstance(v, dict):
            return {k: move(x) for k, x in v.items()}
        return v

    moved = move(value)
    return moved if any(found) else None


def _empty_as_on_device(result: Any, aten_result: Any, reference: Any) -> bool:
    """Whether every result is empty and shaped as ATen's on this device, where the float64
    reference (ATen on the CPU) has other shapes (pixel_unshuffle of an empty input)."""
    got, want, ref = _results(result), _results(aten_result), _results(reference)
    if not (len(got) == len(want) == len(ref)):
        return False
    tensors = [(g, w, r) for g, w, r in zip(got, want, ref) if isinstance(g, torch.Tensor)]
    return bool(tensors) and all(
        isinstance(w, torch.Tensor) and isinstance(r, torch.Tensor) and g.numel() == 0
        and g.shape == w.shape for g, w, r in tensors) and any(g.shape != r.shape for g, _, r in tensors)


#: samples checked together: their ATen calls, then their calls under one ``use_gems()``
#: block (entering one registers every overload: on the CPU backend about 30 ms a sample,
#: half of the suite's time when each sample entered its own), while their tensors stay
#: under _BATCH_BYTES
_BATCH_SAMPLES = 32
_BATCH_BYTES = 64 << 20


def _bytes(sample: Sample) -> int:
    """The bytes of a sample's tensor arguments (a large sample is checked alone)."""
    total = 0

    def add(value: Any) -> None:
        nonlocal total
        if isinstance(value, torch.Tensor):
            total += value.numel() * value.element_size()
        elif isinstance(value, (list, tuple)):
            for item in value:
                add(item)
        elif isinstance(value, dict):
            for item in value.values():
                add(item)

    add((sample.args, sample.kwargs))
    return total


def check_samples(case: OpCase, batch: list[tuple[int, Sample]], dtype: str, mode: str, why: str,
                  codes: frozenset[Any], on_start: Callable[[int, Sample], None] | None = None,
                  entries: bool = True) -> Iterator[SampleOutcome]:
    """The judgement (:func:`judge`) of each sample of ``batch`` (index, sample): their ATen
    calls, then their calls under one ``use_gems()`` block (``entries``: see
    :class:`~.routing.RouteWatch`). ``on_start`` hears of each sample before its ATen call
    and again before its call under gems, so a crash names the sample that caused it;
    outcomes follow in order once the batch ran."""
    if not batch:
        return
    atens, seconds = [], []
    for index, sample in batch:
        if on_start is not None:
            on_start(index, sample)
        start = time.perf_counter()
        atens.append(aten_side(case, sample, mode))
        seconds.append(time.perf_counter() - start)
    answers: list[GemsSide | None] = []
    with gems_core.use_gems():
        for k, ((index, sample), aten) in enumerate(zip(batch, atens)):
            if not runs_gems(aten, mode):
                answers.append(None)
                continue
            if on_start is not None:
                on_start(index, sample)
            start = time.perf_counter()
            answers.append(gems_call(case, sample, codes, entries))
            seconds[k] += time.perf_counter() - start
    for k, ((index, sample), aten, gems) in enumerate(zip(batch, atens, answers)):
        start = time.perf_counter()
        out = judge(case, sample, index, dtype, mode, why, aten, gems)
        out.seconds = seconds[k] + time.perf_counter() - start
        yield out


def check_case(case: OpCase, dtype: torch.dtype, profile: str, skip: Iterable[int] = (),
               on_start: Callable[[int, Sample], None] | None = None) -> Iterator[SampleOutcome]:
    """Every sample of ``case`` in ``dtype`` on the selected backend's device, in order;
    indices in ``skip`` are passed over (a re-run after a crash)."""
    skipped = frozenset(skip)
    name = dtype_name(dtype)
    mode, why = route(case, name)
    codes = watched_codes(case, name, mode)
    if mode == "run" and not implementations(case.aten):
        yield SampleOutcome(0, "all", R.ERROR, message=f"gems implements none of {', '.join(case.aten)}")
        return
    device = torch.device(runtime.current().device_type)
    index = -1
    batch: list[tuple[int, Sample]] = []
    held = 0
    try:
        for index, sample in enumerate(case.samples(dtype, device, profile)):
            if index in skipped:
                continue
            if mode == R.NOT_SUPPORTED:
                if on_start is not None:
                    on_start(index, sample)
                yield SampleOutcome(index, sample.label, R.NOT_SUPPORTED, sample.describe(), reason=why)
                continue
            size = _bytes(sample)
            if batch and (len(batch) == _BATCH_SAMPLES or held + size > _BATCH_BYTES):
                yield from check_samples(case, batch, name, mode, why, codes, on_start)
                batch, held = [], 0
            batch.append((index, sample))
            held += size
        yield from check_samples(case, batch, name, mode, why, codes, on_start)
    except Exception as exc:  # noqa: BLE001 - the sample generator itself failed
        yield SampleOutcome(index + 1, "samples", R.ERROR, message=f"making samples: {_error(exc)}")
