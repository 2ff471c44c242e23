#!/usr/bin/env bash
# Run the op-case suite on a GPU in parallel shards (compiling kernels is CPU-bound), plus
# the conformance report of the detected backend. Usage: scripts/gpu_suite.sh OUTDIR [profile]
set -u
out=${1:?usage: scripts/gpu_suite.sh OUTDIR [quick|full]}
profile=${2:-quick}
mkdir -p "$out" /tmp/gems-shards
slice="add or sub or mul or div or neg or exp or relu or gelu or silu or where or sum or mean or amax or softmax or norm or mm"
shards=(
  "add or sub or mul or div or neg"
  "exp or relu or gelu or silu or where"
  "sum or mean or amax"
  "softmax or norm"
  "mm"
  "not ($slice) and (max or min or arg or all or any or prod or var or std or cumsum or entropy or group)"
  "not ($slice) and not (max or min or arg or all or any or prod or var or std or cumsum or entropy or group)"
)
i=0
for k in "${shards[@]}"; do
  GEMS_TEST_PROFILE=$profile timeout 420 python3 -m pytest tests/test_op_cases.py -q -p no:cacheprovider \
    -k "$k" > "/tmp/gems-shards/$i.txt" 2>&1 &
  i=$((i + 1))
done
timeout 420 python3 -m pytest tests/test_pointwise.py -q -p no:cacheprovider > /tmp/gems-shards/pointwise.txt 2>&1 &
timeout 420 gems-conformance --device "$(python3 -c 'import gems_core; print(gems_core.backend().name)')" \
  --quick --tier contract,accuracy,performance --report "$out/conformance" --quiet \
  > /tmp/gems-shards/conformance.txt 2>&1 &
wait
for f in /tmp/gems-shards/*.txt; do echo "== $f"; grep -E "passed|failed|error|FAILED|Error" "$f" | tail -40; done > "$out/tests.txt"
cat "$out/tests.txt"
