"""Tuned configs and compiler options for Kunlunxin XPUs (XPU3: P800).

1-D tiles are preferred and no block exceeds 512 elements along an axis; ``num_warps=1``
and ``num_stages=1`` because the fork has neither warps nor Triton's software pipeliner.
The first config of a list is the one used where nothing is benchmarked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gems_core import KernelConfig
from gems_core.configs import mm, norm, pointwise, tile


_WARPS = _STAGES = 1  # the fork has neither warps nor a software pipeliner
CONFIGS: dict[str, list[KernelConfig]] = {
    "pointwise": [pointwise(512, _WARPS)],
    "mm": [
        mm(128, 128, 64, _WARPS, _STAGES),
        mm(256, 256, 64, _WARPS, _STAGES),
        mm(64, 64, 128, _WARPS, _STAGES),
    ],
    "reduction": [tile(1, 512, _WARPS), tile(4, 128, _WARPS)],
    "softmax": [tile(1, 512, _WARPS)],
    "norm": [norm(512, _WARPS)],
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
