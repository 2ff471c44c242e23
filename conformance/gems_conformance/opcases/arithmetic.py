"""Cases for gems_core/ops/arithmetic.py."""

from __future__ import annotations

import torch

from .. import samples
from ..cases import OpCase, register

SIGNED = (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.int16, torch.int8)

register(OpCase("add", ("add.Tensor",), lambda x, y: torch.add(x, y),
                lambda dt, dev, p: samples.elementwise(2, dt, dev, p), samples.ALL_DTYPES[:-1]))
register(OpCase("add_alpha", ("add.Tensor",), lambda x, y: torch.add(x, y, alpha=3),
                lambda dt, dev, p: samples.elementwise(2, dt, dev, p), SIGNED))
register(OpCase("add_scalar", ("add.Tensor",), lambda x: x + 2.5,
                lambda dt, dev, p: samples.elementwise(1, dt, dev, p), samples.ALL_DTYPES))
register(OpCase("add_", ("add_.Tensor",), lambda x, y: x.clone().add_(y),
                lambda dt, dev, p: samples.elementwise(2, dt, dev, p), SIGNED))
register(OpCase("sub", ("sub.Tensor",), lambda x, y: torch.sub(x, y),
                lambda dt, dev, p: samples.elementwise(2, dt, dev, p), SIGNED))
register(OpCase("rsub_scalar", ("sub.Tensor",), lambda x: 1 - x,
                lambda dt, dev, p: samples.elementwise(1, dt, dev, p), SIGNED))
register(OpCase("mul", ("mul.Tensor",), lambda x, y: torch.mul(x, y),
                lambda dt, dev, p: samples.elementwise(2, dt, dev, p), samples.ALL_DTYPES))
register(OpCase("mul_out", ("mul.out",), lambda x, y: torch.mul(x, y, out=torch.empty_like(x)),
                lambda dt, dev, p: (s for s in samples.elementwise(2, dt, dev, p) if s.label != "broadcast"),
                (torch.float32, torch.float16, torch.int32)))
register(OpCase("div", ("div.Tensor",), lambda x, y: torch.div(x, y),
                lambda dt, dev, p: samples.elementwise(2, dt, dev, p, low=0.5, high=4), samples.ALL_DTYPES))
register(OpCase("div_trunc", ("div.Tensor_mode",), lambda x, y: torch.div(x, y, rounding_mode="trunc"),
                lambda dt, dev, p: samples.elementwise(2, dt, dev, p, low=1, high=9, special=False), SIGNED))
register(OpCase("div_floor", ("div.Tensor_mode",), lambda x, y: torch.div(x, -y, rounding_mode="floor"),
                lambda dt, dev, p: samples.elementwise(2, dt, dev, p, low=1, high=9, special=False), SIGNED))
register(OpCase("neg", ("neg",), lambda x: torch.neg(x),
                lambda dt, dev, p: samples.elementwise(1, dt, dev, p), SIGNED))
