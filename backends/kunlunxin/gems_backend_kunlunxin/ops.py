"""Ops Kunlunxin leaves to ATen, and accepted deviations.

Each op is written as the ATen operator it is. Also published as failing, but not ATen
operators and so nothing to gate here: geglu, grouped_topk, moe_sum,
per_token_group_quant_fp8, reglu, scaled_softmax, swiglu, topk_softmax.
"""

from __future__ import annotations

from gems_core import Deviation, OpGate

_LEFT_TO_ATEN = "no Triton kernel for it on the XPU fork: ATen's own kernel serves it"
_PUBLISHED = "published as failing on Kunlunxin"

UNSUPPORTED_OPS: tuple[OpGate, ...] = (
    *(
        OpGate(op, reason=_LEFT_TO_ATEN)
        for op in (
            "cummin",
            "cumsum",
            "randperm",
            "sort",
            "topk",
            # torch.unique reaches ATen as one of these
            "_unique",
            "_unique2",
            "unique_dim",
        )
    ),
    *(
        OpGate(op, reason=_PUBLISHED)
        for op in (
            "acos",
            "conv1d",
            "masked_scatter",
            "masked_scatter_",
            "nll_loss2d",
            "nll_loss2d_forward",
        )
    ),
)

# The fork compiles float comparisons without NaN handling unless isOpenCmpNan is set
# (off by default [?]), so a NaN input need not propagate through max/min-style ops.
KNOWN_DEVIATIONS: tuple[Deviation, ...] = tuple(
    Deviation(
        op=op,
        kind="xfail",
        samples=("special",),
        reason="XPU fork: float comparisons ignore NaN unless isOpenCmpNan is set [?], so NaN "
        "inputs need not propagate",
    )
    for op in ("maximum", "minimum", "clamp", "amax", "amin", "max", "min")
)
