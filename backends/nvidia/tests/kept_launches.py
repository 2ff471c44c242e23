"""The Hopper mark, and a spy on the NVIDIA backend's kept launchers (``gems_backend_nvidia.launcher``): the grid
of every launch of a kernel, and which of them went through Triton (a signature's first)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import pytest
import torch

from gems_core import runtime


def _hopper_selected() -> bool:
    return (torch.cuda.is_available() and runtime.current().selection.descriptor.name == "nvidia"
            and torch.cuda.get_device_capability() == (9, 0))


#: tests of the NVIDIA backend's Hopper kernels on the chip
on_hopper = pytest.mark.skipif(not _hopper_selected(), reason="needs an H100/H200 under the nvidia backend")


class LaunchSpy:
    """Put in place of ``module.<attr>`` (a ``KeptLauncher``): ``grids`` lists every launch,
    ``through_triton`` the launches that went through ``kernel[grid]``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, module: Any, attr: str = "_launcher") -> None:
        from gems_backend_nvidia.launcher import KeptLauncher

        original = getattr(module, attr)
        self.grids: list[tuple[int, ...]] = []
        self.through_triton: list[tuple[int, ...]] = []
        spy = self

        class Kernel:
            def __getitem__(self, grid: tuple[int, ...]) -> Any:
                spy.through_triton.append(tuple(grid))
                return original.kernel[grid]

        class Launcher(KeptLauncher):
            def __call__(self, grid: Sequence[int], args: tuple[Any, ...], key: Hashable, device: int) -> None:
                spy.grids.append(tuple(grid))
                super().__call__(grid, args, key, device)

        self.launcher = Launcher(Kernel(), **original.options)
        monkeypatch.setattr(module, attr, self.launcher)
