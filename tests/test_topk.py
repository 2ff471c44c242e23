"""topk against ATen: values exactly, indices exactly (ties in index order, which a stable
sort gives as reference; ATen's own CPU kernel leaves the order of ties open).

Rows longer than one program's limit take two stages (chunks, then candidates). The tests
reach that path on rows of a few hundred entries: ``MAX_ROW`` lowered to 64 and a ``CHUNK``
of 32 forced (the interpreter is slow on long rows)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch

import gems_core
from gems_core import tuning
from gems_core.contract import KernelConfig
from gems_core.registry import load_ops

DEVICE = torch.device(gems_core.device)
OPS = ["topk", "topk.values"]
MAX_ROW = 64
CHUNK = 32


class _Spy:
    """Wraps a launch cache and records each launch's keyword arguments."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[dict[str, Any]] = []

    def __call__(self, grid: tuple[int, ...], *args: Any, **kwargs: Any) -> None:
        self.calls.append(kwargs)
        self.inner(grid, *args, **kwargs)


@pytest.fixture
def topk_mod(monkeypatch):
    """gems' topk module with MAX_ROW lowered and its stage-1 launches recorded."""
    load_ops()
    from gems_core.ops import topk

    monkeypatch.setattr(topk, "MAX_ROW", MAX_ROW)
    monkeypatch.setattr(topk, "_launch_chunk", _Spy(topk._launch_chunk))
    return topk


@contextmanager
def _chunk(chunk: int = CHUNK) -> Iterator[None]:
    config = KernelConfig({"CHUNK": chunk}, num_warps=4, num_stages=1)
    with tuning.forcing(lambda t: config if t.name == "topk_chunk" else t.configs()[0]):
        yield


def _reference(x: torch.Tensor, k: int, dim: int, largest: bool) -> tuple[torch.Tensor, torch.Tensor]:
    values, indices = torch.sort(x, stable=True, dim=dim, descending=largest)
    return values.narrow(dim, 0, k), indices.narrow(dim, 0, k)


def _check(x: torch.Tensor, k: int, dim: int = -1, largest: bool = True, out: bool = False) -> None:
    """gems' topk of ``x`` on the gems device (in its layout where ``x`` is there already)
    against the reference and ATen's values, both from a CPU copy."""
    host, x = x.cpu(), x.to(DEVICE)
    aten_values, _ = torch.topk(host, k, dim, largest)
    want_values, want_indices = _reference(host, k, dim, largest)
    torch.testing.assert_close(aten_values, want_values, rtol=0, atol=0, equal_nan=True)  # the reference is ATen's order
    with gems_core.use_gems(include=OPS):
        if out:
            values = torch.empty(0, dtype=x.dtype, device=DEVICE)
            indices = torch.empty(0, dtype=torch.int64, device=DEVICE)
            torch.topk(x, k, dim, largest, out=(values, indices))
        else:
            values, indices = torch.topk(x, k, dim, largest)
    values, indices = values.cpu(), indices.cpu()
    torch.testing.assert_close(values, want_values, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(indices, want_indices), f"indices {indices} != {want_indices}"


def _ties(shape: tuple[int, ...], dtype: torch.dtype, seed: int, levels: int = 5) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-levels, levels + 1, shape, generator=g).to(dtype)


def _stage_one_rounds(topk: Any) -> list[bool]:
    """FROM_KEYS of each stage-1 launch so far."""
    return [call["FROM_KEYS"] for call in topk._launch_chunk.calls]


# --- the plan --------------------------------------------------------------------------

def test_rounds_shrink_candidates_to_one_program() -> None:
    load_ops()
    from gems_core.ops.topk import _rounds

    assert _rounds(32000, 50, 4096, 8192) == [8]
    assert _rounds(128256, 50, 4096, 8192) == [32]
    assert _rounds(128256, 1000, 2048, 8192) == [63, 31, 16, 8]  # candidates 63000, ..., 8000
    assert _rounds(300, 32, 32, 64) is None  # k == CHUNK: the candidates never shrink
    assert _rounds(300, 33, 32, 64) is None  # k > CHUNK
    assert _rounds(2**31, 8, 4096, 8192) is None  # positions must fit 31 bits


# --- one program per row (rows up to MAX_ROW) ------------------------------------------

@pytest.mark.parametrize("size", [1, 2, 3, 7, 8, 9, 33, 64])
def test_one_program_rows(size: int) -> None:
    x = _ties((3, size), torch.float32, size, levels=3) + torch.rand(3, size, generator=torch.Generator().manual_seed(1)).round()
    for k in sorted({1, min(2, size), size // 2 or 1, size}):
        _check(x, k)
        _check(x, k, largest=False)


# --- two stages (rows longer than MAX_ROW) ---------------------------------------------

@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("k", [1, 5, 20])
def test_long_rows_float32(topk_mod, k: int, largest: bool) -> None:
    x = torch.randn(3, 300, generator=torch.Generator().manual_seed(k))
    with _chunk():
        _check(x, k, largest=largest)
    rounds = topk_mod._rounds(300, k, CHUNK, MAX_ROW)
    assert rounds and _stage_one_rounds(topk_mod) == [False] + [True] * (len(rounds) - 1)
    if k == 20:  # K_PAD == CHUNK, and the candidates take several rounds
        assert len(rounds) > 2


def test_long_rows_k_equal_to_chunk(topk_mod) -> None:
    # k == CHUNK cannot shrink the candidates (ceil(n / CHUNK) * CHUNK >= n): a config with
    # a larger CHUNK (the default's 4096) serves the row
    x = _ties((2, 300), torch.float32, 3, levels=20)
    with _chunk():
        _check(x, CHUNK)
        _check(x, CHUNK, largest=False)
    assert topk_mod._launch_chunk.calls and all(c["CHUNK"] > CHUNK for c in topk_mod._launch_chunk.calls)


def test_long_rows_candidates_exactly_max_row(topk_mod) -> None:
    # rows of MAX_ROW + 1 in two chunks of 64, k = 32: 64 candidates, one program's limit
    x = _ties((2, MAX_ROW + 1), torch.float32, 4, levels=10)
    with _chunk(64):
        _check(x, 32)
        _check(x, 32, largest=False)
    assert _stage_one_rounds(topk_mod) == [False, False]


def test_long_rows_fall_back_to_aten_where_no_config_serves(topk_mod, monkeypatch) -> None:
    only = (KernelConfig({"CHUNK": CHUNK}, num_warps=4, num_stages=1),)
    monkeypatch.setattr(topk_mod.TOPK_CHUNK, "configs", lambda: only)
    # no ties: ATen's indices are exact
    x = torch.randn(2, 300, generator=torch.Generator().manual_seed(5)).to(DEVICE)
    with gems_core.use_gems(include=OPS):
        values, indices = torch.topk(x, CHUNK + 1)
    want_values, want_indices = torch.topk(x, CHUNK + 1)
    assert torch.equal(values, want_values) and torch.equal(indices, want_indices)
    assert not topk_mod._launch_chunk.calls


@pytest.mark.parametrize("largest", [True, False])
def test_long_rows_ties_in_index_order(topk_mod, largest: bool) -> None:
    x = _ties((3, 300), torch.float32, 6, levels=2)  # five values: every top k is mostly ties
    with _chunk():
        _check(x, 7, largest=largest)
        _check(x, 1, largest=largest)
        zeros = torch.zeros(2, 300)
        _check(zeros, 9, largest=largest)


@pytest.mark.parametrize("largest", [True, False])
def test_long_rows_nan_inf_and_signed_zero(topk_mod, largest: bool) -> None:
    g = torch.Generator().manual_seed(7)
    x = torch.randn(3, 400, generator=g)
    slots = torch.randperm(400, generator=g)
    x[:, slots[:40]] = float("nan")  # more NaN than k: the largest k are all NaN, in index order
    x[:, slots[40:45]] = float("inf")
    x[:, slots[45:50]] = float("-inf")
    x[:, slots[50:60]] = -0.0
    x[:, slots[60:70]] = 0.0
    x[1, :] = x[1, :].nan_to_num(nan=3.0)  # a row without NaN: the infinities lead
    with _chunk():
        _check(x, 12, largest=largest)
        _check(x, 3, largest=largest)
        _check(-x.abs().nan_to_num(nan=0.0), 25, largest=largest)  # -0.0 and 0.0 tie


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_long_rows_half_dtypes(topk_mod, dtype: torch.dtype) -> None:
    x = (torch.randn(3, 300, generator=torch.Generator().manual_seed(8)) * 4).to(dtype)  # rounding makes ties
    x[0, 17] = float("nan")
    with _chunk():
        _check(x, 6)
        _check(x, 6, largest=False)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.int8, torch.uint8])
def test_long_rows_int_dtypes(topk_mod, dtype: torch.dtype) -> None:
    info = torch.iinfo(dtype)
    x = _ties((3, 300), dtype, 9, levels=3) if info.min < 0 else _ties((3, 300), torch.int16, 9, levels=3).abs().to(dtype)
    x[0, 5] = info.min
    x[1, 250] = info.max
    x[2, 0] = info.max
    x[2, 299] = info.min
    with _chunk():
        _check(x, 4)
        _check(x, 4, largest=False)


def test_long_rows_other_dims_and_layouts(topk_mod) -> None:
    g = torch.Generator().manual_seed(10)
    with _chunk():
        _check(_ties((300, 3), torch.float32, 11), 6, dim=0)  # inner > 1
        _check(torch.randn(2, 300, 3, generator=g), 5, dim=1)
        _check(torch.randn(2, 300, 3, generator=g), 5, dim=-2, largest=False)
        _check(torch.randn(4, 300, generator=g).to(DEVICE).t(), 3, dim=0)  # transposed: stride 4 along the row
        _check(torch.randn(3, 600, generator=g).to(DEVICE)[:, ::2], 5)  # strided row
        _check(torch.randn(300, generator=g), 5, dim=0)  # one row
    assert topk_mod._launch_chunk.calls


def test_long_rows_out(topk_mod) -> None:
    x = _ties((3, 300), torch.float32, 12)
    with _chunk():
        _check(x, 5, out=True)
        _check(x, 5, dim=1, largest=False, out=True)
    assert topk_mod._launch_chunk.calls
