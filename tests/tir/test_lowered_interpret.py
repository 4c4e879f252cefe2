"""Cross-check of the lowering pipeline without a C compiler: the lowered IR of scheduled
functions runs in the reference interpreter and still matches numpy."""

from __future__ import annotations

import pytest

from tests.tir import workloads as W
from tests.tir.test_examples import blocked_packed_matmul
from toolchain.tir.schedule import Schedule

driver = pytest.importorskip("toolchain.driver")


def test_lowered_blocked_packed_matmul() -> None:
    low = driver.lower(blocked_packed_matmul(32, 8))
    assert "T.Ramp(" in str(low)  # vectorized
    W.check(low, W.matmul(32, 32, 32))


def test_lowered_conv2d_with_compute_at_and_guards() -> None:
    wl = W.conv2d(1, 3, 7, 7, 4, 3)
    sch = Schedule(wl[0])
    b, o, y, x, rc, ry, rx = sch.get_loops(sch.get_block("Y"))
    x0, x1 = sch.split(x, [None, 4])  # 7 = 2 x 4 with a guard
    sch.compute_at(sch.get_block("P"), y)
    sch.unroll(rx)
    W.check(driver.lower(sch), wl)


def test_lowered_rfactor_and_cache_write() -> None:
    wl = W.row_sum(5, 12)
    sch = Schedule(wl[0])
    _, k = sch.get_loops(sch.get_block("B"))
    _, k1 = sch.split(k, [None, 4])
    rf = sch.rfactor(k1, 0)
    sch.cache_write(rf, 0, "local")
    W.check(driver.lower(sch), wl)
