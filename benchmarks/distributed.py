"""torch.distributed on gems' kernels, ATen vs gems: DDP and FSDP2 training and tensor-parallel
inference of a Llama, plus one decode step under CUDA graph capture.

    torchrun --nproc_per_node 2 benchmarks/distributed.py --out distributed.json
    torchrun --nproc_per_node 2 benchmarks/distributed.py --quick --out check.json
    torchrun --nproc_per_node 2 benchmarks/distributed.py --modes tp --dtype bfloat16
    torchrun --nproc_per_node 2 benchmarks/distributed.py --modes ddp,fsdp --autocast bfloat16
    python benchmarks/distributed.py --modes graph --out graph.json     # one GPU
    torchrun --nproc_per_node 2 benchmarks/distributed.py --quick --device cpu --check   # gloo, no GPU

The model is Hugging Face's ``LlamaForCausalLM`` built from a config on random weights (nothing
downloaded; ``attn_implementation="sdpa"``); without transformers, examples/llama.py's
``Llama`` (training modes only: its fused q/kv and gate/up projections do not split by
columns). Every rank builds it from the same seed. Default sizes: 8 layers, hidden 1024,
16 query / 4 key-value heads, MLP 2816, vocab 32000; ``--quick`` is tiny.

Modes (``--modes``, comma-separated, default ``ddp,fsdp,tp``):

- ``ddp``: ``DistributedDataParallel``; ``fsdp``: FSDP2 (``fully_shard`` on every decoder
  layer, then the model). Each rank trains on its own batches (``--batch`` x ``--seq``
  tokens), AdamW, ``--steps`` steps from the same initial weights per provider and round.
  ``--autocast bfloat16`` runs the forward under ``torch.autocast`` on float32 parameters
  (mixed-precision training, as most users train). Reported: the loss of every step (mean
  over ranks) per provider, the largest relative
  difference between gems' and ATen's, whether the ranks' parameters are bitwise equal
  after training, and the step time (the steps after ``--warmup``, timed as one stretch:
  nothing synchronizes between steps, so kernels and collectives overlap as they would).
- ``tp``: tensor parallelism over all ranks (``torch.distributed.tensor.parallel``: q/k/v
  and gate/up projections by columns, o and down by rows). The logits of a prompt, under
  each provider, against the unsharded model's on one GPU (ATen), and the prefill time and
  decode time per token (``--decode-steps`` steps with a DynamicCache), under
  ``torch.inference_mode()``.
- ``graph`` (one process, one GPU): benchmarks/llama.py's decoder with a static KV cache,
  one decode step run eagerly and replayed from a CUDA graph captured under each provider
  (:func:`capture_decode_step`): step times, the gain of the graph, and the replayed
  logits against the eager ones.

Providers run in alternating order over ``--rounds`` rounds (ATen first in even rounds);
times are the median over rounds. Rank 0 prints a summary and writes the JSON (``--out``).
``--check`` exits non-zero when losses differ by more than 1e-4 relative, replicas differ,
or tensor-parallel logits are off.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

import gems_core

ROOT = Path(__file__).resolve().parent.parent
PROVIDERS = ("aten", "gems")
LOSS_RTOL = 1e-4


def _load(name: str, path: Path) -> Any:
    """A module of this checkout by path (benchmarks/ and examples/ are no packages)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


def provider(name: str) -> Any:
    return gems_core.use_gems() if name == "gems" else contextlib.nullcontext()


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def in_turn(providers: tuple[str, ...], round_: int) -> tuple[str, ...]:
    """The providers in the order of round ``round_``: alternating, the first first in even rounds."""
    return providers if round_ % 2 == 0 else providers[::-1]


def speedup(times: dict[str, float]) -> float | None:
    """ATen's time over gems' (None unless both ran)."""
    return times["aten"] / times["gems"] if {"aten", "gems"} <= times.keys() else None


# -- the model ------------------------------------------------------------------------------


def build_model(args: argparse.Namespace, device: torch.device, allow_example: bool = True) -> tuple[torch.nn.Module, str]:
    """The Llama on random weights from seed 0 (identical on every rank), and its kind:
    ``"hf"`` (transformers' LlamaForCausalLM) or ``"example"`` (examples/llama.py)."""
    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError:
        if not allow_example:
            raise
        example = _load("gems_examples_llama", ROOT / "examples" / "llama.py")
        config = example.LlamaConfig(
            vocab=args.vocab, hidden=args.hidden, layers=args.layers, heads=args.heads,
            kv_heads=args.kv_heads, intermediate=args.intermediate, max_positions=2 * args.seq,
        )
        return example.Llama(config).to(device=device, dtype=dtype), "example"
    config = LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads, max_position_embeddings=2 * args.seq + args.decode_steps,
        tie_word_embeddings=False,
    )
    config._attn_implementation = "sdpa"
    model = LlamaForCausalLM(config)
    return model.to(device=device, dtype=dtype), "hf"


def decoder_layers(model: torch.nn.Module) -> Any:
    inner = getattr(model, "model", None)
    return inner.layers if inner is not None else model.layers


def logits_of(model: torch.nn.Module, kind: str, tokens: torch.Tensor, **kwargs: Any) -> Any:
    if kind == "hf":
        return model(input_ids=tokens, **kwargs)
    return model(tokens)


def next_token_loss(model: torch.nn.Module, kind: str, tokens: torch.Tensor, autocast: str = "none") -> torch.Tensor:
    mixed = (torch.autocast(tokens.device.type, dtype=getattr(torch, autocast)) if autocast != "none"
             else contextlib.nullcontext())
    with mixed:
        out = logits_of(model, kind, tokens[:, :-1])
    logits = out.logits if kind == "hf" else out
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def batches(args: argparse.Namespace, rank: int, device: torch.device) -> list[torch.Tensor]:
    """Each rank's token batches, the same for every provider."""
    generator = torch.Generator().manual_seed(1000 + rank)
    return [torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=generator).to(device)
            for _ in range(args.steps)]


# -- training: DDP, FSDP2 ---------------------------------------------------------------------


def wrap_for_training(mode: str, model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    from torch.distributed.fsdp import fully_shard

    for layer in decoder_layers(model):
        fully_shard(layer)
    fully_shard(model)
    return model


def flat_parameters(model: torch.nn.Module) -> torch.Tensor:
    """Every parameter, whole (FSDP2's shards gathered), as one float64 vector."""
    parts = []
    for p in model.parameters():
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        parts.append(full.detach().double().flatten())
    return torch.cat(parts)


def replicas_equal(model: torch.nn.Module) -> bool:
    """Whether every rank holds bitwise the same parameters."""
    mine = flat_parameters(model)
    gathered = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, mine)
    return all(torch.equal(g, gathered[0]) for g in gathered)


def train(mode: str, name: str, args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """One training run: losses (mean over ranks) and the time per step after the warm-up."""
    model, kind = build_model(args, device)
    model = wrap_for_training(mode, model, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = batches(args, dist.get_rank(), device)
    losses = []
    with provider(name):
        for step, tokens in enumerate(data):
            if step == args.warmup:
                sync(device)
                began = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            loss = next_token_loss(model, kind, tokens, args.autocast)
            loss.backward()
            optimizer.step()
            losses.append(loss.detach())
        sync(device)
        elapsed = time.perf_counter() - began
    stacked = torch.stack(losses).double()
    dist.all_reduce(stacked)
    stacked /= dist.get_world_size()
    return {
        "kind": kind,
        "losses": stacked.tolist(),
        "step_ms": elapsed * 1e3 / (len(data) - args.warmup),
        "replicas_equal": replicas_equal(model),
    }


# -- tensor-parallel inference ----------------------------------------------------------------


def parallelize(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    plan = {
        **{f"self_attn.{p}_proj": ColwiseParallel() for p in "qkv"},
        "self_attn.o_proj": RowwiseParallel(),
        "mlp.gate_proj": ColwiseParallel(),
        "mlp.up_proj": ColwiseParallel(),
        "mlp.down_proj": RowwiseParallel(),
    }
    for layer in decoder_layers(model):
        parallelize_module(layer, mesh, plan)
    return model


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    want = want.double()
    return float((got.double() - want).norm() / want.norm().clamp_min(1e-30))


def tp_prompt(args: argparse.Namespace, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(7)  # the same on every rank
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq + args.decode_steps), generator=generator)
    return tokens[:, : args.seq].to(device), tokens[:, args.seq:].to(device)


def tp_generate(model: torch.nn.Module, prompt: torch.Tensor, following: torch.Tensor,
                device: torch.device) -> tuple[torch.Tensor, float, float]:
    """(the prompt's logits, prefill ms, decode ms per token): the prompt, then each token of
    ``following`` with a DynamicCache."""
    import inspect

    from transformers import DynamicCache

    # transformers 5 renamed the cache argument
    argument = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    sync(device)
    began = time.perf_counter()
    cache = {argument: DynamicCache()}
    out = model(input_ids=prompt, use_cache=True, **cache)
    sync(device)
    prefill = (time.perf_counter() - began) * 1e3
    logits = out.logits
    began = time.perf_counter()
    for i in range(following.shape[1]):
        model(input_ids=following[:, i : i + 1], use_cache=True, **cache)
    sync(device)
    decode = (time.perf_counter() - began) * 1e3 / max(1, following.shape[1])
    return logits, prefill, decode


def tensor_parallel(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    try:
        model, _ = build_model(args, device, allow_example=False)
    except ImportError:
        return {"skipped": "tensor parallelism runs transformers' LlamaForCausalLM: not installed"}
    model.eval().requires_grad_(False)
    prompt, following = tp_prompt(args, device)
    with torch.inference_mode():
        reference = model(input_ids=prompt).logits  # one GPU, ATen
    model = parallelize(model, device)
    with torch.inference_mode():
        rows: dict[str, dict[str, Any]] = {name: {"prefill_ms": [], "decode_ms": []} for name in args.providers}
        for round_ in range(args.rounds + 1):  # round 0 warms up (compiles, tunes, records)
            for name in in_turn(args.providers, round_):
                with provider(name):
                    logits, prefill, decode = tp_generate(model, prompt, following, device)
                if round_ == 0:
                    rows[name]["logits_rel_error"] = relative_error(logits, reference)
                else:
                    rows[name]["prefill_ms"].append(prefill)
                    rows[name]["decode_ms"].append(decode)
    for row in rows.values():
        row["prefill_ms_median"] = statistics.median(row["prefill_ms"])
        row["decode_ms_median"] = statistics.median(row["decode_ms"])
    return {
        "providers": rows,
        "prefill_speedup": speedup({name: row["prefill_ms_median"] for name, row in rows.items()}),
        "decode_speedup": speedup({name: row["decode_ms_median"] for name, row in rows.items()}),
    }


def training(mode: str, args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in args.providers}
    for round_ in range(args.rounds):
        for name in in_turn(args.providers, round_):
            runs[name].append(train(mode, name, args, device))
    losses = {name: rs[0]["losses"] for name, rs in runs.items()}
    step_ms = {name: statistics.median(r["step_ms"] for r in rs) for name, rs in runs.items()}
    pairs = zip(losses["aten"], losses["gems"]) if len(losses) == 2 else ()
    return {
        "model": runs[args.providers[0]][0]["kind"],
        "losses": losses,
        "loss_max_rel_diff": max((abs(g - a) / max(abs(a), 1e-30) for a, g in pairs), default=0.0),
        "replicas_equal": all(r["replicas_equal"] for rs in runs.values() for r in rs),
        "step_ms": {name: [r["step_ms"] for r in rs] for name, rs in runs.items()},
        "step_ms_median": step_ms,
        "speedup": speedup(step_ms),
    }


# -- CUDA graphs --------------------------------------------------------------------------------


def capture_decode_step(model: torch.nn.Module, token: torch.Tensor, start: int, name: str) -> tuple[Any, torch.Tensor]:
    """A CUDA graph of one decode step (``model(token, start)``, benchmarks/llama.py's
    decoder) captured under provider ``name``, after three warm-up steps on a side stream
    (which compile, tune and record whatever the step needs), and its output tensor. The
    capture runs with the token's GPU current: a graph records the work of the device whose
    stream captures, and kernels launched on another device's stream would run once, eagerly,
    and be missing from every replay."""
    with torch.cuda.device(token.device), provider(name):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                model(token, start)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = model(token, start)
    return graph, out


def cuda_graph(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    bench = _load("gems_bench_llama", ROOT / "benchmarks" / "llama.py")
    config = bench.LlamaConfig(
        vocab=args.vocab, hidden=args.hidden, layers=args.layers, heads=args.heads,
        kv_heads=args.kv_heads, intermediate=args.intermediate, max_positions=args.seq + 8,
    )
    torch.manual_seed(0)
    model = bench.CachedLlama(config, args.batch).to(device=device, dtype=getattr(torch, args.dtype)).eval()
    generator = torch.Generator().manual_seed(3)
    prompt = torch.randint(0, args.vocab, (args.batch, args.seq), generator=generator).to(device)
    token = torch.randint(0, args.vocab, (args.batch, 1), generator=generator).to(device)
    steps = max(10, args.decode_steps)
    rows: dict[str, dict[str, Any]] = {}
    with torch.inference_mode():
        model(prompt, 0)
        for name in args.providers:
            with provider(name):
                eager = model(token, args.seq).clone()
            graph, out = capture_decode_step(model, token, args.seq, name)
            graph.replay()
            sync(device)
            row = {"graph_vs_eager_rel_error": relative_error(out, eager)}
            for how, step in (("eager", lambda: model(token, args.seq)), ("graph", graph.replay)):
                times = []
                for _ in range(args.rounds):
                    with provider(name) if how == "eager" else contextlib.nullcontext():
                        sync(device)
                        began = time.perf_counter()
                        for _ in range(steps):
                            step()
                        sync(device)
                    times.append((time.perf_counter() - began) * 1e3 / steps)
                row[f"{how}_ms"] = statistics.median(times)
            row["graph_gain"] = row["eager_ms"] / row["graph_ms"]
            rows[name] = row
    return {"providers": rows, "graph_speedup_vs_aten_graph": speedup({n: r["graph_ms"] for n, r in rows.items()})}


# -- main ----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default="ddp,fsdp,tp", help="ddp, fsdp, tp (under torchrun), graph")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--intermediate", type=int, default=2816)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3, help="training steps not timed")
    parser.add_argument("--decode-steps", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--autocast", default="none", choices=("none", "bfloat16", "float16"),
                        help="ddp, fsdp: the forward under torch.autocast to this dtype (parameters and "
                             "optimizer stay in --dtype: mixed-precision training)")
    parser.add_argument("--providers", default="aten,gems")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                        help="cpu: gloo and gems' cpu backend (Triton's interpreter), for checking the script")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a correctness check")
    parser.add_argument("--check", action="store_true", help="exit 1 when a correctness criterion fails")
    parser.add_argument("--out", help="JSON file (written by rank 0)")
    args = parser.parse_args(argv)
    args.providers = tuple(p.strip() for p in args.providers.split(",") if p.strip())
    if set(args.providers) - set(PROVIDERS) or not args.providers:
        parser.error(f"--providers: some of {', '.join(PROVIDERS)}")
    if args.quick:
        args.layers, args.hidden, args.heads, args.kv_heads = 2, 128, 4, 2
        args.intermediate, args.vocab, args.batch, args.seq = 256, 512, 2, 32
        args.decode_steps, args.rounds = 4, 2
    return args


def failures(results: dict[str, Any]) -> list[str]:
    found = []
    for mode in ("ddp", "fsdp"):
        r = results.get(mode)
        if r is None:
            continue
        if r["loss_max_rel_diff"] > LOSS_RTOL:
            found.append(f"{mode}: losses differ from ATen's by {r['loss_max_rel_diff']:.2e} relative")
        if not r["replicas_equal"]:
            found.append(f"{mode}: the ranks' parameters differ")
    tp = results.get("tp", {})
    for name, row in tp.get("providers", {}).items():
        if row["logits_rel_error"] > (1e-3 if results["dtype"] == "float32" else 2e-2):
            found.append(f"tp/{name}: logits {row['logits_rel_error']:.2e} off the one-GPU run")
    for name, row in results.get("graph", {}).get("providers", {}).items():
        if row["graph_vs_eager_rel_error"] > 1e-3:
            found.append(f"graph/{name}: the replay is {row['graph_vs_eager_rel_error']:.2e} off eager")
    return found


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(modes) - {"ddp", "fsdp", "tp", "graph"}
    if unknown:
        raise SystemExit(f"unknown modes: {', '.join(sorted(unknown))}")
    if "graph" in modes and args.device != "cuda":
        raise SystemExit("graph captures CUDA graphs: --device cuda")
    distributed = any(m != "graph" for m in modes)
    if distributed:
        if "LOCAL_RANK" not in os.environ:
            raise SystemExit("ddp, fsdp and tp run under torchrun: torchrun --nproc_per_node 2 "
                             "benchmarks/distributed.py ...")
        local = int(os.environ["LOCAL_RANK"])
        if args.device == "cuda":
            torch.cuda.set_device(local)
            dist.init_process_group("nccl", device_id=torch.device("cuda", local))
        else:
            dist.init_process_group("gloo")
    device = torch.device("cuda", torch.cuda.current_device()) if args.device == "cuda" else torch.device("cpu")
    rank = dist.get_rank() if distributed else 0
    on_gpus = args.device == "cuda"
    results: dict[str, Any] = {
        "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if on_gpus else ["cpu"],
        "world_size": dist.get_world_size() if distributed else 1,
        "backend": gems_core.backend().name,
        "torch": torch.__version__, "python": platform.python_version(),
        "dtype": args.dtype,
        "autocast": args.autocast,
        "config": {k: getattr(args, k) for k in ("layers", "hidden", "heads", "kv_heads", "intermediate",
                                                "vocab", "batch", "seq", "steps", "warmup",
                                                "decode_steps", "rounds")},
    }
    try:
        import triton

        results["triton"] = triton.__version__
    except ImportError:
        pass
    for mode in modes:
        if mode in ("ddp", "fsdp"):
            results[mode] = training(mode, args, device)
        elif mode == "tp":
            results[mode] = tensor_parallel(args, device)
        elif rank == 0:
            results[mode] = cuda_graph(args, device)
        if rank == 0:
            print(f"{mode}: {json.dumps({k: v for k, v in results[mode].items() if k not in ('losses', 'step_ms')})}",
                  flush=True)
    problems = failures(results)
    results["failures"] = problems
    if rank == 0 and args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    if distributed:
        dist.destroy_process_group()
    for problem in problems:
        print(f"FAILED {problem}", file=sys.stderr)
    return 1 if args.check and problems else 0


if __name__ == "__main__":
    os.environ["GEMS_COMPILE"] = "sync"  # gems' kernels serve from the first call: none is timed on ATen
    sys.exit(main())
