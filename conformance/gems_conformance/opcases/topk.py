"""Cases for gems_core/ops/topk.py.

Ties make indices ambiguous, so each case returns the values and the input entries its
indices select (``gather``): both must equal the reference's. Rows are short (the
interpreter sorts slowly) but for two samples of rows longer than a single program's limit,
which takes the two-stage path; NaN/Inf rows check ATen's order (NaN greatest).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample

DTYPES = samples.FLOAT_DTYPES + (torch.int32, torch.int16, torch.int8, torch.uint8)


def topk_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    # layouts on the first shape only: one program sorts each row, slowly in the interpreter
    shapes = samples.SHAPES[profile]
    for label, x in samples.layouts(shapes[0], dtype, device):
        if label != "expanded":
            yield Sample(label, (x,), {"k": 3, "dim": 1})
    for n, shape in enumerate(shapes[1:]):
        yield Sample("contiguous", (samples.make_tensor(shape, dtype, device, n),), {"k": 5, "dim": -1})
    yield Sample("outer dim", (samples.make_tensor(shapes[0], dtype, device, 9),), {"k": 2, "dim": 0, "largest": False})
    yield Sample("k=n", (samples.make_tensor((2, 9), dtype, device, 3),), {"k": 9, "dim": -1})
    yield Sample("k=0", (samples.make_tensor((2, 9), dtype, device, 3),), {"k": 0, "dim": -1})
    yield Sample("empty", (samples.make_tensor((0, 5), dtype, device, 4),), {"k": 2, "dim": 1})
    yield Sample("0-d", (samples.make_tensor((), dtype, device, 5),), {"k": 1, "dim": 0})
    # rows longer than one program selects from (8192): two stages, chunks then candidates
    yield Sample("long rows", (samples.make_tensor((2, 9000), dtype, device, 6),), {"k": 50, "dim": -1})
    yield Sample("long rows", (samples.make_tensor((9000, 2), dtype, device, 7),), {"k": 7, "dim": 0, "largest": False})
    if dtype.is_floating_point:
        special = samples.special_values(dtype, device).view(2, 5)
        yield Sample("special", (special,), {"k": 3, "dim": 1})
        yield Sample("special", (special,), {"k": 3, "dim": 1, "largest": False})


def _topk(x: torch.Tensor, k: int, dim: int, largest: bool = True, out: bool = False) -> tuple:
    if out:
        values = torch.empty(0, dtype=x.dtype, device=x.device)
        indices = torch.empty(0, dtype=torch.int64, device=x.device)
        torch.topk(x, k, dim, largest, out=(values, indices))
    else:
        values, indices = torch.topk(x, k, dim, largest)
    return values, x.gather(dim, indices) if x.dim() else x


register(OpCase("topk", ("topk",), _topk, topk_samples, DTYPES))
register(OpCase("topk_out", ("topk.values",), lambda x, **kw: _topk(x, out=True, **kw),
                lambda dt, dev, p: (s for s in topk_samples(dt, dev, p) if s.label != "transposed"),
                (torch.float32,)))
