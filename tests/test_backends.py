"""The five vendor backends: detection, limits, config keys, op names, versions, emulation.

Detection runs against faked torch attributes (one scenario per machine kind, every
backend asked in each, so a false positive anywhere fails). Selection runs in subprocesses:
gems selects its backend once per process, from the environment.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from types import ModuleType, SimpleNamespace

import pytest
import torch
from packaging.specifiers import SpecifierSet
from packaging.version import Version

VENDORS = ("nvidia", "amd", "iluvatar", "metax", "kunlunxin")
TUNABLES = ("pointwise", "mm", "reduction", "softmax", "norm")

#: every arch key a backend keeps configs for (or maps onto configs)
ARCHS = {
    "nvidia": ("sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_100", "sm_120"),
    "amd": ("gfx90a", "gfx942", "gfx950"),
    "iluvatar": ("ivcore10", "ivcore11", "ivcore20"),
    "metax": ("c500", "c550"),
    "kunlunxin": ("xpu3",),
}
VENDOR_ARCH = [(vendor, arch) for vendor in VENDORS for arch in ARCHS[vendor]]

#: fork versions as published; their triton reports the base version with a local label
TRITON_VERSIONS = {
    "nvidia": ("3.6.0", "3.9.0"),
    "amd": ("3.6.0", "3.9.0"),
    "iluvatar": ("3.1.0+corex.4.4.0", "3.1.0"),
    "metax": ("3.1.0+metax3.5.3.9", "3.0.0+metax3.5.3.9"),
    "kunlunxin": ("3.0.0+xpu3.0", "3.0.0"),
}


def _module(vendor: str, name: str) -> ModuleType:
    pytest.importorskip(f"gems_backend_{vendor}", reason=f"pip install -e backends/{vendor}")
    return importlib.import_module(f"gems_backend_{vendor}.{name}")


def _descriptor(vendor: str, arch: str):
    return _module(vendor, "device").descriptor(arch)


def _configs(vendor: str, arch: str):
    return _module(vendor, "plugin").gems_tuned_configs(arch=arch)


# -- detection ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Machine:
    """What torch reports on one kind of machine; ``name=None`` means no GPU."""

    name: str | None
    capability: tuple[int, int] = (0, 0)
    hip: str | None = None
    gcn_arch: str = ""
    corex: bool = False
    torch_version: str = "2.13.0"
    maca_path: bool = False
    kunlunxin_stack: bool = False


#: machine -> (the backend that must detect it, its arch); None: no backend may
SCENARIOS = {
    "cpu only": (Machine(None), None),
    "H100": (Machine("NVIDIA H100 80GB HBM3", (9, 0)), ("nvidia", "sm_90")),
    "A100": (Machine("NVIDIA A100-SXM4-80GB", (8, 0)), ("nvidia", "sm_80")),
    "V100, brand name": (Machine("Tesla V100-SXM2-16GB", (7, 0)), ("nvidia", "sm_70")),
    "H100 beside MACA and torch_klx": (
        Machine("NVIDIA H100 80GB HBM3", (9, 0), maca_path=True, kunlunxin_stack=True,
                torch_version="2.8.0+metax3.5.3.9"),
        ("nvidia", "sm_90"),
    ),
    "MI300X": (
        Machine("AMD Instinct MI300X", (9, 4), hip="6.2.41133", gcn_arch="gfx942:sramecc+:xnack-"),
        ("amd", "gfx942"),
    ),
    "MI250X": (
        Machine("AMD Instinct MI250X/MI250", (9, 0), hip="6.0.0", gcn_arch="gfx90a:sramecc+:xnack-"),
        ("amd", "gfx90a"),
    ),
    "Hygon DCU on ROCm": (
        Machine("Hygon DCU K100_AI", (9, 2), hip="6.2.0", gcn_arch="gfx928"),
        None,
    ),
    "BI-V150": (
        Machine("Iluvatar BI-V150", (7, 1), corex=True, torch_version="2.7.1+corex.4.4.0"),
        ("iluvatar", "ivcore11"),
    ),
    "CoreX build, bare part name": (Machine("BI-V100", (7, 0), corex=True), ("iluvatar", "ivcore10")),
    "C500": (Machine("MetaX C500", (8, 0)), ("metax", "c500")),
    "MACA build, bare part name": (
        Machine("C550", (8, 0), torch_version="2.8.0+metax3.5.3.9", maca_path=True),
        ("metax", "c550"),
    ),
    "MACA build without MACA": (Machine("C550", (8, 0), torch_version="2.8.0+metax3.5.3.9"), None),
    "P800": (Machine("Kunlunxin P800", (0, 0)), ("kunlunxin", "xpu3")),
    "Kunlunxin stack, generic name": (Machine("XPU", (0, 0), kunlunxin_stack=True), ("kunlunxin", "xpu3")),
}


def _no_gpu_query(*args, **kwargs):
    raise AssertionError("detection queried a device although torch.cuda.is_available() is False")


@pytest.fixture
def machine(monkeypatch, tmp_path):
    """Fake what torch reports; returns a function taking a :class:`Machine`."""

    def install(m: Machine) -> None:
        present = m.name is not None
        monkeypatch.setattr(torch.cuda, "is_available", lambda: present)
        monkeypatch.setattr(torch.version, "hip", m.hip)
        monkeypatch.setattr(torch, "__version__", m.torch_version)
        if present:
            props = SimpleNamespace(name=m.name, major=m.capability[0], minor=m.capability[1],
                                    gcnArchName=m.gcn_arch)
            monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: m.name)
            monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: m.capability)
            monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)
        else:
            for query in ("get_device_name", "get_device_capability", "get_device_properties"):
                monkeypatch.setattr(torch.cuda, query, _no_gpu_query)
        if m.corex:
            monkeypatch.setattr(torch, "corex", SimpleNamespace(), raising=False)
        else:
            monkeypatch.delattr(torch, "corex", raising=False)
        monkeypatch.delenv("MACA_PATH", raising=False)
        monkeypatch.setattr(_module("metax", "device"), "MACA_DEFAULT_PATH", str(tmp_path / "no-maca"))
        if m.maca_path:
            (tmp_path / "maca").mkdir()
            monkeypatch.setenv("MACA_PATH", str(tmp_path / "maca"))
        if m.kunlunxin_stack:
            package = tmp_path / "site" / "torch_klx"
            package.mkdir(parents=True)
            (package / "__init__.py").write_text("raise ImportError('detection must not import me')\n")
            monkeypatch.syspath_prepend(str(tmp_path / "site"))

    return install


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_detection_finds_only_its_own_hardware(machine, scenario):
    m, expected = SCENARIOS[scenario]
    machine(m)
    found = {}
    for vendor in VENDORS:
        detected = _module(vendor, "device").detect()
        if detected is not None:
            found[vendor] = detected.arch
    assert found == (dict([expected]) if expected else {}), scenario


@pytest.mark.parametrize("vendor", VENDORS)
def test_descriptor_follows_detected_arch(machine, vendor):
    scenario = {
        "nvidia": "A100", "amd": "MI250X", "iluvatar": "BI-V150", "metax": "C500", "kunlunxin": "P800",
    }[vendor]
    m, (_, arch) = SCENARIOS[scenario]
    machine(m)
    descriptor = _module(vendor, "plugin").gems_descriptor()
    assert descriptor == _descriptor(vendor, arch)
    assert descriptor.name == vendor
    assert (descriptor.device_type, descriptor.dispatch_key) == ("cuda", "CUDA")
    assert descriptor.detection


def test_descriptor_examples_from_vendor_facts():
    from gems_core import TritonTarget

    assert _descriptor("nvidia", "sm_90").target == TritonTarget("cuda", 90, 32)
    assert _descriptor("nvidia", "sm_90").limits.shared_memory_per_block == 227 * 1024
    assert _descriptor("nvidia", "sm_80").limits.shared_memory_per_block == 163 * 1024
    assert _descriptor("amd", "gfx942").target == TritonTarget("hip", "gfx942", 64)
    assert _descriptor("amd", "gfx942").limits.max_warps == 16
    assert _descriptor("amd", "gfx950").limits.shared_memory_per_block == 160 * 1024
    assert _descriptor("metax", "c500").limits.max_warps == 8
    assert _descriptor("kunlunxin", "xpu3").limits.max_block_elements == 512
    for vendor in ("iluvatar", "kunlunxin"):
        assert "float64" in _descriptor(vendor, ARCHS[vendor][0]).dtypes.unsupported()
    float8 = {"float8_e4m3fn", "float8_e5m2"}
    for vendor in ("nvidia", "amd", "metax"):
        assert not _descriptor(vendor, ARCHS[vendor][0]).dtypes.unsupported() - float8
    assert _descriptor("nvidia", "sm_80").dtypes.unsupported() == float8
    assert not _descriptor("nvidia", "sm_89").dtypes.unsupported()


@pytest.mark.parametrize("vendor", VENDORS)
def test_triton_range_holds_published_versions(vendor):
    spec = SpecifierSet(_descriptor(vendor, ARCHS[vendor][0]).triton_versions)
    for version in TRITON_VERSIONS[vendor]:
        assert spec.contains(Version(version), prereleases=True), (vendor, version)


# -- configs -----------------------------------------------------------------------------


def _mm_shared_bytes(params, stages: int, element_bytes: int) -> int:
    """Shared memory of the A and B tiles, per pipeline stage."""
    bm, bn, bk = params["BLOCK_M"], params["BLOCK_N"], params["BLOCK_K"]
    return (bm * bk + bk * bn) * element_bytes * stages


@pytest.mark.parametrize("vendor,arch", VENDOR_ARCH)
def test_configs_cover_every_tunable(vendor, arch):
    """Every vendor tunes the five kernel families; extras must name real tunables."""
    from gems_core import tuning

    names = set(_configs(vendor, arch))
    assert set(TUNABLES) <= names
    assert names <= set(tuning.tunables()), names - set(tuning.tunables())


@pytest.mark.parametrize("vendor,arch", VENDOR_ARCH)
def test_configs_within_limits(vendor, arch):
    descriptor = _descriptor(vendor, arch)
    limits, warp_size = descriptor.limits, descriptor.target.warp_size
    for kernel, configs in _configs(vendor, arch).items():
        assert configs, kernel
        for config in configs:
            where = f"{vendor} {arch} {kernel}: {config.describe()}"
            assert config.num_warps & (config.num_warps - 1) == 0, where
            assert config.num_warps <= limits.max_warps, where
            assert config.num_warps * warp_size <= limits.max_threads_per_block, where
            assert config.num_stages >= 1, where
            for name, value in config.params.items():
                assert value > 0 and value & (value - 1) == 0, f"{where}: {name} not a power of two"
                if name.startswith("BLOCK") and limits.max_block_elements:
                    assert value <= limits.max_block_elements, where


@pytest.mark.parametrize("vendor,arch", VENDOR_ARCH)
def test_mm_tiles_fit_shared_memory(vendor, arch):
    """Every mm config fits 16-bit operands; the first (used unbenchmarked) fits fp32."""
    budget = _descriptor(vendor, arch).limits.shared_memory_per_block
    configs = _configs(vendor, arch)["mm"]
    for config in configs:
        used = _mm_shared_bytes(config.params, config.num_stages, 2)
        assert used <= budget, f"{vendor} {arch}: {config.describe()} needs {used} B > {budget} B"
    first = configs[0]
    assert _mm_shared_bytes(first.params, first.num_stages, 4) <= budget, first.describe()


def test_amd_gemm_tiles_fit_64k_lds():
    for arch in ("gfx90a", "gfx942"):
        for config in _configs("amd", arch)["mm"]:
            assert _mm_shared_bytes(config.params, config.num_stages, 2) <= 64 * 1024, config


@pytest.fixture(scope="module")
def core_tunables():
    from gems_core import tuning

    return tuning.tunables()


@pytest.mark.parametrize("vendor,arch", VENDOR_ARCH)
@pytest.mark.parametrize("kernel", TUNABLES)
def test_config_keys_are_tunable_params(core_tunables, vendor, arch, kernel):
    if kernel not in core_tunables:
        pytest.skip(f"the core does not define tunable {kernel!r} yet (its op module is pending)")
    tunable = core_tunables[kernel]
    for config in _configs(vendor, arch)[kernel]:
        tunable.validate(config)
        required = set(tunable.params) - set(tunable.optional)
        assert required <= set(config.params), f"{vendor} {arch} {kernel}: {config.describe()}"


@pytest.mark.parametrize("vendor,arch", VENDOR_ARCH)
def test_compiler_options_name_tunables(core_tunables, vendor, arch):
    plugin = _module(vendor, "plugin")
    if not hasattr(plugin, "gems_compiler_options"):
        pytest.skip(f"{vendor} declares no compiler options")
    for kernel in plugin.gems_compiler_options(arch=arch):
        assert kernel == "*" or kernel in TUNABLES, kernel


def test_amd_options_are_upstream_hip_options():
    from gems_core.compat import accepted_options

    accepted = accepted_options("hip")
    if not accepted:
        pytest.skip("this Triton has no AMD backend")
    plugin = _module("amd", "plugin")
    for arch in ARCHS["amd"]:
        for options in plugin.gems_compiler_options(arch=arch).values():
            assert set(options) <= accepted, (arch, sorted(set(options) - accepted))


# -- op names ----------------------------------------------------------------------------


def _is_aten_op(name: str) -> bool:
    packet, _, overload = name.partition(".")
    try:
        torch._C._dispatch_find_schema_or_throw(f"aten::{packet}", overload)
        return True
    except RuntimeError:
        return not overload and bool(torch._C._jit_get_schemas_for_operator(f"aten::{packet}"))


def _declared_ops(vendor: str) -> list[str]:
    plugin = _module(vendor, "plugin")
    names = []
    for entry in getattr(plugin, "gems_unsupported_ops", lambda: ())():
        names.append(entry if isinstance(entry, str) else entry.op)
    names += [d.op for d in getattr(plugin, "gems_known_deviations", lambda: ())() if d.op != "*"]
    return names


@pytest.mark.parametrize("vendor", VENDORS)
def test_declared_ops_are_aten_ops(vendor):
    unknown = [name for name in _declared_ops(vendor) if not _is_aten_op(name)]
    assert not unknown, f"{vendor} names ops ATen does not have: {unknown}"


@pytest.mark.parametrize("vendor", VENDORS)
def test_gates_and_deviations_give_reasons(vendor):
    plugin = _module(vendor, "plugin")
    for entry in getattr(plugin, "gems_unsupported_ops", lambda: ())():
        assert isinstance(entry, str) or entry.reason, entry
    for deviation in getattr(plugin, "gems_known_deviations", lambda: ())():
        assert deviation.reason and deviation.kind in ("xfail", "tolerance"), deviation


def test_published_failing_ops_are_gated():
    def gated(vendor):
        return set(_declared_ops(vendor))

    assert {"acos", "copy_", "std", "trace", "masked_scatter", "upsample_nearest1d"} <= gated("metax")
    assert {"cumsum", "cummin", "sort", "topk", "randperm", "_unique2", "acos", "conv1d"} <= gated("kunlunxin")


# -- discovery and selection (subprocesses) ------------------------------------------------

_REPORT = """
import json
from gems_core import runtime
rt = runtime.current()
s = rt.selection
print(json.dumps({
    "backend": s.backend.name, "emulated": s.emulated, "arch": s.arch,
    "kept": {k: dict(v) for k, v in rt.policy.compiler_options.items()},
    "dropped": list(rt.policy.dropped_options),
    "configs": sorted(rt.policy.configs),
}))
"""


def _gems(tmp_path, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GEMS_") and k != "TRITON_INTERPRET"}
    clean.update(GEMS_CACHE_DIR=str(tmp_path / "cache"), **env)
    return subprocess.run([sys.executable, "-c", code], env=clean, capture_output=True, text=True,
                          check=False, timeout=300)


def test_entry_points_load_every_backend():
    from gems_core.plugins import discover

    installed = discover()
    for vendor in VENDORS:
        _module(vendor, "plugin")
        backend = installed[vendor]
        assert backend.ok, backend.error
        assert backend.distribution == f"gems-backend-{vendor}"
        assert backend.descriptor.name == vendor


@pytest.mark.parametrize("vendor", VENDORS)
def test_emulated_selection_applies_policy_and_reports_dropped_options(tmp_path, vendor):
    plugin = _module(vendor, "plugin")
    result = _gems(tmp_path, _REPORT, GEMS_DEVICE=vendor, GEMS_EMULATE="1")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["backend"] == vendor and report["emulated"]
    assert set(TUNABLES) <= set(report["configs"])
    declared = getattr(plugin, "gems_compiler_options", lambda arch: {})(arch=report["arch"])
    expected = sorted(f"{k}: {o}={v!r}" for k, opts in declared.items() for o, v in opts.items())
    kept = sorted(f"{k}: {o}={v!r}" for k, opts in report["kept"].items() for o, v in opts.items())
    assert sorted(report["dropped"] + kept) == expected
    if not torch.cuda.is_available():  # the interpreter accepts no options at all
        assert report["kept"] == {} and sorted(report["dropped"]) == expected


def test_emulated_metax_drops_its_fork_options(tmp_path):
    _module("metax", "plugin")
    result = _gems(tmp_path, _REPORT, GEMS_DEVICE="metax", GEMS_EMULATE="1")
    assert result.returncode == 0, result.stderr
    dropped = json.loads(result.stdout.strip().splitlines()[-1])["dropped"]
    assert "mm: pipeline='cpasync'" in dropped
    assert "mm: scenario='unroll'" in dropped


@pytest.mark.parametrize("vendor", VENDORS)
def test_explicit_selection_without_hardware_says_what_it_looked_for(tmp_path, vendor):
    device = _module(vendor, "device")
    if device.detect() is not None:
        pytest.skip(f"{vendor} hardware is present here")
    result = _gems(tmp_path, _REPORT, GEMS_DEVICE=vendor)
    assert result.returncode != 0
    assert "BackendError" in result.stderr
    assert f"looked for: {device.DETECTION}" in result.stderr
    assert "GEMS_EMULATE=1" in result.stderr


def test_nvidia_compile_targets_are_held_to_their_own_chip_limits() -> None:
    from gems_backend_nvidia.device import descriptor

    d = descriptor("sm_90")
    assert d.limits_for(80).shared_memory_per_block == 163 * 1024
    assert d.limits_for(90).shared_memory_per_block == 227 * 1024
    assert d.limits_for("gfx942") is d.limits  # not a declared arch: the descriptor's own
