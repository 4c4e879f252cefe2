"""Floordiv/floormod recombination: ``a // c * c + a % c -> a`` and its nested forms.

Fusing loops and splitting the fused loop again gives indices such as
``x // 256 * 256 + x % 256 // 32 * 32 + x % 32``; the canonical simplifier must give ``x``
back. Checked against an exact integer evaluator (independent of the simplifier) on
non-negative and negative values: the rules hold for every integer when divisors are > 0.
"""

from __future__ import annotations

import operator

from hypothesis import given, settings
from hypothesis import strategies as hs

from toolchain.tir import ir
from toolchain.tir.arith import simplify

X, Y = ir.Var("x"), ir.Var("y")

_OPS = {ir.Add: operator.add, ir.Sub: operator.sub, ir.Mul: operator.mul,
        ir.FloorDiv: operator.floordiv, ir.FloorMod: operator.mod}


def ev(e: ir.PrimExpr, env: dict[ir.Var, int]) -> int:
    """Exact Python-integer value of ``e`` (floor division semantics)."""
    if isinstance(e, ir.IntImm):
        return e.value
    if isinstance(e, ir.Var):
        return env[e]
    if isinstance(e, (ir.Min, ir.Max)):
        f = min if isinstance(e, ir.Min) else max
        return f(ev(e.a, env), ev(e.b, env))
    return _OPS[type(e)](ev(e.a, env), ev(e.b, env))


def test_fuse_then_split_indices_become_the_var() -> None:
    x = X
    assert str(simplify(x // 256 * 256 + x % 256 // 32 * 32 + x % 32)) == "x"
    assert str(simplify(x // 256 * 256 + x // 32 % 8 * 32 + x % 32)) == "x"
    assert str(simplify(x % 32 + x // 32 % 8 * 32)) == "x % 256"
    assert str(simplify(x % 32 + x // 32 % 8 * 32, {x: ir.Range(0, 256)})) == "x"
    i, j = ir.Var("i"), ir.Var("j")
    f = i * 64 + j  # a fused index of an affine expression
    assert str(simplify(f // 32 * 32 + f % 32)) == "i * 64 + j"
    # coefficients that do not match are left alone (and stay exact)
    e = x // 256 * 255 + x % 256
    assert "256" in str(simplify(e))


def _chain() -> hs.SearchStrategy:
    """Divisors c1 | c2 | ... (each a multiple of the previous)."""
    return hs.lists(hs.integers(2, 5), min_size=1, max_size=3).map(
        lambda fs: [__import__("math").prod(fs[:k + 1]) for k in range(len(fs))])


def _split_sum(a: ir.PrimExpr, cs: list[int], forms: list[bool]) -> ir.PrimExpr:
    """``a // cN * cN + ... + (part k) * c_k + ... + a % c1``, part k in one of two forms."""
    out: ir.PrimExpr = a % cs[0]
    for k in range(1, len(cs)):
        lo, hi = cs[k - 1], cs[k]
        part = (a % hi) // lo if forms[k - 1] else (a // lo) % (hi // lo)
        out = out + part * lo
    return out + a // cs[-1] * cs[-1]


@settings(max_examples=200, deadline=None)
@given(cs=_chain(), forms=hs.lists(hs.booleans(), min_size=3, max_size=3),
       scale=hs.integers(-3, 3), shift=hs.integers(-5, 5), affine=hs.booleans(),
       drop=hs.booleans(), perturb=hs.integers(-1, 1))
def test_recombination_is_exact(cs: list[int], forms: list[bool], scale: int, shift: int,
                                affine: bool, drop: bool, perturb: int) -> None:
    # 7 shares no factor with the divisors (products of 2..5): with a coefficient that a
    # divisor divides, (3x + y) // 3 is first canonicalised to x + y // 3 and the sum is
    # only kept exact, not recombined (a known limit of matching by structure)
    a = X * 7 + Y if affine else X
    e = _split_sum(a, cs, forms)
    if drop:  # without the outermost quotient: a % cN
        e = e - a // cs[-1] * cs[-1]
    e = e * scale + shift + X * perturb
    s = simplify(e)
    if not drop and perturb == 0 and scale == 1:
        assert ir.structural_equal(s, simplify(a + shift)), (str(e), str(s))
    for xv in range(-40, 41, 3):
        for yv in (-7, 0, 5):
            env = {X: xv, Y: yv}
            assert ev(e, env) == ev(s, env), (str(e), str(s), env)


@settings(max_examples=100, deadline=None)
@given(cs=_chain(), forms=hs.lists(hs.booleans(), min_size=3, max_size=3))
def test_recombination_with_ranges(cs: list[int], forms: list[bool]) -> None:
    """With ``x`` in ``[0, cN)`` the sum without the quotient is ``x`` itself."""
    e = _split_sum(X, cs, forms) - X // cs[-1] * cs[-1]
    s = simplify(e, {X: ir.Range(0, cs[-1])})
    assert s is X or str(s) == "x", (str(e), str(s))
    for xv in range(cs[-1]):
        assert ev(e, {X: xv}) == ev(s, {X: xv})


@settings(max_examples=200, deadline=None)
@given(g=hs.integers(2, 8), n=hs.integers(2, 6), ext=hs.integers(1, 8),
       shift=hs.integers(0, 9), ky=hs.integers(1, 3), mod=hs.booleans())
def test_small_part_split_is_exact(g: int, n: int, ext: int, shift: int, ky: int,
                                   mod: bool) -> None:
    """``(g*y + s) // (g*n)`` with ``s`` in a range: ``y // n`` when ``0 <= s < g``."""
    c = g * n
    i = ir.Var("i")
    ranges = {i: ir.Range(0, ext)}
    a = X * (g * ky) + i + shift
    e = a % c if mod else a // c
    s = simplify(e, ranges)
    if ext + shift <= g and ky == 1 and not mod:
        assert str(s) == f"x // {n}" or (n == 1 and str(s) == "x"), (str(e), str(s))
    for xv in range(-30, 31):
        for iv in range(ext):
            env = {X: xv, i: iv}
            assert ev(e, env) == ev(s, env), (str(e), str(s), env)


def test_fused_then_split_index_simplifies_per_part() -> None:
    f, i = ir.Var("f"), ir.Var("i")
    r = {i: ir.Range(0, 8)}
    assert str(simplify((f * 8 + i) // 32, r)) == "f // 4"
    assert str(simplify((f * 8 + i) % 32, r)) == "f % 4 * 8 + i"
    assert str(simplify((f * 5 + i) // 32, {i: ir.Range(0, 5)})) == "(f * 5 + i) // 32"
