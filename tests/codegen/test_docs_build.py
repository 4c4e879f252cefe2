"""docs/schedule.md "Build and run": the lowered IR shown is what lower() prints."""

from __future__ import annotations

from pathlib import Path

from toolchain import te
from toolchain.driver import lower
from toolchain.tir.schedule import Schedule

DOC = Path(__file__).resolve().parents[2] / "docs" / "schedule.md"


def _doc_schedule(n: int = 1024, bn: int = 32) -> Schedule:
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


def test_lowered_ir_in_the_doc_is_current():
    section = DOC.read_text().split("## Build and run", 1)[1]
    block = section.split("```\n@T.prim_func", 1)[1].split("```", 1)[0]
    lowered = str(lower(_doc_schedule())).splitlines()
    for line in ("@T.prim_func" + block).splitlines():
        if line.strip() and not line.strip().startswith("..."):
            assert line in lowered, f"docs/schedule.md Build and run is out of date: {line!r}"
