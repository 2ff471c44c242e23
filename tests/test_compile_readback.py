"""The compile tier on ops whose result size a kernel computes and the host reads back
(masked_select, nonzero, masked_scatter, repeat_interleave, unique).

In compile-only execution no kernel runs, so the count is never computed: the op sizes its
result by a stand-in (masked.read_back) and must still compile every kernel it launches
after the count, with no host error. Checked for cuda:90 by the upstream Triton installed
here, with no GPU; one child process, about half a minute.
"""

from __future__ import annotations

import pytest

from gems_conformance.cases import all_cases
from gems_conformance.compile_check import HOST_ERROR, NOT_EXERCISED, OK, check_backend, summarize
from gems_core import TritonTarget

CUDA_90 = TritonTarget("cuda", 90, 32)
OPS = ("masked_select", "nonzero", "masked_scatter", "masked_scatter_", "repeat_interleave", "_unique2")

#: op case -> the kernels it launches after reading its count back (the first case, by name,
#: to need a compile is the one its record names)
AFTER_COUNT = {
    "masked_select": {"compact"},
    "nonzero": {"compact", "pointwise"},  # the write, then one coordinate kernel a dim
    "masked_scatter": {"compact", "scatter_gather"},  # index_put_'s kernel
    "masked_scatter_": {"scatter_gather"},
    "repeat_interleave_counts": {"repeat_interleave"},
    "unique": {"compact", "unique", "unique_counts"},
}


@pytest.fixture(scope="module")
def records() -> list:
    pytest.importorskip("gems_backend_nvidia")
    return check_backend("nvidia", [CUDA_90], OPS)


def test_no_host_errors_or_failed_compiles(records) -> None:
    assert records
    bad = [r for r in records if r.status == HOST_ERROR or r.failed]
    assert not bad, summarize(bad)


def test_the_kernels_after_the_count_are_compiled(records) -> None:
    compiled = [r for r in records if r.status == OK]
    for op, kernels in AFTER_COUNT.items():
        reached = {r.kernel for r in compiled if r.op == op}
        assert kernels <= reached, (op, reached)
    # every dtype of masked_select compiles its own write kernel (its values' pointer type)
    writes = [r for r in compiled if r.op == "masked_select" and r.kernel == "compact"]
    dtypes = {str(d).replace("torch.", "") for d in all_cases()["masked_select"].dtypes}
    assert {r.dtype for r in writes} == dtypes
    assert len(writes) == len(dtypes)
    assert all("WRITE_VALUE=True" in r.constexprs and "WRITE_INDEX=False" in r.constexprs for r in writes)
    # index_put_'s kernel as the chip launches it: indices checked on the device, no index
    # a kernel did not write read on the host
    scatters = [r for r in compiled if r.op.startswith("masked_scatter") and r.kernel == "scatter_gather"]
    assert scatters and all("CHECK=True" in r.constexprs for r in scatters)
    # the write kernels carry their tunable's name: its config is reported compiled
    unreached = {r.kernel for r in records if r.status == NOT_EXERCISED}
    assert not unreached & {"compact", "unique"}, unreached


def test_host_index_checks_read_no_kernel_result_in_compile_only_execution(monkeypatch: pytest.MonkeyPatch) -> None:
    """index_select's, embedding's and nll_loss's host checks read values a kernel computed
    (aminmax of the indices, a bad-target flag); in compile-only execution no kernel ran and
    the memory holds anything, so the checks take a stand-in that passes, and a model's
    forward and backward compile through them. Off compile-only, the same reads raise."""
    import torch

    from gems_core import runtime
    from gems_core.ops import indexing, loss

    index, bad = torch.tensor([5, -9]), torch.ones((1,), dtype=torch.int32)
    targets = torch.tensor([7])
    with pytest.raises(IndexError):
        indexing.check_indices(index, 3)
    with pytest.raises(IndexError):
        loss._check_targets(bad, targets, -100, 3)
    monkeypatch.setattr(type(runtime.current()), "compile_only", property(lambda self: True))
    assert indexing.index_range(index) == (0, 0)
    indexing.check_indices(index, 3)
    indexing.check_wrapped_indices(index, 3)
    loss._check_targets(bad, targets, -100, 3)
