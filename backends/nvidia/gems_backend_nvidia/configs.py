"""Tuned configs per compute capability, for the core's tunable kernels.

The first config of each list is the one used where nothing is benchmarked (the interpreter);
the others are autotuned once per shape bucket on the device. GEMM shared memory per config
is ``(BLOCK_M*BLOCK_K + BLOCK_K*BLOCK_N) * bytes * num_stages``: every config fits 16-bit
operands in the arch's budget, and the first one fits fp32 operands too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gems_core import KernelConfig
from gems_core.configs import attention_decode, gemv, mm, mm_decode, pointwise, row, tile, topk_chunk

from .device import arch_key


# Memory-bound kernels: wide blocks, few stages; identical across generations but for block
# width (Hopper's bandwidth wants more bytes in flight per SM).
_AMPERE_MEMORY_BOUND: dict[str, list[KernelConfig]] = {
    "pointwise": [pointwise(1024, 4)],
    "reduction": [tile(4, 512, 4), tile(1, 2048, 8), tile(16, 128, 4)],
    "softmax": [tile(1, 1024, 4), tile(1, 4096, 8), tile(4, 256, 4)],
    "norm": [row(1024, 4), row(4096, 8), row(256, 2)],
}
# Hopper numbers from benchmarks/sweep.py. Pointwise (H100): 8 warps with 16 bytes of the
# widest operand a thread (8 bf16 or 4 fp32 elements): unary, binary, broadcast and cast ops
# 1.00-1.03x ATen, where() on fp32 1.01x and addcmul 1.00x. Summing the bytes over the inputs
# instead (2 fp32 elements of a binary op a thread) gave binary ops the same 1.00-1.01x but
# where() 0.92x and addcmul 0.97x; 8 bytes a thread cost unary ops 2-7 %. Cache hints
# (evict-first loads, streaming or write-through stores, .cg), persistent loops and TMA blocks
# were no faster.
# Reductions along memory prefer 8x512 or 2x2048 tiles, reductions over a leading dim
# (contiguous kept axis) tall, narrow tiles.
_HOPPER_MEMORY_BOUND: dict[str, list[KernelConfig]] = {
    "pointwise": [pointwise(1024, 8, THREAD_BYTES=16)],
    "reduction": [
        tile(8, 512, 8), tile(2, 2048, 8), tile(1, 1024, 4),
        tile(64, 64, 8), tile(128, 32, 8), tile(32, 64, 4),
    ],
    "softmax": [tile(1, 2048, 8), tile(1, 8192, 16), tile(4, 256, 4)],
    "norm": [row(2048, 8), row(8192, 16), row(512, 4)],
}

# Decode-shaped GEMMs (M <= 64; split-K fills the chip) and GEMVs stream the weight once:
# memory-bound, so tiles are thin in M and deep in K with several stages in flight. A Linear
# weight (K-contiguous) and a row-major one (N-contiguous) are tuned separately.
_AMPERE_DECODE: dict[str, list[KernelConfig]] = {
    "mm_decode": [
        mm_decode(16, 64, 128, 4, 4),  # 80 KB fp16, 160 KB fp32
        mm_decode(16, 128, 128, 4, 3),  # 108 KB
        mm_decode(16, 128, 64, 4, 4),  # 72 KB
        mm_decode(32, 64, 128, 4, 4),  # 96 KB
        mm_decode(64, 64, 64, 4, 4),  # 64 KB: 33 to 64 rows
        mm_decode(16, 256, 64, 8, 3),  # 102 KB
    ],
    "gemv": [
        gemv(16, 64, 4),
        gemv(4, 512, 4),
        gemv(8, 256, 4),
        gemv(16, 256, 8),
        gemv(128, 32, 4),
        gemv(256, 16, 8),
    ],
}
_HOPPER_DECODE: dict[str, list[KernelConfig]] = {
    "mm_decode": [
        mm_decode(16, 64, 128, 4, 4),  # 80 KB fp16, 160 KB fp32
        mm_decode(16, 128, 128, 4, 4),  # 144 KB
        mm_decode(16, 256, 64, 8, 4),  # 136 KB
        mm_decode(32, 128, 128, 4, 3),  # 120 KB
        mm_decode(64, 128, 64, 4, 4),  # 96 KB: 33 to 64 rows
        mm_decode(16, 128, 256, 8, 3),  # 216 KB: few, deep slices
        mm_decode(16, 64, 256, 4, 4),  # 160 KB
        mm_decode(16, 32, 512, 4, 3),  # 144 KB: 16x6144x4096 0.94x, the best other 0.91x (H200)
    ],
    "gemv": [
        gemv(16, 128, 4),
        gemv(4, 512, 4),
        gemv(8, 512, 8),
        gemv(16, 256, 8),
        gemv(256, 32, 8),
        gemv(512, 16, 8),
    ],
}

# Attention. Shared memory is the Q tile plus num_stages buffers of a K and a V tile (the
# sizes below: head dim 128, 16-bit, no mask; the compile check measures the same); the
# attention op tries only the configs that fit the chip for the call's dtype, head dims and
# mask (fp32, head dim 256 and masks need more). Prefill: 128 query rows over two warp
# groups, keys 64 or 128 at a time in 2-4 stages; 64-row tiles for short sequences and as
# the fallback.
#
# Decode (a GQA group's rows padded to 16, so mma.sync rather than wgmma) is memory-bound:
# what is tuned is the bytes each program has in flight against how many programs an SM
# holds. Its pipeliner keeps num_stages - 1 K/V buffers (num_stages 2: the next block is
# loaded only after the current one is used, no overlap within a program), so shared
# memory is 4 KB (Q) + (stages - 1) x BLOCK_N x 512 B + the probabilities (sm_90 compiles,
# bf16, head dim 128); the split count follows from the programs an SM holds (shared
# memory, ~20 warps of registers), so that the grid fills the chip once. 4-warp programs
# split a 16-row score tile by key columns (cross-warp row max/sum each block); 1- and
# 2-warp programs keep those in a warp but use 140-250 registers a thread.
_HOPPER_ATTENTION: dict[str, list[KernelConfig]] = {
    "attention": [
        tile(128, 64, 8, 3),  # 32 + 3 x 32 = 128 KB
        tile(128, 128, 8, 3),  # 32 + 3 x 64 = 224 KB
        tile(128, 64, 8, 4),  # 160 KB
        tile(128, 128, 8, 2),  # 160 KB
        tile(64, 64, 4, 3),  # 112 KB: short sequences (more programs)
        tile(64, 32, 4, 2),  # 48 KB: fp32 (96 KB) and head dim 256
    ],
    "attention_decode": [
        attention_decode(64, 4, 3),  # 70 KB: 3 an SM, one block in flight while one is used
        attention_decode(64, 4, 2),  # 38 KB: 5 an SM, no overlap within a program
        attention_decode(32, 4, 3),  # 37 KB: 5 an SM
        attention_decode(32, 4, 4),  # 53 KB: 4 an SM
        attention_decode(64, 4, 4),  # 102 KB: 2 an SM, two blocks in flight
        attention_decode(128, 4, 2),  # 72 KB: 3 an SM, few long steps
        attention_decode(64, 8, 3),  # 70 KB: 2 an SM (warps)
        attention_decode(128, 8, 3),  # 136 KB: 1 an SM
        attention_decode(32, 2, 3),  # 37 KB: 5 an SM, 2 warps
        attention_decode(16, 1, 4),  # 28 KB: 7 an SM, 1 warp
        attention_decode(32, 1, 3),  # 36 KB: 6 an SM, 1 warp
        # one split, no merge: for short KV, where a split's partial store, counter and
        # merge cost more than the programs they add (KV 512, batch 8, H100: 15.7 us
        # against 20.3 for the same tile over 4 splits; cuDNN runs this shape one
        # program per key/value head as well)
        attention_decode(128, 4, 3, SPLITS=1),  # 136 KB: 1 an SM
        attention_decode(64, 4, 3, SPLITS=1),  # 70 KB
        # the same, a program's 4 query rows padded to 64 so that both products are wgmma
        # reading K and V from shared memory (no register copy of the tiles): on the H100
        # at KV 512, 64 keys over 4 stages ran 14.5 us against 15.2 for the 16-row 128-key
        # tiles (on the H200 13.1-13.2 against 12.7-13.0: the tuner picks per device)
        attention_decode(64, 4, 4, SPLITS=1, ROWS=64),  # 16 + 4 x 32 = 144 KB
        attention_decode(64, 4, 3, SPLITS=1, ROWS=64),  # 112 KB
    ],
}

# Convolution as implicit GEMM (the "conv" tunable has mm's parameters, "conv_weight_grad"
# mm_decode's, "conv_depthwise" tile's). Its operand tiles are gathered through pointers (no
# TMA: rows of a tile lie at per-tap offsets), so the pipeline is cp.async into wgmma: two
# warp groups over 128x128 tiles, K in 64-channel steps (one step a tap for ResNet's 64
# channels), 3-4 stages; 64-wide tiles for layers with few output channels or positions.
# The weight gradient's K runs over N x positions (split to fill the chip); depthwise is
# memory-bound: positions x channels tiles, channels contiguous in channels-last.
_HOPPER_CONV: dict[str, list[KernelConfig]] = {
    "conv": [
        mm(128, 128, 64, 8, 3),  # 96 KB bf16, 192 KB fp32
        mm(128, 128, 64, 8, 4),  # 128 KB
        mm(128, 256, 64, 8, 3),  # 144 KB: wide layers (256+ output channels)
        mm(256, 128, 64, 8, 3),  # 144 KB: many positions, few channels
        mm(128, 128, 32, 4, 4),  # 64 KB
        mm(128, 64, 64, 4, 4),  # 96 KB: 64 output channels
        mm(64, 128, 64, 4, 4),  # 96 KB
        mm(64, 64, 64, 4, 3),  # 48 KB: small layers
    ],
    "conv_weight_grad": [
        mm_decode(128, 128, 64, 8, 3),  # 96 KB bf16, 192 KB fp32
        mm_decode(128, 128, 64, 8, 4),  # 128 KB
        mm_decode(128, 64, 64, 4, 4),  # 96 KB
        mm_decode(64, 128, 64, 4, 4),  # 96 KB
        mm_decode(64, 64, 64, 4, 3),  # 48 KB
    ],
    "conv_depthwise": [tile(32, 64, 4), tile(64, 64, 4), tile(16, 128, 4), tile(8, 256, 8), tile(128, 32, 4)],
}

CONFIGS: dict[str, dict[str, list[KernelConfig]]] = {
    # Ampere: cp.async pipelining, 128x128x32 the workhorse; 163 KB shared memory.
    "sm_80": {
        **_AMPERE_MEMORY_BOUND,
        "mm": [
            mm(128, 128, 32, 4, 4),  # 64 KB fp16, 128 KB fp32
            mm(128, 256, 32, 8, 3),  # 72 KB
            mm(256, 128, 32, 8, 3),  # 72 KB
            mm(128, 128, 64, 4, 3),  # 96 KB
            mm(64, 128, 32, 4, 4),  # 48 KB
            mm(64, 64, 32, 4, 5),  # 40 KB: small or skinny problems
        ],
        **_AMPERE_DECODE,
    },
    # Ampere/Ada consumer and inference parts: same cores, 99 KB shared memory.
    "sm_86": {
        **_AMPERE_MEMORY_BOUND,
        "mm": [
            mm(128, 128, 32, 4, 3),  # 48 KB fp16, 96 KB fp32
            mm(128, 64, 32, 4, 4),  # 48 KB
            mm(64, 128, 32, 4, 4),  # 48 KB
            mm(64, 64, 32, 4, 4),  # 32 KB
        ],
    },
    # Hopper: wgmma wants 4 or 8 warps (one or two warp groups) and large tiles; 227 KB.
    "sm_90": {
        **_HOPPER_MEMORY_BOUND,
        "mm": [
            mm(128, 128, 64, 8, 3),  # 96 KB fp16, 192 KB fp32
            mm(128, 256, 64, 8, 3),  # 144 KB
            mm(256, 128, 64, 8, 3),  # 144 KB
            mm(128, 128, 64, 8, 4),  # 128 KB
            mm(128, 128, 32, 4, 4),  # 64 KB
            mm(64, 128, 64, 4, 4),  # 96 KB fp16, 192 KB fp32
            mm(64, 64, 64, 4, 3),  # 48 KB: small or skinny problems
        ],
        **_HOPPER_DECODE,
        **_HOPPER_ATTENTION,
        **_HOPPER_CONV,
        # topk of rows longer than 8192 (LLM sampling over a vocabulary), stage 1: one program
        # selects the best k of CHUNK entries, one count over the chunk per bisection step;
        # 16 entries a thread (~80 registers) or 32 (~170: fewer programs resident)
        "topk_chunk": [
            topk_chunk(4096, 8),
            topk_chunk(2048, 4),
            topk_chunk(4096, 4),
            topk_chunk(8192, 8),
        ],
        # the persistent TMA kernel (large fp16/bf16 products): 8 warps (two warp groups)
        # over large tiles; shared memory is the pipeline's stages plus the C tile staged
        # for its bulk store (16-bit)
        "mm_tma": [
            mm(128, 256, 64, 8, 3),  # 144 + 64 KB
            mm(128, 128, 64, 8, 4),  # 128 + 32 KB
            mm(256, 128, 64, 8, 3),  # 144 + 64 KB
            mm(128, 128, 128, 8, 3),  # 192 + 32 KB
            mm(128, 128, 64, 8, 3),  # 96 + 32 KB
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
