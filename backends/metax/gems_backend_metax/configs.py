"""Tuned configs and compiler options for MetaX GPUs (one set for C500 and C550).

Warps are 64 lanes and a block holds at most 512 threads [?], so num_warps <= 8; no block
is wider than 2048 along an axis; the elementwise default block is 512. GEMM shared memory
per config is ``(BLOCK_M*BLOCK_K + BLOCK_K*BLOCK_N) * 2 bytes * num_stages`` <= 64 KB [?].
The first config of a list is the one used where nothing is benchmarked.
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
    "pointwise": [KernelConfig({"BLOCK_SIZE": 512}, num_warps=4, num_stages=1)],
    "mm": [
        _mm(128, 128, 32, 8, 2),  # 32 KB fp16, 64 KB fp32
        _mm(128, 256, 32, 8, 2),  # 48 KB
        _mm(256, 128, 32, 8, 2),  # 48 KB
        _mm(64, 128, 64, 4, 2),  # 48 KB
        _mm(64, 64, 64, 4, 2),  # 32 KB fp16, 64 KB fp32: small or skinny problems
    ],
    "reduction": [_tile(4, 256, 4), _tile(1, 2048, 8), _tile(16, 64, 4)],
    "softmax": [_tile(1, 1024, 4), _tile(1, 2048, 8), _tile(4, 256, 4)],
    "norm": [_row(1024, 4), _row(2048, 8), _row(256, 2)],
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
