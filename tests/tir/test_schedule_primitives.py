"""Each primitive on a small case: the IR changes as documented and the result still matches
numpy (run by the reference interpreter)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.tir import workloads as W
from toolchain import te
from toolchain.errors import ScheduleError
from toolchain.tir import ir
from toolchain.tir.interpreter import run
from toolchain.tir.schedule import Schedule


def _loops(sch: Schedule, name: str) -> list:
    return sch.get_loops(sch.get_block(name))


def test_get_block_loops_and_children() -> None:
    sch = Schedule(W.matmul_relu()[0])
    assert [lp.name for lp in _loops(sch, "C")] == ["i", "j", "k"]
    i, _, _ = _loops(sch, "C")
    assert sch.get_child_blocks(i) == [sch.get_block("C")]
    assert [b.name for b in sch.get_child_blocks(sch.get_block("C"))] == []
    assert isinstance(sch.get(i), ir.For)


@pytest.mark.parametrize("factors", [[None, 4], [2, None], [4, 4], [None, 5], [3, None, 2]])
def test_split(factors: list) -> None:
    wl = W.matmul(16, 16, 16)
    sch = Schedule(wl[0])
    i, _, _ = _loops(sch, "C")
    parts = sch.split(i, factors=factors)
    assert len(parts) == len(factors)
    text = str(sch.mod)
    divisible = 16 % int(np.prod([f for f in factors if f])) == 0
    assert ("T.where" in text) != divisible
    W.check(sch.mod, wl)


def test_split_keeps_indices_clean() -> None:
    sch = Schedule(W.matmul(64, 64, 64)[0])
    i, _, _ = _loops(sch, "C")
    i0, i1 = sch.split(i, [None, 16])
    sch.split(i1, [None, 4])
    assert "vi = T.axis.spatial(64, i_0 * 16 + i_1_0 * 4 + i_1_1)" in str(sch.mod)


def test_fuse_then_split_gives_back_clean_indices() -> None:
    wl = W.matmul(16, 16, 16)
    sch = Schedule(wl[0])
    i, j, _ = _loops(sch, "C")
    f = sch.fuse(i, j)
    sch.split(f, [None, 16])
    text = str(sch.mod)
    assert "vi = T.axis.spatial(16, i_j_fused_0)" in text
    assert "vj = T.axis.spatial(16, i_j_fused_1)" in text
    W.check(sch.mod, wl)


def test_split_then_fuse_gives_back_the_loop_var() -> None:
    sch = Schedule(W.matmul(16, 16, 16)[0])
    i, _, _ = _loops(sch, "C")
    a, b = sch.split(i, [None, 4])
    sch.fuse(a, b)
    assert "vi = T.axis.spatial(16, i_0_i_1_fused)" in str(sch.mod)


def test_reorder_including_reduction_loops() -> None:
    wl = W.matmul(8, 12, 16)
    sch = Schedule(wl[0])
    i, j, k = _loops(sch, "C")
    sch.reorder(k, i, j)
    assert [lp.name for lp in _loops(sch, "C")] == ["k", "i", "j"]
    W.check(sch.mod, wl)


def test_tile() -> None:
    wl = W.matmul(16, 16, 16)
    sch = Schedule(wl[0])
    i, j, _ = _loops(sch, "C")
    out = sch.tile([i, j], [[None, 4], [None, 8]])
    assert [lp.name for lp in out] == ["i_0", "j_0", "i_1", "j_1"]
    assert "for i_0, j_0, i_1, j_1, k in T.grid(4, 2, 4, 8, 16):" in str(sch.mod)
    W.check(sch.mod, wl)


@pytest.mark.parametrize("prim,text", [("parallel", "T.parallel(4)"),
                                       ("vectorize", "T.vectorized(4)"),
                                       ("unroll", "T.unroll(4)")])
def test_loop_kinds(prim: str, text: str) -> None:
    wl = W.matmul(8, 8, 8)
    sch = Schedule(wl[0])
    i, j, _ = _loops(sch, "C")
    _, j1 = sch.split(j, [None, 4])
    getattr(sch, prim)(j1 if prim != "parallel" else sch.split(i, [4, 2])[0])
    assert text in str(sch.mod)
    W.check(sch.mod, wl)


def test_bind_and_annotations() -> None:
    wl = W.matmul(16, 16, 16)
    sch = Schedule(wl[0], target="cuda-sm80")
    i, j, k = _loops(sch, "C")
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    sch.pragma(k, "unroll_max_step", 8)
    sch.annotate(sch.get_block("C"), "note", "x")
    text = str(sch.mod)
    assert 'for i in T.thread_binding(16, thread="blockIdx.x"):' in text
    assert "for k in T.serial(16, annotations={'pragma_unroll_max_step': 8}):" in text
    assert "T.block_attr({'note': 'x'})" in text
    sch.unannotate(sch.get_block("C"), "note")
    assert "block_attr" not in str(sch.mod)
    W.check(sch.mod, wl)


def test_compute_at_conv_padding() -> None:
    wl = W.conv2d()
    sch = Schedule(wl[0])
    loops = _loops(sch, "Y")
    sch.compute_at(sch.get_block("P"), loops[2])
    text = str(sch.mod)
    assert "vy = T.axis.spatial(10, y + ax2)" in text
    W.check(sch.mod, wl)


def test_compute_at_split_consumer_gets_tile() -> None:
    wl = W.matmul_relu(16, 16, 16)
    sch = Schedule(wl[0])
    i, j = _loops(sch, "D")
    i0, i1 = sch.split(i, [None, 4])
    sch.compute_at(sch.get_block("C"), i0)
    text = str(sch.mod)
    assert "vi = T.axis.spatial(16, i_0 * 4 + ax0)" in text
    assert "for ax0, ax1, ax2 in T.grid(4, 16, 16):" in text
    W.check(sch.mod, wl)


def test_compute_at_non_divisible_split_adds_guard() -> None:
    wl = W.elementwise_chain(10, 6)
    sch = Schedule(wl[0])
    i, _ = _loops(sch, "D")
    i0, _ = sch.split(i, [None, 4])
    sch.compute_at(sch.get_block("C"), i0)
    sch.compute_at(sch.get_block("B"), i0)
    assert "T.where(i_0 * 4 + ax0 < 10)" in str(sch.mod)
    W.check(sch.mod, wl)


def test_reverse_compute_at() -> None:
    wl = W.matmul_relu(16, 16, 16)
    sch = Schedule(wl[0])
    i, j, _ = _loops(sch, "C")
    sch.reverse_compute_at(sch.get_block("D"), j)
    assert [lp.name for lp in _loops(sch, "D")] == ["i", "j"]
    W.check(sch.mod, wl)


def test_compute_inline_and_reverse_compute_inline() -> None:
    wl = W.elementwise_chain()
    sch = Schedule(wl[0])
    sch.compute_inline(sch.get_block("B"))
    sch.reverse_compute_inline(sch.get_block("D"))
    text = str(sch.mod)
    assert 'with T.block("C")' in text and "alloc_buffer" not in text
    assert "T.exp((A[vi, vj] * T.float32(2.0) + T.float32(1.0)) * T.float32(0.1))" in text
    W.check(sch.mod, wl)


def test_compute_inline_padding_into_conv() -> None:
    wl = W.conv2d()
    sch = Schedule(wl[0])
    sch.compute_inline(sch.get_block("P"))
    assert "T.if_then_else(" in str(sch.mod)
    W.check(sch.mod, wl)


def test_cache_read_and_compute_at() -> None:
    wl = W.matmul(16, 16, 16)
    sch = Schedule(wl[0])
    c = sch.get_block("C")
    i, j, k = _loops(sch, "C")
    a_loc = sch.cache_read(c, "A", "local")
    sch.compute_at(a_loc, i)
    text = str(sch.mod)
    assert 'A_local = T.alloc_buffer((16, 16), "float32", scope="local")' in text
    assert "T.reads(A_local[vi, vk], B[vk, vj])" in text
    W.check(sch.mod, wl)


def test_cache_write_and_reverse_compute_at() -> None:
    wl = W.matmul(16, 16, 16)
    sch = Schedule(wl[0])
    c = sch.get_block("C")
    i, j, k = _loops(sch, "C")
    i0, i1 = sch.split(i, [None, 4])
    cw = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(cw, i0)
    assert "C[v0, v1] = C_local[v0, v1]" in str(sch.mod)
    W.check(sch.mod, wl)


def test_cache_write_target_scope() -> None:
    sch = Schedule(W.matmul(16, 16, 16)[0], target="cuda-sm80")
    sch.cache_write(sch.get_block("C"), 0, "wmma.accumulator")
    assert 'scope="wmma.accumulator"' in str(sch.mod)


def test_set_scope_and_storage_align() -> None:
    wl = W.matmul_relu(8, 8, 8)
    sch = Schedule(wl[0])
    c = sch.get_block("C")
    sch.set_scope(c, 0, "shared")
    sch.storage_align(c, 0, axis=0, factor=16, offset=1)
    text = str(sch.mod)
    assert 'C = T.alloc_buffer((8, 8), "float32", scope="shared")' in text
    assert "T.block_attr({'buffer_dim_align': [['C', 0, 16, 1]]})" in text
    W.check(sch.mod, wl)


def test_decompose_reduction() -> None:
    wl = W.matmul(8, 8, 8)
    sch = Schedule(wl[0])
    c = sch.get_block("C")
    _, _, k = _loops(sch, "C")
    init = sch.decompose_reduction(c, k)
    assert init.name == "C_init"
    assert "T.init()" not in str(sch.mod)
    W.check(sch.mod, wl)


@pytest.mark.parametrize("axis", [0, 1])
def test_rfactor(axis: int) -> None:
    wl = W.row_sum()
    sch = Schedule(wl[0])
    _, k = _loops(sch, "B")
    k0, k1 = sch.split(k, [None, 4])
    rf = sch.rfactor(k1, axis)
    assert rf.name == "B_rf"
    shape = "(4, 12)" if axis == 0 else "(12, 4)"
    assert f"B_rf = T.alloc_buffer({shape}" in str(sch.mod)
    # the factored loop now only feeds a spatial var: it can run in parallel
    sch.parallel(sch.get_loops(rf)[2])
    W.check(sch.mod, wl)


def test_blockize() -> None:
    wl = W.matmul(16, 16, 16)
    sch = Schedule(wl[0])
    i, _, _ = _loops(sch, "C")
    _, i1 = sch.split(i, [None, 4])
    outer = sch.blockize(i1)
    assert outer.name == "C_o"
    assert "T.writes(C[vi_0 * 4:vi_0 * 4 + 4, 0:16])" in str(sch.mod)
    W.check(sch.mod, wl)


def test_symbolic_shape_schedule_runs_for_any_size() -> None:
    m = te.var("m")
    A = te.placeholder((m, 8), name="A")
    B = te.compute((m, 8), lambda i, j: A[i, j] * 3.0, name="B")
    sch = Schedule(te.create_prim_func([A, B]))
    i, j = sch.get_loops(sch.get_block("B"))
    sch.split(i, [None, 4])
    sch.vectorize(j)
    assert "T.grid((m + 3) // 4, 4)" in str(sch.mod)
    for rows in (1, 5, 8):
        a = np.arange(rows * 8, dtype="float32").reshape(rows, 8)
        b = np.zeros_like(a)
        run(sch.mod, a, b)
        np.testing.assert_allclose(b, a * 3)


def test_copy_is_independent() -> None:
    sch = Schedule(W.matmul(8, 8, 8)[0])
    i, _, _ = _loops(sch, "C")
    other = sch.copy()
    sch.split(i, [2, 4])
    assert "i_0" not in str(other.mod) and len(other.trace) == 2
    other.parallel(i)
    assert "T.parallel(8)" in str(other.mod)


def _rfactored_row_sums() -> tuple[Schedule, object]:
    """Row sums of a 2 x 100 array, the reduction split by 32 (``k_0 * 32 + k_1 < 100``
    guards the last step) and rfactored on ``k_1`` with its init in the block."""
    x = te.placeholder((2, 100), "float32", "x")
    k = te.reduce_axis((0, 100), "k")
    y = te.compute((2,), lambda i: te.sum(x[i, k], axis=k), name="y")
    sch = Schedule(te.create_prim_func([x, y], name="rows"))
    _, kk = sch.get_loops(sch.get_block("y"))
    _, inner = sch.split(kk, [None, 32])
    return sch, sch.rfactor(inner, 0, init_in_block=True)  # the init stays in the block


def test_compute_at_keeps_a_guarded_producers_own_guard() -> None:
    """A producer whose split does not divide (``k_0 * 32 + k_1 < 100``) keeps that guard
    when ``compute_at`` regenerates its loops (it was dropped: reads past the row)."""
    sch, rf = _rfactored_row_sums()
    assert "y_rf_init" not in str(sch.mod)
    i, t = sch.get_loops(sch.get_block("y"))
    sch.compute_at(rf, t)
    assert "T.where(" in str(sch.mod) and "< 100" in str(sch.mod)
    a = np.random.default_rng(0).standard_normal((2, 100)).astype(np.float32)
    out = np.zeros(2, np.float32)
    run(_lower(sch), a, out)
    np.testing.assert_allclose(out, a.sum(axis=1), rtol=1e-5)


def test_rfactor_keeps_a_separate_init_where_a_first_step_may_not_run() -> None:
    x = te.placeholder((2, 20), "float32", "x")
    k = te.reduce_axis((0, 20), "k")
    y = te.compute((2,), lambda i: te.sum(x[i, k], axis=k), name="y")
    sch = Schedule(te.create_prim_func([x, y], name="short"))
    _, kk = sch.get_loops(sch.get_block("y"))
    _, inner = sch.split(kk, [None, 32])  # threads 20..31 have no element
    sch.rfactor(inner, 0, init_in_block=True)
    assert "y_rf_init" in str(sch.mod)


def _lower(sch: Schedule) -> ir.PrimFunc:
    from toolchain.driver import lower

    return lower(sch)


def test_compute_at_refuses_to_drop_a_guard_it_cannot_carry() -> None:
    """The rfactor block's guard ``k_0 * 32 + k_1 < 100`` says more than its variables'
    domains (4 × 32 = 128 steps); once ``k_1`` is fused with ``i`` no block variable alone
    stands for it, and moving the block used to drop the guard silently: the lowered
    kernel read ``x`` past its rows (the interpreter's index 200 of 200)."""
    sch, rf = _rfactored_row_sums()
    i, k0, k1 = sch.get_loops(rf)
    sch.reorder(k1, i, k0)
    sch.fuse(k1, i)
    yi, _ = sch.get_loops(sch.get_block("y"))
    with pytest.raises(ScheduleError, match=r"'y_rf' is guarded by k_0 \* 32 \+ "
                                            r"k_1_i_fused // 2 < 100"):
        sch.compute_at(rf, yi)
