"""End-to-end latency of a Llama-3-8B-shaped decoder: ATen vs gems, in one process.

    python benchmarks/llama.py                          # 8 layers, batch 2, prompt 512, 256 steps
    python benchmarks/llama.py --layers 32 --json llama.json
    python benchmarks/llama.py --providers gems --decode-steps 64
    python benchmarks/llama.py --quick                  # tiny sizes (runs on the cpu backend)

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
ms (the prompt), decode ms per token (CUDA events, after a full warm-up generation that also
compiles and tunes gems' kernels), the relative error (Frobenius) of the final logits
against the ``aten`` provider's, and the share of GPU kernel time spent in Triton (gems)
kernels over a few profiled decode steps, with the largest kernels of each kind.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import statistics
import sys
import time
from contextlib import ExitStack, contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterator

import torch
import torch.nn.functional as F
from torch import nn

import gems_core
from gems_core import fused as gems_fused

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
    """Names of the Triton kernels gems defines (the CUDA symbol is the function's name)."""
    names = {"pointwise_kernel"}  # codegen's generated kernels
    for module_name, module in list(sys.modules.items()):
        if not module_name.startswith("gems_core") or module is None:
            continue
        for value in list(vars(module).values()):
            fn = getattr(value, "fn", None)
            if callable(fn) and hasattr(value, "run") and getattr(fn, "__name__", None):
                names.add(fn.__name__)
    return names


def is_triton_kernel(name: str, known: set[str]) -> bool:
    return name in known or name.startswith("triton_")


def kernel_share(model: CachedLlama, prompt: torch.Tensor, steps: torch.Tensor,
                 count: int) -> dict[str, Any] | None:
    """GPU kernel time of ``count`` decode steps by kind (Triton or other), from
    torch.profiler; None off CUDA."""
    if prompt.device.type != "cuda" or count <= 0:
        return None
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i, token in enumerate(steps[:count]):
            model(token, prompt.shape[1] + i)
        torch.cuda.synchronize()
    known = triton_kernel_names()
    per_kernel: dict[str, float] = {}
    for event in prof.events():
        if event.device_type == DeviceType.CUDA:
            per_kernel[event.name] = per_kernel.get(event.name, 0.0) + event.time_range.elapsed_us()
    triton_us = sum(t for n, t in per_kernel.items() if is_triton_kernel(n, known))
    total_us = sum(per_kernel.values())

    def top(triton: bool) -> list[dict[str, Any]]:
        rows = [(n, t) for n, t in per_kernel.items() if is_triton_kernel(n, known) == triton]
        rows.sort(key=lambda row: -row[1])
        return [{"kernel": n[:120], "us_per_step": t / count} for n, t in rows[:8]]

    return {
        "steps": count,
        "kernel_us_per_step": total_us / count,
        "triton_share": triton_us / total_us if total_us else 0.0,
        "top_triton": top(True),
        "top_other": top(False),
    }


def host_profile(model: CachedLlama, prompt: torch.Tensor, steps: torch.Tensor, count: int) -> str:
    """Where the host's time goes over ``count`` decode steps: self CPU time per ATen op
    (torch.profiler) and per Python function (cProfile), as text."""
    import cProfile
    import io
    import pstats

    from torch.profiler import ProfilerActivity, profile

    def run_steps() -> None:
        for i, token in enumerate(steps[:count]):
            model(token, prompt.shape[1] + i)
        if prompt.device.type == "cuda":
            torch.cuda.synchronize()

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run_steps()
    text = io.StringIO()
    text.write(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))
    profiler = cProfile.Profile()
    profiler.enable()
    run_steps()
    profiler.disable()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(40)
    return text.getvalue()


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
    parser.add_argument("--profile-steps", type=int, default=4, help="decode steps profiled")
    parser.add_argument("--dtype", default=None, help="bfloat16 on CUDA, float32 otherwise")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes: " + ", ".join(f"{k}={v}" for k, v in QUICK.items()))
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--host-profile", metavar="DIR",
                        help="write each provider's host profile of a few decode steps here")
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

    results = []
    reference = None
    with torch.inference_mode():
        if "aten" not in providers:  # the reference is ATen's, on the same inputs
            reference = generate(model, prompt, steps, clock, [], [])
        for name in providers:
            row: dict[str, Any] = {"provider": name}
            model.fused = name == "gems-fused"
            try:
                with provider_context(name):
                    generate(model, prompt, steps, clock, [], [])  # warm-up: compile, tune
                    prefill_ms: list[float] = []
                    decode_ms: list[float] = []
                    for _ in range(max(args.repeat, 1)):
                        logits = generate(model, prompt, steps, clock, prefill_ms, decode_ms)
                    share = kernel_share(model, prompt, steps, args.profile_steps)
                    if args.host_profile:
                        folder = Path(args.host_profile)
                        folder.mkdir(parents=True, exist_ok=True)
                        (folder / f"{name}-host.txt").write_text(
                            host_profile(model, prompt, steps, max(args.profile_steps, 8)))
            except Exception as exc:  # noqa: BLE001 - one provider failing is a result
                row["error"] = f"{type(exc).__name__}: {exc}"[:500]
                results.append(row)
                print(f"{name}: {row['error']}")
                continue
            finally:
                model.fused = False
            if name == "aten":
                reference = logits
            row.update({
                "prefill_ms": statistics.median(prefill_ms),
                "decode_ms_per_token": statistics.median(decode_ms) if decode_ms else None,
                "logits": logits,
                "kernels": share,
                "gems_kernel_share": share["triton_share"] if share else None,
            })
            results.append(row)
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
        "torch": torch.__version__,
        "triton": triton.__version__,
        "gems": gems_core.__version__,
        "dtype": str(dtype).replace("torch.", ""),
        "batch": args.batch,
        "prompt": args.prompt,
        "decode_steps": args.decode_steps,
        "repeat": args.repeat,
        "config": asdict(config),
        "results": results,
    }


def report(payload: dict[str, Any]) -> str:
    c = payload["config"]
    lines = [
        f"llama: {c['layers']} layers, hidden {c['hidden']}, heads {c['heads']}/{c['kv_heads']}, "
        f"mlp {c['intermediate']}, vocab {c['vocab']}; batch {payload['batch']}, prompt "
        f"{payload['prompt']}, {payload['decode_steps']} decode steps, {payload['dtype']} on "
        f"{payload['device']} ({payload['backend']} backend)",
        f"{'provider':<12}{'prefill ms':>12}{'decode ms/tok':>15}{'tok/s':>10}{'logits rel err':>16}{'triton share':>14}",
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
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    payload = run(args)
    print(report(payload))
    if args.json:
        Path(args.json).write_text(json.dumps(payload, indent=1))
    return 1 if any("error" in row for row in payload["results"]) else 0


if __name__ == "__main__":
    sys.exit(main())
