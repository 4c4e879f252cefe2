"""Regressions in compute_at / reverse_compute_at / reverse_compute_inline reported by other
helpers; every schedule is interpreted and built to C, both compared with numpy."""

from __future__ import annotations

import pytest

from tests.tir import workloads as W
from tests.tir_transform.helpers import build_and_check
from toolchain import driver
from toolchain.errors import ScheduleError
from toolchain.tir.schedule import Schedule


def _check(sch: Schedule, wl: W.Workload) -> None:
    W.check(sch.mod, wl)
    W.check(driver.lower(sch), wl)
    build_and_check(sch, wl)


def _block_loops(sch: Schedule, name: str) -> list:
    return sch.get_loops(sch.get_block(name))


@pytest.mark.parametrize("inner", [None, 8, 4])
def test_reverse_compute_at_under_fused_loop(inner: int | None) -> None:
    """B's loops fused (vi = f // 32, vj = f % 32), optionally split again; C moved under
    the (outer) fused loop computes exactly what each iteration produced."""
    wl = W.elementwise_chain(6, 32)
    sch = Schedule(wl[0])
    f = sch.fuse(*_block_loops(sch, "B"))
    if inner is not None:
        f, _ = sch.split(f, [None, inner])
    sch.reverse_compute_at(sch.get_block("C"), f)
    c_loops = _block_loops(sch, "C")
    if inner is None:
        assert len(c_loops) == 1  # one element per iteration: no loop of its own
    _check(sch, wl)


def test_reverse_compute_at_refuses_a_region_that_is_not_a_box() -> None:
    """Fused loop split by 5 (not a divisor of the row, 32): one iteration's elements can
    straddle two rows; the bounding box would hold elements not produced yet."""
    wl = W.elementwise_chain(6, 32)
    sch = Schedule(wl[0])
    f, _ = sch.split(sch.fuse(*_block_loops(sch, "B")), [None, 5])
    before = str(sch.mod)
    with pytest.raises(ScheduleError, match=r"does not produce a box of B.*would read"):
        sch.reverse_compute_at(sch.get_block("C"), f)
    assert str(sch.mod) == before
    W.check(sch.mod, wl)


@pytest.mark.parametrize("factor", [3, 4, 7])
@pytest.mark.parametrize("which", [0, 1])
def test_compute_at_after_non_divisible_split_of_producer(factor: int, which: int) -> None:
    """The producer's loop split by a non-divisor (a guard ``i_0 * f + i_1 < n``), then
    moved under a consumer loop: the moved block re-derives its guard from its region."""
    wl = W.elementwise_chain(6, 10)
    sch = Schedule(wl[0])
    sch.split(_block_loops(sch, "B")[which], [None, factor])
    cj = sch.split(_block_loops(sch, "C")[1], [None, factor])[0]
    sch.compute_at(sch.get_block("B"), cj)
    _check(sch, wl)


def test_compute_at_reduction_producer_after_non_divisible_split() -> None:
    wl = W.matmul_relu(6, 5, 7)
    sch = Schedule(wl[0])
    i, j, k = _block_loops(sch, "C")
    sch.split(k, [None, 3])
    sch.split(i, [None, 4])
    di = sch.split(_block_loops(sch, "D")[0], [None, 4])[0]
    sch.compute_at(sch.get_block("C"), di)
    _check(sch, wl)


def test_reverse_compute_inline_without_a_load_is_a_schedule_error() -> None:
    """A consumer whose reads list B but whose value never loads it (an index-only use, as
    left by some blockize sequences) used to fail with IndexError."""
    from dataclasses import replace

    from toolchain.tir import ir
    from toolchain.tir.schedule import state as st

    wl = W.elementwise_chain(6, 10)
    sch = Schedule(wl[0])
    realize, _ = st.find_block(sch.mod, "C")
    blk = realize.block
    a = next(p for p in sch.mod.params if p.name == "A")
    vi, vj = (iv.var for iv in blk.iter_vars)
    body = ir.BufferStore(blk.body.buffer, a[vi, vj] + 1.0, blk.body.indices)
    reads = blk.reads + tuple(ir.BufferRegion(a, r.region) for r in blk.reads)
    sch.state.update({id(blk): replace(blk, body=body, reads=reads)})
    with pytest.raises(ScheduleError, match="never loads B.*compute_inline on the producer"):
        sch.reverse_compute_inline(sch.get_block("C"))


def test_reverse_compute_at_accepts_a_mixed_radix_tile() -> None:
    """x split by 4 (9 is not a multiple: guarded tail); the local tile written as
    x_0 * 4 + x_1 under y is a box, so its write-back moves under y."""
    wl = W.conv2d(1, 3, 9, 9, 4, 3)
    sch = Schedule(wl[0])
    _, _, y, x, *_ = _block_loops(sch, "Y")
    sch.split(x, [None, 4])
    out = sch.cache_write(sch.get_block("Y"), 0, "local")
    sch.reverse_compute_at(out, y)
    _check(sch, wl)


def _flat_then_rows(rows: int, width: int, flat: int) -> W.Workload:
    """``B[i, p] = A[i, p] * 2`` over ``flat`` pixels, read back as rows:
    ``C[i, y, x] = B[i, y * width + x] + 1`` (a 1x1 convolution's product and output)."""
    import numpy as np

    from toolchain import te

    a = te.placeholder((3, flat), name="A")
    b = te.compute((3, flat), lambda i, p: a[i, p] * 2.0, name="B")
    c = te.compute((3, rows, width), lambda i, y, x: b[i, y * width + x] + 1.0, name="C")
    rng = np.random.default_rng(0)

    def inputs() -> list:
        return [rng.standard_normal((3, flat)).astype("float32"),
                np.zeros((3, rows, width), "float32")]

    return (te.create_prim_func([a, c]), inputs,
            lambda av, cv: (av[:, :rows * width] * 2 + 1).reshape(3, rows, width))


def test_reverse_compute_inline_through_a_flattened_index() -> None:
    """C reads B at ``y * 4 + x`` covering B's 12 pixels exactly: inlined, the producer
    (split across rows, 8 pixels a step) stores C at ``[p // 4, p % 4]``."""
    wl = _flat_then_rows(3, 4, 12)
    sch = Schedule(wl[0])
    _, p = _block_loops(sch, "B")
    sch.split(p, [None, 8])
    sch.reverse_compute_inline(sch.get_block("C"))
    assert "C[" in str(sch.mod)
    with pytest.raises(ScheduleError):
        sch.get_block("C")
    _check(sch, wl)


def test_reverse_compute_inline_refuses_a_flattened_index_that_pads() -> None:
    """B has 13 pixels, C reads 12 of them: inlining would store a 13th output pixel."""
    wl = _flat_then_rows(3, 4, 13)
    sch = Schedule(wl[0])
    with pytest.raises(ScheduleError, match=r"B\[vi \* 8 \+ vj\] covering"):
        sch.reverse_compute_inline(sch.get_block("C"))


def test_reverse_compute_inline_of_a_prefix_predicates_the_producer() -> None:
    """With ``prefix=True`` the read of B's first 12 of 16 pixels (the tensor-core
    convolution's pixels padded to a multiple of 16) inlines: the producer, split 8 pixels
    a step, stores C only where ``p < 12`` (``T.where``), and computes what C would."""
    wl = _flat_then_rows(3, 4, 16)
    sch = Schedule(wl[0])
    _, p = _block_loops(sch, "B")
    sch.split(p, [None, 8])
    sch.reverse_compute_inline(sch.get_block("C"), prefix=True)
    assert "T.where(" in str(sch.mod) and "< 12" in str(sch.mod)
    _check(sch, wl)
    # the trace replays it (the keyword recorded)
    assert "prefix=True" in str(sch.trace)
