"""Cases for gems_core/ops/attention*.py: scaled_dot_product_attention, forward and backward.

Query and key lengths are odd and unequal (neither a multiple of a tile; L > S in one
shape and L < S in the other, so the top-left causal diagonal is met from both sides);
head dims include one that is not a power of two and a value head dim unlike the query's.
Beside plain and causal attention: grouped-query heads (with and without causal), a bool
mask broadcast over heads (one row masked entirely), an additive mask of (L, S), 3-d
inputs, queries and keys read through a (B, L, H, E) layout with an explicit scale, and
single queries over enough keys to take the split-key decoding path (grouped, and masked).
The backward case takes one sample of each kind (both grouped ones). Tolerances scale with
S, the length of each softmax sum (and, for the key and value gradients, with the query
rows summed into them).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from ..cases import OpCase, register
from ..samples import Sample, make_tensor, ramp_like

#: bf16 runs too: where a backend leaves it to ATen, the suite reports that
DTYPES = (torch.float32, torch.float16, torch.bfloat16)

#: (B, H, HKV, L, S, E) per profile: the shapes of the plain and causal samples
SHAPES = {
    "quick": [(2, 2, 2, 37, 29, 32), (1, 2, 2, 19, 70, 64)],
    "full": [(4, 8, 8, 512 + 17, 512 + 17, 64), (2, 16, 16, 1024 + 17, 256 + 17, 128)],
    "large": [(8, 32, 32, 4096 + 17, 4096 + 17, 128)],
}
#: key lengths of the single-query (decoding) samples
DECODE_KEYS = {"quick": 200, "full": 8192 + 17, "large": 65536 + 17}


def _uniform(shape: tuple[int, ...], dt: torch.dtype, dev: Any, seed: int) -> torch.Tensor:
    return make_tensor(shape, dt, dev, seed, low=-1, high=1)


def _qkv(b: int, h: int, hkv: int, lq: int, s: int, e: int, dt: torch.dtype, dev: Any, seed: int,
         ev: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (_uniform((b, h, lq, e), dt, dev, seed), _uniform((b, hkv, s, e), dt, dev, seed + 1),
            _uniform((b, hkv, s, ev or e), dt, dev, seed + 2))


def attention_samples(dt: torch.dtype, dev: Any, p: str) -> Iterator[Sample]:
    """(query, key, value) and keywords of ``scaled_dot_product_attention``."""
    for n, (b, h, hkv, lq, s, e) in enumerate(SHAPES[p]):
        yield Sample("plain", _qkv(b, h, hkv, lq, s, e, dt, dev, 10 * n))
        yield Sample("causal", _qkv(b, h, hkv, lq, s, e, dt, dev, 10 * n + 3), {"is_causal": True})
    b, h, hkv, lq, s, e = SHAPES[p][0]
    yield Sample("gqa", _qkv(b, 4 * hkv, hkv, lq, s, e, dt, dev, 100), {"enable_gqa": True})
    yield Sample("gqa", _qkv(b, 2 * hkv, hkv, s, lq, e, dt, dev, 110), {"enable_gqa": True, "is_causal": True})
    mask = make_tensor((b, 1, lq, s), torch.bool, dev, 120)
    mask[:, :, 3] = False  # a row that attends nothing gives zeros
    yield Sample("bool mask", _qkv(b, h, hkv, lq, s, e, dt, dev, 130), {"attn_mask": mask})
    yield Sample("float mask", _qkv(b, h, hkv, lq, s, e, dt, dev, 140),
                 {"attn_mask": _uniform((lq, s), dt, dev, 150) * 4})
    q, k, v = _qkv(b, h, hkv, lq, s, e, dt, dev, 160)
    yield Sample("3-d", (q[0], k[0], v[0]), {"is_causal": True})
    q = _uniform((b, lq, h, 80), dt, dev, 170).transpose(1, 2)  # as a projection's output
    k = _uniform((b, s, hkv, 80), dt, dev, 171).transpose(1, 2)
    yield Sample("transposed", (q, k, _uniform((b, hkv, s, 48), dt, dev, 172)), {"scale": 0.3})
    keys = DECODE_KEYS[p]
    yield Sample("decode", _qkv(1, 4, 2, 1, keys, e, dt, dev, 190), {"enable_gqa": True})
    yield Sample("decode", _qkv(1, 2, 2, 1, keys, e, dt, dev, 200),
                 {"attn_mask": make_tensor((1, 2, 1, keys), torch.bool, dev, 210)})


def backward_samples(dt: torch.dtype, dev: Any, p: str) -> Iterator[Sample]:
    """One sample of each kind: the backward costs three times the forward."""
    seen: set[str] = set()
    for sample in attention_samples(dt, dev, p):
        if sample.label not in seen or sample.label == "gqa":
            seen.add(sample.label)
            yield sample


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, **kwargs)


def _with_grads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs: Any) -> Any:
    """(out, dq, dk, dv) for fixed output weights."""
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out = _attention(*leaves, **kwargs)
    weights = ramp_like(out)
    return (out.detach(), *torch.autograd.grad(out, leaves, weights))


def _float64_mask(kwargs: dict[str, Any]) -> dict[str, Any]:
    # the suite's reference copies the positional inputs to float64 but passes keywords as
    # they are, and ATen misreads an additive mask whose dtype is not the query's
    mask = kwargs.get("attn_mask")
    if mask is not None and mask.is_floating_point():
        kwargs = {**kwargs, "attn_mask": mask.double()}
    return kwargs


def _keys(sample: Sample) -> int:
    return sample.args[1].shape[-2]


def _keys_and_queries(sample: Sample) -> int:
    """dK and dV sum over every query row of a key's group of heads."""
    q, k = sample.args[0], sample.args[1]
    group = q.shape[-3] // k.shape[-3] if q.dim() == 4 else 1
    return max(_keys(sample), q.shape[-2] * group)


register(OpCase("scaled_dot_product_attention", ("scaled_dot_product_attention",), _attention,
                attention_samples, DTYPES, reduction_length=_keys,
                reference=lambda q, k, v, **kw: _attention(q, k, v, **_float64_mask(kw))))
register(OpCase("scaled_dot_product_attention_backward", ("scaled_dot_product_attention",), _with_grads,
                backward_samples, DTYPES, reduction_length=_keys_and_queries,
                reference=lambda q, k, v, **kw: _with_grads(q, k, v, **_float64_mask(kw))))
