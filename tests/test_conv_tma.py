"""Convolution over tensor descriptors (gems_core/ops/conv_tma.py): which calls take it, its
results against float64 ATen in Triton's interpreter (which executes tensor descriptors on CPU
tensors; the chip check is lifted there, as the cpu backend is no Hopper), forward and data
gradient, and its ahead-of-time compile for sm_90 in a child process.

Only fp16 runs in the interpreter: its bf16 ``tl.dot`` multiplies storage bits."""

from __future__ import annotations

import dataclasses
import textwrap
from typing import Any

import compile_only
import pytest
import torch
import torch.nn.functional as F

from gems_core import runtime

runtime.current()  # select the backend before kernels are defined

import gems_core  # noqa: E402
from gems_core import tuning  # noqa: E402
from gems_core.contract import KernelConfig  # noqa: E402
from gems_core.registry import load_ops  # noqa: E402

DEVICE = gems_core.device
OPS = ["convolution", "convolution.out", "convolution_backward"]
_CONV_PACKETS = {"convolution", "convolution_backward"}
CL = torch.channels_last
#: small boxes: several position boxes, channel tiles and channel slices a call, the last of
#: each cut by the edge
SMALL = KernelConfig({"TILE_H": 4, "TILE_W": 4, "BLOCK_N": 16, "BLOCK_K": 16}, num_warps=4, num_stages=2)
SMALL_WEIGHT = KernelConfig({"TILE_H": 4, "TILE_W": 4, "BLOCK_M": 16, "BLOCK_N": 16}, num_warps=4, num_stages=2)


def _modules() -> tuple[Any, Any]:
    load_ops()
    from gems_core.ops import conv, conv_tma

    return conv, conv_tma


@pytest.fixture()
def hopper(monkeypatch: pytest.MonkeyPatch) -> list[tuple[tuple[int, ...], int]]:
    """The chip check says yes; returns (the weight's shape, its dim over the input channels;
    -1 for the weight gradient) of each TMA launch reached."""
    _, conv_tma = _modules()
    from gems_core.ops import gemm_tma

    monkeypatch.setattr(gemm_tma, "supported", lambda device: True)
    monkeypatch.delenv("GEMS_CONV_TMA", raising=False)
    # a backend that leaves convolution to its vendor library (NVIDIA: cuDNN) has that gate
    # lifted here: these tests are of the kernel
    rt = runtime.current()
    gates = {op: dtypes for op, dtypes in rt.policy.gates.items() if op.split(".", 1)[0] not in _CONV_PACKETS}
    keeps = {op: forms for op, forms in rt.policy.gate_keeps.items() if op.split(".", 1)[0] not in _CONV_PACKETS}
    monkeypatch.setattr(rt, "policy", dataclasses.replace(rt.policy, gates=gates, gate_keeps=keeps))
    launches: list[tuple[tuple[int, ...], int]] = []
    original, original_weight_grad = conv_tma.launch, conv_tma.launch_weight_grad

    def launch(a: torch.Tensor, w: torch.Tensor, bias: Any, y: torch.Tensor, stride: Any, padding: Any,
               dilation: Any, weight_kc_dim: int) -> None:
        launches.append((tuple(w.shape), weight_kc_dim))
        original(a, w, bias, y, stride, padding, dilation, weight_kc_dim)

    def launch_weight_grad(grad: torch.Tensor, x: torch.Tensor, dw: torch.Tensor, *args: Any) -> None:
        launches.append((tuple(dw.shape), -1))
        original_weight_grad(grad, x, dw, *args)

    monkeypatch.setattr(conv_tma, "launch", launch)
    monkeypatch.setattr(conv_tma, "launch_weight_grad", launch_weight_grad)
    return launches


def _rand(*shape: int, seed: int, layout: torch.memory_format = CL, dtype: torch.dtype = torch.float16) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    t = (torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1).to(dtype).to(DEVICE)
    return t.contiguous(memory_format=layout)


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    torch.testing.assert_close(got.double().cpu(), want.cpu(), atol=1e-2, rtol=4e-3)


#: (label, input (N, C, H, W), weight (C_out, C, R, S), keywords, the data gradient's launches:
#: one per phase of the stride that some tap reaches): channels not a multiple of the slice (24
#: of 16), out channels not one of the tile (40 of 16), heights and widths that cut the 4 x 4
#: boxes; strides of 2 with taps in both phases, in one (an even dilation), a 1x1
CASES = [
    ("3x3 padded", (2, 24, 7, 9), (40, 24, 3, 3), {"padding": 1}, 1),
    ("dilated", (1, 16, 9, 8), (16, 16, 3, 3), {"padding": 2, "dilation": 2}, 1),
    ("5x5 unpadded", (1, 32, 9, 10), (24, 32, 5, 5), {}, 1),
    ("3x1 uneven padding", (2, 16, 6, 5), (16, 16, 3, 1), {"padding": (1, 0)}, 1),
    ("3x3 stride 2", (2, 16, 9, 10), (24, 16, 3, 3), {"stride": 2, "padding": 1}, 4),
    ("stride (2, 1) dilation 2", (1, 16, 11, 8), (16, 16, 3, 3), {"stride": (2, 1), "padding": 2, "dilation": 2}, 1),
    ("5x5 stride 2 dilation 3", (1, 16, 16, 15), (16, 16, 5, 5), {"stride": 2, "padding": 3, "dilation": 3}, 4),
    ("1x1 stride 2", (2, 32, 8, 7), (16, 32, 1, 1), {"stride": 2}, 1),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("weight_layout", ["channels-last", "contiguous"])
def test_forward_and_data_gradient_match_float64(hopper: list[tuple[tuple[int, ...], int]], case: tuple[Any, ...],
                                                 weight_layout: str) -> None:
    """The forward (with a bias) and the input's gradient take the TMA kernel (the gradient:
    the weight with its channel dims swapped, repacked), the weight's gradient the TMA weight
    gradient kernel, and all agree with float64 ATen; an NCHW weight is repacked too."""
    _, x_shape, w_shape, keywords, phases = case
    x = _rand(*x_shape, seed=1).requires_grad_()
    w = _rand(*w_shape, seed=2, layout=CL if weight_layout == "channels-last" else torch.contiguous_format)
    w = (w * 0.25).requires_grad_()
    b = _rand(w_shape[0], seed=3, layout=torch.contiguous_format).requires_grad_()
    small = {"conv_tma": SMALL, "conv_tma_weight_grad": SMALL_WEIGHT}
    with tuning.forcing(lambda tunable: small.get(tunable.name, tunable.configs()[0])), \
            gems_core.use_gems(include=OPS):
        y = F.conv2d(x, w, b, **keywords)
        grad = _rand(*y.shape, seed=4)
        dx, dw, db = torch.autograd.grad(y, (x, w, b), grad)
    wide = [t.detach().cpu().double().requires_grad_() for t in (x, w, b)]
    want = F.conv2d(*wide, **keywords)
    _close(y, want.detach())
    assert y.is_contiguous(memory_format=CL)
    for got, expected in zip((dx, dw, db), torch.autograd.grad(want, wide, grad.cpu().double())):
        _close(got, expected)
    # the forward and the weight gradient by the weight, the data gradient by its transpose
    # (the taps of each phase of the stride)
    weight = w_shape[:2] + (1,) + w_shape[2:]
    assert (weight, 1) in hopper and (weight, -1) in hopper
    assert sorted(kind for _, kind in hopper) == [-1] + [0] * phases + [1]


def test_weight_gradient_split_over_position_boxes(hopper: list[tuple[tuple[int, ...], int]],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A chip of many compute units: the weight gradient's position boxes (18 of them) are
    split into slices whose fp32 partials are summed; the result is the unsplit one's."""
    conv, conv_tma = _modules()
    x, grad = _rand(2, 16, 9, 10, seed=12), _rand(2, 24, 9, 10, seed=13)
    want = torch.ops.aten.convolution_backward(grad.cpu().double(), x.cpu().double(), torch.empty(24, 16, 3, 3).double(),
                                               None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [False, True, False])[1]
    launches: list[tuple[int, ...]] = []
    original = conv_tma.gemm_tma.run_described

    def run_described(kernel: Any, *args: Any) -> None:
        launches.append(args[3])  # the grid: (channel tiles, taps, slices)
        original(kernel, *args)

    monkeypatch.setattr(conv_tma.gemm_tma, "run_described", run_described)
    monkeypatch.setattr(conv_tma.runtime, "compute_units", lambda *device: 10_000)
    dw = torch.empty(24, 16, 3, 3, dtype=torch.float16, device=DEVICE).contiguous(memory_format=CL)
    with tuning.forcing(lambda tunable: SMALL_WEIGHT):
        conv._weight_grad(conv._as_3d(grad), conv._as_3d(x), conv._as_3d(dw), conv._Geometry(
            (1, 1, 1), (0, 1, 1), (1, 1, 1), (1, 3, 3), 1))
    _close(dw, want)
    assert launches == [(2, 9, 4)]  # 2 x 1 channel tiles, 9 taps, 18 boxes in slices of 5


def test_out_argument_and_a_strided_slice_of_channels(hopper: list[tuple[tuple[int, ...], int]]) -> None:
    """convolution.out into a channels-last tensor, and an input that is a slice of a wider
    channels-last tensor's channels (unit channel stride, other strides in 16-byte
    multiples): read in place."""
    wide = _rand(2, 48, 6, 7, seed=5)
    x = wide[:, 8:32]
    assert not x.is_contiguous(memory_format=CL)
    w = _rand(16, 24, 3, 3, seed=6) * 0.25
    out = torch.empty(2, 16, 6, 7, dtype=torch.float16, device=DEVICE).contiguous(memory_format=CL)
    with tuning.forcing(lambda tunable: SMALL), gems_core.use_gems(include=OPS):
        torch.ops.aten.convolution.out(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, out=out)
    _close(out, F.conv2d(x.double().cpu(), w.double().cpu(), padding=1))
    assert len(hopper) == 1


def test_which_calls_take_it(hopper: list[tuple[tuple[int, ...], int]], monkeypatch: pytest.MonkeyPatch) -> None:
    conv, conv_tma = _modules()

    def takes(x: torch.Tensor, w: torch.Tensor, stride: int = 1, groups: int = 1, padding: int = 1) -> bool:
        y = torch.empty(x.shape[0], w.shape[0], 4, 4, dtype=x.dtype, device=DEVICE)
        y = y.contiguous(memory_format=CL)
        return conv_tma.applies(conv._as_3d(x), conv._as_3d(y), (1, stride, stride), (0, padding, padding),
                                (1, *w.shape[2:]), groups)

    x, w = _rand(1, 16, 8, 8, seed=7), _rand(16, 16, 3, 3, seed=8)
    assert takes(x, w)
    assert takes(x.to(torch.bfloat16), w.to(torch.bfloat16)) is (not runtime.current().interpreter)
    assert not takes(x.float(), w.float())  # no tensor-core path for IEEE float32
    assert takes(x, w, stride=2)
    assert not takes(x, w, stride=3)
    assert not takes(x[:, :, :, :1], w, stride=2)  # one column: its odd phase is empty
    assert not takes(x, w[:, :8], groups=2)
    assert not takes(x.contiguous(), w)  # NCHW input: no unit channel stride
    assert not takes(_rand(1, 12, 8, 8, seed=9), _rand(16, 12, 3, 3, seed=10))  # 24-byte rows
    assert not takes(_rand(1, 8, 8, 8, seed=9), _rand(16, 8, 3, 3, seed=10))  # narrower than a product step
    x3 = _rand(1, 16, 4, 8, 8, seed=11, layout=torch.channels_last_3d)
    assert not conv_tma.applies(x3, x3, (1, 1, 1), (1, 1, 1), (3, 3, 3), 1)  # 3-d
    monkeypatch.setenv("GEMS_CONV_TMA", "0")
    assert not takes(x, w)
    monkeypatch.setattr(conv_tma.gemm_tma, "supported", lambda device: False)
    monkeypatch.delenv("GEMS_CONV_TMA")
    assert not takes(x, w)


def test_tunable_configs_fit_hopper() -> None:
    _, conv_tma = _modules()
    admit = conv_tma._fits(227 * 1024)
    for tunable, config in [(t, c) for t in (conv_tma.CONV_TMA, conv_tma.CONV_TMA_WEIGHT) for c in t.configs()]:
        tunable.validate(config)
        assert admit(config), config.describe()
        rows = config.params["TILE_H"] * config.params["TILE_W"]
        assert rows & (rows - 1) == 0  # the box is reshaped to a power-of-two operand


_AOT_SCRIPT = textwrap.dedent("""
    import json, torch
    from gems_core import aot, runtime, tuning
    from gems_core.registry import load_ops
    load_ops()
    from gems_core.ops import conv, conv_tma

    cl = torch.channels_last
    a = conv._as_3d(torch.empty(8, 64, 28, 28, dtype=torch.bfloat16).contiguous(memory_format=cl))
    w = conv._as_3d(torch.empty(128, 64, 3, 3, dtype=torch.bfloat16).contiguous(memory_format=cl))
    y = conv._as_3d(torch.empty(8, 128, 28, 28, dtype=torch.bfloat16).contiguous(memory_format=cl))
    bias = torch.empty(128, dtype=torch.bfloat16)
    assert conv_tma.applies(a, y, (1, 1, 1), (0, 1, 1), (1, 3, 3), 1)
    done = []
    with aot.observe(done.append), tuning.forcing(lambda t: t.configs()[0]):
        conv_tma.launch(a, w, bias, y, (1, 1, 1), (0, 1, 1), (1, 1, 1), 1)
        conv_tma.launch_weight_grad(y, a, w, (1, 1, 1), (0, 1, 1), (1, 1, 1))
        half = y[:, :, :, :14, :14]  # a stride of 2: the input's four phases
        conv_tma.launch(a, w, None, half, (1, 2, 2), (0, 1, 1), (1, 1, 1), 1)
        conv_tma.launch_weight_grad(half, a, w, (1, 2, 2), (0, 1, 1), (1, 1, 1))
    limit = runtime.current().limits.shared_memory_per_block
    print(json.dumps([
        {"name": r.name, "error": r.error,
         "ptx": {p: p in r.compiled.asm["ptx"] for p in ("cp.async.bulk.tensor", "wgmma.mma_async")}
         if r.compiled else {}, "usage": aot.resource_usage(r), "limit": limit}
        for r in done
    ]))
""")


def test_compiles_ahead_of_time_for_sm90() -> None:
    """Both kernels compile for sm_90 with bulk tensor copies and wgmma products, within the
    chip's shared memory and without spills (their first configs; unit stride, the forward
    with a bias, and a stride of 2)."""
    outcome, _ = compile_only.run(_AOT_SCRIPT)
    compiles = [r for r in outcome if r["name"].startswith("conv_tma")]
    # the weight gradient of the strided map: a launch per phase of the stride
    assert sorted(r["name"] for r in compiles) == ["conv_tma"] * 2 + ["conv_tma_weight_grad"] * 5
    for r in compiles:
        assert r["error"] is None, r["error"]
        assert r["ptx"] == {"cp.async.bulk.tensor": True, "wgmma.mma_async": True}
        assert r["usage"]["shared"] <= r["limit"] and not r["usage"].get("spills")


@pytest.mark.parametrize("stride", [1, 2])
def test_every_forward_config_matches_float64(stride: int, hopper: list[tuple[tuple[int, ...], int]]) -> None:
    """Each of the forward's tuned configs (the choice a chip's benchmark makes) on channels
    wide enough that none is cut down to another (64 in, 128 out), at unit stride and at a
    stride of 2: agrees with float64."""
    conv, conv_tma = _modules()
    x = _rand(1, 64, 18, 17, seed=20)
    w = _rand(128, 64, 3, 3, seed=21) * 0.1
    want = F.conv2d(x.cpu().double(), w.cpu().double(), stride=stride, padding=1)
    for config in conv_tma.CONV_TMA.configs():
        y = torch.empty(want.shape, dtype=torch.float16, device=DEVICE).contiguous(memory_format=CL)
        with tuning.forcing(lambda tunable, config=config: config if tunable.name == "conv_tma" else tunable.configs()[0]):
            conv_tma.launch(conv._as_3d(x), conv._as_3d(w), None, conv._as_3d(y), (1, stride, stride), (0, 1, 1),
                            (1, 1, 1), 1)
        try:
            _close(y, want)
        except AssertionError as exc:
            raise AssertionError(f"config {config.describe()}: {exc}") from None


@pytest.mark.parametrize("stride", [1, 2])
def test_every_weight_gradient_config_matches_float64(stride: int) -> None:
    """Each of the weight gradient's configs, as above."""
    conv, conv_tma = _modules()
    x = _rand(1, 64, 18, 17, seed=22)
    want_shape = F.conv2d(x.cpu().double(), torch.zeros(128, 64, 3, 3, dtype=torch.float64), stride=stride,
                          padding=1).shape
    grad = _rand(*want_shape, seed=23)
    want = torch.ops.aten.convolution_backward(
        grad.cpu().double(), x.cpu().double(), torch.empty(128, 64, 3, 3, dtype=torch.float64), None, [stride] * 2,
        [1, 1], [1, 1], False, [0, 0], 1, [False, True, False])[1]
    for config in conv_tma.CONV_TMA_WEIGHT.configs():
        dw = torch.empty(128, 64, 3, 3, dtype=torch.float16, device=DEVICE).contiguous(memory_format=CL)
        with tuning.forcing(lambda tunable, config=config: config if tunable.name == "conv_tma_weight_grad"
                            else tunable.configs()[0]):
            conv_tma.launch_weight_grad(conv._as_3d(grad), conv._as_3d(x), conv._as_3d(dw), (1, stride, stride),
                                        (0, 1, 1), (1, 1, 1))
        try:
            torch.testing.assert_close(dw.double().cpu(), want, atol=5e-2, rtol=4e-3)
        except AssertionError as exc:
            raise AssertionError(f"config {config.describe()}: {exc}") from None
