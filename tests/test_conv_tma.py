"""Convolution over tensor descriptors (gems_core/ops/conv_tma.py): which calls take it, its
results against float64 ATen in Triton's interpreter (which executes tensor descriptors on CPU
tensors; the chip check is lifted there, as the cpu backend is no Hopper), forward and data
gradient, and its ahead-of-time compile for sm_90 in a child process.

Only fp16 runs in the interpreter: its bf16 ``tl.dot`` multiplies storage bits."""

from __future__ import annotations

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
CL = torch.channels_last
#: small boxes: several position boxes, channel tiles and channel slices a call, the last of
#: each cut by the edge
SMALL = KernelConfig({"TILE_H": 4, "TILE_W": 4, "BLOCK_N": 16, "BLOCK_K": 16}, num_warps=4, num_stages=2)


def _modules() -> tuple[Any, Any]:
    load_ops()
    from gems_core.ops import conv, conv_tma

    return conv, conv_tma


@pytest.fixture()
def hopper(monkeypatch: pytest.MonkeyPatch) -> list[tuple[tuple[int, ...], int]]:
    """The chip check says yes; returns (the weight's shape, its dim over the input channels)
    of each TMA launch reached."""
    _, conv_tma = _modules()
    from gems_core.ops import gemm_tma

    monkeypatch.setattr(gemm_tma, "supported", lambda device: True)
    monkeypatch.delenv("GEMS_CONV_TMA", raising=False)
    launches: list[tuple[tuple[int, ...], int]] = []
    original = conv_tma.launch

    def launch(a: torch.Tensor, w: torch.Tensor, bias: Any, y: torch.Tensor, padding: Any, dilation: Any,
               weight_kc_dim: int) -> None:
        launches.append((tuple(w.shape), weight_kc_dim))
        original(a, w, bias, y, padding, dilation, weight_kc_dim)

    monkeypatch.setattr(conv_tma, "launch", launch)
    return launches


def _rand(*shape: int, seed: int, layout: torch.memory_format = CL, dtype: torch.dtype = torch.float16) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    t = (torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1).to(dtype).to(DEVICE)
    return t.contiguous(memory_format=layout)


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    torch.testing.assert_close(got.double().cpu(), want.cpu(), atol=1e-2, rtol=4e-3)


#: (label, input (N, C, H, W), weight (C_out, C, R, S), keywords): channels not a multiple of
#: the slice (24 of 16), out channels not one of the tile (40 of 16), heights and widths that
#: cut the 4 x 4 boxes
CASES = [
    ("3x3 padded", (2, 24, 7, 9), (40, 24, 3, 3), {"padding": 1}),
    ("dilated", (1, 16, 9, 8), (16, 16, 3, 3), {"padding": 2, "dilation": 2}),
    ("5x5 unpadded", (1, 32, 9, 10), (24, 32, 5, 5), {}),
    ("3x1 uneven padding", (2, 16, 6, 5), (16, 16, 3, 1), {"padding": (1, 0)}),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("weight_layout", ["channels-last", "contiguous"])
def test_forward_and_data_gradient_match_float64(hopper: list[tuple[tuple[int, ...], int]], case: tuple[Any, ...],
                                                 weight_layout: str) -> None:
    """The forward (with a bias) and the input's gradient take the TMA kernel (the gradient:
    the weight with its channel dims swapped, repacked), and agree with float64 ATen; an NCHW
    weight is repacked too. The weight's gradient keeps conv.py's kernel."""
    _, x_shape, w_shape, keywords = case
    x = _rand(*x_shape, seed=1).requires_grad_()
    w = _rand(*w_shape, seed=2, layout=CL if weight_layout == "channels-last" else torch.contiguous_format)
    w = (w * 0.25).requires_grad_()
    b = _rand(w_shape[0], seed=3, layout=torch.contiguous_format).requires_grad_()
    with tuning.forcing(lambda tunable: SMALL if tunable.name == "conv_tma" else tunable.configs()[0]), \
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
    # the forward by the weight, the data gradient by its transpose
    assert hopper == [(w_shape[:2] + (1,) + w_shape[2:], 1), (w_shape[:2] + (1,) + w_shape[2:], 0)]


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
        y = torch.empty(x.shape[0], w.shape[0], *x.shape[2:], dtype=x.dtype, device=DEVICE)
        y = y.contiguous(memory_format=CL)
        return conv_tma.applies(conv._as_3d(x), conv._as_3d(y), (1, stride, stride), (0, padding, padding),
                                (1, *w.shape[2:]), groups)

    x, w = _rand(1, 16, 8, 8, seed=7), _rand(16, 16, 3, 3, seed=8)
    assert takes(x, w)
    assert takes(x.to(torch.bfloat16), w.to(torch.bfloat16)) is (not runtime.current().interpreter)
    assert not takes(x.float(), w.float())  # no tensor-core path for IEEE float32
    assert not takes(x, w, stride=2)
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
    for config in conv_tma.CONV_TMA.configs():
        conv_tma.CONV_TMA.validate(config)
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
    first = conv_tma.CONV_TMA.configs()[0]
    done = []
    with aot.observe(done.append), tuning.forcing(lambda t: first):
        conv_tma.launch(a, w, bias, y, (0, 1, 1), (1, 1, 1), 1)
    limit = runtime.current().limits.shared_memory_per_block
    print(json.dumps([
        {"name": r.name, "error": r.error,
         "ptx": {p: p in r.compiled.asm["ptx"] for p in ("cp.async.bulk.tensor", "wgmma.mma_async")}
         if r.compiled else {}, "usage": aot.resource_usage(r), "limit": limit}
        for r in done
    ]))
""")


def test_compiles_ahead_of_time_for_sm90() -> None:
    """The kernel compiles for sm_90 with bulk tensor copies and wgmma products, within the
    chip's shared memory and without spills (the first config, a bias)."""
    outcome, _ = compile_only.run(_AOT_SCRIPT)
    compiles = [r for r in outcome if r["name"] == "conv_tma"]
    assert len(compiles) == 1
    (r,) = compiles
    assert r["error"] is None, r["error"]
    assert r["ptx"] == {"cp.async.bulk.tensor": True, "wgmma.mma_async": True}
    assert r["usage"]["shared"] <= r["limit"] and not r["usage"].get("spills")
