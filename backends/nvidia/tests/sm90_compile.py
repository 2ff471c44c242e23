"""The sm_90 compiles of an NVIDIA kernel variant, as the compile tier makes them, run in a
child process: a process that has run kernels in Triton's interpreter (the cpu backend's
tests) keeps interpreted helpers that a compiled Gluon kernel cannot reference."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

_SCRIPT = """
import importlib, json, sys
from types import SimpleNamespace
import triton
from gems_core import KernelVariant, TritonTarget
from gems_conformance.compile_check import _variant_records

module_name, point, op, ptx_config = sys.argv[1:5]
A = importlib.import_module(module_name)
target = TritonTarget("cuda", 90, 32)
limits = SimpleNamespace(shared_memory_per_block=227 * 1024, max_threads_per_block=1024, max_warps=32,
                         max_block_elements=0)
entry = KernelVariant(point, getattr(A, point), compiles=A.compiles)
runtime = SimpleNamespace(policy=SimpleNamespace(variants={point: entry}))
out = {}
for record in _variant_records(runtime, target, limits, None):
    assert record.kernel == point + " (variant)" and record.op == op, (record.kernel, record.op)
    out[record.config] = {"status": record.status, "message": record.message, "shared": record.shared,
                          "registers": record.registers, "spills": record.spills}
# the PTX of one compile
item = next(item for item in A.compiles(target) if item.config == ptx_config)
kernel = triton.compile(item.source, target=triton.backends.compiler.GPUTarget("cuda", 90, 32),
                        options=dict(item.options))
ptx = kernel.asm["ptx"]
out["ptx"] = {"wgmma": "wgmma.mma_async" in ptx, "bulk_copies": "cp.async.bulk.tensor" in ptx,
              "bulk_stores": ptx.count("cp.async.bulk.tensor.2d.global.shared"),
              "setmaxnreg": "setmaxnreg" in ptx, "overlapped_waits": ptx.count("wgmma.wait_group.sync.aligned 1")}
meta = kernel.metadata
out["launch"] = {"tensordesc_meta": [dict(m) for m in (getattr(meta, "tensordesc_meta", None) or ())],
                 "signature": {str(k): v for k, v in item.source.signature.items()},
                 "arg_names": list(item.source.fn.arg_names), "num_ctas": getattr(meta, "num_ctas", 1),
                 "scratch": [getattr(meta, f, None) for f in ("global_scratch_size", "profile_scratch_size")]}
out["none_for"] = [len(A.compiles(TritonTarget("cuda", 80, 32))), len(A.compiles(TritonTarget("hip", "gfx942", 64)))]
json.dump(out, sys.stdout)
"""


def compile_records(module: str, point: str, op: str, ptx_config: str) -> dict[str, Any]:
    """config -> the compile tier's record (status, message, shared, registers, spills) of
    each compile ``module.compiles`` lists for sm_90; "ptx": features of ``ptx_config``'s
    PTX; "launch": what the native layer's description of its launch reads (the tensor
    descriptors' metadata, the signature, the scratch sizes); "none_for": how many compiles
    it lists for sm_80 and gfx942."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", _SCRIPT, module, point, op, ptx_config], env=env,
                          capture_output=True, text=True, check=False, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)
