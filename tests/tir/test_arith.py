"""Arithmetic: constant folding, canonical affine form, div/mod rules, bounds, proofs."""

from __future__ import annotations

import itertools

import pytest

from toolchain.tir import arith, ir, linear
from toolchain.tir.arith import const_bound, prove, simplify

i, j, k, n = ir.Var("i"), ir.Var("j"), ir.Var("k"), ir.Var("n")


def s(e: ir.PrimExpr, ranges: dict | None = None) -> str:
    return str(simplify(e, ranges))


def test_constant_folding() -> None:
    assert s(ir.convert(3) * 4 + 2) == "14"
    assert s(ir.FloorDiv(ir.convert(-7), 2)) == "-4"
    assert s(ir.FloorMod(ir.convert(-7), 2)) == "1"
    assert s(ir.Div(ir.convert(-7), 2)) == "-3"
    assert s(ir.Mod(ir.convert(-7), 2)) == "-1"
    assert s(ir.Max(ir.convert(3), 9)) == "9"
    assert s(ir.FloatImm(1.5) * 2.0) == "T.float32(3.0)"
    assert s(ir.Cast("float32", ir.convert(3))) == "T.float32(3.0)"
    assert s(ir.convert(3) < 4) == "True"


def test_canonical_affine_form() -> None:
    assert s(i * 2 + j - i + 3 - 3) == "i + j"
    assert s((i + 1) * 4 - 4) == "i * 4"
    assert s(i - i) == "0"
    assert s(j * 3 + i * 2 - j * 3) == "i * 2"
    assert s(0 - i + 5) == "5 - i"


def test_divmod_with_ranges() -> None:
    r = {i: ir.Range(0, 4), j: ir.Range(0, 32)}
    assert s((i * 32 + j) // 32, r) == "i"
    assert s((i * 32 + j) % 32, r) == "j"
    assert s((i * 32 + j) // 8, r) == "i * 4 + j // 8"
    assert s((i * 32 + j) % 8, r) == "j % 8"
    assert s(ir.FloorDiv(ir.FloorDiv(k, 4), 8)) == "k // 32"
    assert s(ir.FloorMod(ir.FloorMod(k, 32), 8)) == "k % 8"
    assert s((j + 64) // 32, r) == "2"


def test_divmod_recombination() -> None:
    assert s(k // 16 * 16 + k % 16) == "k"
    assert s((k // 4) * 8 + (k % 4) * 2) == "k * 2"


def test_min_max_and_select_with_ranges() -> None:
    r = {i: ir.Range(0, 8)}
    assert s(ir.Min(i, 8), r) == "i"
    assert s(ir.Max(i, 0), r) == "i"
    assert s(ir.Min(i, 3), r) == "T.min(i, 3)"
    assert s(ir.Select(i < 8, ir.FloatImm(1.0), ir.FloatImm(2.0)), r) == "T.float32(1.0)"


def test_guard_elided_when_provably_in_range() -> None:
    r = {i: ir.Range(0, 4), j: ir.Range(0, 32)}
    assert s(i * 32 + j < 128, r) == "True"
    assert s(i * 32 + j < 100, r) == "i * 32 + j < 100"
    assert s(i * 32 + j >= 128, r) == "False"


def test_prove_with_symbolic_bounds() -> None:
    assert prove(i < n, {i: ir.Range(0, n)})
    assert prove(i + 1 <= n, {i: ir.Range(0, n)})
    assert not prove(i + 1 < n, {i: ir.Range(0, n)})
    assert prove(ir.And(i >= 0, i < 8), {i: ir.Range(0, 8)})
    assert not prove(i < 7, {i: ir.Range(0, 8)})
    assert arith.disprove(i > 9, {i: ir.Range(0, 8)})


def test_const_bound() -> None:
    r = {i: ir.Range(0, 4), j: ir.Range(0, 32)}
    assert const_bound(i * 32 + j, r) == (0, 127)
    assert const_bound(i - j, r) == (-31, 3)
    assert const_bound(j % 8, r) == (0, 7)
    assert const_bound(j // 8, r) == (0, 3)
    assert const_bound(i * n, r) == (None, None)


@pytest.mark.parametrize("c", [3, 4, 8])
def test_simplify_preserves_values(c: int) -> None:
    """Exhaustive check on small domains: the simplified form evaluates the same."""
    r = {i: ir.Range(0, 6), j: ir.Range(0, c)}
    exprs = [(i * c + j) // c, (i * c + j) % c, (i * c + j) // 2, (i + j * 2) % 4,
             (i * 4 + j) // 4 * 4 + (i * 4 + j) % 4, ir.Min(i + j, 5)]
    for e in exprs:
        simple = simplify(e, r)
        for vi, vj in itertools.product(range(6), range(c)):
            env = {i: ir.convert(vi), j: ir.convert(vj)}
            from toolchain.tir.functor import substitute

            a = simplify(substitute(e, env))
            b = simplify(substitute(simple, env))
            assert isinstance(a, ir.IntImm) and a.value == b.value, (str(e), str(simple))


def test_simplify_statement() -> None:
    A = ir.Buffer("A", (8,))
    st = A.store(1.0, [i * 2 - i])
    assert str(simplify(st)) == "A[i] = T.float32(1.0)"


# ---------------------------------------------------------------- property: simplify is exact

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as hs  # noqa: E402

_V = [ir.Var("a"), ir.Var("b"), ir.Var("c")]
_R = {_V[0]: ir.Range(0, 5), _V[1]: ir.Range(0, 7), _V[2]: ir.Range(-3, 4)}


def _exprs() -> hs.SearchStrategy:
    leaf = hs.one_of(hs.sampled_from(_V), hs.integers(-9, 9).map(ir.convert))

    def extend(child: hs.SearchStrategy) -> hs.SearchStrategy:
        const = hs.integers(1, 8)
        return hs.one_of(
            hs.tuples(child, child).map(lambda t: t[0] + t[1]),
            hs.tuples(child, child).map(lambda t: t[0] - t[1]),
            hs.tuples(child, hs.integers(-4, 4)).map(lambda t: t[0] * t[1]),
            hs.tuples(child, const).map(lambda t: t[0] // t[1]),
            hs.tuples(child, const).map(lambda t: t[0] % t[1]),
            hs.tuples(child, child).map(lambda t: ir.Min(t[0], t[1])),
            hs.tuples(child, child).map(lambda t: ir.Max(t[0], t[1])),
        )

    return hs.recursive(leaf, extend, max_leaves=8)


def _eval(e: ir.PrimExpr, env: dict) -> int:
    from toolchain.tir.functor import substitute

    out = simplify(substitute(e, {v: ir.convert(x) for v, x in env.items()}))
    assert isinstance(out, ir.IntImm), str(out)
    return out.value


@settings(max_examples=150, deadline=None)
@given(e=_exprs(), use_ranges=hs.booleans())
def test_simplify_is_exact_on_random_expressions(e: ir.PrimExpr, use_ranges: bool) -> None:
    ranges = _R if use_ranges else None
    simple = simplify(e, ranges)
    for a in range(0, 5, 2):
        for b in range(0, 7, 3):
            for c in (-3, -1, 0):
                env = {_V[0]: a, _V[1]: b, _V[2]: c}
                assert _eval(e, env) == _eval(simple, env), (str(e), str(simple))


@settings(max_examples=150, deadline=None)
@given(e=_exprs())
def test_bounds_are_sound(e: ir.PrimExpr) -> None:
    lo, hi = const_bound(e, _R)
    for a in range(5):
        for b in range(7):
            for c in range(-3, 1):
                v = _eval(e, {_V[0]: a, _V[1]: b, _V[2]: c})
                assert (lo is None or lo <= v) and (hi is None or v <= hi), (str(e), lo, hi, v)


def _random_sum(rng, depth: int) -> ir.PrimExpr:
    """A random integer expression over i, j, k, small constants and ``i // 4``."""
    if depth == 0 or rng.random() < 0.3:
        r = rng.random()
        if r < 0.5:
            return rng.choice((i, j, k))
        if r < 0.8:
            return ir.IntImm(rng.randint(-4, 4))
        return ir.FloorDiv(i, 4)
    op = rng.choice((ir.Add, ir.Sub, ir.Mul, ir.Add, ir.Sub))
    return op(_random_sum(rng, depth - 1), _random_sum(rng, depth - 1))


def test_built_already_answers_what_building_and_comparing_answers() -> None:
    """``_built_already(lin, e)`` (no allocation) against ``_same_tree(lin.to_expr(), e)``,
    on random sums and on their simplified (canonical) forms: the same verdict every time,
    and the canonical forms are recognised."""
    import random

    rng = random.Random(20)
    canonical_seen = 0
    for _ in range(800):
        e = rng.choice((ir.Add, ir.Sub, ir.Mul))(_random_sum(rng, 3), _random_sum(rng, 3))
        for x in (e, arith._Simplifier({}).visit_expr(e)):
            if not isinstance(x, (ir.Add, ir.Sub, ir.Mul)):
                continue
            lin = linear.to_lin(x)
            if linear.recombine_divmod(lin):
                continue
            built = linear.same_tree(lin.to_expr(), x)
            assert linear.built_already(lin, x) == built, str(x)
            canonical_seen += built
    assert canonical_seen > 300


@pytest.mark.parametrize("e", [i * 4 + j - 3, 5 - i, 0 - i * 2 - j, i + j + 7, i * 2 + j * 3,
                               i - 1])
def test_canonical_sum_comes_back_itself(e: ir.PrimExpr) -> None:
    assert simplify(e) is e


def test_built_already_refuses_mixed_dtypes() -> None:
    """Atoms of another dtype than the sum's: the built nodes' dtypes would need the
    promotion rules, so the check answers "build and compare" (False)."""
    x64 = ir.Var("x64", "int64")
    e = ir.Add(x64, ir.IntImm(1, "int64"))
    lin = linear.to_lin(e)
    lin.dtype = "int32"
    assert not linear.built_already(lin, e)
    assert linear.built_already(linear.to_lin(e), e)


def test_sum_chain_takes_each_operand_form_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``x0 + x1 + ... + x19``: the linear form of each prefix grows from the one the
    simplifier kept for the prefix before it (not from the leaves again: ~n^2 / 2 calls)."""
    xs = [ir.Var(f"x{m}") for m in range(20)]
    chain = xs[0]
    for x in xs[1:]:
        chain = chain + x
    calls = []
    real = linear.to_lin

    def counted(e: ir.PrimExpr) -> linear.Lin | None:
        calls.append(e)
        return real(e)

    monkeypatch.setattr(arith, "to_lin", counted)  # the simplifier's calls
    monkeypatch.setattr(linear, "to_lin", counted)  # and lin_of_pair's
    assert arith._Simplifier({}).visit_expr(chain) is chain
    assert len(calls) <= 2 * len(xs)


def test_reused_operand_forms_give_what_fresh_forms_give(monkeypatch: pytest.MonkeyPatch) -> None:
    """The simplifier with the kept forms and with every form made afresh: the same trees
    (``term_key`` compares structure, Vars by identity) on random sums, with ranges."""
    import random

    rng = random.Random(7)
    exprs = [rng.choice((ir.Add, ir.Sub, ir.Mul))(_random_sum(rng, 3), _random_sum(rng, 3))
             for _ in range(400)]
    ranges = {i: ir.Range(0, 4), j: ir.Range(0, 8)}
    kept = [arith._Simplifier(ranges).visit_expr(e) for e in exprs]
    monkeypatch.setattr(arith, "lin_of_pair", lambda e, a, b: linear.to_lin(e))
    fresh = [arith._Simplifier(ranges).visit_expr(e) for e in exprs]
    assert [linear.term_key(x) for x in kept] == [linear.term_key(x) for x in fresh]


def test_constant_ranges_bound_at_their_folded_end() -> None:
    """A Var over a constant range is bounded by ``min`` and ``simplify(min + extent -
    1)`` (folded directly, in the sum's dtype, wrapped to it)."""
    from toolchain.tir.ir import IntImm, Range, Var

    for mn, ext in ((IntImm(0), IntImm(8)), (IntImm(2, "int64"), IntImm(5)),
                    (IntImm(250, "uint8"), IntImm(10, "uint8")), (IntImm(-3), IntImm(1))):
        i = Var("i", mn.dtype)
        last = simplify(mn + ext - 1)
        assert const_bound(i, {i: Range(mn, ext)}) == (mn.value, last.value)
    assert const_bound(Var("i"), {}) == (None, None)


def _index_chain(rng) -> ir.PrimExpr:  # noqa: ANN001 - a random.Random
    """A random index sum built one term at a time, as the schedule and the lowering build
    them: Var terms (a repeated Var now and then), ``Var * c`` with ``c`` in -2..8, other
    atoms (``i // 4``, ``i % 4``, a ``min``), constants, ``+`` and ``-``, int32 or int64
    (sometimes mixed)."""
    dt = rng.choice(("int32", "int64"))
    vs = [ir.Var(n, dt) for n in "pqr"] + [i, j]
    out: ir.PrimExpr = rng.choice(vs)
    for _ in range(rng.randint(1, 6)):
        r = rng.random()
        v = rng.choice(vs)
        if r < 0.3:
            term = v
        elif r < 0.6:
            term = ir.Mul(v, ir.IntImm(rng.randint(-2, 8), v.dtype))
        elif r < 0.7:
            term = rng.choice((ir.FloorDiv(v, ir.IntImm(4, v.dtype)),
                               ir.FloorMod(v, ir.IntImm(4, v.dtype)),
                               ir.Min(v, ir.IntImm(3, v.dtype))))
        else:
            term = ir.IntImm(rng.randint(-3, 5), rng.choice((dt, dt, "int32")))
        op = ir.Add if rng.random() < 0.7 else ir.Sub
        out = op(out, term) if rng.random() < 0.9 else op(term, out)
    return out


def test_sum_shortcuts_keep_what_the_long_way_keeps(monkeypatch: pytest.MonkeyPatch) -> None:
    """``linear.var_times`` and ``linear.appended`` (a sum kept without building its
    operands' forms) against the simplifier without them, on random index sums, alone and
    under ``// 3`` / ``% 3`` (which read the kept form), with and without ranges: the same
    trees, the same inputs kept as they are, and the same kept form (terms, atoms, order,
    constant)."""
    import random

    rng = random.Random(22)
    exprs = []
    for _ in range(600):
        e = _index_chain(rng)
        if rng.random() < 0.3:
            e = rng.choice((ir.FloorDiv, ir.FloorMod))(e, ir.IntImm(3, e.dtype))
        exprs.append(e)
    ranges = {i: ir.Range(0, 4), j: ir.Range(0, 8)}

    def run() -> list:
        out = []
        for e in exprs:
            for rs in ({}, ranges):
                s = arith._Simplifier(rs)
                x = s.visit_expr(e)
                kept = s.kept
                form = None if kept is None else (
                    kept[0] is x, kept[1].dtype, kept[1].const,
                    [(k, linear.term_key(a), c) for k, (a, c) in kept[1].terms.items()])
                out.append((linear.term_key(x), x is e, form))
        return out

    fast = run()
    taken = [0]
    real = arith.appended

    def counted(*args):  # noqa: ANN002, ANN202
        got = real(*args)
        taken[0] += got is not None
        return got

    monkeypatch.setattr(arith, "appended", counted)
    assert run() == fast
    assert taken[0] > 500  # the shortcut is taken, not only refused
    monkeypatch.setattr(arith, "var_times", lambda *a: None)
    monkeypatch.setattr(arith, "appended", lambda *a: None)
    assert run() == fast
