"""End-to-end latency of a Llama-3-8B-shaped decoder: ATen vs gems, in one process.

    python benchmarks/llama.py                          # 8 layers, batch 2, prompt 512, 256 steps
    python benchmarks/llama.py --layers 32 --json llama.json
    python benchmarks/llama.py --providers gems --decode-steps 64
    python benchmarks/llama.py --quick                  # tiny sizes (runs on the cpu backend)
    python benchmarks/llama.py --kernels 20             # the top 20 kernels per provider and phase

The model is built from torch modules on random weights (nothing downloaded): hidden 4096,
32 query heads and 8 key/value heads of dim 128, SwiGLU MLP of 14336 (examples/llama.py's
``Mlp``: one gate+up projection), RMSNorm, rotary position embedding, vocab 32000, attention
through ``F.scaled_dot_product_attention(enable_gqa=True)`` over a static, preallocated KV
cache. Eager mode, bf16 on CUDA (fp32 on the cpu backend). The decode tokens are fixed in
advance (not sampled), so every provider sees the same inputs.

Providers: ``aten`` (PyTorch, default SDPA backend), ``aten-flash`` (SDPA restricted to
FlashAttention), ``gems`` (the same model under ``gems_core.use_gems()``), ``gems-fused`` (under
``use_gems()``, written with gems' fused ops: residual add + RMSNorm, rotary embedding and
SwiGLU's activation each one kernel; the same function, fewer calls). Per provider: prefill
ms (the prompt), decode ms per token (CUDA events, the median of ``--repeat`` generations,
each timing in the JSON, after two warm-up generations of every provider: the first
compiles and tunes gems' kernels, the second is recorded by gems' native dispatch layer),
the relative error (Frobenius) of the final logits
against the ``aten`` provider's, and the share of GPU kernel time spent in Triton (gems)
kernels over a few profiled decode steps, with the largest kernels of each kind. On CUDA also
the host's cost to issue one prefill and one decode step while a sleep kernel queued first
keeps the GPU busy (``host_prefill_ms``, ``host_decode_ms``). That is the host path with the
launches queued behind running work, not the host time of an idle GPU: on the H100 ATen's
calls cost more so (its decode step 10-13 ms to issue, 5.6-6.3 ms when timed end to end).

For gems providers on a GPU, ``python_path`` lists per phase (one prefill, one decode step)
the ops whose calls ran gems' Python kernels rather than a replay of the native dispatch
layer, and how many replays there were: what is left of the host path to move.

Which kernels lose (``--kernels N``, default 12; 0 turns it off): per provider, one more
prefill and the ``--profile-steps`` decode steps run under torch.profiler, and each phase's
kernels are listed by total GPU time (short name, the op they ran under, category, calls,
total µs, µs/call, share of the phase), the top N printed, all in the JSON
(``kernel_breakdown``). Kernels fall into categories (gemm, attention, norm,
pointwise/activation, rotary, embedding/index, copy/cat, other) by the names of the ops
around them (aten::linear, aten::rms_norm, aten::scaled_dot_product_attention, gems::*, a
``rotary`` profiler label the model sets only while profiling) and by their own names:
ATen's (cuBLAS sm90_xmma/nvjet, CUTLASS, flash, cuDNN sdpa, TensorIterator elementwise, ...)
and gems' Triton kernels alike. A table per phase puts the providers' µs by category side
by side (``kernel_categories``: prefill per prompt, decode per step). On the cpu backend
the same breakdown lists CPU ops by self time instead of GPU kernels.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import statistics
import sys
import time
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

import gems_core
from gems_core import fused as gems_fused

#: --grad-mode: the autograd state a generation runs under
GRAD_MODES = {"enabled": nullcontext, "no_grad": torch.no_grad, "inference": torch.inference_mode}

PROVIDERS = ("aten", "aten-flash", "gems", "gems-fused")


def _example_module() -> Any:
    """examples/llama.py (its LlamaConfig, rope_tables and Mlp), imported by path: this
    file's own name would shadow it on sys.path."""
    name = "gems_examples_llama"
    if name in sys.modules:
        return sys.modules[name]
    path = Path(__file__).resolve().parent.parent / "examples" / "llama.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_example = _example_module()
LlamaConfig = _example.LlamaConfig
rope_tables = _example.rope_tables
Mlp = _example.Mlp


# -- the model ------------------------------------------------------------------------------

#: profiler labels around parts of the model that are no single op, for the kernel breakdown
_LABELS = ("rotary",)


def _label(name: str) -> Any:
    """A profiler label (``torch.profiler.record_function``) while a profiler runs, nothing
    otherwise: the timed generations do not pay for it."""
    if torch.autograd._profiler_enabled():
        return torch.profiler.record_function(name)
    return nullcontext()


class CachedAttention(nn.Module):
    """Grouped-query attention with a static KV cache of ``max_positions`` positions."""

    def __init__(self, config: Any, batch: int) -> None:
        super().__init__()
        self.heads, self.kv_heads = config.heads, config.kv_heads
        self.head_dim = config.hidden // config.heads
        self.q_proj = nn.Linear(config.hidden, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.hidden, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.hidden, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, config.hidden, bias=False)
        cache = (batch, self.kv_heads, config.max_positions, self.head_dim)
        self.register_buffer("k_cache", torch.zeros(cache), persistent=False)
        self.register_buffer("v_cache", torch.zeros(cache), persistent=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                positions: torch.Tensor, start: int, fused: bool = False) -> torch.Tensor:
        batch, seq, _ = x.shape
        q = self.q_proj(x).view(batch, seq, self.heads, self.head_dim)
        k = self.k_proj(x).view(batch, seq, self.kv_heads, self.head_dim)
        v = self.v_proj(x).view(batch, seq, self.kv_heads, self.head_dim)
        rope = (gems_fused.apply_rotary_position_embedding if fused
                else gems_fused.apply_rotary_position_embedding_reference)
        with _label("rotary"):
            q, k = rope(q, k, cos, sin, positions)
        end = start + seq
        self.k_cache[:, :, start:end] = k.transpose(1, 2)
        self.v_cache[:, :, start:end] = v.transpose(1, 2)
        # a prompt starts at 0 (causal, top-left aligned); one new token attends everything
        assert seq == 1 or start == 0, "chunked prefill is not modelled"
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), self.k_cache[:, :, :end], self.v_cache[:, :, :end],
            is_causal=seq > 1, enable_gqa=True,
        )
        return self.o_proj(out.transpose(1, 2).reshape(batch, seq, -1))


class Block(nn.Module):
    def __init__(self, config: Any, batch: int) -> None:
        super().__init__()
        self.input_norm = nn.RMSNorm(config.hidden, eps=config.eps)
        self.attention = CachedAttention(config, batch)
        self.post_attention_norm = nn.RMSNorm(config.hidden, eps=config.eps)
        self.mlp = Mlp(config)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                positions: torch.Tensor, start: int) -> torch.Tensor:
        x = x + self.attention(self.input_norm(x), cos, sin, positions, start)
        return x + self.mlp(self.post_attention_norm(x), False)


class CachedLlama(nn.Module):
    """(batch, seq) tokens at positions start.. -> (batch, vocab) logits of the last one."""

    def __init__(self, config: Any, batch: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(config.vocab, config.hidden)
        self.layers = nn.ModuleList(Block(config, batch) for _ in range(config.layers))
        self.norm = nn.RMSNorm(config.hidden, eps=config.eps)
        self.lm_head = nn.Linear(config.hidden, config.vocab, bias=False)
        cos, sin = rope_tables(config)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

        #: the gems-fused provider's form: the same function through gems' fused ops
        self.fused = False

    def forward(self, tokens: torch.Tensor, start: int) -> torch.Tensor:
        positions = torch.arange(start, start + tokens.shape[1], device=tokens.device)
        x = self.embed(tokens)
        if not self.fused:
            for layer in self.layers:
                x = layer(x, self.cos, self.sin, positions, start)
            return self.lm_head(self.norm(x[:, -1]))
        # each residual add folded into the RMSNorm after it (skip_rms_norm), rotary
        # embedding and SwiGLU's activation each one kernel
        residual, eps = x, self.norm.eps
        h = self.layers[0].input_norm(residual)
        following = [layer.input_norm for layer in self.layers[1:]] + [self.norm]
        for layer, next_norm in zip(self.layers, following):
            attended = layer.attention(h, self.cos, self.sin, positions, start, fused=True)
            h, residual = gems_fused.skip_rms_norm(attended, residual, layer.post_attention_norm.weight, eps)
            h, residual = gems_fused.skip_rms_norm(layer.mlp(h, True), residual, next_norm.weight, eps)
        return self.lm_head(h[:, -1])


# -- measuring ------------------------------------------------------------------------------


class Clock:
    """Elapsed milliseconds of a region: CUDA events on a GPU, wall clock on the CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    @contextmanager
    def region(self, out: list[float]) -> Iterator[None]:
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end))
        else:
            began = time.perf_counter()
            yield
            out.append((time.perf_counter() - began) * 1e3)


@contextmanager
def provider_context(name: str) -> Iterator[None]:
    with ExitStack() as stack:
        if name == "aten-flash":
            from torch.nn.attention import SDPBackend, sdpa_kernel

            stack.enter_context(sdpa_kernel(SDPBackend.FLASH_ATTENTION))
        elif name in ("gems", "gems-fused"):
            stack.enter_context(gems_core.use_gems())
        elif name != "aten":
            raise ValueError(f"unknown provider {name!r} (one of {', '.join(PROVIDERS)})")
        yield


def generate(model: CachedLlama, prompt: torch.Tensor, steps: torch.Tensor, clock: Clock,
             prefill_ms: list[float], decode_ms: list[float]) -> torch.Tensor:
    """Prefill the prompt, then one decode step per row of ``steps`` (teacher-forced);
    appends the timings and returns the last step's logits."""
    with clock.region(prefill_ms):
        logits = model(prompt, 0)
    if len(steps):
        with clock.region(decode_ms):
            for i, token in enumerate(steps):
                logits = model(token, prompt.shape[1] + i)
        decode_ms[-1] /= len(steps)
    return logits


def triton_kernel_names() -> set[str]:
    """Names of the Triton and Gluon kernels gems and its backends define (the CUDA symbol is
    the function's name)."""
    names = {"pointwise_kernel"}  # codegen's generated kernels
    for module_name, module in list(sys.modules.items()):
        if not module_name.startswith(("gems_core", "gems_backend_")) or module is None:
            continue
        for value in list(vars(module).values()):
            fn = getattr(value, "fn", None)
            if callable(fn) and hasattr(value, "run") and getattr(fn, "__name__", None):
                names.add(fn.__name__)
    return names


def is_triton_kernel(name: str, known: set[str]) -> bool:
    return name in known or name.startswith("triton_")


# -- the kernel breakdown -------------------------------------------------------------------

CATEGORIES = ("gemm", "attention", "norm", "pointwise/activation", "rotary", "embedding/index",
              "copy/cat", "other")

#: (category, pattern) over a lowercased kernel or op name, first match wins: ATen's CUDA
#: kernels (cuBLAS/cuBLASLt, CUTLASS, FlashAttention, cuDNN, TensorIterator), gems' Triton
#: kernels (gems_core/ops, gems_core/fused, codegen's pointwise_kernel) and, on the CPU, op
#: names (aten::mm, gems::skip_rms_norm, ...). Attention before GEMM: flash and cuDNN kernels
#: carry cutlass/wgmma in their names.
_CATEGORY_PATTERNS = tuple((category, re.compile(pattern)) for category, pattern in (
    ("rotary", r"rotary|rope\b|rope_"),
    ("attention", r"flash|fmha|attention|attn|sdpa|softmax"),
    ("norm", r"norm(?!al)"),
    ("gemm", r"gemm|gemv|cutlass|cublas|xmma|nvjet|wgmma|matmul|_mm_|\bmm_|bmm|split_?k"
             r"|^aten::(mm|addmm|bmm|baddbmm|linear)$"),
    ("embedding/index", r"embedding|index|gather|scatter|arange"),
    ("copy/cat", r"copy|memcpy|memset|(^|::|_)cat(\b|_|array)|concat|clone|contiguous"
                 r"|^aten::(to|expand_as|repeat_interleave)$"),
    ("pointwise/activation", r"elementwise|pointwise|functor|silu|gelu|relu|sigmoid|tanh|activation"
                             r"|^aten::(add|sub|mul|div|neg|rsqrt|sqrt|exp|pow|where|clamp|fill|"
                             r"reciprocal|cos|sin|masked_fill|type_as)_?$"),
))

#: categories that say what a kernel is (a GEMM) but not which part of the model it serves
#: (a copy or an elementwise kernel can be a rotary embedding's, an attention's, ...)
_GENERIC = frozenset({"pointwise/activation", "copy/cat", "other"})


def name_category(name: str) -> str:
    lowered = name.lower()
    for category, pattern in _CATEGORY_PATTERNS:
        if pattern.search(lowered):
            return category
    return "other"


def kernel_category(name: str, context: tuple[str, ...] = ()) -> str:
    """The category of a kernel (or, on the CPU, an op) by name, given the ops (and
    profiler labels) it ran inside, outermost first. The outermost enclosing op that names a
    part of the model decides (aten::linear: gemm; aten::rms_norm: norm; the ``rotary``
    label: rotary; aten::scaled_dot_product_attention: attention); without one, the kernel's
    own name; a generic name (elementwise, copy) takes the launching op's category instead
    (gems' pointwise_kernel under aten::copy_: copy/cat)."""
    categories = [name_category(op) for op in context]
    for category in categories:
        if category not in _GENERIC:
            return category
    own = name_category(name)
    if own in _GENERIC and categories and categories[-1] != "other":
        return categories[-1]
    return own


_STOP_IDENTIFIERS = frozenset({
    "gpu_kernel_impl", "gpu_kernel_impl_nocast", "BinaryFunctor", "AUnaryFunctor",
    "BUnaryFunctor", "ReduceOp", "Kernel", "Kernel2", "device_kernel",
})
_INFORMATIVE = re.compile(r"Functor|Ops$|_kernel$|_cuda$")


def short_kernel_name(name: str, width: int = 96) -> str:
    """A C++ kernel symbol without its namespaces, argument list and most template
    arguments: ``void at::native::vectorized_elementwise_kernel<4, at::native::
    CUDAFunctor_add<c10::BFloat16>, ...>(...)`` -> ``vectorized_elementwise_kernel<CUDAFunctor_add>``;
    CUTLASS's ``Kernel2<cutlass_80_..._gemm_...>`` -> its template argument. Plain names
    (Triton kernels, cuBLAS's sm90_xmma_*, CPU ops) stay as they are; all cut to ``width``."""
    text = name.strip()
    if text.startswith("void "):
        text = text[5:]
    text = text.replace("(anonymous namespace)::", "")
    head = re.match(r"[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*", text)
    if head and text[head.end():head.end() + 1] in ("<", "("):
        base = head.group(0).rsplit("::", 1)[-1]
        rest = text[head.end():]
        detail = None
        if rest.startswith("<"):
            qualified = re.findall(r"[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*", rest)
            idents = [q.rsplit("::", 1)[-1] for q in qualified]
            if base in ("Kernel", "Kernel2", "device_kernel", "kernel") and idents:
                base = idents[0]  # CUTLASS: the template argument names the kernel
            else:
                detail = next((i for i in idents
                               if i not in _STOP_IDENTIFIERS and _INFORMATIVE.search(i)), None)
        text = f"{base}<{detail}>" if detail else base
    return text if len(text) <= width else text[:width - 1] + "…"


def _op_chain(event: Any) -> tuple[str, ...]:
    """The names of an event's enclosing CPU events (ops, profiler labels), outermost first."""
    chain = []
    parent = getattr(event, "cpu_parent", None)
    while parent is not None:
        chain.append(parent.name)
        parent = getattr(parent, "cpu_parent", None)
    return tuple(reversed(chain))


def phase_records(events: Any, on_gpu: bool) -> tuple[str, list[tuple[str, tuple[str, ...], int, float]]]:
    """(source, records) from a profiler's events: a record is (kernel name, its ops'
    context outermost first, calls, µs). On a GPU each device kernel (and memcpy/memset),
    attached to the op that launched it with that op's enclosing ops; a kernel the profiler
    could not attach keeps an empty context. Elsewhere (the cpu backend) each CPU op with
    its self time, the ops around it as its context; profiler labels are context only."""
    from torch.autograd import DeviceType

    records: list[tuple[str, tuple[str, ...], int, float]] = []
    if not on_gpu:
        for event in events:
            if event.device_type != DeviceType.CPU or getattr(event, "is_user_annotation", False):
                continue
            if event.name in _LABELS:
                continue
            records.append((event.name, _op_chain(event), 1, float(event.self_cpu_time_total)))
        return "cpu ops (self time)", records
    device_calls: dict[str, int] = {}
    device_us: dict[str, float] = {}
    linked_calls: dict[str, int] = {}
    linked_us: dict[str, float] = {}
    for event in events:
        if event.device_type == DeviceType.CPU:
            if getattr(event, "is_legacy", False) or not getattr(event, "kernels", None):
                continue
            context = _op_chain(event) + (event.name,)
            for kernel in event.kernels:
                if kernel.name == event.name or kernel.name in _LABELS:
                    continue  # a label's span on the GPU's timeline, no kernel
                records.append((kernel.name, context, 1, float(kernel.duration)))
                linked_calls[kernel.name] = linked_calls.get(kernel.name, 0) + 1
                linked_us[kernel.name] = linked_us.get(kernel.name, 0.0) + kernel.duration
        elif event.device_type == DeviceType.CUDA:
            if getattr(event, "is_user_annotation", False) or event.name in _LABELS:
                continue
            device_calls[event.name] = device_calls.get(event.name, 0) + 1
            device_us[event.name] = device_us.get(event.name, 0.0) + event.time_range.elapsed_us()
    for name, calls in device_calls.items():
        left = calls - linked_calls.get(name, 0)
        if left > 0:
            records.append((name, (), left, max(device_us[name] - linked_us.get(name, 0.0), 0.0)))
    return "gpu kernels", records


def summarize_phase(phase: str, steps: int, source: str,
                    records: list[tuple[str, tuple[str, ...], int, float]],
                    known: set[str] | None) -> dict[str, Any]:
    """The breakdown of one profiled phase: every kernel (grouped by short name and the
    op it ran under) with calls, total µs, µs/call, share and category, sorted by time; µs
    per category; the Triton (gems) share of the time (GPU only: ``known`` None)."""
    groups: dict[tuple[str, str | None, str | None, str], dict[str, Any]] = {}
    for name, context, calls, us in records:
        op = context[0] if context else None
        launched_by = context[-1] if context else None
        key = (short_kernel_name(name), op, launched_by, kernel_category(name, context))
        row = groups.get(key)
        if row is None:
            row = groups[key] = {
                "kernel": key[0], "op": op, "launched_by": launched_by, "category": key[3],
                "triton": None if known is None else is_triton_kernel(name, known),
                "calls": 0, "total_us": 0.0,
            }
        row["calls"] += calls
        row["total_us"] += us
    total = sum(row["total_us"] for row in groups.values())
    rows = sorted(groups.values(), key=lambda row: (-row["total_us"], row["kernel"]))
    for row in rows:
        row["us_per_call"] = row["total_us"] / row["calls"] if row["calls"] else 0.0
        row["share"] = row["total_us"] / total if total else 0.0
    categories = {c: 0.0 for c in CATEGORIES}
    for row in rows:
        categories[row["category"]] += row["total_us"]
    triton_us = sum(row["total_us"] for row in rows if row["triton"])
    return {
        "phase": phase,
        "steps": steps,
        "source": source,
        "total_us": total,
        "us_per_step": total / steps if steps else 0.0,
        "triton_share": (triton_us / total if total else 0.0) if known is not None else None,
        "categories_us": categories,
        "categories_us_per_step": {c: us / steps if steps else 0.0 for c, us in categories.items()},
        "kernels": rows,
    }


def profile_phase(model: CachedLlama, prompt: torch.Tensor, steps: torch.Tensor, phase: str,
                  count: int = 1) -> dict[str, Any] | None:
    """Profile one prefill (``phase`` "prefill") or ``count`` decode steps after the prompt
    (torch.profiler, CPU and, on CUDA, the GPU's activity) and summarize them by kernel and
    category (``summarize_phase``). None for no decode steps."""
    from torch.profiler import ProfilerActivity, profile

    on_gpu = prompt.device.type == "cuda"
    if phase == "decode":
        count = min(count, len(steps))
    else:
        count = 1
    if count <= 0:
        return None
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=activities) as prof:
        if phase == "prefill":
            model(prompt, 0)
        else:
            for i, token in enumerate(steps[:count]):
                model(token, prompt.shape[1] + i)
        if on_gpu:
            torch.cuda.synchronize()
    source, records = phase_records(prof.events(), on_gpu)
    return summarize_phase(phase, count, source, records, triton_kernel_names() if on_gpu else None)


def kernel_share(decode: dict[str, Any] | None) -> dict[str, Any] | None:
    """GPU kernel time of the profiled decode steps by kind (Triton or other), with the
    largest kernels of each kind; None off CUDA."""
    if decode is None or decode["triton_share"] is None:
        return None
    steps = decode["steps"]

    def top(triton: bool) -> list[dict[str, Any]]:
        per_kernel: dict[str, float] = {}
        for row in decode["kernels"]:
            if row["triton"] == triton:
                per_kernel[row["kernel"]] = per_kernel.get(row["kernel"], 0.0) + row["total_us"]
        ranked = sorted(per_kernel.items(), key=lambda item: -item[1])[:8]
        return [{"kernel": name, "us_per_step": us / steps} for name, us in ranked]

    return {
        "steps": steps,
        "kernel_us_per_step": decode["us_per_step"],
        "triton_share": decode["triton_share"],
        "top_triton": top(True),
        "top_other": top(False),
    }


def host_profile(model: CachedLlama, prompt: torch.Tensor, steps: torch.Tensor, count: int) -> str:
    """Where the host's time goes over ``count`` decode steps and over two prefills: self CPU
    time per ATen op (torch.profiler) and per Python function (cProfile), as text."""
    import cProfile
    import io
    import pstats

    from torch.profiler import ProfilerActivity, profile

    def run_steps() -> None:
        for i, token in enumerate(steps[:count]):
            model(token, prompt.shape[1] + i)
        if prompt.device.type == "cuda":
            torch.cuda.synchronize()

    def run_prefills() -> None:
        for _ in range(2):
            model(prompt, 0)
        if prompt.device.type == "cuda":
            torch.cuda.synchronize()

    text = io.StringIO()
    for title, run in ((f"{count} decode steps", run_steps), ("two prefills", run_prefills)):
        text.write(f"== {title}\n")
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            run()
        text.write(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))
        profiler = cProfile.Profile()
        profiler.enable()
        run()
        profiler.disable()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(40)
    return text.getvalue()


def host_issue_ms(model: CachedLlama, prompt: torch.Tensor, steps: torch.Tensor,
                  count: int = 8) -> tuple[float, float] | None:
    """(prefill, decode step) host milliseconds: the time to issue one prefill, and one
    decode step (the median over ``count`` steps), while a sleep kernel queued first keeps
    the GPU busy, so the host never waits for it: the host path alone, comparable between
    providers whatever their GPU time. None off CUDA."""
    if prompt.device.type != "cuda":
        return None

    def issue(fn: Any, sleep_ms: float) -> float:
        torch.cuda.synchronize()
        torch.cuda._sleep(int(sleep_ms * 2e6))  # cycles at about 2 GHz
        began = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - began
        torch.cuda.synchronize()
        return elapsed * 1e3

    prefills = [issue(lambda: model(prompt, 0), 60) for _ in range(3)]
    decode = [issue(lambda i=i, token=token: model(token, prompt.shape[1] + i), 30)
              for i, token in enumerate(steps[:count])]
    return statistics.median(prefills), statistics.median(decode)


def python_path(model: CachedLlama, prompt: torch.Tensor, steps: torch.Tensor) -> dict[str, Any] | None:
    """Calls that ran gems' Python kernels rather than a native replay, per phase (one
    prefill, one decode step), by op: what is left of the host path to move into the native
    dispatch layer. None where the layer does not serve (no gems block, the cpu backend)."""
    from gems_core import dispatch

    def snapshot() -> dict[str, tuple[int, int]]:
        return {(s["op"] + (" (gate)" if s.get("gate") else "")): (s.get("python_calls", 0), s.get("hits", 0))
                for s in dispatch.native_stats()}

    if not snapshot():
        return None
    out: dict[str, Any] = {}
    for phase, work in (("prefill", lambda: model(prompt, 0)),
                        ("decode", lambda: model(steps[0], prompt.shape[1]))):
        before = snapshot()
        work()
        after = snapshot()
        grown = {op: (calls - before.get(op, (0, 0))[0], h - before.get(op, (0, 0))[1])
                 for op, (calls, h) in after.items()}
        python = {op: calls for op, (calls, _) in grown.items() if calls}
        hits = sum(h for _, h in grown.values())
        out[phase] = {"native_replays": hits, "python_calls": dict(sorted(python.items()))}
    return out


def relative_error(got: torch.Tensor, reference: torch.Tensor) -> float:
    got, reference = got.double(), reference.double()
    return float(torch.linalg.vector_norm(got - reference) / torch.linalg.vector_norm(reference))


# -- the command line -----------------------------------------------------------------------


QUICK = {"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "intermediate": 96, "vocab": 128,
         "prompt": 8, "decode_steps": 3, "repeat": 1, "profile_steps": 2}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=512, help="prompt length")
    parser.add_argument("--decode-steps", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--intermediate", type=int, default=14336)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--providers", default=None,
                        help=f"comma-separated, of {', '.join(PROVIDERS)} (default: all; "
                        "aten-flash only on CUDA)")
    parser.add_argument("--repeat", type=int, default=3, help="timed generations (median)")
    parser.add_argument("--interleave", action="store_true",
                        help="time the generations in rounds, the providers taking turns (default: "
                        "each provider's back to back: on an H100, taking turns slowed the ATen "
                        "prefill that follows a gems turn about 2x)")
    parser.add_argument("--profile-steps", type=int, default=4, help="decode steps profiled")
    parser.add_argument("--kernels", type=int, default=12, metavar="N",
                        help="per provider, profile one more prefill and the decode steps and "
                        "print the top N kernels of each by time and the time by category "
                        "(0: neither, and no extra prefill)")
    parser.add_argument("--dtype", default=None, help="bfloat16 on CUDA, float32 otherwise")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--grad-mode", choices=sorted(GRAD_MODES), default="inference",
                        help="autograd state of the generation: torch.inference_mode (the default), "
                        "torch.no_grad (as Hugging Face's generate runs) or grad mode enabled")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes: " + ", ".join(f"{k}={v}" for k, v in QUICK.items()))
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--host-profile", metavar="DIR",
                        help="write each provider's host profile of a few decode steps and two prefills here")
    args = parser.parse_args(argv)
    if args.quick:
        for key, value in QUICK.items():
            if parser.get_default(key) == getattr(args, key):  # explicit flags win
                setattr(args, key, value)
    return args


def run(args: argparse.Namespace) -> dict[str, Any]:
    device = torch.device(gems_core.device)
    dtype = getattr(torch, args.dtype) if args.dtype else (
        torch.bfloat16 if device.type == "cuda" else torch.float32)
    config = LlamaConfig(vocab=args.vocab, hidden=args.hidden, layers=args.layers,
                         heads=args.heads, kv_heads=args.kv_heads,
                         intermediate=args.intermediate,
                         max_positions=args.prompt + max(args.decode_steps, args.profile_steps))
    if args.providers:
        providers = [p for p in args.providers.split(",") if p]
    else:
        providers = [p for p in PROVIDERS if p != "aten-flash" or device.type == "cuda"]
    torch.manual_seed(args.seed)
    with torch.device(device):
        model = CachedLlama(config, args.batch).to(dtype).eval()
    model.cos, model.sin = (t.to(device) for t in rope_tables(config))  # tables stay fp32
    g = torch.Generator().manual_seed(args.seed + 1)
    prompt = torch.randint(0, config.vocab, (args.batch, args.prompt), generator=g).to(device)
    steps = torch.randint(0, config.vocab, (args.decode_steps, args.batch, 1), generator=g).to(device)
    clock = Clock(device)

    rows: dict[str, dict[str, Any]] = {name: {"provider": name} for name in providers}
    timings: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in providers}
    last_logits: dict[str, torch.Tensor] = {}
    reference = None

    def attempt(name: str, work: Callable[[], None]) -> None:
        """``work`` in provider ``name``'s context; a failure is that provider's result."""
        if "error" in rows[name]:
            return
        model.fused = name == "gems-fused"
        try:
            with provider_context(name):
                work()
        except Exception as exc:  # noqa: BLE001 - one provider failing is a result
            rows[name]["error"] = f"{type(exc).__name__}: {exc}"[:500]
            print(f"{name}: {rows[name]['error']}")
        finally:
            model.fused = False

    with GRAD_MODES[args.grad_mode]():
        if "aten" not in providers:  # the reference is ATen's, on the same inputs
            reference = generate(model, prompt, steps, clock, [], [])
        # warm-up, two generations: the first compiles and tunes gems' kernels, the second is
        # what the native layer records its recipes from (which later use_gems() blocks of
        # this process start from), so the timed ones see the steady state
        for name in providers:
            attempt(name, lambda: [generate(model, prompt, steps, clock, [], []) for _ in range(2)])
        # each provider's generations back to back, or with --interleave in rounds, the
        # providers taking turns
        repeats = max(args.repeat, 1)
        order = [providers] * repeats if args.interleave else [[name] * repeats for name in providers]
        for turn in order:
            for name in turn:
                def timed(name: str = name) -> None:
                    last_logits[name] = generate(model, prompt, steps, clock, *timings[name])
                attempt(name, timed)
        for name in providers:
            row = rows[name]

            def measure(name: str = name, row: dict[str, Any] = row) -> None:
                breakdown: dict[str, Any] = {}
                if args.kernels > 0:  # one more prefill, profiled
                    breakdown["prefill"] = profile_phase(model, prompt, steps, "prefill")
                decode = None
                if args.kernels > 0 or device.type == "cuda":
                    decode = profile_phase(model, prompt, steps, "decode", args.profile_steps)
                    if args.kernels > 0 and decode is not None:
                        breakdown["decode"] = decode
                share = kernel_share(decode)
                host = host_issue_ms(model, prompt, steps)
                python = python_path(model, prompt, steps) if name.startswith("gems") else None
                if args.host_profile:
                    folder = Path(args.host_profile)
                    folder.mkdir(parents=True, exist_ok=True)
                    (folder / f"{name}-host.txt").write_text(
                        host_profile(model, prompt, steps, max(args.profile_steps, 8)))
                prefill_ms, decode_ms = timings[name]
                row.update({
                    "prefill_ms": statistics.median(prefill_ms),
                    "decode_ms_per_token": statistics.median(decode_ms) if decode_ms else None,
                    "prefill_ms_runs": prefill_ms,
                    "decode_ms_runs": decode_ms,
                    "logits": last_logits[name],
                    "kernels": share,
                    "host_prefill_ms": host[0] if host else None,
                    "host_decode_ms": host[1] if host else None,
                    "python_path": python,
                    "gems_kernel_share": share["triton_share"] if share else None,
                    "kernel_breakdown": breakdown or None,
                })

            attempt(name, measure)
        if "aten" in last_logits:
            reference = last_logits["aten"]
    results = [rows[name] for name in providers]
    for row in results:
        logits = row.pop("logits", None)
        if logits is not None and reference is not None:
            row["logits_rel_error"] = relative_error(logits, reference)
        elif "error" not in row:
            row["logits_rel_error"] = None
        if row.get("decode_ms_per_token"):
            row["decode_tokens_per_s"] = args.batch * 1e3 / row["decode_ms_per_token"]

    import triton

    return {
        "benchmark": "llama",
        "device": torch.cuda.get_device_name() if device.type == "cuda" else platform.processor() or "cpu",
        "backend": gems_core.backend().name,
        "kernel_variants": sorted(gems_core.runtime.current().policy.variants),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "gems": gems_core.__version__,
        "dtype": str(dtype).replace("torch.", ""),
        "grad_mode": args.grad_mode,
        "batch": args.batch,
        "prompt": args.prompt,
        "decode_steps": args.decode_steps,
        "repeat": args.repeat,
        "config": asdict(config),
        "profile_steps": args.profile_steps,
        "top_kernels": args.kernels,
        "results": results,
        "kernel_categories": category_summary(results),
    }


def category_summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per phase, each provider's kernel µs by category (decode: per step), side by side."""
    summary: dict[str, Any] = {}
    for phase, key in (("prefill", "categories_us"), ("decode", "categories_us_per_step")):
        table = {}
        for row in results:
            data = (row.get("kernel_breakdown") or {}).get(phase)
            if data:
                table[row["provider"]] = dict(data[key], total=sum(data[key].values()))
        if table:
            summary[phase] = table
    return summary


def report(payload: dict[str, Any]) -> str:
    c = payload["config"]
    lines = [
        f"llama: {c['layers']} layers, hidden {c['hidden']}, heads {c['heads']}/{c['kv_heads']}, "
        f"mlp {c['intermediate']}, vocab {c['vocab']}; batch {payload['batch']}, prompt "
        f"{payload['prompt']}, {payload['decode_steps']} decode steps, {payload['dtype']} on "
        f"{payload['device']} ({payload['backend']} backend)",
        f"{'provider':<12}{'prefill ms':>12}{'decode ms/tok':>15}{'tok/s':>10}{'logits rel err':>16}{'triton share':>14}"
        f"{'host prefill':>14}{'host decode':>13}",
    ]
    for row in payload["results"]:
        if "error" in row:
            lines.append(f"{row['provider']:<12}error: {row['error']}")
            continue

        def num(value: Any, fmt: str) -> str:
            width = int(fmt.split(".")[0])
            return f"{'-':>{width}}" if value is None else format(value, fmt)

        lines.append(
            f"{row['provider']:<12}{num(row['prefill_ms'], '12.2f')}"
            f"{num(row['decode_ms_per_token'], '15.3f')}{num(row.get('decode_tokens_per_s'), '10.1f')}"
            f"{num(row['logits_rel_error'], '16.2e')}{num(row['gems_kernel_share'], '14.1%')}"
            f"{num(row.get('host_prefill_ms'), '14.2f')}{num(row.get('host_decode_ms'), '13.3f')}"
        )
    lines += category_report(payload)
    for row in payload["results"]:
        for phase, data in (row.get("python_path") or {}).items():
            calls = ", ".join(f"{op} {n}" for op, n in data["python_calls"].items()) or "none"
            lines.append(f"{row['provider']} {phase}: {data['native_replays']} native replays; "
                         f"calls through Python: {calls}")
    for row in payload["results"]:
        for phase in ("prefill", "decode"):
            data = (row.get("kernel_breakdown") or {}).get(phase)
            if data:
                lines += kernel_report(row["provider"], data, payload.get("top_kernels") or 12)
    return "\n".join(lines)


def _phase_note(phase: str, payload: dict[str, Any], source: str) -> str:
    if phase == "prefill":
        what = f"one prefill of {payload['batch']}x{payload['prompt']} tokens"
    else:
        what = f"per decode step, over {payload.get('profile_steps')} profiled steps"
    return f"{what}; {source}"


def category_report(payload: dict[str, Any]) -> list[str]:
    """Per phase, a table of µs by category with a column per provider, and each
    provider's ratio to aten's."""
    lines: list[str] = []
    for phase, table in payload.get("kernel_categories", {}).items():
        providers = list(table)
        source = next(
            row["kernel_breakdown"][phase]["source"] for row in payload["results"]
            if (row.get("kernel_breakdown") or {}).get(phase))
        reference = table.get("aten")
        header = f"{'category':<22}"
        for p in providers:
            header += f"{p + ' µs':>14}" + (f"{'x aten':>9}" if reference and p != "aten" else "")
        lines += ["", f"{phase}, kernel time by category ({_phase_note(phase, payload, source)}):",
                  header]
        for category in (*CATEGORIES, "total"):
            if category != "total" and not any(table[p][category] for p in providers):
                continue
            line = f"{category:<22}"
            for p in providers:
                us = table[p][category]
                line += f"{us:>14.1f}"
                if reference and p != "aten":
                    base = reference[category]
                    ratio = us / base if base else None
                    text = "-" if ratio is None else f"{ratio:.2f}x" if ratio < 100 else f"{ratio:.0f}x"
                    line += f"{text:>9}"
            lines.append(line)
    return lines


def kernel_report(provider: str, data: dict[str, Any], top: int) -> list[str]:
    """One provider's top kernels (on the CPU: ops) of one phase."""
    rows = data["kernels"]
    unit = "kernels" if data["source"].startswith("gpu") else "ops"
    span = "one prefill" if data["phase"] == "prefill" else f"{data['steps']} decode steps"
    lines = [
        "",
        f"{provider}, {data['phase']}: top {min(top, len(rows))} of {len(rows)} {unit} "
        f"({data['source']}; {data['total_us']:.1f} µs over {span})",
        f"  {unit[:-1]:<58}{'under':<30}{'category':<22}{'calls':>7}{'total µs':>11}{'µs/call':>10}{'%':>7}",
    ]
    for row in rows[:top]:
        op = row["op"] or "-"
        if row["launched_by"] and row["launched_by"] != row["op"]:
            op = f"{op} > {row['launched_by']}"
        op = op.replace("aten::", "")
        op = op if len(op) <= 29 else op[:28] + "…"
        kernel = row["kernel"] if len(row["kernel"]) <= 57 else row["kernel"][:56] + "…"
        lines.append(
            f"  {kernel:<58}{op:<30}{row['category']:<22}{row['calls']:>7}"
            f"{row['total_us']:>11.1f}{row['us_per_call']:>10.2f}{row['share']:>7.1%}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    payload = run(args)
    print(report(payload))
    if args.json:
        Path(args.json).write_text(json.dumps(payload, indent=1))
    return 1 if any("error" in row for row in payload["results"]) else 0


if __name__ == "__main__":
    os.environ["GEMS_COMPILE"] = "sync"  # gems' kernels serve from the first call: none is timed on ATen
    sys.exit(main())
