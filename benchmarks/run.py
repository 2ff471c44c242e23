"""gems benchmarks: ATen vs gems on the same device, in one run.

    python benchmarks/run.py                    # every case, table on stdout
    python benchmarks/run.py --json out.json    # and the raw numbers, written there
    python benchmarks/run.py --ops add,softmax  # a subset
    python benchmarks/run.py --host             # host overhead per call (wall clock)
    python benchmarks/run.py --grad-mode no_grad  # every call under torch.no_grad()

Kernel time is the median of ``triton.testing.do_bench``, ATen and gems measured in
alternating rounds (``--rounds``, the best round of each); bandwidth is reported as a share
of the device-to-device copy bandwidth measured at the start of the same run. Host
overhead is wall-clock time per call for a small op, issued back to back.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cases import CASES, HOST_CASES

import gems_core


#: --grad-mode: the autograd state the calls run under
GRAD_MODES = {"enabled": contextlib.nullcontext, "no_grad": torch.no_grad, "inference": torch.inference_mode}


def median_ms(fn) -> float:  # type: ignore[no-untyped-def]
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))


def copy_bandwidth(device: str) -> float:
    """GB/s of a device-to-device copy of 1 GiB (bytes read + written)."""
    src = torch.empty(2**28, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src))
    return 2 * src.numel() * 4 / ms / 1e6


def host_us(fn, calls: int = 2000) -> float:  # type: ignore[no-untyped-def]
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    best = math.inf
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def issue_us(fn, calls: int = 200) -> float:  # type: ignore[no-untyped-def]
    """Wall-clock microseconds to issue one call while the GPU is busy with a sleep kernel
    queued before the calls: their host path alone, for calls whose kernels take longer."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    best = math.inf
    for _ in range(5):
        torch.cuda._sleep(200_000_000)  # ~0.1 s at H100 clocks: longer than the calls' issue
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return best


def matmul_peak(device: str) -> float:
    """TFLOP/s of ATen's (cuBLAS's) bf16 8192^3 product: the matmul roofline of this run."""
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device=device)
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device=device)
    ms = median_ms(lambda: torch.mm(a, b))
    return 2 * 8192**3 / ms / 1e9


def aten_timings(case, inputs) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Milliseconds of ATen's call, and of each variant the case names (one that cannot
    run these inputs is left out)."""
    timings = {"default": median_ms(lambda: case.fn(*inputs))}
    for name, context in (case.aten_variants() if case.aten_variants else {}).items():
        if context is None:
            continue
        try:
            with context():
                case.fn(*inputs)
                timings[name] = median_ms(lambda: case.fn(*inputs))
        except RuntimeError:
            continue
    return timings


def served_count(case) -> int:  # type: ignore[no-untyped-def]
    """Calls gems has answered in this process (its Python kernels and the native layer's
    replays) of the case's overloads: ``case.gems_ops``, else those whose names hold its op."""
    from gems_core import registry
    from gems_core.dispatch import native_hits, served_calls

    ops = list(case.gems_ops) or [name for name in registry.all_impls() if case.op in name]
    return served_calls(ops) + native_hits(ops)


def run_kernels(device: str, only: set[str] | None, rounds: int = 2,
                named: str | None = None) -> tuple[list[dict], dict[str, float]]:
    peak = copy_bandwidth(device)
    flops_peak = matmul_peak(device)
    print(f"copy bandwidth: {peak:.0f} GB/s; matmul peak (ATen bf16 8192^3): {flops_peak:.0f} TFLOP/s")
    rows: list[dict] = []
    errors: list[dict] = []
    for case in CASES:
        if (only and case.op not in only) or (named and named not in case.name):
            continue
        try:
            inputs = case.make(device)
            answered = served_count(case)
            with gems_core.use_gems():
                first = time.perf_counter()
                case.fn(*inputs)
                torch.cuda.synchronize()
                first_ms = (time.perf_counter() - first) * 1e3
            served = served_count(case) > answered
            # ATen and gems in alternating rounds, the best round of each: a GPU that heats
            # up over a case (the large products draw full power) would otherwise penalize
            # whichever side is measured second
            aten: dict[str, float] = {}
            gems_ms = math.inf
            for _ in range(rounds):
                for name, ms in aten_timings(case, inputs).items():
                    aten[name] = min(aten.get(name, math.inf), ms)
                with gems_core.use_gems():
                    gems_ms = min(gems_ms, median_ms(lambda case=case, inputs=inputs: case.fn(*inputs)))
            aten_ms = min(aten.values())
        except Exception as exc:  # noqa: BLE001 - one case failing is a result, the rest still run
            errors.append({"case": case.name, "op": case.op, "error": f"{type(exc).__name__}: {exc}"[:500]})
            print(f"{case.name:42s} error: {errors[-1]['error']}", flush=True)
            continue
        moved = case.bytes(inputs)
        row = {
            "case": case.name, "op": case.op, "aten_ms": aten_ms, "gems_ms": gems_ms,
            "speedup": aten_ms / gems_ms, "first_call_ms": first_ms,
            "gems_gbps": moved / gems_ms / 1e6 if moved else None,
            "aten_gbps": moved / aten_ms / 1e6 if moved else None,
            "aten_variants_ms": aten if len(aten) > 1 else None,
            "aten_best": min(aten, key=aten.get),
            # whether gems answered a call of the case's op (a gated or declined op runs on
            # ATen, and its ratio then compares ATen with itself)
            "served": served,
        }
        row["gems_pct_copy"] = 100 * row["gems_gbps"] / peak if moved else None
        if case.flops is not None:
            work = case.flops(inputs)
            row["gems_tflops"] = work / gems_ms / 1e9
            row["aten_tflops"] = work / aten_ms / 1e9
            row["gems_pct_matmul_peak"] = 100 * row["gems_tflops"] / flops_peak
        rows.append(row)
        pct = f"{row['gems_pct_copy']:5.1f}% of copy" if moved else "   -         "
        if case.flops is not None:
            pct += f" {row['gems_tflops']:5.0f} TFLOP/s ({row['gems_pct_matmul_peak']:3.0f}% of mm peak)"
        best = f" (ATen best: {row['aten_best']})" if len(aten) > 1 else ""
        best += "" if served else "  [ON ATEN: gems served no call]"
        print(f"{case.name:42s} aten {aten_ms*1e3:9.1f} us  gems {gems_ms*1e3:9.1f} us  "
              f"x{row['speedup']:5.2f}  {pct}  first call {first_ms:7.1f} ms{best}", flush=True)
    if any(r["served"] for r in rows):
        speedups = [r["speedup"] for r in rows if r["served"]]
        geo = math.exp(sum(map(math.log, speedups)) / len(speedups))
        worst = min((r for r in rows if r["served"]), key=lambda r: r["speedup"])
        on_aten = [r["case"] for r in rows if not r["served"]]
        print(f"geometric-mean speedup x{geo:.3f} over {len(speedups)} cases gems served; worst "
              f"x{worst['speedup']:.2f} ({worst['case']})"
              + (f"; on ATen (left out): {', '.join(on_aten)}" if on_aten else ""))
    return rows + errors, {"copy_gbps": peak, "matmul_tflops": flops_peak}


def run_host(device: str, only: set[str] | None, rounds: int = 5) -> list[dict]:
    """Wall-clock microseconds per call, ATen and gems in alternating rounds (the best round
    of each): a busy host drifts by more than the difference being measured."""
    rows = []
    for case in HOST_CASES:
        if only and case.op not in only:
            continue
        inputs = case.make(device)
        aten = gems = math.inf
        timer = issue_us if case.busy else functools.partial(host_us, calls=1000)
        for _ in range(rounds):
            aten = min(aten, timer(lambda case=case, inputs=inputs: case.fn(*inputs)))
            with gems_core.use_gems():
                gems = min(gems, timer(lambda case=case, inputs=inputs: case.fn(*inputs)))
        rows.append({"case": case.name, "op": case.op, "aten_us": aten, "gems_us": gems, "ratio": gems / aten})
        print(f"host {case.name:36s} aten {aten:6.2f} us/call  gems {gems:6.2f} us/call  x{gems/aten:4.2f}",
              flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", help="comma-separated op names")
    parser.add_argument("--cases", help="only cases whose name contains this text")
    parser.add_argument("--host", action="store_true", help="only the host-overhead cases")
    parser.add_argument("--json", metavar="FILE",
                        help="write the raw numbers (meta, host, kernels, roofline) here "
                        "(default: only the table on stdout)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="alternating rounds of ATen and gems per case (the best of each is kept)")
    parser.add_argument("--grad-mode", choices=sorted(GRAD_MODES), default="enabled",
                        help="autograd state of every call, ATen's and gems' alike: 'enabled' (the "
                        "default: grad mode on, inputs that need no gradient), 'no_grad' (as "
                        "generation loops run) or 'inference' (torch.inference_mode)")
    args = parser.parse_args()
    device = gems_core.device
    if device != "cuda":
        print("benchmarks need a GPU backend (gems selected the CPU reference)", file=sys.stderr)
        return 2
    only = set(args.ops.split(",")) if args.ops else None
    import triton

    meta = {
        "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
        "gems_core": gems_core.__version__, "backend": gems_core.backend().name,
        "python": platform.python_version(), "date": time.strftime("%Y-%m-%d %H:%M"),
        "grad_mode": args.grad_mode,
        "kernel_variants": sorted(gems_core.runtime.current().policy.variants),  # backend kernels in use
    }
    print(" ".join(f"{k}={v}" for k, v in meta.items()))
    with GRAD_MODES[args.grad_mode]():
        result = {"meta": meta, "host": run_host(device, only)}
        if not args.host:
            result["kernels"], result["roofline"] = run_kernels(device, only, max(1, args.rounds), args.cases)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    os.environ["GEMS_COMPILE"] = "sync"  # gems' kernels serve from the first call: none is timed on ATen
    sys.exit(main())
