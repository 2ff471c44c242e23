#!/usr/bin/env bash
# Run the op-case and pointwise test suites on a GPU, split over parallel processes
# (compiling kernels is CPU-bound), with autotuning off (each kernel's first config; the
# benchmarks cover the others). Writes OUTDIR/tests.txt: every shard's summary and failures.
# Usage: scripts/gpu_suite.sh OUTDIR [quick|full] [shards] [pytest -k expression]
set -u
out=${1:?usage: scripts/gpu_suite.sh OUTDIR [quick|full] [shards] [-k expression]}
profile=${2:-quick}
shards=${3:-$(nproc)}
expr=${4:-}
mkdir -p "$out"
logs=$(mktemp -d)
for ((i = 0; i < shards; i++)); do
  GEMS_AUTOTUNE=0 GEMS_TEST_PROFILE=$profile GEMS_TEST_SHARD="$i/$shards" timeout "${GEMS_SHARD_TIMEOUT:-420}" \
    python3 -m pytest tests/test_op_cases.py tests/test_pointwise.py -q -p no:cacheprovider \
    --tb=short ${expr:+-k "$expr"} > "$logs/shard$i.txt" 2>&1 &
done
wait
{
  for ((i = 0; i < shards; i++)); do
    echo "== shard $i/$shards"
    grep -E "^(FAILED|ERROR)|passed|failed|Timeout" "$logs/shard$i.txt" | tail -40
  done
  echo "== first failure tracebacks"
  grep -h -A25 "^_____" "$logs"/shard*.txt | head -300
} > "$out/tests.txt"
cat "$out/tests.txt" | grep -E "^== shard|passed|failed" 
