"""Tuned configs for CoreX GPUs (one set for every ivcore generation until they differ).

Warps are 64 lanes, so 16 warps fill a 1024-thread block; the published GEMM tuning favours
num_warps=16 with one or two stages. GEMM shared memory per config is
``(BLOCK_M*BLOCK_K + BLOCK_K*BLOCK_N) * 2 bytes * num_stages``, within 64 KB [?]. The first
config of a list is the one used where nothing is benchmarked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gems_core import KernelConfig
from gems_core.configs import mm, pointwise, row, tile


CONFIGS: dict[str, list[KernelConfig]] = {
    "pointwise": [pointwise(1024, 4)],
    "mm": [
        mm(128, 128, 32, 16, 2),  # 32 KB fp16, 64 KB fp32
        mm(128, 256, 32, 16, 2),  # 48 KB
        mm(256, 128, 32, 16, 1),  # 24 KB
        mm(128, 128, 64, 16, 1),  # 32 KB
        mm(64, 64, 64, 8, 2),  # 32 KB: small or skinny problems
    ],
    "reduction": [tile(4, 512, 4), tile(1, 2048, 8), tile(16, 128, 4)],
    "softmax": [tile(1, 1024, 4), tile(1, 4096, 16), tile(4, 256, 4)],
    "norm": [row(1024, 4), row(4096, 16), row(256, 2)],
}


def tuned_configs(arch: str) -> Mapping[str, Sequence[KernelConfig]]:
    return CONFIGS
