#!/usr/bin/env bash
# One entry point for the README's commands:
#   ./run.sh demo   set up, then run a model under gems and the conformance summary
#   ./run.sh test   set up, then run the test suite
#   ./run.sh setup  set up only
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}

setup() {
    # torch first, pinned: an unpinned torch would pull the CUDA build and its packages.
    if ! "$PYTHON" -c "import torch" 2>/dev/null; then
        "$PYTHON" -m pip install --quiet "torch==2.13.0"
    fi
    "$PYTHON" -m pip install --quiet -e ".[test]" -e conformance \
        -e backends/nvidia -e backends/amd -e backends/iluvatar -e backends/metax -e backends/kunlunxin
}

case "${1:-demo}" in
    setup) setup ;;
    demo) setup; shift || true; "$PYTHON" examples/demo.py "$@" ;;
    test) setup; shift || true; "$PYTHON" -m pytest -q "$@" ;;
    *) echo "usage: ./run.sh [setup|demo|test] [args...]" >&2; exit 2 ;;
esac
