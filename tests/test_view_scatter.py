"""select/slice/diagonal backward and scatter on gems (gems_core/ops/view_scatter.py): exact
copies equal to ATen's on float64 random data, served by gems (the routing check), reached
from autograd, and ATen's own errors for bad dims, indices and source shapes."""

from __future__ import annotations

import pytest
import torch
from gems_conformance.routing import RouteWatch, implementations
from outcomes import answer

import gems_core

DEVICE = torch.device(gems_core.device)
aten = torch.ops.aten


def rand(*shape: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g, dtype=torch.float64) * 6 - 3).to(DEVICE)


def _served(ops: list[str]) -> RouteWatch:
    return RouteWatch(frozenset().union(*implementations(ops).values()))


CALLS = {
    "select_backward": lambda x, g: aten.select_backward(g[:, 0], list(x.shape), 1, -2),
    "slice_backward": lambda x, g: aten.slice_backward(g[:, 1:3].transpose(0, 1), [5, 4, 7], 0, 1, 2**63 - 1, 2),
    "diagonal_backward": lambda x, g: aten.diagonal_backward(g[:, :4, 0], list(x.shape), -1, 1, 2),
    "select_scatter": lambda x, g: torch.select_scatter(x, g[:, 0], 1, 3),
    "slice_scatter": lambda x, g: torch.slice_scatter(x, g[:, :2], 1, None, 4, 2),
    "diagonal_scatter": lambda x, g: torch.diagonal_scatter(x.transpose(0, 2), g[:4, :4, 0].t(), 1, 0, 1),
}


@pytest.mark.parametrize("op", sorted(CALLS))
def test_matches_aten_and_is_served(op: str) -> None:
    x, g = rand(4, 5, 7, seed=1), rand(4, 5, 7, seed=2)
    want = CALLS[op](x, g)
    with _served([op]) as watch, gems_core.use_gems(include=[op]):
        got = CALLS[op](x, g)
    assert watch.hit
    assert got.dtype == want.dtype and got.stride() == want.stride() and torch.equal(got, want)


def test_autograd_reaches_the_backward_ops() -> None:
    x = rand(4, 5, 7, seed=3).requires_grad_()
    y = x[:, 1].sum() * 2 + x[1:, ::3].square().sum() + x.diagonal(0, 1, 2).exp().sum()
    (want,) = torch.autograd.grad(y, x)
    ops = ["select_backward", "slice_backward", "diagonal_backward"]
    with _served(ops) as watch, gems_core.use_gems(include=ops):
        (got,) = torch.autograd.grad(x[:, 1].sum() * 2 + x[1:, ::3].square().sum() + x.diagonal(0, 1, 2).exp().sum(), x)
    assert watch.hit
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_out_forms_write_out() -> None:
    x, g = rand(3, 4, 5, seed=4), rand(3, 4, 5, seed=5)
    out = torch.full((3, 4, 5), 7.0, dtype=torch.float64, device=DEVICE)
    with _served(["slice_scatter.out", "select_backward.out"]) as watch, \
            gems_core.use_gems(include=["slice_scatter.out", "select_backward.out"]):
        result = torch.slice_scatter(x, g[:, :, 1:4], 2, 1, 4, out=out)
        grad = aten.select_backward.out(g[0], [3, 4, 5], 0, 2, out=torch.full((3, 4, 5), 7.0, device=DEVICE,
                                                                           dtype=torch.float64))
    assert watch.hit and result is out
    assert torch.equal(out, torch.slice_scatter(x, g[:, :, 1:4], 2, 1, 4))
    assert torch.equal(grad, aten.select_backward(g[0], [3, 4, 5], 0, 2))


def test_empty() -> None:
    x = rand(0, 4, 5)
    with _served(["select_scatter"]) as watch, gems_core.use_gems(include=["select_scatter"]):
        got = torch.select_scatter(x, rand(0, 5), 1, 0)
    assert watch.hit and got.shape == (0, 4, 5)


@pytest.mark.parametrize("bad", [
    lambda x: aten.select_backward(x[0], [3, 4, 5], 3, 0),  # dim out of range
    lambda x: aten.select_backward(x[0], [3, 4, 5], 0, 9),  # index out of range
    lambda x: torch.select_scatter(x, x[0, :3], 0, 1),  # src of another shape
    lambda x: torch.slice_scatter(x, x[:, :2].float(), 1, 0, 2),  # src of another dtype
    lambda x: torch.diagonal_scatter(x, x[0, 0], 0, 1, 1),  # one dim twice
])
def test_bad_inputs_raise_atens_errors(bad) -> None:
    x = rand(3, 4, 5, seed=6)
    want = answer(lambda: bad(x))
    with gems_core.use_gems():
        got = answer(lambda: bad(x))
    assert got == want


@pytest.mark.parametrize(("offset", "dim1", "dim2"), [(0, -2, -1), (1, 0, 2), (-2, 2, 0)])
def test_diag_embed_matches_aten(offset: int, dim1: int, dim2: int) -> None:
    x = rand(3, 4, seed=7).t()
    want = torch.diag_embed(x, offset, dim1, dim2)
    with _served(["diag_embed"]) as watch, gems_core.use_gems(include=["diag_embed"]):
        got = torch.diag_embed(x, offset, dim1, dim2)
        diagonal_matrix = torch.diag(x[0], -1)  # torch.diag of a vector reaches diag_embed
    assert watch.hit and got.stride() == want.stride() and torch.equal(got, want)
    assert torch.equal(diagonal_matrix, torch.diag(x[0], -1))


@pytest.mark.parametrize("bad", [(0, 1, 1), (0, 5, 0)])
def test_diag_embed_bad_dims_raise_atens_errors(bad: tuple[int, int, int]) -> None:
    x = rand(3, 4, seed=8)
    want = answer(lambda: torch.diag_embed(x, *bad))
    with gems_core.use_gems(include=["diag_embed"]):
        got = answer(lambda: torch.diag_embed(x, *bad))
    assert isinstance(want, str) and got == want
