"""Cases for gems_core/ops/activation.py.

Unary samples cover every layout, empty, 0-d and special values (NaN, +-inf, -0.0,
subnormals); backward cases take (grad_output, x) pairs of one shape (ATen's backward
kernels do not broadcast), and the ``*_autograd`` cases run forward and backward through
autograd, as training does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from .. import samples
from ..cases import OpCase, register

FLOATS = samples.FLOAT_DTYPES
NON_BOOL = samples.FLOAT_DTYPES + samples.INT_DTYPES


def _unary(dt: torch.dtype, dev: torch.device, p: str) -> Any:
    return samples.elementwise(1, dt, dev, p)


def _same_shape(dt: torch.dtype, dev: torch.device, p: str) -> Any:
    return (s for s in samples.elementwise(2, dt, dev, p) if s.label != "broadcast")


def _through_autograd(
    forward: Callable[[torch.Tensor], torch.Tensor],
) -> Callable[..., torch.Tensor]:
    def call(x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
        x = x.detach().requires_grad_()
        (grad,) = torch.autograd.grad(forward(x), x, dy)
        return grad

    return call


register(OpCase("exp", ("exp",), lambda x: torch.exp(x), _unary, samples.ALL_DTYPES))
register(
    OpCase("exp_out", ("exp.out",), lambda x: torch.exp(x, out=torch.empty_like(x)), _unary, FLOATS)
)
register(OpCase("exp_", ("exp_",), lambda x: x.clone().exp_(), _unary, FLOATS))

register(OpCase("relu", ("relu",), lambda x: torch.relu(x), _unary, NON_BOOL))
register(OpCase("relu_", ("relu_",), lambda x: x.clone().relu_(), _unary, NON_BOOL))

for _mode in ("none", "tanh"):
    _suffix = "" if _mode == "none" else "_tanh"
    register(
        OpCase(
            f"gelu{_suffix}", ("gelu",), lambda x, m=_mode: F.gelu(x, approximate=m), _unary, FLOATS
        )
    )
    register(
        OpCase(
            f"gelu{_suffix}_out",
            ("gelu.out",),
            lambda x, m=_mode: torch._C._nn.gelu(x, approximate=m, out=torch.empty_like(x)),
            _unary,
            FLOATS,
        )
    )
    register(
        OpCase(
            f"gelu{_suffix}_",
            ("gelu_",),
            lambda x, m=_mode: torch._C._nn.gelu_(x.clone(), approximate=m),
            _unary,
            FLOATS,
        )
    )
    register(
        OpCase(
            f"gelu{_suffix}_backward",
            ("gelu_backward",),
            lambda dy, x, m=_mode: torch.ops.aten.gelu_backward(dy, x, approximate=m),
            _same_shape,
            FLOATS,
        )
    )
    register(
        OpCase(
            f"gelu{_suffix}_autograd",
            ("gelu", "gelu_backward"),
            _through_autograd(lambda x, m=_mode: F.gelu(x, approximate=m)),
            _same_shape,
            FLOATS,
        )
    )

register(OpCase("silu", ("silu",), lambda x: F.silu(x), _unary, FLOATS))
register(
    OpCase(
        "silu_out",
        ("silu.out",),
        lambda x: torch._C._nn.silu(x, out=torch.empty_like(x)),
        _unary,
        FLOATS,
    )
)
register(OpCase("silu_", ("silu_",), lambda x: F.silu(x.clone(), inplace=True), _unary, FLOATS))
register(
    OpCase(
        "silu_backward",
        ("silu_backward",),
        lambda dy, x: torch.ops.aten.silu_backward(dy, x),
        _same_shape,
        FLOATS,
    )
)
register(
    OpCase(
        "silu_autograd", ("silu", "silu_backward"), _through_autograd(F.silu), _same_shape, FLOATS
    )
)
