"""Unrolling resolves choices on the unrolled variable as it copies (``specialize``): the
same lowered IR as copying everything and simplifying afterwards, without the 36x code a
Winograd transform's Select chain used to produce."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from tests.tir_transform.helpers import build_and_check, count
from toolchain import te
from toolchain.tir import ir
from toolchain.tir import transform as T
from toolchain.tir.functor import substitute
from toolchain.tir.schedule import Schedule

#: the module (``toolchain.tir.transform.unroll_loop`` is also the pass function's name)
U = importlib.import_module("toolchain.tir.transform.unroll_loop")


def _chain(kind: str) -> tuple:
    """B[e, j] = one of four formulas of A[j] chosen by e (a Select chain or if_then_else)."""
    A = te.placeholder((16,), name="A")
    pick = te.select if kind == "select" else te.if_then_else

    def body(e, j):
        a = A[j]
        return pick(e.equal(0), a * 2.0, pick(e.equal(1), a + 1.0,
                                              pick(e.equal(2), a - 3.0, a * a)))

    B = te.compute((4, 16), body, name="B")

    def inputs():
        return [np.linspace(-2, 2, 16, dtype="float32"), np.zeros((4, 16), "float32")]

    def ref(a, _b):
        return np.stack([a * 2, a + 1, a - 3, a * a])

    return te.create_prim_func([A, B]), inputs, ref


def _unrolled(func: ir.PrimFunc) -> Schedule:
    sch = Schedule(func)
    e, _ = sch.get_loops(sch.get_block("B"))
    sch.unroll(e)
    return sch


@pytest.mark.parametrize("kind", ["select", "if_then_else"])
def test_unrolled_choice_keeps_only_the_taken_side(kind: str) -> None:
    wl = _chain(kind)
    sch = _unrolled(wl[0])
    low = T.lower(sch)
    assert count(low, ir.Select) == 0
    assert "if_then_else" not in str(low)
    build_and_check(sch, wl)


@pytest.mark.parametrize("kind", ["select", "if_then_else"])
def test_same_ir_as_copying_then_simplifying(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    func = _chain(kind)[0]
    fast = str(T.lower(_unrolled(func)))
    monkeypatch.setattr(U, "specialize", lambda s, vmap: substitute(s, vmap))
    plain = str(T.lower(_unrolled(func)))
    assert fast == plain


def test_unrolled_copies_before_simplify_are_small() -> None:
    """Right after unroll_loop each copy holds one formula, not the whole chain."""
    sch = _unrolled(_chain("select")[0])
    trace: list = []
    T.lower(sch, trace=trace)
    after = dict(trace)["unroll_loop"]
    assert count(after, ir.Select) == 0
    assert count(after, ir.BufferStore) == 4


def test_specialize_resolves_statements_and_keeps_undecided_choices() -> None:
    e, n = ir.Var("e"), ir.Var("n")
    A = ir.Buffer("A", (4,), "float32")
    B = ir.Buffer("B", (4,), "float32")
    store = ir.BufferStore(B, ir.Select(e.equal(1), A[1] * 2.0, A[2]), (e,))
    guarded = ir.IfThenElse(e < 1, store, ir.BufferStore(B, A[0], (n,)))
    out = U.specialize(guarded, {e: 1})
    assert str(out).strip() == "B[n] = A[0]"
    kept = U.specialize(ir.BufferStore(B, ir.Select(n < 2, A[0], A[1]), (e,)), {e: 3})
    assert count(kept, ir.Select) == 1 and "B[3]" in str(kept)
    resolved = U.specialize(store, {e: 1})
    assert str(resolved).strip() == "B[1] = A[1] * T.float32(2.0)"
