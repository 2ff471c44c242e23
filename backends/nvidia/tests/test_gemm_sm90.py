"""The NVIDIA backend's Hopper GEMM (``gems_backend_nvidia.gemm_sm90``, the ``mm`` variant):
its ahead-of-time compile for sm_90 (upstream Triton compiles for it on any machine), which
products it takes and which config, and, on a Hopper GPU, its results through gems' mm,
addmm, linear and matmul against float64 ATen: edges in M, N and K that cut through tiles,
several tiles per persistent program, B row- and column-major, fp16 and bf16, alpha, out=,
repeat calls through the kept launcher and the native dispatch layer, and the products it
must leave to the core."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

import gems_core

from kept_launches import LaunchSpy, on_hopper
from sm90_compile import compile_records

gemm_sm90 = pytest.importorskip("gems_backend_nvidia.gemm_sm90")

pytestmark = pytest.mark.skipif(not gemm_sm90.available(), reason="this Triton has no Gluon Hopper module")

SM90_SHARED_MEMORY = 227 * 1024


@pytest.fixture(scope="module")
def compiled() -> dict[str, Any]:
    first = gemm_sm90.CONFIGS[0].describe() + ", B column-major"
    return compile_records("gems_backend_nvidia.gemm_sm90", "mm", "mm", first)


@pytest.mark.parametrize("bias", ["", ", row bias", ", column bias"], ids=["no bias", "row bias", "column bias"])
@pytest.mark.parametrize("b_t", [True, False], ids=["B column-major", "B row-major"])
@pytest.mark.parametrize("config", gemm_sm90.CONFIGS, ids=lambda c: c.describe())
def test_compiles_for_sm90_within_the_chip(compiled: dict[str, Any], config: Any, b_t: bool, bias: str) -> None:
    name = f"{config.describe()}, B {'column' if b_t else 'row'}-major{bias}"
    if bias and config != gemm_sm90.CONFIGS[0]:
        assert name not in compiled  # the epilogue's loads compile for the first config only
        return
    record = compiled[name]
    assert record["status"] == "ok", record["message"]
    assert record["shared"] <= SM90_SHARED_MEMORY
    assert record["shared"] >= config.shared_memory()  # the ring and the staged result tile
    assert record["registers"] <= gemm_sm90.MAX_REGISTERS and record["spills"] == 0


def test_compiled_kernel_is_the_warp_specialized_pipeline(compiled: dict[str, Any]) -> None:
    ptx = compiled["ptx"]
    assert ptx["wgmma"] and ptx["bulk_copies"] and ptx["setmaxnreg"]
    assert ptx["overlapped_waits"] >= 1  # a product stays in flight while the next is issued
    assert ptx["bulk_stores"] >= 1  # the result leaves through the tensor-memory accelerator
    assert compiled["none_for"] == [0, 0]  # nothing listed for sm_80 or AMD


def test_launches_are_described_for_the_native_layer(compiled: dict[str, Any]) -> None:
    """The compiled kernel's launch as the native layer repeats it: the three descriptors
    expand to tensor map, sizes and strides, in Triton's encoding (dimensions innermost
    first, byte strides, the box of one copy); then M, N, K, alpha and the
    launcher's scratch pointers."""
    from types import SimpleNamespace

    from gems_backend_nvidia.launcher import reported
    from gems_core.launches import LaunchedKernel, TensorMap

    launch = compiled["launch"]
    scratch = [size for size in launch["scratch"] if size is not None]
    assert not any(scratch), "scratch memory: the native layer would not repeat the launch"
    names = launch["arg_names"]
    signature = {names[int(k)] if k.isdigit() else k: v for k, v in launch["signature"].items()}
    metadata = SimpleNamespace(num_ctas=launch["num_ctas"], tensordesc_meta=launch["tensordesc_meta"],
                               **dict(zip(("global_scratch_size", "profile_scratch_size"), scratch)))
    kernel = SimpleNamespace(metadata=metadata, packed_metadata=(4, 1, 200_000), function=1234,
                             src=SimpleNamespace(fn=SimpleNamespace(arg_names=names), signature=signature))
    how = reported(kernel)
    assert how is not None
    assert how.kernel == LaunchedKernel(1234, 128, 200_000, "TiillTiillTiilliiifOif" + "O" * len(scratch))
    config = gemm_sm90.CONFIGS[0]  # the compile of "compiled"'s PTX: B column-major
    m, k, n = 1000, 520, 1496
    a = torch.empty(m, k, dtype=torch.bfloat16)
    w = torch.empty(n, k, dtype=torch.bfloat16)
    out = torch.empty(m, n, dtype=torch.bfloat16)
    (a_block, b_block, c_block), layout = gemm_sm90._blocks(config, True), gemm_sm90._layout
    args = (gemm_sm90._descriptor(a, [m, k], [k, 1], list(a_block), layout(torch.bfloat16, *a_block)),
            gemm_sm90._descriptor(w, [n, k], [k, 1], list(b_block), layout(torch.bfloat16, *b_block)),
            gemm_sm90._descriptor(out, [m, n], [n, 1], list(c_block), layout(torch.bfloat16, *c_block)),
            m, n, k, 0.5, out, 0, 0.0, config.stages, True, config.group_m, 0, 232, 40)
    params = how.parameters(args)
    assert len(params) == 22
    bf16 = 9  # CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
    operands = ((0, a, m, k, a_block), (5, w, n, k, b_block), (10, out, m, n, c_block))
    for (at, t, rows, cols, block), meta in zip(operands, launch["tensordesc_meta"]):
        tensor_map = params[at]
        assert isinstance(tensor_map, TensorMap)
        assert tensor_map.address == t.data_ptr()
        assert (tensor_map.data_type, tensor_map.dims, tensor_map.strides) == (bf16, (cols, rows), (2 * cols,))
        # the box Triton encodes: the block, or the part of it one copy moves
        assert tensor_map.box == tuple(reversed(meta["block_size"])) and tensor_map.fill == 0
        assert block[1] % tensor_map.box[0] == 0 and block[0] % tensor_map.box[1] == 0
        assert tensor_map.swizzle == 3  # 128-byte swizzle: rows of 64 bf16
        assert params[at + 1:at + 5] == (rows, cols, cols, 1)
    assert params[15:] == (m, n, k, 0.5, out.data_ptr(), 0, 0.0)  # the bias slot: unread without one


def test_every_config_fits_the_chip() -> None:
    for config in gemm_sm90.CONFIGS:
        assert config.shared_memory() <= SM90_SHARED_MEMORY


@pytest.mark.parametrize(
    ("m", "n", "expected"),
    [
        (8192, 8192, 256),  # 16 waves of wide tiles or 32 of narrow ones: a tie, to the wide tile
        (1024, 6144, 128),  # 192 wide tiles take two waves of 132, 384 narrow ones three (less work)
        (1024, 1024, 128),  # one wave either way: the narrow tile's program has half the work
    ],
)
def test_choose_quantizes_tiles_to_waves(m: int, n: int, expected: int) -> None:
    assert gemm_sm90.choose(m, n, 132).block_n == expected


def _declines(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, bias: Any = None, alpha: Any = 1) -> bool:
    return gemm_sm90.mm(a, b, out, bias, alpha, 0 if bias is None else 1) is False


def test_declines_what_it_does_not_serve_on_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gemm_sm90, "MIN_WORK", 0)
    monkeypatch.setattr(gemm_sm90, "_plans", {})
    a = torch.randn(256, 128, dtype=torch.bfloat16)
    b = torch.randn(128, 256, dtype=torch.bfloat16)
    assert _declines(a, b, torch.empty(256, 256, dtype=torch.bfloat16))  # CPU tensors


def test_row_major_needs_contiguous_aligned_rows() -> None:
    assert gemm_sm90._row_major(torch.empty(4, 64, dtype=torch.bfloat16))
    assert gemm_sm90._row_major(torch.empty(64, 8, dtype=torch.bfloat16).t().t())
    assert not gemm_sm90._row_major(torch.empty(64, 4, dtype=torch.bfloat16).t())  # column-major
    assert not gemm_sm90._row_major(torch.empty(4, 68, dtype=torch.bfloat16)[:, :60])  # 136-byte rows
    assert not gemm_sm90._row_major(torch.empty(1000, dtype=torch.bfloat16)[1:257].view(4, 64))  # 2-byte base
    assert not gemm_sm90._row_major(torch.empty(1, 64, dtype=torch.bfloat16).expand(4, 64))  # rows overlap


# ----- on the chip ---------------------------------------------------------------------------


def _spy(monkeypatch: pytest.MonkeyPatch) -> LaunchSpy:
    """The kernel's launches, with the work bound lifted for these small shapes."""
    monkeypatch.setattr(gemm_sm90, "MIN_WORK", 0)
    monkeypatch.setattr(gemm_sm90, "_plans", {})  # plans made under the default bound
    from gems_core import plan_cache

    plan_cache.clear_all()
    return LaunchSpy(monkeypatch, gemm_sm90)


def _operands(m: int, k: int, n: int, dtype: torch.dtype, b_t: bool, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed + m + 3 * n + 7 * k)
    a = torch.randn(m, k, generator=g).to("cuda", dtype)
    if b_t:  # a linear layer's weight (N, K), used as its transpose
        b = torch.randn(n, k, generator=g).to("cuda", dtype).t()
    else:
        b = torch.randn(k, n, generator=g).to("cuda", dtype)
    return a, b


def _bound(aten: float, dtype: torch.dtype, k: int) -> float:
    """gems' largest error allowed against float64: twice ATen's own, plus the rounding of a
    result of size ~sqrt(K) to 16 bits (both round once; they may round to neighbours)."""
    ulp = 2.0 ** -8 if dtype == torch.bfloat16 else 2.0 ** -11
    return 2 * aten + 4 * ulp * k ** 0.5


def _check(mine: torch.Tensor, low: torch.Tensor, ref: torch.Tensor, k: int) -> None:
    err = (mine.double() - ref).abs().max().item()
    aten = (low.double() - ref).abs().max().item()
    assert err <= _bound(aten, mine.dtype, k), (err, aten)


#: (M, K, N): edges that cut through tiles in every dim (K in 16-byte multiples, as a
#: descriptor needs), a one-tile product, and more tiles than SMs (programs walk several)
SHAPES = [(200, 264, 392), (128, 64, 256), (1000, 520, 1496), (2304, 256, 2560)]


@on_hopper
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("b_t", [True, False], ids=["B column-major", "B row-major"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_mm_matches_float64_aten_through_gems(shape: tuple[int, int, int], b_t: bool, dtype: torch.dtype,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    m, k, n = shape
    spy = _spy(monkeypatch)
    a, b = _operands(m, k, n, dtype, b_t)
    with gems_core.use_gems():
        mine = torch.mm(a, b)
    assert len(spy.grids) == 1
    config = gemm_sm90.choose(m, n, gemm_sm90._units(0))
    tiles = -(-m // config.block_m) * -(-n // config.block_n)
    assert spy.grids[0][0] == min(tiles, gemm_sm90._units(0))
    _check(mine, a @ b, a.double() @ b.double(), k)


@on_hopper
@pytest.mark.parametrize("config", gemm_sm90.CONFIGS, ids=lambda c: c.describe())
def test_every_config_matches_float64_aten(config: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _spy(monkeypatch)
    m, k, n = 1000, 520, 1496
    for b_t in (True, False):
        a, b = _operands(m, k, n, torch.bfloat16, b_t, seed=1)
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        gemm_sm90.launch(a, b, out, 1.0, config, b_t, 0)
        _check(out, a @ b, a.double() @ b.double(), k)


@on_hopper
def test_linear_addmm_alpha_and_out(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = _spy(monkeypatch)
    m, k, n = 300, 256, 520
    a, w = _operands(m, k, n, torch.bfloat16, True, seed=2)
    ref = a.double() @ w.double()
    with gems_core.use_gems():
        linear = F.linear(a, w.t())
        scaled = torch.addmm(torch.randn(m, n, device="cuda", dtype=torch.bfloat16), a, w, beta=0, alpha=0.5)
        out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        torch.mm(a, w, out=out)
        batched = torch.matmul(a.view(3, 100, k), w)
    assert len(spy.grids) == 4
    _check(linear, a @ w, ref, k)
    _check(scaled, 0.5 * (a @ w), 0.5 * ref, k)
    _check(out, a @ w, ref, k)
    _check(batched.reshape(m, n), a @ w, ref, k)


@on_hopper
@pytest.mark.parametrize("check", [False, True], ids=["replayed", "check mode"])
def test_repeat_calls_take_the_kept_launcher_then_the_native_layer(check: bool,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A signature's first call compiles through Triton, its second goes to the kept launch
    (recorded by the native layer, tensor maps and all), later ones replay from C++ with
    each call's addresses. In check mode every call is recorded and its recipe run on
    copies of the operands and compared with the Python kernel's result."""
    from gems_core import native

    spy = _spy(monkeypatch)
    layer = native.load(quiet=True)
    if check:
        if layer is None:
            pytest.skip("the native layer is not built")
        layer.set_check(True)
    results = []
    try:
        with gems_core.use_gems():
            for seed in range(5):  # new operands each time: nothing of an earlier call is replayed
                a, b = _operands(640, 256, 768, torch.bfloat16, True, seed=seed)
                results.append((torch.mm(a, b), a, b))
            stats = {s["op"]: s for s in gems_core.dispatch.native_stats() if not s.get("gate")}
    finally:
        if check:
            layer.set_check(False)
    results = [(mine, a @ b, a.double() @ b.double()) for mine, a, b in results]
    assert len(spy.through_triton) == 1 and spy.launcher.kept() == 1
    mm = stats.get("mm")
    if mm is None:  # no native layer: every call through the kept launch
        assert len(spy.grids) == 5
    elif check:
        # every call without a recipe is recorded (the first, compiled through Triton's own
        # launcher, is refused); a recipe that differed from the Python result would raise
        assert mm["recorded"] == 1 and mm["hits"] >= 3 and len(spy.grids) + mm["hits"] == 5
    else:
        assert len(spy.grids) == 2 and mm["hits"] == 3 and mm["refused"] == 0
    for mine, low, ref in results:
        _check(mine, low, ref, 256)


@on_hopper
def test_products_it_leaves_to_the_core(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = _spy(monkeypatch)
    a, b = _operands(256, 128, 256, torch.bfloat16, False)
    padded = torch.zeros(256, 136, dtype=torch.bfloat16, device="cuda")[:, :128]
    padded.copy_(a)
    shifted = torch.empty(256 * 128 + 1, dtype=torch.bfloat16, device="cuda")[1:].view(256, 128)
    shifted.copy_(a)
    bias = torch.randn(256, 256, dtype=torch.bfloat16, device="cuda")
    ref = a.double() @ b.double()
    with gems_core.use_gems():
        results = [
            torch.mm(shifted, b),  # A's base not 16-byte aligned
            torch.mm(a.t().contiguous().t(), b),  # A column-major
            torch.addmm(bias, a, b),  # a full (M, N) input to add
            torch.mm(a[:64], b),  # decode rows
        ]
        served = torch.mm(padded, b)  # rows of 272 bytes, a 16-byte multiple: served
    assert len(spy.grids) == 1
    low = a @ b  # ATen's, outside gems
    _check(served, low, ref, 128)
    expected = [(low, ref), (low, ref), (bias + low, bias.double() + ref), (low[:64], ref[:64])]
    for mine, (aten, exact) in zip(results, expected):
        _check(mine, aten, exact, 128)


@on_hopper
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_bias_rows_and_columns_are_added_in_the_epilogue(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    """addmm's input broadcast as a row (a linear layer's bias; also a strided one) or a
    column, with beta and alpha, through gems' addmm, linear and addmm(out=): each served
    by one launch, against float64 ATen."""
    spy = _spy(monkeypatch)
    m, k, n = 1000, 520, 1496  # edges in every dim
    a, w = _operands(m, k, n, dtype, True, seed=3)
    g = torch.Generator().manual_seed(4)
    row = torch.randn(n, generator=g).to("cuda", dtype)
    strided = torch.randn(n, 3, generator=g).to("cuda", dtype)[:, 1]  # stride 3
    column = torch.randn(m, 1, generator=g).to("cuda", dtype)
    x3 = a.view(8, 125, k)
    ref = a.double() @ w.double()
    with gems_core.use_gems():
        results = [
            (torch.addmm(row, a, w), row, 1, 1),
            (torch.addmm(strided, a, w, beta=0.5, alpha=2), strided, 0.5, 2),
            (torch.addmm(column, a, w, beta=-1.5), column, -1.5, 1),
            (F.linear(x3, w.t(), row).reshape(m, n), row, 1, 1),
        ]
        out = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
        torch.addmm(row, a, w, out=out)
        results.append((out, row, 1, 1))
    assert len(spy.grids) == len(results)
    for mine, bias, beta, alpha in results:
        low = torch.addmm(bias, a, w, beta=beta, alpha=alpha)  # ATen's, outside gems
        _check(mine, low, beta * bias.double() + alpha * ref, k)


def test_declines_unserved_inputs_on_the_chip_too() -> None:
    """Inputs it declines before it looks at the device."""
    a = torch.randn(256, 128, dtype=torch.float32)
    assert _declines(a, a.t(), torch.empty(256, 256))  # fp32
    h = a.to(torch.bfloat16)
    out = torch.empty(256, 256, dtype=torch.bfloat16)
    assert _declines(h, h.t(), out, bias=torch.empty(256, 256, dtype=torch.bfloat16))  # a full (M, N) input
    assert _declines(h, h.t(), out, alpha=torch.tensor(2.0))  # a tensor alpha
    assert _declines(h[:, :0], h.t()[:0], out)  # K == 0


@on_hopper
def test_a_served_signature_is_offered_directly_and_alignment_is_checked_each_call(
        monkeypatch: pytest.MonkeyPatch) -> None:
    spy = _spy(monkeypatch)
    storage = torch.empty(640 * 256 + 8, dtype=torch.bfloat16, device="cuda")
    aligned, shifted = storage[:640 * 256].view(640, 256), storage[1:640 * 256 + 1].view(640, 256)
    b = torch.randn(768, 256, device="cuda", dtype=torch.bfloat16).t()
    results = []
    with gems_core.use_gems():
        for a in (aligned, shifted, aligned):  # one signature; the second's base is 2 bytes off
            a.normal_()
            results.append((torch.mm(a, b), a.clone()))
    assert len(spy.grids) == 2  # the first and the last: the shifted call ran on the core's kernel
    for mine, a in results:
        _check(mine, a @ b, a.double() @ b.double(), 256)


def test_descriptors_are_the_ones_gluon_would_make() -> None:
    """The kernel's descriptors skip Gluon's constructor checks (made already): they are
    equal to the ones the constructor makes, defaults included."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    t = torch.empty(128, 64, dtype=torch.bfloat16)
    layout = gemm_sm90._layout(torch.bfloat16, 64, 64)
    made = gemm_sm90._descriptor(t, [128, 64], [64, 1], [64, 64], layout)
    assert isinstance(made, TensorDescriptor)
    assert made == TensorDescriptor(t, [128, 64], [64, 1], [64, 64], layout)
