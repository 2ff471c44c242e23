"""``python -m gems_core`` (also ``gems-info``): --version, --help naming every GEMS_*
variable gems reads, a short report by default and the rest under --verbose."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import gems_core
from gems_core import info

ROOT = Path(__file__).resolve().parents[1]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    try:
        assert info.main(list(argv)) == 0
    except SystemExit as done:  # --version and --help exit through argparse
        assert done.code == 0
    return capsys.readouterr().out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "--version").strip() == f"gems-core {gems_core.__version__}"


def test_help_names_every_variable_gems_reads(capsys: pytest.CaptureFixture[str]) -> None:
    read = set()
    for folder in ("gems_core", "conformance", "backends"):
        for source in (ROOT / folder).rglob("*.py"):
            read |= set(re.findall(r"\bGEMS_[A-Z_]+[A-Z]\b", source.read_text(encoding="utf-8")))
    read.discard("GEMS_TEST_SHARD")  # the test suite's own
    text = run(capsys, "--help")
    listed = {line.split()[0] for line in text.splitlines() if line.startswith("  GEMS_")}
    assert read <= listed, read - listed
    assert "gems-info" in text


def test_info_is_short_and_verbose_prints_each_config_once(capsys: pytest.CaptureFixture[str]) -> None:
    short = run(capsys, "info")
    verbose = run(capsys, "info", "--verbose")
    report = info.collect()
    assert "Selected backend:" in short and "Ops served:" in short and "--verbose" in short
    assert len(short.splitlines()) < 100 < len(verbose.splitlines())
    assert "core defaults" not in short
    # each tunable's defaults once (under Tunables), not again under the policy
    assert verbose.count("core defaults:") == len(report["tunables"])
    packets = report["ops"]["packets"]
    assert all(f"  {p} " in verbose for p in packets)


def test_readme_mentions_gems_info_and_version() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "gems-info" in readme and "--version" in readme
