"""Real models as users run them, ATen vs gems: Hugging Face transformers (Llama, Qwen2,
GPT-2, BERT, ViT) and torchvision's ResNet-50, the model code unchanged, under
``gems_core.use_gems()``.

    python benchmarks/models.py                               # the default set, 3 rounds
    python benchmarks/models.py --models llama,bert --workloads forward,train --out models.jsonl
    python benchmarks/models.py --new-tokens 128 --generate-batches 1,8
    python benchmarks/models.py --tiny --device cpu           # tiny configs, the cpu backend
    python benchmarks/models.py --models llama --workloads train --train-steps 20   # and 20-step loss curves

Every model is built from a config with random weights (nothing is downloaded):

| model | config (default) | inputs |
|---|---|---|
| llama | LlamaForCausalLM, 8 layers, hidden 2048, 32 heads / 4 KV heads, MLP 5632, vocab 32000 | batch 2 x 384 tokens |
| qwen2 | Qwen2ForCausalLM (q/k/v biases), the Llama's sizes, 16 heads / 2 KV heads | batch 2 x 384 tokens |
| gpt2 | GPT2LMHeadModel, GPT-2 small (12 layers, hidden 768, vocab 50257) | batch 2 x 384 tokens |
| bert | BertForMaskedLM, BERT-base, fp16 | batch 32 x 256 tokens |
| vit | ViTForImageClassification, ViT-base/16 at 224 | batch 32 images |
| resnet50 | torchvision's resnet50, channels_last | batch 64 images at 224 |

bf16 on a GPU (BERT fp16), float32 on the CPU; ``--dtype`` sets all. torchvision is
optional: without it ResNet-50 is skipped with a message.

Workloads: ``forward`` (one no-grad forward: the prefill of a decoder), ``generate`` and
``generate-static`` (decoders: greedy ``generate()`` of ``--new-tokens`` tokens after the
prompt with a DynamicCache, and with ``cache_implementation="static"``, at each batch of
``--generate-batches``; eager: ``disable_compile=True`` keeps transformers from compiling
the static-cache forward, which would replace both providers' kernels with Inductor's),
``train`` (one AdamW step under bf16 autocast on float32 master weights, from the same
weights every round; with ``--train-steps N`` each provider also runs N steps from the initial
weights and a fresh optimizer, untimed, and the loss curves are compared: each row's
``train_losses``, and ``loss_curve_max_rel_diff`` against the first ATen provider's).

Providers: ATen with each SDPA backend (``aten-math``, ``aten-efficient``, ``aten-flash``,
``aten-cudnn``, by ``torch.nn.attention.sdpa_kernel``; on the CPU math and flash; a model
without attention has one, ``aten``) and ``gems``. A backend that cannot run a model's
attention (flash with a mask, say) records its error. Per case each provider runs ``--warmup``
times (default 2; gems compiles and tunes), then ``--rounds`` rounds in which the providers take turns;
the median and the best are kept, every timing is recorded. Then gems runs the case once more
under torch.profiler for the share of GPU kernel time in gems' (Triton) kernels and for the
ATen ops that ran on ATen: ops gems does not serve (convolution, say) and calls of served
ops that gems handed to ATen (a dtype a backend leaves to ATen); views and allocations are
left out. On the CPU a profile hook on gems' implementations tells served calls from
handed-over ones; on a GPU the kernels do (a call whose kernels are none of them Triton's ran
on ATen), since the native dispatch layer's replays run no Python.

Agreement, against the first ATen provider (math): forward, the logits' largest absolute
and relative (to the largest reference logit) differences; generate, whether the tokens
are equal; train, the loss and the gradient norm. ATen's other SDPA backends are compared
too, which shows how far two ATen runs of one model already differ.

Output: a table on stdout (``aten best``: the fastest ATen provider of the case, ``x``: its
median time over gems'); with
``--out``, one JSON object a line: the environment first, then one per case and provider.
Progress (one line a step, with the time left) goes to stderr. Providers take turns within
a round, so a provider's run may follow another's: on an H100 an ATen prefill right after
a gems turn ran up to 2x slower (benchmarks/llama.py ``--interleave``); the best of the
rounds is reported beside the median for that reason.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from collections import Counter
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

import gems_core
from gems_core.coverage import no_kernel as _no_kernel


def _sibling(name: str) -> ModuleType:
    """benchmarks/<name>.py, imported by path (this folder need not be on sys.path)."""
    module_name = f"gems_bench_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, Path(__file__).with_name(f"{name}.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]


llama_bench = _sibling("llama")  # the clock, the profiler's kernel records and their summary

WORKLOADS = ("forward", "generate", "generate-static", "train")
SDPA_PROVIDERS = {"aten-math": "MATH", "aten-efficient": "EFFICIENT_ATTENTION",
                  "aten-flash": "FLASH_ATTENTION", "aten-cudnn": "CUDNN_ATTENTION"}


# -- the models -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpec:
    """One model: how to build it (``tiny``: a few-layer config for the cpu backend), its
    kind (decoder: token inputs and generate; encoder: token inputs; vision: images) and
    its inputs' sizes, default and tiny."""

    name: str
    kind: str
    build: Callable[[bool], nn.Module]
    batch: int
    seq: int  # tokens, or image side
    dtype: torch.dtype = torch.bfloat16  # on a GPU
    tiny_batch: int = 2
    tiny_seq: int = 8
    channels_last: bool = False

    @property
    def attention(self) -> bool:
        return self.kind != "vision" or self.name == "vit"


def _hf(cls_name: str, config_name: str, full: dict[str, Any], tiny: dict[str, Any]) -> Callable[[bool], nn.Module]:
    def build(is_tiny: bool) -> nn.Module:
        import transformers

        config = getattr(transformers, config_name)(**(tiny if is_tiny else full))
        return getattr(transformers, cls_name)._from_config(config, attn_implementation="sdpa")

    return build


def _resnet50(is_tiny: bool) -> nn.Module:
    from torchvision.models import resnet50

    return resnet50(num_classes=10 if is_tiny else 1000)


_TINY_LM = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=96, max_position_embeddings=64)
_TINY_ENCODER = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
_LLAMA = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=8, num_attention_heads=32,
              num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048)

MODELS = {spec.name: spec for spec in (
    ModelSpec("llama", "decoder", _hf("LlamaForCausalLM", "LlamaConfig", _LLAMA, _TINY_LM), 2, 384),
    ModelSpec("qwen2", "decoder", _hf("Qwen2ForCausalLM", "Qwen2Config",
                                      dict(_LLAMA, num_attention_heads=16, num_key_value_heads=2),
                                      _TINY_LM), 2, 384),
    ModelSpec("gpt2", "decoder", _hf("GPT2LMHeadModel", "GPT2Config", dict(),
                                     dict(n_embd=32, n_layer=2, n_head=4, vocab_size=96, n_positions=64,
                                          resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)), 2, 384),
    ModelSpec("bert", "encoder", _hf("BertForMaskedLM", "BertConfig", dict(),
                                     dict(_TINY_ENCODER, vocab_size=96, max_position_embeddings=64)),
              32, 256, dtype=torch.float16),
    ModelSpec("vit", "vision", _hf("ViTForImageClassification", "ViTConfig", dict(),
                                   dict(_TINY_ENCODER, image_size=16, patch_size=8, num_labels=10)),
              32, 224, tiny_seq=16),
    ModelSpec("resnet50", "vision", _resnet50, 64, 224, tiny_seq=32, channels_last=True),
)}


def make_inputs(spec: ModelSpec, model: nn.Module, batch: int, seq: int, device: torch.device,
                dtype: torch.dtype, seed: int) -> dict[str, torch.Tensor]:
    """Random inputs: tokens in [1, vocab) (0 is the pad token), or images of ``dtype``."""
    g = torch.Generator().manual_seed(seed)
    if spec.kind == "vision":
        images = torch.randn(batch, 3, seq, seq, generator=g).to(device, dtype)
        if spec.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return {"pixel_values": images}
    tokens = torch.randint(1, model.config.vocab_size, (batch, seq), generator=g).to(device)
    return {"input_ids": tokens, "attention_mask": torch.ones_like(tokens)}


def logits_of(spec: ModelSpec, model: nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    if spec.name == "resnet50":
        return model(inputs["pixel_values"])
    return model(**inputs).logits


def loss_of(spec: ModelSpec, model: nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """Next-token prediction (decoders), reconstructing the tokens (BERT), classes 0..
    (vision: a fixed label per image)."""
    logits = logits_of(spec, model, inputs)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # fp16/bf16 upcast
    if spec.kind == "vision":
        labels = torch.arange(logits.shape[0], device=logits.device) % logits.shape[-1]
        return F.cross_entropy(logits, labels)
    tokens = inputs["input_ids"]
    if spec.kind == "decoder":
        logits, tokens = logits[:, :-1], tokens[:, 1:]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens.reshape(-1))


# -- providers and workloads ----------------------------------------------------------------


def providers_for(spec: ModelSpec, device: torch.device, wanted: list[str] | None) -> list[str]:
    if spec.attention:
        names = [p for p in SDPA_PROVIDERS
                 if device.type == "cuda" or p in ("aten-math", "aten-flash")]
    else:
        names = ["aten"]
    names.append("gems")
    return [p for p in names if wanted is None or p in wanted or (p.startswith("aten") and "aten" in wanted)]


@contextmanager
def provider_context(name: str) -> Iterator[None]:
    with ExitStack() as stack:
        if name in SDPA_PROVIDERS:
            from torch.nn.attention import SDPBackend, sdpa_kernel

            stack.enter_context(sdpa_kernel(getattr(SDPBackend, SDPA_PROVIDERS[name])))
        elif name == "gems":
            stack.enter_context(gems_core.use_gems())
        elif name != "aten":
            raise ValueError(f"unknown provider {name!r}")
        yield


@dataclass
class Case:
    """One timed workload of one model at one batch: ``run()`` under a provider returns what
    agreement is judged on; ``prepare()`` (untimed) resets state the run changes."""

    model: str
    workload: str
    batch: int
    run: Callable[[], Any]
    prepare: Callable[[], None] = lambda: None
    #: training: ``trajectory(n)``, the losses of n steps from the initial weights and a
    #: fresh optimizer (state reset before and after)
    trajectory: Callable[[int], list[float]] | None = None


def make_cases(spec: ModelSpec, args: argparse.Namespace, device: torch.device) -> Iterator[Case]:
    """The cases of ``spec`` the arguments ask for, each built when reached: the training
    copy (float32 weights and AdamW's state) takes the inference model's place."""
    torch.manual_seed(args.seed)
    base = spec.build(args.tiny).eval()
    batch, seq = (spec.tiny_batch, spec.tiny_seq) if args.tiny else (spec.batch, spec.seq)
    dtype = args.dtype or (spec.dtype if device.type == "cuda" else torch.float32)
    infer = copy.deepcopy(base).to(device, dtype)
    if spec.channels_last:
        infer = infer.to(memory_format=torch.channels_last)
    workloads = [w for w in WORKLOADS  # train last: its copy replaces the inference model
                 if w in args.workloads and (spec.kind == "decoder" or not w.startswith("generate"))]
    for workload in workloads:
        if workload == "forward":
            inputs = make_inputs(spec, infer, batch, seq, device, dtype, args.seed)

            def forward(inputs: dict[str, torch.Tensor] = inputs) -> torch.Tensor:
                with torch.no_grad():
                    return logits_of(spec, infer, inputs)

            yield Case(spec.name, workload, batch, forward)
        elif workload.startswith("generate"):
            cache = "static" if workload == "generate-static" else None
            new_tokens = 3 if args.tiny else args.new_tokens
            for gen_batch in ([batch] if args.tiny else args.generate_batches):
                inputs = make_inputs(spec, infer, gen_batch, seq, device, dtype, args.seed)

                def generate(inputs: dict[str, torch.Tensor] = inputs, cache: str | None = cache) -> torch.Tensor:
                    return infer.generate(**inputs, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                          do_sample=False, cache_implementation=cache, pad_token_id=0,
                                          disable_compile=True)

                yield Case(spec.name, workload, gen_batch, generate)
        elif workload == "train":
            del infer  # the training copy's float32 weights and AdamW state take its place
            yield from _train_case(spec, base, args, device, batch, seq)
            return


def _train_case(spec: ModelSpec, base: nn.Module, args: argparse.Namespace, device: torch.device,
                batch: int, seq: int) -> Iterator[Case]:
    model = base.to(device).train()
    if spec.channels_last:
        model = model.to(memory_format=torch.channels_last)
    params = [p for p in model.parameters() if p.requires_grad]
    initial = [p.detach().clone() for p in params]
    optimizer = torch.optim.AdamW(params, lr=1e-4)
    inputs = make_inputs(spec, model, batch, seq, device, torch.float32, args.seed)
    autocast = args.train_autocast or (torch.bfloat16 if device.type == "cuda" else None)
    if autocast == "none":
        autocast = None

    def prepare() -> None:  # every round steps from the same weights: comparable losses
        with torch.no_grad():
            torch._foreach_copy_(params, initial)

    def step() -> dict[str, float]:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=autocast) if autocast else nullcontext():
            loss = loss_of(spec, model, inputs)
        loss.backward()
        optimizer.step()
        return {"loss": loss, "grad_norm": torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(p.grad.float()) for p in params]))}

    def trajectory(steps: int) -> list[float]:
        losses = []
        try:
            prepare()
            optimizer.state.clear()
            for _ in range(steps):
                losses.append(float(step()["loss"].detach()))
        finally:
            prepare()
            optimizer.state.clear()
        return losses

    yield Case(spec.name, "train", batch, step, prepare, trajectory)


# -- what ran on ATen -----------------------------------------------------------------------

#: profiler marks of a return from gems' implementation of an op, within the op's event
_SERVED, _DECLINED = "gems: served", "gems: handed to ATen"
#: the profiler's span of a kernel Triton's interpreter runs (the cpu backend)
_INTERPRETED = "gems: interpreted kernel"


class OpWatch:
    """``with OpWatch() as watch:`` (inside a ``use_gems()`` block) then ``watch.report()``:
    the ATen ops the block issued, by whether gems served them. A call gems serves in Python
    enters its registered implementation (``implementations``, as the conformance suite's
    routing check): on the cpu backend a profile hook marks in the profile, within the op's
    event, each return from one with a result (served) or ``NotImplemented`` (handed to
    ATen), and spans the kernels Triton's interpreter runs, whose tensor copies are left
    out. On a GPU an op gems served launched Triton kernels, so the profiler's kernels
    tell (calls the native dispatch layer replays run no Python)."""

    def __init__(self) -> None:
        from gems_conformance.routing import implementations

        registered = gems_core.registered_ops()
        self.offered = frozenset(name.split(".")[0] for name in registered)
        self.codes = frozenset().union(*implementations(registered).values())
        self.on_gpu = torch.device(gems_core.device).type == "cuda"
        self._stack = ExitStack()
        self.profiler: Any = None

    def _hook(self, frame: Any, event: str, arg: Any) -> None:
        if event == "return" and frame.f_code in self.codes:
            with torch.profiler.record_function(_DECLINED if arg is NotImplemented else _SERVED):
                pass

    def _interpreted(self, run: Callable[..., Any]) -> Callable[..., Any]:
        """Triton's interpreter's ``run``, spanned in the profile (its tensor copies are no
        call of the model's) and without the hook, whose cost would multiply its time."""

        def spanned(*args: Any, **kwargs: Any) -> Any:
            sys.setprofile(None)
            try:
                with torch.profiler.record_function(_INTERPRETED):
                    return run(*args, **kwargs)
            finally:
                sys.setprofile(self._hook)

        return spanned

    def __enter__(self) -> OpWatch:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.on_gpu else [])
        self.profiler = self._stack.enter_context(profile(activities=activities))
        if not self.on_gpu:
            from triton.runtime.interpreter import InterpretedFunction

            run = InterpretedFunction.run
            InterpretedFunction.run = self._interpreted(run)  # type: ignore[method-assign]
            self._stack.callback(setattr, InterpretedFunction, "run", run)
            previous = sys.getprofile()
            sys.setprofile(self._hook)
            self._stack.callback(sys.setprofile, previous)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.on_gpu:
            torch.cuda.synchronize()
        self._stack.close()

    def _served(self, event: Any, known: set[str]) -> bool | None:
        """Whether gems served an op's call; None for a call that launched no kernel (GPU)."""
        if not self.on_gpu:
            return any(child.name == _SERVED for child in event.cpu_children)

        def kernels(event: Any) -> Iterator[str]:
            yield from (k.name for k in getattr(event, "kernels", ()))
            for child in event.cpu_children:
                yield from kernels(child)

        names = list(kernels(event))
        return any(llama_bench.is_triton_kernel(n, known) for n in names) if names else None

    def report(self) -> dict[str, dict[str, int]]:
        """``served``: calls per op gems served; ``aten``: calls per op that ran on ATen (ops
        gems does not serve, and calls of served ops it handed over), most first. An op
        on ATen that issues others is not counted itself; the ops it issued are."""
        served: Counter[str] = Counter()
        aten: Counter[str] = Counter()
        known = llama_bench.triton_kernel_names() if self.on_gpu else set()

        def work(event: Any) -> bool:
            packet = event.name.removeprefix("aten::")
            if packet != event.name and (packet in self.offered or not _no_kernel(packet)):
                return True
            return any(work(child) for child in event.cpu_children)

        def walk(event: Any) -> None:
            packet = event.name.removeprefix("aten::")
            if event.name == _INTERPRETED:
                return
            if packet != event.name:
                served_here = self._served(event, known) if packet in self.offered else False
                if served_here is None:
                    return
                if served_here:
                    served[packet] += 1
                    return
                # an op on ATen, unless it issued others (a composite: linear, matmul; an
                # overload gems does not serve calling one it does: arange)
                if not any(work(child) for child in event.cpu_children):
                    if packet in self.offered or not _no_kernel(packet):
                        aten[packet] += 1
                    return
            for child in event.cpu_children:
                walk(child)

        for event in self.profiler.events():
            if event.cpu_parent is None:
                walk(event)
        return {"served": dict(served.most_common()), "aten": dict(aten.most_common())}


# -- measuring ------------------------------------------------------------------------------


class Progress:
    """A line per step on stderr: steps done of all, elapsed, and the time left at the
    average pace so far."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.began = total, 0, time.perf_counter()

    def step(self, text: str) -> None:
        self.done += 1
        elapsed = time.perf_counter() - self.began
        left = elapsed / self.done * max(self.total - self.done, 0)
        print(f"[{self.done}/{self.total} {elapsed:5.0f}s, ~{left:.0f}s left] {text}", file=sys.stderr, flush=True)


def _detach(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _detach(v) for k, v in value.items()}
    return value.detach() if isinstance(value, torch.Tensor) else value


def agreement(workload: str, got: Any, reference: Any) -> dict[str, Any]:
    if workload == "forward":
        got, reference = got.double(), reference.double()
        diff = float((got - reference).abs().max()) if got.numel() else 0.0
        scale = float(reference.abs().max()) if reference.numel() else 0.0
        return {"logits_max_abs_diff": diff, "logits_max_rel_diff": diff / scale if scale else diff,
                "logits_rel_error": llama_bench.relative_error(got, reference)}
    if workload.startswith("generate"):
        equal = got.shape == reference.shape and bool(torch.equal(got, reference))
        return {"tokens_equal": equal}
    loss, ref_loss = float(got["loss"]), float(reference["loss"])
    norm, ref_norm = float(got["grad_norm"]), float(reference["grad_norm"])
    return {"loss": loss, "loss_abs_diff": abs(loss - ref_loss),
            "grad_norm_rel_diff": abs(norm - ref_norm) / ref_norm if ref_norm else abs(norm)}


def measure(case: Case, providers: list[str], args: argparse.Namespace, device: torch.device,
            progress: Progress) -> list[dict[str, Any]]:
    """Warm-up, then ``args.rounds`` rounds with the providers taking turns, then gems once
    more under the profiler; a provider that fails keeps its error and drops out."""
    clock = llama_bench.Clock(device)
    rows = {p: {"model": case.model, "workload": case.workload, "batch": case.batch, "provider": p,
                "ms_runs": [], "peak_mem_mib": None} for p in providers}
    outputs: dict[str, Any] = {}
    label = f"{case.model} {case.workload} b{case.batch}"

    def attempt(provider: str, phase: str, timed: bool) -> None:
        row = rows[provider]
        if "error" in row:
            progress.step(f"{label} {provider} {phase}: skipped (failed before)")
            return
        try:
            case.prepare()
            if device.type == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            with provider_context(provider):
                if timed:
                    with clock.region(row["ms_runs"]):
                        out = case.run()
                else:
                    out = case.run()
            outputs[provider] = _detach(out)
            if device.type == "cuda":
                # the timed rounds' peak (steady state); the warm-ups' apart: gems compiles
                # and tunes there, and tuning allocates scratch outputs and a cache-flush buffer
                field = "peak_mem_mib" if timed else "warmup_peak_mem_mib"
                peak = torch.cuda.max_memory_allocated() / 2**20
                row[field] = max(row.get(field) or 0.0, peak)
            took = f"{row['ms_runs'][-1]:.2f} ms" if timed else "done"
        except Exception as exc:  # noqa: BLE001 - one provider failing is a result
            row["error"] = f"{type(exc).__name__}: {exc}"[:500]
            took = f"error: {row['error'][:120]}"
        progress.step(f"{label} {provider} {phase}: {took}")

    for index in range(args.warmup):
        for provider in providers:
            attempt(provider, "warm-up" if args.warmup == 1 else f"warm-up {index + 1}", False)
    for index in range(args.rounds):
        for provider in providers:
            attempt(provider, f"round {index + 1}", True)
    if "gems" in rows:
        diagnose(case, rows["gems"], device)
        progress.step(f"{label} gems profiled")
    curves = trajectories(case, rows, args.train_steps, progress, label)
    reference = next((outputs[p] for p in providers if p.startswith("aten") and p in outputs), None)
    for provider, row in rows.items():
        if row["ms_runs"] and "error" not in row:
            row["ms"] = statistics.median(row["ms_runs"])
            row["ms_best"] = min(row["ms_runs"])
        if provider in outputs and reference is not None and "error" not in row:
            row["agreement"] = agreement(case.workload, outputs[provider], reference)
    reference_curve = next((curves[p] for p in providers if p.startswith("aten") and p in curves), None)
    for provider, curve in curves.items():
        rows[provider]["train_losses"] = curve
        if reference_curve is not None:
            rows[provider].setdefault("agreement", {})["loss_curve_max_rel_diff"] = max(
                (abs(a - b) / abs(b) if b else abs(a) for a, b in zip(curve, reference_curve)), default=0.0)
    return list(rows.values())


def trajectories(case: Case, rows: dict[str, dict[str, Any]], steps: int, progress: Progress,
                 label: str) -> dict[str, list[float]]:
    """Each provider's losses over ``steps`` training steps from the same initial weights
    (untimed; ``--train-steps``)."""
    curves: dict[str, list[float]] = {}
    if not steps or case.trajectory is None:
        return curves
    for provider, row in rows.items():
        if "error" in row:
            continue
        try:
            with provider_context(provider):
                curves[provider] = case.trajectory(steps)
            took = f"loss {curves[provider][0]:.4f} -> {curves[provider][-1]:.4f}"
        except Exception as exc:  # noqa: BLE001 - the timings stand without it
            row["trajectory_error"] = f"{type(exc).__name__}: {exc}"[:500]
            took = f"error: {row['trajectory_error'][:120]}"
        progress.step(f"{label} {provider} {steps} steps: {took}")
    return curves


def diagnose(case: Case, row: dict[str, Any], device: torch.device) -> None:
    """One more gems run under the profiler: the Triton share of GPU kernel time, kernel time
    by category, and the ATen ops that ran on ATen."""
    if "error" in row:
        return
    try:
        case.prepare()
        with gems_core.use_gems(), OpWatch() as watch:
            case.run()
        on_gpu = device.type == "cuda"
        source, records = llama_bench.phase_records(watch.profiler.events(), on_gpu)
        summary = llama_bench.summarize_phase(
            case.workload, 1, source, records, llama_bench.triton_kernel_names() if on_gpu else None)
        ops = watch.report()
    except Exception as exc:  # noqa: BLE001 - the timings stand without it
        row["diagnose_error"] = f"{type(exc).__name__}: {exc}"[:500]
        return
    row.update({
        "gems_kernel_share": summary["triton_share"],
        "kernel_us_by_category": summary["categories_us"],
        "top_kernels": [{k: r[k] for k in ("kernel", "op", "calls", "total_us", "triton")}
                        for r in summary["kernels"][:8]],
        "ops_served": ops["served"],
        "ops_on_aten": ops["aten"],
    })


# -- the command line -----------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    names = lambda text: [x for x in text.split(",") if x]  # noqa: E731
    parser.add_argument("--models", type=names, default=list(MODELS), help=f"of {','.join(MODELS)}")
    parser.add_argument("--workloads", type=names, default=list(WORKLOADS), help=f"of {','.join(WORKLOADS)}")
    parser.add_argument("--providers", type=names, default=None,
                        help="of aten (every SDPA backend), aten-math, aten-efficient, aten-flash, aten-cudnn, gems")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds after the warm-up (default 3)")
    parser.add_argument("--warmup", type=int, default=2,
                        help="untimed runs per provider before the rounds (default 2: a training step's second "
                        "optimizer step meets kernels its first does not)")
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens generate() adds (default 32)")
    parser.add_argument("--generate-batches", type=lambda t: [int(x) for x in names(t)], default=[1, 8],
                        help="batches of the generate workloads (default 1,8)")
    parser.add_argument("--device", default=None, help="the selected backend's device unless given (cpu, cuda)")
    parser.add_argument("--dtype", type=lambda t: getattr(torch, t), default=None,
                        help="of the inference models (default bfloat16 on a GPU, BERT float16; float32 on the CPU)")
    parser.add_argument("--train-autocast", type=lambda t: "none" if t == "none" else getattr(torch, t),
                        default=None, help="autocast dtype of the training step, or none (default bfloat16 on a GPU, "
                        "none on the CPU)")
    parser.add_argument("--train-steps", type=int, default=0,
                        help="also run this many training steps per provider from the same weights (untimed) and "
                        "compare the loss curves (default 0: off)")
    parser.add_argument("--tiny", action="store_true", help="tiny configs, seconds on the cpu backend")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write JSON lines here")
    args = parser.parse_args(argv)
    for value, known, what in ((args.models, MODELS, "model"), (args.workloads, WORKLOADS, "workload")):
        unknown = [v for v in value if v not in known]
        if unknown:
            parser.error(f"unknown {what} {', '.join(unknown)} (of {', '.join(known)})")
    return args


def environment(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    import triton

    versions = {}
    for package in ("transformers", "torchvision"):
        try:
            versions[package] = __import__(package).__version__
        except Exception as exc:  # noqa: BLE001 - an optional package that does not import
            versions[package] = f"unavailable ({type(exc).__name__})"
    return {"kind": "environment", "benchmark": "models",
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
            "backend": gems_core.backend().name, "torch": torch.__version__, "triton": triton.__version__,
            "gems": gems_core.__version__, **versions, "tiny": args.tiny, "rounds": args.rounds, "warmup": args.warmup,
            "new_tokens": 3 if args.tiny else args.new_tokens, "seed": args.seed}


def _available(spec: ModelSpec) -> str | None:
    """Why ``spec`` cannot be built here, or None."""
    package = "torchvision" if spec.name == "resnet50" else "transformers"
    try:
        __import__(package)
    except Exception as exc:  # noqa: BLE001 - torchvision may fail to import beside this torch
        return f"{package} does not import: {type(exc).__name__}: {exc}"[:300]
    return None


def planned_steps(specs: list[ModelSpec], args: argparse.Namespace, device: torch.device) -> int:
    steps = 0
    for spec in specs:
        providers = len(providers_for(spec, device, args.providers))
        cases = 0
        for workload in args.workloads:
            if workload.startswith("generate"):
                cases += (1 if args.tiny else len(args.generate_batches)) if spec.kind == "decoder" else 0
            else:
                cases += 1
        steps += cases * (providers * (args.warmup + args.rounds) + 1)
        if args.train_steps and "train" in args.workloads:
            steps += providers  # each provider's loss curve
    return steps


def run(args: argparse.Namespace, emit: Callable[[dict[str, Any]], None]) -> list[dict[str, Any]]:
    device = torch.device(args.device or gems_core.device)
    emit(environment(args, device))
    specs = []
    results: list[dict[str, Any]] = []
    for name in args.models:
        why = _available(MODELS[name])
        if why:
            print(f"{name}: skipped, {why}", file=sys.stderr)
            row = {"kind": "skipped", "model": name, "reason": why}
            results.append(row)
            emit(row)
        else:
            specs.append(MODELS[name])
    progress = Progress(planned_steps(specs, args, device))
    print(f"{progress.total} steps planned ({len(specs)} models, {args.rounds} rounds)", file=sys.stderr)
    for spec in specs:
        providers = providers_for(spec, device, args.providers)
        cases = make_cases(spec, args, device)
        while True:
            try:
                case = next(cases)
            except StopIteration:
                break
            except Exception as exc:  # noqa: BLE001 - a model that fails to build is a result
                row = {"kind": "result", "model": spec.name, "error": f"{type(exc).__name__}: {exc}"[:500]}
                results.append(row)
                emit(row)
                break
            for row in measure(case, providers, args, device, progress):
                row = {"kind": "result", **row}
                results.append(row)
                emit(row)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return results


def summary(results: list[dict[str, Any]]) -> str:
    """A line per case: ATen's fastest provider, gems, the speedup, agreement, the Triton share
    and the ops that ran on ATen."""
    cases: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    lines = []
    for row in results:
        if row["kind"] == "skipped":
            lines.append(f"{row['model']}: skipped ({row['reason']})")
        elif "workload" not in row:
            lines.append(f"{row['model']}: error {row['error']}")
        else:
            cases.setdefault((row["model"], row["workload"], row["batch"]), []).append(row)
    lines.append(f"{'model':<10}{'workload':<17}{'batch':>6}{'aten best':>22}{'gems ms':>10}{'x':>7}"
                 f"{'agreement':>24}{'triton':>8}  ran on ATen under gems")
    for (model, workload, batch), rows in cases.items():
        aten = [r for r in rows if r["provider"].startswith("aten") and "ms" in r]
        best = min(aten, key=lambda r: r["ms"], default=None)
        gems = next((r for r in rows if r["provider"] == "gems"), {})
        best_text = f"{best['ms']:.2f} ({best['provider'].removeprefix('aten-')})" if best else "-"
        gems_text = f"{gems['ms']:.2f}" if "ms" in gems else "error" if "error" in gems else "-"
        ratio = f"{best['ms'] / gems['ms']:.2f}" if best and "ms" in gems else "-"
        agree = gems.get("agreement", {})
        if "tokens_equal" in agree:
            agree_text = "tokens equal" if agree["tokens_equal"] else "tokens differ"
        elif "logits_max_abs_diff" in agree:
            agree_text = f"max|d| {agree['logits_max_abs_diff']:.1e}"
        elif "loss_curve_max_rel_diff" in agree:
            agree_text = f"{len(gems['train_losses'])} losses rel {agree['loss_curve_max_rel_diff']:.1e}"
        elif "loss_abs_diff" in agree:
            agree_text = f"loss d {agree['loss_abs_diff']:.1e}"
        else:
            agree_text = "-"
        share = gems.get("gems_kernel_share")
        share_text = f"{share:.0%}" if share is not None else "-"
        aten_ops = ", ".join(f"{op} {n}" for op, n in list(gems.get("ops_on_aten", {}).items())[:6])
        lines.append(f"{model:<10}{workload:<17}{batch:>6}{best_text:>22}{gems_text:>10}{ratio:>7}"
                     f"{agree_text:>24}{share_text:>8}  {aten_ops or '-'}")
        for r in rows:
            if "error" in r:
                lines.append(f"    {r['provider']}: {r['error'][:200]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = open(args.out, "w") if args.out else None  # each result is written as it comes
    try:
        def emit(row: dict[str, Any]) -> None:
            if out is not None:
                out.write(json.dumps(row, default=str) + "\n")
                out.flush()

        results = run(args, emit)
    finally:
        if out is not None:
            out.close()
    print(summary(results))
    return 1 if any("error" in r for r in results if r.get("provider") == "gems" or "workload" not in r) else 0


if __name__ == "__main__":
    os.environ["GEMS_COMPILE"] = "sync"  # gems' kernels serve from the first call: none is timed on ATen
    sys.exit(main())
