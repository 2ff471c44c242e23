"""Typed constructors of configs for the core's tunable kernels, one per tunable, for backend
plugins' ``gems_tuned_configs``::

    from gems_core import configs

    {"mm": [configs.mm(128, 128, 32, num_warps=4)],
     "softmax": [configs.softmax(BLOCK_M=1, BLOCK_N=1024, num_warps=4)]}

Each takes exactly the tunable's parameters (a misspelt one is a ``TypeError`` where the
plugin builds its table), then ``num_warps``, ``num_stages`` and ``options``, the config's own
compiler options. Values are checked to be positive integers and ``num_warps``
a power of two; the descriptor's limits are checked when gems loads the backend. Tunables
sharing a parameter set share a constructor (``reduction``, ``softmax``, ``attention``... are
:func:`tile`). ``python -m gems_core info --verbose`` describes each tunable.
"""

from __future__ import annotations

from collections.abc import Mapping

from .contract import KernelConfig

#: a config's own compiler options (``KernelConfig.options``)
Options = Mapping[str, object] | None

__all__ = [
    "attention", "attention_backward", "attention_decode", "batch_norm", "bincount", "block", "compact", "conv",
    "conv_depthwise", "conv_tma", "conv_tma_weight_grad", "conv_weight_grad", "factory",
    "gather_rows", "gemv", "grouped_mm", "isin", "mm", "mm_decode", "mm_tma", "norm", "padding", "padding_backward",
    "pointwise", "pool", "reduction", "resample", "resample_aa", "resample_backward", "row", "scaled_mm",
    "softmax", "strided_copy", "tile", "topk", "topk_chunk", "triangular", "unique",
]


def _config(params: dict[str, int | None], num_warps: int, num_stages: int,
            options: Options) -> KernelConfig:
    kept = {name: value for name, value in params.items() if value is not None}
    for name, value in {**kept, "num_stages": num_stages}.items():
        if type(value) is not int or value <= 0:
            raise ValueError(f"{name}={value!r} must be a positive integer")
    if type(num_warps) is not int or num_warps <= 0 or num_warps & (num_warps - 1):
        raise ValueError(f"num_warps={num_warps!r} must be a power of two")
    return KernelConfig(kept, num_warps=num_warps, num_stages=num_stages, options=dict(options or {}))


def mm(BLOCK_M: int, BLOCK_N: int, BLOCK_K: int, num_warps: int = 4, num_stages: int = 2, GROUP_M: int = 8,
       options: Options = None) -> KernelConfig:
    """A GEMM tile (``mm``, ``mm_tma``): BLOCK_M x BLOCK_N outputs a program, K in steps of
    BLOCK_K, programs grouped GROUP_M rows of tiles at a time for L2 reuse."""
    params = {"BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N, "BLOCK_K": BLOCK_K, "GROUP_M": GROUP_M}
    return _config(params, num_warps, num_stages, options)


def mm_decode(BLOCK_M: int, BLOCK_N: int, BLOCK_K: int, num_warps: int = 4, num_stages: int = 2,
              options: Options = None) -> KernelConfig:
    """A decode-shaped GEMM tile (M <= 64, split-K)."""
    params = {"BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N, "BLOCK_K": BLOCK_K}
    return _config(params, num_warps, num_stages, options)


def mm_split_k(BLOCK_M: int, BLOCK_N: int, BLOCK_K: int, SPLIT_K: int, num_warps: int = 4, num_stages: int = 3,
               options: Options = None) -> KernelConfig:
    """A GEMM tile over one of SPLIT_K slices of K, for products with few result tiles
    (SPLIT_K 1: mm's tiled kernel, with its own tile)."""
    params = {"BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N, "BLOCK_K": BLOCK_K, "SPLIT_K": SPLIT_K}
    return _config(params, num_warps, num_stages, options)


def gemv(BLOCK_N: int, BLOCK_K: int,
         num_warps: int = 4, num_stages: int = 2, options: Options = None) -> KernelConfig:
    """A matrix-vector tile: BLOCK_N outputs a program, K in steps of BLOCK_K."""
    return _config({"BLOCK_N": BLOCK_N, "BLOCK_K": BLOCK_K}, num_warps, num_stages, options)


def scaled_mm(BLOCK_M: int, BLOCK_N: int, BLOCK_K: int, num_warps: int = 4, num_stages: int = 3,
              options: Options = None) -> KernelConfig:
    """A float8 GEMM tile (``scaled_mm``): BLOCK_M x BLOCK_N outputs a program, K in steps of
    BLOCK_K."""
    return _config({"BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N, "BLOCK_K": BLOCK_K}, num_warps, num_stages, options)


def grouped_mm(BLOCK_M: int, BLOCK_N: int, BLOCK_K: int, num_warps: int = 4, num_stages: int = 3,
               options: Options = None) -> KernelConfig:
    """A grouped GEMM tile (``_grouped_mm``, one group's rows or columns a program): BLOCK_M x
    BLOCK_N outputs, K in steps of BLOCK_K."""
    return _config({"BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N, "BLOCK_K": BLOCK_K}, num_warps, num_stages, options)


def resample_aa(BLOCK_L: int, BLOCK_I: int, num_warps: int = 4, num_stages: int = 1,
                options: Options = None) -> KernelConfig:
    """One window pass of antialiased resampling: BLOCK_L coordinates of the resampled dim x
    BLOCK_I of the dim after it a program."""
    return _config({"BLOCK_L": BLOCK_L, "BLOCK_I": BLOCK_I}, num_warps, num_stages, options)


def tile(BLOCK_M: int, BLOCK_N: int,
         num_warps: int = 4, num_stages: int = 1, options: Options = None) -> KernelConfig:
    """A 2-D tile of BLOCK_M rows x BLOCK_N columns (``reduction``, ``softmax``, ``triangular``;
    ``attention`` and ``attention_backward``: query rows x keys a step; ``pool``: positions x
    channels; ``batch_norm``: rows x the contiguous columns, channels or positions; ``padding``,
    ``resample`` and their backward: rows x channels (channels_last) or columns)."""
    return _config({"BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N}, num_warps, num_stages, options)


def row(BLOCK_N: int, num_warps: int = 4, num_stages: int = 1, options: Options = None) -> KernelConfig:
    """One row a program, BLOCK_N columns a step (``norm``)."""
    return _config({"BLOCK_N": BLOCK_N}, num_warps, num_stages, options)


def block(BLOCK_SIZE: int, num_warps: int = 4, num_stages: int = 1, options: Options = None) -> KernelConfig:
    """BLOCK_SIZE elements a program (``compact``, ``factory``, ``gather_rows``,
    ``strided_copy``, ``unique``)."""
    return _config({"BLOCK_SIZE": BLOCK_SIZE}, num_warps, num_stages, options)


def pointwise(BLOCK_SIZE: int, num_warps: int = 4, num_stages: int = 1, THREAD_BYTES: int | None = None,
              options: Options = None) -> KernelConfig:
    """Every generated elementwise kernel: BLOCK_SIZE elements a program or, with
    THREAD_BYTES, as many as give each thread that many bytes to load."""
    return _config({"BLOCK_SIZE": BLOCK_SIZE, "THREAD_BYTES": THREAD_BYTES}, num_warps, num_stages, options)


def attention_decode(BLOCK_N: int, num_warps: int = 4, num_stages: int = 2, SPLITS: int | None = None,
                     ROWS: int | None = None, options: Options = None) -> KernelConfig:
    """Decode attention: BLOCK_N keys a step; SPLITS and ROWS fix the split count and the
    padded query rows (left out, the kernel sizes them)."""
    return _config({"BLOCK_N": BLOCK_N, "SPLITS": SPLITS, "ROWS": ROWS}, num_warps, num_stages, options)


def topk_chunk(CHUNK: int, num_warps: int = 4, num_stages: int = 1, options: Options = None) -> KernelConfig:
    """The first stage of topk over long rows: the best k of CHUNK entries a program."""
    return _config({"CHUNK": CHUNK}, num_warps, num_stages, options)


def topk(num_warps: int = 4, num_stages: int = 1, options: Options = None) -> KernelConfig:
    """topk over rows that fit one program: warps and stages only."""
    return _config({}, num_warps, num_stages, options)


def conv_tma(TILE_H: int, TILE_W: int, BLOCK_N: int, BLOCK_K: int, num_warps: int = 4, num_stages: int = 3,
             options: Options = None) -> KernelConfig:
    """A convolution over tensor descriptors: TILE_H x TILE_W output positions x BLOCK_N
    channels a program, K in BLOCK_K channel slices (TILE_H * TILE_W a power of two)."""
    return _config({"TILE_H": TILE_H, "TILE_W": TILE_W, "BLOCK_N": BLOCK_N, "BLOCK_K": BLOCK_K}, num_warps,
                   num_stages, options)


def conv_tma_weight_grad(TILE_H: int, TILE_W: int, BLOCK_M: int, BLOCK_N: int, num_warps: int = 4,
                         num_stages: int = 3, options: Options = None) -> KernelConfig:
    """The weight gradient over tensor descriptors: BLOCK_M output x BLOCK_N input channels of
    one tap a program, positions in TILE_H x TILE_W boxes."""
    return _config({"TILE_H": TILE_H, "TILE_W": TILE_W, "BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N}, num_warps,
                   num_stages, options)


mm_tma = conv = mm
conv_weight_grad = mm_decode
conv_depthwise = tile
reduction = softmax = triangular = attention = attention_backward = pool = tile
batch_norm = tile
norm = row
compact = factory = gather_rows = scatter_gather = strided_copy = unique = bincount = isin = block
padding = padding_backward = resample = resample_backward = tile
