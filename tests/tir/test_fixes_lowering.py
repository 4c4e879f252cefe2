"""Regressions in the schedule -> lowering path, each run in the interpreter and built to C.

* compact_buffer_allocation must not shrink a buffer to bounds that still contain the loop
  vars it relaxes (an index ``i * j``), and must not move an allocation into a loop whose
  iterations read what earlier iterations wrote (that once gave NaNs).
"""

from __future__ import annotations

import numpy as np

from tests.tir import workloads as W
from tests.tir_transform.helpers import build_and_check
from toolchain import driver
from toolchain.tir import ir
from toolchain.tir.interpreter import run
from toolchain.tir.schedule import Schedule
from toolchain.tir.transform.compact_buffer import compact_buffer_allocation


def _loop(v: ir.Var, n: int, body: ir.Stmt) -> ir.For:
    return ir.For(v, 0, n, "serial", body)


def _allocs(s: ir.Stmt) -> list[ir.Allocate]:
    from toolchain.tir.functor import post_order_visit

    out: list[ir.Allocate] = []
    post_order_visit(s, lambda x: out.append(x) if isinstance(x, ir.Allocate) else None)
    return out


def test_compact_keeps_whole_dimension_for_product_of_loop_vars() -> None:
    """T[i * j + j] in loop i, relaxing j: bounds of i * j over j are not affine in i, so
    the region is not expressible there (it used to be [i * j, i * j + 3], with j leaking)."""
    A = ir.Buffer("A", (16,), "float32")
    B = ir.Buffer("B", (4, 4), "float32")
    T = ir.Buffer("T", (16,), "float32", "local")
    i, j, k = ir.Var("i"), ir.Var("j"), ir.Var("k")
    fill = _loop(j, 4, T.store(A[i * j + j] * 2.0, [i * j + j]))
    use = _loop(k, 4, B.store(T[i * k + k] + 1.0, [i, k]))
    func = ir.PrimFunc((A, B), ir.Allocate(T, _loop(i, 4, ir.seq(fill, use))))
    out = compact_buffer_allocation(func)
    (alloc,) = _allocs(out.body)
    assert alloc.buffer.shape[0].value >= 13  # T[0 .. 12] are used
    a = np.arange(16, dtype="float32")
    b = np.zeros((4, 4), "float32")
    run(out, a, b)
    ii, kk = np.meshgrid(np.arange(4), np.arange(4), indexing="ij")
    np.testing.assert_allclose(b, a[ii * kk + kk] * 2 + 1)


def test_compact_keeps_allocation_outside_loop_whose_iterations_read_earlier_writes() -> None:
    """C is written only in the first iteration of ``o`` but read in every one."""
    A = ir.Buffer("A", (4,), "float32")
    D = ir.Buffer("D", (3, 4), "float32")
    C = ir.Buffer("C", (4,), "float32", "local")
    o, j = ir.Var("o"), ir.Var("j")
    body = ir.seq(ir.IfThenElse(o < 1, C.store(A[j] * 2.0, [j]), None),
                  D.store(C[j] + 1.0, [o, j]))
    func = ir.PrimFunc((A, D), ir.Allocate(C, _loop(o, 3, _loop(j, 4, body))))
    out = compact_buffer_allocation(func)
    assert isinstance(out.body, ir.Allocate)  # still at the top, not inside o or j
    a = np.arange(4, dtype="float32")
    d = np.zeros((3, 4), "float32")
    run(out, a, d)
    np.testing.assert_allclose(d, np.tile(a * 2 + 1, (3, 1)))


def test_compact_still_moves_a_private_accumulator_tile() -> None:
    """A tile initialised and consumed inside each iteration still moves into the loop."""
    wl = W.matmul(16, 16, 16)
    sch = Schedule(wl[0])
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    io, ii = sch.split(i, [None, 4])
    sch.reorder(io, j, k, ii)
    cl = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(cl, io)
    f = driver.lower(sch)
    assert isinstance(f.body, ir.For)  # the accumulator moved inside the tile loop
    W.check(f, wl)
    build_and_check(sch, wl)


def test_guarded_producer_read_by_every_iteration_lowers_correctly() -> None:
    """Found by the property test: split(i, [1, None]), rfactor refused, split, D under k,
    fuse; C is computed under a guard only in the first iteration of the fused loop."""
    from tests.tir.test_property import REGRESSIONS, replay

    name, steps, draws = REGRESSIONS[0]
    sch, wl = replay(name, steps, draws)
    W.check(sch.mod, wl)
    W.check(driver.lower(sch), wl)
    build_and_check(sch, wl)


def test_interpreter_refuses_out_of_bounds_indices() -> None:
    """numpy would wrap B[i - 1] at i = 0 to the last element; the interpreter refuses."""
    import pytest

    A = ir.Buffer("A", (4,), "float32")
    B = ir.Buffer("B", (4,), "float32")
    i = ir.Var("i")
    func = ir.PrimFunc((A, B), _loop(i, 4, B.store(A[i - 1], [i])))
    with pytest.raises(IndexError, match=r"A index -1 at dimension 0 is outside \[0, 4\)"):
        run(func, np.ones(4, "float32"), np.zeros(4, "float32"))
    flat = ir.PrimFunc((A, B), _loop(i, 4, B.store(A[i + 1], [i])))
    with pytest.raises(IndexError, match=r"A index 4 at dimension 0"):
        run(flat, np.ones(4, "float32"), np.zeros(4, "float32"))
