"""pytest plugin of the conformance suite (``pytest --pyargs gems_conformance``)."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gems-conformance")
    group.addoption("--gems-device", default=None, help="gems backend to certify (sets GEMS_DEVICE)")
