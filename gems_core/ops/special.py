"""Special functions: the exponentially scaled Bessel function ``special_i0e``
(e^-|x| I0(x)), the modified Bessel function ``special_i1`` and ``digamma`` (with its out=
and, for digamma, in-place overloads).

Both Bessel functions come from two expansions whose terms follow from one another by a
recurrence, so no table of coefficients is needed: below a crossover ``T`` the power series
I_nu(x) = (x/2)^nu sum_k (x^2/4)^k / (k! (k + nu)!) (positive terms, no cancellation), above
it Hankel's asymptotic series e^-a I_nu(a) ~ (2 pi a)^-1/2 sum_k prod_{j<=k} ((2j - 1)^2 -
4 nu^2) / (8 j a). digamma shifts x up past a bound ``B`` with psi(x) = psi(x + 1) - 1/x, then
takes Stirling's series with Bernoulli numbers to B_14; negative x reflect through
psi(x) = psi(1 - x) - pi cot(pi r), r = x less its nearest integer (cot has period 1, and
pi r keeps full relative accuracy near the poles).

The term counts depend on the computation dtype: float32 (also for float16, bfloat16 and
integer inputs) takes T = 9 with 18 + 12 terms and B = 6; float64 takes T = 18 with 34 + 30
terms and B = 10. Measured against 40-digit references that is within 4e-7 (float32) and
2e-15 (float64) relative error for the Bessel functions; digamma's error is a few ulp of the
largest of psi(x), log(x + B) and the sum of the shifts, so float64 inputs are served too.
Special values follow ATen: i0e(+-inf) = 0, i1(+-inf) = NaN, digamma(+-0) = -+inf and
digamma of a negative integer (or -inf) NaN. i1 overflows only where I1 does, not where e^x
does (e^a is taken as two halves).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..codegen.pointwise import pointwise
from .math import _unary_overloads


@triton.jit
def _bessel_series(x, NU: tl.constexpr, TERMS: tl.constexpr):
    # I_nu(x) for nu in {0, 1}: (x/2)^nu sum_{k < TERMS} q^k / (k! (k + nu)!), q = x^2 / 4
    q = 0.25 * x * x
    if NU == 0:
        term = tl.zeros_like(x) + 1.0
    else:
        term = 0.5 * x
    total = term
    for k in range(1, TERMS):
        term = term * q / (k * (k + NU))
        total += term
    return total


@triton.jit
def _bessel_scaled_tail(a, NU: tl.constexpr, TERMS: tl.constexpr):
    # e^-a I_nu(a) for large a > 0: (2 pi a)^-1/2 sum_{k < TERMS} t_k,
    # t_k = t_{k-1} ((2k - 1)^2 - 4 nu^2) / (8 k a); integer factors keep float64 exact
    inv = 1.0 / a
    term = tl.zeros_like(a) + 1.0
    total = term
    for k in range(1, TERMS):
        term = term * ((2 * k - 1) * (2 * k - 1) - 4 * NU * NU) / (8 * k) * inv
        total += term
    return total / tl.sqrt(6.283185307179586 * a)


@triton.jit
def _i0e_terms(x, T: tl.constexpr, SERIES: tl.constexpr, TAIL: tl.constexpr):
    a = tl.abs(x)
    small = _bessel_series(a, 0, SERIES) * tl.exp(-a)
    large = _bessel_scaled_tail(tl.maximum(a, T), 0, TAIL)
    return tl.where(x != x, x, tl.where(a <= T, small, large))


@triton.jit
def _i1_terms(x, T: tl.constexpr, SERIES: tl.constexpr, TAIL: tl.constexpr):
    a = tl.abs(x)
    small = _bessel_series(x, 1, SERIES)  # odd in x, as I1 is
    t = tl.maximum(a, T)
    h = tl.exp(0.5 * t)
    large = h * (h * _bessel_scaled_tail(t, 1, TAIL))  # inf * 0 = NaN at +-inf, as in ATen
    large = tl.where(x < 0, -large, large)
    return tl.where(x != x, x, tl.where(a <= T, small, large))


@triton.jit
def _digamma_terms(x, BOUND: tl.constexpr, STEPS: tl.constexpr):
    negative = x < 0.0
    y = tl.where(negative, 1.0 - x, x)
    # psi(y) = psi(y + n) - sum_{k < n} 1 / (y + k) up to y + n >= BOUND; y = +-0 gives 1/y =
    # +-inf, so psi(+-0) = -+inf
    shift = tl.zeros_like(y)
    for _ in range(STEPS):
        low = y < BOUND
        shift += tl.where(low, 1.0 / y, 0.0)
        y = tl.where(low, y + 1.0, y)
    # psi(y) ~ log y - 1/(2y) - sum_{k=1..7} B_2k / (2k y^2k)
    z = 1.0 / (y * y)
    p = -0.08333333333333333 * z + 0.021092796092796094
    p = p * z - 0.007575757575757576
    p = p * z + 0.004166666666666667
    p = p * z - 0.003968253968253968
    p = p * z + 0.008333333333333333
    p = p * z - 0.08333333333333333
    psi = tl.log(y) - 0.5 / y + p * z - shift
    r = x - tl.math.floor(x + 0.5)
    pr = 3.141592653589793 * r
    reflected = psi - 3.141592653589793 * tl.cos(pr) / tl.sin(pr)
    reflected = tl.where(r == 0.0, float("nan"), reflected)  # the poles, and -inf (r is NaN there)
    return tl.where(negative, reflected, psi)


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _i0e(x):
    if x.dtype == tl.float64:
        r = _i0e_terms(x, 18.0, 34, 30)
    else:
        r = _i0e_terms(x, 9.0, 18, 12)
    return r


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _i1(x):
    if x.dtype == tl.float64:
        r = _i1_terms(x, 18.0, 34, 30)
    else:
        r = _i1_terms(x, 9.0, 18, 12)
    return r


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _digamma(x):
    if x.dtype == tl.float64:
        r = _digamma_terms(x, 10.0, 10)
    else:
        r = _digamma_terms(x, 6.0, 6)
    return r


_unary_overloads("special_i0e", _i0e, "e^-|x| I0(x) in floating point (torch.special.i0e).", inplace=False)
_unary_overloads("special_i1", _i1, "The modified Bessel function I1 in floating point (torch.special.i1).",
                 inplace=False)
_unary_overloads("digamma", _digamma, "The digamma function psi = Gamma' / Gamma in floating point "
                 "(torch.special.digamma and psi reach it as aliases).")
