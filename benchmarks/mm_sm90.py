"""The NVIDIA backend's Hopper GEMM (the ``mm`` kernel variant) against cuBLAS and the core's
kernels, per config, on a Hopper GPU.

    python benchmarks/mm_sm90.py --json mm_sm90.json
    python benchmarks/mm_sm90.py --shapes 8192x8192x8192 --configs 128x256x64x3,128x128x64x5x16

For each product (M x N x K, B row-major "nn" or a linear layer's column-major weight "nt"):
ATen's time, gems' mm as dispatched (the variant's own config choice), gems' mm with the
variant suspended (the core's tiled or TMA kernel), and each config of the variant forced;
measured in alternating rounds (the best round of each: the card's clocks move large
products by up to 15 % between measurements), with the result checked against ATen's.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import math
import os
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import median_ms

import gems_core
from gems_core import variants

SHAPES = ["8192x8192x8192/nn", "4096x4096x4096/nn", "2048x14336x4096/nn", "1024x6144x4096/nt",
          "1024x28672x4096/nt", "1024x4096x14336/nt", "4096x4096x4096/nt", "8192x8192x8192/nt"]


def _config(text: str):  # type: ignore[no-untyped-def]
    from gems_backend_nvidia.gemm_sm90 import Config

    return Config(*(int(v) for v in text.split("x")))


@contextlib.contextmanager
def _core():  # type: ignore[no-untyped-def]
    """gems with the backend's mm variant suspended: the core's tiled or TMA kernel."""
    with gems_core.use_gems(), variants.suspended("mm"):
        yield


def main() -> None:
    from gems_backend_nvidia import gemm_sm90

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=",".join(SHAPES), help="MxNxK/nn or /nt, comma-separated")
    parser.add_argument("--configs", default="", help="BMxBNxBKxSTAGES[xGROUP_M], comma-separated (default: the variant's)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    configs = [_config(c) for c in args.configs.split(",") if c] or list(gemm_sm90.CONFIGS)
    device = gems_core.device
    units = torch.cuda.get_device_properties(device).multi_processor_count
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton "
          f"{__import__('triton').__version__}, {units} SMs")
    rows = []
    for spec in args.shapes.split(","):
        dims, layout = spec.split("/") if "/" in spec else (spec, "nn")
        m, n, k = (int(v) for v in dims.split("x"))
        a = torch.randn(m, k, dtype=torch.bfloat16, device=device)
        b_t = layout == "nt"
        b = torch.randn(n, k, dtype=torch.bfloat16, device=device).t() if b_t else \
            torch.randn(k, n, dtype=torch.bfloat16, device=device)
        ref = torch.mm(a, b)
        out = torch.empty_like(ref)

        device_index = torch.cuda.current_device()
        # name -> (the context it runs in, entered outside the timing; the call)
        providers = {
            "aten": (contextlib.nullcontext, lambda: torch.mm(a, b)),
            "gems": (gems_core.use_gems, lambda: torch.mm(a, b)),
            "core": (_core, lambda: torch.mm(a, b)),
        }
        for config in configs:
            providers[config.describe()] = (contextlib.nullcontext, lambda config=config: gemm_sm90.launch(
                a, b, out, 1.0, config, b_t, device_index))
        errors = {}
        for name, (context, fn) in providers.items():
            out.fill_(float("nan"))
            with context():
                got = fn()
            got = out if got is None else got
            errors[name] = ((got.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
        # wall time of a synchronized call (host and GPU): a provider far above its kernel
        # time is host-bound, and is profiled
        wall = {}
        for name, (context, fn) in providers.items():
            with context():
                torch.cuda.synchronize()
                start = time.perf_counter()
                for _ in range(3):
                    fn()
                torch.cuda.synchronize()
                wall[name] = (time.perf_counter() - start) / 3 * 1e3
                if wall[name] > 20 and name in ("gems", "core"):
                    profile = cProfile.Profile()
                    profile.runcall(fn)
                    torch.cuda.synchronize()
                    text = io.StringIO()
                    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(25)
                    print(f"  {name}: {wall[name]:.1f} ms a call; profile:\n{text.getvalue()[:6000]}", flush=True)
        best = {name: math.inf for name in providers}
        for _ in range(args.rounds):
            for name, (context, fn) in providers.items():
                with context():
                    best[name] = min(best[name], median_ms(fn))
        flops = 2 * m * n * k
        row = {"shape": spec, "choice": gemm_sm90.choose(m, n, units).describe(),
               "us": {name: ms * 1e3 for name, ms in best.items()},
               "tflops": {name: flops / ms / 1e9 for name, ms in best.items()},
               "vs_aten": {name: best["aten"] / ms for name, ms in best.items()},
               "rel_error_vs_aten": errors, "wall_ms": wall}
        rows.append(row)
        print(f"{spec:22s} " + "  ".join(f"{name} {row['us'][name]:8.1f}us x{row['vs_aten'][name]:.3f}"
                                         for name in providers), flush=True)
        bad = {name: e for name, e in errors.items() if not e < 2e-2}
        if bad:
            print(f"  results off from ATen's: {bad}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1))


if __name__ == "__main__":
    os.environ["GEMS_COMPILE"] = "sync"  # gems' kernels serve from the first call: none is timed on ATen
    main()
