"""Tuned configs for CoreX GPUs (one set for every ivcore generation until they differ).

Warps are 64 lanes, so 16 warps fill a 1024-thread block; the published GEMM tuning favours
num_warps=16 with one or two stages. GEMM shared memory per config is
``(BLOCK_M*BLOCK_K + BLOCK_K*BLOCK_N) * 2 bytes * num_stages``, within 64 KB [?]. The first
config of a list is the one used where nothing is benchmarked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gems_core import KernelConfig


def _mm(bm: int, bn: int, bk: int, warps: int, stages: int, group_m: int = 8) -> KernelConfig:
    params = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group_m}
    return KernelConfig(params, num_warps=warps, num_stages=stages)


def _tile(bm: int, bn: int, warps: int) -> KernelConfig:
    return KernelConfig({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=warps, num_stages=1)


def _row(bn: int, warps: int) -> KernelConfig:
    return KernelConfig({"BLOCK_N": bn}, num_warps=warps, num_stages=1)


CONFIGS: dict[str, list[KernelConfig]] = {
    "pointwise": [KernelConfig({"BLOCK_SIZE": 1024}, num_warps=4, num_stages=1)],
    "mm": [
        _mm(128, 128, 32, 16, 2),  # 32 KB fp16, 64 KB fp32
        _mm(128, 256, 32, 16, 2),  # 48 KB
        _mm(256, 128, 32, 16, 1),  # 24 KB
        _mm(128, 128, 64, 16, 1),  # 32 KB
        _mm(64, 64, 64, 8, 2),  # 32 KB: small or skinny problems
    ],
    "reduction": [_tile(4, 512, 4), _tile(1, 2048, 8), _tile(16, 128, 4)],
    "softmax": [_tile(1, 1024, 4), _tile(1, 4096, 16), _tile(4, 256, 4)],
    "norm": [_row(1024, 4), _row(4096, 16), _row(256, 2)],
}


def tuned_configs(arch: str) -> Mapping[str, Sequence[KernelConfig]]:
    return CONFIGS
