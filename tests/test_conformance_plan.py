"""How a conformance run is planned and what its workers are told: the samples take shipped or
first configs without benchmarking (the performance tier's workers tune), a quick run times a
representative set of ops, and a worker's native layer builds without holding samples up."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from gems_conformance import runner
from gems_conformance.records import TierResult

from gems_core import native


def _ready(cases: dict[str, list[str]]) -> dict:
    return {"facts": {}, "performance_skip": "", "semantics": ["aliasing"],
            "cases": {name: {"dtypes": dtypes, "aten": [f"{name}.default"]} for name, dtypes in cases.items()}}


CASES = {"add": ["float32", "float16", "bfloat16", "int32"], "mm": ["float32", "float64"],
         "abs": ["float32", "int64"], "copy_": ["int8", "uint8"]}


def _jobs(profile: str, ops: tuple[str, ...] = ()) -> list[dict]:
    options = runner.Options(device="cpu", profile=profile, ops=ops)
    tiers: dict[str, TierResult] = {}
    return runner._plan(options, _ready(CASES), tiers)


def test_quick_times_the_representative_ops_in_one_dtype_each() -> None:
    timed = [(j["case"], j["dtype"], j["profile"]) for j in _jobs("quick") if j["tier"] == "performance"]
    # abs is not in the representative set; a case without a float dtype takes its first
    assert timed == [("add", "bfloat16", "full"), ("mm", "float32", "full"), ("copy_", "int8", "full")]
    accuracy = [(j["case"], j["dtype"]) for j in _jobs("quick") if j["tier"] == "accuracy"]
    assert len(accuracy) == sum(len(d) for d in CASES.values())  # values: every case x dtype


def test_quick_with_ops_times_each_named_case_and_full_times_every_dtype() -> None:
    timed = [(j["case"], j["dtype"]) for j in _jobs("quick", ("abs",)) if j["tier"] == "performance"]
    assert timed == [("abs", "float32")]
    full = [(j["case"], j["dtype"]) for j in _jobs("full") if j["tier"] == "performance"]
    assert len(full) == sum(len(d) for d in CASES.values())


def test_workers_take_cached_configs_unless_told_and_timing_workers_tune(monkeypatch: pytest.MonkeyPatch) -> None:
    options = runner.Options(device="nvidia")
    monkeypatch.delenv("GEMS_AUTOTUNE", raising=False)
    assert runner.worker_env(options)["GEMS_AUTOTUNE"] == "cached"
    assert runner.worker_env(options)["GEMS_COMPILE"] == "sync"
    assert "GEMS_AUTOTUNE" not in runner.worker_env(options, timing=True)
    monkeypatch.setenv("GEMS_AUTOTUNE", "1")  # the caller's choice wins
    assert runner.worker_env(options)["GEMS_AUTOTUNE"] == "1"


def test_default_worker_count_is_one_per_cpu_up_to_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner.os, "cpu_count", lambda: 64)
    assert runner.worker_count(runner.Options(device="cpu")) == runner.MAX_WORKERS
    monkeypatch.setattr(runner.os, "cpu_count", lambda: 2)
    assert runner.worker_count(runner.Options(device="cpu")) == 2
    assert runner.worker_count(runner.Options(device="cpu", workers=5)) == 5


def test_a_background_build_does_not_hold_up_a_sync_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """After build_in_background, asking for the layer in sync mode returns None at once
    while the build runs, and the layer once it is done."""
    release, started = threading.Event(), threading.Event()
    built = SimpleNamespace(set_check=lambda on: None)

    def slow_build(quiet: bool = False):
        started.set()
        assert release.wait(10)
        return built

    monkeypatch.setenv("GEMS_COMPILE", "sync")
    monkeypatch.setattr(native, "_module", None)
    monkeypatch.setattr(native, "_tried", False)
    monkeypatch.setattr(native, "_building", None)
    monkeypatch.setattr(native, "_built", lambda: False)
    monkeypatch.setattr(native, "_build", slow_build)
    monkeypatch.setattr(native, "_settings", lambda: frozenset())
    native.build_in_background()
    assert started.wait(10)
    assert native._load_without_waiting() is None  # the build is running: no wait
    native.build_in_background()  # a second call starts nothing and does not wait either
    release.set()
    native._building.join(10)
    assert native._load_without_waiting() is built


def test_a_sample_stopped_on_the_host_is_no_compile_error() -> None:
    """compile-only execution computes no values: ATen reading a garbage index tensor
    stops the sample, which the compile tier reports as NOT SUPPORTED with the reason; a
    failed compile stays a FAIL."""
    from gems_conformance import records as R
    from gems_conformance.compile_check import ERROR, HOST_ERROR, CompileRecord
    from gems_conformance.compile_tier import to_record

    stopped = to_record(CompileRecord(kernel="-", config="-", target="cuda:90", status=HOST_ERROR,
                                      message="RuntimeError: index 862190727 is out of bounds", op="gather"))
    assert stopped.status == R.NOT_SUPPORTED and "stopped on the host" in stopped.message
    failed = to_record(CompileRecord(kernel="mm", config="BLOCK_M=64", target="cuda:90", status=ERROR,
                                     message="out of resource: shared memory"))
    assert failed.status == R.FAIL


def test_a_chain_runs_in_one_worker_in_order_and_moves_when_its_worker_dies() -> None:
    from gems_conformance.pool import JobQueue

    jobs = [{"id": i, "chain": chain} for i, chain in enumerate(["add f32", "add f32", "mul f32", "add f32"])]
    jobs.append({"id": 4})  # no chain: a chain of its own
    queue = JobQueue(jobs)
    first, second, third = object(), object(), object()
    alive = [first, second]
    assert queue.take(first, alive)["id"] == 0
    assert queue.take(second, alive)["id"] == 2  # the add chain is first's
    assert queue.take(second, alive)["id"] == 4
    assert queue.take(second, alive) is None  # only first's chain is left
    assert queue.take(first, alive)["id"] == 1
    alive = [second, third]  # first died: its chain goes to whoever is free
    assert queue.take(third, alive)["id"] == 3
    assert not queue
    queue.add({"id": 5, "chain": "mul f32"})
    queue.add({"id": 6}, front=True)  # a job run again after a crash comes first
    assert queue.take(third, alive)["id"] == 6
    assert queue.take(third, alive)["id"] == 5 and not queue


def test_accuracy_jobs_are_chained_by_op_and_dtype_longest_first() -> None:
    ready = _ready({"mul": ["float32"], "add": ["float32", "int32"], "add_": ["float32"]})
    ready["cases"]["add_"]["aten"] = ["add_.Tensor"]
    ready["cases"]["add"]["aten"] = ["add.Tensor"]
    jobs = [j for j in runner._plan(runner.Options(device="cpu", tiers=("accuracy",)), ready, {})
            if j["tier"] == "accuracy"]
    assert [(j["case"], j["dtype"], j["chain"]) for j in jobs] == [
        ("add", "float32", "add float32"), ("add_", "float32", "add float32"),
        ("add", "int32", "add int32"), ("mul", "float32", "mul float32")]
