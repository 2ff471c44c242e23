"""Hugging Face models, their code unchanged, under ``use_gems()``: each transformer family of
benchmarks/models.py (Llama, Qwen2, GPT-2, BERT, ViT) at a tiny config gives ATen's logits,
its decoders generate ATen's greedy tokens with a DynamicCache and a StaticCache, a Llama's
training step gives ATen's gradients, and gems served each model's main ops (the benchmark's
``OpWatch``: a call that ran on ATen does not count). The benchmark itself runs at tiny sizes
and reports each field a GPU run is read for.

Tolerance: logits and gradients against ATen in float64 on the same weights. The models are 2
layers of width 32 whose reductions are at most 64 long; float32 rounding leaves differences
of 1e-7 on logits of order 0.5 (a wrong kernel is off by 1e-2 or more), 1e-5 allows for error
growth through the layers and the backward. Greedy tokens are compared exactly: the top two
logits of these random models differ by far more than that rounding."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import gems_core

pytest.importorskip("transformers", reason="the Hugging Face models need transformers (pip install -e .[models])")

DEVICE = torch.device(gems_core.device)
ATOL = RTOL = 1e-5
NEW_TOKENS = 4
BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "models.py"


def _bench() -> Any:
    if "gems_bench_models" not in sys.modules:
        spec = importlib.util.spec_from_file_location("gems_bench_models", BENCH)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return sys.modules["gems_bench_models"]


bench = _bench()

#: the ops gems must serve in each family's forward: projections, attention, norms,
#: embeddings and activation (HF's Llama and Qwen2 write RMSNorm as pow, mean and rsqrt)
SERVED = {
    "llama": {"mm", "scaled_dot_product_attention", "embedding", "mean", "rsqrt", "silu"},
    "qwen2": {"mm", "addmm", "scaled_dot_product_attention", "embedding", "mean", "rsqrt", "silu"},
    "gpt2": {"addmm", "scaled_dot_product_attention", "embedding", "native_layer_norm", "tanh"},
    "bert": {"addmm", "scaled_dot_product_attention", "embedding", "native_layer_norm", "gelu"},
    "vit": {"addmm", "scaled_dot_product_attention", "native_layer_norm", "gelu"},
}
DECODERS = ["llama", "qwen2", "gpt2"]
#: the tiny Llama's matrix products in one forward (7 projections a layer, the LM head);
#: a backward adds two per projection
SERVED_FORWARD_MM = 2 * 7 + 1


def _model(name: str) -> tuple[Any, torch.nn.Module, dict[str, torch.Tensor]]:
    """(spec, tiny float32 model in eval mode, seeded inputs of batch 2)."""
    spec = bench.MODELS[name]
    torch.manual_seed(0)
    model = spec.build(True).eval().to(DEVICE)
    inputs = bench.make_inputs(spec, model, 2, spec.tiny_seq, DEVICE, torch.float32, seed=1)
    return spec, model, inputs


def _float64(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    return copy.deepcopy(model).double(), {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}


def _on_gems(fn: Callable[[], Any]) -> tuple[Any, dict[str, dict[str, int]]]:
    """fn's result under use_gems(), and the ops gems served and those that ran on ATen."""
    with gems_core.use_gems(), bench.OpWatch() as watch:
        result = fn()
    return result, watch.report()


@pytest.mark.parametrize("name", sorted(SERVED))
def test_forward_matches_aten(name: str) -> None:
    spec, model, inputs = _model(name)
    with torch.no_grad():
        logits, ops = _on_gems(lambda: bench.logits_of(spec, model, inputs))
        expected = bench.logits_of(spec, *_float64(model, inputs))
    assert SERVED[name] <= set(ops["served"]), ops
    assert logits.dtype == torch.float32 and logits.shape == expected.shape
    torch.testing.assert_close(logits.double(), expected, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("name", DECODERS)
def test_generate_matches_aten(name: str, cache: str) -> None:
    spec, model, inputs = _model(name)
    options = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0,
                   cache_implementation=None if cache == "dynamic" else "static")
    reference, reference_inputs = _float64(model, inputs)
    expected = reference.generate(**reference_inputs, **options)
    tokens, ops = _on_gems(lambda: model.generate(**inputs, **options))
    assert tokens.shape == (2, spec.tiny_seq + NEW_TOKENS)
    assert torch.equal(tokens, expected)
    assert len(set(tokens[:, spec.tiny_seq:].flatten().tolist())) > 1  # not one repeated token
    # the prompt's and every generated token's projections and attention
    served = ops["served"]
    projections = served.get("mm", 0) + served.get("addmm", 0)
    assert projections >= NEW_TOKENS and served.get("scaled_dot_product_attention", 0) >= NEW_TOKENS, ops


def test_llama_training_step_gradients_match_aten() -> None:
    spec, model, inputs = _model("llama")
    reference, reference_inputs = _float64(model, inputs)
    model.train()
    reference.train()
    loss, ops = _on_gems(lambda: _backward(spec, model, inputs))
    expected = _backward(spec, reference, reference_inputs)
    torch.testing.assert_close(loss.double(), expected, atol=ATOL, rtol=RTOL)
    grads = dict(reference.named_parameters())
    for param_name, param in model.named_parameters():
        want = grads[param_name].grad
        assert bool(want.abs().sum() > 0), param_name  # every parameter is trained
        torch.testing.assert_close(param.grad.double(), want, atol=ATOL, rtol=RTOL,
                                   msg=lambda m, p=param_name: f"{p}: {m}")
    backward_ops = {"embedding_dense_backward", "silu_backward", "_log_softmax_backward_data"}
    assert backward_ops <= set(ops["served"]) and ops["served"]["mm"] > SERVED_FORWARD_MM, ops



def _backward(spec: Any, model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    loss = bench.loss_of(spec, model, inputs)
    loss.backward()
    return loss.detach()


def test_benchmark_reports_and_survives_a_failing_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """A tiny run: every result a line of JSON with its timings, agreement, kernel share and
    ops on ATen; a model that fails under gems (here a Llama whose norm raises there) keeps
    its ATen results and error, the next model runs, and torchvision's absence skips
    ResNet-50 with the reason."""
    from transformers.models.llama import modeling_llama

    norm = modeling_llama.LlamaRMSNorm.forward

    def failing_under_gems(self: Any, hidden: torch.Tensor) -> torch.Tensor:
        if gems_core.registered_ops():
            raise RuntimeError("norm failed under gems")
        return norm(self, hidden)

    monkeypatch.setattr(modeling_llama.LlamaRMSNorm, "forward", failing_under_gems)
    monkeypatch.setitem(sys.modules, "torchvision", None)  # import torchvision raises
    out = tmp_path / "models.jsonl"
    # float32 everywhere, and one SDPA backend that takes it on every device (the summary's
    # choice of ATen's fastest backend: test_summary_sets_gems_against_atens_fastest_backend)
    aten = ["aten-math"]
    status = bench.main(["--tiny", "--device", str(DEVICE), "--models", "llama,gpt2,resnet50", "--workloads",
                         "forward,generate-static,train", "--rounds", "1", "--warmup", "0", "--dtype", "float32",
                         "--train-autocast", "none", "--train-steps", "2", "--providers", ",".join([*aten, "gems"]),
                         "--out", str(out)])
    assert status == 1  # a gems failure
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[0]["kind"] == "environment" and lines[0]["backend"] == gems_core.backend().name
    assert [(r["model"], r["reason"][:11]) for r in lines if r["kind"] == "skipped"] == [("resnet50", "torchvision")]
    results = [r for r in lines if r["kind"] == "result"]
    assert bench.providers_for(bench.MODELS["gpt2"], DEVICE, None)[-1] == "gems"
    assert {(r["model"], r["workload"], r["provider"]) for r in results} == {
        (m, w, p) for m in ("llama", "gpt2") for w in ("forward", "generate-static", "train") for p in [*aten, "gems"]}
    for row in results:
        assert {"batch", "provider", "ms_runs", "peak_mem_mib"} <= set(row)
        if row["model"] == "llama" and row["provider"] == "gems":
            assert row["error"] == "RuntimeError: norm failed under gems" and "ms" not in row
            continue
        assert "error" not in row, row
        assert len(row["ms_runs"]) == 1 and row["ms"] == row["ms_best"] == row["ms_runs"][0] > 0
        agreement = row["agreement"]
        if row["workload"] == "forward":
            assert agreement["logits_max_abs_diff"] < ATOL and agreement["logits_rel_error"] < ATOL
        elif row["workload"] == "train":
            assert agreement["loss_abs_diff"] < ATOL and agreement["grad_norm_rel_diff"] < ATOL
            # two steps from the same weights: the second loss is the first step's doing
            assert len(row["train_losses"]) == 2 and row["train_losses"][0] != row["train_losses"][1]
            assert agreement["loss_curve_max_rel_diff"] < ATOL
        else:
            assert agreement["tokens_equal"] is True
        if row["provider"] == "gems":
            assert {"addmm", "scaled_dot_product_attention"} <= set(row["ops_served"])
            assert sum(row["kernel_us_by_category"].values()) > 0
            if DEVICE.type == "cuda":
                assert 0 < row["gems_kernel_share"] <= 1
                continue
            assert row["gems_kernel_share"] is None  # no GPU kernels to tell apart
            # p=0 dropout: gems leaves it to ATen's composite
            assert set(row["ops_on_aten"]) == {"dropout"}, row["ops_on_aten"]
            if row["workload"] == "generate-static":
                assert "index_copy_" in row["ops_served"]  # the static cache's write
    printed = capsys.readouterr()
    assert "gpt2      train" in printed.out and "norm failed under gems" in printed.out
    assert "~" in printed.err and "s left]" in printed.err  # the progress lines


def test_summary_sets_gems_against_atens_fastest_backend() -> None:
    """The table's ``aten best`` is the fastest ATen provider of the case, whichever it is,
    and ``x`` that time over gems'; a provider that failed is named under the case."""
    row = dict(kind="result", model="llama", workload="forward", batch=2)
    rows = [dict(row, provider="aten-math", ms=9.0), dict(row, provider="aten-flash", ms=6.0),
            dict(row, provider="aten-cudnn", error="RuntimeError: no kernel"),
            dict(row, provider="gems", ms=4.0, agreement={"logits_max_abs_diff": 1e-3}, gems_kernel_share=0.97)]
    line, failed = bench.summary(rows).splitlines()[1:]
    assert line.split()[:7] == ["llama", "forward", "2", "6.00", "(flash)", "4.00", "1.50"] and "97%" in line
    assert failed.strip() == "aten-cudnn: RuntimeError: no kernel"
