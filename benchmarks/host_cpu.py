"""gems' host path per call, measured on the CPU with kernel launches stubbed out.

    python benchmarks/host_cpu.py [--calls 20000] [--profile]

Each op runs once for real (on the cpu backend's interpreter) so its plan exists; then every
kernel cache is switched to the path a GPU takes (compiled kernels, launched through their
plans' bound launchers) with a launch that does nothing. What remains per call is gems'
Python (dispatch wrapper, signature lookup, output allocation, launch arguments) plus the
dispatcher's own trampoline: the part of a small op's cost gems controls, measurable without
a GPU. ATen's own CPU call is printed alongside for scale (it computes; gems does not).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import math
import os
import pstats
import sys
import time

import torch
import torch.nn.functional as F

import gems_core
from gems_core import compat, launch_cache

CASES = {
    "add": (lambda: (torch.randn(1024), torch.randn(1024)), lambda a, b: torch.add(a, b)),
    "mul scalar": (lambda: (torch.randn(1024),), lambda a: a * 2.0),
    "sum": (lambda: (torch.randn(1024),), lambda a: torch.sum(a)),
    "softmax": (lambda: (torch.randn(1, 1024),), lambda a: torch.softmax(a, -1)),
    "rms_norm": (lambda: (torch.randn(4, 256), torch.randn(256)), lambda x, w: F.rms_norm(x, (256,), w)),
    "mm decode": (lambda: (torch.randn(2, 64), torch.randn(96, 64).t()), lambda a, b: torch.mm(a, b)),
}


def per_call_us(fn, calls: int) -> float:  # type: ignore[no-untyped-def]
    for _ in range(200):
        fn()
    best = math.inf
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def stub_launches() -> None:
    """From now on kernels take the GPU's launch path and launch nothing."""

    def nothing(gx: int, gy: int, gz: int, stream: int, args: tuple) -> None:
        return None

    def entry_for(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        return (nothing, ())

    launch_cache.LaunchCache.entry_for = entry_for  # type: ignore[method-assign]
    for cache in launch_cache.all_caches():
        cache.interpreted = False
    compat.stream_function = lambda: (lambda index: 0)  # type: ignore[assignment]
    compat.current_stream = lambda index: 0  # type: ignore[assignment]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--profile", action="store_true", help="cProfile the add case")
    args = parser.parse_args()
    if gems_core.device != "cpu":
        print("host_cpu measures the cpu backend's host path", file=sys.stderr)
        return 2
    inputs = {name: make() for name, (make, _) in CASES.items()}
    aten = {name: per_call_us(lambda name=name: CASES[name][1](*inputs[name]), args.calls) for name in CASES}
    with gems_core.use_gems():
        for name, (_, fn) in CASES.items():  # real runs: plans and replays exist afterwards
            for _ in range(3):
                fn(*inputs[name])
        stub_launches()
        for name, (_, fn) in CASES.items():
            gems = per_call_us(lambda fn=fn, name=name: fn(*inputs[name]), args.calls)
            print(f"{name:12s} ATen (computing) {aten[name]:6.2f} us   gems host path {gems:6.2f} us", flush=True)
        if args.profile:
            profiler = cProfile.Profile()
            a, b = inputs["add"]
            profiler.enable()
            for _ in range(args.calls):
                torch.add(a, b)
            profiler.disable()
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(20)
            print(text.getvalue())
    return 0


if __name__ == "__main__":
    os.environ["GEMS_COMPILE"] = "sync"  # gems' kernels serve from the first call: none is timed on ATen
    sys.exit(main())
