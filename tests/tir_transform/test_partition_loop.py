"""``partition_loops``: a loop annotated ``partition`` is cut where the conditions on its
variable change value, each piece without its conditions and clamps after ``simplify``;
the padded 2-D copy built through C (and LLVM) gives numpy's ``np.pad``."""

from __future__ import annotations

import numpy as np
import pytest

from tests.tir_transform.helpers import STRICT, count
from toolchain import te
from toolchain.driver import build, lower
from toolchain.tir import ir
from toolchain.tir.schedule import Schedule
from toolchain.tir.transform import PARTITION


def _padded(h: int, w: int, p: int, annotate: bool) -> Schedule:
    """``B = pad(A, p)`` with the clamped, conditional load of a convolution's pack."""
    a = te.placeholder((h, w), name="A")

    def pad(y, x):
        inside = te.all(y - p >= 0, y - p < h, x - p >= 0, x - p < w)
        return te.if_then_else(inside, a[te.max(te.min(y - p, h - 1), 0),
                                         te.max(te.min(x - p, w - 1), 0)], 0.0)

    b = te.compute((h + 2 * p, w + 2 * p), pad, name="B")
    sch = Schedule(te.create_prim_func([a, b]))
    if annotate:
        for loop in sch.get_loops(sch.get_block("B")):
            sch.annotate(loop, PARTITION, 1)
    return sch


def _conditions(func: ir.PrimFunc) -> int:
    n = [0]

    def visit(x):
        if isinstance(x, ir.Call) and x.op == "tir.if_then_else" or isinstance(
                x, (ir.Select, ir.Max, ir.Min)):
            n[0] += 1

    from toolchain.tir.functor import post_order_visit

    post_order_visit(func.body, visit)
    return n[0]


def test_pieces_lose_their_conditions_and_clamps():
    plain, cut = lower(_padded(6, 5, 2, False)), lower(_padded(6, 5, 2, True))
    assert _conditions(plain) > 0 and _conditions(cut) == 0
    # rows cut in 3 pieces, each row's columns in 3 (the short ones unrolled later)
    assert count(plain.body, ir.For) == 2 and count(cut.body, ir.For) > 2
    assert "partition" not in str(cut)


def test_outer_pieces_fold_first_so_border_rows_keep_one_column_loop():
    trace: list = []
    lower(_padded(6, 5, 2, True), trace=trace)
    after = next(f for name, f in trace if name == "partition_loops")
    # rows 0-1 and 8-9: one loop of zeros each; rows 2-7: the columns in 3 pieces
    assert count(after.body, ir.For) == 3 + 1 + 3 + 1


def test_loop_without_conditions_is_left_as_it_was():
    a = te.placeholder((8,), name="A")
    b = te.compute((8,), lambda i: a[i] * 2.0, name="B")
    sch = Schedule(te.create_prim_func([a, b]))
    sch.annotate(sch.get_loops(sch.get_block("B"))[0], PARTITION, 1)
    assert str(lower(sch)) == str(lower(te.create_prim_func([a, b])))


@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("h, w, p", [(6, 5, 2), (1, 1, 3), (7, 9, 0)])
def test_padded_copy_runs_like_numpy(backend: str, h: int, w: int, p: int):
    kw = {"backend": "llvm"} if backend == "llvm" else {"extra_flags": STRICT}
    mod = build(_padded(h, w, p, True), **kw)
    x = np.random.default_rng(0).standard_normal((h, w)).astype(np.float32)
    y = np.full((h + 2 * p, w + 2 * p), np.nan, np.float32)
    mod(x, y)
    np.testing.assert_array_equal(y, np.pad(x, p))
