"""The compile tier: kernels x tuned configs compiled ahead of time for real GPU targets by the
upstream Triton installed here, with no GPU.

Cost: each check spawns one process per target that compiles for real. The checks of the
whole file run at once, as many processes at a time as there are cores, the longest first (a
module fixture), so no core idles while one test's slowest target finishes. The op set is one
op case per main kernel family, at the "kernel" dedupe level (each kernel function x config
once); ``python -m gems_conformance.compile_check --device nvidia`` runs every op case (what it does
not reach is reported as not exercised).
"""

from __future__ import annotations

import importlib.util
import os
from concurrent.futures import ThreadPoolExecutor

import pytest
from gems_conformance.compile_check import ERROR, OK, check_backend, summarize
from plugin_factory import FakePlugin, write_site

from gems_core import TritonTarget
from gems_core.plugins import BackendError, discover
from gems_core.selection import compile_targets, parse_target

#: one op case per kernel family: pointwise, reduction, mm, softmax (+ backward), norms
FAMILIES = ("add", "sum", "mm", "softmax_autograd", "layer_norm_backward", "rms_norm")
CUDA_80, CUDA_90 = TritonTarget("cuda", 80, 32), TritonTarget("cuda", 90, 32)
HIP_GFX90A, HIP_GFX942 = TritonTarget("hip", "gfx90a", 64), TritonTarget("hip", "gfx942", 64)
NVIDIA_TARGETS = [CUDA_80, CUDA_90]
AMD_TARGETS = [HIP_GFX90A, HIP_GFX942]


#: backend -> the targets and op cases (None: the vendor families) the tests below check.
#: Each vendor's newest target compiles the kernel families with every tuned config, and the
#: backend's kernel variants (sm_90's Hopper GEMM and attention); the cpu backend's default
#: configs compile for the older two, so every target of the shipped backends is compiled.
#: ``python -m gems_conformance.compile_check --device <vendor> --dedupe kernel`` compiles
#: every op case's kernels for all of a vendor's targets (AMD's two: about 8 core-minutes;
#: NVIDIA's sm_90 compiles every kernel for real when the suite runs on an H100 or H200).
CHECKS = {"nvidia": ([CUDA_90], None), "amd": ([HIP_GFX942], None), "cpu": ([CUDA_80, HIP_GFX90A], FAMILIES)}
VENDOR_FAMILIES = (*FAMILIES, "bmm", "scaled_dot_product_attention")  # VENDOR_KERNELS' families


def _op_cases(backend: str, target: TritonTarget) -> tuple[str, ...] | None:
    cases = CHECKS[backend][1]
    return VENDOR_FAMILIES if cases is None else cases


@pytest.fixture(scope="module")
def checked(request: pytest.FixtureRequest) -> dict[str, list]:
    """backend -> its compile records, for the backends the run's selected tests check."""
    wanted = set()
    for item in request.session.items:
        if item.module is request.module and "checked" in getattr(item, "fixturenames", ()):
            wanted.add(item.callspec.params["backend"] if hasattr(item, "callspec") else "cpu")
    wanted = {b for b in wanted if b == "cpu" or importlib.util.find_spec(f"gems_backend_{b}")}
    # the longest first: a vendor's newer arch compiles its kernel variants too
    jobs = [(b, t) for b in CHECKS if b in wanted for t in reversed(CHECKS[b][0])]
    with ThreadPoolExecutor(max_workers=max(1, min(len(jobs), os.cpu_count() or 1))) as pool:
        # the whole-backend checks in one process per target (this file runs them side by
        # side already); the cpu backend's sm_80 in two, so that splitting a target's op cases
        # among processes is checked end to end
        # the NVIDIA backend's own tests compile its kernel variants for sm_90 already
        # (backends/nvidia/tests/test_gemm_sm90.py, test_attention_sm90.py)
        done = pool.map(lambda job: check_backend(job[0], [job[1]], _op_cases(*job), dedupe="kernel",
                                                  jobs=2 if job == ("cpu", CUDA_80) else 1,
                                                  variants=job[0] != "nvidia"),
                        jobs)
        results: dict[str, list] = {b: [] for b in wanted}
        for (backend, _), records in zip(jobs, done):
            results[backend] += records
    return results


def _assert_all_compile(records, targets, kernels) -> None:
    assert {r.target for r in records} == {f"{t.backend}:{t.arch}" for t in targets}
    failed = [r for r in records if r.failed]
    assert not failed, summarize(failed)
    compiled = [r for r in records if r.status == OK]
    for target in {r.target for r in records}:
        reached = {r.kernel for r in compiled if r.target == target}
        assert set(kernels) <= reached, (target, reached)
    assert all(r.shared is not None and r.registers is not None for r in compiled)


def test_cpu_defaults_compile_for_cuda_and_hip(checked: dict[str, list]) -> None:
    _assert_all_compile(checked["cpu"], CHECKS["cpu"][0], ("pointwise", "reduction", "mm", "softmax", "norm"))


#: kernels only ops without a conformance case reach (fused ops, random ops, ...) are listed
#: as not exercised; every kernel an op case drives must compile with every tuned config
VENDOR_KERNELS = ("pointwise", "reduction", "mm", "bmm", "softmax", "norm", "attention")


@pytest.mark.parametrize("backend", ["nvidia", "amd"])
def test_every_kernel_and_tuned_config_compiles_for_the_vendors_targets(backend, checked) -> None:
    # The families' op cases drive their kernels in compile-only mode, and every config of
    # every tunable is tried: real compiles (ptxas, LLVM AMDGPU), no GPU needed.
    pytest.importorskip(f"gems_backend_{backend}")
    # the target checked is the newest of the backend's own compile targets (check_backend's
    # default is all of them), the older ones are the cpu backend's
    targets = list(compile_targets(discover()[backend].descriptor))
    assert targets == {"nvidia": NVIDIA_TARGETS, "amd": AMD_TARGETS}[backend]
    assert CHECKS[backend][0] == targets[-1:] and targets[0] in CHECKS["cpu"][0]
    records = checked[backend]
    _assert_all_compile(records, CHECKS[backend][0], VENDOR_KERNELS)
    # AMD has no kernel variants; NVIDIA's are left to its own tests here
    assert not [r for r in records if r.kernel.endswith("(variant)")]


def test_the_variants_switch_reaches_the_worker_processes(monkeypatch) -> None:
    """check_backend(variants=False) (``--no-variants`` on the command line) starts every
    target's worker with ``--no-variants``, so no shard compiles the backend's variants; by
    default none is given and the first shard compiles them."""
    from gems_conformance import compile_check

    commands: list[list[str]] = []

    class Child:  # a worker that fails at once: its command is what is checked
        returncode = 1

        def __init__(self, command: list[str], **_: object) -> None:
            commands.append(command)

        def communicate(self) -> tuple[str, str]:
            return "", "stopped"

    monkeypatch.setattr(compile_check.subprocess, "Popen", Child)
    assert compile_check.main(["--device", "cpu", "--target", "cuda:80:32", "--no-variants"]) == 1
    first = len(commands)
    records = compile_check.check_backend("cpu", [CUDA_80, HIP_GFX90A], ("add",), jobs=4)
    assert first and all("--no-variants" in c for c in commands[:first])
    assert [c[c.index("--shard") + 1] for c in commands[first:]] == ["0/2", "1/2"] * 2
    assert not any("--no-variants" in c for c in commands[first:])
    assert {r.target for r in records} == {"cuda:80", "hip:gfx90a"} and all(r.status == ERROR for r in records)


REJECTING = FakePlugin(
    name="rejecting",
    hooks='''
    @hookimpl
    def gems_tuned_configs(arch):
        return {"pointwise": [
            KernelConfig({"BLOCK_SIZE": 1024}, num_warps=4),
            # ptxas refuses the flag: a real compile failure of this config only
            KernelConfig({"BLOCK_SIZE": 512}, num_warps=4,
                         options={"ptx_options": "--no-such-ptxas-flag"}),
            # not a power of two: refused at load by the policy checks
            KernelConfig({"BLOCK_SIZE": 256}, num_warps=3),
        ]}


    @hookimpl
    def gems_compiler_options(arch):
        return {"pointwise": {"no_such_option": 1}}
    ''',
)


def test_configs_the_compiler_rejects_are_error_records(tmp_path, monkeypatch) -> None:
    site = write_site(tmp_path / "site", REJECTING)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", str(site))
    records = check_backend("rejecting", ops=("add",), dedupe="kernel")
    by_block: dict[str, set[str]] = {}
    for r in records:
        if r.kernel == "pointwise" and r.function:
            by_block.setdefault(r.config.split(",")[0], set()).add(r.status)
    assert by_block["BLOCK_SIZE=1024"] == {OK}
    assert by_block["BLOCK_SIZE=512"] == {ERROR}
    assert "BLOCK_SIZE=256" not in by_block  # num_warps=3 is left out at load, before any compile
    messages = {r.config.split(",")[0]: r.message for r in records if r.status == ERROR and r.function}
    assert "no-such-ptxas-flag" in messages["BLOCK_SIZE=512"]
    dropped = [r for r in records if r.config == "no_such_option=1"]
    assert len(dropped) == 1 and dropped[0].status == ERROR and dropped[0].kernel == "pointwise"


def test_targets_parse_with_the_descriptors_warp_size() -> None:
    from gems_core.backends.cpu import DESCRIPTOR

    assert parse_target("hip:gfx942:64") == HIP_GFX942
    assert parse_target("cuda:90:32", DESCRIPTOR) == CUDA_90
    with pytest.raises(BackendError, match="warp size"):
        parse_target("cuda:90", DESCRIPTOR)


def test_shards_merge_into_one_targets_records() -> None:
    """A compile two shards both made is one record; a kernel one shard did not drive is
    "not exercised" only where no shard drove it."""
    from gems_conformance.compile_check import NOT_EXERCISED, CompileRecord, merge_shards

    def record(kernel: str, status: str = OK, signature: str = "*fp32", op: str = "add") -> CompileRecord:
        function = "" if status == NOT_EXERCISED else f"gems.{kernel}_kernel"
        return CompileRecord(kernel=kernel, config="BLOCK=64", target="cuda:90", status=status,
                             signature=signature, function=function, op=op)

    first = [record("pointwise", op="mul"), record("reduction", op="sum"), record("mm", NOT_EXERCISED),
             record("topk", NOT_EXERCISED)]
    second = [record("reduction", op="amax"), record("reduction", signature="*fp16, i32", op="mean"),
              record("mm", op="mm"), record("pointwise", NOT_EXERCISED), record("topk", NOT_EXERCISED)]
    merged = merge_shards([first, second])
    # a compile both shards made once, named for the first case by name to need it
    assert [(r.kernel, r.status, r.signature, r.op) for r in merged] == [
        ("pointwise", OK, "*fp32", "mul"), ("reduction", OK, "*fp32", "amax"), ("topk", NOT_EXERCISED, "*fp32", "add"),
        ("reduction", OK, "*fp16, i32", "mean"), ("mm", OK, "*fp32", "mm")]
    # at the kernel level, other argument types of one kernel x config are the same compile
    assert len([r for r in merge_shards([first, second], "kernel") if r.kernel == "reduction"]) == 1


_FREM_PROBE = """
import json, triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from gems_conformance.compile_check import _INEXACT_REMAINDER, _llvm_ir
from gems_core.ops.kernel_lib import fmod_fn

@triton.jit
def remainder(x_ptr, y_ptr, out_ptr):
    i = tl.arange(0, 16)
    tl.store(out_ptr + i, tl.load(x_ptr + i) % tl.load(y_ptr + i))

@triton.jit
def exact(x_ptr, y_ptr, out_ptr):
    i = tl.arange(0, 16)
    tl.store(out_ptr + i, fmod_fn(tl.load(x_ptr + i), tl.load(y_ptr + i)))

found = {}
for name, kernel in (("%", remainder), ("fmod_fn", exact)):
    for dtype in ("*fp32", "*fp16", "*fp64"):
        signature = {"x_ptr": dtype, "y_ptr": dtype, "out_ptr": dtype}
        compiled = triton.compile(ASTSource(fn=kernel, signature=signature, constexprs={}),
                                  target=GPUTarget("cuda", 90, 32))
        found[f"{name} {dtype}"] = bool(_INEXACT_REMAINDER.search(_llvm_ir(compiled)))
print(json.dumps(found))
"""


def test_a_float_remainder_by_frem_is_a_compile_error(tmp_path) -> None:
    """LLVM's frem on floats (float64 too) is x - trunc(x / y) * y on GPU targets: the check
    finds it in a compiled kernel's LLVM IR, and not in one taking kernel_lib.fmod_fn, as
    gems' kernels do. The kernels compile in a process of their own, where Triton is not
    interpreting."""
    import json
    import subprocess
    import sys

    from gems_conformance.compile_check import _INEXACT_REMAINDER, _compiler_missing

    if _compiler_missing(CUDA_90):
        pytest.skip(_compiler_missing(CUDA_90))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    probe = tmp_path / "frem_probe.py"  # Triton reads a kernel's source from its file
    probe.write_text(_FREM_PROBE)
    done = subprocess.run([sys.executable, str(probe)], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {f"{name} {dtype}": name == "%" for name in ("%", "fmod_fn")
                     for dtype in ("*fp32", "*fp16", "*fp64")}
    assert _INEXACT_REMAINDER.search("%3 = frem double %1, %2")
    assert not _INEXACT_REMAINDER.search("%3 = srem i64 %1, %2\n!1 = !DIFile(filename: \"frem_probe.py\")")
    assert _INEXACT_REMAINDER.search("%3 = frem fast <4 x float> %1, %2")
