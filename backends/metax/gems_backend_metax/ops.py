"""Ops MetaX leaves to ATen.

Published as failing on the chip (FlagGems 5.0.2 vendor lists), each written as the ATen
operator it is. Also published, but not ATen operators and so nothing to gate here:
cutlass_scaled_mm, geglu, grouped_topk, per_token_group_quant_fp8, reglu, scaled_softmax,
swiglu, topk_softmax.
"""

from __future__ import annotations

from gems_core import OpGate

_PUBLISHED = "published as failing on MetaX"

UNSUPPORTED_OPS: tuple[OpGate, ...] = tuple(
    OpGate(op, reason=_PUBLISHED)
    for op in (
        "acos",
        "copy_",
        "_flash_attention_forward",  # flash attention forward, varlen included
        "_scaled_dot_product_flash_attention",  # reaches the same forward kernel
        "masked_scatter",
        "masked_scatter_",
        "nll_loss2d",
        "nll_loss2d_forward",
        "std",
        "trace",
        "_upsample_bicubic2d_aa",
        "upsample_nearest1d",
    )
)
