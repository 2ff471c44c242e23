"""Where the host time of a small gems call goes, layer by layer, on the GPU.

    python benchmarks/host_profile.py [--calls 4000]

For add, sum and softmax on 1024 fp32 elements it times (wall clock per call, back to back):
ATen's call; gems through the dispatcher; gems' Python implementation called directly (no
dispatcher); and the pieces every call pays: an output allocation, a do-nothing Python
kernel behind the dispatcher, and the compiled Triton kernel launched directly. Then it
profiles gems' add with cProfile. Use it to decide what to trim next.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import math
import os
import pstats
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import host_us as per_call_us

import gems_core
from gems_core.registry import all_impls


def probe_library() -> tuple[object, object]:
    """Two do-nothing Python kernels behind the dispatcher (with and without the keyset)."""
    lib = torch.library.Library("gems_probe", "DEF")
    lib.define("noop(Tensor x) -> Tensor")
    lib.define("noop_keyset(Tensor x) -> Tensor")
    lib.impl("noop", lambda x: x, "CUDA")
    lib.impl("noop_keyset", lambda keyset, x: x, "CUDA", with_keyset=True)
    return lib, (torch.ops.gems_probe.noop.default, torch.ops.gems_probe.noop_keyset.default)


def allocation_race(a: torch.Tensor, rounds: int = 7, calls: int = 4000) -> None:
    """The ways to allocate a dense 1024-element output, timed in interleaved rounds (the
    best round of each): which one a plan should use is a difference of about a
    microsecond, smaller than the drift of a busy host between separate measurements."""
    dev, dtype, shape, strides = a.device, a.dtype, tuple(a.shape), a.stride()
    ways = {
        "torch.empty(shape, dtype=, device=)": lambda: torch.empty(shape, dtype=dtype, device=dev),
        "torch.empty_strided(shape, strides, dtype=, device=)":
            lambda: torch.empty_strided(shape, strides, dtype=dtype, device=dev),
        "torch.empty_like(a)": lambda: torch.empty_like(a),
        "a.new_empty(shape)": lambda: a.new_empty(shape),
        "a.new_empty_strided(shape, strides)": lambda: a.new_empty_strided(shape, strides),
    }
    best = dict.fromkeys(ways, math.inf)
    for _ in range(rounds):
        for name, fn in ways.items():
            best[name] = min(best[name], per_call_us(fn, calls))
    for name, us in sorted(best.items(), key=lambda item: item[1]):
        print(f"alloc {name:58s} {us:6.2f} us/call", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=4000)
    args = parser.parse_args()
    if gems_core.device != "cuda":
        print("host_profile needs a GPU backend", file=sys.stderr)
        return 2
    n = args.calls
    device = "cuda"
    a = torch.randn(1024, device=device)
    b = torch.randn(1024, device=device)
    row = torch.randn(1, 1024, device=device)
    impls = all_impls()

    rows: list[tuple[str, float]] = []

    def record(name: str, fn) -> None:  # type: ignore[no-untyped-def]
        us = per_call_us(fn, n)
        rows.append((name, us))
        print(f"{name:52s} {us:7.2f} us/call", flush=True)

    allocation_race(a)
    _lib, (noop, noop_keyset) = probe_library()
    record("dispatcher -> Python kernel (no-op)", lambda: noop(a))
    record("dispatcher -> Python kernel with keyset (no-op)", lambda: noop_keyset(a))
    record("ATen add", lambda: torch.add(a, b))
    record("ATen sum", lambda: torch.sum(a))
    record("ATen softmax", lambda: torch.softmax(row, -1))
    add_fn, sum_fn, softmax_fn = impls["add.Tensor"].fn, impls["sum"].fn, impls["_softmax"].fn
    gems_core.runtime.current()
    record("gems add impl called directly", lambda: add_fn(a, b))
    record("gems sum impl called directly", lambda: sum_fn(a))
    record("gems softmax impl called directly", lambda: softmax_fn(row, -1, False))
    with gems_core.use_gems():
        record("gems add via dispatcher", lambda: torch.add(a, b))
        record("gems sum via dispatcher", lambda: torch.sum(a))
        record("gems softmax via dispatcher", lambda: torch.softmax(row, -1))

    # the compiled kernel of add, launched with no gems Python around it
    from gems_core.ops.arithmetic import _add

    plan = next(iter(_add._plans._plans.values()))
    launch = plan.kernel
    out = torch.empty_like(a)
    record("gems add: Launch(a, b, out) (plan's launch)", lambda: launch(a, b, out))
    bound = launch.bound
    go, tail = next(iter(bound._entries.values()))
    full = (a, b, out, *launch.static, *tail)
    addresses = (a.data_ptr(), b.data_ptr(), out.data_ptr(), *launch.static, *tail)
    stream = torch.cuda.current_stream().cuda_stream
    grid = launch.grid
    record("launch entry, tensors as tensors", lambda: go(grid[0], grid[1], grid[2], stream, full))
    record("launch entry, tensors as addresses", lambda: go(grid[0], grid[1], grid[2], stream, addresses))
    from gems_core import compat
    from gems_core.launch_cache import fast_launcher, torch_launcher

    compiled = next(iter(launch.bound.cache.compiled.values()))
    variants = {
        "Triton's launcher object": fast_launcher(compiled, direct=False),
        "Triton's native launch, called directly": fast_launcher(compiled),
        "PyTorch's static CUDA launcher": torch_launcher(compiled),
    }
    for label, variant in variants.items():
        if variant is None:
            print(f"{label}: not available")
            continue
        record(f"{label} ({variant.__name__})",
               lambda variant=variant: variant(grid[0], grid[1], grid[2], stream, addresses))

    record("compat.current_stream", lambda: compat.current_stream(0))
    record("3x data_ptr()", lambda: (a.data_ptr(), b.data_ptr(), out.data_ptr()))
    dev = a.device
    record("torch.empty((1024,), dtype, device)", lambda: torch.empty((1024,), dtype=torch.float32, device=dev))
    record("a.new_empty((1024,))", lambda: a.new_empty((1024,)))
    print("\nlauncher:", go.__name__)

    with gems_core.use_gems():
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(20000):
            torch.add(a, b)
        profiler.disable()
        torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(30)
    print(text.getvalue())
    return 0


if __name__ == "__main__":
    os.environ["GEMS_COMPILE"] = "sync"  # gems' kernels serve from the first call: none is timed on ATen
    sys.exit(main())
