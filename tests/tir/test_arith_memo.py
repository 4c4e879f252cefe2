"""The memo of ``arith.simplify`` / ``bound_exprs``: same answers as without it, keyed on
structure *and* on the ranges of the Vars an expression depends on."""

from __future__ import annotations

import gc

import pytest

from toolchain.tir import arith, memo
from toolchain.tir.ir import Call, FloatImm, IntImm, Range, Select, Var
from toolchain.tir.structural import expr_key


@pytest.fixture(autouse=True)
def _fresh_memo():
    memo.clear_cache()
    yield
    memo.clear_cache()


def _exprs(i: Var, j: Var, n: Var) -> list:
    return [(i * 32 + j) // 32, (i * 32 + j) % 32, i * 2 + j - i + 3 - 3, (i * 8 + j) // 4,
            (n + 1) * 2 - n, i < 4, (i * 32 + j) < 128, (j % 8) // 2 * 2 + j % 2,
            arith.ir.Min(i + 3, i + 1), arith.ir.Max(i * 4, j)]


def test_memoised_answers_equal_fresh_answers() -> None:
    i, j, n = Var("i"), Var("j"), Var("n")
    ranges = {i: Range(0, 4), j: Range(0, 32)}
    first = [str(arith.simplify(e, ranges)) for e in _exprs(i, j, n)]
    again = [str(arith.simplify(e, ranges)) for e in _exprs(i, j, n)]  # memo hits
    memo.clear_cache()
    fresh = [str(arith._Simplifier(ranges).visit_expr(e)) for e in _exprs(i, j, n)]
    assert first == again == fresh
    assert first[:2] == ["i", "j"]


def test_ranges_are_part_of_the_key() -> None:
    i, j = Var("i"), Var("j")
    e = (i * 32 + j) // 32
    assert str(arith.simplify(e, {j: Range(0, 32)})) == "i"
    assert str(arith.simplify(e, {j: Range(0, 64)})) != "i"  # not the memoised "i"
    assert str(arith.simplify(e)) != "i"
    assert str(arith.simplify(e, {j: Range(0, 32)})) == "i"


def test_ranges_reached_through_another_range_count() -> None:
    """j's range is [0, k) and k's range decides whether j < 32 holds."""
    j, k = Var("j"), Var("k")
    cond = j < 32
    assert str(arith.simplify(cond, {j: Range(0, k), k: Range(1, 32)})) == "True"
    assert str(arith.simplify(cond, {j: Range(0, k), k: Range(1, 64)})) == "j < 32"


def test_unrelated_ranges_share_the_memo() -> None:
    i, j, other = Var("i"), Var("j"), Var("other")
    e = (i * 32 + j) % 32
    key_a = memo.memo_key("simplify", e, {j: Range(0, 32)})
    key_b = memo.memo_key("simplify", e, {j: Range(0, 32), other: Range(0, 7)})
    assert key_a == key_b


def test_new_vars_never_hit_entries_of_dead_ones() -> None:
    """Keys hold the Vars themselves: a fresh Var at a recycled address is another key."""
    answers = set()
    for extent in (32, 64, 32, 64):
        i, j = Var("i"), Var("j")
        answers.add((extent, str(arith.simplify((i * 32 + j) // 32, {j: Range(0, extent)}))))
        del i, j
        # the two young generations hold this round's Vars (a full collection walks the
        # whole worker's heap: 1.5 CPU s a call late in the suite, for the same result)
        gc.collect(1)
    assert answers == {(32, "i"), (64, "i + j // 32")}


def test_unchanged_input_comes_back_itself() -> None:
    i = Var("i")
    e1, e2 = Call("int32", "ext", (i,)), Call("int32", "ext", (i,))  # nothing to simplify
    assert arith.simplify(e1) is e1
    assert arith.simplify(e2) is e2  # memo hit: the caller's own object, not e1


def test_float_constants_keep_their_sign_in_keys() -> None:
    assert expr_key(FloatImm(-0.0)) != expr_key(FloatImm(0.0))
    c, x = Var("c", "bool"), Var("x", "float32")
    pos = arith.simplify(Select(c, x, FloatImm(0.0)))
    neg = arith.simplify(Select(c, x, FloatImm(-0.0)))
    assert str(pos) != str(neg)


def test_memo_is_cleared_when_full(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memo, "MEMO_LIMIT", 4)
    i, j = Var("i"), Var("j")
    r = {j: Range(0, 8)}
    for k in range(20):
        assert str(arith.simplify((i * 8 + j + k * 8) // 8, r)) == (f"i + {k}" if k else "i")
        assert len(memo.MEMO) <= 4


def test_bound_exprs_memo_respects_ranges() -> None:
    i, j = Var("i"), Var("j")
    lo, hi = arith.bound_exprs(i * 4 + j, {j: Range(0, 4)})
    assert (str(lo), str(hi)) == ("i * 4", "i * 4 + 3")
    lo, hi = arith.bound_exprs(i * 4 + j, {j: Range(0, 8)})
    assert (str(lo), str(hi)) == ("i * 4", "i * 4 + 7")
    assert arith.relax(i * 4 + j, {j: Range(0, 4)}) is not None


def test_constants_and_vars_skip_the_memo() -> None:
    i = Var("i")
    assert arith.simplify(IntImm(3)).value == 3
    assert arith.simplify(i, {i: Range(5, 1)}).value == 5  # a loop of one iteration
    assert not memo.MEMO


def test_canonical_expressions_come_back_themselves() -> None:
    """A sum, div/mod or comparison the simplifier cannot improve is returned as is, not
    as an equal copy (the enclosing nodes and statements are then kept too)."""
    i, j = Var("i"), Var("j")
    r = {i: Range(0, 4), j: Range(0, 64)}
    for e in (i * 32 + j, j // 8, j % 8 * 4 + i, i < j):
        assert arith.simplify(e, r) is e, str(e)
    assert str(arith.simplify(i * 2 + i, r)) == "i * 3"  # a real change still rebuilds


def test_prove_is_memoised_per_ranges() -> None:
    i, n = Var("i"), Var("n")
    assert arith.prove(i < 8, {i: Range(0, 8)})
    assert any(k[0] == "prove" for k in memo.MEMO)
    assert not arith.prove(i < 8, {i: Range(0, 9)})  # other ranges: another key
    assert arith.prove(i < 8, {i: Range(0, 8)})  # the hit gives the same answer
    assert arith.prove(i < n, {i: Range(0, n)}) and not arith.prove(i < n)
    assert arith.disprove(i > 8, {i: Range(0, 8)})


def test_keys_built_from_remembered_operand_keys_equal_expr_key() -> None:
    i, j = Var("i"), Var("j")
    inner = (i * 32 + j) // 8
    memo.key_and_vars(inner)  # remembered on ``inner``
    for e in (inner >= 0, inner - j, j + inner, inner * 2):
        found: list = []
        assert memo.key_and_vars(e) == (expr_key(e, found), tuple(dict.fromkeys(found)))


def test_constant_and_symbolic_ranges_key_alike() -> None:
    """Each loop range's bounds are keyed once; a range whose bounds have Vars of their
    own brings those Vars' ranges into the key (in the order met), as the walk did."""
    i, j, k = Var("i"), Var("j"), Var("k")
    e = i * 8 + j
    r = {i: Range(0, 4), j: Range(0, 8)}
    key = memo.memo_key("t", e, r)
    assert key[2] == ((i, ("i", 0, "int32"), ("i", 4, "int32")),
                      (j, ("i", 0, "int32"), ("i", 8, "int32")))
    assert memo.memo_key("t", e, r) == key  # the ranges' keys remembered: the same key
    sym = {i: Range(0, k), k: Range(1, 9), j: Range(0, 8)}
    assert [v for v, *_ in memo.memo_key("t", e, sym)[2]] == [i, j, k]
    assert memo.memo_key("t", e, {**sym, k: Range(1, 10)}) != memo.memo_key("t", e, sym)


def test_relax_is_memoised_per_ranged_vars() -> None:
    """``relax`` gives None when its bounds keep a ranged Var: which Vars are ranged is in
    the key, so a hit under other ranges cannot answer it."""
    i, j, other = Var("i"), Var("j"), Var("other")
    assert arith.relax(i * j, {j: Range(0, 4)}) is None  # i * j is an atom: j stays
    assert arith.relax(i * j, {other: Range(0, 4)}) is not None
    assert arith.relax(i * j, {j: Range(0, 4)}) is None
    assert any(k[0] == "relax" for k in memo.MEMO)


def test_a_values_conditions_go_through_the_memo() -> None:
    """A float value is not memoised, its integer conditions are (they recur in every
    value of an unrolled tile): the same answer as simplifying them in place."""
    i = Var("i")
    x = Var("x", "float32")
    r = {i: Range(0, 8)}
    value = Select(i < 8, x, FloatImm(0.0)) + Select(i < 4, x, FloatImm(1.0))
    out = arith.simplify(value, r)
    assert str(out) == "x + T.Select(i < 4, x, T.float32(1.0))", str(out)
    assert {k[0] for k in memo.MEMO} == {"simplify"}
    memo.clear_cache()
    assert str(arith._Simplifier(r).visit_expr(value)) == str(out)


def _plain_key(e, found: list) -> object:  # noqa: ANN001 - an expression
    """``expr_key`` of a tree of BinaryOps over Vars and IntImms, recursing into every
    operand (the leaves keyed by their own cases)."""
    if type(e) is Var:
        found.append(e)
        return e
    if type(e) is IntImm:
        return ("i", e.value, e.dtype)
    return (type(e), _plain_key(e.a, found), _plain_key(e.b, found), e.dtype)


def test_binary_keys_their_leaf_operands_as_the_leaf_cases_do() -> None:
    """``expr_key`` keys a BinaryOp's Var and IntImm operands in place: the same key and
    the same Vars, in the same order, as keying each operand by itself."""
    import random

    from toolchain.tir import ir

    rng = random.Random(5)
    vs = [Var("p"), Var("q", "int64"), Var("r")]

    def tree(depth: int) -> object:
        if depth == 0 or rng.random() < 0.3:
            if rng.random() < 0.6:
                return rng.choice(vs)
            return IntImm(rng.randint(-3, 3), rng.choice(("int32", "int64")))
        op = rng.choice((ir.Add, ir.Sub, ir.Mul, ir.FloorDiv, ir.Min, ir.LT))
        return op(tree(depth - 1), tree(depth - 1))

    for _ in range(300):
        e = tree(5)
        if type(e) in (Var, IntImm):
            continue
        want: list = []
        got: list = []
        assert expr_key(e, got) == _plain_key(e, want)
        assert [id(v) for v in got] == [id(v) for v in want]
        assert expr_key(e) == _plain_key(e, [])
