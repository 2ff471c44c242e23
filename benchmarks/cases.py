"""Benchmark cases: shapes, dtypes and bytes moved per op.

Sizes are LLM-shaped (hidden 4096/8192, intermediate 14336, vocab 32000/128256) plus large
flat tensors (64M elements) and non-contiguous inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

M64 = 64 * 2**20


@dataclass(frozen=True)
class Case:
    """One benchmark: ``fn(*make(device))`` timed with ATen and under gems.

    ``bytes`` (memory-bound ops) gives GB/s and % of the copy bandwidth; ``flops``
    (matrix products, attention) gives TFLOP/s and % of the matmul peak measured in the same
    run. ``aten_variants`` name other ways ATen runs the op (SDPA's backends): the fastest
    is the baseline, and each is reported."""

    name: str
    op: str
    make: Callable[[str], tuple[Any, ...]]
    fn: Callable[..., Any]
    bytes: Callable[[tuple[Any, ...]], int] = lambda inputs: 0
    flops: Callable[[tuple[Any, ...]], float] | None = None
    aten_variants: Callable[[], dict[str, Any]] | None = None
    #: the overloads whose answers by gems mean it served the case (default: those whose
    #: names hold ``op``; a composite such as cross_entropy names the ops it runs)
    gems_ops: tuple[str, ...] = ()
    #: host cases: time a call's issue while the GPU is held busy (a sleep kernel queued
    #: first), for calls whose kernels outlast their host path
    busy: bool = False


def _nbytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _rand(shape: tuple[int, ...], dtype: torch.dtype) -> Callable[[str], tuple[Any, ...]]:
    return lambda device: (torch.randn(shape, dtype=dtype, device=device),)


def _rand2(shape: tuple[int, ...], dtype: torch.dtype, transpose: bool = False) -> Callable[[str], tuple[Any, ...]]:
    def make(device: str) -> tuple[Any, ...]:
        a = torch.randn(shape, dtype=dtype, device=device)
        b = torch.randn(shape, dtype=dtype, device=device)
        return (a.t() if transpose else a, b.t() if transpose else b)

    return make


def _binary_bytes(inputs: tuple[Any, ...]) -> int:
    a, b = inputs
    return _nbytes(a, b) + a.numel() * a.element_size()


def _unary_bytes(inputs: tuple[Any, ...]) -> int:
    return 2 * _nbytes(inputs[0])


def _row_bytes(inputs: tuple[Any, ...]) -> int:
    return 2 * _nbytes(inputs[0])


CASES: list[Case] = []
for dtype, tag in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
    CASES += [
        Case(f"add 64M {tag}", "add", _rand2((M64,), dtype), torch.add, _binary_bytes),
        Case(f"mul 64M {tag}", "mul", _rand2((M64,), dtype), torch.mul, _binary_bytes),
        Case(f"add 8192x8192 transposed {tag}", "add", _rand2((8192, 8192), dtype, True), torch.add, _binary_bytes),
        Case(f"exp 64M {tag}", "exp", _rand((M64,), dtype), torch.exp, _unary_bytes),
        Case(f"gelu 16384x14336 {tag}", "gelu", _rand((16384, 14336), dtype), F.gelu, _unary_bytes),
        Case(f"silu 16384x14336 {tag}", "silu", _rand((16384, 14336), dtype), F.silu, _unary_bytes),
        Case(f"relu 64M {tag}", "relu", _rand((M64,), dtype), torch.relu, _unary_bytes),
    ]
CASES += [
    Case("add broadcast 16384x4096 + 4096 bf16", "add",
         lambda d: (torch.randn(16384, 4096, dtype=torch.bfloat16, device=d),
                    torch.randn(4096, dtype=torch.bfloat16, device=d)),
         torch.add, lambda i: 2 * _nbytes(i[0]) + _nbytes(i[1])),
    Case("sum 16384x4096 dim=-1 bf16", "sum", _rand((16384, 4096), torch.bfloat16),
         lambda x: x.sum(-1), lambda i: _nbytes(i[0])),
    Case("sum 4096x16384 dim=0 fp32", "sum", _rand((4096, 16384), torch.float32),
         lambda x: x.sum(0), lambda i: _nbytes(i[0])),
    Case("amax 16384x4096 dim=-1 bf16", "amax", _rand((16384, 4096), torch.bfloat16),
         lambda x: x.amax(-1), lambda i: _nbytes(i[0])),
    Case("mean 64M fp32", "mean", _rand((M64,), torch.float32), torch.mean, lambda i: _nbytes(i[0])),
    Case("softmax 4096x32000 bf16", "softmax", _rand((4096, 32000), torch.bfloat16),
         lambda x: torch.softmax(x, -1), _row_bytes),
    Case("softmax 1024x128256 fp32", "softmax", _rand((1024, 128256), torch.float32),
         lambda x: torch.softmax(x, -1), _row_bytes),
    Case("softmax 16384x4096 dim=0 bf16", "softmax", _rand((16384, 4096), torch.bfloat16),
         lambda x: torch.softmax(x, 0), _row_bytes),
    Case("log_softmax 4096x32000 fp32", "log_softmax", _rand((4096, 32000), torch.float32),
         lambda x: torch.log_softmax(x, -1), _row_bytes),
    Case("layer_norm 16384x4096 bf16", "layer_norm",
         lambda d: (torch.randn(16384, 4096, dtype=torch.bfloat16, device=d),
                    torch.randn(4096, dtype=torch.bfloat16, device=d),
                    torch.randn(4096, dtype=torch.bfloat16, device=d)),
         lambda x, w, b: F.layer_norm(x, (4096,), w, b), _row_bytes),
    Case("rms_norm 16384x4096 bf16", "rms_norm",
         lambda d: (torch.randn(16384, 4096, dtype=torch.bfloat16, device=d),
                    torch.randn(4096, dtype=torch.bfloat16, device=d)),
         lambda x, w: F.rms_norm(x, (4096,), w), _row_bytes),
    Case("mm 4096x4096x4096 bf16", "mm", _rand2((4096, 4096), torch.bfloat16), torch.mm),
    Case("mm 2048x14336x4096 bf16", "mm",
         lambda d: (torch.randn(2048, 4096, dtype=torch.bfloat16, device=d),
                    torch.randn(4096, 14336, dtype=torch.bfloat16, device=d)), torch.mm),
    Case("mm 1x4096x14336 bf16 (GEMV)", "mm",
         lambda d: (torch.randn(1, 4096, dtype=torch.bfloat16, device=d),
                    torch.randn(14336, 4096, dtype=torch.bfloat16, device=d).t()), torch.mm,
         lambda i: _nbytes(*i)),
    Case("mm 16x14336x4096 bf16 (decode)", "mm",
         lambda d: (torch.randn(16, 14336, dtype=torch.bfloat16, device=d),
                    torch.randn(4096, 14336, dtype=torch.bfloat16, device=d).t()), torch.mm,
         lambda i: _nbytes(*i)),
    Case("addmm 16x14336x4096 bf16", "addmm",
         lambda d: (torch.randn(14336, dtype=torch.bfloat16, device=d),
                    torch.randn(16, 4096, dtype=torch.bfloat16, device=d),
                    torch.randn(4096, 14336, dtype=torch.bfloat16, device=d)),
         torch.addmm),
]

def _mm_flops(inputs: tuple[Any, ...]) -> float:
    a, b = inputs[-2:]
    return 2.0 * a.shape[0] * a.shape[1] * b.shape[1]


def _linear(m: int, n: int, k: int) -> Callable[[str], tuple[Any, ...]]:
    """(m, k) @ (k, n) with the weight stored (n, k) as nn.Linear keeps it."""
    return lambda d: (torch.randn(m, k, dtype=torch.bfloat16, device=d),
                      torch.randn(n, k, dtype=torch.bfloat16, device=d).t())


def _gemm_bytes(inputs: tuple[Any, ...]) -> int:
    a, b = inputs[-2:]
    return _nbytes(a, b) + a.shape[0] * b.shape[1] * a.element_size()


def _sdpa_inputs(batch: int, heads: int, kv_heads: int, q_len: int, kv_len: int) -> Callable[[str], tuple[Any, ...]]:
    def make(d: str) -> tuple[Any, ...]:
        q = torch.randn(batch, heads, q_len, 128, dtype=torch.bfloat16, device=d)
        k = torch.randn(batch, kv_heads, kv_len, 128, dtype=torch.bfloat16, device=d)
        v = torch.randn(batch, kv_heads, kv_len, 128, dtype=torch.bfloat16, device=d)
        return q, k, v

    return make


def _sdpa_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1])


def _linear_inputs(batch: int, tokens: int, features: int, out_features: int) -> Callable[[str], tuple[Any, ...]]:
    def make(d: str) -> tuple[Any, ...]:
        x = torch.randn(batch, tokens, features, dtype=torch.bfloat16, device=d)
        return x, torch.randn(out_features, features, dtype=torch.bfloat16, device=d) / features**0.5

    return make


def _sdpa_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=q.shape[1] != k.shape[1])


def _causal_flops(inputs: tuple[Any, ...]) -> float:
    q = inputs[0]
    batch, heads, seq, dim = q.shape
    return 4.0 * batch * heads * seq * seq * dim / 2  # QK^T and PV over the lower triangle


def _sdpa_bytes(inputs: tuple[Any, ...]) -> int:
    q, k, v = inputs
    return 2 * _nbytes(q) + _nbytes(k, v)


def sdpa_backends() -> dict[str, Any]:
    """ATen's SDPA backends, each as a context manager factory."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    chosen = {"default": None}
    for name in ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION"):
        backend = getattr(SDPBackend, name, None)
        if backend is not None:
            chosen[name.split("_")[0].lower()] = lambda backend=backend: sdpa_kernel(backend)
    return chosen


def _nll_grad_inputs(rows: int, classes: int) -> Callable[[str], tuple[Any, ...]]:
    """nll_loss_backward's (grad, log-probabilities, targets, total weight) of a mean loss."""
    return lambda d: (torch.tensor(1.0, device=d), torch.randn(rows, classes, device=d),
                      torch.randint(0, classes, (rows,), device=d), torch.tensor(float(rows), device=d))


def _targets(rows: int, vocab: int) -> Callable[[str], tuple[Any, ...]]:
    return lambda d: (torch.randn(rows, vocab, dtype=torch.bfloat16, device=d),
                      torch.randint(0, vocab, (rows,), device=d))


CASES += [
    Case("mm 8192x8192x8192 bf16", "mm", _rand2((8192, 8192), torch.bfloat16), torch.mm, flops=_mm_flops),
    # decode shapes: M = 1 and 16 tokens through LLM projections (N, K from 4096 to 14336)
    *[Case(f"mm {m}x{n}x{k} bf16 (decode)", "mm", _linear(m, n, k), torch.mm, _gemm_bytes, _mm_flops)
      for m in (1, 16) for n, k in ((4096, 4096), (6144, 4096), (28672, 4096), (4096, 14336))],
    # prefill shapes: a batch of 2 prompts of 512 tokens through the same projections
    *[Case(f"mm 1024x{n}x{k} bf16 (prefill)", "mm", _linear(1024, n, k), torch.mm, flops=_mm_flops)
      for n, k in ((6144, 4096), (28672, 4096), (4096, 14336))],
    Case("sdpa prefill b4 h32 s2048 d128 causal bf16", "scaled_dot_product_attention",
         _sdpa_inputs(4, 32, 32, 2048, 2048), _sdpa_causal, flops=_causal_flops, aten_variants=sdpa_backends),
    Case("sdpa prefill b4 h32 s8192 d128 causal bf16", "scaled_dot_product_attention",
         _sdpa_inputs(4, 32, 32, 8192, 8192), _sdpa_causal, flops=_causal_flops, aten_variants=sdpa_backends),
    *[Case(f"sdpa decode b8 h32/8 kv{kv} d128 bf16", "scaled_dot_product_attention",
           _sdpa_inputs(8, 32, 8, 1, kv), _sdpa_decode, _sdpa_bytes, aten_variants=sdpa_backends)
      for kv in (512, 2048, 8192)],
    Case("cross_entropy 4096x128256 bf16", "cross_entropy", _targets(4096, 128256),
         F.cross_entropy, lambda i: _nbytes(i[0]), gems_ops=("_log_softmax", "nll_loss_forward")),
    Case("embedding 8192 of 128256x4096 bf16", "embedding",
         lambda d: (torch.randint(0, 128256, (8192,), device=d),
                    torch.randn(128256, 4096, dtype=torch.bfloat16, device=d)),
         F.embedding, lambda i: 2 * i[0].numel() * i[1].shape[1] * i[1].element_size()),
    Case("index_select 8192 of 32000x4096 bf16", "index_select",
         lambda d: (torch.randn(32000, 4096, dtype=torch.bfloat16, device=d), 0,
                    torch.randint(0, 32000, (8192,), device=d)),
         torch.index_select, lambda i: 2 * i[2].numel() * i[0].shape[1] * i[0].element_size()),
    Case("topk 50 of 4096x32000 fp32", "topk", _rand((4096, 32000), torch.float32),
         lambda x: torch.topk(x, 50), lambda i: _nbytes(i[0])),
    Case("cumsum 4096x16384 fp32", "cumsum", _rand((4096, 16384), torch.float32),
         lambda x: torch.cumsum(x, -1), _row_bytes),
    Case("var_mean 16384x4096 fp32", "var_mean", _rand((16384, 4096), torch.float32),
         lambda x: torch.var_mean(x, -1), lambda i: _nbytes(i[0])),
    Case("log_softmax 1024x128256 bf16", "log_softmax", _rand((1024, 128256), torch.bfloat16),
         lambda x: torch.log_softmax(x, -1), _row_bytes),
]

HOST_CASES: list[Case] = [
    Case("add 1024 fp32", "add", _rand2((1024,), torch.float32), torch.add),
    Case("sum 1024 fp32", "sum", _rand((1024,), torch.float32), torch.sum),
    Case("softmax 1024 fp32", "softmax", _rand((1, 1024), torch.float32), lambda x: torch.softmax(x, -1)),
    # ops gems serves on the Autograd key (their own backward): the per-call path of a call
    # that needs no gradient
    Case("rms_norm 1024 fp32", "rms_norm", _rand2((1, 1024), torch.float32),
         lambda x, w: F.rms_norm(x, (1024,), w[0])),
    Case("sdpa decode b1 h8/2 kv64 d128 bf16", "scaled_dot_product_attention", _sdpa_inputs(1, 8, 2, 1, 64),
         _sdpa_decode),
    # a Llama prefill's q projection (2 x 512 tokens): on Hopper the NVIDIA backend's Gluon GEMM
    Case("linear 2x512x4096 -> 4096 bf16", "mm", _linear_inputs(2, 512, 4096, 4096), F.linear, busy=True),
]


# -- breadth: sampling, indexing, scans, activation backward and the optimizer step -----------


def _index_rows(rows: int, table: int, width: int, dtype: torch.dtype) -> Callable[[str], tuple[Any, ...]]:
    """(a table of ``table`` rows, ``rows`` random row indices with repeats, their values)."""
    return lambda d: (torch.randn(table, width, dtype=dtype, device=d),
                      torch.randint(0, table, (rows,), device=d),
                      torch.randn(rows, width, dtype=dtype, device=d))


def _gather_inputs(rows: int, cols: int, picks: int) -> Callable[[str], tuple[Any, ...]]:
    return lambda d: (torch.randn(rows, cols, device=d), torch.randint(0, cols, (rows, picks), device=d),
                      torch.randn(rows, picks, device=d))


#: which of ATen's AdamW steps the case calls: its fused kernel, or (a variant) its foreach ops
_ADAMW = {"impl": "fused"}


class _AdamWForeach:
    """ATen's ``foreach`` AdamW step in place of its fused one, for the case's variant."""

    def __enter__(self) -> None:
        _ADAMW["impl"] = "foreach"

    def __exit__(self, *exc: object) -> None:
        _ADAMW["impl"] = "fused"


def _adamw_inputs(d: str) -> tuple[Any, ...]:
    """The float32 parameters of a 4-layer Llama-shaped model (hidden 2048, MLP 5632, vocab
    32000; 76 tensors, 0.2 G elements) with gradients, and an AdamW over them each way."""
    shapes = [(32000, 2048)] * 2 + [(2048,)]
    for _ in range(4):
        shapes += [(2048, 2048)] * 4 + [(5632, 2048)] * 2 + [(2048, 5632)] + [(2048,)] * 2
    params = [torch.randn(s, device=d, requires_grad=True) for s in shapes]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    opts = {impl: torch.optim.AdamW(params, lr=1e-4, **{impl: True}) for impl in ("fused", "foreach")}
    return (opts, sum(p.numel() for p in params))


def _adamw_step(opts: dict[str, Any], numel: int) -> None:
    opts[_ADAMW["impl"]].step()


CASES += [
    Case("sort 4096x4096 fp32 stable", "sort", _rand((4096, 4096), torch.float32),
         lambda x: torch.sort(x, dim=-1, stable=True), lambda i: _nbytes(i[0]) * 3),
    Case("sort 16x128256 fp32 descending (top-p)", "sort", _rand((16, 128256), torch.float32),
         lambda x: torch.sort(x, -1, descending=True), lambda i: _nbytes(i[0]) * 3),
    Case("sort 65536x256 fp32 stable", "sort", _rand((65536, 256), torch.float32),
         lambda x: torch.sort(x, dim=-1, stable=True), lambda i: _nbytes(i[0]) * 3),
    Case("argsort 16384x512 bf16", "sort", _rand((16384, 512), torch.bfloat16),
         lambda x: torch.argsort(x, -1), lambda i: _nbytes(i[0]) * 5),
    Case("argmin 4096x32000 bf16", "argmin", _rand((4096, 32000), torch.bfloat16),
         lambda x: torch.argmin(x, -1), lambda i: _nbytes(i[0])),
    Case("amin 16384x4096 dim=-1 bf16", "amin", _rand((16384, 4096), torch.bfloat16),
         lambda x: x.amin(-1), lambda i: _nbytes(i[0])),
    Case("cumprod 4096x16384 fp32", "cumprod", _rand((4096, 16384), torch.float32),
         lambda x: torch.cumprod(x, -1), _row_bytes),
    Case("cummax 4096x16384 fp32", "cummax", _rand((4096, 16384), torch.float32),
         lambda x: torch.cummax(x, -1), lambda i: _nbytes(i[0]) * 4),
    Case("gather 4096x32000 -> 4096x1024 fp32", "gather", _gather_inputs(4096, 32000, 1024),
         lambda x, idx, v: torch.gather(x, 1, idx), lambda i: 2 * _nbytes(i[2]) + _nbytes(i[1])),
    Case("scatter_add 4096x1024 into 4096x32000 fp32", "scatter_add", _gather_inputs(4096, 32000, 1024),
         lambda x, idx, v: x.scatter_add_(1, idx, v), lambda i: 2 * _nbytes(i[2]) + _nbytes(i[1])),
    # (bfloat16 accumulation goes to ATen: gems' atomic adds take float16, float32 and float64)
    Case("index_put accumulate 16384 rows of 32000x1024 fp32", "index_put", _index_rows(16384, 32000, 1024,
                                                                                   torch.float32),
         lambda t, idx, v: t.index_put_((idx,), v, accumulate=True), lambda i: 2 * _nbytes(i[2])),
    Case("index_add 16384 rows of 32000x1024 fp32", "index_add", _index_rows(16384, 32000, 1024, torch.float32),
         lambda t, idx, v: t.index_add_(0, idx, v), lambda i: 2 * _nbytes(i[2])),
    Case("multinomial 16 of 16x128256 fp32", "multinomial",
         lambda d: (torch.rand(16, 128256, device=d),),
         lambda p: torch.multinomial(p, 1), lambda i: _nbytes(i[0])),
    Case("where 64M fp32", "where",
         lambda d: (torch.randn(M64, device=d) > 0, torch.randn(M64, device=d), torch.randn(M64, device=d)),
         torch.where, lambda i: i[0].numel() * 13),
    Case("clamp 64M bf16", "clamp", _rand((M64,), torch.bfloat16), lambda x: torch.clamp(x, -0.5, 0.5),
         _unary_bytes),
    Case("threshold_backward 64M bf16", "threshold_backward", _rand2((M64,), torch.bfloat16),
         lambda g, x: torch.ops.aten.threshold_backward(g, x, 0.0), _binary_bytes),
    Case("sigmoid_backward 64M bf16", "sigmoid_backward", _rand2((M64,), torch.bfloat16),
         lambda g, y: torch.ops.aten.sigmoid_backward(g, y), _binary_bytes),
    Case("mse_loss 16384x4096 fp32", "mse_loss", _rand2((16384, 4096), torch.float32), F.mse_loss,
         lambda i: _nbytes(*i)),
    # the gradient of a masked-LM loss (BERT: 8192 tokens, vocabulary 30522, rows not 16-byte aligned)
    Case("nll_loss_backward 8192x30522 fp32", "nll_loss_backward", _nll_grad_inputs(8192, 30522),
         lambda g, x, t, w: torch.ops.aten.nll_loss_backward(g, x, t, None, 1, -100, w), lambda i: _nbytes(i[1])),
    Case("AdamW step, 4-layer Llama fp32 (0.2 G params)", "_fused_adamw_", _adamw_inputs, _adamw_step,
         lambda i: 28 * i[1], aten_variants=lambda: {"foreach": _AdamWForeach}),
]
