"""Tuned configs and compiler options for MetaX GPUs (one set for C500 and C550).

Warps are 64 lanes and a block holds at most 512 threads [?], so num_warps <= 8; no block
is wider than 2048 along an axis; the elementwise default block is 512. GEMM shared memory
per config is ``(BLOCK_M*BLOCK_K + BLOCK_K*BLOCK_N) * 2 bytes * num_stages`` <= 64 KB [?].
The first config of a list is the one used where nothing is benchmarked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gems_core import KernelConfig
from gems_core.configs import mm, pointwise, row, tile


CONFIGS: dict[str, list[KernelConfig]] = {
    "pointwise": [pointwise(512, 4)],
    "mm": [
        mm(128, 128, 32, 8, 2),  # 32 KB fp16, 64 KB fp32
        mm(128, 256, 32, 8, 2),  # 48 KB
        mm(256, 128, 32, 8, 2),  # 48 KB
        mm(64, 128, 64, 4, 2),  # 48 KB
        mm(64, 64, 64, 4, 2),  # 32 KB fp16, 64 KB fp32: small or skinny problems
    ],
    "reduction": [tile(4, 256, 4), tile(1, 2048, 8), tile(16, 64, 4)],
    "softmax": [tile(1, 1024, 4), tile(1, 2048, 8), tile(4, 256, 4)],
    "norm": [row(1024, 4), row(2048, 8), row(256, 2)],
}

# Options of the MetaX fork: ``pipeline`` picks its software pipeliner ("basic" by default;
# "cpasync" overlaps global->shared copies), ``scenario`` switches extra passes.
COMPILER_OPTIONS: dict[str, dict[str, object]] = {
    "mm": {"pipeline": "cpasync", "scenario": "unroll"},  # [?] scenario value as published
}


def tuned_configs(arch: str) -> Mapping[str, Sequence[KernelConfig]]:
    return CONFIGS


def compiler_options(arch: str) -> Mapping[str, Mapping[str, object]]:
    return COMPILER_OPTIONS
