"""Upsampling (gems_core/ops/resample.py: nearest, nearest-exact, linear, bicubic) and
reflection/replication padding (gems_core/ops/padding.py) against ATen: float64 results
that equal ATen's where they are element copies and agree to 1e-12 elsewhere (the source
coordinates follow ATen's rules exactly), the layouts of ATen's results (channels_last in,
channels_last out), the scale conventions (given scale vs size ratio, align_corners),
backward through autograd, out= forms, empty batches, 64-bit offsets, and ATen's errors
for bad arguments. A call counts as served only where gems' function ran and launched its
kernel, so a silent fallback to ATen fails.

Shapes are tiny (the CPU interpreter); the odd sizes and scales exercise ATen's rules
(out == 2 * in takes nearest's integer path even with a scale given)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from gems_conformance.routing import RouteWatch, implementations

import gems_core
from gems_core import runtime
from gems_core.policy import ALL_DTYPES
from gems_core.registry import load_ops

DEVICE = torch.device(gems_core.device)


def rand(*shape: int, dtype: torch.dtype = torch.float64, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=g, dtype=torch.float64) * 6 - 3).to(dtype).to(DEVICE)
    return torch.randint(0, 100, shape, generator=g).to(dtype).to(DEVICE)


def _kernels() -> dict[str, tuple[Any, str]]:
    load_ops()  # the op modules define their kernels once the backend is selected
    from gems_core.ops import padding, resample

    return {"resample": (resample, "_resample"), "resample_backward": (resample, "_resample_backward"),
            "pad": (padding, "_pad"), "pad_backward": (padding, "_pad_backward")}


@contextmanager
def on_gems(ops: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """gems enabled; yields the names of the kernels launched; asserts on exit that gems'
    implementation of one of ``ops`` ran."""
    for op in ops:
        if runtime.current().policy.gate_for(op) == ALL_DTYPES:
            pytest.skip(f"the {gems_core.backend().name} backend leaves {op} to ATen")
    launches: list[str] = []
    for name, (module, attr) in _kernels().items():
        kernel = getattr(module, attr)

        def counted(*args: Any, _kernel: Any = kernel, _name: str = name, **kwargs: Any) -> Any:
            launches.append(_name)
            return _kernel(*args, **kwargs)

        monkeypatch.setattr(module, attr, counted)
    codes = frozenset().union(*implementations(ops).values())
    assert codes, ops
    with RouteWatch(codes) as watch, gems_core.use_gems():
        yield launches
    assert watch.hit, ops


def served(ops: tuple[str, ...], fn: Callable[[], Any], monkeypatch: pytest.MonkeyPatch,
           kernels: tuple[str, ...] = ("resample",)) -> Any:
    with on_gems(ops, monkeypatch) as launches:
        result = fn()
    assert set(kernels) <= set(launches), f"{ops} launched {launches}, not {kernels}"
    return result


def through_autograd(forward: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                     grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """forward(x) and the gradient of x for the upstream gradient ``grad``."""
    x = x.detach().requires_grad_()
    y = forward(x)
    (dx,) = torch.autograd.grad(y, x, grad)
    return y, dx


def upstream(forward: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """A random gradient laid out like ATen's result, drawn outside gems (whose random
    numbers differ from ATen's by design)."""
    y = forward(x)
    return rand(*y.shape, dtype=y.dtype, seed=7).as_strided(y.shape, y.stride())


def check(ops: tuple[str, ...], forward: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
          monkeypatch: pytest.MonkeyPatch, kernels: tuple[str, ...], exact: bool = True) -> None:
    """gems' forward and backward against ATen's on the same float64 input, with ATen's
    strides: the forward equal where ``exact`` (element copies), else to 1e-12, as the
    backward (its sums may add in another order)."""
    grad = upstream(forward, x)
    want_y, want_dx = through_autograd(forward, x, grad)
    got_y, got_dx = served(ops, lambda: through_autograd(forward, x, grad), monkeypatch, kernels)
    for got, want in ((got_y, want_y), (got_dx, want_dx)):
        assert got.dtype == want.dtype and got.stride() == want.stride()
        torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)
    assert torch.equal(got_y, want_y) or not exact


LAYOUTS = {
    "contiguous": lambda: rand(2, 3, 5, 6),
    "channels_last": lambda: rand(2, 3, 5, 6, seed=1).contiguous(memory_format=torch.channels_last),
    "transposed": lambda: rand(2, 3, 6, 5, seed=2).transpose(2, 3),
    "expanded": lambda: rand(1, 3, 5, 6, seed=3).expand(2, 3, 5, 6),
}

NEAREST = ("upsample_nearest2d", "upsample_nearest2d_backward")
EXACT = ("_upsample_nearest_exact2d", "_upsample_nearest_exact2d_backward")
BILINEAR = ("upsample_bilinear2d", "upsample_bilinear2d_backward")
BOTH = ("resample", "resample_backward")


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("resize", [{"scale_factor": 2}, {"size": (7, 4)}, {"scale_factor": 2.1},
                                    {"scale_factor": 0.6}])
def test_upsample_nearest(layout: str, resize: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # 5 * 2.1 -> 10 = 2 * 5: ATen's integer path (o // 2), not floor(o / 2.1)
    check(NEAREST, lambda x: F.interpolate(x, **resize), LAYOUTS[layout](), monkeypatch, BOTH)


@pytest.mark.parametrize("resize", [{"scale_factor": 1.7}, {"scale_factor": 0.6}, {"size": (10, 6)}])
def test_upsample_nearest_exact(resize: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    forward = lambda x: F.interpolate(x, mode="nearest-exact", **resize)  # noqa: E731
    check(EXACT, forward, LAYOUTS["channels_last"](), monkeypatch, BOTH)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("resize", [{"scale_factor": 1.5}, {"size": (3, 11)}, {"scale_factor": 0.4},
                                    {"scale_factor": 1.5, "recompute_scale_factor": True}])
def test_upsample_bilinear(layout: str, align_corners: bool, resize: dict[str, Any],
                           monkeypatch: pytest.MonkeyPatch) -> None:
    forward = lambda x: F.interpolate(x, mode="bilinear", align_corners=align_corners, **resize)  # noqa: E731
    check(BILINEAR, forward, LAYOUTS[layout](), monkeypatch, BOTH, exact=False)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "transposed"])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("resize", [{"scale_factor": 1.5}, {"size": (3, 11)}])
def test_upsample_bicubic(layout: str, align_corners: bool, resize: dict[str, Any],
                          monkeypatch: pytest.MonkeyPatch) -> None:
    """4 x 4 taps clamped at the edges (a downscale to 3 rows reaches past both)."""
    forward = lambda x: F.interpolate(x, mode="bicubic", align_corners=align_corners, **resize)  # noqa: E731
    check(("upsample_bicubic2d", "upsample_bicubic2d_backward"), forward, LAYOUTS[layout](), monkeypatch, BOTH,
          exact=False)


@pytest.mark.parametrize("mode,ops", [
    ("nearest", ("upsample_nearest1d", "upsample_nearest1d_backward")),
    ("nearest-exact", ("_upsample_nearest_exact1d", "_upsample_nearest_exact1d_backward")),
    ("linear", ("upsample_linear1d", "upsample_linear1d_backward")),
])
@pytest.mark.parametrize("scale", [0.37, 1.0, 3.3, 2.0])
def test_upsample_1d_scales(mode: str, ops: tuple[str, ...], scale: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """Odd ratios, up and down: every input element's backward window holds every output
    that reads it."""
    forward = lambda x: F.interpolate(x, scale_factor=scale, mode=mode)  # noqa: E731
    check(ops, forward, rand(2, 2, 13, seed=4), monkeypatch, BOTH, exact=mode != "linear")


@pytest.mark.parametrize("mode,ops", [
    ("nearest", ("upsample_nearest3d", "upsample_nearest3d_backward")),
    ("trilinear", ("upsample_trilinear3d", "upsample_trilinear3d_backward")),
])
def test_upsample_3d_channels_last(mode: str, ops: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    """ATen's layouts: channels_last_3d results, and a contiguous nearest gradient."""
    x = rand(1, 2, 3, 4, 3, seed=5).contiguous(memory_format=torch.channels_last_3d)
    forward = lambda t: F.interpolate(t, scale_factor=(1.5, 2, 0.7), mode=mode)  # noqa: E731
    check(ops, forward, x, monkeypatch, BOTH, exact=mode == "nearest")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_upsample_bilinear_half_types_against_float64(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    """float32 interpolation and backward sums in lower-precision tensors: within one
    rounding of the dtype of the float64 result."""
    x = rand(2, 3, 6, 5, dtype=dtype, seed=6).contiguous(memory_format=torch.channels_last)
    forward = lambda t: F.interpolate(t, scale_factor=2, mode="bilinear")  # noqa: E731
    grad = upstream(forward, x)
    want_y, want_dx = through_autograd(forward, x.double(), grad.double())
    got_y, got_dx = served(BILINEAR, lambda: through_autograd(forward, x, grad), monkeypatch, BOTH)
    tol = {torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}[dtype]
    for got, want in ((got_y, want_y), (got_dx, want_dx)):
        assert got.dtype == dtype
        torch.testing.assert_close(got.double(), want, atol=tol, rtol=tol)


def test_upsample_nearest_uint8_and_empty_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    x = rand(1, 2, 3, 4, dtype=torch.uint8)
    y = served(NEAREST[:1], lambda: F.interpolate(x, scale_factor=3), monkeypatch)
    assert torch.equal(y, F.interpolate(x, scale_factor=3))
    empty = rand(0, 2, 3, 4)
    y = served(NEAREST[:1], lambda: F.interpolate(empty, size=(5, 5)), monkeypatch, kernels=())
    assert y.shape == (0, 2, 5, 5)


def test_upsample_out_and_grad_input_forms(monkeypatch: pytest.MonkeyPatch) -> None:
    x = rand(2, 3, 4, 5)
    out = torch.empty(3, dtype=x.dtype, device=DEVICE)
    want = torch.ops.aten.upsample_bilinear2d(x, [7, 9], True)
    with pytest.warns(UserWarning, match="resized"):
        got = served(("upsample_bilinear2d.out",),
                     lambda: torch.ops.aten.upsample_bilinear2d.out(x, [7, 9], True, out=out), monkeypatch)
    assert got is out
    torch.testing.assert_close(out, want, atol=1e-12, rtol=1e-12)
    grad = rand(2, 3, 8, 10, seed=1)
    grad_input = torch.empty(2, 3, 4, 5, dtype=x.dtype, device=DEVICE)
    want = torch.ops.aten.upsample_nearest2d_backward(grad, [8, 10], [2, 3, 4, 5], 2.0, 2.0)
    got = served(("upsample_nearest2d_backward.grad_input",), lambda: torch.ops.aten.upsample_nearest2d_backward.grad_input(
        grad, [8, 10], [2, 3, 4, 5], 2.0, 2.0, grad_input=grad_input), monkeypatch, ("resample_backward",))
    assert got is grad_input and torch.equal(grad_input, want)


PAD_OPS = {
    ("reflect", 1): ("reflection_pad1d", "reflection_pad1d_backward"),
    ("reflect", 2): ("reflection_pad2d", "reflection_pad2d_backward"),
    ("reflect", 3): ("reflection_pad3d", "reflection_pad3d_backward"),
    ("replicate", 1): ("replication_pad1d", "replication_pad1d_backward"),
    ("replicate", 2): ("replication_pad2d", "replication_pad2d_backward"),
    ("replicate", 3): ("replication_pad3d", "replication_pad3d_backward"),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("pad", [(1, 2, 2, 1), (0, 3, -1, 2), (-2, 1, 0, 0)])
def test_pad_2d(layout: str, mode: str, pad: tuple[int, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    check(PAD_OPS[mode, 2], lambda x: F.pad(x, pad, mode=mode), LAYOUTS[layout](), monkeypatch,
          ("pad", "pad_backward"))


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("dims,shape", [(1, (3, 7)), (1, (2, 3, 7)), (3, (2, 3, 4, 5)), (3, (1, 2, 3, 4, 5))])
def test_pad_1d_3d_batched_or_not(mode: str, dims: int, shape: tuple[int, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    pad = (2, 1, 0, 2, 1, -1)[: 2 * dims]
    check(PAD_OPS[mode, dims], lambda x: F.pad(x, pad, mode=mode), rand(*shape, seed=8), monkeypatch,
          ("pad", "pad_backward"))


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.float16, torch.bfloat16])
def test_pad_other_dtypes(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    x = rand(2, 3, 4, 5, dtype=dtype, seed=9)
    for mode in ("reflect", "replicate"):
        y = served(PAD_OPS[mode, 2][:1], lambda m=mode: F.pad(x, (1, 2, 3, 0), mode=m), monkeypatch, ("pad",))
        assert torch.equal(y, F.pad(x, (1, 2, 3, 0), mode=mode))


def test_pad_out_forms(monkeypatch: pytest.MonkeyPatch) -> None:
    x = rand(2, 3, 4, 5)
    out = torch.empty(0, dtype=x.dtype, device=DEVICE)
    got = served(("reflection_pad2d.out",), lambda: torch.ops.aten.reflection_pad2d.out(x, [1, 1, 2, 0], out=out),
                 monkeypatch, ("pad",))
    assert got is out and torch.equal(out, F.pad(x, (1, 1, 2, 0), mode="reflect"))
    grad = rand(2, 3, 6, 7, seed=1)
    grad_input = torch.empty(0, dtype=x.dtype, device=DEVICE)
    want = torch.ops.aten.replication_pad2d_backward(grad, x, [1, 1, 2, 0])
    got = served(("replication_pad2d_backward.grad_input",), lambda: torch.ops.aten.replication_pad2d_backward.grad_input(
        grad, x, [1, 1, 2, 0], grad_input=grad_input), monkeypatch, ("pad_backward",))
    assert got is grad_input
    torch.testing.assert_close(grad_input, want, atol=1e-12, rtol=1e-12)
    filled = torch.empty(0, dtype=x.dtype, device=DEVICE)
    got = served(("constant_pad_nd.out",), lambda: torch.ops.aten.constant_pad_nd.out(x, [1, -1, 0, 2], 0.5, out=filled),
                 monkeypatch, ())
    assert got is filled and torch.equal(filled, F.pad(x, (1, -1, 0, 2), value=0.5))


def test_constant_pad_keeps_channels_last_and_fills_float64(monkeypatch: pytest.MonkeyPatch) -> None:
    x = rand(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    y = served(("constant_pad_nd",), lambda: F.pad(x, (1, 2, 0, 1)), monkeypatch, ())
    want = F.pad(x, (1, 2, 0, 1))
    assert y.stride() == want.stride() and torch.equal(y, want)


def _aten_error(fn: Callable[[], Any]) -> BaseException:
    with pytest.raises(Exception) as info:
        fn()
    return info.value


BAD_CALLS = {
    "reflect pad as large as the dim": lambda: F.pad(rand(1, 2, 3, 4), (4, 0, 0, 0), mode="reflect"),
    "reflect of an empty spatial dim": lambda: F.pad(rand(1, 2, 0, 4), (1, 1, 1, 1), mode="reflect"),
    "replicate of a 2-d tensor by 4 pads": lambda: torch.ops.aten.replication_pad2d(rand(3, 4), [1, 1, 1, 1]),
    "reflect of a bool tensor": lambda: F.pad(rand(1, 2, 3, 4) > 0, (1, 1), mode="reflect"),
    "upsample of a 3-d tensor by a 2-d op": lambda: torch.ops.aten.upsample_nearest2d(rand(2, 3, 4), [4, 4]),
    "upsample to an empty size": lambda: torch.ops.aten.upsample_bilinear2d(rand(1, 2, 3, 4), [0, 4], False),
    "upsample of an empty spatial dim": lambda: torch.ops.aten.upsample_nearest1d(rand(1, 2, 0), [4]),
    "upsample of an int32 tensor": lambda: F.interpolate(rand(1, 2, 3, 4, dtype=torch.int32), scale_factor=2),
    "backward of a mismatched gradient": lambda: torch.ops.aten.upsample_nearest2d_backward(
        rand(1, 2, 5, 5), [4, 4], [1, 2, 2, 2]),
}


@pytest.mark.parametrize("name", sorted(BAD_CALLS))
def test_bad_arguments_raise_atens_error(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    want = _aten_error(BAD_CALLS[name])
    launches = []
    for module, attr in _kernels().values():
        monkeypatch.setattr(module, attr, lambda *a, **k: launches.append(a))
    with gems_core.use_gems():
        got = _aten_error(BAD_CALLS[name])
    assert type(got) is type(want) and str(got) == str(want)
    assert not launches


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_64_bit_offsets(layout: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernels' 64-bit offset arithmetic (taken past 2^31 elements), forced on small tensors."""
    from gems_core.ops import padding, resample

    monkeypatch.setattr(resample, "_INT32", 0)
    monkeypatch.setattr(padding, "_INT32", 0)
    forward = lambda x: F.pad(F.interpolate(x, scale_factor=1.5, mode="bilinear"), (1, 2, 2, 1), mode="reflect")  # noqa: E731
    check(BILINEAR + PAD_OPS["reflect", 2], forward, LAYOUTS[layout](), monkeypatch, BOTH + ("pad", "pad_backward"),
          exact=False)
