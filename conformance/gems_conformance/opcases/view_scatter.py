"""Cases for gems_core/ops/view_scatter.py: select/slice/diagonal backward and scatter.

Each op writes a source of every layout (contiguous, transposed, strided, broadcast rows)
through its view (negative dims and indices, slices with a step and an open end, diagonals
above and below the main one) of a 3-d tensor; the scatters also start from a transposed
``self``. Results are exact copies, compared exactly; the out= forms write a tensor of the
result's shape.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample

aten = torch.ops.aten
#: the writes are gems' copy kernel, whose every dtype the copy_ cases check
_DTYPES = (torch.float32, torch.bfloat16, torch.int64, torch.bool)

#: (name, view arguments of a (B, M, N) tensor, the view); the slice's end is open, as
#: autograd passes it
_VIEWS: tuple[tuple[str, tuple[Any, ...], Callable[..., torch.Tensor]], ...] = (
    ("select", (1, -2), lambda t, dim, index: t.select(dim, index)),
    ("slice", (-1, 1, 2**63 - 1, 2), lambda t, dim, start, end, step: aten.slice.Tensor(t, dim, start, end, step)),
    ("diagonal", (-1, 1, 2), lambda t, offset, dim1, dim2: t.diagonal(offset, dim1, dim2)),
)


def _sources(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str, seed: int) -> Iterator[tuple[str, torch.Tensor]]:
    if len(shape) >= 2:
        yield from samples.layouts(shape, dtype, device, seed=seed)
    else:
        yield "contiguous", samples.make_tensor(shape, dtype, device, seed)


def _view_samples(view: Callable[..., torch.Tensor], args: tuple[Any, ...], scatter: bool) -> Callable[[torch.dtype, torch.device | str, str], Iterator[Sample]]:
    def make(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
        for n, shape in enumerate(samples.SHAPES[profile]):
            full = (3, *shape)
            part = tuple(view(torch.empty(full, device="meta"), *args).shape)
            for label, src in _sources(part, dtype, device, 100 * n):
                if scatter:
                    yield Sample(label, (samples.make_tensor(full, dtype, device, 100 * n + 50), src, *args))
                else:
                    yield Sample(label, (src, list(full), *args))
            if scatter:
                base = samples.make_tensor(full[::-1], dtype, device, 100 * n + 60).permute(2, 1, 0)
                yield Sample("transposed self", (base, samples.make_tensor(part, dtype, device, 100 * n + 61), *args))
        empty = (0, 4, 5)
        part = tuple(view(torch.empty(empty, device="meta"), *args).shape)
        src = torch.empty(part, dtype=dtype, device=device)
        if scatter:
            yield Sample("empty", (torch.empty(empty, dtype=dtype, device=device), src, *args))
        else:
            yield Sample("empty", (src, list(empty), *args))

    return make


def _into_out(op: Any) -> Callable[..., torch.Tensor]:
    def call(first: torch.Tensor, second: Any, *args: Any) -> torch.Tensor:
        shape = second if isinstance(second, list) else first.shape
        out = torch.empty(shape, dtype=first.dtype, device=first.device)
        return op(first, second, *args, out=out)

    return call


for _name, _args, _view in _VIEWS:
    for _scatter, _suffix in ((False, "_backward"), (True, "_scatter")):
        _packet = getattr(aten, _name + _suffix)
        _samples = _view_samples(_view, _args, _scatter)
        register(OpCase(_name + _suffix, (f"{_name}{_suffix}",), _packet.default, _samples, _DTYPES,
                        compare="exact"))
        register(OpCase(f"{_name}{_suffix}_out", (f"{_name}{_suffix}.out",), _into_out(_packet.out), _samples,
                        (torch.float32, torch.int64), compare="exact"))


def _embed_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    for n, shape in enumerate(samples.SHAPES[profile]):
        for label, x in samples.layouts(shape, dtype, device, seed=100 * n):
            yield Sample(label, (x, 0, -2, -1))
            yield Sample(f"{label}, offset", (x, -2, 0, 2))
    yield Sample("1-d", (samples.make_tensor((5,), dtype, device, 1), 1, 1, 0))
    yield Sample("empty", (samples.make_tensor((0, 3), dtype, device, 2), 0, -2, -1))


register(OpCase("diag_embed", ("diag_embed",), torch.diag_embed, _embed_samples, _DTYPES, compare="exact"))
register(OpCase("diag_embed_out", ("diag_embed.out",),
                lambda x, *a: aten.diag_embed.out(x, *a, out=torch.empty(
                    aten.diag_embed(torch.empty(x.shape, device="meta"), *a).shape, dtype=x.dtype, device=x.device)),
                _embed_samples, (torch.float32, torch.int64), compare="exact"))
