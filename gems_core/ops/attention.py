"""scaled_dot_product_attention: flash attention forward for prefill
(:mod:`.attention_prefill`), a split-key kernel for decoding (:mod:`.attention_decode`), what
both share (:mod:`.attention_common`), and the backward in :mod:`.attention_backward`.

    O = softmax(scale * Q K^T + mask) V

A call of at most 16 queries a head without a causal mask takes the decode path, any other
the prefill path (:func:`_forward_launch`). Grouped-query attention (``enable_gqa``) maps
query head ``h`` to key/value head ``h // group`` in the kernels; nothing is repeated in
memory. Causal masking is top-left aligned, as in ATen: query ``i`` attends keys ``j <= i``
for any L and S. A mask is read in place through its broadcast strides. A row that attends
nothing gives zeros (and zero gradients), as ATen's.

Configs. Three tunables: "attention" (the prefill kernel: BLOCK_M, BLOCK_N, warps,
stages), "attention_decode" (BLOCK_N, warps, stages; the split count follows from the
grid) and "attention_backward" (its own BLOCK_M and BLOCK_N: the backward holds more tiles
than the forward, and Hopper's large forward tiles do not suit it). Each is autotuned per
shape bucket on a device; a config whose tiles do not fit the chip's shared memory for the
call's dtype, head dims and mask is not tried (:func:`.attention_common._fits`,
:func:`_fits_backward`).

``scaled_dot_product_attention`` is a composite in ATen, so it is registered on the Autograd
key and brings its own backward. fp64, ranks other than 3 and 4, broadcast batch dims, a
mask that needs a gradient and a dropout probability outside (0, 1) are left to ATen.

Dropout (``dropout_p``) runs in the prefill kernel and both backward kernels: each draws,
by Philox from the device's default generator, whether probability (i, j) of a (batch,
head) is kept, from its position alone (:func:`.attention_backward.dropout_keep`), so the
backward sees the forward's mask without storing it. A row's softmax sum counts the dropped
probabilities, the output not, scaled by 1 / (1 - p); ``delta = rowsum(dO * O)`` holds for
the dropped probabilities as for the plain ones. The mask is gems' own draw: ATen's kernels
keep other elements for the same seed (as gems' ``native_dropout`` does).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch
from torch.autograd.function import once_differentiable

from .. import native, runtime
from ..contract import KernelConfig
from ..host_math import cdiv
from ..launch_cache import recording
from ..registry import aten_op
from ..tuning import Tunable
from .attention_backward import LOG2E, MASK_ADD, MASK_BOOL, MASK_NONE, launch_backward
from .attention_common import _bucket, _head_blocks, _prepare, _served
from .attention_decode import _DECODE_MAX_LENGTH, DecodePlan, _decode_launch, _decode_plans, _plan_key
from .attention_prefill import _prefill_launch
from .random import philox_state
from .reduction import bench_ms

ATTENTION_BACKWARD = Tunable(
    "attention_backward",
    params=("BLOCK_M", "BLOCK_N"),
    defaults=[
        KernelConfig({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=4, num_stages=2),
        KernelConfig({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=2),
        KernelConfig({"BLOCK_M": 64, "BLOCK_N": 32}, num_warps=4, num_stages=3),
        # float32 in IEEE precision (see _fits_backward)
        KernelConfig({"BLOCK_M": 16, "BLOCK_N": 64}, num_warps=8, num_stages=1),
        KernelConfig({"BLOCK_M": 32, "BLOCK_N": 32}, num_warps=8, num_stages=1),
        KernelConfig({"BLOCK_M": 16, "BLOCK_N": 32}, num_warps=4, num_stages=1),
    ],
    description="attention backward: the dK/dV programs own BLOCK_N keys and walk the queries "
    "in BLOCK_M steps, the dQ programs own BLOCK_M queries and walk the keys in BLOCK_N steps",
)


#: the largest BLOCK_M x BLOCK_N of a float32 backward in IEEE precision, and the smallest of
#: any other: IEEE float32 products run on FMA units, where each thread holds its rows' and
#: columns' whole K slice of both operands in registers. On sm_90 the dK/dV kernel's
#: 64 x 64 tiles (head dim 64) spill 13 KB a thread to local memory (7 ms a call, 35 times
#: its share of the work); 16 x 64 and 32 x 32 spill nothing. Tensor-core dtypes keep the
#: large tiles.
_FMA_TILE = 1024


def _fits_backward(dtype: torch.dtype, blocks: dict[str, Any], masked: bool) -> Callable[[KernelConfig], bool]:
    """:func:`.attention_common._fits` for the backward's two kernels. On NVIDIA the dQ kernel keeps its Q and
    dO tiles and ``num_stages`` K/V buffers, the dK/dV kernel up to ``num_stages`` buffers of
    its Q, O and dO tiles (the compile check on sm_80 and sm_90: exact for dQ in 16 bits,
    above both otherwise); on AMD both fit where the forward's tiles do. IEEE float32 takes
    the small tiles only, other dtypes the large ones (:data:`_FMA_TILE`)."""
    size, block_d, block_dv = dtype.itemsize, blocks["BLOCK_D"], blocks["BLOCK_DV"]
    fma = blocks["INPUT_PRECISION"] == "ieee"

    def admit(config: KernelConfig) -> bool:
        rt = runtime.current()
        block_m, block_n, stages = config.params["BLOCK_M"], config.params["BLOCK_N"], config.num_stages
        if (block_m * block_n <= _FMA_TILE) != fma:
            return False
        if rt.limits.pipelining == "stream":
            buffers = max(1, stages - 1)
            tiles = buffers * block_n * (block_d + block_dv) + block_m * block_n
        else:
            buffers = max(1, stages)
            dq = (block_m + buffers * block_n) * (block_d + block_dv)
            tiles = max(dq, buffers * block_m * (block_d + 2 * block_dv))
        tiles += buffers * block_m * block_n if masked else 0
        return tiles * size <= rt.limits.shared_memory_per_block

    return admit


def _native_recording() -> bool:
    """Whether the native dispatch layer records this call (:mod:`gems_core.native`)."""
    return recording.native is not None


def _dropout_draw(q: torch.Tensor, k: torch.Tensor, dropout_p: float) -> tuple[float, tuple[int, ...]] | None:
    """(p, the Philox state) of a call's dropout, its counters (cdiv(S, 4) a query row) taken
    from the device's default generator; None without dropout."""
    if dropout_p <= 0:
        return None
    (batch, heads, length, _), keys = q.shape, k.shape[2]
    return float(dropout_p), philox_state(q.device, batch * heads * length * cdiv(keys, 4), None)


def _forward_launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, mask_kind: int,
                    causal: bool, scale: float, need_lse: bool = True,
                    dropout: tuple[float, tuple[int, ...]] | None = None,
                    ) -> tuple[torch.Tensor, torch.Tensor | None, DecodePlan | None]:
    """(out, lse, decode plan) of attention over (B, H, L, D) queries; ``mask`` is a
    (B, H, L, S) view or a placeholder when ``mask_kind`` is MASK_NONE. The decode path
    writes the lse only if ``need_lse`` (None otherwise) and returns its plan; the prefill
    path, which takes every call with ``dropout`` (:func:`_dropout_draw`), gives no plan."""
    (batch, heads, length, _), value_dim = q.shape, v.shape[-1]
    # ATen's layout: (B, L, H, DV) memory seen as (B, H, L, DV)
    out = torch.empty((batch, length, heads, value_dim), dtype=q.dtype, device=q.device).transpose(1, 2)
    decode = length <= _DECODE_MAX_LENGTH and not causal and dropout is None
    lse = torch.empty((batch * heads, length), dtype=torch.float32, device=q.device) if need_lse or not decode else None
    blocks = _head_blocks(q, v)
    exact = blocks["BLOCK_D"] == q.shape[-1] and blocks["BLOCK_DV"] == value_dim
    if scale < 0:  # the kernels take |scale|: the row max of the scaled scores is then the scaled max
        q = q.neg()
    qk_scale = abs(scale) * LOG2E
    units = runtime.compute_units(q.device.type, q.device.index)
    if decode:
        plan = _decode_launch(q, k, v, mask, mask_kind, qk_scale, out, lse, {**blocks, "HEAD_EXACT": exact}, units)
        return out, lse, plan
    _prefill_launch(q, k, v, mask, mask_kind, causal, qk_scale, out, lse, blocks, exact, units, dropout)
    return out, lse, None


def _backward_launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, out: torch.Tensor,
                     grad: torch.Tensor, lse: torch.Tensor, mask_kind: int, causal: bool, scale: float,
                     dropout: tuple[float, tuple[int, ...]] | None = None,
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of the forward that gave ``out`` and ``lse``, on the tuned config."""
    blocks = _head_blocks(q, v)
    options = ATTENTION_BACKWARD.options()

    def run(config: KernelConfig) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return launch_backward(q, k, v, mask, out, grad, lse, scale, causal, mask_kind, config, blocks, options,
                               dropout)

    key = ("backward", str(q.dtype), _bucket(q.shape[2]), _bucket(k.shape[2]), blocks["BLOCK_D"],
           blocks["BLOCK_DV"], mask_kind)
    if blocks["INPUT_PRECISION"] is not None:  # float32: IEEE and tf32 admit other configs
        key += (blocks["INPUT_PRECISION"],)
    if dropout is not None:
        key += ("dropout",)
    admit = _fits_backward(q.dtype, blocks, mask_kind != MASK_NONE)
    return run(ATTENTION_BACKWARD.choose(key, lambda config: bench_ms(lambda: run(config)), admit))


# The launches of a call that needs a gradient, as gems' own ops (gems::attention_forward,
# gems::attention_backward): the autograd function calls them through the dispatcher where
# the native dispatch layer fronts them, so a training step's attention, forward and
# backward, is replayed from C++ as any served call is (its Python path cost about 90 us a
# direction on an H200 host, the backward's two launches keyed by 46 arguments each).
# Calls with dropout draw a new mask each time: those keep the Python path.
_LIBRARY = torch.library.Library("gems", "FRAGMENT")
_LIBRARY.define("attention_forward(Tensor q, Tensor k, Tensor v, Tensor mask, int mask_kind, bool causal, "
                "float scale) -> (Tensor, Tensor)")
_LIBRARY.define("attention_backward(Tensor q, Tensor k, Tensor v, Tensor mask, Tensor out, Tensor grad, "
                "Tensor lse, int mask_kind, bool causal, float scale) -> (Tensor, Tensor, Tensor)")


def _forward_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, mask_kind: int,
                causal: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    out, lse, _ = _forward_launch(q, k, v, mask, mask_kind, causal, scale)
    return out, lse


#: (runtime number, the native layer's registration fronting the two ops or None where the
#: layer does not serve that runtime), once the layer is loaded
_fronting: tuple[int, Any] | None = None
_fronting_lock = threading.Lock()


def _fronted() -> bool:
    """Whether the native layer fronts gems::attention_forward and gems::attention_backward
    for the current runtime (registered once the layer is loaded; until then, and where it
    does not serve, the autograd function calls their Python directly)."""
    if native.loaded() is None:
        return False  # off, unavailable, or still building (background compiles)
    rt = runtime.current()
    if rt.interpreter and not native.forced():
        return False  # the layer fronts the interpreter's kernels only under GEMS_NATIVE=force
    fronting = _fronting
    if fronting is None or fronting[0] != rt.number:
        fronting = _front(rt.number)
    return fronting[1] is not None


def _front(number: int) -> tuple[int, Any]:
    global _fronting
    with _fronting_lock:
        if _fronting is not None and _fronting[0] == number:
            return _fronting
        if _fronting is not None and _fronting[1] is not None:
            _fronting[1].close()  # one runtime's registration at a time
        registration = native.open_registration("gems", runtime.current().selection.execution)
        if registration is not None:
            for name, kernel in (("attention_forward", _forward_op), ("attention_backward", _backward_launch)):
                native.front(registration, name, kernel, f"{number}/gems/{name}")
        _fronting = (number, registration)
        return _fronting


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                mask_kind: int, causal: bool, scale: float, dropout_p: float) -> torch.Tensor:
        dropout = _dropout_draw(q, k, dropout_p)
        if dropout is None and _fronted():
            out, lse = torch.ops.gems.attention_forward(q, k, v, mask, mask_kind, causal, scale)
        else:
            out, lse, _ = _forward_launch(q, k, v, mask, mask_kind, causal, scale, dropout=dropout)
        ctx.save_for_backward(q, k, v, mask, out, lse)
        ctx.settings = (mask_kind, causal, scale, dropout)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        q, k, v, mask, out, lse = ctx.saved_tensors
        mask_kind, causal, scale, dropout = ctx.settings
        if dropout is None and _fronted():
            dq, dk, dv = torch.ops.gems.attention_backward(q, k, v, mask, out, grad, lse, mask_kind, causal, scale)
        else:
            dq, dk, dv = _backward_launch(q, k, v, mask, out, grad, lse, mask_kind, causal, scale, dropout)
        return dq, dk, dv, None, None, None, None, None


def _with_dropout(query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: Any = 0.0, *args: Any,
                  **kwargs: Any) -> bool:
    """The "dropout" form of a call: dropout_p > 0 (a backend may leave it to ATen)."""
    return isinstance(dropout_p, (int, float)) and dropout_p > 0


@aten_op("scaled_dot_product_attention", autograd=True, forms={"dropout": _with_dropout})
def scaled_dot_product_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0, is_causal: bool = False, *, scale: float | None = None,
    enable_gqa: bool = False,
) -> Any:
    """softmax(scale * query @ key^T + mask) @ value over (B, H, L, E) queries (or (B, L, E))
    and (B, HKV, S, E) keys; ``attn_mask`` is bool (True attends) or additive, broadcast to
    (B, H, L, S); ``is_causal`` is top-left aligned; ``scale`` defaults to 1/sqrt(E).

    A decode call (L <= 16, not causal) that needs no gradient keeps its launches
    (:class:`DecodePlan`) for its call signature: a repeat call allocates and launches."""
    plan_key = _plan_key(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    plan = _decode_plans.get(plan_key) if plan_key is not None else None
    if plan is not None and not (torch.is_grad_enabled()
                                 and (query.requires_grad or key.requires_grad or value.requires_grad)):
        return plan(query, key, value, attn_mask)
    if not 0 <= dropout_p < 1:  # ATen's error, or p = 1's zeros
        return NotImplemented
    if (attn_mask is not None and is_causal) or not _served(query, key, value, attn_mask, enable_gqa):
        return NotImplemented
    if dropout_p > 0 and recording.native is not None:
        recording.impure = True  # a replay would repeat this call's draw
    q, k, v, mask, mask_kind, scale_value = _prepare(query, key, value, attn_mask, scale)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad
                                    or (mask_kind == MASK_ADD and mask.requires_grad)):
        out = _Attention.apply(q, k, v, mask, mask_kind, bool(is_causal), scale_value, float(dropout_p))
        return out.squeeze(1) if query.dim() == 3 else out
    # nothing to differentiate: no autograd node (its creation costs more than a launch)
    out, _, plan = _forward_launch(q, k, v, mask, mask_kind, bool(is_causal), scale_value, need_lse=False,
                                   dropout=_dropout_draw(q, k, dropout_p))
    result = out.squeeze(1) if query.dim() == 3 else out
    if (plan is not None and plan_key is not None and scale_value >= 0 and plan.replayable
            and not _native_recording()):
        _decode_plans.store(plan_key, plan.returning(result, mask_kind == MASK_BOOL))
    return result
