"""Regression tests for defects in the loop IR found through code generation:
rank-0 buffers in the interpreter and printer, the ``round`` intrinsic's semantics, and the
cost of region analysis / simplification on many data-dependent loads.
"""

from __future__ import annotations

import numpy as np
import pytest

from toolchain import te
from toolchain.tir import arith, ir
from toolchain.tir.interpreter import run
from toolchain.tir.transform import lower

# ------------------------------------------------------------------ rank 0


def test_rank0_placeholder_and_output_run_in_the_interpreter():
    A = te.placeholder((), name="A")
    B = te.compute((), lambda: A[()] * 2.0 + 1.0, name="B")
    func = te.create_prim_func([A, B])
    b = np.zeros((), "float32")
    run(func, np.array(3.0, "float32"), b)
    assert float(b) == 7.0


def test_rank0_intermediate_and_reduction_in_the_interpreter_scheduled_and_lowered():
    X = te.placeholder((2, 5), name="X", dtype="int32")
    k = te.reduce_axis((0, 2), name="k")
    m = te.reduce_axis((0, 5), name="m")
    total = te.compute((), lambda: te.sum(X[k, m], axis=[k, m]), name="total")
    out = te.compute((2, 5), lambda i, j: X[i, j] * total[()], name="out")
    func = te.create_prim_func([X, out])
    x = np.arange(10, dtype="int32").reshape(2, 5)
    for f in (func, lower(func)):
        got = np.zeros((2, 5), "int32")
        run(f, x, got)
        np.testing.assert_array_equal(got, x * x.sum())


def test_rank0_lowered_param_accepts_a_0d_array():
    A = te.placeholder((), name="A", dtype="int8")
    B = te.compute((), lambda: A[()] + te.const(1, "int8"), name="B")
    f = lower(te.create_prim_func([A, B]))
    b = np.zeros((), "int8")
    run(f, np.array(4, "int8"), b)
    assert int(b) == 5


def test_rank0_access_prints_as_an_empty_tuple_index():
    A = te.placeholder((), name="A")
    B = te.compute((), lambda: A[()] + 1.0, name="B")
    text = str(te.create_prim_func([A, B]))
    assert "B[()] = A[()] + T.float32(1.0)" in text
    assert "[]" not in text


# ------------------------------------------------------------------ round


def test_round_intrinsic_rounds_halves_to_even_in_the_interpreter():
    vals = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 1.49, -1.51], "float32")
    A = te.placeholder((7,), name="A")
    B = te.compute((7,), lambda i: te.round(A[i]), name="B")
    b = np.zeros(7, "float32")
    run(te.create_prim_func([A, B]), vals, b)
    np.testing.assert_array_equal(b, [0.0, 2.0, 2.0, -0.0, -2.0, 1.0, -2.0])


def test_round_semantics_are_documented_in_the_intrinsic_table():
    from toolchain.codegen.cstyle import INTRINSICS

    assert INTRINSICS["round"].c_name == "nearbyint"
    assert "half to even" in INTRINSICS["round"].semantics


# ------------------------------------------------------------------ region analysis cost


class _Counter:
    """Counts calls of ``arith.simplify`` (the unit of work of region analysis)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        orig = arith.simplify

        def counted(*args, **kwargs):
            self.n += 1
            return orig(*args, **kwargs)

        monkeypatch.setattr(arith, "simplify", counted)


def _gather(taps: int, distinct: bool = True) -> list[te.Tensor]:
    X = te.placeholder((64,), name="X", dtype="uint8")
    idx = te.placeholder((taps,), name="idx", dtype="int32")

    def body(i):
        s = te.cast(X[idx[0]], "int32")
        for t in range(1, taps):
            s = s + te.cast(X[idx[t] if distinct else idx[0]], "int32")
        return s

    return [X, idx, te.compute((4,), body, name="Y")]


def _work(monkeypatch: pytest.MonkeyPatch, taps: int, distinct: bool = True) -> int:
    c = _Counter(monkeypatch)
    te.create_prim_func(_gather(taps, distinct))
    return c.n


@pytest.mark.timeout(20)
def test_region_analysis_of_many_data_dependent_loads_is_polynomial(monkeypatch):
    w8, w16, w32 = (_work(monkeypatch, n) for n in (8, 16, 32))
    # doubling the loads may cost up to ~4x more (quadratic), never the 2^8 of before
    assert w16 < 6 * w8 and w32 < 6 * w16, (w8, w16, w32)


@pytest.mark.timeout(20)
def test_identical_data_dependent_indices_are_analysed_once(monkeypatch):
    assert _work(monkeypatch, 32, distinct=False) <= _work(monkeypatch, 2, distinct=False) + 8


@pytest.mark.timeout(20)
def test_gather_with_32_loads_has_an_exact_region_and_runs():
    X, idx, Y = _gather(32)
    func = te.create_prim_func([X, idx, Y])
    x = np.arange(64, dtype="uint8") * 3
    ix = ((np.arange(32, dtype="int32") * 7) % 50 + 5).astype("int32")
    y = np.zeros(4, "int32")
    run(func, x, ix, y)
    np.testing.assert_array_equal(y, np.full(4, x[ix].astype("int32").sum()))
    # evaluate the region of X that block Y declares, with the index table's values
    block = func.body.block.body.body.block
    (read_x,) = [r for r in block.reads if r.buffer.name == "X"]
    idx_buf = func.params[1]
    out = ir.Buffer("out", (2,), "int32")
    rg = read_x.region[0]
    probe = ir.PrimFunc((idx_buf, out), ir.SeqStmt((out.store(rg.min, [0]),
                                                    out.store(rg.extent, [1]))))
    bounds = np.zeros(2, "int32")
    run(probe, ix, bounds)
    assert bounds.tolist() == [ix.min(), ix.max() - ix.min() + 1]


@pytest.mark.timeout(20)
def test_simplify_of_a_deep_integer_max_chain_is_polynomial(monkeypatch):
    def work(n: int) -> int:
        X = ir.Buffer("X", (128,), "int32")
        i = ir.Var("i")
        e = X[i]
        for k in range(1, n):
            e = ir.Max(e, X[i + k])
        c = _Counter(monkeypatch)
        arith.simplify(e, {i: ir.Range(0, 8)})
        return c.n

    w8, w16, w32 = work(8), work(16), work(32)
    assert w16 < 6 * w8 and w32 < 6 * w16, (w8, w16, w32)

