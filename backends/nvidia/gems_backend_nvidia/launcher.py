"""Kept launches of the NVIDIA backend's Gluon kernels.

A kernel's first launch of a signature goes through Triton (``kernel[grid](...)``, which
compiles on a miss); the compiled kernel it returns is kept, and later calls of the
signature go to its launcher directly, without Triton's per-call binding and specialization
of the arguments (a few microseconds of Python per argument). This is safe only for kernels
that specialize nothing but their constexprs, which the signature key must name: their
integer arguments are declared ``do_not_specialize`` and their pointers
``do_not_specialize_on_alignment``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch

from gems_core import compat


class KeptLauncher:
    """Launches ``kernel`` with ``options`` (``num_warps``, ``maxnreg``, ...), keeping the
    compiled kernel of each signature key."""

    def __init__(self, kernel: Any, **options: Any) -> None:
        self.kernel = kernel
        self.options = options
        self._compiled: dict[Hashable, Callable[[Sequence[int], int, tuple[Any, ...]], None]] = {}

    def __call__(self, grid: Sequence[int], args: tuple[Any, ...], key: Hashable, device: int) -> None:
        """Launch on CUDA device ``device``; ``key`` names everything the compile depends on
        (dtypes, constexpr values) besides the device."""
        if device == torch.cuda.current_device():
            self._launch(grid, args, (device, key))
        else:  # kernels launch on the current device
            with torch.cuda.device(device):
                self._launch(grid, args, (device, key))

    def _launch(self, grid: Sequence[int], args: tuple[Any, ...], key: Hashable) -> None:
        launch = self._compiled.get(key)
        if launch is not None:
            launch(grid, compat.current_stream(key[0]), args)  # type: ignore[index]
            return
        kernel = self.kernel[tuple(grid)](*args, **self.options)
        run, function = getattr(kernel, "run", None), getattr(kernel, "function", None)
        packed = getattr(kernel, "packed_metadata", None)
        if run is None or function is None or packed is None:
            return  # a Triton whose launch returns no compiled kernel: every call goes through it

        def kept(grid: Sequence[int], stream: int, args: tuple[Any, ...]) -> None:
            dims = tuple(grid) + (1,) * (3 - len(grid))
            run(dims[0], dims[1], dims[2], stream, function, packed, None, None, None, *args)

        self._compiled[key] = kept

    def kept(self) -> int:
        """How many signatures launch through their compiled kernel directly."""
        return len(self._compiled)
