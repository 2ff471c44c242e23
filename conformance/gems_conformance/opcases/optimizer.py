"""Cases for gems_core/ops/optimizer.py and foreach.py: the fused Adam/AdamW/SGD steps and the
``_foreach_*`` ops of optimizer steps, on tensor lists that mix sizes (a matrix, a vector
of 2^k + 17 elements, a 0-d and an empty tensor), as a model's parameters do.

Each call works on clones and returns the updated tensors (params, then the moments), so
the float64 reference is ATen's same step on float64 copies.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample

FLOATS = samples.FLOAT_DTYPES
SHAPES = [(5, 7), (33,), (), (0,)]


def _list(dt: torch.dtype, dev: torch.device | str, seed: int, **kw: Any) -> list[torch.Tensor]:
    return [samples.make_tensor(shape, dt, dev, seed + i, **kw) for i, shape in enumerate(SHAPES)]


def _adam_samples(dt: torch.dtype, dev: torch.device, p: str) -> Iterator[Sample]:
    """(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps) and the options."""
    def lists() -> tuple[Any, ...]:
        steps = [torch.tensor(float(3 + i), device=dev) for i in range(len(SHAPES))]
        return (_list(dt, dev, 10), _list(dt, dev, 20), _list(dt, dev, 30, low=-0.5, high=0.5),
                _list(dt, dev, 40, low=0.0, high=0.5), _list(dt, dev, 50, low=0.2, high=0.6), steps)

    base = {"lr": 0.01, "beta1": 0.9, "beta2": 0.999, "weight_decay": 0.01, "eps": 1e-8, "amsgrad": False,
            "maximize": False}
    yield Sample("contiguous", lists(), base)
    yield Sample("amsgrad", lists(), {**base, "amsgrad": True})
    yield Sample("maximize", lists(), {**base, "maximize": True, "weight_decay": 0.0})
    scale = torch.tensor([4.0], device=dev)
    yield Sample("grad_scale", lists(), {**base, "grad_scale": scale, "found_inf": torch.zeros(1, device=dev)})
    yield Sample("found_inf", lists(), {**base, "grad_scale": scale, "found_inf": torch.ones(1, device=dev)})


def _adam_call(fused: Any) -> Any:
    def call(params: list[torch.Tensor], grads: list[torch.Tensor], exp_avgs: list[torch.Tensor],
             exp_avg_sqs: list[torch.Tensor], max_exp_avg_sqs: list[torch.Tensor], steps: list[torch.Tensor],
             **options: Any) -> list[torch.Tensor]:
        state = [[t.clone() for t in row] for row in (params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs)]
        if not options["amsgrad"]:
            state[4] = []
        for key in ("grad_scale", "found_inf"):  # float32 in ATen's schema use, also beside float64 lists
            if options.get(key) is not None:
                options = {**options, key: options[key].float()}
        fused(*state, steps, **options)
        return [t for row in state for t in row]

    return call


register(OpCase("fused_adamw_", ("_fused_adamw_",), _adam_call(torch._fused_adamw_), _adam_samples, FLOATS))
register(OpCase("fused_adam_", ("_fused_adam_",), _adam_call(torch._fused_adam_), _adam_samples, FLOATS))


def _sgd_samples(dt: torch.dtype, dev: torch.device, p: str) -> Iterator[Sample]:
    """(params, grads, momentum buffers) and the options."""
    def lists() -> tuple[Any, ...]:
        return _list(dt, dev, 60), _list(dt, dev, 70), _list(dt, dev, 80, low=-0.5, high=0.5)

    base = {"weight_decay": 0.0, "momentum": 0.9, "lr": 0.1, "dampening": 0.0, "nesterov": False,
            "maximize": False, "is_first_step": False}
    yield Sample("contiguous", lists(), base)
    yield Sample("first_step", lists(), {**base, "is_first_step": True, "weight_decay": 0.01})
    yield Sample("nesterov", lists(), {**base, "nesterov": True, "maximize": True})
    yield Sample("dampening", lists(), {**base, "dampening": 0.3})
    yield Sample("no_momentum", lists(), {**base, "momentum": 0.0})
    yield Sample("tensor_lr", lists(), {**base, "lr": torch.tensor(0.05, device=dev)})
    yield Sample("grad_scale", lists(), {**base, "grad_scale": torch.tensor([2.0], device=dev),
                                         "found_inf": torch.zeros(1, device=dev)})


def _sgd(params: list[torch.Tensor], grads: list[torch.Tensor], buffers: list[torch.Tensor],
         **options: Any) -> list[torch.Tensor]:
    state = [[t.clone() for t in row] for row in (params, grads, buffers)]
    if options["momentum"] == 0:
        state[2] = []
    for key in ("lr", "grad_scale", "found_inf"):  # float32 in ATen's use, also beside float64 lists
        if isinstance(options.get(key), torch.Tensor):
            options = {**options, key: options[key].float()}
    torch._fused_sgd_(*state, **options)
    return [t for row in state for t in row]


register(OpCase("fused_sgd_", ("_fused_sgd_",), _sgd, _sgd_samples, FLOATS))


def _lists(count: int, **kw: Any) -> Any:
    def make(dt: torch.dtype, dev: torch.device, p: str) -> Iterator[Sample]:
        yield Sample("contiguous", tuple(_list(dt, dev, 100 * j, **kw) for j in range(count)))

    return make


def _inplace(fn: Any) -> Any:
    def call(first: list[torch.Tensor], *rest: Any) -> list[torch.Tensor]:
        target = [t.clone() for t in first]
        fn(target, *rest)
        return target

    return call


_PER_TENSOR = [0.5, -2.0, 3.0, 1.5]
FOREACH: dict[str, tuple[str, Any, Any]] = {
    "foreach_add_list_": ("_foreach_add_.List", _inplace(lambda a, b: torch._foreach_add_(a, b, alpha=-0.3)),
                          _lists(2)),
    "foreach_add_scalar_": ("_foreach_add_.Scalar", _inplace(lambda a: torch._foreach_add_(a, 1.0)), _lists(1)),
    "foreach_add_tensor_": ("_foreach_add_.Tensor",
                            _inplace(lambda a: torch._foreach_add_(a, torch.tensor(2.0, device=a[0].device), alpha=0.5)), _lists(1)),
    "foreach_sub_list": ("_foreach_sub.List", lambda a, b: torch._foreach_sub(a, b, alpha=2), _lists(2)),
    "foreach_mul_scalar_": ("_foreach_mul_.Scalar", _inplace(lambda a: torch._foreach_mul_(a, 0.9)), _lists(1)),
    "foreach_mul_list": ("_foreach_mul.List", lambda a, b: torch._foreach_mul(a, b), _lists(2)),
    "foreach_div_scalarlist_": ("_foreach_div_.ScalarList",
                                _inplace(lambda a: torch._foreach_div_(a, _PER_TENSOR)), _lists(1)),
    "foreach_lerp_scalar_": ("_foreach_lerp_.Scalar", _inplace(lambda a, b: torch._foreach_lerp_(a, b, 0.1)),
                             _lists(2)),
    "foreach_addcmul_scalar_": ("_foreach_addcmul_.Scalar",
                                _inplace(lambda a, b, c: torch._foreach_addcmul_(a, b, c, value=0.001)), _lists(3)),
    "foreach_addcdiv_scalarlist_": ("_foreach_addcdiv_.ScalarList",
                                    _inplace(lambda a, b, c: torch._foreach_addcdiv_(a, b, c, _PER_TENSOR)),
                                    _lists(3, low=0.5, high=2.0)),
    "foreach_maximum_list_": ("_foreach_maximum_.List", _inplace(lambda a, b: torch._foreach_maximum_(a, b)),
                              _lists(2)),
    "foreach_sqrt": ("_foreach_sqrt", lambda a: torch._foreach_sqrt(a), _lists(1, low=0.0, high=4.0)),
    "foreach_neg_": ("_foreach_neg_", _inplace(torch._foreach_neg_), _lists(1)),
    "foreach_zero_": ("_foreach_zero_", _inplace(torch._foreach_zero_), _lists(1)),
}
for _name, (_aten, _call, _make) in FOREACH.items():
    register(OpCase(_name, (_aten,), _call, _make, FLOATS))



def _adam_tensor_lr(dt: torch.dtype, dev: torch.device, p: str) -> Iterator[Sample]:
    for sample in _adam_samples(dt, dev, p):
        if sample.label in ("contiguous", "amsgrad"):
            yield Sample(f"tensor_lr_{sample.label}", sample.args, {**sample.kwargs, "lr": torch.tensor(0.01, device=dev)})


def _adam_lr_call(fused: Any) -> Any:
    call = _adam_call(fused)
    return lambda *lists, lr, **options: call(*lists, lr=lr.float(), **options)  # float32, as in ATen's use


register(OpCase("fused_adamw_tensor_lr", ("_fused_adamw_.tensor_lr",), _adam_lr_call(torch._fused_adamw_),
                _adam_tensor_lr, FLOATS))
register(OpCase("fused_adam_tensor_lr", ("_fused_adam_.tensor_lr",), _adam_lr_call(torch._fused_adam_),
                _adam_tensor_lr, FLOATS))
register(OpCase("fused_sgd_tensor_lr", ("_fused_sgd_.tensor_lr",), _sgd,
                lambda dt, dev, p: (s for s in _sgd_samples(dt, dev, p) if s.label == "tensor_lr"), FLOATS))
