"""mm/addmm behaviour beyond the op cases: ATen's errors, empty products, out= rules, the
tunable's contract with backend plugins, the cpu backend's bf16 gate, and the shape-dispatched
variants (GEMV, skinny split-K decode, the general tile)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from outcomes import answer

import gems_core
from gems_core import runtime, tuning
from gems_core.registry import load_ops
from gems_core.tuning import tunables

DEVICE = torch.device(gems_core.device)
#: only the ops under test run on gems, so a fault elsewhere cannot fail these tests
OPS = ("mm", "addmm")


@pytest.fixture(autouse=True)
def _fresh_plans() -> None:
    """Each test starts with no replayed mm/addmm launches (spies see every launch path)."""
    from gems_core import plan_cache

    plan_cache.clear_all()


def _outcome(fn: Callable[[], Any]) -> str:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the error itself is what is compared
        return f"{type(exc).__name__}: {exc}"
    return "ok"


A, B = torch.randn(3, 4, device=DEVICE), torch.randn(4, 5, device=DEVICE)
ERRORS = {
    "dtype mismatch": lambda: torch.mm(A, B.half()),
    "shape mismatch": lambda: torch.mm(A, torch.randn(3, 5, device=DEVICE)),
    "not a matrix": lambda: torch.mm(A, torch.randn(4, device=DEVICE)),
    "addmm input shape": lambda: torch.addmm(torch.randn(2, 5, device=DEVICE), A, B),
    "addmm input dtype": lambda: torch.addmm(torch.randn(3, 5, device=DEVICE).half(), A, B),
    "out dtype": lambda: torch.mm(A, B, out=torch.empty(3, 5, dtype=torch.float64, device=DEVICE)),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_invalid_calls_raise_atens_error(name: str) -> None:
    expected = _outcome(ERRORS[name])
    assert expected != "ok"
    with gems_core.use_gems(include=OPS):
        assert _outcome(ERRORS[name]) == expected


def test_empty_k_gives_zeros_and_beta_times_input() -> None:
    a, b, c = torch.randn(4, 0, device=DEVICE), torch.randn(0, 3, device=DEVICE), torch.randn(4, 3, device=DEVICE)
    with gems_core.use_gems(include=OPS):
        product = torch.mm(a, b)
        biased = torch.addmm(c, a, b, beta=2.0)
    assert torch.equal(product, torch.zeros(4, 3, device=DEVICE))
    assert torch.allclose(biased, 2.0 * c)


def test_integer_matrices_go_to_aten() -> None:
    """ATen's answer, whatever it is: a product on the CPU, an error on CUDA (no integer mm)."""
    a, b = torch.randint(-5, 5, (6, 7), device=DEVICE), torch.randint(-5, 5, (7, 3), device=DEVICE)
    expected = answer(lambda: torch.mm(a, b))
    with gems_core.use_gems(include=OPS):
        assert answer(lambda: torch.mm(a, b)) == expected


def test_out_of_another_shape_is_resized_with_atens_warning() -> None:
    a, b = torch.randn(17, 9, device=DEVICE), torch.randn(9, 33, device=DEVICE)
    out = torch.empty(2, 2, device=DEVICE)
    with gems_core.use_gems(include=OPS), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.mm(a, b, out=out)
    assert out.shape == (17, 33)
    assert any("was resized" in str(w.message) for w in caught)
    torch.testing.assert_close(out, a @ b)


def test_addmm_out_may_be_its_own_input() -> None:
    a, b = torch.randn(33, 20, device=DEVICE).t(), torch.randn(33, 18, device=DEVICE)
    c = torch.randn(20, 18, device=DEVICE)
    expected = torch.addmm(c, a, b, beta=0.5, alpha=-2)
    with gems_core.use_gems(include=OPS):
        torch.addmm(c, a, b, beta=0.5, alpha=-2, out=c)
    torch.testing.assert_close(c, expected)


def test_float64_scalars_keep_their_precision() -> None:
    a, b, c = (
        torch.randn(5, 6, dtype=torch.float64, device=DEVICE),
        torch.randn(6, 7, dtype=torch.float64, device=DEVICE),
        torch.randn(5, 7, dtype=torch.float64, device=DEVICE),
    )
    alpha, beta = 1 / 3, 0.1
    with gems_core.use_gems(include=OPS):
        got = torch.addmm(c, a, b, beta=beta, alpha=alpha)
    torch.testing.assert_close(got, beta * c + alpha * (a @ b), rtol=1e-12, atol=1e-12)


def test_mm_tunable_keeps_the_names_backends_configure() -> None:
    mm = tunables()["mm"]
    assert mm.params == ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")
    for config in mm.defaults:
        assert set(config.params) == set(mm.params)


def test_linear_layer_trains_on_gems() -> None:
    torch.manual_seed(0)
    layer = torch.nn.Linear(24, 10).to(DEVICE)
    x = torch.randn(7, 24, device=DEVICE)
    expected = torch.autograd.grad((layer(x) * layer(x)).sum(), (layer.weight, layer.bias))
    with gems_core.use_gems(include=OPS):
        got = torch.autograd.grad((layer(x) * layer(x)).sum(), (layer.weight, layer.bias))
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(
    runtime.current().selection.backend.name != "cpu", reason="the cpu backend's own gate"
)
def test_cpu_backend_sends_bf16_products_to_aten() -> None:
    policy = runtime.current().policy
    for op in ("mm", "mm.out", "addmm", "addmm.out"):
        assert "bfloat16" in (policy.gate_for(op) or ())
    a, b = torch.randn(16, 16).bfloat16(), torch.randn(16, 16).bfloat16()
    with gems_core.use_gems(include=OPS):
        got = torch.mm(a, b)
    assert torch.equal(got, a @ b)


@pytest.mark.skipif(not runtime.current().interpreter, reason="a Triton interpreter quirk")
def test_interpreter_bf16_dot_is_still_wrong() -> None:
    """Why the cpu backend gates bf16 mm. If this fails, Triton's interpreter computes bf16
    tl.dot correctly now: drop the gate in gems_core/backends/cpu.py."""
    from gems_core.ops.mm import _launch

    a, b = torch.randn(16, 16).bfloat16(), torch.randn(16, 16).bfloat16()
    out = torch.empty(16, 16, dtype=torch.bfloat16)
    _launch(a, b, out, None, 1, 0)
    assert not torch.allclose(out.float(), (a.double() @ b.double()).float(), rtol=0.05, atol=0.05)


# -- shape-dispatched variants -----------------------------------------------------------

#: (M, K, N) -> the variant that must serve it (small shapes: the interpreter is slow)
VARIANT_SHAPES = {
    (1, 64, 17): "gemv",
    (1, 300, 64): "gemv",
    (3, 300, 1): "gemv",  # one column: the transposed GEMV
    (3, 64, 17): "decode",
    (3, 300, 17): "decode",  # K spans several BLOCK_K steps: split over K
    (16, 300, 64): "decode",
    (80, 64, 17): "general",
}
#: (rtol, atol) against a float64 product, for inputs in [-1, 1]
TOLERANCES = {torch.float32: (1e-5, 1e-5), torch.float16: (2e-3, 2e-3)}


def _modules() -> tuple[Any, Any]:
    load_ops()
    from gems_core.ops import gemm_decode, mm

    return mm, gemm_decode


def _spy_variants(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record which variant launcher each product reaches (and whether split-K reduced)."""
    mm, gemm_decode = _modules()
    calls: list[str] = []
    for name, label in (("launch_gemv", "gemv"), ("launch_decode", "decode"),
                        ("launch_general", "general")):
        original = getattr(mm, name)

        def record(*args: Any, _original: Any = original, _label: str = label, **kwargs: Any) -> Any:
            calls.append(_label)
            return _original(*args, **kwargs)

        monkeypatch.setattr(mm, name, record)
    reduce = gemm_decode._launch_reduce

    def record_reduce(*args: Any, **kwargs: Any) -> Any:
        calls.append("split-k reduce")
        return reduce(*args, **kwargs)

    monkeypatch.setattr(gemm_decode, "_launch_reduce", record_reduce)
    return calls


def _operand(shape: tuple[int, int], dtype: torch.dtype, layout: str, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    rows, cols = shape
    if layout == "transposed":
        return (torch.rand(cols, rows, generator=g) * 2 - 1).to(DEVICE, dtype).t()
    if layout == "strided":
        return (torch.rand(rows, 2 * cols, generator=g) * 2 - 1).to(DEVICE, dtype)[:, ::2]
    return (torch.rand(rows, cols, generator=g) * 2 - 1).to(DEVICE, dtype)


def _wide(t: torch.Tensor) -> torch.Tensor:
    """A float64 copy on the CPU, for the references."""
    return t.cpu().double()


def _check(got: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    assert got.dtype == dtype
    rtol, atol = TOLERANCES[dtype]
    torch.testing.assert_close(got.cpu().double(), expected, rtol=rtol, atol=atol)


def test_variant_rules() -> None:
    mm, _ = _modules()
    assert mm.variant(1, 4096, 4096, torch.bfloat16) == "gemv"
    assert mm.variant(4096, 1, 4096, torch.float32) == "gemv"
    assert mm.variant(1, 64, 64, torch.float64) == "gemv"
    assert mm.variant(2, 14336, 4096, torch.bfloat16) == "decode"
    assert mm.variant(64, 4096, 4096, torch.float16) == "decode"
    assert mm.variant(16, 4096, 4096, torch.float64) == "general"
    assert mm.variant(65, 4096, 4096, torch.bfloat16) == "general"


def test_split_k_fills_the_compute_units() -> None:
    _, gemm_decode = _modules()
    # decode-shaped addmm 16x14336x4096 on 132 SMs, 16x128 tiles: 112 tiles, two slices
    assert gemm_decode.split_k_slices(112, 4096, 128, 132) == (2, 2048)
    # few tiles, deep K: up to one program per unit, slices of whole BLOCK_K steps
    assert gemm_decode.split_k_slices(8, 14336, 128, 132) == (16, 896)
    # enough tiles, or too little K to split: one slice
    assert gemm_decode.split_k_slices(200, 4096, 128, 132) == (1, 4096)
    assert gemm_decode.split_k_slices(1, 100, 64, 132) == (1, 128)
    assert gemm_decode.split_k_slices(1, 0, 64, 132) == (1, 64)
    for tiles, K, block_k in ((3, 1000, 64), (1, 300, 64), (5, 4113, 128)):
        slices, per_slice = gemm_decode.split_k_slices(tiles, K, block_k, 132)
        assert per_slice % block_k == 0 and (slices - 1) * per_slice < K <= slices * per_slice


@pytest.fixture
def split_like_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The split-K expectations of a test hold for the core's first configs on the
    interpreter's 8 compute units: on a chip, the same configs and unit count (a chip's own
    tiles and unit count split other shapes)."""
    if DEVICE.type == "cpu":
        yield
        return
    monkeypatch.setattr(runtime, "compute_units", lambda *_args, **_kwargs: 8)
    monkeypatch.setattr(tuning.Tunable, "configs", lambda self: tuple(self.defaults))
    with tuning.forcing(lambda tunable: tunable.defaults[0]):
        yield


@pytest.mark.usefixtures("split_like_the_interpreter")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("shape", sorted(VARIANT_SHAPES), ids=str)
def test_variants_match_float64(
    monkeypatch: pytest.MonkeyPatch, shape: tuple[int, int, int], dtype: torch.dtype
) -> None:
    """mm and addmm (beta, alpha, broadcast bias) on contiguous, transposed and strided
    operands, through the variant the shape must take."""
    calls = _spy_variants(monkeypatch)
    M, K, N = shape
    a = _operand((M, K), dtype, "contiguous", 1)
    b = _operand((K, N), dtype, "transposed", 2)  # a Linear weight's layout
    a_t = _operand((M, K), dtype, "transposed", 3)
    b_s = _operand((K, N), dtype, "strided", 4)
    row_bias = _operand((1, N), dtype, "contiguous", 5)[0]  # broadcast over rows
    col_bias = _operand((M, 1), dtype, "contiguous", 6)  # broadcast over columns
    with gems_core.use_gems(include=OPS):
        product = torch.mm(a, b)
        biased = torch.addmm(row_bias, a_t, b_s, beta=0.5, alpha=-2.0)
        column = torch.addmm(col_bias, a, b_s, alpha=0.25)
    wide = {t: _wide(t) for t in (a, b, a_t, b_s, row_bias, col_bias)}
    _check(product, wide[a] @ wide[b], dtype)
    _check(biased, 0.5 * wide[row_bias] - 2.0 * (wide[a_t] @ wide[b_s]), dtype)
    _check(column, wide[col_bias] + 0.25 * (wide[a] @ wide[b_s]), dtype)
    expected = VARIANT_SHAPES[shape]
    assert [c for c in calls if c != "split-k reduce"] == [expected] * 3
    # the reduction runs exactly when K is split (the device's compute units: 8 on the interpreter; first config)
    reduced = calls.count("split-k reduce")
    if expected == "decode":
        _, gemm_decode = _modules()
        p = tunables()["mm_decode"].configs()[0].params
        tiles = -(-M // p["BLOCK_M"]) * -(-N // p["BLOCK_N"])
        slices, _ = gemm_decode.split_k_slices(tiles, K, p["BLOCK_K"], runtime.compute_units(DEVICE.type, DEVICE.index))
        assert reduced == (3 if slices > 1 else 0), calls
        assert (slices > 1) == (K == 300)  # both paths are covered
    else:
        assert reduced == 0, calls


@pytest.mark.usefixtures("split_like_the_interpreter")
def test_decode_out_may_be_its_own_input_and_beta0_ignores_nan(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _spy_variants(monkeypatch)
    a, b = torch.rand(3, 300, device=DEVICE) * 2 - 1, torch.rand(17, 300, device=DEVICE).t() * 2 - 1
    c = torch.rand(3, 17, device=DEVICE)
    expected = torch.addmm(_wide(c), _wide(a), _wide(b), beta=0.5, alpha=-2)
    with gems_core.use_gems(include=OPS + ("addmm.out",)):  # "addmm" names only the overload
        torch.addmm(c, a, b, beta=0.5, alpha=-2, out=c)
        ignored = torch.addmm(torch.full((3, 17), float("nan"), device=DEVICE), a, b, beta=0)
    torch.testing.assert_close(_wide(c), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(_wide(ignored), _wide(a) @ _wide(b), rtol=1e-5, atol=1e-5)
    assert calls == ["decode", "split-k reduce"] * 2


def test_gemv_float64_and_empty_k(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _spy_variants(monkeypatch)
    a = torch.randn(1, 33, dtype=torch.float64, device=DEVICE)
    b = torch.randn(40, 33, dtype=torch.float64, device=DEVICE).t()
    c = torch.randn(40, dtype=torch.float64, device=DEVICE)
    with gems_core.use_gems(include=OPS):
        got = torch.addmm(c, a, b, beta=1 / 3, alpha=0.1)
        empty = torch.addmm(c, torch.randn(1, 0, dtype=torch.float64, device=DEVICE),
                            torch.randn(0, 40, dtype=torch.float64, device=DEVICE), beta=2.0)
    torch.testing.assert_close(got, c / 3 + 0.1 * (a @ b), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(empty, 2.0 * c[None, :].expand(1, 40))
    assert calls == ["gemv", "gemv"]


def test_decode_tiles_of_every_config_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each default mm_decode config (16 to 64 rows, split or not) gives the same product."""
    calls = _spy_variants(monkeypatch)
    a, b = torch.rand(5, 200, device=DEVICE) * 2 - 1, torch.rand(200, 33, device=DEVICE) * 2 - 1
    bias = torch.rand(33, device=DEVICE)
    expected = torch.addmm(_wide(bias), _wide(a), _wide(b), alpha=1.5)
    decode = tunables()["mm_decode"]
    for config in decode.defaults:
        with tuning.forcing(lambda t, config=config: config if t is decode else t.configs()[0]):
            with gems_core.use_gems(include=OPS):
                got = torch.addmm(bias, a, b, alpha=1.5)
        torch.testing.assert_close(_wide(got), expected, rtol=1e-5, atol=1e-5)
    assert calls.count("decode") == len(decode.defaults)


def test_new_tunables_keep_their_params() -> None:
    assert tunables()["mm_decode"].params == ("BLOCK_M", "BLOCK_N", "BLOCK_K")
    assert tunables()["gemv"].params == ("BLOCK_N", "BLOCK_K")
    for name in ("mm_decode", "gemv"):
        for config in tunables()[name].defaults:
            assert set(config.params) == set(tunables()[name].params)


@pytest.mark.parametrize("shape", [(3, 300, 17), (16, 64, 64), (1, 64, 17), (80, 64, 17)], ids=str)
def test_repeat_calls_replay_the_recorded_launches(monkeypatch: pytest.MonkeyPatch, shape: tuple) -> None:
    """The first call of a signature takes the full path, the second records its launches
    (a split-K workspace included), later ones replay them on their own data."""
    calls = _spy_variants(monkeypatch)
    M, K, N = shape
    dtype = torch.float32
    expected_variant = VARIANT_SHAPES.get(shape, "decode")
    for step in range(4):
        a = _operand((M, K), dtype, "contiguous", 10 + step)
        b = _operand((K, N), dtype, "transposed", 20 + step)
        bias = _operand((1, N), dtype, "contiguous", 30 + step)[0]
        product = _wide(a) @ _wide(b)
        with gems_core.use_gems(include=OPS):
            _check(torch.mm(a, b), product, dtype)
            _check(torch.addmm(bias, a, b, beta=0.5, alpha=2.0), 0.5 * _wide(bias) + 2.0 * product, dtype)
            variants = [c for c in calls if c != "split-k reduce"]
            # mm and addmm each: full path on the first two calls, replayed afterwards
            assert variants == [expected_variant] * (2 * min(step + 1, 2)), (step, calls)
    # another beta is another signature: the full path again
    with gems_core.use_gems(include=OPS):
        torch.addmm(bias, a, b, beta=0.25, alpha=2.0)
    assert [c for c in calls if c != "split-k reduce"][-1] == expected_variant
    assert len([c for c in calls if c != "split-k reduce"]) == 5


@pytest.mark.usefixtures("split_like_the_interpreter")
def test_replay_keeps_the_split_k_workspace() -> None:
    from gems_core import plan_cache

    _modules()
    a, b = _operand((3, 300), torch.float32, "contiguous", 1), _operand((300, 17), torch.float32, "transposed", 2)
    with gems_core.use_gems(include=OPS), plan_cache.record() as calls:
        torch.mm(a, b)
    names = [c[0].name for c in calls]
    assert names == ["mm_decode", "mm_split_k_reduce"]
    out = torch.empty(3, 17, device=DEVICE)
    replay = plan_cache.Replay.build(calls, (a, b, calls[0][2][2]))
    assert replay is not None and len(replay.scratch) == 1  # the fp32 partials
    replay(a, b, out)
    _check(out, _wide(a) @ _wide(b), torch.float32)


def test_a_recording_that_benchmarked_configs_is_not_replayed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A signature's second call may be the one that tunes (its first took another path):
    the recording then holds the benchmark's launches as well, and is not kept as a replay
    (a replay of it would run every benchmark launch on each call)."""
    from gems_core import plan_cache, tuning

    mm, _ = _modules()
    plan_cache.clear_all()
    calls = _spy_variants(monkeypatch)
    general = mm.launch_general
    made: list[int] = []

    def benchmarking(*args: Any, **kwargs: Any) -> Any:
        made.append(1)
        if len(made) == 2:  # the second call: as if its configs were benchmarked now
            monkeypatch.setattr(tuning, "benchmarks_run", tuning.benchmarks_run + 1)
            general(*args, **kwargs)  # a benchmark's launch, recorded with the call's
        return general(*args, **kwargs)

    monkeypatch.setattr(mm, "launch_general", benchmarking)
    a = _operand((80, 64), torch.float32, "contiguous", 1)
    b = _operand((64, 17), torch.float32, "contiguous", 2)
    expected = _wide(a) @ _wide(b)
    with gems_core.use_gems(include=OPS):
        results = [torch.mm(a, b) for _ in range(4)]
    for got in results:
        _check(got, expected, torch.float32)
    # the second call's recording (two launches) was dropped, the third recorded afresh, the
    # fourth replayed the third's one launch
    assert len(made) == 3 and [c for c in calls if c != "split-k reduce"] == ["general"] * 4
