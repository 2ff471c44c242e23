"""Tuned configs and compiler options per gfx arch.

CDNA has 64-lane wavefronts, so ``num_warps`` counts 64 threads: 16 warps fill a 1024-thread
workgroup. GEMM tiles must fit LDS: ``(BLOCK_M*BLOCK_K + BLOCK_K*BLOCK_N) * 2 bytes *
num_stages`` <= 64 KB on gfx90a/gfx942 (160 KB on gfx950). ``num_stages=2`` is what the
stream pipeliner is tuned for. The first config of a list is the one used where nothing is
benchmarked, so it fits fp32 operands too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gems_core import KernelConfig
from gems_core.configs import mm, pointwise, row, tile


_MEMORY_BOUND: dict[str, list[KernelConfig]] = {
    "pointwise": [pointwise(1024, 4)],
    "reduction": [tile(4, 512, 4), tile(1, 2048, 8), tile(16, 128, 4)],
    "softmax": [tile(1, 1024, 4), tile(1, 4096, 8), tile(4, 256, 4)],
    "norm": [row(1024, 4), row(4096, 8), row(256, 2)],
}

CONFIGS: dict[str, dict[str, list[KernelConfig]]] = {
    # MI200: 64 KB LDS
    "gfx90a": {
        **_MEMORY_BOUND,
        "mm": [
            mm(128, 128, 32, 4),  # 32 KB fp16, 64 KB fp32
            mm(256, 128, 32, 8),  # 48 KB
            mm(128, 256, 32, 8),  # 48 KB
            mm(128, 128, 64, 8),  # 64 KB
            mm(64, 64, 64, 4),  # 32 KB fp16, 64 KB fp32: small or skinny problems
            mm(64, 64, 32, 4),  # 64 KB fp64: the tile float64 fits in 64 KB of LDS
        ],
    },
    # MI300: 64 KB LDS, 304 CUs; large tiles keep the MFMA units fed
    "gfx942": {
        **_MEMORY_BOUND,
        "mm": [
            mm(128, 128, 32, 4),  # 32 KB fp16, 64 KB fp32
            mm(256, 256, 32, 8),  # 64 KB
            mm(128, 128, 64, 8),  # 64 KB
            mm(256, 128, 32, 8),  # 48 KB
            mm(128, 256, 32, 8),  # 48 KB
            mm(64, 64, 64, 4),  # 32 KB fp16, 64 KB fp32: small or skinny problems
            mm(64, 64, 32, 4),  # 64 KB fp64: the tile float64 fits in 64 KB of LDS
        ],
    },
    # MI350: 160 KB LDS allows deeper K tiles
    "gfx950": {
        **_MEMORY_BOUND,
        "mm": [
            mm(128, 128, 64, 4),  # 64 KB fp16, 128 KB fp32
            mm(256, 256, 64, 8),  # 128 KB
            mm(128, 256, 64, 8),  # 96 KB
            mm(256, 128, 64, 8),  # 96 KB
            mm(64, 64, 64, 4),  # 32 KB: small or skinny problems
        ],
    },
}

# Options of upstream Triton's AMD backend, per kernel. waves_per_eu is an occupancy hint
# (0 = none); matrix_instr_nonkdim picks the 16x16 or 32x32 MFMA; kpack packs K for the
# MFMA loads (deprecated in newer Triton, and not used on gfx950 [?]).
COMPILER_OPTIONS: dict[str, dict[str, dict[str, object]]] = {
    "gfx90a": {"mm": {"matrix_instr_nonkdim": 16, "kpack": 1}},
    "gfx942": {"mm": {"waves_per_eu": 2, "matrix_instr_nonkdim": 16, "kpack": 2}},
    "gfx950": {"mm": {"waves_per_eu": 2, "matrix_instr_nonkdim": 16}},
}


def tuned_configs(arch: str) -> Mapping[str, Sequence[KernelConfig]]:
    return CONFIGS.get(arch, {})


def compiler_options(arch: str) -> Mapping[str, Mapping[str, object]]:
    return COMPILER_OPTIONS.get(arch, {})
