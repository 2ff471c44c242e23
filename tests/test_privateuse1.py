"""A chip whose torch runtime registers its device through PrivateUse1, as
docs/writing-a-backend.md describes: its descriptor names its own device type with dispatch
key "PrivateUse1".

* ``fakechip`` (tests/privateuse1_runtime.py) is such a runtime, backed by CPU memory: its
  backend is detected once the runtime has renamed PrivateUse1, gems registers its kernels at
  that key, they serve a model's ops on the device, and the contract tier and a quick accuracy
  run pass with no failure.
* Under emulation the device type is accepted before any runtime renames PrivateUse1; on the
  chip, selection without the rename is an error that says what is missing.

gems selects its backend once per process, so each scenario runs in a subprocess.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from plugin_factory import FakePlugin, run_code, run_python, write_site

HERE = Path(__file__).resolve().parent

#: its runtime imported with it, as a vendor's torch extension is; kernels run in Triton's
#: interpreter, which reads the device's (host) memory through ``.cpu()``
FAKECHIP = FakePlugin("fakechip", device_type="fakechip", dispatch_key="PrivateUse1", target=("fakechip", "f1", 32),
                      hooks='''
    import dataclasses

    import torch

    import privateuse1_runtime
    from gems_core.backends import cpu

    privateuse1_runtime.load()
    DESCRIPTOR = dataclasses.replace(DESCRIPTOR, interpreter=True)


    @hookimpl
    def gems_descriptor():
        return DESCRIPTOR


    @hookimpl
    def gems_detect():
        if torch._C._get_privateuse1_backend_name() != "fakechip":
            return None
        return DetectedDevice(name=torch.fakechip.get_device_name(0), arch="f1")


    @hookimpl
    def gems_unsupported_ops():
        return cpu.gems_unsupported_ops()  # the interpreter's gaps, as on the cpu backend
''')

#: detected, but no runtime renames PrivateUse1: what an emulated run sees
PENDING = FakePlugin("acmepu", device_type="acme", dispatch_key="PrivateUse1", detect=("Acme A1", "a1"),
                     target=("acme", "a1", 32))


@pytest.fixture(scope="module")
def fakechip(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """(site, environment) of the fakechip backend, its runtime built once."""
    from torch.utils.cpp_extension import is_ninja_available

    if shutil.which("c++") is None or not is_ninja_available():
        pytest.skip("building the fakechip runtime needs a C++ compiler and ninja")
    site = write_site(tmp_path_factory.mktemp("fakechip"), FAKECHIP)
    shutil.copy(HERE / "privateuse1_runtime.py", site)
    env = {"GEMS_DEVICE": "fakechip",
           "GEMS_TEST_PRIVATEUSE1_BUILD": str(tmp_path_factory.mktemp("fakechip_build"))}
    built = run_code("import privateuse1_runtime; privateuse1_runtime.load()", site=site, env=env)
    assert built.returncode == 0, built.stderr[-3000:]
    return site, env


SERVED = '''
    import json, torch, gems_core
    import privateuse1_runtime
    from gems_conformance.routing import RouteWatch, implementations

    privateuse1_runtime.load()  # the user's code imports the chip's runtime first
    torch.manual_seed(0)
    x = torch.randn(6, 40, dtype=torch.float64)
    y = torch.randn(40, dtype=torch.float64)
    xd = x.float().to("fakechip").t().contiguous().t()[:, ::2]  # non-contiguous on the device
    yd = y.float().to("fakechip")[::2]  # broadcast
    def has(op):
        return torch._C._dispatch_has_kernel_for_dispatch_key(op, "PrivateUse1")
    result = {"before": has("aten::add.Tensor"), "backend": gems_core.backend().name}
    codes = frozenset().union(*implementations(("add.Tensor", "_softmax")).values())
    with RouteWatch(codes) as watch, gems_core.use_gems(include=["add", "softmax"]):
        result["inside"] = has("aten::add.Tensor")
        added, soft = xd + yd, torch.softmax(xd, dim=-1)
    result["served"] = watch.hit
    result["devices"] = [str(added.device), str(soft.device)]
    result["add_error"] = (added.cpu().double() - (x[:, ::2] + y[::2])).abs().max().item()
    result["softmax_error"] = (soft.cpu().double() - torch.softmax(x[:, ::2], -1)).abs().max().item()
    result["after"] = has("aten::add.Tensor")
    print(json.dumps(result))
'''


def test_gems_kernels_serve_a_privateuse1_device(fakechip: tuple[Path, dict[str, str]]) -> None:
    site, env = fakechip
    done = run_code(SERVED, site=site, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["backend"] == "fakechip"
    assert (result["before"], result["inside"], result["after"]) == (False, True, False)
    assert result["served"], "add and softmax did not run on gems"
    assert result["devices"] == ["fakechip:0", "fakechip:0"]
    assert result["add_error"] < 1e-6 and result["softmax_error"] < 1e-6


def conformance(site: Path, report: Path, *args: str, env: dict[str, str] | None = None) -> dict:
    # one worker: a few op cases, beside the test run's other workers
    done = run_python(["-m", "gems_conformance.cli", "--quick", "--tier", "contract,accuracy", "--workers", "1",
                       "--report", str(report), *args], site=site, env=env, timeout=600)
    data = json.loads((report / "report.json").read_text())
    failed = [r for r in data["records"] if r["status"] in ("FAIL", "ERROR")]
    assert not failed, failed
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    statuses = {(r["tier"], r["status"]) for r in data["records"]}
    assert ("contract", "PASS") in statuses and ("accuracy", "PASS") in statuses
    return data


def test_privateuse1_chip_passes_contract_and_accuracy(fakechip: tuple[Path, dict[str, str]],
                                                      tmp_path: Path) -> None:
    site, env = fakechip
    data = conformance(site, tmp_path / "report", "--device", "fakechip", "--ops", "add,mm",
                       env={"GEMS_TEST_PRIVATEUSE1_BUILD": env["GEMS_TEST_PRIVATEUSE1_BUILD"]})
    assert not data["statement"]["emulated"]
    assert {r["status"] for r in data["records"] if r["op"] == "mm" and r["dtype"] == "bfloat16"} == {"FALLBACK"}


def test_emulated_privateuse1_chip_passes_before_the_rename(tmp_path: Path) -> None:
    site = write_site(tmp_path / "pending", PENDING)
    data = conformance(site, tmp_path / "report", "--device", "acmepu", "--emulate", "--ops", "add,softmax")
    device = [r for r in data["records"] if r["tier"] == "contract" and r["sample"] == "device"]
    assert device and device[0]["status"] == "PASS"


def test_on_the_chip_privateuse1_must_be_renamed(tmp_path: Path) -> None:
    site = write_site(tmp_path / "pending", PENDING)
    done = run_code("import gems_core; gems_core.enable()", site=site, env={"GEMS_DEVICE": "acmepu"})
    assert done.returncode != 0
    assert "needs the chip's runtime to rename PrivateUse1 to 'acme'" in done.stderr
    assert "rename_privateuse1_backend" in done.stderr
