"""compact_buffer_allocation must not give each iteration a fresh buffer when values flow
between iterations through a guarded write (found by tests/tir/test_property.py)."""

from __future__ import annotations

import numpy as np

from tests.tir_transform.helpers import STRICT
from toolchain import te
from toolchain.driver import build, lower
from toolchain.tir.interpreter import run
from toolchain.tir.schedule import Schedule


def _guarded_producer() -> Schedule:
    """C is written only when i_1 == 0 (a split guard) and read by D for both i_1."""
    A = te.placeholder((8, 8), name="A")
    B = te.placeholder((8, 6), name="B")
    r = te.reduce_axis((0, 8), name="k")
    C = te.compute((8, 6), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    D = te.compute((8, 6), lambda i, j: te.max(C[i, j], 0.0), name="D")
    sch = Schedule(te.create_prim_func([A, B, D]))
    c = sch.get_block("C")
    i, _, _ = sch.get_loops(c)
    a, b = sch.split(i, [None, 1])
    f = sch.fuse(a, b)
    _, y = sch.split(f, [None, 1])
    _, y2 = sch.split(y, [None, 2])
    sch.reverse_compute_at(sch.get_block("D"), y2)
    return sch


def test_buffer_written_under_a_guard_stays_outside_the_guarded_loop():
    sch = _guarded_producer()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 8)).astype("float32")
    b = rng.standard_normal((8, 6)).astype("float32")
    want = np.maximum(a @ b, 0)
    lowered = lower(sch)
    for runner in (lambda *x: run(lowered, *x), build(sch, extra_flags=STRICT)):
        d = np.zeros((8, 6), "float32")
        runner(a, b, d)
        np.testing.assert_allclose(d, want, rtol=1e-5, atol=1e-6)
    text = str(lowered)
    # allocated once per i_0 iteration, outside the two-iteration loop that guards writes
    assert text.index("C = T.allocate") < text.index("for i_0_i_1_fused_1_1")
