"""The fused LLM ops of gems_core.fused against their pure-PyTorch references run in float64:
forward, backward through autograd, the custom-op contract (``torch.library.opcheck``:
schema, fake kernel, autograd registration) and tracing by ``torch.compile``.

Shapes are tiny (the CPU interpreter is slow) but not powers of two where it matters: rows of
2^k + 17 elements for the norms, an odd number of rows, partial rotary dims, GQA heads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import gems_core
from gems_core import fused

DEVICE = torch.device(gems_core.device)
#: (atol, rtol) against the float64 reference; half types round the result once more
TOLERANCES = {torch.float32: (1e-5, 1e-5), torch.float16: (2e-3, 2e-3), torch.float64: (1e-12, 1e-12)}
DTYPES = (torch.float32, torch.float16)


def _rand(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0,
          device: torch.device = DEVICE) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(device, dtype)


def _close(actual: Any, expected: Any, dtype: torch.dtype) -> None:
    atol, rtol = TOLERANCES[dtype]
    for a, e in zip(actual if isinstance(actual, tuple) else (actual,),
                    expected if isinstance(expected, tuple) else (expected,)):
        assert a.dtype == dtype
        torch.testing.assert_close(a.cpu().double(), e.to(dtype).double(), atol=atol, rtol=rtol)


def _f64(*tensors: torch.Tensor | None) -> list[Any]:
    """Float64 copies on the CPU, for the references."""
    return [t.cpu().double() if t is not None else None for t in tensors]


def _rope_tables(positions: int, rotary_dim: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / 10000 ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angles = torch.arange(positions, dtype=torch.float64)[:, None] * inv_freq
    return angles.cos().to(DEVICE, dtype), angles.sin().to(DEVICE, dtype)


# -- forward ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", ["silu", "gelu", "gelu_tanh"])
def test_gated_activation_matches_reference(name: str, dtype: torch.dtype) -> None:
    x = _rand(3, 5, 2 * 33, dtype=dtype)
    if name == "silu":
        _close(fused.silu_and_mul(x), fused.silu_and_mul_reference(*_f64(x)), dtype)
    else:
        mode = "tanh" if name == "gelu_tanh" else "none"
        _close(fused.gelu_and_mul(x, mode), fused.gelu_and_mul_reference(*_f64(x), mode), dtype)


def test_gated_activation_reads_strided_input() -> None:
    x = _rand(2 * 33, 7).t()  # (7, 66), columns strided
    _close(fused.silu_and_mul(x), fused.silu_and_mul_reference(*_f64(x)), torch.float32)


def test_gated_activation_rejects_odd_last_dim() -> None:
    with pytest.raises(ValueError, match="even"):
        fused.silu_and_mul(torch.randn(3, 5, device=DEVICE))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("affine", [True, False])
def test_skip_rms_norm_matches_reference(dtype: torch.dtype, affine: bool) -> None:
    x, r = _rand(5, 64 + 17, dtype=dtype), _rand(5, 64 + 17, dtype=dtype, seed=1)
    w = _rand(64 + 17, dtype=dtype, seed=2) if affine else None
    _close(fused.skip_rms_norm(x, r, w), fused.skip_rms_norm_reference(*_f64(x, r, w)), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_skip_layer_norm_matches_reference(dtype: torch.dtype) -> None:
    x, r = _rand(2, 3, 64 + 17, dtype=dtype), _rand(2, 3, 64 + 17, dtype=dtype, seed=1)
    w, b = _rand(64 + 17, dtype=dtype, seed=2), _rand(64 + 17, dtype=dtype, seed=3)
    _close(fused.skip_layer_norm(x, r, w, b), fused.skip_layer_norm_reference(*_f64(x, r, w, b)), dtype)


def test_skip_norm_row_longer_than_a_tile() -> None:
    x, r, w = _rand(2, 1024 + 17), _rand(2, 1024 + 17, seed=1), _rand(1024 + 17, seed=2)
    _close(fused.skip_rms_norm(x, r, w), fused.skip_rms_norm_reference(*_f64(x, r, w)), torch.float32)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("interleaved", [False, True], ids=["half", "interleaved"])
@pytest.mark.parametrize("positions", ["default", "given"])
def test_rotary_matches_reference(dtype: torch.dtype, interleaved: bool, positions: str) -> None:
    # head_dim 12 with 8 rotary dims: 4 dims pass through; 4 query heads share 2 key heads
    q, k = _rand(2, 5, 4, 12, dtype=dtype), _rand(2, 5, 2, 12, dtype=dtype, seed=1)
    cos, sin = _rope_tables(16, 8)
    pos = torch.tensor([[3, 1, 4, 1, 5], [9, 2, 6, 5, 15]], device=DEVICE) if positions == "given" else None
    got = fused.apply_rotary_position_embedding(q, k, cos, sin, pos, interleaved)
    want = fused.apply_rotary_position_embedding_reference(*_f64(q, k, cos, sin), None if pos is None else pos.cpu(),
                                                           interleaved)
    _close(got, want, dtype)


def test_rotary_reads_heads_first_layout() -> None:
    q = _rand(2, 4, 5, 8).transpose(1, 2)  # (batch, seq, heads, dim) view of (batch, heads, seq, dim)
    cos, sin = _rope_tables(5, 8)
    got = fused.apply_rotary_position_embedding(q, q, cos, sin)
    _close(got, fused.apply_rotary_position_embedding_reference(*_f64(q, q, cos, sin)), torch.float32)


def test_rotary_rejects_position_past_the_tables() -> None:
    from gems_core.ops.indexing import host_checks_indices

    if not host_checks_indices(DEVICE):
        pytest.skip("checked by a device-side assertion there, which ends the process's context")
    cos, sin = _rope_tables(4, 8)
    with pytest.raises(IndexError):
        fused.apply_rotary_position_embedding(torch.randn(1, 2, 1, 8, device=DEVICE),
                                              torch.randn(1, 2, 1, 8, device=DEVICE), cos, sin,
                                              torch.tensor([[0, 4]], device=DEVICE))


# -- backward --------------------------------------------------------------------------------


def _grads(fn: Callable[..., Any], inputs: list[torch.Tensor | None], seed: int = 7) -> list[torch.Tensor]:
    leaves = [t.detach().requires_grad_() if t is not None and t.is_floating_point() else t for t in inputs]
    outputs = fn(*leaves)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    loss = sum((o * _rand(*o.shape, dtype=o.dtype, seed=seed + i, device=o.device)).sum()
               for i, o in enumerate(outputs))
    wanted = [t for t in leaves if isinstance(t, torch.Tensor) and t.requires_grad]
    return list(torch.autograd.grad(loss, wanted))


BACKWARD_CASES = {
    "silu_and_mul": (fused.silu_and_mul, fused.silu_and_mul_reference, lambda: [_rand(3, 2 * 17)]),
    "gelu_and_mul": (fused.gelu_and_mul, fused.gelu_and_mul_reference, lambda: [_rand(3, 2 * 17)]),
    "gelu_and_mul_tanh": (lambda x: fused.gelu_and_mul(x, "tanh"),
                          lambda x: fused.gelu_and_mul_reference(x, "tanh"), lambda: [_rand(3, 2 * 17)]),
    "skip_rms_norm": (fused.skip_rms_norm, fused.skip_rms_norm_reference,
                      lambda: [_rand(5, 33), _rand(5, 33, seed=1), _rand(33, seed=2)]),
    "skip_layer_norm": (fused.skip_layer_norm, fused.skip_layer_norm_reference,
                        lambda: [_rand(5, 33), _rand(5, 33, seed=1), _rand(33, seed=2), _rand(33, seed=3)]),
    "rotary": (lambda q, k: fused.apply_rotary_position_embedding(q, k, *_rope_tables(8, 6)),
               lambda q, k: fused.apply_rotary_position_embedding_reference(
                   q, k, *_f64(*_rope_tables(8, 6, torch.float64))),
               lambda: [_rand(2, 3, 4, 8), _rand(2, 3, 2, 8, seed=1)]),
}


@pytest.mark.parametrize("name", sorted(BACKWARD_CASES))
def test_backward_matches_reference(name: str) -> None:
    op, reference, make = BACKWARD_CASES[name]
    inputs = make()
    got = _grads(op, inputs)
    want = _grads(reference, _f64(*inputs))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        # weight gradients sum over the 5 rows: one more rounding per row
        torch.testing.assert_close(g.cpu().double(), w, atol=1e-5, rtol=1e-5)


def test_skip_rms_norm_backward_without_residual_use() -> None:
    """Only the normed output feeds the loss: the residual output's gradient is absent."""
    x, r, w = _rand(4, 33), _rand(4, 33, seed=1), _rand(33, seed=2)
    got = _grads(lambda *a: fused.skip_rms_norm(*a)[0], [x, r, w])
    want = _grads(lambda *a: fused.skip_rms_norm_reference(*a)[0], _f64(x, r, w))
    for g, w_ in zip(got, want):
        torch.testing.assert_close(g.cpu().double(), w_, atol=1e-5, rtol=1e-5)


# -- the custom-op contract and torch.compile ------------------------------------------------


OPCHECK_CASES = {
    "silu_and_mul": lambda: (torch.ops.gems.silu_and_mul.default, (_rand(2, 6),)),
    "gelu_and_mul": lambda: (torch.ops.gems.gelu_and_mul.default, (_rand(2, 6), "tanh")),
    "skip_rms_norm": lambda: (torch.ops.gems.skip_rms_norm.default, (_rand(3, 9), _rand(3, 9, seed=1), _rand(9, seed=2), 1e-6)),
    "skip_layer_norm": lambda: (torch.ops.gems.skip_layer_norm.default,
                                (_rand(3, 9), _rand(3, 9, seed=1), _rand(9, seed=2), _rand(9, seed=3), 1e-5)),
    "rotary": lambda: (torch.ops.gems.apply_rotary_position_embedding.default,
                       (_rand(1, 3, 2, 4), _rand(1, 3, 1, 4, seed=1), *_rope_tables(3, 4), None, True)),
}


@pytest.mark.parametrize("name", sorted(OPCHECK_CASES))
def test_custom_op_contract(name: str) -> None:
    fused.load()
    op, args = OPCHECK_CASES[name]()
    args = tuple(a.requires_grad_() if isinstance(a, torch.Tensor) else a for a in args)
    torch.library.opcheck(op, args, test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))


def test_torch_compile_traces_fused_ops_forward_and_backward() -> None:
    cos, sin = _rope_tables(4, 8)

    def block(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        normed, residual = fused.skip_rms_norm(x, residual, w)
        q, k = fused.apply_rotary_position_embedding(normed.view(1, 4, 2, 8), normed.view(1, 4, 2, 8), cos, sin)
        return fused.silu_and_mul(torch.cat([q, k], -1)).sum() + fused.gelu_and_mul(residual).sum()

    inputs = [_rand(4, 16), _rand(4, 16, seed=1), _rand(16, seed=2)]
    torch._dynamo.reset()
    compiled = torch.compile(block, backend="aot_eager", fullgraph=True)
    eager_grads = _grads(block, inputs)
    compiled_grads = _grads(compiled, inputs)
    for g, e in zip(compiled_grads, eager_grads):
        torch.testing.assert_close(g, e)


def test_tensors_off_the_backend_device_use_the_references():
    """A tensor the backend's kernels cannot read (another device type) goes to the PyTorch
    reference through the public functions, and is refused with a clear error by the ops'
    own implementations: never a launch on foreign memory."""
    from gems_core.fused import _device

    x = torch.empty(3, 8, device="meta")
    assert fused.silu_and_mul(x).shape == (3, 4)
    assert fused.gelu_and_mul(x, "tanh").shape == (3, 4)
    normed, h = fused.skip_rms_norm(x, x, torch.empty(8, device="meta"))
    assert normed.shape == h.shape == (3, 8)
    assert _device.foreign(x) and not _device.foreign(_rand(2))
    with pytest.raises(RuntimeError, match="gems.fused.silu_and_mul: tensors on meta"):
        _device.check("silu_and_mul", _rand(2), x)
