"""The fixed-point requantization against exact rational arithmetic (hypothesis)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolchain import te
from toolchain.driver import build
from toolchain.quantize.fixed_point import (
    quantize_multiplier,
    rdbpot,
    requantize,
    requantize_pow,
    requantize_te,
    shift_powers,
    shift_table,
    srdhm,
)

INT32 = st.integers(-(2**31) + 1, 2**31 - 1)
SCALES = st.floats(min_value=2.0**-30, max_value=2.0**8, allow_nan=False, allow_infinity=False)


def _exact(x: int, m: int, shift: int) -> Fraction:
    return Fraction(x * m) * Fraction(2) ** (shift - 31)


@given(SCALES)
def test_multiplier_represents_the_scale(real: float) -> None:
    m, shift = quantize_multiplier(real)
    assert 2**30 <= m < 2**31
    # Q31 rounding: relative error at most 2**-31
    assert abs(Fraction(m) * Fraction(2) ** (shift - 31) - Fraction(real)) <= \
        Fraction(real) * Fraction(1, 2**31)


@settings(max_examples=400)
@given(INT32, SCALES)
def test_requantize_within_one_of_exact_rounding(x: int, real: float) -> None:
    m, shift = quantize_multiplier(real)
    left = max(shift, 0)
    if abs(x) << left >= 2**31:  # the left shift saturates by definition; skip those
        return
    exact = _exact(x, m, shift)
    got = int(requantize(np.int64(x), m, shift))
    # two roundings (SRDHM to nearest, then RDBPOT to nearest): within 1 of the exact value
    assert abs(Fraction(got) - exact) <= 1
    # and exactly the nearest integer whenever the exact value is not within 2**-31 * 2**e
    # of a tie
    if shift >= 0:
        assert got == math.floor(exact + Fraction(1, 2))


@given(INT32, st.integers(1 << 30, (1 << 31) - 1))
def test_srdhm_is_rounded_high_product(a: int, m: int) -> None:
    got = int(srdhm(np.int64(a), m))
    assert got == math.floor(Fraction(a * m, 2**31) + Fraction(1, 2))  # ties toward +inf


@given(INT32, st.integers(0, 30))
def test_rdbpot_rounds_half_away_from_zero(x: int, e: int) -> None:
    got = int(rdbpot(np.int64(x), e))
    q = Fraction(x, 2**e)
    want = math.floor(abs(q) + Fraction(1, 2)) * (1 if x >= 0 else -1)
    assert got == want


def test_saturation_and_limits() -> None:
    assert quantize_multiplier(0.0) == (0, 0)
    assert quantize_multiplier(2.0**-40) == (0, 0)
    with pytest.raises(ValueError, match="too large"):
        quantize_multiplier(2.0**40)
    with pytest.raises(ValueError, match="finite"):
        quantize_multiplier(float("nan"))
    m, s = quantize_multiplier(4.0)
    # 2**30 << 3 saturates to 2**31 - 1 before the high multiply by 0.5
    assert int(requantize(np.int64(2**30), m, s)) == int(srdhm(np.int64(2**31 - 1), m))
    assert int(requantize(np.int64(2**30), m, s)) < 2**30 * 4


def test_te_expression_matches_numpy_when_built() -> None:
    rng = np.random.default_rng(3)
    xs = np.concatenate([rng.integers(-(2**31) + 1, 2**31 - 1, 200),
                         rng.integers(-3000, 3000, 200)]).astype(np.int32)
    for real in (0.3, 1.7e-3, 2.5e-7, 3.0):
        m, s = quantize_multiplier(real)
        lp, rp = (int(v) for v in shift_powers(s))
        x = te.placeholder((xs.size,), "int32", name="x")
        y = te.compute(x.shape, lambda i, x=x, m=m, lp=lp, rp=rp: requantize_te(x[i], m, lp, rp),
                       name="y")
        out = np.zeros(xs.size, np.int64)
        build(te.create_prim_func([x, y]))(xs, out)
        np.testing.assert_array_equal(out, requantize(xs, m, s))


@given(st.lists(INT32, min_size=1, max_size=20), SCALES)
def test_power_table_form_is_identical(xs: list[int], real: float) -> None:
    m, s = quantize_multiplier(real)
    lp, rp = shift_table(np.array([s]))[0]
    np.testing.assert_array_equal(requantize_pow(np.array(xs), m, lp, rp),
                                  requantize(np.array(xs), m, s))
