"""Scalar arguments that Triton's compiler sees differently from the CPU interpreter.

On a GPU, Triton makes an integer argument equal to 1 a compile-time constant (a float64
fill of 5e-324 passes the bit pattern 1; an ``alpha`` of 1), and types every ``return`` of a
jitted function alike, also one after an ``if`` on a constexpr (a bool sum returned beside
an int64 product). The interpreter does neither, so these calls are compiled for sm_90 here
(compile-only execution, no GPU needed), and none of them may fail to compile: a failure
sends the op to ATen for the rest of the process.
"""

from __future__ import annotations

import compile_only
import pytest

CALLS = r"""
import json, warnings
import torch
import gems_core
from gems_core import runtime

warnings.simplefilter("ignore")
f64 = torch.randn(6, 5, dtype=torch.float64)
a, b = torch.rand(7, 9) > 0.5, torch.rand(9) > 0.5
i = torch.arange(12).reshape(3, 4)
calls = {
    "fill_ float64 5e-324": lambda: torch.empty(5, dtype=torch.float64).fill_(5e-324),
    "fill_ float64 -0.0": lambda: torch.empty(5, dtype=torch.float64).fill_(-0.0),
    "full float64 5e-324": lambda: torch.full((4, 3), 5e-324, dtype=torch.float64),
    "add float64 scalar 5e-324": lambda: torch.add(f64, 5e-324),
    "mul float64 scalar 5e-324": lambda: torch.mul(f64, 5e-324),
    "add float64 alpha 5e-324": lambda: torch.add(f64, f64, alpha=5e-324),
    "add bool alpha 0": lambda: torch.add(a, b, alpha=0),
    "add bool alpha 3": lambda: torch.add(a, b, alpha=3),
    "add_ bool alpha 0": lambda: a.clone().add_(b, alpha=0),
    "sub int64 alpha 1": lambda: torch.sub(i, i, alpha=1),
    "add int64 alpha 0": lambda: torch.add(i, i, alpha=0),
    "arange float64 step 5e-324": lambda: torch.arange(0.0, 1e-323, 5e-324, dtype=torch.float64),
    "addmm float64 beta 5e-324": lambda: torch.addmm(f64[:, :1].T.contiguous(), f64, f64.T, beta=5e-324, alpha=5e-324),
}
failed = {}
with gems_core.use_gems():
    for label, call in calls.items():
        before = dict(runtime.current().runtime_fallbacks)
        call()
        new = {k: v for k, v in runtime.current().runtime_fallbacks.items() if k not in before}
        if new:
            failed[label] = {k: v[-400:] for k, v in new.items()}
print(json.dumps({"failed": failed, "compile_only": runtime.current().compile_only}))
"""


@pytest.mark.parametrize("target", ["cuda:90:32", "cuda:80:32"])
def test_scalars_triton_makes_constants_compile(target: str) -> None:
    outcome, _ = compile_only.run(CALLS, target)
    assert outcome["compile_only"]
    assert outcome["failed"] == {}
