"""Training on gems: the example transformers take a few SGD steps with and without gems
from the same seed on the same data (dropout 0), and the losses and every parameter's
gradient agree at every step. The Llama runs gems' fused ops with their Triton backwards;
the BERT runs LayerNorm, GELU, softmax and matmul backwards on gems' ATen kernels.

Autograd must not depend on grad mode being on when gems is enabled: forwards under
``torch.no_grad`` and ``torch.inference_mode`` give ATen's outputs and record no graph.

Tolerance: as tests/test_models.py (1e-4 on float32 values of order 1); gradients are of
order 1e-2..1, and SGD with lr 0.1 keeps the two runs' weights within that bound over three
steps (an optimizer that normalizes updates, like Adam, would amplify the rounding of tiny
gradients, so plain SGD is the sharper check)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from gems_conformance.routing import RouteWatch, implementations
from test_models import load_example

import gems_core

DEVICE = torch.device(gems_core.device)
ATOL = RTOL = 1e-4
STEPS = 2  # the second step's loss and gradients follow the first update
bert = load_example("bert")
llama = load_example("llama")


def _llama(fused: bool) -> tuple[torch.nn.Module, Callable[[torch.nn.Module], torch.Tensor]]:
    config = llama.LlamaConfig()
    torch.manual_seed(0)
    model = llama.Llama(config, fused=fused).to(DEVICE)
    tokens = llama.sample_tokens(config, batch=2, seq=8).to(DEVICE)

    def loss(m: torch.nn.Module) -> torch.Tensor:  # next-token prediction
        logits = m(tokens[:, :-1])
        return F.cross_entropy(logits.reshape(-1, config.vocab), tokens[:, 1:].reshape(-1))

    return model, loss


def _bert(fused: bool) -> tuple[torch.nn.Module, Callable[[torch.nn.Module], torch.Tensor]]:
    config = bert.BertConfig()
    torch.manual_seed(0)
    model = bert.Bert(config).to(DEVICE)
    tokens, mask = (t.to(DEVICE) for t in bert.sample_batch(config, batch=2, seq=8))

    def loss(m: torch.nn.Module) -> torch.Tensor:  # reconstruct the tokens
        logits = m(tokens, mask)
        return F.cross_entropy(logits.reshape(-1, config.vocab), tokens.reshape(-1))

    return model, loss


MODELS = {"llama": _llama, "bert": _bert}


def _train(name: str, on_gems: bool) -> tuple[list[float], list[dict[str, torch.Tensor]]]:
    """Losses and the gradients of every parameter at each step."""
    model, loss_fn = MODELS[name](fused=on_gems)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses, grads = [], []
    codes = frozenset().union(*implementations(("mm", "_softmax_backward_data")).values())
    with RouteWatch(codes) as watch, gems_core.use_gems() if on_gems else nullcontext():
        for _ in range(STEPS):
            optimizer.zero_grad()
            loss = loss_fn(model)
            loss.backward()
            losses.append(loss.item())
            grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
            optimizer.step()
        # on an accelerator the backward runs in autograd's device thread, which the watch
        # (a profile hook of this thread) does not see: the native layer's counts tell
        served = any(s["op"] in ("mm", "_softmax_backward_data") and s["hits"] + s["python_calls"] > 0
                     for s in gems_core.dispatch.native_stats() if not s.get("gate"))
    assert (watch.hit or served) == on_gems  # the backward ran on gems' kernels
    return losses, grads


@pytest.mark.parametrize("name", sorted(MODELS))
def test_training_matches_aten(name: str) -> None:
    aten_losses, aten_grads = _train(name, on_gems=False)
    gems_losses, gems_grads = _train(name, on_gems=True)
    assert aten_losses[-1] < aten_losses[0]  # the steps do train
    torch.testing.assert_close(gems_losses, aten_losses, atol=ATOL, rtol=RTOL)
    for step, (got, want) in enumerate(zip(gems_grads, aten_grads)):
        assert got.keys() == want.keys()
        for param in want:
            assert bool(want[param].abs().sum() > 0), param  # every parameter is trained
            torch.testing.assert_close(got[param], want[param], atol=ATOL, rtol=RTOL,
                                       msg=lambda m, p=param, s=step: f"step {s}, {p}: {m}")


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_forward_without_grad_mode(name: str, mode: str) -> None:
    model, loss_fn = MODELS[name](fused=False)
    model.eval()
    context: Callable[[], Any] = torch.no_grad if mode == "no_grad" else torch.inference_mode
    with context():
        expected = loss_fn(model)
    if hasattr(model, "fused"):
        model.fused = True
    with gems_core.use_gems(), context():
        got = loss_fn(model)
    assert got.grad_fn is None and not got.requires_grad
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=RTOL)


def test_grad_mode_toggles_inside_gems() -> None:
    """Within one use_gems block: a no-grad forward records nothing, and a later forward
    with grad mode on trains as usual."""
    model, loss_fn = _llama(fused=True)
    with gems_core.use_gems():
        with torch.no_grad():
            assert loss_fn(model).grad_fn is None
        loss = loss_fn(model)
        loss.backward()
    assert all(p.grad is not None for p in model.parameters())
