"""pytest plugin of the conformance suite: ``pytest --pyargs gems_conformance --gems-device X``.

The options set ``GEMS_DEVICE`` (and ``GEMS_EMULATE``) before anything selects a backend;
the checks themselves are in :mod:`gems_conformance.test_backend`, one test per contract
check set, op case x dtype, and tier. The CLI (``gems-conformance``) runs the same checks with
crash isolation and writes the report folder; this form suits a vendor's own pytest CI.
"""

from __future__ import annotations

import os

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gems-conformance")
    group.addoption("--gems-device", default=None, help="gems backend to certify (sets GEMS_DEVICE)")
    group.addoption("--gems-emulate", action="store_true", default=False,
                    help="apply the backend's policy on the device that is here (GEMS_EMULATE=1)")
    group.addoption("--gems-profile", default="quick", choices=("quick", "full", "large"),
                    help="sample profile of the accuracy tier (default quick)")
    group.addoption("--gems-ops", default="", help="comma-separated op cases or ATen ops to check")


def pytest_configure(config: pytest.Config) -> None:
    device = config.getoption("--gems-device", default=None)
    if device:
        os.environ["GEMS_DEVICE"] = device
    if config.getoption("--gems-emulate", default=False):
        os.environ["GEMS_EMULATE"] = "1"
