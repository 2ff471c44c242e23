"""Run a script in a child process in compile-only execution (``GEMS_COMPILE_TARGET``): the
NVIDIA backend's kernels compiled for a GPU target on a machine without one, as the
conformance suite's compile tier does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from gems_core.contract import TritonTarget


def run(script: str, target: str = "cuda:90:32", **env: str) -> tuple[Any, str]:
    """``script``'s outcome: the JSON of its last line on stdout, and its stderr. Skips where
    the NVIDIA backend is not installed or Triton lacks the target's compiler; fails where the
    script does."""
    pytest.importorskip("gems_backend_nvidia")
    from gems_conformance.compile_check import _compiler_missing

    backend, arch, warp = target.split(":")
    missing = _compiler_missing(TritonTarget(backend, int(arch), int(warp)))
    if missing:
        pytest.skip(missing)
    child = dict(os.environ)
    child.pop("TRITON_INTERPRET", None)
    child.update(GEMS_DEVICE="nvidia", GEMS_COMPILE_TARGET=target, TRITON_DEFAULT_FP_FUSION="1", **env)
    proc = subprocess.run([sys.executable, "-c", script], env=child, capture_output=True, text=True,
                          check=False, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr
