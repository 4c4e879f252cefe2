"""The walk-through of docs/schedule.md at a small size, and docstring coverage."""

from __future__ import annotations

import inspect

import numpy as np

from toolchain import te
from toolchain.tir.interpreter import run
from toolchain.tir.schedule import Schedule


def blocked_packed_matmul(n: int, bn: int) -> Schedule:
    """The blocked, packed matmul of docs/schedule.md section 3."""
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    packed = te.compute((n // bn, n, bn), lambda x, y, z: B[y, x * bn + z], name="packedB")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * packed[j // bn, k, j % bn], axis=k),
                   name="C")
    sch = Schedule(te.create_prim_func([A, B, C]))
    c = sch.get_block("C")
    i, j, kk = sch.get_loops(c)
    io, jo, ii, ji = sch.tile([i, j], [[None, bn], [None, bn]])
    ko, ki = sch.split(kk, [None, 4])
    sch.reorder(io, jo, ko, ii, ki, ji)
    cc = sch.cache_write(c, 0, "global")
    sch.reverse_compute_at(cc, jo)
    sch.decompose_reduction(c, ko)
    sch.vectorize(ji)
    sch.parallel(io)
    x, _, z = sch.get_loops(sch.get_block("packedB"))
    sch.vectorize(z)
    sch.parallel(x)
    return sch


def test_blocked_packed_matmul_matches_numpy() -> None:
    sch = blocked_packed_matmul(32, 8)
    text = str(sch.mod)
    assert "packedB = T.alloc_buffer((4, 32, 8)" in text
    assert "for j_1 in T.vectorized(8):" in text and "for i_0 in T.parallel(4):" in text
    rng = np.random.default_rng(0)
    a = rng.random((32, 32), dtype=np.float32)
    b = rng.random((32, 32), dtype=np.float32)
    c = np.zeros((32, 32), np.float32)
    run(sch.mod, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_doc_walkthrough_output_is_in_the_doc() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "schedule.md").read_text()
    text = str(blocked_packed_matmul(1024, 32).mod)
    assert text in doc, "docs/schedule.md section 3 is out of date"


def test_every_primitive_documents_before_and_after() -> None:
    prims = ["split", "fuse", "reorder", "tile", "parallel", "vectorize", "unroll", "bind",
             "annotate", "pragma", "compute_at", "reverse_compute_at", "compute_inline",
             "reverse_compute_inline", "cache_read", "cache_write", "set_scope",
             "storage_align", "decompose_reduction", "rfactor", "blockize", "tensorize"]
    for p in prims:
        doc = inspect.getdoc(getattr(Schedule, p)) or ""
        assert "sch." in doc, p
        assert "before" in doc.lower() and "after" in doc.lower(), p
