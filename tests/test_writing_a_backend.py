"""docs/writing-a-backend.md and its example plugin: the example, copied out of the repository
and renamed as the guide says, installs with pip and runs under emulation; the guide covers
every hook of the contract.

The plugin is installed with ``pip --target`` into a directory of its own and used from
subprocesses (gems selects its backend once per process); the environment is left untouched.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from plugin_factory import pip_install_target, run_code, run_info, run_python

from gems_core import hookspecs

REPO = Path(__file__).resolve().parents[1]
GUIDE = REPO / "docs" / "writing-a-backend.md"
EXAMPLE = REPO / "docs" / "example-backend"
NAME = "acme"

# The four renames of the guide's table ("Start from the example"): (file, example text, ours).
# Each example text must appear in the guide and exactly once in its file.
RENAMES = (
    ("pyproject.toml", 'name = "gems-backend-example"', f'name = "gems-backend-{NAME}"'),
    ("pyproject.toml", 'example = "gems_backend_example.plugin"', f'{NAME} = "gems_backend_{NAME}.plugin"'),
    ("pyproject.toml", 'include = ["gems_backend_example*"]', f'include = ["gems_backend_{NAME}*"]'),
    ("gems_backend_example/plugin.py", 'NAME = "example"', f'NAME = "{NAME}"'),
)
PACKAGE_FOLDER = ("gems_backend_example", f"gems_backend_{NAME}")


def rename_as_the_guide_says(project: Path) -> None:
    guide = GUIDE.read_text()
    for relative, old, new in RENAMES:
        assert old in guide, f"the guide's rename table does not show {old!r}"
        path = project / relative
        text = path.read_text()
        assert text.count(old) == 1, f"{relative} should contain {old!r} exactly once"
        path.write_text(text.replace(old, new))
    old_folder, new_folder = PACKAGE_FOLDER
    assert f"`{old_folder}/`" in guide
    (project / old_folder).rename(project / new_folder)
    for path in [project / "pyproject.toml", *(project / new_folder).rglob("*.py")]:
        text = path.read_text()
        assert "gems_backend_example" not in text and "gems-backend-example" not in text, (
            f"{path.name} still names the example package after the guide's renames"
        )


@pytest.fixture(scope="module")
def acme_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example, copied out of the repository, renamed to ``acme`` and pip-installed into a
    directory for PYTHONPATH."""
    root = tmp_path_factory.mktemp("vendor")
    assert not root.resolve().is_relative_to(REPO)
    project = root / f"gems-backend-{NAME}"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    rename_as_the_guide_says(project)
    return pip_install_target(project, root / "site")


def test_guide_mentions_every_hook() -> None:
    guide = GUIDE.read_text()
    hooks = [name for name in vars(hookspecs) if name.startswith("gems_")
             and hasattr(getattr(hookspecs, name), f"{hookspecs.PROJECT}_spec")]
    assert len(hooks) >= 7
    missing = [hook for hook in hooks if f"`{hook}(" not in guide]
    assert not missing, f"docs/writing-a-backend.md does not document {missing}"


def test_readme_links_the_guide() -> None:
    assert "docs/writing-a-backend.md" in (REPO / "README.md").read_text()


def test_installed_as_its_own_distribution(acme_site: Path) -> None:
    assert (acme_site / f"gems_backend_{NAME}" / "plugin.py").is_file()
    dist_info = next(acme_site.glob(f"gems_backend_{NAME}-*.dist-info"))
    entry_points = (dist_info / "entry_points.txt").read_text()
    assert "[gems_core.backends]" in entry_points
    assert f"{NAME} = gems_backend_{NAME}.plugin" in entry_points


def test_info_selects_it_under_emulation(acme_site: Path) -> None:
    env = {"GEMS_DEVICE": NAME, "GEMS_EMULATE": "1"}
    text = run_info(site=acme_site, env=env)
    assert text.returncode == 0, text.stderr
    assert f"Selected backend: {NAME}" in text.stdout
    assert f"Policy of {NAME}" in text.stdout

    result = run_info("--json", site=acme_site, env=env)
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["selection"]["backend"] == NAME and info["selection"]["emulated"] is True
    row = next(b for b in info["backends"] if b["name"] == NAME)
    assert row["selected"] and row["error"] is None and row["distribution"] == f"gems-backend-{NAME}", row
    policy = info["policy"]
    # the plugin's own gates; the CPU interpreter's (the host's, under emulation) are labelled
    host = {gate["op"] for gate in policy["aten_ops"] if gate["reason"].startswith("the host's (cpu)")}
    gates = {gate["op"]: gate["dtypes"] for gate in policy["aten_ops"] if gate["op"] not in host}
    assert gates == {"cumsum": [], "prod": ["int64"]} and "mm" in host
    assert policy["unsupported_dtypes"] == ["float64", "float8_e4m3fn", "float8_e5m2"]  # float8: not declared
    # the fork's options, per kernel and per config, are not upstream Triton's: dropped, listed
    dropped = policy["dropped_options"]
    assert any(d.startswith("softmax: example_pipeline") for d in dropped), dropped
    assert any(d.startswith("pointwise (config): example_vector_width") for d in dropped), dropped
    assert [d["op"] for d in policy["deviations"]] == ["exp"]


def test_selecting_it_without_the_chip_asks_for_emulation(acme_site: Path) -> None:
    result = run_info(site=acme_site, env={"GEMS_DEVICE": NAME})
    assert result.returncode != 0
    assert "GEMS_EMULATE=1" in result.stderr + result.stdout


def test_add_runs_under_it(acme_site: Path) -> None:
    result = run_code(
        """
        import torch, gems_core
        assert gems_core.backend().name == "acme", gems_core.backend()
        x = torch.randn(33, 17, device=gems_core.device)
        y = torch.randn(17, device=gems_core.device)
        expected = torch.add(x, y, alpha=2)
        with gems_core.use_gems():
            assert "add.Tensor" in gems_core.registered_ops()
            got = torch.add(x, y, alpha=2)
        torch.testing.assert_close(got, expected)
        print("ok")
        """,
        site=acme_site,
        env={"GEMS_DEVICE": NAME, "GEMS_EMULATE": "1"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")


def test_passes_the_contract_tier(acme_site: Path, tmp_path: Path) -> None:
    """Every op, tunable and parameter the example names still exists in the core."""
    # the checkout's suite, beside the installed example
    pythonpath = os.pathsep.join([str(acme_site), str(REPO / "conformance"), str(REPO)])
    result = run_python(
        ["-m", "gems_conformance.cli", "--device", NAME, "--emulate", "--tier", "contract",
         "--report", str(tmp_path), "--quiet"],
        env={"PYTHONPATH": pythonpath},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["statement"]["emulated"] is True
    assert report["counts"]["PASS"] > 0
    assert {r["status"] for r in report["records"]} == {"PASS"}, report["records"]
