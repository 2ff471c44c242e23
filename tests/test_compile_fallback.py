"""A kernel that fails to compile on the selected chip sends its op to ATen, with one warning
and the reason recorded (gems_core.dispatch).

The failure must be a real one, from Triton's compiler. The throwaway backend (installed with
a real entry point in ``gems_core.backends``) passes ptxas a flag it refuses, through its
compiler options. Without a GPU the CPU interpreter compiles nothing, so the check runs in
compile-only execution (``GEMS_COMPILE_TARGET``): launches are compiled for cuda sm_90 by
the installed Triton and the ATen fallback computes on the CPU. On an NVIDIA GPU the same
check also runs as emulation on the GPU itself.
"""

from __future__ import annotations

import json

import pytest
import torch
from plugin_factory import FakePlugin, run_code, write_site

PTXAS_REFUSES = FakePlugin(
    name="ptxasrefuses",
    target=("cuda", 90, 32),
    hooks='''
    @hookimpl
    def gems_compiler_options(arch):
        return {"*": {"ptx_options": "--no-such-ptxas-flag"}}
    ''',
)

CALLS = """
import json, warnings
import torch
import gems_core
from gems_core import runtime

x = torch.arange(35, dtype=torch.float32).reshape(5, 7).to(gems_core.device)
y = 2 * x
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with gems_core.use_gems():
        first = torch.add(x, x)
        second = torch.add(x, y)
print(json.dumps({
    "first_ok": bool(torch.equal(first.cpu(), (x + x).cpu())),
    "second_ok": bool(torch.equal(second.cpu(), (x + y).cpu())),
    "warnings": [str(w.message) for w in caught if "failed to compile" in str(w.message)],
    "fallbacks": runtime.current().runtime_fallbacks,
    "compile_only": runtime.current().compile_only,
}))
"""


def _run(tmp_path, env: dict[str, str]) -> dict:
    site = write_site(tmp_path / "site", PTXAS_REFUSES)
    result = run_code(CALLS, site=site, env={"GEMS_DEVICE": PTXAS_REFUSES.name, **env})
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def _assert_fell_back_once(outcome: dict) -> None:
    assert outcome["first_ok"] and outcome["second_ok"]  # ATen computed both
    assert len(outcome["warnings"]) == 1, outcome["warnings"]
    assert "add.Tensor" in outcome["warnings"][0]
    assert set(outcome["fallbacks"]) == {"add.Tensor"}
    assert "no-such-ptxas-flag" in outcome["fallbacks"]["add.Tensor"]


def test_compile_failure_sends_the_op_to_aten_once(tmp_path) -> None:
    outcome = _run(tmp_path, {"GEMS_EMULATE": "1", "GEMS_COMPILE_TARGET": "cuda:90"})
    assert outcome["compile_only"]
    _assert_fell_back_once(outcome)


@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.version.hip is not None,
    reason="needs an NVIDIA GPU: emulation compiles for the GPU present",
)
def test_compile_failure_on_a_gpu_sends_the_op_to_aten_once(tmp_path) -> None:
    outcome = _run(tmp_path, {"GEMS_EMULATE": "1"})
    assert not outcome["compile_only"]
    _assert_fell_back_once(outcome)
