"""Products with few result tiles and a long K are split over K (gems_core/ops/gemm_split_k.py):
right against ATen in float64 for every config of the tunable (each split, and no split),
with bias, alpha and beta, transposed operands, and compiled for sm_90 without a GPU."""

from __future__ import annotations

import compile_only
import pytest
import torch
from gems_conformance.routing import RouteWatch, implementations

import gems_core
from gems_core import runtime

runtime.current()  # select the backend before kernels are defined

from gems_core.registry import load_ops  # noqa: E402

load_ops()
from gems_core.ops import gemm_split_k, mm  # noqa: E402

DEVICE = torch.device(gems_core.device)
TOLERANCE = {torch.float32: 2e-4, torch.bfloat16: 3e-2, torch.float16: 4e-3}


def _operands(m: int, k: int, n: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(k, m, generator=g).to(dtype).to(DEVICE).t()  # column-major, as x^T of a weight gradient
    b = torch.randn(k, n, generator=g).to(dtype).to(DEVICE)
    bias = torch.randn(n, generator=g).to(dtype).to(DEVICE)
    return a, b, bias


def _close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype, k: int) -> None:
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(got.cpu().double(), want, rtol=tol, atol=tol * k**0.5)


@pytest.mark.parametrize("config", gemm_split_k.MM_SPLIT_K.defaults, ids=str)
def test_every_config_of_the_tunable_is_right(config, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gemm_split_k.MM_SPLIT_K, "choose", lambda key, bench, admit=None: config)
    a, b, bias = _operands(70, 300, 40, torch.float32, 1)
    out = torch.empty(70, 40, dtype=torch.float32, device=DEVICE)
    gemm_split_k.launch(a, b, out, bias.expand(70, 40), 1.5, -0.5, plain=mm.launch_general)
    want = 1.5 * (a.cpu().double() @ b.cpu().double()) - 0.5 * bias.cpu().double()
    _close(out, want, torch.float32, 300)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("m", "k", "n"), [(100, 300, 70), (65, 257, 33), (130, 600, 90)])
def test_mm_and_addmm_take_the_split_and_match_aten(m: int, k: int, n: int, dtype: torch.dtype,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    gate = runtime.current().policy.gate_for("addmm")
    if gate is not None and str(dtype).removeprefix("torch.") in gate:
        pytest.skip(f"the {gems_core.backend().name} backend leaves {dtype} products to ATen")
    assert gemm_split_k.applies(m, n, k, dtype, DEVICE)
    split = next(c for c in gemm_split_k.MM_SPLIT_K.defaults if c.params["SPLIT_K"] == 4)
    monkeypatch.setattr(gemm_split_k.MM_SPLIT_K, "choose", lambda key, bench, admit=None: split)
    a, b, bias = _operands(m, k, n, dtype, m + k + n)
    launches: list[int] = []
    original = gemm_split_k._launch_decode

    def spy(grid, *args, **kwargs):
        launches.append(grid[2])  # the K slices
        return original(grid, *args, **kwargs)

    monkeypatch.setattr(gemm_split_k, "_launch_decode", spy)
    with RouteWatch(implementations(["addmm"])["addmm"]) as watch, gems_core.use_gems():
        product = torch.mm(a, b)
        fused = torch.addmm(bias, a, b, beta=0.5, alpha=2.0)
    assert watch.hit and len(launches) == 2 and all(n > 1 for n in launches)
    exact = a.cpu().double() @ b.cpu().double()
    _close(product, exact, dtype, k)
    _close(fused, 2.0 * exact + 0.5 * bias.cpu().double(), dtype, k)


def test_the_first_config_is_the_tiled_kernel() -> None:
    """Where nothing is benchmarked (the interpreter, GEMS_AUTOTUNE=0) mm keeps its kernel."""
    assert gemm_split_k.MM_SPLIT_K.defaults[0].params["SPLIT_K"] == 1


def test_short_k_many_tiles_and_float64_keep_the_tiled_kernel() -> None:
    assert not gemm_split_k.applies(100, 70, gemm_split_k.MIN_K - 1, torch.float32, DEVICE)
    assert not gemm_split_k.applies(100, 70, 4096, torch.float64, DEVICE)
    units = runtime.compute_units(DEVICE.type, DEVICE.index)
    assert not gemm_split_k.applies(128 * units, 128, 4096, torch.float32, DEVICE)


COMPILE = r"""
import json, warnings
import torch
import gems_core
from gems_core import runtime
from gems_core.registry import load_ops
warnings.simplefilter("ignore")
load_ops()
from gems_core.ops import gemm_split_k
# compile-only execution takes each tunable's first config (the tiled kernel here): a split one
split = next(c for c in gemm_split_k.MM_SPLIT_K.defaults if c.params["SPLIT_K"] == 4)
gemm_split_k.MM_SPLIT_K.choose = lambda key, bench, admit=None: split
a = torch.randn(512, 200, dtype=torch.bfloat16).t()
b = torch.randn(512, 100, dtype=torch.bfloat16)
bias = torch.randn(100, dtype=torch.bfloat16)
with gems_core.use_gems():
    torch.mm(a, b)
    torch.addmm(bias, a, b, alpha=0.5)
    torch.mm(a.float(), b.float())
print(json.dumps({"fallbacks": runtime.current().runtime_fallbacks, "compile_only": runtime.current().compile_only}))
"""


def test_the_split_kernels_compile_for_sm90() -> None:
    outcome, stderr = compile_only.run(COMPILE, GEMS_LOG="debug")
    assert outcome["compile_only"] and outcome["fallbacks"] == {}
    assert "mm_decode compiled" in stderr and "mm_split_k_reduce compiled" in stderr
