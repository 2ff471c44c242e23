"""Random ops on gems (gems_core/ops/random.py): served by gems, reproducible under
torch.manual_seed, different on successive calls, and drawn from the right distribution.

Statistical checks are sized so they cannot pass by accident: the Kolmogorov-Smirnov
statistic must stay below its 1% critical value 1.63 / sqrt(n), and means, variances and
rates within 5 standard errors of the truth. A negative control shows the same KS check
rejects samples of the wrong distribution at this n. Seeds are fixed, so the checks are
deterministic."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from gems_conformance.routing import RouteWatch, implementations

import gems_core

N = 20_000  # KS critical value 0.0115: a distribution off by ~1% in CDF is caught
RANDOM_OPS = ("uniform_", "normal_", "normal", "exponential_", "bernoulli_", "multinomial",
              "native_dropout", "native_dropout_backward", "dropout")


@pytest.fixture(autouse=True)
def _on_the_gems_device() -> Iterator[None]:
    """Factories make tensors on the selected backend's device (gems serves only its own)."""
    with torch.device(gems_core.device):
        yield


@contextmanager
def gems_served(*overloads: str) -> Iterator[None]:
    """gems enabled for the random ops; asserts one of ``overloads`` ran on gems."""
    codes = frozenset().union(*implementations(overloads).values())
    assert codes, f"gems implements none of {overloads}"
    with RouteWatch(codes) as watch, gems_core.use_gems(include=RANDOM_OPS):
        yield
    assert watch.hit, f"{overloads} did not run on gems"


def ks_statistic(samples: torch.Tensor, cdf: Callable[[torch.Tensor], torch.Tensor]) -> float:
    """sup |F_n(x) - F(x)| of ``samples`` against the continuous ``cdf``."""
    x, _ = samples.double().flatten().sort()
    n = x.numel()
    f = cdf(x)
    upper = torch.arange(1, n + 1, dtype=torch.float64) / n - f
    lower = f - torch.arange(0, n, dtype=torch.float64) / n
    return float(torch.maximum(upper, lower).max())


def ks_passes(samples: torch.Tensor, cdf: Callable[[torch.Tensor], torch.Tensor]) -> bool:
    return ks_statistic(samples, cdf) < 1.63 / math.sqrt(samples.numel())


def uniform_cdf(a: float, b: float) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda x: ((x - a) / (b - a)).clamp(0, 1)


def normal_cdf(mean: float, std: float) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda x: 0.5 * (1 + torch.erf((x - mean) / (std * math.sqrt(2))))


def exponential_cdf(rate: float) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda x: 1 - torch.exp(-rate * x.clamp_min(0))


def assert_moments(x: torch.Tensor, mean: float, var: float, fourth_central: float) -> None:
    """Sample mean and variance within 5 standard errors (var(s^2) ~ (mu4 - var^2) / n)."""
    n = x.numel()
    x = x.double()
    assert abs(float(x.mean()) - mean) < 5 * math.sqrt(var / n)
    assert abs(float(x.var()) - var) < 5 * math.sqrt((fourth_central - var**2) / n)


# -- the distributions -----------------------------------------------------------------------


def test_rand_is_uniform() -> None:
    torch.manual_seed(0)
    with gems_served("uniform_"):
        x = torch.rand(N)
    assert float(x.min()) >= 0 and float(x.max()) < 1
    assert_moments(x, 0.5, 1 / 12, 1 / 80)
    assert ks_passes(x, uniform_cdf(0, 1))


def test_uniform_range() -> None:
    torch.manual_seed(1)
    with gems_served("uniform_"):
        x = torch.empty(N).uniform_(-2, 5)
    assert float(x.min()) >= -2 and float(x.max()) < 5
    assert ks_passes(x, uniform_cdf(-2, 5))


def test_randn_is_standard_normal() -> None:
    torch.manual_seed(0)
    with gems_served("normal_"):
        x = torch.randn(N)
    assert_moments(x, 0.0, 1.0, 3.0)
    assert ks_passes(x, normal_cdf(0, 1))


def test_normal_mean_std() -> None:
    torch.manual_seed(2)
    with gems_served("normal_"):
        x = torch.empty(N, dtype=torch.float64).normal_(3.0, 0.5)
    assert_moments(x, 3.0, 0.25, 3 * 0.5**4)
    assert ks_passes(x, normal_cdf(3.0, 0.5))


def test_exponential() -> None:
    torch.manual_seed(3)
    with gems_served("exponential_"):
        x = torch.empty(N).exponential_(2.0)
    assert float(x.min()) >= 0
    assert_moments(x, 0.5, 0.25, 9 / 2.0**4)
    assert ks_passes(x, exponential_cdf(2.0))


@pytest.mark.parametrize(
    "draw,mean,std",
    [
        (lambda: torch.normal(torch.full((N,), 2.0), 3.0), 2.0, 3.0),
        (lambda: torch.normal(-1.0, torch.full((N,), 0.5)), -1.0, 0.5),
        (lambda: torch.normal(torch.zeros(N), torch.full((N,), 2.0)), 0.0, 2.0),
        (lambda: torch.normal(1.0, 2.0, (N,), device=gems_core.device), 1.0, 2.0),  # not a default-device factory
    ],
    ids=["Tensor_float", "float_Tensor", "Tensor_Tensor", "float_float"],
)
def test_normal_overloads(draw: Callable[[], torch.Tensor], mean: float, std: float) -> None:
    torch.manual_seed(4)
    with gems_served("normal.Tensor_float", "normal.float_Tensor", "normal.Tensor_Tensor", "normal_"):
        x = draw()
    assert ks_passes(x, normal_cdf(mean, std))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64], ids=str)
def test_narrow_and_wide_dtypes(dtype: torch.dtype) -> None:
    torch.manual_seed(5)
    with gems_served("uniform_", "normal_"):
        u = torch.rand(4096, dtype=dtype)
        n = torch.randn_like(u)
    assert u.dtype == n.dtype == dtype
    assert float(u.min()) >= 0 and float(u.max()) < 1  # rounding up to 1 is folded back to 0
    assert ks_passes(n, normal_cdf(0, 1))


def test_non_contiguous_fill() -> None:
    base = torch.zeros(64, 64)
    with gems_served("uniform_"):
        base[:, ::2].uniform_(1, 2)
    assert bool((base[:, ::2] >= 1).all()) and bool((base[:, 1::2] == 0).all())


def test_bernoulli_rate() -> None:
    torch.manual_seed(6)
    with gems_served("bernoulli_.float"):
        x = torch.empty(N).bernoulli_(0.3)
    assert set(x.unique().tolist()) <= {0.0, 1.0}
    assert abs(float(x.mean()) - 0.3) < 5 * math.sqrt(0.3 * 0.7 / N)


# -- the negative control --------------------------------------------------------------------


def test_ks_check_rejects_the_wrong_distribution() -> None:
    """At this n the check is not vacuous: uniform samples tested as normal, and normal samples
    with a standard deviation 5% off, are both rejected."""
    torch.manual_seed(7)
    with gems_served("uniform_", "normal_"):
        uniform = torch.rand(N) * math.sqrt(12) - math.sqrt(3)  # mean 0, variance 1
        normal = torch.randn(N)
    assert ks_passes(normal, normal_cdf(0, 1))
    assert not ks_passes(uniform, normal_cdf(0, 1))
    assert not ks_passes(normal, normal_cdf(0, 1.05))


# -- reproducibility -------------------------------------------------------------------------


DRAWS: dict[str, Callable[[], Any]] = {
    "rand": lambda: torch.rand(1000),
    "randn": lambda: torch.randn(1000),
    "rand_like": lambda: torch.rand_like(torch.empty(3, 5)),
    "randn_like": lambda: torch.randn_like(torch.empty(3, 5)),
    "exponential_": lambda: torch.empty(1000).exponential_(),
    "multinomial": lambda: torch.multinomial(torch.ones(2, 50), 20, replacement=True),
    "multinomial_no_replacement": lambda: torch.multinomial(torch.ones(2, 50), 20),
    "dropout": lambda: F.dropout(torch.ones(1000), 0.5),
}


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_reproducible_under_manual_seed_and_successive_calls_differ(name: str) -> None:
    with gems_core.use_gems(include=RANDOM_OPS):
        torch.manual_seed(123)
        first, second = DRAWS[name](), DRAWS[name]()
        torch.manual_seed(123)
        again = DRAWS[name]()
    assert torch.equal(first, again)
    assert not torch.equal(first, second)


def test_explicit_generator_is_used() -> None:
    with gems_core.use_gems(include=RANDOM_OPS):
        a = torch.empty(100).uniform_(generator=torch.Generator(gems_core.device).manual_seed(9))
        b = torch.empty(100).uniform_(generator=torch.Generator(gems_core.device).manual_seed(9))
    assert torch.equal(a, b)


# -- multinomial -----------------------------------------------------------------------------


def test_multinomial_with_replacement_frequencies() -> None:
    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3], [1.0, 1.0, 1.0, 1.0]])  # rows need not sum to 1
    torch.manual_seed(8)
    with gems_served("multinomial"):
        draws = torch.multinomial(probs, N, replacement=True)
    assert draws.shape == (2, N) and draws.dtype == torch.int64
    for row, p in zip(draws, probs / probs.sum(-1, keepdim=True)):
        freq = torch.bincount(row, minlength=4).double() / N
        bound = 5 * torch.sqrt(p * (1 - p) / N) + 1e-12
        assert bool(((freq - p).abs() <= bound).all()), (freq, p)
    assert not bool((draws[0] == 1).any())  # zero weight is never drawn


def test_multinomial_without_replacement() -> None:
    probs = torch.tensor([0.5, 0.0, 0.2, 0.2, 0.1])
    torch.manual_seed(9)
    with gems_served("multinomial"):
        draws = torch.multinomial(probs.expand(400, 5), 4)  # 400 independent rows
    assert all(len(set(row.tolist())) == 4 for row in draws)  # distinct within a draw
    assert not bool((draws == 1).any())
    first = torch.bincount(draws[:, 0], minlength=5).double() / 400  # the first pick follows p
    assert bool(((first - probs.double()).abs() <= 5 * torch.sqrt(probs * (1 - probs) / 400) + 1e-12).all())


def test_one_multinomial_draw_per_row_follows_the_weights() -> None:
    """One draw (a sampling step's call): a short row, every row of an expanded batch, and long
    rows whose categories are split among programs (chunks of 1024 columns) all draw each
    category in proportion to its weight, never a zero one; the 1-d form gives one index."""
    torch.manual_seed(11)
    short = torch.tensor([0.1, 0.0, 0.6, 0.3])
    long = torch.zeros(2500)
    long[[3, 1500, 2499]] = torch.tensor([0.2, 0.5, 0.3])  # in the first, second and last chunk
    for probs, rows, hot in ((short, 240, [0, 2, 3]), (long, 60, [3, 1500, 2499])):
        with gems_served("multinomial"):
            draws = torch.multinomial(probs.expand(rows, -1), 1)
        assert draws.shape == (rows, 1) and draws.dtype == torch.int64
        freq = torch.bincount(draws[:, 0], minlength=probs.numel()).double() / rows
        p = probs.double() / probs.sum()
        assert set(torch.nonzero(freq).flatten().tolist()) <= set(hot)
        bound = 5 * torch.sqrt(p * (1 - p) / rows) + 1e-12
        assert bool(((freq - p).abs() <= bound).all())
    with gems_served("multinomial"):
        one = torch.multinomial(torch.tensor([0.0, 2.0, 0.0]), 1, replacement=True)
    assert one.shape == (1,) and one.item() == 1


@pytest.mark.skipif(torch.device(gems_core.device).type != "cpu",
                    reason="ATen's CUDA multinomial reports invalid probabilities with a device-side assert, "
                           "which ends the process's use of the GPU")
def test_multinomial_invalid_input_raises_atens_error() -> None:
    with gems_core.use_gems(include=RANDOM_OPS), pytest.raises(RuntimeError):
        torch.multinomial(torch.tensor([1.0, -1.0]), 1)


# -- dropout ---------------------------------------------------------------------------------


def test_dropout_mask_rate_and_scale() -> None:
    p = 0.3
    x = torch.rand(N) + 1  # no zeros of its own
    torch.manual_seed(10)
    with gems_served("native_dropout"):
        out, mask = torch.native_dropout(x, p, True)
    assert mask.dtype == torch.bool
    assert abs(1 - float(mask.double().mean()) - p) < 5 * math.sqrt(p * (1 - p) / N)
    torch.testing.assert_close(out[mask], x[mask] / (1 - p))
    assert bool((out[~mask] == 0).all())


@pytest.mark.parametrize("p", [0.0, 1.0])
def test_dropout_edge_probabilities(p: float) -> None:
    x = torch.rand(1000) + 1
    with gems_core.use_gems(include=RANDOM_OPS):
        out, mask = torch.native_dropout(x, p, True)
        functional = F.dropout(x, p)
    expected = x if p == 0 else torch.zeros_like(x)
    assert torch.equal(out, expected) and torch.equal(functional, expected)
    assert bool(mask.all()) if p == 0 else not bool(mask.any())


def test_dropout_eval_is_identity() -> None:
    x = torch.rand(100)
    with gems_core.use_gems(include=RANDOM_OPS):
        out, mask = torch.native_dropout(x, 0.5, False)
        assert torch.equal(F.dropout(x, 0.5, training=False), x)
    assert torch.equal(out, x) and bool(mask.all())


def test_dropout_backward_uses_the_forward_mask() -> None:
    p = 0.4
    x = (torch.rand(4000) + 1).requires_grad_()
    torch.manual_seed(11)
    with gems_served("dropout", "native_dropout_backward"):
        y = F.dropout(x, p)
        (grad,) = torch.autograd.grad(y, x, torch.full_like(y, 2.0))
    kept = y != 0
    torch.testing.assert_close(grad, torch.where(kept, 2.0 / (1 - p), 0.0))


def test_fill_kernel_compiles_for_a_gpu_target() -> None:
    """Compiled kernels may read no global but constexprs (the interpreter reads any):
    every distribution of the fill kernel, and the dropout kernel, compile ahead of time for
    sm_90, in a child process (this one has run the interpreter)."""
    code = textwrap.dedent('''
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        from gems_core.ops import random as R
        sig = {"out_ptr": "*fp32", "n": "i32", "seed_lo": "i32", "seed_hi": "i32", "offset_lo": "i32",
               "offset_hi": "i32", "a": "fp32", "b": "fp32", "DIST": "constexpr", "BLOCK": "constexpr"}
        for dist in (R.UNIFORM, R.NORMAL, R.EXPONENTIAL, R.BERNOULLI):
            triton.compile(ASTSource(R._fill_kernel, sig, {(8,): dist, (9,): 256}), target=GPUTarget("cuda", 90, 32))
        drop = {"x_ptr": "*bf16", "out_ptr": "*bf16", "mask_ptr": "*i1", "n": "i32", "p": "fp32", "scale": "fp32",
                "seed_lo": "i32", "seed_hi": "i32", "offset_lo": "i32", "offset_hi": "i32", "BLOCK": "constexpr"}
        triton.compile(ASTSource(R._dropout_kernel, drop, {(10,): 1024}), target=GPUTarget("cuda", 90, 32))
        print("compiled")
    ''')
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "compiled" in done.stdout, done.stderr[-3000:]


def test_offsets_past_32_bits_keep_one_kernel_and_one_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """A generator's offset grows by every call's counters; past 2^31 and 2^32 the kernels
    take the same argument types (their 32-bit halves), so nothing compiles again, and the
    values stay a function of (seed, offset): a call at an offset past 2^32 repeats when the
    offset is set back, and differs from the call at the offset's low word alone."""
    from gems_core.ops import random as R

    assert R._halves(5, 2**40 + 7) == (5, 0, 7, 256)
    assert R._halves(2**63 + 2**31, 2**32 - 1) == (-(2**31), -(2**31), -1, 0)
    launched: list[tuple[int, ...]] = []
    real = R._dropout

    def spy(grid: Any, *args: Any, **kwargs: Any) -> Any:
        launched.append(tuple(type(a).__name__ + ("32" if isinstance(a, int) and -2**31 <= a < 2**31 else "")
                              for a in args))
        return real(grid, *args, **kwargs)

    monkeypatch.setattr(R, "_dropout", spy)
    x = torch.rand(3000) + 1
    states = iter([(11, 2**40 + 16), (11, 2**40 + 16), (11, 16), (11, 2**31 + 4)])
    monkeypatch.setattr(R, "_seed_and_offset", lambda device, counters, generator: (*next(states), True))
    with gems_served("native_dropout"):
        masks = [torch.native_dropout(x, 0.5, True)[1] for _ in range(4)]
    assert torch.equal(masks[0], masks[1]) and not torch.equal(masks[0], masks[2])
    assert len(set(launched)) == 1  # the same argument types at every offset


def test_threads_drawing_at_once_never_share_counters() -> None:
    """A device generator's offset is read and advanced under a lock: 8 threads drawing 200
    times each from one generator get 1600 disjoint counter ranges. (The stand-in yields
    the thread between the read and the write, where an unlocked draw would interleave.)"""
    import threading
    import time

    from gems_core.ops import random as R

    class DeviceGenerator:
        device = torch.device("meta")

        def __init__(self) -> None:
            self.offset = 0

        def get_offset(self) -> int:
            return self.offset

        def set_offset(self, offset: int) -> None:
            time.sleep(0)
            self.offset = offset

        def initial_seed(self) -> int:
            return 7

    gen = DeviceGenerator()
    drawn: list[int] = []

    def draw() -> None:
        for _ in range(200):
            drawn.append(R._seed_and_offset(torch.device("meta"), 8, gen)[1])  # type: ignore[arg-type]

    threads = [threading.Thread(target=draw) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(drawn) == list(range(0, 1600 * 8, 8)) and gen.offset == 1600 * 8
