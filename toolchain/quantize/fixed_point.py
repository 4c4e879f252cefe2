"""Fixed-point requantization: a real scale as an int32 multiplier and a shift.

The scheme is the one TFLite and CMSIS-NN use, stated exactly here so that the numpy
reference (:func:`requantize`), the tensor-expression kernels (:func:`requantize_te`) and
any C a user writes agree bit for bit:

* :func:`quantize_multiplier` writes a positive real ``r`` as ``M * 2**(shift - 31)`` with
  ``M`` in ``[2**30, 2**31)`` (Q31, rounded to nearest) and ``shift`` an int
  (positive = left shift), ``-30 <= shift <= 30``. ``r = 0`` and any ``r < 2**-31`` give
  ``(0, 0)`` (such a scale makes every int32 input round to 0 or +-1).
* ``requantize(x, M, shift)`` for an int32 ``x``:

  1. ``x = saturate_int32(x * 2**max(shift, 0))`` (the left part of the shift);
  2. ``h = SRDHM(x, M)`` — *saturating rounding doubling high multiply*: the high 32 bits
     of ``2 * x * M`` rounded to nearest, ties toward +infinity (as gemmlowp/TFLite):
     ``trunc((x*M + (2**30 if x*M >= 0 else 1 - 2**30)) / 2**31)`` in int64;
  3. ``y = RDBPOT(h, max(-shift, 0))`` — *rounding divide by power of two*: ``h >> e``
     (floor) plus 1 when the remainder ``h & (2**e - 1)`` exceeds
     ``(2**e - 1) >> 1`` (``+ 1`` more when ``h < 0``): round to nearest, ties away from 0.

Two roundings: the result is within 1 of ``round(x * r)`` (exactly equal in most cases;
see ``tests/quantize/test_fixed_point.py``). No float is used after compile time.

Example::

    >>> quantize_multiplier(0.5)
    (1073741824, 0)
    >>> m, s = quantize_multiplier(0.0123)
    >>> int(requantize(np.int64(1000), m, s))
    12
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def quantize_multiplier(real: float) -> tuple[int, int]:
    """``(M, shift)`` with ``real ~= M * 2**(shift - 31)``, ``M`` in ``[2**30, 2**31)``.

    >>> quantize_multiplier(1.0), quantize_multiplier(0.75)
    ((1073741824, 1), (1610612736, 0))
    """
    if not math.isfinite(real) or real < 0:
        raise ValueError(f"a requantization scale must be finite and >= 0, got {real!r}")
    if real == 0.0:
        return 0, 0
    frac, exp = math.frexp(real)  # real = frac * 2**exp, frac in [0.5, 1)
    m = round(frac * (1 << 31))
    if m == 1 << 31:  # rounding carried into the next power of two
        m //= 2
        exp += 1
    if exp < -30:  # below 2**-31: treated as 0 (keeps every 2**shift table in int32)
        return 0, 0
    if exp > 30:
        raise ValueError(f"requantization scale {real!r} is too large for int32 fixed point")
    return int(m), int(exp)


def quantize_multipliers(reals: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel :func:`quantize_multiplier`: ``(int32[C] multipliers, int32[C] shifts)``."""
    pairs = [quantize_multiplier(float(r)) for r in np.asarray(reals, np.float64).reshape(-1)]
    return (np.array([p[0] for p in pairs], np.int32), np.array([p[1] for p in pairs], np.int32))


def srdhm(a: np.ndarray, m: Any) -> np.ndarray:
    """Saturating rounding doubling high multiply of int32 values (as int64 arrays)."""
    ab = np.asarray(a, np.int64) * np.asarray(m, np.int64)
    nudge = np.where(ab >= 0, np.int64(1 << 30), np.int64(1 - (1 << 30)))
    q = ab + nudge
    return np.where(q >= 0, q >> 31, -((-q) >> 31))


def rdbpot(x: np.ndarray, exponent: Any) -> np.ndarray:
    """Rounding (ties away from zero) arithmetic right shift by ``exponent`` >= 0."""
    x = np.asarray(x, np.int64)
    e = np.asarray(exponent, np.int64)
    mask = (np.int64(1) << e) - 1
    rem = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> e) + (rem > threshold)


def requantize(x: Any, multiplier: Any, shift: Any) -> np.ndarray:
    """``x * M * 2**(shift-31)`` rounded as in the module docstring (int64 result).

    ``multiplier`` and ``shift`` broadcast against ``x`` (per-channel: reshape them).

    >>> [int(v) for v in requantize(np.array([-7, 7]), *quantize_multiplier(0.5))]
    [-3, 4]
    """
    x = np.asarray(x, np.int64)
    shift = np.asarray(shift, np.int64)
    left = np.maximum(shift, 0)
    x = np.clip(x << left, INT32_MIN, INT32_MAX)
    return rdbpot(srdhm(x, multiplier), np.maximum(-shift, 0))


def shift_table(shift: Any) -> np.ndarray:
    """``[C]`` shifts -> ``[C, 2]`` int32 table of ``(2**max(shift, 0), 2**(30 - max(-shift,
    0)))`` (:func:`shift_powers`): the form the integer ops take, so that kernels divide
    only by the constant ``2**30`` and never shift or divide by a per-channel amount.

    >>> shift_table(np.array([2, -3])).tolist()
    [[4, 1073741824], [1, 134217728]]
    """
    lp, rq = shift_powers(shift)
    return np.stack([lp, rq], axis=-1).astype(np.int32)


def requantize_pow(x: Any, multiplier: Any, left_pow: Any, right_q: Any) -> np.ndarray:
    """:func:`requantize` with the shift given as a :func:`shift_table` row
    ``(L, R) = (2**max(shift, 0), 2**(30 - e))``, ``e = max(-shift, 0)``; identical results.

    RDBPOT by ``2**e`` is done as ``t = h * R`` (exact in int64): ``h >> e`` is
    ``floor(t / 2**30)`` and the remainder test ``rem > (2**e - 1) >> 1 + (h < 0)`` is
    ``t mod 2**30 >= 2**29 + (h < 0) * R`` — constant divisors only.

    >>> int(requantize_pow(np.int64(1000), quantize_multiplier(0.0123)[0], 1, 2**24))
    12
    """
    x = np.clip(np.asarray(x, np.int64) * np.asarray(left_pow, np.int64), INT32_MIN, INT32_MAX)
    h = srdhm(x, multiplier)
    r = np.asarray(right_q, np.int64)
    t = h * r
    up = np.mod(t, 1 << 30) >= (1 << 29) + np.where(h < 0, r, 0)
    return (t >> 30) + up


# -- tensor expressions ----------------------------------------------------------------------

def requantize_te(x: Any, multiplier: Any, left_pow: Any, right_q: Any) -> Any:
    """The same arithmetic as a TIR int64 expression (no float, no bit operations).

    ``x`` is an int32/int64 expression; ``multiplier`` ``M``; ``left_pow = 2**max(shift,0)``
    and ``right_q = 2**(30 - max(-shift, 0))`` (int expressions or Python ints, from
    :func:`shift_powers` at compile time). Every division is by the constant ``2**31`` or
    ``2**30``, which C compilers turn into shifts (see :func:`requantize_pow`).
    """
    from toolchain import te

    i64 = "int64"

    def c(v: int) -> Any:
        return te.const(v, i64)

    x = te.cast(x, i64) * _as_i64(left_pow)
    x = te.maximum(te.minimum(x, c(INT32_MAX)), c(INT32_MIN))
    ab = x * _as_i64(multiplier)
    h = te.truncdiv(ab + te.select(ab >= c(0), c(1 << 30), c(1 - (1 << 30))), c(1 << 31))
    r = _as_i64(right_q)
    t = h * r
    limit = c(1 << 29) + te.select(h < c(0), r, c(0))
    return te.floordiv(t, c(1 << 30)) + te.select(te.floormod(t, c(1 << 30)) >= limit, c(1),
                                                  c(0))


def _as_i64(v: Any) -> Any:
    from toolchain import te

    if isinstance(v, (int, np.integer)):
        return te.const(int(v), "int64")
    return te.cast(v, "int64")


def shift_powers(shift: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(2**max(shift, 0), 2**(30 - max(-shift, 0)))`` as int64 arrays (compile-time
    tables for :func:`requantize_pow` / :func:`requantize_te`)."""
    s = np.asarray(shift, np.int64)
    return (np.left_shift(np.int64(1), np.maximum(s, 0)),
            np.left_shift(np.int64(1), 30 - np.maximum(-s, 0)))
