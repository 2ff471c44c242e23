"""``GEMS_LIFT_GATES``: ops served on gems although the backend leaves them to ATen, to measure
or certify what a backend gates. The NVIDIA backend's policy under emulation: its convolution
gate (which keeps two forms on gems) is lifted for the named overloads or packets only, a name
it does not gate is warned about, the chip's unsupported dtypes and the emulation host's gates
stay; and in a process where
the gate is lifted a 3x3 convolution runs on gems' kernels."""

from __future__ import annotations

import json

import pytest
from plugin_factory import run_code

from gems_core.policy import ALL_DTYPES, PolicyWarning, build_policy
from gems_core.selection import select

pytest.importorskip("gems_backend_nvidia")
EMULATED = {"GEMS_DEVICE": "nvidia", "GEMS_EMULATE": "1"}


def _policy(monkeypatch: pytest.MonkeyPatch, lifted: str | None) -> object:
    if lifted is None:
        monkeypatch.delenv("GEMS_LIFT_GATES", raising=False)
    else:
        monkeypatch.setenv("GEMS_LIFT_GATES", lifted)
    return build_policy(select(EMULATED))


def test_named_gates_are_lifted_and_the_rest_stay(monkeypatch: pytest.MonkeyPatch) -> None:
    gated = _policy(monkeypatch, None)
    assert gated.gate_for("convolution") == ALL_DTYPES and gated.keeps_for("convolution") == {"patches", "unit"}
    assert gated.gate_for("convolution_backward") == ALL_DTYPES
    lifted = _policy(monkeypatch, " convolution , _scaled_mm.out")
    # a packet's name lifts each of its overloads' gates, an overload's only its own
    assert lifted.gate_for("convolution") is None and lifted.gate_for("convolution.out") is None
    assert lifted.keeps_for("convolution") == frozenset()
    assert "_scaled_mm.out" not in lifted.gates and "_scaled_mm" in lifted.gates
    assert lifted.gate_for("_scaled_mm.out") == ALL_DTYPES  # its packet's gate still applies to it
    assert lifted.gate_for("convolution_backward") == ALL_DTYPES
    assert lifted.gate_for("mm") == gated.gate_for("mm")
    assert lifted.unsupported_dtypes == gated.unsupported_dtypes


def test_attention_with_dropout_is_left_to_aten_until_lifted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The NVIDIA backend's gate on a form alone: attention's dropout calls go to ATen, the
    op stays served (its float32 gate aside); lifting the op lifts both."""
    gated = _policy(monkeypatch, None)
    assert gated.leaves_for("scaled_dot_product_attention") == {"dropout"}
    assert "float16" not in gated.gate_for("scaled_dot_product_attention")
    lifted = _policy(monkeypatch, "scaled_dot_product_attention")
    assert lifted.leaves_for("scaled_dot_product_attention") == frozenset()
    assert "float32" not in (lifted.gate_for("scaled_dot_product_attention") or ())


def test_a_name_that_lifts_nothing_is_warned_about(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.warns(PolicyWarning, match="GEMS_LIFT_GATES names softmax, which backend 'nvidia' does not gate"):
        policy = _policy(monkeypatch, "softmax,mm")
    # NVIDIA's float32 gate on mm is lifted; the host's under emulation (the CPU interpreter's
    # bfloat16 products) stays
    assert "float32" in _policy(monkeypatch, None).gate_for("mm")
    assert policy.gate_for("mm") == frozenset({"bfloat16"})


def test_a_lifted_convolution_runs_on_gems() -> None:
    code = """
        import json, torch, torch.nn.functional as F
        import gems_core
        from gems_conformance.routing import RouteWatch, implementations
        g = torch.Generator().manual_seed(0)
        x = torch.rand(1, 4, 6, 5, generator=g, dtype=torch.float64).float()
        w = torch.rand(3, 4, 3, 3, generator=g, dtype=torch.float64).float()
        with RouteWatch(implementations(["convolution"])["convolution"]) as watch, gems_core.use_gems():
            y = F.conv2d(x, w, padding=1)
        error = (y.double() - F.conv2d(x.double(), w.double(), padding=1)).abs().max().item()
        print(json.dumps({"served": watch.hit, "error": error}))
    """
    outcomes = {}
    for lifted in ("", "convolution"):
        proc = run_code(code, env={**EMULATED, "GEMS_LIFT_GATES": lifted})
        assert proc.returncode == 0, proc.stderr[-3000:]
        outcomes[lifted] = json.loads(proc.stdout.strip().splitlines()[-1])
        assert outcomes[lifted]["error"] < 1e-4
    assert not outcomes[""]["served"] and outcomes["convolution"]["served"]


def test_a_conformance_report_states_the_lifted_gates(monkeypatch: pytest.MonkeyPatch) -> None:
    """A report made with gates lifted certifies as gems' own what the backend would leave to
    ATen: its statement says so (and says nothing where no gate is lifted)."""
    from gems_conformance import statement

    monkeypatch.delenv("GEMS_LIFT_GATES", raising=False)
    assert "lifted_gates" not in statement.describe_backend("cpu", None)
    monkeypatch.setenv("GEMS_LIFT_GATES", "convolution_backward,convolution")
    facts = statement.describe_backend("cpu", None)
    assert facts["lifted_gates"] == "convolution, convolution_backward"
    assert ("backend gates lifted (GEMS_LIFT_GATES)", "convolution, convolution_backward") in statement.lines(facts)
