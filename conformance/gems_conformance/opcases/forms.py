"""In-place, out= and Scalar forms of ops whose main form has its case in another file.

Each case calls its ATen overload directly with arguments built from the overload's schema:
tensors from the shared elementwise samples, the entry's values for other arguments,
``SCALAR`` for a Scalar without a default, and fresh empty ``out`` tensors (the op resizes
them) of the dtypes ATen's meta kernels give for the functional form.
An in-place form works on a copy of its first input and returns it; its samples are those
whose first input already has the broadcast shape. Backward forms get no broadcast samples."""

from __future__ import annotations

from typing import Any

import torch

from .. import samples
from ..cases import OpCase, nan_input_takes_the_upper_branch, register
from .optimizer import _PER_TENSOR, _lists

SCALAR = 2  # exact in every dtype these cases run, and no divisor of zero
F32 = (torch.float32,)
F32_I32 = (torch.float32, torch.int32)
I32 = (torch.int32,)


def _overload(name: str) -> Any:
    packet, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload or "default")


def _functional(op: Any) -> Any:
    """The overload of ``op``'s packet that takes the same inputs and returns new tensors."""
    inputs = [(a.name, str(a.type)) for a in op._schema.arguments if not a.is_out]
    packet = getattr(torch.ops.aten, op._schema.name.split("::")[1].rstrip("_"))
    for name in packet.overloads():
        candidate = getattr(packet, name)
        arguments = candidate._schema.arguments
        if not any(a.is_out for a in arguments) and [(a.name, str(a.type)) for a in arguments] == inputs:
            return candidate
    raise LookupError(f"no functional form of {op._schema.name}.{op._overloadname}")


#: a schema value: the next sample tensor, for an optional Tensor argument
TENSOR = object()
_INPUTS = ("Tensor", "List[Tensor]")


def _is_input(argument: Any, values: dict[str, Any]) -> bool:
    """Does this schema argument take the next sample input?"""
    if argument.name in values:
        return values[argument.name] is TENSOR
    return str(argument.type) in _INPUTS


def _arguments(op: Any, inputs: tuple[Any, ...], values: dict[str, Any]) -> dict[str, Any]:
    remaining = iter(inputs)
    kwargs: dict[str, Any] = {}
    for argument in op._schema.arguments:
        kind = str(argument.type)
        if argument.is_out:
            continue
        if _is_input(argument, values):
            kwargs[argument.name] = next(remaining)
        elif isinstance(values.get(argument.name), torch.Tensor):  # a 0-d operand, on the inputs' device
            first = inputs[0][0] if isinstance(inputs[0], list) else inputs[0]
            kwargs[argument.name] = values[argument.name].to(first.device)
        elif argument.name in values:
            kwargs[argument.name] = values[argument.name]
        elif kind == "number" and not argument.has_default_value():
            kwargs[argument.name] = SCALAR
        elif not argument.has_default_value():
            raise ValueError(f"{op}: give a value for {argument.name}")
    return kwargs


def _copy(value: Any) -> Any:
    return [t.clone() for t in value] if isinstance(value, list) else value.clone()


def _call(name: str, values: dict[str, Any]) -> Any:
    op = _overload(name)
    outs = [a.name for a in op._schema.arguments if a.is_out]
    inplace = op._schema.name.endswith("_")

    def call(*inputs: Any) -> Any:
        kwargs = _arguments(op, inputs, values)
        if inplace:
            kwargs["self"] = _copy(kwargs["self"])
            op(**kwargs)
            return kwargs["self"]
        if outs:
            meta = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
            shapes = _functional(op)(**meta)
            shapes = shapes if isinstance(shapes, tuple) else (shapes,)
            device = inputs[0].device
            kwargs.update({o: torch.empty(0, dtype=s.dtype, device=device) for o, s in zip(outs, shapes)})
            op(**kwargs)
            return tuple(kwargs[o] for o in outs) if len(outs) > 1 else kwargs[outs[0]]
        return op(**kwargs)

    return call


def _samples(name: str, values: dict[str, Any], options: dict[str, Any]) -> Any:
    op = _overload(name)
    count = sum(_is_input(a, values) for a in op._schema.arguments if not a.is_out)
    if name.startswith("_foreach"):
        return _lists(count)
    inplace = op._schema.name.endswith("_")
    broadcasts = "_backward" not in name  # ATen's CPU backward kernels take equal shapes only
    skip = options.pop("skip", ())

    def make(dtype: torch.dtype, device: torch.device, profile: str) -> Any:
        for sample in samples.elementwise(count, dtype, device, profile, **options):
            shapes = [a.shape for a in sample.args]
            if inplace and torch.broadcast_shapes(*shapes) != shapes[0]:
                continue
            if sample.label not in skip and (broadcasts or sample.label != "broadcast"):
                yield sample

    return make


def form(name: str, dtypes: tuple[torch.dtype, ...], **values: Any) -> None:
    """Register the case of overload ``name``. ``values``: schema arguments (``TENSOR``: an
    optional Tensor that takes a sample tensor), and the sample options ``low``, ``high``,
    ``special`` (of :func:`samples.elementwise`) and ``skip`` (labels left out);
    ``pieces_chosen_by``: the position among the sample tensors of the input a piecewise
    backward formula branches on (:func:`~gems_conformance.cases.nan_input_takes_the_upper_branch`)."""
    options = {k: values.pop(k) for k in ("low", "high", "special", "skip") if k in values}
    chooser = values.pop("pieces_chosen_by", None)
    case = "form_" + name.replace(".", "_")  # add.Scalar_out: form_add_Scalar_out
    call = _call(name, values)
    reference = None if chooser is None else nan_input_takes_the_upper_branch(call, chooser)
    register(OpCase(case, (name,), call, _samples(name, values, options), dtypes, reference=reference))


POSITIVE = {"low": 0.5, "high": 4.0}

for _name in ("add.Scalar", "add.Scalar_out", "add.out", "add_.Scalar", "sub.Scalar", "sub.Scalar_out",
              "sub.out", "sub_.Scalar", "sub_.Tensor", "mul.Scalar", "mul.Scalar_out", "mul_.Scalar",
              "mul_.Tensor", "neg.out", "neg_", "minimum.out", "clamp_max", "clamp_max.out", "clamp_max_",
              "clamp_min.out", "clamp_min_", "clamp_max.Tensor_out", "clamp_max_.Tensor", "clamp_min.Tensor",
              "clamp_min.Tensor_out", "clamp_min_.Tensor"):
    form(_name, F32_I32)
for _name in ("div.Scalar", "div.Scalar_out", "div.out", "div_.Scalar", "div_.Tensor", "reciprocal.out",
              "floor_divide.out", "floor_divide.Scalar_out", "floor_divide_.Scalar", "remainder.Tensor_out",
              "remainder.Scalar_out", "remainder_.Scalar", "remainder.Scalar_Tensor_out", "pow.Scalar_out",
              "pow.Tensor_Scalar_out", "pow_.Scalar"):
    form(_name, F32, **POSITIVE)
for _name in ("div.Scalar_mode", "div.Scalar_mode_out", "div.out_mode", "div_.Scalar_mode", "div_.Tensor_mode"):
    form(_name, F32, rounding_mode="floor", **POSITIVE)
for _name in ("sin.out", "cos.out", "erf.out", "isinf.out", "isnan.out", "isneginf.out", "isposinf.out",
              "copysign.Scalar_out", "copysign_.Scalar", "copysign_.Tensor", "hardsigmoid.out", "hardsigmoid_",
              "hardswish.out", "softplus.out", "softshrink.out", "elu.out", "threshold.out", "hardtanh_",
              "sigmoid_backward.grad_input", "tanh_backward.grad_input", "silu_backward.grad_input",
              "gelu_backward.grad_input", "hardsigmoid_backward.grad_input",
              "softplus_backward.grad_input", "softshrink_backward.grad_input",
              "threshold_backward.grad_input", "lerp.Scalar_out", "lerp.Tensor_out", "lerp_.Tensor",
              "addcmul.out", "addcdiv_"):
    form(_name, F32)
form("hardtanh_backward.grad_input", F32, min_val=-1.0, max_val=1.0)
form("elu_backward.grad_input", F32, is_result=False, pieces_chosen_by=1)
form("hardswish_backward.out", F32, pieces_chosen_by=1)
form("mse_loss.out", F32, reduction=1)
form("mse_loss_backward.grad_input", F32, reduction=0)
for _cmp in ("eq", "ne", "lt", "le", "gt", "ge"):
    for _name in (f"{_cmp}.Scalar", f"{_cmp}.Scalar_out", f"{_cmp}.Tensor_out", f"{_cmp}_.Scalar",
                  f"{_cmp}_.Tensor"):
        form(_name, F32_I32)
for _bit in ("and", "or", "xor"):
    for _name in (f"bitwise_{_bit}.Scalar", f"bitwise_{_bit}.Scalar_Tensor", f"bitwise_{_bit}.Scalar_out",
                  f"bitwise_{_bit}.Scalar_Tensor_out", f"bitwise_{_bit}.Tensor_out", f"bitwise_{_bit}_.Scalar",
                  f"bitwise_{_bit}_.Tensor"):
        form(_name, I32)
for _shift in ("left", "right"):
    for _name in (f"bitwise_{_shift}_shift.Scalar_Tensor", f"bitwise_{_shift}_shift.Scalar_Tensor_out",
                  f"bitwise_{_shift}_shift.Tensor_Scalar_out", f"bitwise_{_shift}_shift.Tensor_out",
                  f"bitwise_{_shift}_shift_.Tensor_Scalar"):
        form(_name, I32, low=0, high=8)
for _name in ("bitwise_not.out", "bitwise_not_", "logical_not.out", "logical_not_", "logical_and.out",
              "logical_xor.out"):
    form(_name, I32)
form("clamp.Tensor_out", F32, min=TENSOR, max=TENSOR)
form("max.unary_out", F32, skip=("empty",))
form("min.dim_min", F32, dim=-1, special=False)
for _name in ("all.out", "any.out"):
    form(_name, (torch.float32, torch.bool), dim=-1)

# multi-tensor forms, on the optimizer cases' tensor lists
for _name in ("_foreach_abs", "_foreach_abs_", "_foreach_exp", "_foreach_exp_", "_foreach_neg",
              "_foreach_reciprocal", "_foreach_reciprocal_", "_foreach_sqrt_", "_foreach_add.List",
              "_foreach_add.Scalar", "_foreach_div.List", "_foreach_div.Scalar", "_foreach_div_.List",
              "_foreach_div_.Scalar", "_foreach_maximum.List", "_foreach_maximum.Scalar",
              "_foreach_maximum_.Scalar", "_foreach_minimum.List", "_foreach_minimum.Scalar",
              "_foreach_minimum_.List", "_foreach_minimum_.Scalar", "_foreach_mul.Scalar", "_foreach_mul_.List",
              "_foreach_sub.Scalar", "_foreach_sub_.List", "_foreach_sub_.Scalar", "_foreach_addcdiv.Scalar",
              "_foreach_addcdiv_.Scalar", "_foreach_addcmul.Scalar", "_foreach_lerp.Scalar"):
    form(_name, F32)
for _name in ("_foreach_add.ScalarList", "_foreach_add_.ScalarList", "_foreach_div.ScalarList",
              "_foreach_mul.ScalarList", "_foreach_mul_.ScalarList", "_foreach_sub.ScalarList",
              "_foreach_sub_.ScalarList", "_foreach_addcdiv.ScalarList", "_foreach_addcmul.ScalarList",
              "_foreach_addcmul_.ScalarList"):
    form(_name, F32, scalars=_PER_TENSOR)
for _name in ("_foreach_lerp.ScalarList", "_foreach_lerp_.ScalarList"):
    form(_name, F32, weight=_PER_TENSOR)
for _name in ("_foreach_add.Tensor", "_foreach_div.Tensor", "_foreach_div_.Tensor", "_foreach_mul.Tensor",
              "_foreach_mul_.Tensor"):
    form(_name, F32, other=torch.tensor(2.0))
register(OpCase("form_native_dropout_backward", ("native_dropout_backward",),
                lambda dy, m: torch.ops.aten.native_dropout_backward(dy, m > 0, 2.0),
                lambda dt, dev, p: (s for s in samples.elementwise(2, dt, dev, p) if s.label != "broadcast"), F32))
