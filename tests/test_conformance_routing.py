"""How the accuracy tier judges ops a backend's policy sends to ATen: a case is judged by its
gated ops only (its other ops may run on gems), a sample ATen itself refuses on the device is
the gated op's expected behaviour, and under emulation the host's own gates and deviations
hold on top of the emulated backend's."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch
from gems_conformance import records as R
from gems_conformance.accuracy import check_case, check_sample, route
from gems_conformance.cases import all_cases
from gems_conformance.routing import implementations

import gems_core
from gems_core import runtime
from gems_core.contract import Deviation, OpGate
from gems_core.policy import _with_host, build_policy
from gems_core.selection import select


def _gating(monkeypatch: pytest.MonkeyPatch, **gates: frozenset[str]) -> None:
    rt = runtime.current()
    policy = dataclasses.replace(rt.policy, gates={**rt.policy.gates, **gates},
                                 gate_reasons={**rt.policy.gate_reasons, **{op: "test gate" for op in gates}})
    monkeypatch.setattr(rt, "policy", policy)


def test_a_case_is_judged_by_its_gated_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    """cross_entropy where only nll_loss2d_forward is gated: its _log_softmax runs on gems,
    which is no "gated op ran on gems" failure; every sample falls back and is right."""
    case = all_cases()["cross_entropy"]
    _gating(monkeypatch, nll_loss2d_forward=frozenset(), nll_loss_forward=frozenset())
    assert route(case, "float32")[0] == R.FALLBACK
    outcomes = list(check_case(case, torch.float32, "quick"))
    assert outcomes and {o.status for o in outcomes} == {R.FALLBACK}, [(o.status, o.message) for o in outcomes]
    assert any(o.served_by == "aten" for o in outcomes)


def test_a_gated_op_that_ran_on_gems_still_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check still bites: a case gated on an op whose gems implementation runs anyway."""
    case = all_cases()["add"]
    sample = next(iter(case.samples(torch.float32, torch.device(runtime.current().device_type), "quick")))
    codes = frozenset().union(*implementations(case.aten).values())
    outcome = check_sample(case, sample, 0, "float32", R.FALLBACK, "test gate", codes)
    assert outcome.status == R.FAIL and "gems' implementation ran" in outcome.message


def test_a_sample_aten_refuses_on_the_device_is_the_gated_ops_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    """ATen raising on a sample of a gated op (cuBLASLt has no e5m2 x e5m2 product, say):
    the call under gems raises the same, so the sample falls back; of an op gems serves it
    stays an ERROR of the case."""
    def refuses(*args: object, **kwargs: object) -> None:
        raise ValueError("Multiplication of two Float8_e5m2 matrices is not supported")

    case = dataclasses.replace(all_cases()["add"], call=refuses)
    sample = next(iter(case.samples(torch.float32, torch.device(runtime.current().device_type), "quick")))
    codes = frozenset().union(*implementations(case.aten).values())
    gated = check_sample(case, sample, 0, "float32", R.FALLBACK, "add gated to ATen", codes)
    assert gated.status == R.FALLBACK and "ATen raises on this sample here" in gated.message
    served = check_sample(case, sample, 0, "float32", "run", "", codes)
    assert served.status == R.ERROR and "ATen itself raised" in served.message


def test_a_sample_only_the_devices_aten_refuses_is_judged_by_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """ATen's kernel for the device raising where its CPU kernel computes (angle of float16
    on CUDA, an empty batch norm): gems' result is held to the float64 reference and its
    dtype to ATen's on the CPU; a wrong gems result still fails, and a sample ATen refuses
    on the CPU too stays an ERROR of the case."""
    from gems_conformance import accuracy

    base = all_cases()["abs"]
    on_device = {"refuse": True}

    def refuses_on_the_device(x: torch.Tensor) -> torch.Tensor:
        if on_device["refuse"]:
            on_device["refuse"] = False  # the first call is the device's: later ones compute
            raise NotImplementedError('"abs_cuda" not implemented for this sample')
        return torch.abs(x)

    # the CPU stands in for the device: the host copy is the same tensors
    monkeypatch.setattr(accuracy, "_to_host", lambda value: value)
    case = dataclasses.replace(base, call=refuses_on_the_device)
    sample = next(iter(case.samples(torch.float32, torch.device(gems_core.device), "quick")))
    codes = frozenset().union(*implementations(case.aten).values())
    passed = check_sample(case, sample, 0, "float32", "run", "", codes)
    assert passed.status == R.PASS and passed.served_by == "gems", (passed.status, passed.message)
    assert "ATen on this device raises here" in passed.reason

    def wrong_under_gems(x: torch.Tensor) -> torch.Tensor:
        if on_device["refuse"]:
            on_device["refuse"] = False
            raise NotImplementedError("refused on the device")
        return torch.abs(x) + (1.0 if x.dtype != torch.float64 else 0.0)  # gems' call is off

    on_device["refuse"] = True
    failed = check_sample(dataclasses.replace(base, call=wrong_under_gems), sample, 0, "float32", "run", "", codes)
    assert failed.status == R.FAIL

    def refuses_everywhere(x: torch.Tensor) -> torch.Tensor:
        raise ValueError("no such sample")

    error = check_sample(dataclasses.replace(base, call=refuses_everywhere), sample, 0, "float32", "run", "", codes)
    assert error.status == R.ERROR and "ATen itself raised" in error.message


def test_an_empty_result_may_take_the_devices_shape() -> None:
    """pixel_unshuffle of an empty input: ATen's CUDA kernel shapes the empty result as a
    non-empty one, its CPU kernel returns the input's shape; gems matching the device passes."""
    from gems_conformance.accuracy import _empty_as_on_device

    device_shape, cpu_shape = torch.empty(0, 8, 2, 2), torch.empty(0, 2, 4, 4)
    assert _empty_as_on_device(torch.empty(0, 8, 2, 2), device_shape, cpu_shape)
    assert not _empty_as_on_device(torch.empty(0, 2, 4, 4), device_shape, cpu_shape)  # the reference's: compared as usual
    assert not _empty_as_on_device(torch.empty(0, 2, 8), device_shape, cpu_shape)  # neither
    assert not _empty_as_on_device(torch.ones(2), torch.ones(2), torch.ones(1, 2))  # not empty


def _host(gates: list[object], deviations: list[Deviation]) -> SimpleNamespace:
    answers = {"gems_unsupported_ops": gates, "gems_known_deviations": deviations}
    return SimpleNamespace(name="host", call=lambda hook: answers.get(hook))


def test_the_hosts_gates_and_deviations_join_an_emulated_backends() -> None:
    gates = {"mm": {"float16"}, "cumsum": set(), "sort": set()}
    reasons = {"mm": "vendor mm", "cumsum": "vendor cumsum", "sort": "vendor sort"}
    keeps = {"cumsum": {"out", "inplace"}, "sort": {"out"}}
    host = _host([OpGate("mm", ("bfloat16",), reason="interpreter dot"), OpGate("cumsum", keep=("out",)),
                  OpGate("softmax", keep=("out",), reason="host softmax"), OpGate("sort", ("float32",))],
                 [Deviation("exp", "bf16 subnormals", kind="tolerance", atol=1e-2, rtol=1e-2)])
    deviations = _with_host(host, gates, reasons, keeps)
    assert gates == {"mm": {"float16", "bfloat16"}, "cumsum": set(), "sort": set(), "softmax": set()}
    assert reasons["mm"] == "vendor mm; the host's (host): interpreter dot"
    assert reasons["softmax"] == "the host's (host): host softmax"
    assert reasons["cumsum"] == "vendor cumsum" and reasons["sort"] == "vendor sort"
    assert keeps == {"cumsum": {"out"}, "sort": {"out"}, "softmax": {"out"}}  # whole on both: what both keep
    (deviation,) = deviations
    assert deviation.reason == "the host's (host): bf16 subnormals" and deviation.atol == 1e-2


def test_an_emulated_vendor_on_the_cpu_interpreter_carries_the_interpreters_gates() -> None:
    """MetaX emulated on the CPU: the interpreter's bf16 product gate holds (an emulated run
    of a correct plugin does not fail on the interpreter's defects), labelled as the host's,
    beside MetaX's own gates; the cpu backend selected itself composes nothing."""
    pytest.importorskip("gems_backend_metax")
    host_policy = build_policy(select({"GEMS_DEVICE": "cpu"}))
    selection = select({"GEMS_DEVICE": "metax", "GEMS_EMULATE": "1"})
    assert selection.execution.host == "cpu"
    policy = build_policy(selection)
    for op, dtypes in host_policy.gates.items():
        gate = policy.gate_for(op)
        assert gate is not None and (not gate or dtypes <= gate), op
    assert "the host's (cpu)" in policy.gate_reasons["mm"]
    assert policy.gate_for("nll_loss2d_forward") is not None  # MetaX's own
    assert select({"GEMS_DEVICE": "cpu"}).execution.host == ""


def test_a_watch_sees_calls_gems_answers_on_any_thread() -> None:
    """A call gems' kernel answers on another thread is a hit (autograd runs a CUDA backward
    on a thread of its own); a block that called nothing is not; a call gems' function
    entered and declined (ATen served it) was entered, but is not a hit."""
    import threading

    from gems_conformance.routing import RouteWatch


    codes = frozenset().union(*implementations(["add.Tensor"]).values())
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randn(3, 5, generator=g).to(gems_core.device) for _ in range(2))
    results = []
    with RouteWatch(codes) as watch, gems_core.use_gems():
        worker = threading.Thread(target=lambda: results.append(torch.add(x, y, alpha=2)))
        worker.start()
        worker.join()
    assert watch.hit and watch.served and watch.entered
    torch.testing.assert_close(results[0], x + 2 * y)
    with RouteWatch(codes) as watch, gems_core.use_gems():
        pass
    assert not watch.hit and not watch.entered
    # complex numbers: gems' add declines, ATen adds
    a = torch.randn(4, generator=g, dtype=torch.complex64).to(gems_core.device)
    with RouteWatch(codes) as watch, gems_core.use_gems():
        got = a + a
    assert watch.entered and not watch.hit and not watch.served
    assert torch.equal(got, a * 2)


def test_a_gate_of_mm_or_addmm_covers_the_vector_products_built_on_them() -> None:
    """dot and vdot run on mm's kernel, addmv and addr on addmm's: a backend's gate of the
    kernel's packet sends them to ATen before gems' function is entered (the CPU backend's
    bfloat16 gate; NVIDIA's float32 one, under emulation), with the reason said."""
    cpu = build_policy(select({"GEMS_DEVICE": "cpu"}))
    for op in ("dot", "vdot.default", "addmv.out", "addr"):
        assert cpu.leaves_to_aten(op, "bfloat16") and not cpu.leaves_to_aten(op, "float32"), op
    assert "mm's kernels" in cpu.reason_for("dot") and "bf16" in cpu.reason_for("vdot.out")
    assert "dot" not in cpu.gates  # the backend's own gates, as it declared them
    pytest.importorskip("gems_backend_nvidia")
    nvidia = build_policy(select({"GEMS_DEVICE": "nvidia", "GEMS_EMULATE": "1"}))
    for op in ("dot", "vdot", "addmv", "addr.out"):
        assert nvidia.leaves_to_aten(op, "float32") and not nvidia.leaves_to_aten(op, "float16"), op


@pytest.mark.parametrize("batch_bytes", [64 << 20, 1], ids=["batched", "one sample a batch"])
def test_a_case_checked_in_batches_judges_each_sample_as_alone(batch_bytes: int,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """check_case runs its samples in batches (their ATen calls, then their calls under one
    use_gems() block); each outcome is the one check_sample gives that sample alone, in
    order, and every sample is announced before its calls (twice: ATen, then gems)."""
    from gems_conformance import accuracy

    monkeypatch.setattr(accuracy, "_BATCH_BYTES", batch_bytes)
    case = all_cases()["where"]
    started: list[int] = []
    outcomes = list(check_case(case, torch.float32, "quick", skip=(1,),
                               on_start=lambda index, sample: started.append(index)))
    samples = list(case.samples(torch.float32, torch.device(gems_core.device), "quick"))
    mode, why = route(case, "float32")
    codes = frozenset().union(*implementations(case.aten).values())
    alone = [check_sample(case, s, i, "float32", mode, why, codes) for i, s in enumerate(samples) if i != 1]
    assert len(samples) > 3 and [o.index for o in outcomes] == [o.index for o in alone]
    assert [(o.status, o.served_by, o.max_abs) for o in outcomes] == [(o.status, o.served_by, o.max_abs) for o in alone]
    assert {o.status for o in outcomes} == {R.PASS} and sorted(started) == sorted([o.index for o in alone] * 2)
