"""Products whose result has too few tiles to fill the chip, over a long K: split over K.

A weight gradient of a training step (``x^T @ grad``: 768 x 768 from 8192 tokens, say) has
36 result tiles of 128 x 128 for a chip of 132 compute units, so the tiled kernel of mm.py
leaves most of the chip idle while each program walks all of K. Here the K range is cut in
SPLIT_K slices: program (tile, slice) accumulates its slice in fp32 into a workspace of
SPLIT_K result-sized planes, and a second launch adds the planes in slice order
(deterministic) and applies alpha, beta and the bias as the tiled kernel's epilogue does.
The kernels are the decode product's (gemm_decode.py), with larger tiles and the split
chosen by this tunable rather than by the count of compute units.
SPLIT_K = 1 is mm's tiled kernel (with its own tuned tile), so the tuner of "mm_split_k"
chooses between splitting and not, per shape bucket, on the device itself; where nothing is
benchmarked the tiled kernel serves.
fp64 products keep the tiled kernel (which accumulates in fp64).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import triton

from .. import runtime
from ..contract import KernelConfig
from ..host_math import cdiv
from ..tuning import Tunable
from .gemm_common import _INT32_MAX, _bucket, _input_precision, _needs_int64, fits_shared_memory
from .gemm_decode import _REDUCE_BLOCK, _launch_decode, _launch_reduce


def _configs() -> list[KernelConfig]:
    tiles = [({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, 4, 3),
             ({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, 8, 3),
             ({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64}, 4, 4),
             ({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64}, 4, 4)]
    # first (taken where nothing is benchmarked): no split, the tiled kernel with its own choice
    plain = KernelConfig({**tiles[0][0], "SPLIT_K": 1}, num_warps=4, num_stages=3)
    return [plain] + [KernelConfig({**tile, "SPLIT_K": split}, num_warps=warps, num_stages=stages)
                      for split in (2, 4, 8) for tile, warps, stages in tiles]


MM_SPLIT_K = Tunable(
    "mm_split_k",
    params=("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K"),
    defaults=_configs(),
    description="mm/addmm with few result tiles and a long K: a BLOCK_M x BLOCK_N tile of one of "
    "SPLIT_K slices of K per program, the slices added by a second launch (SPLIT_K 1: mm's tiled kernel)",
)

#: the shortest K that is split
MIN_K = 256
#: the result tiles (of 128 x 128) under which a product is split, per compute unit
_TILES_PER_UNIT = 1


def applies(M: int, N: int, K: int, dtype: torch.dtype, device: torch.device) -> bool:
    """Whether an (M, K) @ (K, N) product of ``dtype`` that would take the tiled kernel is
    left to this one: 16-bit or fp32 operands, K of at least MIN_K, and fewer result tiles
    of 128 x 128 than the chip has compute units."""
    if dtype not in (torch.float16, torch.bfloat16, torch.float32) or K < MIN_K:
        return False
    tiles = cdiv(M, 128) * cdiv(N, 128)
    return tiles < _TILES_PER_UNIT * runtime.compute_units(device.type, device.index)


def launch(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, bias: torch.Tensor | None, alpha: Any,
           beta: Any, plain: Callable[..., None]) -> None:
    """out = alpha * (a @ b) + beta * bias (bias expanded to out's shape), split over K as the
    tuned config of the shape's bucket says; SPLIT_K 1 calls ``plain`` (mm's tiled kernel,
    same arguments) instead."""
    (M, K), N = a.shape, b.shape[1]
    tensors = (a, b, out) if bias is None else (a, b, out, bias)
    bias_arg = out if bias is None else bias  # a placeholder pointer when there is no bias
    scalars = (float(alpha), float(beta))
    precision = _input_precision(a.dtype)

    def run(config: KernelConfig, target: torch.Tensor) -> None:
        p = config.params
        block_k = p["BLOCK_K"]
        k_per_split = cdiv(cdiv(K, max(1, p["SPLIT_K"])), block_k) * block_k
        split = cdiv(K, k_per_split)
        if split == 1:
            plain(a, b, target, bias, alpha, beta)
            return
        int64 = _needs_int64(*tensors, target) or split * M * N > _INT32_MAX
        ws = torch.empty((split, M, N), dtype=torch.float32, device=a.device)
        tile = KernelConfig({key: p[key] for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K")}, num_warps=config.num_warps,
                            num_stages=config.num_stages)
        # the decode kernel's tile over one K slice, its partials summed by its reduction
        _launch_decode((cdiv(N, p["BLOCK_N"]), cdiv(M, p["BLOCK_M"]), split), a, b, target, bias_arg, ws, M, N, K,
                       k_per_split, *a.stride(), *b.stride(), *target.stride(), *bias_arg.stride(), *scalars,
                       config=tile, options=MM_SPLIT_K.options(), SPLIT=True, HAS_BIAS=bias is not None,
                       INT64=int64, INPUT_PRECISION=precision)
        _launch_reduce((cdiv(M * N, _REDUCE_BLOCK),), ws, target, bias_arg, M, N, split, *target.stride(),
                       *bias_arg.stride(), *scalars, options=MM_SPLIT_K.options(), BLOCK=_REDUCE_BLOCK,
                       HAS_BIAS=bias is not None, INT64=int64)

    def bench(config: KernelConfig) -> float:
        scratch = torch.empty_like(out)  # never the real output: it may be the bias itself
        return float(triton.testing.do_bench(lambda: run(config, scratch)))

    key = (str(a.dtype), _bucket(M), _bucket(N), _bucket(K))
    run(MM_SPLIT_K.choose(key, bench, fits_shared_memory(a.dtype)), out)
