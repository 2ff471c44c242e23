"""The example models (examples/bert.py, examples/llama.py) run under ``use_gems()`` on the
selected backend and give ATen's logits.

Tolerance: float32 logits of order 1 after ~20 chained ops whose reductions are at most 64
long. Each op rounds differently from ATen's (another summation order, fp32 statistics), a
few ulp (1e-7 relative) each, so differences stay well below 1e-5; 1e-4 leaves room for
error growth through the layers while still catching any wrong kernel (those are off by
1e-2 or more)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from gems_conformance.routing import RouteWatch, implementations

import gems_core

DEVICE = torch.device(gems_core.device)
ATOL = RTOL = 1e-4
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load_example(name: str) -> ModuleType:
    """Import examples/<name>.py as module ``gems_example_<name>`` (once)."""
    module_name = f"gems_example_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, EXAMPLES / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]


bert = load_example("bert")
llama = load_example("llama")


def _forward_on_gems(model: torch.nn.Module, *inputs: Any) -> tuple[torch.Tensor, bool]:
    """(logits, whether gems served the matrix products) of one no-grad forward."""
    codes = frozenset().union(*implementations(("mm", "addmm", "_softmax")).values())
    with torch.no_grad(), RouteWatch(codes) as watch, gems_core.use_gems():
        logits = model(*inputs)
    return logits, watch.hit


def test_bert_logits_match_aten() -> None:
    config = bert.BertConfig()
    torch.manual_seed(0)
    model = bert.Bert(config).eval().to(DEVICE)
    tokens, mask = (t.to(DEVICE) for t in bert.sample_batch(config, batch=2, seq=8))
    with torch.no_grad():
        expected = model(tokens, mask)
    logits, served = _forward_on_gems(model, tokens, mask)
    assert served
    assert logits.shape == (2, 8, config.vocab)
    torch.testing.assert_close(logits, expected, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("fused", [True, False], ids=["fused-ops", "unfused"])
def test_llama_logits_match_aten(fused: bool) -> None:
    config = llama.LlamaConfig()
    torch.manual_seed(0)
    model = llama.Llama(config).eval().to(DEVICE)
    tokens = llama.sample_tokens(config, batch=2, seq=8).to(DEVICE)
    with torch.no_grad():
        expected = model(tokens)
    model.fused = fused
    logits, served = _forward_on_gems(model, tokens)
    assert served
    assert logits.shape == (2, 8, config.vocab)
    torch.testing.assert_close(logits, expected, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("name", ["bert", "llama"])
def test_example_script_runs(name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", [f"{name}.py", "--layers", "1", "--seq", "5"])
    assert load_example(name).main() == 0
    assert "max |logits gems - ATen|" in capsys.readouterr().out
