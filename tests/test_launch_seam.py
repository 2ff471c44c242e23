"""The launch seam of the vendor contract: the core reaches no device driver itself (no driver
library, entry point or backend-name branch in portable code), backends import only the
public contract, and how kernels are launched comes from the backend (``gems_native_launch``)."""

from __future__ import annotations

import ast
import ctypes
import re
from pathlib import Path

import pytest
import torch

import gems_core
from gems_core import hookimpl, launches, native, plugins, selection
from gems_core.contract import LaunchedKernel, Limits, NativeLaunch
from gems_core.hookspecs import PUBLIC_MODULES
from gems_core.launch_cache import recording
from gems_core.native.recorder import record_call

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "gems_core"
#: where the differences between torch and Triton builds are decided
COMPAT = CORE / "compat.py"
#: names of the chip's own driver the core must not reach, in any of its files
DRIVER_NAMES = re.compile(r"libcuda|libamdhip|cuLaunchKernel|hipModuleLaunchKernel|torch\.version\.hip|dlopen")
#: Triton backend and vendor names no portable code may branch on
BACKEND_NAMES = frozenset({"cuda", "hip", "maca", "corex", "xpu", "nvidia", "amd", "metax", "iluvatar", "kunlunxin",
                           "NVIDIA", "AMD", "MetaX", "Iluvatar", "Kunlunxin"})


def _core_files(*suffixes: str) -> list[Path]:
    return sorted(p for p in CORE.rglob("*") if p.suffix in suffixes and p != COMPAT and "__pycache__" not in p.parts)


def test_the_core_reaches_no_driver_outside_compat() -> None:
    files = _core_files(".py", ".cpp", ".h")
    assert any(p.name == "dispatch_layer.cpp" for p in files)  # the scan sees the native layer
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
             for p in files for n, line in enumerate(p.read_text().splitlines(), 1) if DRIVER_NAMES.search(line)]
    assert not found, "\n".join(found)
    # the C++ layer names no driver type or function either (cuXxx, CUxxx, hipXxx)
    source = (CORE / "native" / "dispatch_layer.cpp").read_text()
    assert not re.findall(r"\b(?:cu[A-Z]|CU[a-z_]|hip[A-Z])\w*", source)


def _names_backend(node: ast.AST) -> bool:
    """An expression that reads a backend's or vendor's name: ``x.triton_backend``,
    ``target.backend``, ``descriptor.vendor``, ``selection.backend.name``..."""
    words = ("backend", "vendor")
    return any(isinstance(n, ast.Attribute) and any(w in n.attr for w in words)
               or isinstance(n, ast.Name) and any(w in n.id for w in words) for n in ast.walk(node))


def _backend_constants(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and n.value in BACKEND_NAMES}


def _backend_branches(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_names_backend(s) for s in sides) and any(_backend_constants(s) for s in sides):
                lines.append(node.lineno)
        elif isinstance(node, ast.Match) and _names_backend(node.subject):
            if any(_backend_constants(case.pattern) for case in node.cases):
                lines.append(node.lineno)
    return lines


def test_no_backend_name_branch_in_portable_code() -> None:
    found = [f"{p.relative_to(ROOT)}:{line}" for p in _core_files(".py")
             for line in _backend_branches(ast.parse(p.read_text()))]
    assert not found, found
    # the check finds the branches it is about
    assert _backend_branches(ast.parse('if rt.selection.execution.triton_backend == "hip": pass'))
    assert _backend_branches(ast.parse('ok = target.backend not in (None, "cuda")'))
    assert _backend_branches(ast.parse('match rt.selection.backend.name:\n    case "nvidia": pass'))
    assert _backend_branches(ast.parse('fast = descriptor.vendor == "AMD"'))
    assert not _backend_branches(ast.parse('ok = device.type == "cuda"'))


def _plugin_files() -> list[Path]:
    packages = [*ROOT.glob("backends/*/gems_backend_*"), ROOT / "docs" / "example-backend"]
    files = sorted(p for package in packages for p in package.rglob("*.py") if "__pycache__" not in p.parts)
    assert len({p.parts[len(ROOT.parts) + 1] for p in files}) >= 6  # five vendors and the example
    return files


def _core_imports(tree: ast.AST) -> list[str]:
    """The gems_core modules a file imports (``from gems_core import x`` of a submodule x
    counts as importing ``gems_core.x``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "gems_core"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "gems_core":
            found.append(node.module)
            if node.module == "gems_core":
                found += [f"gems_core.{a.name}" for a in node.names if a.name not in gems_core.__all__
                          and ((CORE / a.name).with_suffix(".py").exists() or (CORE / a.name).is_dir())]
    return found


def test_backends_import_only_the_public_contract() -> None:
    found = [f"{p.relative_to(ROOT)}: {module}" for p in _plugin_files()
             for module in _core_imports(ast.parse(p.read_text())) if module not in PUBLIC_MODULES]
    assert not found, "\n".join(found)
    # the check finds what it is about
    assert _core_imports(ast.parse("from gems_core import compat")) == ["gems_core", "gems_core.compat"]
    assert _core_imports(ast.parse("import gems_core.native.recorder")) == ["gems_core.native.recorder"]
    assert _core_imports(ast.parse("from gems_core import native, hookimpl")) == ["gems_core", "gems_core.native"]
    # every public module exists
    for module in PUBLIC_MODULES:
        __import__(module)


# -- the hook ------------------------------------------------------------------------------------

def _installed(answer: object) -> plugins.InstalledBackend:
    class Plugin:
        @hookimpl
        def gems_native_launch(self) -> object:
            if isinstance(answer, Exception):
                raise answer
            return answer

    return plugins.InstalledBackend(name="fake", source="test", status="loaded",
                                    manager=plugins._manager_for(Plugin(), "fake"))


_EXECUTION = selection.Execution("cuda", "CUDA", interpreter=False, triton_backend="cuda")
_LIBC = ctypes.CDLL(None)


def _addresses(**changes: object) -> NativeLaunch:
    """A NativeLaunch of real C function addresses (never called here)."""
    address = ctypes.cast(_LIBC.strlen, ctypes.c_void_p).value
    fields = dict(launch=address, context_get=address, context_set=address, device_get=address,
                  primary_context_retain=address)
    return NativeLaunch(**{**fields, **changes})  # type: ignore[arg-type]


def test_the_backend_answer_becomes_the_executions_launch() -> None:
    launch = _addresses(torch_launcher=True)
    execution = selection._with_launch(_EXECUTION, _installed(launch))
    assert execution.launch is launch and execution.launch_problem == ""
    # no answer: no launch, no problem; the layer stays off
    execution = selection._with_launch(_EXECUTION, _installed(None))
    assert execution.launch is None and execution.launch_problem == ""
    assert native.available_for(execution) is None
    assert native.describe(execution).startswith("not used")


@pytest.mark.parametrize("answer, message", [
    (OSError("libfake.so: cannot open shared object file"), "gems_native_launch() raised OSError: libfake.so"),
    ("0x1234", "answered a str, not a NativeLaunch"),
    (_addresses(launch=0), "NativeLaunch.launch is a null address"),
    (_addresses(device_get=1.5), "NativeLaunch.device_get must be a C function's address as an int"),
    (_addresses(encode_tensor_map=-1), "NativeLaunch.encode_tensor_map must be"),
    (_addresses(context_set=True), "NativeLaunch.context_set must be"),
])
def test_an_unusable_answer_turns_the_layer_off_with_its_reason(answer: object, message: str) -> None:
    execution = selection._with_launch(_EXECUTION, _installed(answer))
    assert execution.launch is None and message in execution.launch_problem
    assert "'fake'" in execution.launch_problem
    assert native.available_for(execution) is None
    assert native.describe(execution) == f"unavailable: {execution.launch_problem}"


def test_the_cpu_reference_and_the_interpreter_use_no_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    from gems_core import runtime

    rt = runtime.current()
    if not rt.interpreter:
        pytest.skip("runs on the CPU reference backend")
    assert rt.selection.execution.launch is None and rt.selection.execution.launch_problem == ""
    monkeypatch.setenv("GEMS_NATIVE", "1")
    assert native.available_for(rt.selection.execution) is None
    monkeypatch.setenv("GEMS_NATIVE", "force")  # the layer's tests: it fronts interpreted kernels
    assert native.available_for(rt.selection.execution) is native.load(quiet=True)


def test_the_layer_refuses_a_launch_without_its_required_entry_points() -> None:
    layer = native.load(quiet=True)
    if layer is None:
        pytest.skip(f"native layer not built: {native.problem()}")
    address = ctypes.cast(_LIBC.strlen, ctypes.c_void_p).value
    for missing in NativeLaunch.REQUIRED:  # each passed by the name the core passes it by
        entries = {name: 0 if name == missing else address for name in native._DRIVER_ENTRIES}
        assert entries.keys() >= set(NativeLaunch.REQUIRED)
        assert "lacks a driver entry point" in layer.set_driver(**entries)
    with pytest.raises(TypeError):  # not an address: refused before C++ sees it
        layer.set_driver("cuLaunchKernel", 0, 0, 0, 0, 0, 0)


def test_the_nvidia_backend_supplies_its_driver_entry_points() -> None:
    from gems_backend_nvidia import driver, plugin

    assert plugin.gems_native_launch.__name__ == "gems_native_launch"
    try:
        launch = driver.native_launch()
    except OSError as exc:  # no NVIDIA driver on this machine: the layer stays off with this reason
        assert driver.LIBRARY in str(exc)
        assert not (torch.cuda.is_available() and gems_core.backend().name == "nvidia")
        return
    assert launch.problem() == "" and launch.torch_launcher and launch.library is not None
    assert all(getattr(launch, name) > 0 for name in NativeLaunch.REQUIRED)


def test_torch_launcher_is_chosen_only_where_the_backend_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from gems_core import launch_cache, runtime

    rt = runtime.current()
    monkeypatch.setattr(launch_cache, "torch_launcher", lambda compiled: "torch")
    monkeypatch.setattr(launch_cache, "fast_launcher", lambda compiled, direct=True: "fast")
    for launch, expected in ((None, "fast"), (_addresses(), "fast"), (_addresses(torch_launcher=True), "torch")):
        execution = SimpleNamespace(launch=launch)
        monkeypatch.setattr(runtime, "_runtime", SimpleNamespace(selection=SimpleNamespace(execution=execution)))
        assert launch_cache.launcher_for(object()) == expected
    monkeypatch.setattr(runtime, "_runtime", rt)


# -- chip facts ----------------------------------------------------------------------------------

def test_chip_facts_come_from_the_descriptors() -> None:
    amd = pytest.importorskip("gems_backend_amd.device")
    metax = pytest.importorskip("gems_backend_metax.device")
    nvidia = pytest.importorskip("gems_backend_nvidia.device")

    from gems_core.backends import cpu

    assert Limits(1, 32, 1024).pipelining == "stages" and not Limits(1, 32, 1024).fused_merge
    assert amd.descriptor("gfx942").limits.pipelining == "stream"
    assert not amd.descriptor("gfx942").limits.fused_merge
    for limits in (nvidia.descriptor("sm_90").limits, *(l for _, l in nvidia.descriptor().arch_limits)):
        assert limits.pipelining == "stages" and limits.fused_merge
    assert metax.descriptor().limits.pipelining == "stages" and not metax.descriptor().limits.fused_merge
    assert cpu.DESCRIPTOR.limits.fused_merge


def test_decode_merge_and_tile_model_follow_the_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from gems_core import runtime
    from gems_core.contract import KernelConfig
    from gems_core.ops import attention_common, attention_decode

    monkeypatch.delenv("GEMS_DECODE_MERGE", raising=False)
    config = KernelConfig({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=4, num_stages=3)
    blocks = {"BLOCK_D": 64, "BLOCK_DV": 64}
    modes, tiles = {}, {}
    for name, limits in (("stages", Limits(32, 1024, 2**20, fused_merge=True)),
                         ("stream", Limits(32, 1024, 2**20, pipelining="stream"))):
        monkeypatch.setattr(runtime, "current", lambda limits=limits: SimpleNamespace(limits=limits))
        modes[name] = attention_decode._merge_mode(4, 16, 64, 4, None)
        tiles[name] = attention_common._tile_bytes(torch.float16, None, blocks, False, config)
    assert modes == {"stages": 2, "stream": 1}
    # stages: Q + 3 K/V buffers; stream: 2 K/V buffers + the probabilities
    assert tiles == {"stages": (64 * 64 + 3 * 64 * 128) * 2, "stream": (2 * 64 * 128 + 64 * 64) * 2}


# -- launch reporting ---------------------------------------------------------------------------

KERNEL = LaunchedKernel(function=0xBEEF, threads=128, shared=512, codes="OOlO")


def test_reported_launches_become_a_recipe() -> None:
    """A backend kernel's launch reported through gems_core.launches is what the recorder
    turns into a recipe: operand and output slots, numbers, a trailing null."""
    seen = []

    def kernel(x: torch.Tensor) -> torch.Tensor:
        seen.append(launches.recording())
        out = torch.empty_like(x)
        launches.report(KERNEL, (3, 2), (x.data_ptr() + 8, out, x.numel(), None))
        return out

    x = torch.randn(4, 5)
    out, recipe = record_call(kernel, (x,), {}, [(0, x)], 1, op="test")
    assert seen == [True] and out.shape == x.shape
    assert recipe is not None
    allocations, steps, returns = recipe
    assert allocations == (((4, 5), (5, 1), torch.float32),) and returns == (1,)
    assert steps == ((0xBEEF, 3, 2, 1, 128, 512, ((0, 0, 8, 0), (0, 1, 0, 0), (3, 0, 0, 20), (1, 0, 0, 0))),)
    # outside a recorded call nothing is kept; an unrepeatable launch refuses the recipe
    assert not launches.recording()
    launches.report(KERNEL, (1,), (0, 0, 0, None))

    def opaque(x: torch.Tensor) -> torch.Tensor:
        launches.unrepeatable()
        return torch.empty_like(x)

    assert record_call(opaque, (x,), {}, [(0, x)], 1, op="test")[1] is None
    assert recording.native is None


def test_the_layer_takes_the_backends_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the backend supplies the launch, the layer is handed its addresses, each by
    name; an entry point it refuses turns it off with the reason."""
    handed = []

    class Layer:
        answer = ""

        def set_driver(self, **entries: int) -> str:
            handed.append(entries)
            return self.answer

    layer = Layer()
    monkeypatch.setattr(native, "_load_without_waiting", lambda: layer)
    monkeypatch.setattr(native, "_problem", None)
    monkeypatch.setenv("GEMS_NATIVE", "1")
    launch = _addresses(launch=11, context_get=12, context_set=13, device_get=14, primary_context_retain=15,
                        error_string=16)
    execution = selection._with_launch(_EXECUTION, _installed(launch))
    assert native.available_for(execution) is layer
    assert handed == [dict(launch=11, context_get=12, context_set=13, device_get=14, primary_context_retain=15,
                           error_string=16, encode_tensor_map=0)]
    layer.answer = "refused"
    assert native.available_for(execution) is None and native.problem() == "refused"
    monkeypatch.setenv("GEMS_NATIVE", "0")  # switched off: not even asked
    assert native.available_for(execution) is None and len(handed) == 2


def test_the_contract_tier_reports_the_launch_answer() -> None:
    from gems_conformance import records
    from gems_conformance.contract_tier import _launch_checks

    failed = selection._with_launch(_EXECUTION, _installed(_addresses(launch=0)))
    (record,) = _launch_checks(failed)
    assert record.status == records.FAIL and "null address" in record.message and record.sample == "native launch"
    (record,) = _launch_checks(selection._with_launch(_EXECUTION, _installed(_addresses())))
    assert record.status == records.PASS
    assert _launch_checks(_EXECUTION) == []  # not asked (the interpreter, compile-only, no answer)


def test_emulation_launches_as_the_backend_of_the_device_present(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under GEMS_EMULATE kernels run on the device that is here: the launch is the answer
    of the backend that detects it (none detecting, or two: no launch)."""
    from gems_core.contract import DetectedDevice

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    launch = _addresses()
    present = _installed(launch)
    present.detected = DetectedDevice("Fake GPU", "f1")
    absent = _installed(_addresses(launch=0))
    execution = selection._emulated_execution({"present": present, "absent": absent})
    assert (execution.device_type, execution.interpreter, execution.launch) == ("cuda", False, launch)
    assert execution.triton_backend == ("hip" if torch.version.hip else "cuda")
    assert selection._emulated_execution({"absent": absent}).launch is None
    assert selection._emulated_execution({"a": present, "b": present}).launch is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    execution = selection._emulated_execution({"present": present})
    assert execution.interpreter and execution.launch is None
