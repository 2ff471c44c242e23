"""Tuned configs per compute capability, for the core's tunable kernels.

The first config of each list is the one used where nothing is benchmarked (the interpreter);
the others are autotuned once per shape bucket on the device. GEMM shared memory per config
is ``(BLOCK_M*BLOCK_K + BLOCK_K*BLOCK_N) * bytes * num_stages``: every config fits 16-bit
operands in the arch's budget, and the first one fits fp32 operands too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gems_core import KernelConfig

from .device import arch_key


def _mm(bm: int, bn: int, bk: int, warps: int, stages: int, group_m: int = 8) -> KernelConfig:
    params = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group_m}
    return KernelConfig(params, num_warps=warps, num_stages=stages)


def _tile(bm: int, bn: int, warps: int, stages: int = 1) -> KernelConfig:
    return KernelConfig({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=warps, num_stages=stages)


def _row(bn: int, warps: int) -> KernelConfig:
    return KernelConfig({"BLOCK_N": bn}, num_warps=warps, num_stages=1)


# Memory-bound kernels: wide blocks, few stages; identical across generations but for block
# width (Hopper's bandwidth wants more bytes in flight per SM).
_AMPERE_MEMORY_BOUND: dict[str, list[KernelConfig]] = {
    "pointwise": [KernelConfig({"BLOCK_SIZE": 1024}, num_warps=4, num_stages=1)],
    "reduction": [_tile(4, 512, 4), _tile(1, 2048, 8), _tile(16, 128, 4)],
    "softmax": [_tile(1, 1024, 4), _tile(1, 4096, 8), _tile(4, 256, 4)],
    "norm": [_row(1024, 4), _row(4096, 8), _row(256, 2)],
}
_HOPPER_MEMORY_BOUND: dict[str, list[KernelConfig]] = {
    "pointwise": [KernelConfig({"BLOCK_SIZE": 2048}, num_warps=8, num_stages=1)],
    "reduction": [_tile(4, 1024, 8), _tile(1, 4096, 16), _tile(16, 128, 4)],
    "softmax": [_tile(1, 2048, 8), _tile(1, 8192, 16), _tile(4, 256, 4)],
    "norm": [_row(2048, 8), _row(8192, 16), _row(512, 4)],
}

CONFIGS: dict[str, dict[str, list[KernelConfig]]] = {
    # Ampere: cp.async pipelining, 128x128x32 the workhorse; 163 KB shared memory.
    "sm_80": {
        **_AMPERE_MEMORY_BOUND,
        "mm": [
            _mm(128, 128, 32, 4, 4),  # 64 KB fp16, 128 KB fp32
            _mm(128, 256, 32, 8, 3),  # 72 KB
            _mm(256, 128, 32, 8, 3),  # 72 KB
            _mm(128, 128, 64, 4, 3),  # 96 KB
            _mm(64, 128, 32, 4, 4),  # 48 KB
            _mm(64, 64, 32, 4, 5),  # 40 KB: small or skinny problems
        ],
    },
    # Ampere/Ada consumer and inference parts: same cores, 99 KB shared memory.
    "sm_86": {
        **_AMPERE_MEMORY_BOUND,
        "mm": [
            _mm(128, 128, 32, 4, 3),  # 48 KB fp16, 96 KB fp32
            _mm(128, 64, 32, 4, 4),  # 48 KB
            _mm(64, 128, 32, 4, 4),  # 48 KB
            _mm(64, 64, 32, 4, 4),  # 32 KB
        ],
    },
    # Hopper: wgmma wants 4 or 8 warps (one or two warp groups) and large tiles; 227 KB.
    "sm_90": {
        **_HOPPER_MEMORY_BOUND,
        "mm": [
            _mm(128, 128, 64, 8, 3),  # 96 KB fp16, 192 KB fp32
            _mm(128, 256, 64, 8, 3),  # 144 KB
            _mm(256, 128, 64, 8, 3),  # 144 KB
            _mm(128, 128, 64, 8, 4),  # 128 KB
            _mm(128, 128, 32, 4, 4),  # 64 KB
            _mm(64, 128, 64, 4, 4),  # 96 KB fp16, 192 KB fp32
            _mm(64, 64, 64, 4, 3),  # 48 KB: small or skinny problems
        ],
    },
}

# Archs without a table of their own borrow the closest one with the same or a smaller
# shared memory budget; archs older than Ampere keep the core's defaults.
CONFIG_SET = {
    "sm_80": "sm_80",
    "sm_87": "sm_80",
    "sm_86": "sm_86",
    "sm_89": "sm_86",
    "sm_120": "sm_86",
    "sm_121": "sm_86",
    "sm_90": "sm_90",
    "sm_100": "sm_90",
    "sm_103": "sm_90",
}


def tuned_configs(arch: str) -> Mapping[str, Sequence[KernelConfig]]:
    table = CONFIG_SET.get(arch_key(arch))
    return CONFIGS[table] if table else {}
