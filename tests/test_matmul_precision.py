"""float32 products follow torch.set_float32_matmul_precision at every call, also after a
signature has been planned (or recorded by the native layer) under another setting."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import gems_core
from gems_core.ops import mm as mm_module
from gems_core.registry import load_ops

DEVICE = torch.device(gems_core.device)
pytestmark = pytest.mark.skipif(DEVICE.type == "cpu", reason="the CPU interpreter has no tf32 products")


@pytest.fixture
def precisions(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The INPUT_PRECISION of every launch of the tiled product kernel."""
    load_ops()
    seen: list[Any] = []
    launch = mm_module._launch_mm

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("INPUT_PRECISION"))
        return launch(*args, **kwargs)

    monkeypatch.setattr(mm_module, "_launch_mm", spy)
    previous = torch.get_float32_matmul_precision()
    yield seen
    torch.set_float32_matmul_precision(previous)


@pytest.mark.parametrize("op", ["mm", "addmm"])
def test_a_precision_change_reaches_planned_signatures(op: str, precisions: list[Any]) -> None:
    g = torch.Generator().manual_seed(3)  # 100 rows: the tiled kernel
    a = torch.randn(100, 20, generator=g).to(DEVICE)
    b = torch.randn(20, 7, generator=g).to(DEVICE)
    bias = torch.randn(7, generator=g).to(DEVICE)
    call = (lambda: torch.mm(a, b)) if op == "mm" else (lambda: torch.addmm(bias, a, b))
    want = (a.double() @ b.double()) + (0 if op == "mm" else bias.double())
    torch.set_float32_matmul_precision("highest")
    with gems_core.use_gems():
        for _ in range(3):  # the first call, the planned call, a replay
            got = call()
        torch.set_float32_matmul_precision("high")
        precisions.clear()
        changed = call()
    assert "ieee" not in precisions and "tf32" in precisions, precisions
    torch.testing.assert_close(got.double(), want, rtol=2e-3, atol=2e-3)
    # tf32 keeps 10 mantissa bits: 20 products of unit normals are off by up to about 1e-2
    # (ATen's tf32 product is as far off)
    torch.testing.assert_close(changed.double(), want, rtol=1e-2, atol=5e-2)
