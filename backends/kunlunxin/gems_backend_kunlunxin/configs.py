"""Tuned configs and compiler options for Kunlunxin XPUs (XPU3: P800).

1-D tiles are preferred and no block exceeds 512 elements along an axis; ``num_warps=1``
and ``num_stages=1`` because the fork has neither warps nor Triton's software pipeliner.
The first config of a list is the one used where nothing is benchmarked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gems_core import KernelConfig


def _config(**params: int) -> KernelConfig:
    return KernelConfig(params, num_warps=1, num_stages=1)


CONFIGS: dict[str, list[KernelConfig]] = {
    "pointwise": [_config(BLOCK_SIZE=512)],
    "mm": [
        _config(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8),
        _config(BLOCK_M=256, BLOCK_N=256, BLOCK_K=64, GROUP_M=8),
        _config(BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, GROUP_M=8),
    ],
    "reduction": [_config(BLOCK_M=1, BLOCK_N=512), _config(BLOCK_M=4, BLOCK_N=128)],
    "softmax": [_config(BLOCK_M=1, BLOCK_N=512)],
    "norm": [_config(BLOCK_N=512)],
}

# Options of the XPU fork. buffer_size_limit is each core's local buffer in elements (512,
# 2048 or 4096); unroll_num the unroll factor of its loop control; isClose* switch one of
# its passes off. The values are a starting point, not yet confirmed on the chip [?]:
# larger buffers for streaming kernels, the fork's loop-unroll control off where a kernel
# loops over a row itself.
COMPILER_OPTIONS: dict[str, dict[str, object]] = {
    "pointwise": {"buffer_size_limit": 2048, "unroll_num": 4},  # [?]
    "mm": {"buffer_size_limit": 4096},  # [?]
    "reduction": {"buffer_size_limit": 512, "isCloseUnrollControl": True},  # [?]
    "softmax": {"buffer_size_limit": 512, "isCloseUnrollControl": True},  # [?]
    "norm": {"buffer_size_limit": 512, "isCloseUnrollControl": True},  # [?]
}


def tuned_configs(arch: str) -> Mapping[str, Sequence[KernelConfig]]:
    return CONFIGS


def compiler_options(arch: str) -> Mapping[str, Mapping[str, object]]:
    return COMPILER_OPTIONS
