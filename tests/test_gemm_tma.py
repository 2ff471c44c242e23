"""The TMA variant of mm/addmm (gems_core/ops/gemm_tma.py): when it is chosen, its results
against float64 ATen in Triton's interpreter (which executes tensor descriptors on CPU
tensors; the variant is forced there, as the cpu backend is no Hopper), and its ahead-of-time
compile for sm_90 in a child process (compile-only execution, as the compile tier runs it).

Only fp16 runs in the interpreter: its bf16 ``tl.dot`` is wrong (see test_mm.py)."""

from __future__ import annotations

import textwrap
import warnings
from types import SimpleNamespace
from typing import Any

import compile_only
import pytest
import torch

import gems_core
from gems_core import tuning
from gems_core.contract import KernelConfig, Limits
from gems_core.launch_cache import KernelCompileError
from gems_core.registry import load_ops

DEVICE = torch.device(gems_core.device)
OPS = ("mm", "addmm", "mm.out", "addmm.out")
#: small tiles: several tiles per persistent program (the interpreter runs 8), a partial
#: last group of tile rows, and edges in M, N and K that cut through tiles
SMALL = KernelConfig({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 2}, num_warps=4, num_stages=2)
#: (M, K, N): 16-bit rows and columns in 16-byte multiples, none a multiple of the tiles
SHAPE = (152, 72, 136)


def _modules() -> tuple[Any, Any]:
    load_ops()
    from gems_core.ops import gemm_tma, mm

    return mm, gemm_tma


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    from gems_core import plan_cache

    plan_cache.clear_all()
    _, gemm_tma = _modules()
    monkeypatch.setattr(gemm_tma, "turned_off", None)
    monkeypatch.delenv("GEMS_MM_TMA", raising=False)


@pytest.fixture()
def hopper(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The chip check says yes and the size bound is lifted; returns the launchers reached."""
    mm, gemm_tma = _modules()
    monkeypatch.setattr(gemm_tma, "supported", lambda device: True)
    monkeypatch.setenv("GEMS_MM_TMA", "force")
    calls: list[str] = []
    for name, label in (("launch_tma", "tma"), ("launch_general", "general")):
        original = getattr(mm, name)

        def record(*args: Any, _original: Any = original, _label: str = label, **kwargs: Any) -> Any:
            calls.append(_label)
            return _original(*args, **kwargs)

        monkeypatch.setattr(mm, name, record)
    return calls


def _operand(shape: tuple[int, int], layout: str, seed: int, dtype: torch.dtype = torch.float16) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    rows, cols = shape
    if layout == "col":
        return (torch.rand(cols, rows, generator=g) * 2 - 1).to(DEVICE, dtype).t()
    if layout == "strided":
        return (torch.rand(rows, 2 * cols, generator=g) * 2 - 1).to(DEVICE, dtype)[:, ::2]
    return (torch.rand(rows, cols, generator=g) * 2 - 1).to(DEVICE, dtype)


def _wide(t: torch.Tensor) -> torch.Tensor:
    """A float64 copy on the CPU, for the references."""
    return t.cpu().double()


def _check(got: torch.Tensor, expected: torch.Tensor) -> None:
    assert got.dtype == torch.float16
    torch.testing.assert_close(got.cpu().double(), expected, rtol=2e-3, atol=2e-3)


# -- which products take it ----------------------------------------------------------------


def test_variant_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    mm, gemm_tma = _modules()
    big = (4096, 4096, 4096)
    # the cpu backend is no Hopper (an emulated one is)
    expected = "tma" if gemm_tma.supported(torch.device("cpu")) else "general"
    assert mm.variant(*big, torch.bfloat16) == expected
    monkeypatch.setattr(gemm_tma, "supported", lambda device: True)
    assert mm.variant(*big, torch.bfloat16) == "tma"
    assert mm.variant(*big, torch.float16) == "tma"
    assert mm.variant(*big, torch.float32) == "general"  # IEEE fp32: no tensor cores
    assert mm.variant(*big, torch.float64) == "general"
    assert mm.variant(64, 4096, 4096, torch.bfloat16) == "decode"
    assert mm.variant(1, 4096, 4096, torch.bfloat16) == "gemv"
    # the size window: 3 * 2^34 <= M * N * K < 2^39
    assert mm.variant(2048, 14336, 4096, torch.bfloat16) == "tma"
    assert mm.variant(1024, 4096, 14336, torch.bfloat16) == "tma"  # a 1024-token prefill's down projection
    assert mm.variant(1024, 4096, 12288, torch.bfloat16) == "tma"  # 3 * 2^34
    assert mm.variant(1024, 4096, 12287, torch.bfloat16) == "general"  # just below
    assert mm.variant(1024, 6144, 4096, torch.bfloat16) == "general"  # its fused q/k/v projection
    assert mm.variant(1024, 4096, 4096, torch.bfloat16) == "general"
    assert mm.variant(8192, 8192, 8192, torch.bfloat16) == "general"  # 2^39: the tiled kernel
    monkeypatch.setenv("GEMS_MM_TMA", "force")
    assert mm.variant(65, 16, 16, torch.bfloat16) == "tma"
    monkeypatch.setenv("GEMS_MM_TMA", "0")
    assert mm.variant(*big, torch.bfloat16) == "general"


def test_only_describable_operands_take_it(monkeypatch: pytest.MonkeyPatch) -> None:
    mm, gemm_tma = _modules()
    monkeypatch.setattr(gemm_tma, "supported", lambda device: True)
    monkeypatch.setenv("GEMS_MM_TMA", "force")
    M, K, N = SHAPE

    def pick(a: torch.Tensor, b: torch.Tensor) -> str:
        return mm.variant(a.shape[0], b.shape[1], a.shape[1], a.dtype, a, b)

    row, col = _operand((M, K), "row", 1), _operand((M, K), "col", 2)
    b_row, b_col = _operand((K, N), "row", 3), _operand((K, N), "col", 4)
    for a in (row, col):
        for b in (b_row, b_col):
            assert pick(a, b) == "tma"
    assert pick(_operand((M, K), "strided", 5), b_row) == "general"  # a unit stride is needed
    assert pick(row, b_row[:, :1].expand(K, N)) == "general"  # stride 0
    assert pick(torch.empty(M, K + 8, dtype=torch.float16, device=DEVICE)[:, 1:-7], b_row) == "general"  # base 2 B off
    # K = 33: rows of 66 bytes cannot be described, columns of M or N elements can
    assert pick(_operand((M, 33), "row", 7), _operand((33, N), "row", 8)) == "general"
    assert pick(_operand((M, 33), "col", 7), _operand((33, N), "row", 8)) == "tma"


def test_chip_gate() -> None:
    """The kernel is chosen by the chip's limits (``tensor_descriptors``, and shared memory
    for one of its configs): a compile target's own, the selected backend's in the
    interpreter or on a device."""
    _, gemm_tma = _modules()
    supports = gemm_tma._chip_supports

    def rt(limits: Limits) -> SimpleNamespace:
        return SimpleNamespace(limits=limits)

    hopper = Limits(32, 1024, 227 * 1024, tensor_descriptors=True)
    assert supports(rt(hopper)) == (gemm_tma.TensorDescriptor is not None)
    assert not supports(rt(Limits(32, 1024, 227 * 1024)))
    # 99 KB of shared memory (sm_120) holds none of the configs
    assert not supports(rt(Limits(32, 1024, 99 * 1024, tensor_descriptors=True)))
    # the backends' own facts: NVIDIA from sm_90 on, never AMD or the CPU reference
    amd = pytest.importorskip("gems_backend_amd.device")
    nvidia = pytest.importorskip("gems_backend_nvidia.device")

    from gems_core.backends import cpu

    assert nvidia.descriptor("sm_90").limits.tensor_descriptors
    assert nvidia.descriptor("sm_90").limits_for(80).tensor_descriptors is False
    assert not nvidia.descriptor("sm_80").limits.tensor_descriptors
    assert not amd.descriptor("gfx942").limits.tensor_descriptors
    assert not cpu.DESCRIPTOR.limits.tensor_descriptors


# -- results, in the interpreter -----------------------------------------------------------


@pytest.mark.parametrize("layouts", [("row", "row"), ("col", "col"), ("col", "row"), ("row", "col")], ids=str)
def test_products_match_float64(hopper: list[str], layouts: tuple[str, str]) -> None:
    """mm and addmm with beta == 0 (the result written through a descriptor), addmm with a
    broadcast bias, alpha and beta (through store_epilogue); several tiles per program."""
    M, K, N = SHAPE
    a, b = _operand((M, K), layouts[0], 1), _operand((K, N), layouts[1], 2)
    row_bias, col_bias = _operand((1, N), "row", 3)[0], _operand((M, 1), "row", 4)
    with tuning.forcing(lambda t: SMALL), gems_core.use_gems(include=OPS):
        product = torch.mm(a, b)
        biased = torch.addmm(row_bias, a, b, beta=0.5, alpha=-2.0)
        column = torch.addmm(col_bias, a, b, alpha=0.25)
        # beta == 0 ignores the input: no bias, the result through a descriptor, scaled
        scaled = torch.addmm(torch.full((M, N), float("nan"), dtype=torch.float16, device=DEVICE), a, b, beta=0,
                             alpha=-1.5)
    wide = _wide(a) @ _wide(b)
    _check(product, wide)
    _check(scaled, -1.5 * wide)
    _check(biased, 0.5 * _wide(row_bias) - 2.0 * wide)
    _check(column, _wide(col_bias) + 0.25 * wide)
    assert hopper == ["tma"] * 4


def test_first_config_out_layouts_and_in_place(hopper: list[str]) -> None:
    """The default config (one tile per program, edges inside one tile); a transposed out=
    (no descriptor for C); addmm into its own input."""
    M, K, N = SHAPE
    a, b = _operand((M, K), "row", 5), _operand((K, N), "col", 6)
    c = _operand((M, N), "row", 7)
    expected = 1.5 * _wide(c) + 0.5 * (_wide(a) @ _wide(b))
    out = torch.empty(N, M, dtype=torch.float16, device=DEVICE).t()
    with gems_core.use_gems(include=OPS):
        torch.mm(a, b, out=out)
        torch.addmm(c, a, b, beta=1.5, alpha=0.5, out=c)
    _check(out, _wide(a) @ _wide(b))
    _check(c, expected)
    assert hopper == ["tma"] * 2


def test_repeat_calls_keep_the_full_path(hopper: list[str]) -> None:
    """The descriptors are made per call, so a signature's launches are never replayed: every
    call reaches the TMA launcher and computes on its own operands."""
    M, K, N = SHAPE
    for step in range(3):
        a, b = _operand((M, K), "row", 10 + step), _operand((K, N), "row", 20 + step)
        with gems_core.use_gems(include=OPS):
            got = torch.mm(a, b)
        _check(got, _wide(a) @ _wide(b))
    assert hopper == ["tma"] * 3


def test_other_layouts_keep_the_tiled_kernel(hopper: list[str]) -> None:
    M, K, N = SHAPE
    a, b = _operand((M, K), "strided", 1), _operand((K, N), "row", 2)
    with gems_core.use_gems(include=OPS):
        got = torch.mm(a, b)
    _check(got, _wide(a) @ _wide(b))
    assert hopper == ["general"]


def test_a_compile_failure_turns_the_variant_off(hopper: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    _, gemm_tma = _modules()

    def fail(*args: Any, **kwargs: Any) -> None:
        raise KernelCompileError("mm_tma: out of resource: shared memory")

    monkeypatch.setattr(gemm_tma, "_run", fail)
    M, K, N = SHAPE
    a, b = _operand((M, K), "row", 1), _operand((K, N), "row", 2)
    with gems_core.use_gems(include=OPS), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = torch.mm(a, b)
        second = torch.mm(a, b)
    _check(first, _wide(a) @ _wide(b))
    _check(second, _wide(a) @ _wide(b))
    assert hopper == ["tma", "general", "general"]  # tried once, then never again
    assert gemm_tma.turned_off is not None
    assert any("TMA variant of mm failed to compile" in str(w.message) for w in caught)


def test_tunable_and_nvidia_configs() -> None:
    _, gemm_tma = _modules()
    assert gemm_tma.MM_TMA.params == ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")
    configs = pytest.importorskip("gems_backend_nvidia.configs")
    limit = 227 * 1024
    for arch in ("sm_90", "sm_100"):
        tuned = configs.tuned_configs(arch)["mm_tma"]
        assert tuned
        for config in tuned:
            gemm_tma.MM_TMA.validate(config)
            assert set(config.params) == set(gemm_tma.MM_TMA.params)
            assert gemm_tma._fits(torch.bfloat16, limit)(config), config.describe()
    assert "mm_tma" not in configs.tuned_configs("sm_80")


# -- the ahead-of-time compile for sm_90 ---------------------------------------------------

_AOT_SCRIPT = textwrap.dedent("""
    import json, torch
    from gems_core import aot, runtime, tuning
    from gems_core.registry import load_ops
    load_ops()
    from gems_core.ops import gemm_tma, mm

    M, K, N = 256, 128, 96
    a = torch.empty(M, K, dtype=torch.bfloat16)
    b = torch.empty(N, K, dtype=torch.bfloat16).t()  # a Linear weight: read as B^T
    out = torch.empty(M, N, dtype=torch.bfloat16)
    bias = torch.empty(N, dtype=torch.bfloat16).expand(M, N)
    assert mm.variant(M, N, K, a.dtype, a, b) == "tma"  # compile-only: whatever the size
    first = gemm_tma.MM_TMA.configs()[0]
    done = []
    with aot.observe(done.append), tuning.forcing(lambda t: first):
        mm._launch(a, b, out, None, 1.0, 0.0)  # the result through a descriptor
        mm._launch(a, b, out, bias, 2.0, 0.5)  # the addmm epilogue through pointers
    limit = runtime.current().limits.shared_memory_per_block
    print(json.dumps([
        {"name": r.name, "error": r.error, "constexprs": {k: str(v) for k, v in r.constexprs.items()},
         "ptx": {p: p in r.compiled.asm["ptx"] for p in ("cp.async.bulk.tensor", "wgmma.mma_async")}
         if r.compiled else {}, "shared": aot.resource_usage(r).get("shared"), "limit": limit}
        for r in done
    ]))
""")


def test_compiles_ahead_of_time_for_sm90() -> None:
    outcome, _ = compile_only.run(_AOT_SCRIPT)
    compiles = [r for r in outcome if r["name"] == "mm_tma"]
    assert [(r["constexprs"]["C_DESC"], r["constexprs"]["HAS_BIAS"]) for r in compiles] == [
        ("True", "False"), ("False", "True")]
    for r in compiles:
        assert r["error"] is None, r["error"]
        assert r["constexprs"]["B_T"] == "True" and r["constexprs"]["A_T"] == "False"
        assert r["ptx"] == {"cp.async.bulk.tensor": True, "wgmma.mma_async": True}
        assert r["shared"] <= r["limit"]
