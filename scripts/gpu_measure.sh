#!/usr/bin/env bash
# The benchmarks on one GPU machine, written under OUTDIR (keep it outside the repository),
# in the order they are least disturbed: host overhead first (nothing else running), then
# kernels, sweeps of the GEMM decode tunables, the Llama decoder.
# Usage: scripts/gpu_measure.sh OUTDIR [seconds per step, default 150]
set -u
out=${1:?usage: scripts/gpu_measure.sh OUTDIR [seconds]}
limit=${2:-150}
mkdir -p "$out"
export GEMS_CACHE_DIR=${GEMS_CACHE_DIR:-$(mktemp -d)}
timeout "$limit" python3 benchmarks/host_profile.py > "$out/host_profile.txt" 2>&1
timeout "$limit" python3 benchmarks/run.py --json "$out/bench.json" > "$out/bench.txt" 2>&1
timeout "$limit" python3 benchmarks/sweep.py --tunable gemv --ops mm --cases GEMV --json "$out/sweep_gemv.json" \
  > /dev/null 2>&1
timeout "$limit" python3 benchmarks/sweep.py --tunable mm_decode --ops mm,addmm --cases 16x --json "$out/sweep_decode.json" \
  > /dev/null 2>&1
timeout "$limit" python3 benchmarks/llama.py --json "$out/llama.json" > "$out/llama.txt" 2>&1
tail -n 4 "$out/bench.txt" "$out/llama.txt"
