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
    name: str
    op: str
    make: Callable[[str], tuple[Any, ...]]
    fn: Callable[..., Any]
    bytes: Callable[[tuple[Any, ...]], int] = lambda inputs: 0


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

HOST_CASES: list[Case] = [
    Case("add 1024 fp32", "add", _rand2((1024,), torch.float32), torch.add),
    Case("sum 1024 fp32", "sum", _rand((1024,), torch.float32), torch.sum),
    Case("softmax 1024 fp32", "softmax", _rand((1, 1024), torch.float32), lambda x: torch.softmax(x, -1)),
]
