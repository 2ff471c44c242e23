"""Triton's interpreter before 3.9 converts a scalar argument used as an index (a runtime loop
bound) with ``int()`` of a one-element 1-d array, which NumPy 2.4 refuses, and a Python bool
argument to an int32 array its own check refuses, and has no bf16 constants; gems_core.compat
brings these to 3.9's handling so that the CPU backend's kernels run on those Triton releases
too (triton >= 3.6 is allowed).
The older behaviour is put back in a subprocess, and a reduction (whose kernel loops to a
runtime bound) and ops with bool scalars must still run and match ATen."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import gems_core

SCRIPT = r"""
import torch
from triton.runtime import interpreter

triton_patch = interpreter._patch_lang_tensor


def before_3_9(tensor, scope):  # Triton 3.6-3.8: int() of the scalar's 1-d array
    triton_patch(tensor, scope)
    scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data))


triton_cvt = interpreter._implicit_cvt


def cvt_before_3_9(arg):  # Triton 3.6-3.8: a bool became an int32 array typed int1
    if isinstance(arg, bool):
        import numpy as np
        import triton.language as tl

        return tl.tensor(interpreter.TensorHandle(np.array([arg], dtype=np.int32), tl.int1), tl.int1)
    return triton_cvt(arg)


interpreter._patch_lang_tensor = before_3_9
interpreter._implicit_cvt = cvt_before_3_9
if hasattr(interpreter.InterpreterBuilder, "get_bf16"):
    del interpreter.InterpreterBuilder.get_bf16  # Triton 3.6-3.8: no bf16 constants
import gems_core

x = torch.randn(10, 300, generator=torch.Generator().manual_seed(0))
mask = x[0] > 0
with gems_core.use_gems():
    got = x.sum(1)
    either = mask | False
    picked = torch.where(mask, mask, True)
    halves = torch.where(mask, x[0].bfloat16(), 3)
torch.testing.assert_close(got.double(), x.double().sum(1), rtol=1e-5, atol=1e-4)
assert torch.equal(either, mask) and torch.equal(picked, torch.ones_like(mask))
assert torch.equal(halves, torch.where(mask, x[0].bfloat16(), 3))
# (Triton 3.9 passes these bools as constants; where it does not, the conversion serves them)
converted = interpreter._implicit_cvt(True)
assert converted.handle.data.dtype == bool and bool(converted.handle.data[0])
print("ok")
"""


@pytest.mark.skipif(gems_core.device != "cpu", reason="the CPU backend's interpreter")
def test_a_runtime_loop_bound_runs_in_an_interpreter_that_converts_with_int() -> None:
    try:
        int(np.array([5]))
    except TypeError:
        pass
    else:
        pytest.skip(f"NumPy {np.__version__} still converts one-element arrays with int()")
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600,
                          check=False, env={**os.environ, "GEMS_DEVICE": "cpu"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")


@pytest.mark.skipif(gems_core.device != "cpu", reason="the CPU backend's interpreter")
def test_overflow_checks_are_off_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The interpreter's check of every 32-bit integer operation for overflow (compiled
    kernels have it only with debug) is off on the CPU backend; GEMS_INTERPRETER_OVERFLOW_CHECKS=1
    turns it on, and a kernel still runs right under it."""
    import torch
    from triton.runtime import interpreter

    from gems_core import compat

    gems_core.runtime.current()
    assert interpreter.interpreter_builder.options.sanitize_overflow is False
    monkeypatch.setenv("GEMS_INTERPRETER_OVERFLOW_CHECKS", "1")
    compat._interpreter_overflow_checks()
    try:
        assert interpreter.interpreter_builder.options.sanitize_overflow is True
        x = torch.arange(12, dtype=torch.float32).view(3, 4)
        with gems_core.use_gems(include=["sum"]):
            got = x.sum(1)
        assert torch.equal(got, x.double().sum(1).float())
    finally:
        monkeypatch.delenv("GEMS_INTERPRETER_OVERFLOW_CHECKS")
        compat._interpreter_overflow_checks()
    assert interpreter.interpreter_builder.options.sanitize_overflow is False


@pytest.mark.skipif(gems_core.device != "cpu", reason="the CPU backend's interpreter")
def test_reductions_of_declared_combines_are_one_numpy_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """gems' sum, max, min and product combines (compat.reduce_in_numpy) are reduced by one
    NumPy call in the interpreter, never its element-by-element loop: the results match
    float64 ATen (integer products: ATen's, wrapping), and NaN propagates through max and min."""
    import torch
    from triton.runtime import interpreter

    def loop(self, input):  # noqa: ANN001, ANN202 - the interpreter's fallback, refused here
        raise AssertionError("the interpreter reduced element by element")

    monkeypatch.setattr(interpreter.ReduceOps, "generic_reduce", loop)
    torch.manual_seed(0)
    x = torch.randn(37, 300)
    x[5, 17] = float("nan")
    ints = torch.randint(1, 4, (9, 40), dtype=torch.int32) * (torch.randint(0, 2, (9, 40), dtype=torch.int32) * 2 - 1)
    with gems_core.use_gems(include=["sum", "sum.dim_IntList", "amax", "amin", "prod.dim_int", "softmax"]):
        got = [x.sum(1), x.amax(1), x.amin(0), x.prod(1), ints.prod(1), torch.softmax(x[6:], 1)]
    want = [x.double().sum(1), x.double().amax(1), x.double().amin(0), x.double().prod(1),
            ints.prod(1), torch.softmax(x[6:].double(), 1)]  # an int64 product, wrapping
    for g, w in zip(got, want):
        if g.is_floating_point():
            torch.testing.assert_close(g.double(), w, atol=1e-5, rtol=1e-5, equal_nan=True)
        else:
            assert torch.equal(g, w)
    assert got[1][5].isnan() and got[2][17].isnan() and not got[1][6].isnan()
