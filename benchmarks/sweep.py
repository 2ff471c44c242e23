"""Sweep one tunable kernel's configs over benchmark cases on the GPU, to choose a backend's
tuned configs from measurements.

    python benchmarks/sweep.py --tunable reduction --ops sum,amax,mean
    python benchmarks/sweep.py --tunable pointwise --ops gelu,add --configs "BLOCK_SIZE=2048/8,BLOCK_SIZE=4096/8"

Every case of ``benchmarks/cases.py`` whose op is in ``--ops`` runs twice per candidate config
(the list in order, then reversed; the best of the two is kept),
which is made the kernel's only config for the time (other kernels keep their choices); the table gives microseconds per case and
config, ATen's time, and the best config per case. ``--configs`` takes comma-separated
candidates ``P=V;P=V/warps[/stages]``; without it a built-in candidate list is used.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cases import CASES
from run import median_ms

import gems_core
from gems_core import KernelConfig, plan_cache, tuning


def _tile(bm: int, bn: int, warps: int) -> KernelConfig:
    return KernelConfig({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=warps, num_stages=1)


CANDIDATES: dict[str, list[KernelConfig]] = {
    "reduction": [
        _tile(1, 1024, 4), _tile(1, 2048, 8), _tile(1, 4096, 8), _tile(1, 4096, 16),
        _tile(2, 2048, 8), _tile(4, 1024, 8), _tile(4, 512, 4), _tile(8, 512, 8),
        _tile(16, 256, 8), _tile(32, 128, 8), _tile(64, 64, 8), _tile(128, 32, 8),
    ],
    "pointwise": [
        KernelConfig({"BLOCK_SIZE": size}, num_warps=warps, num_stages=1)
        for size, warps in ((1024, 4), (2048, 4), (2048, 8), (4096, 8), (4096, 16), (8192, 16))
    ],
    "softmax": [
        _tile(1, 1024, 4), _tile(1, 2048, 8), _tile(1, 4096, 8), _tile(1, 8192, 16),
        _tile(4, 256, 4), _tile(16, 128, 8), _tile(64, 64, 8),
    ],
    "mm_decode": [
        KernelConfig({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w, num_stages=st)
        for bm, bn, bk, w, st in ((16, 64, 128, 4, 4), (16, 128, 128, 4, 4), (16, 256, 64, 8, 4),
                                  (16, 128, 256, 8, 3), (16, 64, 256, 4, 4), (32, 128, 128, 4, 3),
                                  (16, 32, 512, 4, 3), (16, 256, 128, 8, 3))
    ],
    "gemv": [
        KernelConfig({"BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w, num_stages=st)
        for bn, bk, w, st in ((16, 128, 4, 2), (4, 512, 4, 2), (8, 512, 8, 2), (16, 256, 8, 2),
                              (32, 256, 8, 3), (64, 128, 8, 3), (8, 1024, 8, 3), (16, 512, 8, 3))
    ],
    "norm": [
        KernelConfig({"BLOCK_N": bn}, num_warps=w, num_stages=1)
        for bn, w in ((512, 4), (1024, 4), (2048, 8), (4096, 8), (4096, 16), (8192, 16))
    ],
    "attention": [
        KernelConfig({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=st)
        for bm, bn, w, st in ((128, 64, 8, 3), (128, 64, 8, 4), (128, 128, 8, 2), (128, 128, 8, 3), (64, 64, 4, 3),
                              (64, 64, 4, 4), (64, 128, 4, 2), (64, 32, 4, 3))
    ],
}


def parse_configs(text: str) -> list[KernelConfig]:
    configs = []
    for item in text.split(","):
        params_text, *launch = item.split("/")
        params = {k: int(v) for k, v in (p.split("=") for p in params_text.split(";"))}
        warps = int(launch[0]) if launch else 4
        stages = int(launch[1]) if len(launch) > 1 else 1
        # compiler options after the stages, e.g. /maxnreg=128
        options = {k: int(v) for k, v in (o.split("=") for o in launch[2].split(";"))} if len(launch) > 2 else {}
        configs.append(KernelConfig(params, num_warps=warps, num_stages=stages, options=options))
    return configs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tunable", required=True)
    parser.add_argument("--ops", required=True, help="comma-separated op names of benchmarks/cases.py")
    parser.add_argument("--configs", help="candidates, e.g. 'BLOCK_M=1;BLOCK_N=2048/8,...' "
                        "(params/warps/stages/compiler options: 'BLOCK_M=128;BLOCK_N=64/8/2/maxnreg=128')")
    parser.add_argument("--cases", help="only cases whose name contains this text")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if gems_core.device != "cuda":
        print("sweeps need a GPU backend", file=sys.stderr)
        return 2
    target = tuning.tunables()[args.tunable]
    candidates = parse_configs(args.configs) if args.configs else CANDIDATES[args.tunable]
    ops = set(args.ops.split(","))
    results = []
    for case in CASES:
        if case.op not in ops or (args.cases and args.cases not in case.name):
            continue
        inputs = case.make("cuda")
        aten_ms = median_ms(lambda case=case, inputs=inputs: case.fn(*inputs))
        timings: dict[str, float] = {}
        # each config twice, in list order and then reversed, keeping its best: a card that
        # heats up over a sweep would otherwise favour the configs measured first
        for config in [*candidates, *reversed(candidates)]:
            # the candidate becomes the kernel's only config (so plans are kept and a call
            # costs what it costs in use), with every choice and plan made before forgotten
            target.configs = lambda config=config: (config,)  # type: ignore[method-assign]
            target._chosen.clear()
            plan_cache.clear_all()
            try:
                with gems_core.use_gems():
                    case.fn(*inputs)
                    ms = median_ms(lambda case=case, inputs=inputs: case.fn(*inputs))
            except Exception as exc:  # a config this chip cannot compile or run
                print(f"  {config.describe()}: {type(exc).__name__}: {str(exc)[:120]}", flush=True)
                continue
            finally:
                del target.configs
                target._chosen.clear()
                plan_cache.clear_all()
            timings[config.describe()] = min(ms, timings.get(config.describe(), ms))
        if not timings:
            continue
        best = min(timings, key=timings.get)
        results.append({"case": case.name, "aten_ms": aten_ms, "timings_ms": timings, "best": best})
        print(f"{case.name}: ATen {aten_ms * 1e3:.1f} us", flush=True)
        for name, ms in sorted(timings.items(), key=lambda item: item[1]):
            print(f"    {ms * 1e3:9.1f} us  x{aten_ms / ms:5.2f}  {name}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"device": torch.cuda.get_device_name(), "tunable": args.tunable,
                                               "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    os.environ["GEMS_COMPILE"] = "sync"  # gems' kernels serve from the first call: none is timed on ATen
    sys.exit(main())
