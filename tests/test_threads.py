"""Threads: several threads call gems' ops and enter and leave their own use_gems() blocks at
the same time, on the built-in cpu backend (Triton's interpreter) or a chip; every result
equals ATen's and every call was served by gems."""

from __future__ import annotations

import threading

import pytest
import torch
from gems_conformance.routing import RouteWatch, implementations

import gems_core

THREADS = 8
CALLS = 3  # per thread: Triton's interpreter runs each kernel in Python
OPS = ["add.Tensor", "mul.Tensor", "sum.dim_IntList"]


@pytest.fixture(autouse=True)
def _disabled():
    gems_core.disable()
    yield
    gems_core.disable()


def _inputs(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    device = gems_core.device
    cases = []
    for i in range(CALLS):
        a = torch.randn(6, 5, dtype=torch.float64, generator=generator).to(device)
        b = torch.randn(5, 6, dtype=torch.float64, generator=generator).to(device).t()  # strided
        cases.append((a, b if i % 2 else b.contiguous()))
    return cases


def _expected(cases: list[tuple[torch.Tensor, torch.Tensor]]) -> list[torch.Tensor]:
    return [((a + b) * a).sum(dim=1) for a, b in cases]  # ATen: gems serves nothing yet


def _run_threads(work) -> None:
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def body(index: int) -> None:
        try:
            start.wait()
            work(index)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def test_threads_with_their_own_use_gems_blocks():
    inputs = {i: _inputs(i) for i in range(THREADS)}
    expected = {i: _expected(inputs[i]) for i in range(THREADS)}
    codes = frozenset().union(*implementations(OPS).values())
    results: dict[int, list[torch.Tensor]] = {}
    hits: dict[int, list[bool]] = {}

    def work(index: int) -> None:
        results[index], hits[index] = [], []
        for a, b in inputs[index]:
            with gems_core.use_gems(include=OPS), RouteWatch(codes) as watch:
                results[index].append(((a + b) * a).sum(dim=1))
            hits[index].append(watch.hit)

    _run_threads(work)
    assert gems_core.registered_ops() == []  # the last block to leave gave every op back
    for index in range(THREADS):
        assert all(hits[index]), f"thread {index}: a call reached ATen"
        for got, want in zip(results[index], expected[index]):
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_threads_calling_ops_while_others_enter_and_leave_blocks():
    """Threads that stay inside one block call ops while the others enter and leave theirs:
    the registration they run on stays in place."""
    inputs = {i: _inputs(100 + i) for i in range(THREADS)}
    expected = {i: _expected(inputs[i]) for i in range(THREADS)}
    results: dict[int, list[torch.Tensor]] = {}

    def work(index: int) -> None:
        results[index] = []
        if index % 2:
            with gems_core.use_gems(include=OPS):
                for a, b in inputs[index]:
                    results[index].append(((a + b) * a).sum(dim=1))
        else:
            for a, b in inputs[index]:
                with gems_core.use_gems(include=OPS):
                    results[index].append(((a + b) * a).sum(dim=1))

    _run_threads(work)
    assert gems_core.registered_ops() == []
    for index in range(THREADS):
        for got, want in zip(results[index], expected[index]):
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_nested_blocks_of_one_thread_still_restore_in_order():
    with gems_core.use_gems(include="add"):
        with gems_core.use_gems(include="mul.Tensor"):
            assert gems_core.registered_ops() == ["mul.Tensor"]
        assert "add.Tensor" in gems_core.registered_ops()
    assert gems_core.registered_ops() == []
