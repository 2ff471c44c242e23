"""SDPA decode (one query per head) on the GPU: ATen's backends against gems' decode path
under every candidate config, split count and merge, to choose configs and check the split
heuristic from measurements.

    pip install --no-deps --no-build-isolation -e . -e backends/nvidia   # once, offline
    python benchmarks/sdpa_decode_sweep.py --json sdpa_decode_sweep.json
    python benchmarks/sdpa_decode_sweep.py --quick                 # batch 8 only, fewer splits
    python benchmarks/sdpa_decode_sweep.py --configs "64,4,3;32,4,3" --splits 4,6,8

Shapes: batch 1, 2 and 8 (``--batches``), 32 query heads over 8 key/value heads (GQA),
head dim 128, bf16, KV lengths 512, 2048 and 8192 (``--kv``): the decode cases of
``benchmarks/cases.py`` and their small-batch variants.

Per shape it times (``triton.testing.do_bench``, L2 flushed before each call, median):

- ATen: the default dispatch and each SDPA backend that runs the call (math, flash,
  efficient, cudnn, via ``torch.nn.attention.sdpa_kernel``); the fastest is the baseline;
- gems as the model sees it: ``F.scaled_dot_product_attention`` under ``use_gems()``
  (autotuned config, split heuristic, the per-signature plan);
- gems' decode plan (:func:`gems_core.ops.attention_decode.decode_plan`, launches only) for every
  config of the ``attention_decode`` tunable that fits (the backend's tuned list on this
  chip, or ``--configs``), with the heuristic's split count under both merges (the last
  split merges in the same launch, "fused"; a second kernel, "kernel"), and with forced
  split counts (``--splits``, fused merge);

and checks every gems output against ATen's math backend in float32 (max abs error; a
failure is reported, not fatal). Host time per call (back to back, no flush) is measured
for ATen's fastest backend and gems' op, as the decode loop of a model sees it.

Output: a table per shape (microseconds, x ATen's best, % of the K/V bytes at the copy
bandwidth measured at the start) and the best gems choice per shape; ``--json`` writes
every measurement. About 1.5-2 minutes on an H100/H200 (mostly Triton compiles).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gems_core
from gems_core import KernelConfig, runtime
from gems_core.registry import load_ops

HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
DEFAULT_SPLITS = (1, 2, 4, 8, 16, 32, 64)


#: "cpu" only for a smoke test of this script on the cpu backend (the Triton interpreter)
DEVICE = "cuda"


def synchronize() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def bench_us(fn: Any, warmup: int, rep: int) -> float:
    if DEVICE != "cuda":  # the smoke test: one call, wall clock
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e6
    import triton.testing

    return 1e3 * float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))


def host_us(fn: Any, calls: int = 300) -> float:
    """Wall-clock microseconds per call of back-to-back calls (best of 3 rounds)."""
    if DEVICE != "cuda":
        calls = 1
    for _ in range(min(calls, 20)):
        fn()
    synchronize()
    best = math.inf
    for _ in range(3 if DEVICE == "cuda" else 1):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        synchronize()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def copy_gbps(warmup: int, rep: int) -> float:
    if DEVICE != "cuda":
        return 1.0
    src = torch.empty(2**28, dtype=torch.float32, device=DEVICE).uniform_()
    dst = torch.empty_like(src)
    us = bench_us(lambda: dst.copy_(src), warmup, rep)
    return 2 * src.numel() * 4 / us / 1e3


def aten_backends() -> dict[str, Any]:
    """ATen's SDPA backends as context-manager factories (None: the default dispatch)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    chosen: dict[str, Any] = {"default": None}
    for name in ("MATH", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION"):
        backend = getattr(SDPBackend, name, None)
        if backend is not None:
            chosen[name.split("_")[0].lower()] = lambda backend=backend: sdpa_kernel(backend)
    return chosen


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=q.shape[1] != k.shape[1])


def parse_configs(text: str) -> list[KernelConfig]:
    """"BLOCK_N,warps,stages[,rows];..." -> configs."""
    configs = []
    for item in filter(None, (part.strip() for part in text.split(";"))):
        values = [int(x) for x in item.split(",")]  # BLOCK_N, warps, stages[, rows]
        params = {"BLOCK_N": values[0], **({"ROWS": values[3]} if len(values) > 3 else {})}
        configs.append(KernelConfig(params, num_warps=values[1], num_stages=values[2]))
    return configs


MERGES = {0: "none", 1: "kernel", 2: "fused"}  # DecodePlan.merge: one split, a second kernel, same launch


def describe(config: KernelConfig) -> str:
    rows = config.params.get("ROWS")
    return f"{config.params['BLOCK_N']}/{config.num_warps}w/{config.num_stages}s" + (f"/r{rows}" if rows else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="write every measurement here")
    parser.add_argument("--batches", default="1,2,8")
    parser.add_argument("--kv", default="512,2048,8192")
    parser.add_argument("--configs", help='candidates "BLOCK_N,warps,stages[,rows];..." (default: the tunable\'s list)')
    parser.add_argument("--splits", default=",".join(map(str, DEFAULT_SPLITS)),
                        help="forced split counts (fused merge); empty: none")
    parser.add_argument("--kernel-merge-configs", type=int, default=3,
                        help="time the two-kernel merge for the first N configs (compiles cost time)")
    parser.add_argument("--warmup", type=int, default=5, help="do_bench warm-up, ms")
    parser.add_argument("--rep", type=int, default=20, help="do_bench repetitions, ms")
    parser.add_argument("--quick", action="store_true", help="batch 8 only, splits 1,4,8,16")
    parser.add_argument("--no-op", action="store_true", help="skip the op path (its autotuning takes ~2 s a shape)")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--head-dim", type=int, default=HEAD_DIM)
    parser.add_argument("--device", default="cuda", help="cpu: a smoke test of this script on the cpu backend")
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("needs a GPU", file=sys.stderr)
        return 2
    dtype = getattr(torch, args.dtype)
    if args.quick:
        args.batches, args.splits = "8", "1,4,8,16"

    started = time.perf_counter()
    gems_core.backend()  # select the backend (and its tuned configs) now
    load_ops()
    from gems_core.ops import attention_decode

    rt = runtime.current()
    if DEVICE == "cuda" and (rt.interpreter or rt.device_type != "cuda"):
        print(f"gems selected the {rt.selection.backend.name!r} backend ({rt.selection.reason}); install the "
              "GPU's backend first: pip install --no-deps --no-build-isolation -e . -e backends/nvidia",
              file=sys.stderr)
        return 2
    meta: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if DEVICE == "cuda" else DEVICE,
        "sms": runtime.compute_units(DEVICE, 0),
        "torch": torch.__version__, "triton": __import__("triton").__version__,
        "python": platform.python_version(), "gems_backend": rt.selection.backend.name,
        "arch": rt.selection.arch, "decode_merge_env": os.environ.get("GEMS_DECODE_MERGE", "auto"),
    }
    meta["copy_gbps"] = copy_gbps(args.warmup, args.rep)
    print(f"{meta['device']} ({meta['sms']} SMs), torch {meta['torch']}, triton {meta['triton']}, "
          f"gems backend {meta['gems_backend']} {meta['arch']}; copy {meta['copy_gbps']:.0f} GB/s", flush=True)

    configs = parse_configs(args.configs) if args.configs else list(attention_decode.ATTENTION_DECODE.configs())
    forced = [int(s) for s in args.splits.split(",") if s.strip()]
    batches = [int(b) for b in args.batches.split(",")]
    lengths = [int(s) for s in args.kv.split(",")]
    backends = aten_backends()
    shapes: list[dict[str, Any]] = []

    for batch in batches:
        for keys in lengths:
            row = measure_shape(args, batch, keys, dtype, configs, forced, backends, meta["copy_gbps"])
            shapes.append(row)
            print_shape(row)

    print("\nsummary (x ATen's best; > 1 is faster than ATen)")
    print(f"{'shape':32s} {'aten best':>16s} {'gems op':>14s} {'best gems choice':>40s}")
    for row in shapes:
        op = next((g for g in row["gems"] if g["kind"] == "op" and "us" in g), None)
        best = row["gems_best"]
        op_text = f"{op['us']:6.1f} x{op['vs_aten']:4.2f}" if op else "-"
        best_text = (f"{best['config'] or 'op'} s{best['splits']} {best['merge']} {best['us']:6.1f} x{best['vs_aten']:4.2f}"
                     if best else "-")
        print(f"{row['shape']:32s} {row['aten_best']:>7s} {row['aten_best_us']:7.1f} {op_text:>14s} {best_text:>40s}")
    wrong = [(row["shape"], g) for row in shapes for g in row["gems"] if "us" in g and not g["ok"]]
    failed = [(row["shape"], g) for row in shapes for g in row["gems"] if "error" in g]
    if wrong:
        print(f"\n{len(wrong)} gems results off by >= 2e-2 (max abs vs ATen math fp32):")
        for shape, g in wrong[:20]:
            print(f"  {shape}: {g['kind']} {g['config']} s{g['splits']} {g['merge']}: {g['max_abs_error']:.3g}")
    if failed:
        print(f"\n{len(failed)} gems variants failed to run")
    meta["seconds"] = time.perf_counter() - started
    print(f"\n{meta['seconds']:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "shapes": shapes}, indent=1, default=str))
        print(f"wrote {args.json}")
    return 1 if wrong else 0


def measure_shape(args: argparse.Namespace, batch: int, keys: int, dtype: torch.dtype, configs: list[KernelConfig],
                  forced: list[int], backends: dict[str, Any], copy: float) -> dict[str, Any]:
    """Every measurement of one shape (module docstring)."""
    from gems_core.ops import attention_common, attention_decode

    name = f"b{batch} h{HEADS}/{KV_HEADS} kv{keys} d{args.head_dim} {str(dtype).removeprefix('torch.')}"
    gen = torch.Generator(device=DEVICE).manual_seed(batch * 100003 + keys)
    q, k, v = (torch.randn(batch, heads, length, args.head_dim, dtype=dtype, device=DEVICE, generator=gen)
               for heads, length in ((HEADS, 1), (KV_HEADS, keys), (KV_HEADS, keys)))
    kv_bytes = k.numel() * k.element_size() + v.numel() * v.element_size()
    ideal_us = kv_bytes / copy / 1e3
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        reference = sdpa(q.float(), k.float(), v.float())
    row: dict[str, Any] = {"shape": name, "batch": batch, "kv": keys, "kv_bytes": kv_bytes,
                           "ideal_us": ideal_us, "aten_us": {}, "gems": []}

    for label, context in backends.items():
        try:
            if context is None:
                sdpa(q, k, v)
                row["aten_us"][label] = bench_us(lambda: sdpa(q, k, v), args.warmup, args.rep)
            else:
                with context():
                    sdpa(q, k, v)
                    row["aten_us"][label] = bench_us(lambda: sdpa(q, k, v), args.warmup, args.rep)
        except RuntimeError:
            continue  # this backend does not run the call
    best_label = min(row["aten_us"], key=row["aten_us"].get)
    aten_best = row["aten_us"][best_label]
    row["aten_best"], row["aten_best_us"] = best_label, aten_best
    best_context = backends[best_label]

    def aten_call() -> torch.Tensor:
        if best_context is None:
            return sdpa(q, k, v)
        with best_context():
            return sdpa(q, k, v)

    row["aten_host_us"] = host_us(aten_call)

    def record(kind: str, config: KernelConfig | None, splits: Any, merge: Any, fn: Any,
               extra: dict[str, Any] | None = None) -> None:
        try:
            out = fn()
            synchronize()
            error = float((out.float() - reference).abs().max())
            us = bench_us(fn, args.warmup, args.rep)
        except Exception as exc:  # noqa: BLE001 - a config that fails is a result
            row["gems"].append({"kind": kind, "config": describe(config) if config else None,
                                "splits": splits, "merge": merge,
                                "error": f"{type(exc).__name__}: {exc}"[:400]})
            print(f"  {kind:6s} {describe(config) if config else '-':12s} splits={splits} {merge}: "
                  f"FAILED {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            return
        entry = {"kind": kind, "config": describe(config) if config else None, "splits": splits,
                 "merge": merge, "us": us, "vs_aten": aten_best / us, "pct_copy": 100 * ideal_us / us,
                 "max_abs_error": error, "ok": error < 2e-2, **(extra or {})}
        row["gems"].append(entry)

    if not args.no_op:
        with gems_core.use_gems(include=["scaled_dot_product_attention"]):
            t0 = time.perf_counter()
            sdpa(q, k, v)  # compiles and autotunes this shape bucket
            synchronize()
            first_ms = (time.perf_counter() - t0) * 1e3
            plan = attention_decode._decode_plans.get(attention_decode._plan_key(q, k, v, None, 0.0, False, None, True))
            info = {"first_call_ms": first_ms}
            if plan is not None:
                info.update({"chosen": describe(plan.config), "chosen_splits": plan.splits,
                             "chosen_merge": MERGES[plan.merge]})
            record("op", None, info.get("chosen_splits"), info.get("chosen_merge"), lambda: sdpa(q, k, v), info)
            row["gems_host_us"] = host_us(lambda: sdpa(q, k, v))

    admit = attention_common._fits(q.dtype, 16, {**attention_common._head_blocks(q, v)}, False)
    for index, config in enumerate(configs):
        if not admit(config):
            continue
        heuristic = attention_decode.decode_plan(q, k, v, config=config, merge="fused")
        chosen = heuristic.splits
        record("plan", config, chosen, MERGES[heuristic.merge], lambda p=heuristic: p(q, k, v, None),
               {"heuristic": True})
        if index < args.kernel_merge_configs and chosen > 1:
            plan_k = attention_decode.decode_plan(q, k, v, config=config, splits=chosen, merge="kernel")
            record("plan", config, chosen, "kernel", lambda p=plan_k: p(q, k, v, None), {"heuristic": True})
        blocks = -(-keys // config.params["BLOCK_N"])
        seen = {chosen}
        for splits in forced:
            actual = -(-blocks // -(-blocks // max(1, min(splits, blocks))))
            if actual in seen:
                continue
            seen.add(actual)
            plan_f = attention_decode.decode_plan(q, k, v, config=config, splits=splits, merge="fused")
            record("plan", config, plan_f.splits, MERGES[plan_f.merge], lambda p=plan_f: p(q, k, v, None),
                   {"heuristic": False})

    good = [g for g in row["gems"] if "us" in g and g["ok"]]
    row["gems_best"] = min(good, key=lambda g: g["us"]) if good else None
    return row


def print_shape(row: dict[str, Any]) -> None:
    aten = "  ".join(f"{k} {v:.1f}" for k, v in sorted(row["aten_us"].items(), key=lambda kv: kv[1]))
    print(f"\n{row['shape']}: K/V {row['kv_bytes'] / 1e6:.1f} MB, {row['ideal_us']:.1f} us at copy bandwidth; "
          f"ATen us: {aten}; host us/call: ATen {row['aten_host_us']:.1f}"
          + (f", gems {row['gems_host_us']:.1f}" if "gems_host_us" in row else ""), flush=True)
    print(f"  {'kind':6s} {'config':12s} {'splits':>6s} {'merge':>6s} {'us':>8s} {'xATen':>6s} {'%copy':>6s} "
          f"{'maxerr':>8s}")
    for g in sorted((g for g in row["gems"] if "us" in g), key=lambda g: g["us"]):
        mark = "*" if g.get("heuristic") else " "
        print(f"  {g['kind']:6s} {g['config'] or '-':12s} {str(g['splits']):>6s}{mark} {str(g['merge']):>6s} "
              f"{g['us']:8.1f} {g['vs_aten']:6.2f} {g['pct_copy']:6.1f} {g['max_abs_error']:8.1e}"
              + (f"  (tuned {g['chosen']}, first call {g['first_call_ms']:.0f} ms)" if g["kind"] == "op" and "chosen" in g else ""),
              flush=True)


if __name__ == "__main__":
    os.environ["GEMS_COMPILE"] = "sync"  # gems' kernels serve from the first call: none is timed on ATen
    raise SystemExit(main())
