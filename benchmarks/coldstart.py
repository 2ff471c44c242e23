"""Cold start: how long a new process takes to its first results, ATen against gems.

    python benchmarks/coldstart.py --out coldstart.json            # on the GPU
    python benchmarks/coldstart.py --tiny --scenarios empty         # a smoke run on the CPU

A Hugging Face LlamaForCausalLM built from its config (random weights, nothing downloaded:
8 layers, hidden 2048, 32 heads / 4 KV heads, MLP 5632, vocab 32000; bf16 on a GPU, float32
and a tiny config with ``--tiny``) runs in fresh processes, each workload in its own:

* ``forward``: one no-grad forward at batch 2 x 384 tokens: ``first_forward_s``;
* ``generate``: a greedy ``generate()`` of ``--new-tokens`` tokens (default 128) after a
  384-token prompt at batch 1, every step at a new KV length: ``first_token_s`` (the prompt's
  prefill and the first sampled token) and ``generate_s`` (the whole call). The same call
  again in the process meets only lengths the first met: the median of its decode steps is the
  steady state (``replayed_token_ms``), against which each decode step of the first call is
  read (``new_length_token_ms``: their median; ``new_length_p90_ratio`` and
  ``new_length_max_ratio``: their 90th percentile and slowest against the steady state);
* ``train``: the first training steps of a 4-layer model (hidden 2048, otherwise as above;
  float32 master weights, bf16 autocast, AdamW with its default foreach step) at batch
  4 x 1024 tokens: ``first_step_s``, ``second_step_s`` and the losses.

Scenarios, each with its own new folders for gems' cache (``GEMS_CACHE_DIR``) and Triton's
(``TRITON_CACHE_DIR``):

* ``empty``: empty caches, shipped tuning tables ignored (``GEMS_SHIPPED_TUNING=0``): a
  machine where gems never ran, from a backend without tables;
* ``warm``: the caches the warm-up command leaves, as a user fills them before deploying
  (not measured): ``python -m gems_core warmup --record`` of the workload's process, then
  ``python -m gems_core warmup`` of its signatures, twice (the second recording runs on gems'
  kernels, whose outputs may lead to signatures that calls ATen served did not), or a copy
  of the folder ``--warm-cache`` names. ATen has no such cache: its warm process is a fresh one;
* ``shipped``: empty caches, the backend's shipped tuning table for this device in use.

ATen runs in the same conditions (the same kind of fresh process and environment, no gems
import). gems compiles as ``GEMS_COMPILE`` says, unlike the other benchmarks: by default in
the background on a GPU, with ATen serving the calls whose kernels are not ready (what a user
meets); ``GEMS_COMPILE=sync`` measures compiling in the first call. Each result also holds the process's import and model-building time, the whole
process's wall time (``process_s``, measured by the parent), a second forward or the time
per generated token after the first (the steady state, for scale) and, for gems, how many
kernels were benchmarked (``benchmarks_run``) and the shipped table in use.

Output: a table on stdout, and with ``--out`` one JSON document (environment, results).
"""

from __future__ import annotations

import time

_STARTED = time.perf_counter()  # the child's clock starts before its imports

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

LLAMA = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=8, num_attention_heads=32,
             num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048)
TINY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=96, max_position_embeddings=64)
SCENARIOS = ("empty", "warm", "shipped")
PROVIDERS = ("aten", "gems")
WORKLOADS = ("forward", "generate", "train")


# ---------------------------------------------------------------- the measured process


def _child(args: argparse.Namespace) -> dict:
    import torch

    gems = None
    if args.provider == "gems":
        import gems_core as gems
    import transformers

    imported = time.perf_counter()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(0)
    shape = TINY if args.tiny else LLAMA
    if args.workload == "train":
        shape = {**shape, "num_hidden_layers": 2 if args.tiny else 4}
    config = transformers.LlamaConfig(**shape)
    model = transformers.LlamaForCausalLM._from_config(config, attn_implementation="sdpa")
    model = model.to(device, torch.float32 if args.workload == "train" else dtype).eval()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    batch, seq = (1, 8) if args.tiny else (2, 384)
    prompt = 8 if args.tiny else 384
    g = torch.Generator().manual_seed(0)
    sync()
    built = time.perf_counter()
    result: dict = {"import_s": imported - _STARTED, "build_s": built - imported}
    serving = gems.use_gems() if gems is not None else contextlib.nullcontext()
    if args.workload == "train":
        with serving:
            result.update(_train(model, config, device, sync, g, args.tiny))
        return _finish(result, gems)
    with serving, torch.no_grad():
        if args.workload == "forward":
            tokens = torch.randint(1, config.vocab_size, (batch, seq), generator=g).to(device)
            for name in ("first_forward_s", "second_forward_s"):
                start = time.perf_counter()
                model(tokens)
                sync()
                result[name] = time.perf_counter() - start
        else:
            tokens = torch.randint(1, config.vocab_size, (1, prompt), generator=g).to(device)
            runs = []
            for _ in range(2):  # the second meets only the lengths the first met
                stamps: list[float] = []
                start = time.perf_counter()
                out = model.generate(
                    tokens, attention_mask=torch.ones_like(tokens), max_new_tokens=args.new_tokens,
                    min_new_tokens=args.new_tokens, do_sample=False, pad_token_id=0,
                    streamer=_Stamps(stamps, sync),
                )
                sync()
                runs.append((start, time.perf_counter(), stamps))
            start, end, stamps = runs[0]
            result["generate_s"] = end - start
            result["first_token_s"] = stamps[1] - start  # stamps[0]: the prompt handed over
            new = out.shape[1] - prompt
            result["new_tokens"] = new
            if new > 2:
                result["later_token_ms"] = 1e3 * (stamps[-1] - stamps[1]) / (new - 1)
                result.update(_steps(stamps, runs[1][2]))
    return _finish(result, gems)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _steps(first: list[float], again: list[float]) -> dict:
    """The first generation's decode steps (each at a KV length the process had not met)
    against the steady state: the median decode step of the same generation again."""
    new = [1e3 * (b - a) for a, b in zip(first[1:], first[2:])]
    replayed = _median([1e3 * (b - a) for a, b in zip(again[1:], again[2:])])
    ratios = sorted(step / replayed for step in new)
    return {"new_length_token_ms": _median(new), "replayed_token_ms": replayed,
            "new_length_p90_ratio": ratios[int(0.9 * (len(ratios) - 1))], "new_length_max_ratio": ratios[-1]}


def _train(model, config, device: str, sync, g, tiny: bool) -> dict:
    """Two training steps (bf16 autocast on a GPU, AdamW's default step): their times and
    losses."""
    import torch

    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch, seq = (2, 8) if tiny else (4, 1024)
    tokens = torch.randint(1, config.vocab_size, (batch, seq), generator=g).to(device)
    autocast = torch.autocast(device, dtype=torch.bfloat16) if device == "cuda" else contextlib.nullcontext()
    result: dict = {"losses": []}
    for name in ("first_step_s", "second_step_s"):
        start = time.perf_counter()
        with autocast:
            loss = model(tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync()
        result[name] = time.perf_counter() - start
        result["losses"].append(loss.item())
    return result


def _finish(result: dict, gems) -> dict:
    if gems is not None:
        from gems_core import runtime, settings, tuning

        table = None
        if settings.get("GEMS_SHIPPED_TUNING"):
            table = runtime.current().selection.backend.call("gems_tuned_table", device_model=tuning.device_model())
        result["benchmarks_run"] = tuning.benchmarks_run
        result["shipped_table"] = None if table is None else str(table) if isinstance(table, (str, os.PathLike)) else "mapping"
    return result


class _Stamps:
    """A ``generate()`` streamer that notes when each token (the prompt first) is ready."""

    def __init__(self, stamps: list[float], sync) -> None:
        self.stamps, self.sync = stamps, sync

    def put(self, value) -> None:
        self.sync()
        self.stamps.append(time.perf_counter())

    def end(self) -> None:
        pass


# ---------------------------------------------------------------- the parent


def _run_child(args: argparse.Namespace, provider: str, workload: str, env: dict[str, str]) -> dict:
    command = [sys.executable, __file__, "--child", "--provider", provider, "--workload", workload,
               "--new-tokens", str(args.new_tokens)] + (["--tiny"] if args.tiny else [])
    start = time.perf_counter()
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"the process took over {args.timeout:g} s", "process_s": args.timeout}
    wall = time.perf_counter() - start
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["exit status %d" % done.returncode])[-1],
                "process_s": wall}
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "process_s": wall}


def _prime(args: argparse.Namespace, workload: str, env: dict[str, str], signatures: Path) -> dict:
    """Fill the caches in ``env`` with the warm-up command for ``workload``: {"prime_s": ...}
    or {"error": ...}. All its processes together may take 4 times ``--timeout``."""
    child = ["--child", "--provider", "gems", "--workload", workload, "--new-tokens", str(args.new_tokens)]
    child += ["--tiny"] if args.tiny else []
    commands = [[sys.executable, "-m", "gems_core", "warmup", "--record", __file__, "--out", str(signatures),
                 "--", *child], [sys.executable, "-m", "gems_core", "warmup", str(signatures)]] * 2
    start = time.perf_counter()
    steps = []
    for command in commands:
        steps.append(round(time.perf_counter() - start, 3))
        left = 4 * args.timeout - (time.perf_counter() - start)
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=max(left, 1))
        except subprocess.TimeoutExpired:
            return {"error": f"warming the cache took over {4 * args.timeout:g} s ({' '.join(command[2:5])} "
                    f"started at {steps[-1]:g} s)"}
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["exit status %d" % done.returncode])[-1]
            return {"error": f"{' '.join(command[2:5])}: {last}"}
    return {"prime_s": round(time.perf_counter() - start, 3), "prime_steps_started_s": steps}


def _environment() -> dict:
    import torch

    info = {"python": platform.python_version(), "torch": torch.__version__,
            "device": torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor() or "cpu"}
    try:
        import transformers
        import triton

        info.update(triton=triton.__version__, transformers=transformers.__version__)
        from gems_core._version import __version__

        info["gems-core"] = __version__
        info["gems_compile"] = os.environ.get("GEMS_COMPILE", "auto")
    except ImportError as exc:
        info["missing"] = str(exc)
    return info


def _case(args: argparse.Namespace, scenario: str, provider: str, workload: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="gems-coldstart-") as folder:
        env = {**os.environ, "GEMS_CACHE_DIR": str(Path(folder) / "gems"),
               "TRITON_CACHE_DIR": str(Path(folder) / "triton"),
               "GEMS_SHIPPED_TUNING": "1" if scenario == "shipped" else "0"}
        if args.tiny:
            env.setdefault("GEMS_DEVICE", "cpu")
        row = {"scenario": scenario, "provider": provider, "workload": workload}
        if scenario == "warm" and provider == "gems" and args.warm_cache:
            # a cache folder made beforehand (``warmup --cache-dir``), as an image would carry it
            shutil.copytree(args.warm_cache, env["GEMS_CACHE_DIR"])
            env["TRITON_CACHE_DIR"] = str(Path(env["GEMS_CACHE_DIR"]) / "triton")
        elif scenario == "warm" and provider == "gems":
            row.update(_prime(args, workload, env, Path(folder) / "signatures.json"))
            if "error" in row:
                return row
        return {**row, **_run_child(args, provider, workload, env)}


def _table(results: list[dict]) -> str:
    metrics = {"forward": ("first_forward_s",), "generate": ("first_token_s", "generate_s", "new_length_token_ms",
                                                                   "replayed_token_ms", "new_length_p90_ratio"),
               "train": ("first_step_s",)}
    lines = [f"{'scenario':<9} {'workload':<9} {'metric':<16} {'aten':>9} {'gems':>9} {'gems/aten':>9}"]
    for scenario in SCENARIOS:
        for workload, names in metrics.items():
            rows = {r["provider"]: r for r in results if r["scenario"] == scenario and r["workload"] == workload}
            for name in names:
                values = [rows.get(p, {}).get(name) for p in PROVIDERS]
                if all(v is None for v in values):
                    continue
                text = [f"{v:9.3f}" if v is not None else f"{'-':>9}" for v in values]
                ratio = f"{values[1] / values[0]:9.2f}" if None not in values and values[0] else f"{'-':>9}"
                lines.append(f"{scenario:<9} {workload:<9} {name:<16} {text[0]} {text[1]} {ratio}")
    errors = [f"  {r['scenario']}/{r['provider']}/{r['workload']}: {r['error']}" for r in results if "error" in r]
    return "\n".join(lines + (["errors:", *errors] if errors else []))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="a tiny config on the cpu backend (a smoke run)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"of {', '.join(SCENARIOS)}")
    parser.add_argument("--providers", default=",".join(PROVIDERS), help=f"of {', '.join(PROVIDERS)}")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"of {', '.join(WORKLOADS)}")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--timeout", type=float, default=1800,
                        help="seconds a measured process may take (a warm scenario's primer: 4 times as many)")
    parser.add_argument("--warm-cache", metavar="DIR",
                        help="the warm scenario's cache: a copy of DIR (from `python -m gems_core warmup "
                        "--cache-dir DIR`) instead of warming one up for each workload")
    parser.add_argument("--out", help="write the JSON here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--provider", choices=PROVIDERS, help=argparse.SUPPRESS)
    parser.add_argument("--workload", choices=WORKLOADS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args)))
        return 0
    chosen = {}
    for name, known in (("scenarios", SCENARIOS), ("providers", PROVIDERS), ("workloads", WORKLOADS)):
        chosen[name] = [v for v in getattr(args, name).split(",") if v]
        unknown = set(chosen[name]) - set(known)
        if unknown:
            parser.error(f"unknown {name}: {', '.join(sorted(unknown))} (known: {', '.join(known)})")
    results: list[dict] = []
    report = {"environment": _environment(), "tiny": args.tiny, "new_tokens": args.new_tokens, "results": results}
    for scenario in chosen["scenarios"]:
        for workload in chosen["workloads"]:
            for provider in chosen["providers"]:
                print(f"{scenario} {workload} {provider} ...", file=sys.stderr, flush=True)
                results.append(_case(args, scenario, provider, workload))
                if args.out:  # after each case: a run stopped early keeps what it measured
                    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(_table(results))
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
