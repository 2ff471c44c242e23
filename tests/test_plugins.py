"""Backend selection and plugin failure modes, with throwaway plugins on real entry points.

gems selects its backend once per process, so every scenario runs in a subprocess: either
``python -m gems_core info`` (exit 0, or 2 with the installed backends and the error) or a
short script that selects a backend the way a user does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from plugin_factory import (
    GEMS_SELECTION_VARIABLES,
    FakePlugin,
    pip_install_target,
    run_code,
    run_info,
    run_python,
    write_project,
    write_site,
)

import gems_core

BROKEN = FakePlugin("broken", import_error="vendor SDK libfake.so not found")
TOO_NEW = FakePlugin("toonew", gems_core_versions=">=99.0")
SELECT_AND_ADD = """
    import torch, gems_core
    print("backend:", gems_core.backend().name)
    with gems_core.use_gems(include="add.Tensor"):
        print("sum:", torch.add(torch.ones(3), torch.ones(3)).tolist())
"""
SELECT = "import gems_core; gems_core.backend()"


def info_json(site: Path | None = None, **env: str) -> dict:
    result = run_info("--json", site=site, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def backend_row(report: dict, name: str) -> dict:
    return next(row for row in report["backends"] if row["name"] == name)


def assert_selection_error(result, *fragments: str) -> None:
    """info failed cleanly: exit 2, the installed backends and the error, no traceback."""
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "Traceback" not in output
    assert "Installed backends" in result.stdout
    assert "Error: no gems backend could be selected" in result.stdout
    for fragment in fragments:
        assert fragment in output, f"{fragment!r} not in:\n{output}"


# ---------------------------------------------------------------- info on the cpu backend


def test_info_lists_cpu_selected_by_environment():
    result = run_info(env={"GEMS_DEVICE": "cpu"})
    assert result.returncode == 0, result.stderr
    assert "* cpu" in result.stdout
    assert "Selected backend: cpu" in result.stdout
    assert "environment: GEMS_DEVICE=cpu" in result.stdout
    assert f"gems-core {gems_core.__version__}" in result.stdout


def test_info_json_reports_policy_ops_and_tunables():
    report = info_json(GEMS_DEVICE="cpu")
    assert report["error"] is None
    assert backend_row(report, "cpu")["selected"]
    assert report["selection"]["emulated"] is False
    assert report["selection"]["interpreter"] is True
    assert "add.Tensor" in [e["name"] for e in report["ops"]["packets"]["add"]]
    assert report["ops"]["count"] == sum(len(v) for v in report["ops"]["packets"].values())
    assert "BLOCK_SIZE" in next(t for t in report["tunables"] if t["name"] == "pointwise")["params"]
    assert all(d["reason"] for d in report["policy"]["deviations"])


def test_info_without_gems_device_explains_the_default():
    report = info_json()
    assert report["selection"]["backend"] == "cpu"
    assert report["selection"]["how"] == "default"


# ---------------------------------------------------------------- a plugin that fails to import


def test_broken_plugin_not_selected_warns_and_others_work(tmp_path):
    result = run_code(SELECT_AND_ADD, site=write_site(tmp_path, BROKEN))
    assert result.returncode == 0, result.stderr
    assert "backend: cpu" in result.stdout
    assert "sum: [2.0, 2.0, 2.0]" in result.stdout
    assert "gems backend 'broken'" in result.stderr
    assert "skipped: RuntimeError: vendor SDK libfake.so not found" in result.stderr


def test_info_shows_broken_plugin_failed_with_cause(tmp_path):
    report = info_json(write_site(tmp_path, BROKEN))
    row = backend_row(report, "broken")
    assert row["state"] == "failed"
    assert row["error"] == "RuntimeError: vendor SDK libfake.so not found"
    assert row["distribution"] == "gems-backend-broken"
    assert report["selection"]["backend"] == "cpu"


def test_broken_plugin_selected_raises_with_cause(tmp_path):
    result = run_code(SELECT, site=write_site(tmp_path, BROKEN), env={"GEMS_DEVICE": "broken"})
    assert result.returncode != 0
    assert "BackendError" in result.stderr
    assert "failed to load: RuntimeError: vendor SDK libfake.so not found" in result.stderr


def test_info_with_broken_plugin_selected_exits_2(tmp_path):
    result = run_info(site=write_site(tmp_path, BROKEN), env={"GEMS_DEVICE": "broken"})
    assert_selection_error(result, "vendor SDK libfake.so not found", "broken")


# ---------------------------------------------------------------- detection


def test_two_detected_backends_ask_for_gems_device(tmp_path):
    site = write_site(
        tmp_path,
        FakePlugin("chipa", detect=("Chip A", "a1")),
        FakePlugin("chipb", detect=("Chip B", "b1")),
    )
    result = run_info(site=site)
    assert_selection_error(result, "chipa (Chip A)", "chipb (Chip B)", "Set GEMS_DEVICE")


def test_gems_device_picks_one_of_two_detected(tmp_path):
    site = write_site(
        tmp_path,
        FakePlugin("chipa", detect=("Chip A", "a1")),
        FakePlugin("chipb", detect=("Chip B", "b1")),
    )
    report = info_json(site, GEMS_DEVICE="chipb")
    assert report["selection"]["backend"] == "chipb"
    assert report["selection"]["how"] == "environment"
    assert report["selection"]["device"] == "Chip B"


def test_one_detected_backend_is_selected_by_detection(tmp_path):
    report = info_json(write_site(tmp_path, FakePlugin("chipa", detect=("Chip A", "a1"))))
    assert report["selection"]["backend"] == "chipa"
    assert report["selection"]["how"] == "detection"
    assert (backend_row(report, "chipa")["device"], backend_row(report, "chipa")["arch"]) == (
        "Chip A",
        "a1",
    )


def test_unknown_gems_device_lists_installed_backends(tmp_path):
    site = write_site(tmp_path, FakePlugin("chipa"), BROKEN)
    result = run_info(site=site, env={"GEMS_DEVICE": "nosuchchip"})
    assert_selection_error(
        result,
        "GEMS_DEVICE='nosuchchip' names no installed gems backend",
        "cpu (loaded)",
        "chipa (loaded)",
        "broken (failed: RuntimeError",
    )


def test_absent_hardware_without_emulation_raises(tmp_path):
    site = write_site(tmp_path, FakePlugin("chipa", detection="a Chip A in torch.cuda"))
    result = run_info(site=site, env={"GEMS_DEVICE": "chipa"})
    assert_selection_error(
        result, "found no chipa device", "a Chip A in torch.cuda", "GEMS_EMULATE=1"
    )


def test_emulate_without_gems_device_raises():
    result = run_info(env={"GEMS_EMULATE": "1"})
    assert_selection_error(result, "GEMS_EMULATE=1 needs GEMS_DEVICE")


# ---------------------------------------------------------------- version ranges


def test_core_range_mismatch_selected_names_both_versions(tmp_path):
    result = run_info(site=write_site(tmp_path, TOO_NEW), env={"GEMS_DEVICE": "toonew"})
    assert_selection_error(
        result,
        "supports gems-core >=99.0",
        f"gems-core {gems_core.__version__} is installed",
    )


def test_core_range_mismatch_not_selected_is_skipped_with_warning(tmp_path):
    result = run_code(SELECT_AND_ADD, site=write_site(tmp_path, TOO_NEW))
    assert result.returncode == 0, result.stderr
    assert "backend: cpu" in result.stdout
    assert "gems backend 'toonew'" in result.stderr
    assert "supports gems-core >=99.0" in result.stderr


# ---------------------------------------------------------------- contract validation by pluggy


def test_hookimpl_with_unknown_argument_is_rejected(tmp_path):
    plugin = FakePlugin(
        "badargs",
        hooks="""
        @hookimpl
        def gems_tuned_configs(arch, device_index):
            return {}
        """,
    )
    report = info_json(write_site(tmp_path, plugin))
    error = backend_row(report, "badargs")["error"]
    assert error.startswith("PluginValidationError: Plugin 'badargs' for hook 'gems_tuned_configs'")
    assert (
        "{'device_index'} are declared in the hookimpl but can not be found in the hookspec"
        in error
    )


def test_hookimpl_with_unknown_argument_selected_raises(tmp_path):
    plugin = FakePlugin("badargs", hooks="@hookimpl\ndef gems_detect(verbose):\n    return None\n")
    result = run_info(site=write_site(tmp_path, plugin), env={"GEMS_DEVICE": "badargs"})
    assert_selection_error(result, "{'verbose'} are declared in the hookimpl but can not be found")


def test_unknown_hook_name_is_rejected(tmp_path):
    plugin = FakePlugin("badhook", hooks="@hookimpl\ndef gems_frobnicate():\n    return 1\n")
    report = info_json(write_site(tmp_path, plugin))
    row = backend_row(report, "badhook")
    assert row["state"] == "failed"
    assert "unknown hook 'gems_frobnicate'" in row["error"]


def test_descriptor_name_must_match_entry_point(tmp_path):
    plugin = FakePlugin("epname", descriptor_name="othername")
    result = run_info(site=write_site(tmp_path, plugin), env={"GEMS_DEVICE": "epname"})
    assert_selection_error(
        result, "entry point 'epname' names a backend whose descriptor says 'othername'"
    )


# ---------------------------------------------------------------- emulation and policy


FAKE_POLICY = """
    def _sub(self, other, alpha=1):
        return NotImplemented

    @hookimpl
    def gems_unsupported_ops():
        return ["neg", OpGate("div", dtypes=("float16",), reason="no fp16 divider")]

    @hookimpl
    def gems_tuned_configs(arch):
        return {"pointwise": [KernelConfig({"BLOCK_SIZE": 512}, num_warps=8)]}

    @hookimpl
    def gems_compiler_options(arch):
        return {"*": {"buffer_size_limit": 128}}

    @hookimpl
    def gems_known_deviations():
        return [Deviation(op="add", kind="xfail", reason="adder rounds differently")]

    @hookimpl
    def gems_kernel_overrides():
        return [KernelOverride(op="sub.Tensor", fn=_sub, reason="portable kernel is slow here")]
"""
FAKE_CHIP = FakePlugin(
    "fakechip", vendor="FakeVendor", dtypes={"float64": False}, hooks=FAKE_POLICY
)
EMULATE = {"GEMS_DEVICE": "fakechip", "GEMS_EMULATE": "1"}


def test_info_shows_emulated_policy(tmp_path):
    report = info_json(write_site(tmp_path, FAKE_CHIP), **EMULATE)
    selection, policy = report["selection"], report["policy"]
    assert selection["emulated"] and selection["interpreter"]
    assert selection["arch"] == "90"  # the descriptor's target arch stands in for detection
    assert {"op": "neg", "dtypes": [], "reason": "", "keeps": []} in policy["aten_ops"]
    assert {"op": "div", "dtypes": ["float16"], "reason": "no fp16 divider", "keeps": []} in policy["aten_ops"]
    assert policy["unsupported_dtypes"] == ["float64", "float8_e4m3fn", "float8_e5m2"]  # float8: not declared
    assert policy["configs"]["pointwise"]["backend"][0]["params"] == {"BLOCK_SIZE": 512}
    assert policy["configs"]["pointwise"]["core_defaults"]
    assert policy["dropped_options"] == ["*: buffer_size_limit=128"]  # the interpreter takes none
    assert policy["deviations"][0]["reason"] == "adder rounds differently"
    assert policy["overrides"][0]["reason"] == "portable kernel is slow here"
    ops = {e["name"]: e for group in report["ops"]["packets"].values() for e in group}
    assert ops["neg"]["aten"] == "all"
    assert ops["div.Tensor"]["aten"] == ["float16"]
    assert ops["sub.Tensor"]["override"]


def test_info_text_marks_emulation_and_gates(tmp_path):
    result = run_info("--verbose", site=write_site(tmp_path, FAKE_CHIP), env=EMULATE)
    assert result.returncode == 0, result.stderr
    assert "emulated:     yes, on the Triton interpreter" in result.stdout
    text = " ".join(result.stdout.split())  # the op list wraps its lines to the terminal width
    assert "neg [ATen]" in text
    assert "div.Tensor [ATen for float16]" in text
    assert "every op runs on ATen for float64" in result.stdout


def test_whole_op_gate_leaves_the_dispatcher_untouched(tmp_path):
    code = """
        import torch, gems_core
        with gems_core.use_gems():
            ops = gems_core.registered_ops()
            assert "neg" not in ops and "add.Tensor" in ops, ops
            assert "gems_core" not in torch._C._dispatch_dump("aten::neg")
            assert torch.neg(torch.ones(2)).tolist() == [-1.0, -1.0]
        print("ok")
    """
    result = run_code(code, site=write_site(tmp_path, FAKE_CHIP), env=EMULATE)
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout


def test_a_gated_dtype_goes_to_aten_through_the_native_layer_without_python(tmp_path):
    """fakechip leaves float16 division to ATen: with the native layer in front, those calls
    go from C++ to ATen's kernel (no Python call counted), float32 calls to gems' kernel."""
    code = """
        import torch, gems_core
        from gems_core import native
        assert native.load(quiet=True) is not None, native.problem()
        a, b = torch.randn(6, 5), torch.rand(6, 5) + 0.5
        expected, wide = a.half() / b.half(), a.double() / b.double()
        with gems_core.use_gems(include=["div.Tensor"]):
            for _ in range(3):
                assert torch.equal(a.half() / b.half(), expected)
            (row,) = [r for r in gems_core.dispatch.native_stats() if r["op"] == "div.Tensor"]
            assert row["aten_calls"] == 3 and row["python_calls"] == 0, row
            torch.testing.assert_close((a / b).double(), wide)
            (row,) = [r for r in gems_core.dispatch.native_stats() if r["op"] == "div.Tensor"]
            assert row["aten_calls"] == 3 and row["python_calls"] == 1, row
        print("ok")
    """
    result = run_code(code, site=write_site(tmp_path, FAKE_CHIP), env={**EMULATE, "GEMS_NATIVE": "force"})
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout


# ---------------------------------------------------------------- a real build and install


def test_plugin_built_by_pip_is_discovered(tmp_path):
    plugin = FakePlugin("realchip", version="1.2.3", detect=("RealChip X1", "rc1"))
    site = pip_install_target(write_project(tmp_path / "project", plugin), tmp_path / "site")
    report = info_json(site)
    row = backend_row(report, "realchip")
    assert (row["distribution"], row["version"]) == ("gems-backend-realchip", "1.2.3")
    assert row["source"] == "entry point gems_test_backend_realchip"
    assert report["selection"]["backend"] == "realchip"


@pytest.mark.parametrize("argv", [["-m", "gems_core"], ["-m", "gems_core", "info", "--json"]])
def test_info_entry_forms(argv):
    result = run_python(argv)
    assert result.returncode == 0, result.stderr
    assert "cpu" in result.stdout


@pytest.mark.skipif(
    shutil.which("gems-info") is None, reason="gems-core console scripts not on PATH"
)
def test_gems_info_console_script():
    env = {k: v for k, v in os.environ.items() if k not in GEMS_SELECTION_VARIABLES}
    result = subprocess.run(
        ["gems-info", "--json"], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["versions"]["gems-core"] == gems_core.__version__
