"""A backend's policy is checked when gems loads it: every malformed answer is left out with a
warning naming the backend and the hook, listed by ``info`` and failed by the contract tier,
and an exception in a hook names both too (the conformance suite still writes its report).

gems selects its backend once per process, so each scenario runs in a subprocess with a
throwaway plugin (tests/plugin_factory.py), emulated on the CPU interpreter.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
from gems_core import Deviation, Limits, configs
from gems_core.policy import config_problems
from plugin_factory import FakePlugin, run_code, run_info, run_python, write_site

MALFORMED = FakePlugin("malformed", hooks='''
    @hookimpl
    def gems_tuned_configs(arch):
        return {
            # a misspelt parameter; the second config is sound and is kept
            "softmax": [KernelConfig({"BLOCK_M": 1, "BLOCK_N": 64, "BLOKC_N": 8}),
                        KernelConfig({"BLOCK_M": 1, "BLOCK_N": 64}, num_warps=2, num_stages=1)],
            "reduction": [KernelConfig({"BLOCK_M": 1, "BLOCK_N": 64}, num_warps=64)],  # max_warps is 32
            "norm": [KernelConfig({"BLOCK_N": 64}, num_warps=3)],
            "no_such_kernel": [KernelConfig({"BLOCK_SIZE": 64})],
        }


    @hookimpl
    def gems_unsupported_ops():
        return [OpGate("no_such_op"), OpGate("exp", dtypes=("fp32",)), "cumsum",
                OpGate("convolution", keep=("no_such_form",)), OpGate("softmax", dtypes=("float16",), keep=("patches",)),
                OpGate("scaled_dot_product_attention", leave=("no_such_form",)),
                OpGate("cumsum", dtypes=("float16",), leave=("dropout",))]


    @hookimpl
    def gems_compiler_options(arch):
        return {"no_such_kernel": {"num_ctas": 1}}


    @hookimpl
    def gems_known_deviations():
        return [Deviation(op="exp", reason=""), Deviation(op="not_an_op", reason="r"), "exp"]
''')

TOPK_STRING = FakePlugin("topkstring", hooks='''
    @hookimpl
    def gems_unsupported_ops():
        return "topk"
''')

RAISING = FakePlugin("raising", hooks='''
    @hookimpl
    def gems_tuned_configs(arch):
        return {"X0": []}["X1"]
''')

LIMITS = Limits(max_warps=32, max_threads_per_block=1024, shared_memory_per_block=49152)

LOAD = '''
    import json, warnings
    import torch
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from gems_core import policy, runtime
        rt = runtime.current()
    warned = [str(w.message) for w in caught if issubclass(w.category, policy.PolicyWarning)]
    result = {
        "warned": warned,
        "problems": [[p.hook, p.subject] for p in rt.policy.problems],
        # the plugin's own gates: under emulation the host's join them, labelled
        "gates": {op: sorted(d) for op, d in rt.policy.gates.items()
                  if not rt.policy.gate_reasons.get(op, "").startswith("the host's")},
        "keeps": {op: sorted(f) for op, f in rt.policy.gate_keeps.items()},
        "leaves": {op: sorted(f) for op, f in rt.policy.gate_leaves.items()},
        "configs": {k: [c.describe() for c in v] for k, v in rt.policy.configs.items()},
        "options": sorted(rt.policy.compiler_options),
        "deviations": [d.op for d in rt.policy.deviations if not d.reason.startswith("the host's")],
    }
'''


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_site(tmp_path_factory.mktemp("site"), MALFORMED, TOPK_STRING, RAISING)


def emulate(name: str) -> dict[str, str]:
    return {"GEMS_DEVICE": name, "GEMS_EMULATE": "1"}


@pytest.fixture(scope="module")
def malformed(site: Path) -> dict:
    """The malformed plugin loaded once: its warnings and policy, a softmax run under gems
    (the op an unknown config parameter used to crash) and its contract tier."""
    code = LOAD + '''
    import gems_core
    from gems_conformance.contract_tier import check_contract
    from gems_conformance.routing import RouteWatch, implementations
    x = torch.randn(3, 50, dtype=torch.float64)[:, ::2]  # non-contiguous
    codes = frozenset().union(*implementations(("_softmax",)).values())
    with RouteWatch(codes) as watch, gems_core.use_gems(include=["softmax"]):
        got = torch.softmax(x.float(), dim=-1)
    result["softmax_served"] = watch.hit
    result["softmax_error"] = (got.double() - torch.softmax(x, dim=-1)).abs().max().item()
    result["contract"] = [[r.op, r.sample, r.status, r.message] for r in check_contract()]
    print(json.dumps(result))
    '''
    done = run_code(code, site=site, env=emulate("malformed"))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def warning_about(result: dict, hook: str, *fragments: str) -> str:
    found = [w for w in result["warned"] if hook in w and all(f in w for f in fragments)]
    assert found, f"no warning from {hook} naming {fragments}: {result['warned']}"
    assert "'malformed'" in found[0] or "'topkstring'" in found[0], found[0]
    return found[0]


def test_unknown_config_parameter_is_left_out_at_load(malformed: dict) -> None:
    warning_about(malformed, "gems_tuned_configs()", "BLOKC_N", "not parameters")
    assert malformed["configs"]["softmax"] == ["BLOCK_M=1, BLOCK_N=64, num_warps=2, num_stages=1"]


def test_softmax_runs_on_gems_with_the_sound_config(malformed: dict) -> None:
    assert malformed["softmax_served"], "softmax did not run on gems"
    assert malformed["softmax_error"] < 1e-6


def test_configs_beyond_the_descriptors_limits_are_left_out(malformed: dict) -> None:
    warning_about(malformed, "gems_tuned_configs()", "num_warps=64", "max_warps 32")
    warning_about(malformed, "gems_tuned_configs()", "num_warps=3", "power of two")
    assert "reduction" not in malformed["configs"] and "norm" not in malformed["configs"]


def test_unknown_kernel_names_are_left_out(malformed: dict) -> None:
    warning_about(malformed, "gems_tuned_configs()", "'no_such_kernel' is not a core tunable")
    warning_about(malformed, "gems_compiler_options()", "'no_such_kernel' is not a core tunable")
    assert "no_such_kernel" not in malformed["configs"] and "no_such_kernel" not in malformed["options"]


def test_unknown_op_and_dtype_names_in_gates_are_reported(malformed: dict) -> None:
    warning_about(malformed, "gems_unsupported_ops()", "'no_such_op' is not an ATen operator")
    warning_about(malformed, "gems_unsupported_ops()", "'fp32' is not a torch dtype name")
    warning_about(malformed, "gems_unsupported_ops()", "keep of 'softmax' applies to a whole-op gate")
    assert malformed["gates"] == {"cumsum": [], "convolution": []}  # the sound gates are kept


def test_kept_forms_the_op_does_not_define_are_reported(malformed: dict) -> None:
    """The gate stays (every call on ATen); the form it names is left out."""
    warning_about(malformed, "gems_unsupported_ops()", "'convolution' defines no form 'no_such_form'", "patches")
    assert malformed["keeps"] == {}


def test_left_forms_that_are_undefined_or_combined_with_dtypes_are_reported(malformed: dict) -> None:
    """A gate on forms alone names forms the op defines and nothing else: the one with
    dtypes is left out whole, the unknown form is left out of the policy."""
    warning_about(malformed, "gems_unsupported_ops()", "leave of 'cumsum' is a gate on forms alone")
    warning_about(malformed, "gems_unsupported_ops()", "'scaled_dot_product_attention' defines no form "
                  "'no_such_form' to leave", "dropout")
    assert malformed["leaves"] == {}


def test_malformed_deviations_are_reported(malformed: dict) -> None:
    warning_about(malformed, "gems_known_deviations()", "needs a reason")
    warning_about(malformed, "gems_known_deviations()", "'not_an_op' is not an ATen operator")
    warning_about(malformed, "gems_known_deviations()", "'exp' is not a Deviation")
    assert malformed["deviations"] == []


def test_contract_tier_fails_each_problem_naming_the_hook(malformed: dict) -> None:
    failed = {(op, check) for op, check, status, _ in malformed["contract"] if status == "FAIL"}
    assert {("softmax", "tuned configs"), ("reduction", "tuned configs"), ("no_such_kernel", "tuned configs"),
            ("no_such_kernel", "compiler options"), ("no_such_op", "unsupported op"),
            ("exp", "unsupported op"), ("convolution", "unsupported op"), ("softmax", "unsupported op"),
            ("not_an_op", "deviation")} <= failed
    messages = [m for *_, status, m in malformed["contract"] if status == "FAIL"]
    assert all(m.startswith("gems_") and "()" in m for m in messages), messages
    assert ("cumsum", "unsupported op", "PASS", "") in [tuple(r) for r in malformed["contract"]]


def test_info_flags_the_problems(site: Path) -> None:
    done = run_info(site=site, env=emulate("malformed"))
    assert done.returncode == 0, done.stderr
    assert "POLICY ERRORS, left out" in done.stdout
    assert "gems_unsupported_ops(): 'no_such_op' is not an ATen operator" in done.stdout
    assert "gems_tuned_configs(): 'no_such_kernel' is not a core tunable" in done.stdout


def test_a_string_of_op_names_gates_nothing_letter_by_letter(site: Path) -> None:
    done = run_code(LOAD + "    print(json.dumps(result))\n", site=site, env=emulate("topkstring"))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    warning_about(result, "gems_unsupported_ops()", "returned str 'topk'")
    assert result["gates"] == {}


def test_an_exception_in_a_hook_names_backend_and_hook(site: Path) -> None:
    done = run_code("import gems_core; gems_core.enable()", site=site, env=emulate("raising"))
    assert done.returncode != 0
    assert "gems backend 'raising': gems_tuned_configs() raised KeyError: 'X1'" in done.stderr


def test_conformance_reports_a_raising_hook(site: Path, tmp_path: Path) -> None:
    report = tmp_path / "report"
    done = run_python(["-m", "gems_conformance.cli", "--device", "raising",
                       "--emulate", "--tier", "contract", "--quick", "--report", str(report)], site=site)
    assert done.returncode != 0
    data = json.loads((report / "report.json").read_text())
    loads = [r for r in data["records"] if r["tier"] == "contract" and r["op"] == "plugin"]
    assert loads and loads[0]["status"] == "FAIL", loads
    assert "gems_tuned_configs() raised KeyError: 'X1'" in loads[0]["message"]


@pytest.mark.parametrize(("deviation_op", "op", "covered"), [
    ("exp", "exp.default", True),
    ("exp", "exp_.default", True),
    ("exp", "exp.out", True),
    ("exp.default", "exp_.default", True),
    ("exp.default", "exp.out", False),
    ("exp", "expm1.default", False),
    ("exp", "exp2_.default", False),
    ("__and__", "__and__.Tensor", True),
    ("__and_", "__and__.Tensor", False),
])
def test_a_deviation_covers_the_in_place_and_out_forms(deviation_op: str, op: str, covered: bool) -> None:
    deviation = Deviation(deviation_op, reason="rounds once more", kind="tolerance",
                          dtypes=("bfloat16",), rtol=0.1)
    assert deviation.applies(op, "bfloat16", "contiguous") is covered
    assert not deviation.applies(op, "float32", "contiguous")


def test_each_tunable_has_a_typed_constructor_taking_exactly_its_parameters() -> None:
    from gems_core.tuning import tunables

    for name, tunable in tunables().items():
        constructor = getattr(configs, name)
        signature = inspect.signature(constructor).parameters
        taken = [p for p in signature if p.isupper()]
        assert sorted(taken) == sorted(tunable.params), name
        assert all(signature[p].default is None for p in tunable.optional), name
        required = [p for p in taken if signature[p].default is inspect.Parameter.empty]
        config = constructor(*[16] * len(required), num_warps=2)  # a parameter the kernel needs, given
        assert config_problems(config, tunable.params, tunable.optional, LIMITS) == [], name


def test_typed_constructors_refuse_what_no_kernel_takes() -> None:
    assert configs.attention_decode(64, 4, 3, SPLITS=1).params == {"BLOCK_N": 64, "SPLITS": 1}
    assert configs.mm(64, 32, 16, options={"waves_per_eu": 2}).options == {"waves_per_eu": 2}
    with pytest.raises(TypeError, match="splits"):
        configs.attention_decode(64, 4, 3, splits=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="BLOKC_N"):
        configs.softmax(BLOCK_M=1, BLOKC_N=64)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="num_warps=3 must be a power of two"):
        configs.norm(1024, num_warps=3)
    with pytest.raises(ValueError, match="BLOCK_K=0 must be a positive integer"):
        configs.gemv(64, 0)
