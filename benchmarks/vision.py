"""Vision ops, gems' kernels against ATen's (cuDNN on NVIDIA GPUs): ResNet-50's convolutions
forward and backward, batch norm, pooling and upsampling.

    python benchmarks/vision.py                          # bf16, channels_last, batch 64
    python benchmarks/vision.py --dtype float32 --batch 16 --out vision.jsonl
    python benchmarks/vision.py --quick --device cpu     # tiny shapes on the cpu backend

gems' implementation of each ATen op is called directly, as the dispatcher calls it, so a
backend's gate that leaves the op to ATen (NVIDIA leaves convolution to cuDNN) does not apply:
this is the measurement such a gate is decided on. ATen and gems take turns over ``--rounds``
rounds; a time is the median of ``triton.testing.do_bench`` (on the CPU a few wall-clock
calls), the best round counts, and the ratio is ATen's time over gems'. Each case also reports
the largest difference of gems' result from ATen's, relative to the largest value of ATen's.

Called directly, gems' implementation runs its Python path: the native dispatch layer, which
replays a model's calls from C++, is not in front of it, and a layer whose kernels take tens
of microseconds is timed by that path. On a GPU each case therefore also reports the GPU
kernel time of a call on each side (the profiler's sum over ten calls) and its ratio, which
the host does not move.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

import gems_core
from gems_core import registry

aten = torch.ops.aten

#: ResNet-50's convolutions at 224: (name, in, out, size, kernel, stride, padding). The 1x1
#: maps (half of its convolution FLOPs) are convolution's "unit" form, one matrix product,
#: but for the strided ones of the downsampling shortcuts
RESNET_CONVS = [
    ("conv1 7x7/2", 3, 64, 224, 7, 2, 3),
    ("layer1 3x3", 64, 64, 56, 3, 1, 1),
    ("layer2 3x3/2", 128, 128, 56, 3, 2, 1),
    ("layer2 3x3", 128, 128, 28, 3, 1, 1),
    ("layer3 3x3", 256, 256, 14, 3, 1, 1),
    ("layer4 3x3", 512, 512, 7, 3, 1, 1),
    ("layer1 1x1 64->256", 64, 256, 56, 1, 1, 0),
    ("layer1 1x1 256->64", 256, 64, 56, 1, 1, 0),
    ("layer2 1x1 512->128", 512, 128, 28, 1, 1, 0),
    ("layer3 1x1 256->1024", 256, 1024, 14, 1, 1, 0),
    ("layer4 1x1 2048->512", 2048, 512, 7, 1, 1, 0),
    ("layer2 1x1/2 256->512", 256, 512, 56, 1, 2, 0),
]


def cases(batch: int, dtype: torch.dtype, device: str, quick: bool) -> Iterator[tuple[str, str, Callable[[], tuple]]]:
    """(case, gems op, a function returning the op's arguments)."""
    scale = 8 if quick else 1

    def image(c: int, size: int) -> torch.Tensor:
        x = torch.randn(batch, c, size, size, device=device, dtype=dtype)
        return x.contiguous(memory_format=torch.channels_last)

    for name, cin, cout, size, k, stride, pad in RESNET_CONVS[: 2 if quick else None]:
        cin, cout, size = max(cin // scale, 3), max(cout // scale, 4), max(size // scale, 8)
        x = image(cin, size)
        w = (torch.randn(cout, cin, k, k, device=device, dtype=dtype) * 0.05).contiguous(
            memory_format=torch.channels_last)
        conv = (x, w, None, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], 1)
        yield f"convolution {name}", "convolution", lambda conv=conv: conv
        grad = aten.convolution(*conv)
        grad = torch.randn_like(grad)
        backward = (grad, x, w, [cout], [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], 1, [True, True, False])
        yield f"convolution_backward {name}", "convolution_backward", lambda backward=backward: backward
    c, size = (256, 56) if not quick else (16, 8)
    x = image(c, size)
    stats = [torch.randn(c, device=device), torch.randn(c, device=device),
             torch.zeros(c, device=device), torch.ones(c, device=device)]
    yield f"native_batch_norm train {c}x{size}²", "native_batch_norm", lambda: (x, *stats, True, 0.1, 1e-5)
    yield f"native_batch_norm eval {c}x{size}²", "native_batch_norm", lambda: (x, *stats, False, 0.1, 1e-5)
    pooled = image(64 // scale, 112 // scale)
    yield "max_pool2d 3x3/2", "max_pool2d_with_indices", lambda: (pooled, [3, 3], [2, 2], [1, 1], [1, 1], False)
    yield "avg_pool2d 3x3/2", "avg_pool2d", lambda: (pooled, [3, 3], [2, 2], [1, 1], False, True, None)
    last = image(2048 // scale, 7)
    yield "adaptive_avg_pool2d to 1x1", "_adaptive_avg_pool2d", lambda: (last, [1, 1])
    small = torch.randn(max(batch // 8, 1), 64 // scale, 128 // scale, 128 // scale, device=device, dtype=dtype)
    size2 = [2 * small.shape[2], 2 * small.shape[3]]
    yield "upsample_bilinear2d x2", "upsample_bilinear2d", lambda: (small, size2, False, None, None)
    yield "upsample_nearest2d x2", "upsample_nearest2d", lambda: (small, size2, None, None)


def timed(fn: Callable[[], Any], device: str) -> float:
    if device != "cpu":
        import triton

        return float(triton.testing.do_bench(fn))
    fn()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def kernel_us(fn: Callable[[], Any]) -> float:
    """GPU kernel time of one call of ``fn``, µs: the profiler's sum over ten calls."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
    return sum(e.device_time_total for e in prof.key_averages()) / 10


def _first(result: Any) -> torch.Tensor:
    return result[0] if isinstance(result, (tuple, list)) else result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    parser.add_argument("--device", default=None, help="the selected backend's device unless given")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="tiny shapes: a check that the script runs")
    parser.add_argument("--cases", default="", help="only the cases whose name contains this text")
    parser.add_argument("--out", help="write JSON lines here")
    args = parser.parse_args(argv)
    device = args.device or gems_core.device
    dtype = getattr(torch, args.dtype)
    registry.load_ops()
    impls = registry.all_impls()
    torch.manual_seed(0)
    rows = []
    for case, op, make in cases(args.batch, dtype, device, args.quick):
        if args.cases not in case:
            continue
        arguments = make()
        gems_fn, aten_fn = impls[op].fn, getattr(aten, op)
        want = _first(aten_fn(*arguments))
        got = _first(gems_fn(*arguments))
        if got is NotImplemented:
            print(f"{case:40s} gems declines this call", flush=True)
            continue
        difference = ((got.float() - want.float()).abs().max() / want.float().abs().max().clamp_min(1e-30)).item()
        times: dict[str, list[float]] = {"aten": [], "gems": []}
        for _ in range(args.rounds):
            times["aten"].append(timed(lambda: aten_fn(*arguments), device))
            times["gems"].append(timed(lambda: gems_fn(*arguments), device))
        row = {"case": case, "op": op, "aten_ms": min(times["aten"]), "gems_ms": min(times["gems"]),
               "rounds": times, "max_rel_difference": difference}
        row["ratio"] = row["aten_ms"] / row["gems_ms"]
        kernels = ""
        if torch.device(device).type == "cuda":
            row["aten_kernel_us"] = kernel_us(lambda: aten_fn(*arguments))
            row["gems_kernel_us"] = kernel_us(lambda: gems_fn(*arguments))
            row["kernel_ratio"] = row["aten_kernel_us"] / max(row["gems_kernel_us"], 1e-9)
            kernels = (f"  kernels {row['aten_kernel_us']:8.1f} / {row['gems_kernel_us']:8.1f} us "
                       f"{row['kernel_ratio']:5.2f}x")
        rows.append(row)
        print(f"{case:40s} ATen {row['aten_ms']:8.3f} ms  gems {row['gems_ms']:8.3f} ms  "
              f"{row['ratio']:5.2f}x{kernels}  difference {difference:.1e}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write(json.dumps({"kind": "environment", "device": device, "torch": torch.__version__,
                                "dtype": args.dtype, "batch": args.batch}) + "\n")
            f.writelines(json.dumps(row) + "\n" for row in rows)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
