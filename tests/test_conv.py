"""convolution and convolution_backward: gems' kernels (counted, so a call handed to ATen
fails) against float64 ATen, and ATen's errors for what it rejects.

Shapes are tiny (the interpreter is slow) but reach each kernel path: the tap-by-tap and the
flat K walk, the gather and scatter maps, the direct depthwise kernel, the weight gradient
with and without its split over positions; layouts: contiguous, channels-last, sliced,
stride-0 batch.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from gems_conformance.routing import RouteWatch, implementations

from gems_core import runtime

runtime.current()  # select the backend before kernels are defined

import gems_core  # noqa: E402
from gems_core.registry import load_ops  # noqa: E402

DEVICE = gems_core.device
OPS = ["convolution", "convolution.out", "convolution_backward"]
#: (atol, rtol) per dtype for sums of a few hundred terms of entries in [-1, 1]
TOL = {torch.float32: (1e-4, 1e-4), torch.float64: (1e-10, 1e-10), torch.bfloat16: (6e-2, 2e-2),
       torch.float16: (1e-2, 4e-3)}
CL = torch.channels_last


def _conv_module() -> Any:
    load_ops()
    from gems_core.ops import conv

    return conv


@contextmanager
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, list[tuple[int, ...]]]]:
    """Inside: gems serves the convolution ops; yields each of conv.py's kernels' launch grids."""
    conv = _conv_module()
    grids: dict[str, list[tuple[int, ...]]] = {"gemm": [], "weight_grad": [], "depthwise": [], "mm": []}
    for name in grids:
        launcher = getattr(conv, f"_launch_{name}" if name != "mm" else "_mm_launch")

        def launch(grid: Any, *args: Any, _launcher: Any = launcher, _name: str = name, **kwargs: Any) -> Any:
            grids[_name].append(tuple(grid) if _name != "mm" else ())  # mm's first argument is an operand
            return _launcher(grid, *args, **kwargs)

        monkeypatch.setattr(conv, f"_launch_{name}" if name != "mm" else "_mm_launch", launch)
    with gems_core.use_gems(include=OPS):
        yield grids
    monkeypatch.undo()


def _rand(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1).to(dtype).to(DEVICE)


def _close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> None:
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(got.double().cpu(), want.double().cpu(), atol=atol, rtol=rtol)


def _functional(x: torch.Tensor, transposed: bool) -> Any:
    return getattr(F, f"conv_transpose{x.dim() - 2}d" if transposed else f"conv{x.dim() - 2}d")


#: (label, input, weight, with bias, transposed, keywords, the kernel that must serve the forward)
CASES = [
    ("2-d", (2, 4, 7, 6), (6, 4, 3, 3), True, False, {"padding": 1}, "gemm"),
    ("channels-last stride", (2, 8, 7, 6), (8, 8, 3, 3), True, False, {"stride": 2, "padding": (1, 0)}, "gemm"),
    ("dilated groups", (1, 8, 9, 8), (6, 4, 3, 2), False, False, {"dilation": (2, 1), "groups": 2}, "gemm"),
    ("3x3 16 channels", (1, 16, 5, 5), (16, 16, 3, 3), True, False, {"padding": 1}, "gemm"),
    ("stem (flat K)", (1, 3, 11, 11), (8, 3, 5, 5), False, False, {"stride": 2, "padding": 2}, "gemm"),
    ("1x1 two K steps", (2, 40, 3, 3), (12, 40, 1, 1), True, False, {"stride": (1, 2)}, "gemm"),
    ("1x1 as a matrix product", (2, 40, 3, 3), (12, 40, 1, 1), True, False, {}, "gemm or mm"),
    ("depthwise", (2, 6, 6, 5), (6, 1, 3, 3), True, False, {"padding": 1, "groups": 6}, "depthwise"),
    ("depthwise x2", (1, 3, 5, 5), (6, 1, 3, 3), False, False, {"stride": 2, "groups": 3}, "depthwise"),
    ("1-d", (2, 4, 9), (5, 4, 3), True, False, {"padding": 2, "dilation": 2}, "gemm"),
    # non-overlapping patches (stride = kernel; rows and columns past the last patch unread)
    ("patches", (2, 3, 9, 14), (5, 3, 4, 4), True, False, {"stride": 4}, "mm"),
    ("1-d patches", (2, 4, 10), (6, 4, 5), False, False, {"stride": 5}, "mm"),
    ("3-d patches", (1, 2, 4, 5, 6), (3, 2, 2, 2, 3), True, False, {"stride": (2, 2, 3)}, "mm"),
    ("3-d", (1, 3, 4, 5, 5), (4, 3, 2, 3, 3), True, False, {"padding": (0, 1, 1)}, "gemm"),
    ("transposed", (2, 4, 5, 5), (4, 3, 3, 3), True, True, {"stride": 2, "padding": 1, "output_padding": 1}, "gemm"),
    ("transposed groups", (1, 4, 4, 3), (4, 3, 2, 2), False, True, {"stride": (2, 1), "groups": 2}, "gemm"),
    ("transposed depthwise", (1, 4, 5, 5), (4, 1, 3, 3), True, True, {"stride": 2, "groups": 4}, "depthwise"),
    ("transposed 1-d", (2, 6, 7), (6, 2, 4), False, True, {"stride": 3, "output_padding": 2}, "gemm"),
    # phases no tap reaches: bias (or zero) only
    ("transposed 1x1 stride 2", (1, 4, 3, 3), (4, 5, 1, 1), True, True, {"stride": 2, "output_padding": 1}, "gemm"),
    ("transposed dilated", (1, 4, 4, 4), (4, 4, 3, 3), True, True, {"stride": 2, "dilation": 2, "padding": 1},
     "gemm"),
]
IDS = [c[0] for c in CASES]


def _some(*labels: str) -> Any:
    """The cases of these labels, as a parametrization."""
    chosen = [c for c in CASES if c[0] in labels]
    return pytest.mark.parametrize("case", chosen, ids=[c[0] for c in chosen])


def _operands(case: tuple, dtype: torch.dtype, layout: str) -> tuple[torch.Tensor, torch.Tensor, Any]:
    _, x_shape, w_shape, bias, transposed, kwargs, _ = case
    x = _rand(*x_shape, dtype=dtype, seed=1)
    if layout == "channels-last" and x.dim() in (4, 5):
        x = x.to(memory_format=CL if x.dim() == 4 else torch.channels_last_3d)
    elif layout == "sliced":
        x = _rand(*x_shape[:-1], 2 * x_shape[-1], dtype=dtype, seed=1)[..., 1::2]
    elif layout == "batch expanded":
        x = _rand(1, *x_shape[1:], dtype=dtype, seed=1).expand(x_shape)
    w = _rand(*w_shape, dtype=dtype, seed=2)
    if layout == "channels-last" and w.dim() in (4, 5):  # read as is; other layouts' weights are repacked
        w = w.to(memory_format=CL if w.dim() == 4 else torch.channels_last_3d)
    out_channels = w_shape[1] * kwargs.get("groups", 1) if transposed else w_shape[0]
    return x, w, _rand(out_channels, dtype=dtype, seed=3) if bias else None


@pytest.mark.parametrize("layout", ["contiguous", "channels-last", "sliced", "batch expanded"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_forward_matches_float64_aten(case: tuple, layout: str, monkeypatch: pytest.MonkeyPatch) -> None:
    x, w, b = _operands(case, torch.float32, layout)
    fn, kwargs = _functional(x, case[4]), case[5]
    with counted(monkeypatch) as grids:
        got = fn(x, w, b, **kwargs)
    assert any(grids[k] for k in case[6].split(" or ")), f"gems' {case[6]} kernel did not serve the call"
    want = fn(x.double(), w.double(), None if b is None else b.double(), **kwargs)
    _close(got, want, torch.float32)
    if layout == "contiguous":
        assert got.is_contiguous()
    elif layout == "channels-last" and x.dim() == 4:  # ATen's choice on every device
        assert got.is_contiguous(memory_format=CL)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
@_some("dilated groups", "3x3 16 channels", "stem (flat K)", "1x1 as a matrix product", "depthwise", "3-d",
       "transposed")
def test_forward_dtypes(case: tuple, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    x, w, b = _operands(case, dtype, "channels-last")
    fn, kwargs = _functional(x, case[4]), case[5]
    with counted(monkeypatch) as grids:
        got = fn(x, w, b, **kwargs)
    assert any(grids[k] for k in case[6].split(" or ")) and got.dtype == dtype
    _close(got, fn(x.double(), w.double(), None if b is None else b.double(), **kwargs), dtype)


def _grads(fn: Any, x: torch.Tensor, w: torch.Tensor, b: Any, kwargs: dict, grad: torch.Tensor) -> tuple:
    leaves = [t.detach().requires_grad_() for t in (x, w, b) if t is not None]
    y = fn(*leaves[:2], leaves[2] if b is not None else None, **kwargs)
    return torch.autograd.grad(y, leaves, grad.to(y.dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_backward_matches_float64_aten(case: tuple, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    x, w, b = _operands(case, dtype, "channels-last")
    fn, kwargs = _functional(x, case[4]), case[5]
    grad = _rand(*fn(x, w, b, **kwargs).shape, dtype=torch.float64, seed=4)
    with counted(monkeypatch) as grids:
        got = _grads(fn, x, w, b, kwargs, grad)
    # the forward, and the data gradient: one launch per phase of the stride
    assert len(grids["gemm"]) + len(grids["depthwise"]) + len(grids["mm"]) >= 2, "forward and data gradient"
    assert grids["weight_grad"], "the weight gradient ran on ATen"
    want = _grads(fn, x.double(), w.double(), None if b is None else b.double(), kwargs, grad)
    positions = x.shape[0] * math.prod(x.shape[2:])
    for g, e in zip(got, want):
        atol, rtol = TOL[dtype]
        torch.testing.assert_close(g.double().cpu(), e.cpu(), atol=atol * math.sqrt(positions), rtol=rtol)


@pytest.mark.parametrize("mask", [(True, False, False), (False, True, False), (False, False, True),
                                  (False, True, True)])
def test_backward_output_mask(mask: tuple[bool, bool, bool], monkeypatch: pytest.MonkeyPatch) -> None:
    """convolution_backward computes just the gradients ``output_mask`` asks for."""
    x, w, g = _rand(2, 4, 6, 6, seed=5), _rand(5, 4, 3, 3, seed=6), _rand(2, 5, 3, 3, seed=7)
    args = ([6], [2, 2], [1, 1], [1, 1], False, [0, 0], 1, list(mask))
    with counted(monkeypatch) as grids, _served("convolution_backward") as served:
        got = torch.ops.aten.convolution_backward(g, x, w, *args)
    want = torch.ops.aten.convolution_backward(g.double(), x.double(), w.double(), *args)
    assert served.hit and bool(grids["gemm"]) == mask[0] and bool(grids["weight_grad"]) == mask[1]
    for wanted, r, e in zip(mask, got, want):
        assert (r is not None) == wanted
        if wanted:
            _close(r, e, torch.float32)


@pytest.mark.parametrize("layout", ["contiguous", "channels-last"])
def test_weight_gradient_split_over_positions(layout: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Few weight tiles over many positions: the sum is split into slices, added in order
    (in the weight gradient's layout)."""
    x, w = _rand(2, 16, 16, 16, seed=8), _rand(8, 16, 1, 2, seed=9)
    if layout == "channels-last":
        x, w = x.to(memory_format=CL), w.to(memory_format=CL)
    grad = _rand(2, 8, 16, 15, dtype=torch.float64, seed=10)
    with counted(monkeypatch) as grids:
        got = _grads(F.conv2d, x, w, None, {}, grad)
    assert grids["weight_grad"][0][2] > 1, "one slice: the split was not exercised"
    assert got[1].is_contiguous(memory_format=CL if layout == "channels-last" else torch.contiguous_format)
    want = _grads(F.conv2d, x.double(), w.double(), None, {}, grad)
    for g, e in zip(got, want):
        _close(g, e, torch.float32)


@pytest.mark.parametrize("layout", ["channels-last", "one image"])
def test_unit_kernel_runs_on_mm(layout: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 1x1 convolution with unit stride over matrix views of its operands is a matrix
    product (forward and data gradient); its weight gradient keeps the split kernel."""
    batch = 1 if layout == "one image" else 3
    x, w, b = _rand(batch, 24, 5, 4, seed=11), _rand(20, 24, 1, 1, seed=12), _rand(20, seed=13)
    grad = _rand(batch, 20, 5, 4, dtype=torch.float64, seed=14)
    if layout == "channels-last":
        x, grad = x.to(memory_format=CL), grad.to(memory_format=CL)
    with counted(monkeypatch) as grids:
        got = (F.conv2d(x, w, b), *_grads(F.conv2d, x, w, b, {}, grad))
    assert len(grids["mm"]) == 3 and not grids["gemm"] and grids["weight_grad"]  # twice forward, once backward
    want = (F.conv2d(x.double(), w.double(), b.double()), *_grads(F.conv2d, x.double(), w.double(), b.double(), {},
                                                                  grad))
    for g, e in zip(got, want):
        _close(g, e, torch.float32)
    assert layout != "channels-last" or got[0].is_contiguous(memory_format=CL)


_ARGS = ([2, 1], [1, 0], [1, 1], False, [0, 0], 1)  # stride, padding, dilation, transposed, output padding, groups


@pytest.mark.parametrize("out_layout", ["channels-last", "sliced"])
def test_out_keeps_the_given_strides(out_layout: str, monkeypatch: pytest.MonkeyPatch) -> None:
    x, w = _rand(2, 4, 6, 5, seed=15), _rand(3, 4, 3, 3, seed=16)
    if out_layout == "channels-last":
        out = torch.empty(2, 3, 3, 3, device=DEVICE).to(memory_format=CL)
    else:
        out = torch.empty(2, 3, 3, 6, device=DEVICE)[..., ::2]
    strides = out.stride()
    with counted(monkeypatch) as grids:
        got = torch.ops.aten.convolution.out(x, w, None, *_ARGS, out=out)
    assert got is out and out.stride() == strides and grids["gemm"]
    _close(out, torch.ops.aten.convolution(x.double(), w.double(), None, *_ARGS), torch.float32)


def test_out_is_resized_with_atens_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    x, w = _rand(2, 4, 6, 5, seed=17), _rand(3, 4, 3, 3, seed=18)
    out = torch.empty(7, device=DEVICE)
    with counted(monkeypatch) as grids, pytest.warns(UserWarning, match="resized"):
        torch.ops.aten.convolution.out(x, w, None, *_ARGS, out=out)
    assert out.shape == (2, 3, 3, 3) and grids["gemm"]
    _close(out, torch.ops.aten.convolution(x.double(), w.double(), None, *_ARGS), torch.float32)


@_some("channels-last stride", "stem (flat K)", "depthwise", "transposed")
def test_int64_offsets(case: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernels' 64-bit offset path (taken where an offset passes int32), forced on small
    tensors: forward and backward."""
    monkeypatch.setattr(_conv_module(), "_needs_int64", lambda *tensors: True)
    x, w, b = _operands(case, torch.float32, "channels-last")
    fn, kwargs = _functional(x, case[4]), case[5]
    grad = _rand(*fn(x, w, b, **kwargs).shape, dtype=torch.float64, seed=4)
    with counted(monkeypatch) as grids:
        got = (fn(x, w, b, **kwargs), *_grads(fn, x, w, b, kwargs, grad))
    assert grids["weight_grad"] and (grids["gemm"] or grids["depthwise"])
    double = (x.double(), w.double(), None if b is None else b.double())
    want = (fn(*double, **kwargs), *_grads(fn, *double, kwargs, grad))
    for g, e in zip(got, want):
        _close(g, e, torch.float32)


def test_unit_kernel_respects_the_backends_mm_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    """A dtype the backend leaves mm to ATen in keeps the 1x1 map on the convolution kernel."""
    policy = runtime.current().policy
    monkeypatch.setattr(type(policy), "gate_for", lambda self, name: frozenset({"float32"}) if name == "mm" else None)
    x, w = _rand(1, 24, 5, 4, seed=19), _rand(20, 24, 1, 1, seed=20)
    with counted(monkeypatch) as grids:
        got = F.conv2d(x, w)
    assert grids["gemm"] and not grids["mm"]
    _close(got, F.conv2d(x.double(), w.double()), torch.float32)


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")  # ATen's, about its own copy
@pytest.mark.parametrize("kernel", [3, 4])
def test_same_padding(kernel: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``padding="same"`` (conv2d.padding) reaches convolution, an even kernel's asymmetric
    padding applied to the input first."""
    x, w = _rand(1, 4, 6, 5, seed=21), _rand(3, 4, kernel, kernel, seed=22)
    with counted(monkeypatch) as grids:
        got = F.conv2d(x, w, padding="same", dilation=(1, 2))
    assert grids["gemm"] and got.shape == (1, 3, 6, 5)
    _close(got, F.conv2d(x.double(), w.double(), padding="same", dilation=(1, 2)), torch.float32)


def _served(name: str) -> RouteWatch:
    """Watches for gems' implementation of ``name`` (for calls that launch no kernel)."""
    return RouteWatch(implementations([name])[name])


def test_empty_batch() -> None:
    x, w, b = _rand(0, 4, 5, 5), _rand(6, 4, 3, 3, seed=1), _rand(6, seed=2)
    with gems_core.use_gems(include=OPS):
        with _served("convolution") as forward:
            y = F.conv2d(x.requires_grad_(), w.requires_grad_(), b.requires_grad_())
        with _served("convolution_backward") as backward:
            dx, dw, db = torch.autograd.grad(y.sum(), (x, w, b))
    assert forward.hit and backward.hit
    assert y.shape == (0, 6, 3, 3) and dx.shape == x.shape
    assert torch.equal(dw, torch.zeros_like(dw)) and torch.equal(db, torch.zeros_like(db))


def _error(fn: Any) -> tuple[type, str]:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the type and message are what is compared
        return type(exc), str(exc)
    raise AssertionError("no error raised")


BAD = {
    "zero stride": lambda: F.conv2d(_rand(1, 4, 5, 5), _rand(3, 4, 3, 3), stride=0),
    "negative padding": lambda: F.conv2d(_rand(1, 4, 5, 5), _rand(3, 4, 3, 3), padding=-1),
    "zero dilation": lambda: F.conv2d(_rand(1, 4, 5, 5), _rand(3, 4, 3, 3), dilation=0),
    "channels": lambda: F.conv2d(_rand(1, 5, 5, 5), _rand(3, 4, 3, 3)),
    "groups": lambda: F.conv2d(_rand(1, 4, 5, 5), _rand(3, 2, 3, 3), groups=2),
    "kernel too large": lambda: F.conv2d(_rand(1, 4, 2, 2), _rand(3, 4, 3, 3)),
    "rank": lambda: torch.ops.aten.convolution(_rand(4, 5, 5), _rand(3, 4, 3, 3), None, [1], [0], [1], False, [0], 1),
    "0-d": lambda: torch.ops.aten.convolution(_rand(), _rand(3, 4, 3, 3), None, [1], [0], [1], False, [0], 1),
    "dtypes": lambda: F.conv2d(_rand(1, 4, 5, 5), _rand(3, 4, 3, 3, dtype=torch.float64)),
    "bias": lambda: F.conv2d(_rand(1, 4, 5, 5), _rand(3, 4, 3, 3), _rand(4)),
    "out dtype": lambda: torch.ops.aten.convolution.out(_rand(1, 4, 5, 5), _rand(3, 4, 3, 3), None, *_ARGS,
                                                        out=torch.empty(0, dtype=torch.float64, device=DEVICE)),
    "output padding": lambda: F.conv_transpose2d(_rand(1, 4, 5, 5), _rand(4, 3, 3, 3), stride=2, output_padding=2),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_arguments_raise_atens_errors(name: str) -> None:
    expected = _error(BAD[name])
    with gems_core.use_gems(include=OPS):
        assert _error(BAD[name]) == expected


@pytest.mark.parametrize("kept", [("patches",), ("patches", "unit")], ids=["patches", "patches and unit"])
def test_a_gate_that_keeps_forms_on_gems(kept: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    """A backend that leaves convolution to ATen but keeps some of its forms on gems
    (``OpGate("convolution", keep=("patches",))``, as the NVIDIA backend does): a patch
    embedding runs on mm's kernels, a channels-last 1x1 too where "unit" is kept; a 3x3, an
    NCHW 1x1 over several images and a strided 1x1 reach ATen without entering gems; each
    result ATen's within tolerance."""
    import dataclasses

    rt = runtime.current()
    policy = dataclasses.replace(rt.policy, gates={**rt.policy.gates, "convolution": frozenset()},
                                 gate_keeps={**rt.policy.gate_keeps, "convolution": frozenset(kept)})
    kept_policy = pytest.MonkeyPatch()  # (counted() undoes its own monkeypatch)
    kept_policy.setattr(rt, "policy", policy)
    conv = _conv_module()
    assert dict(load_ops()["convolution"].forms) == {"patches": conv.patches_form, "unit": conv.unit_form}
    patches = (_rand(2, 3, 8, 12, seed=30), _rand(6, 3, 4, 4, seed=31), _rand(6, seed=32)), {"stride": 4}
    unit = (_rand(2, 8, 3, 3, seed=33).to(memory_format=CL), _rand(5, 8, 1, 1, seed=34), None), {}
    taps = (_rand(2, 4, 6, 6, seed=35), _rand(5, 4, 3, 3, seed=36), None), {"padding": 1}
    nchw_unit = (_rand(2, 8, 3, 3, seed=37), _rand(5, 8, 1, 1, seed=38), None), {}
    strided_unit = (_rand(2, 8, 4, 4, seed=39).to(memory_format=CL), _rand(5, 8, 1, 1, seed=40), None), {"stride": 2}
    calls = ((patches, True), (unit, "unit" in kept), (taps, False), (nchw_unit, False), (strided_unit, False))
    try:
        for (args, kwargs), served in calls:
            with counted(monkeypatch) as grids, _served("convolution") as watch:
                got = F.conv2d(*args, **kwargs)
            assert watch.hit == served and bool(grids["mm"]) == served and not grids["gemm"]
            _close(got, F.conv2d(*(None if t is None else t.double() for t in args), **kwargs), torch.float32)
    finally:
        kept_policy.undo()
