#!/usr/bin/env bash
# One entry point for the README's commands:
#   ./run.sh demo   set up, then run a model under gems and the conformance summary
#   ./run.sh test   set up, then run the test suite
#   ./run.sh setup  set up only
# Setup makes a virtual environment in .venv/ (VENV= names another folder; PYTHON= the
# interpreter that creates it) and installs torch (the pinned CPU wheel, when the environment
# has none), gems-core, the conformance suite and the five backends into it, editable. A
# later run installs again only when a pyproject.toml changed or a package went missing.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
PY="$VENV/bin/python"
PACKAGES=(-e ".[test]" -e conformance -e backends/nvidia -e backends/amd -e backends/iluvatar
          -e backends/metax -e backends/kunlunxin)
STAMP="$VENV/.gems-setup"

step() {  # step "what" command...: says what runs, then how long it took
    local what=$1 start=$SECONDS
    shift
    echo "==> $what" >&2
    "$@" || return
    echo "    ($what: $((SECONDS - start)) s)" >&2
}

pip_install() {  # pip's progress, one line a package rather than its every detail
    "$PY" -m pip install --progress-bar off "$@" \
        | { grep --line-buffered -E '^(Collecting|Building|Successfully|Installing collected)' || true; }
}

stamp() {  # what the installed packages were built from: every pyproject.toml, the Python
    "$PY" -c 'import hashlib, sys
h = hashlib.sha256(sys.version.encode())
for path in sys.argv[1:]:
    h.update(path.encode() + open(path, "rb").read())
print(h.hexdigest())' pyproject.toml conformance/pyproject.toml backends/*/pyproject.toml
}

installed() {
    "$PY" -c 'import importlib.util as u, sys
sys.exit(any(u.find_spec(m) is None for m in sys.argv[1:]))' \
        torch triton gems_core gems_conformance pytest xdist "gems_backend_"{nvidia,amd,iluvatar,metax,kunlunxin}
}

setup() {
    if [ ! -x "$PY" ]; then
        if ! command -v "$PYTHON" > /dev/null; then
            echo "run.sh: no '$PYTHON' here; name a Python >= 3.10 with PYTHON=" >&2
            exit 1
        fi
        if ! step "creating the virtual environment $VENV with $("$PYTHON" --version 2>&1)" \
                "$PYTHON" -m venv "$VENV"; then
            echo "run.sh: '$PYTHON -m venv' failed; on Debian or Ubuntu install python3-venv," \
                 "or name another Python with PYTHON=" >&2
            exit 1
        fi
    fi
    local want
    want=$(stamp)
    if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && installed; then
        echo "==> $VENV is set up (delete $STAMP to install again)" >&2
        return
    fi
    if ! "$PY" -c "import torch" 2>/dev/null; then
        # pinned: an unpinned torch would pull the CUDA build and its packages (GBs)
        step "installing torch==2.13.0, the CPU wheel (about 200 MB)" pip_install "torch==2.13.0"
    fi
    step "installing gems-core, gems-conformance and the five backends (editable)" \
        pip_install "${PACKAGES[@]}"
    echo "$want" > "$STAMP"
}

case "${1:-demo}" in
    setup) setup ;;
    demo) setup; shift || true; exec "$PY" examples/demo.py "$@" ;;
    test)
        setup; shift || true
        echo "==> pytest (the whole suite: 15-25 min on 2 cores, kernels running in Triton's" \
             "CPU interpreter, one worker a core; ./run.sh test -k <words> runs a part)" >&2
        # one worker a core, so each computes in one thread: more threads than cores spin
        # and wait on each other (the suite took about an eighth longer with torch's default)
        OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} exec "$PY" -m pytest -q -n auto --dist worksteal "$@" ;;
    *) echo "usage: ./run.sh [setup|demo|test] [args...]" >&2; exit 2 ;;
esac
