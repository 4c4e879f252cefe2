"""Traces: every call recorded with stable handle names, replayable, JSON round trip."""

from __future__ import annotations

from tests.tir import workloads as W
from toolchain.tir.schedule import Schedule, Trace


def _schedule() -> Schedule:
    sch = Schedule(W.matmul_relu(16, 16, 16)[0])
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    io, ii = sch.split(i, factors=[None, 4])
    jo, ji = sch.split(j, factors=[None, 8])
    sch.reorder(io, jo, k, ii, ji)
    sch.vectorize(ji)
    d = sch.get_block("D")
    sch.reverse_compute_at(d, jo)
    sch.decompose_reduction(c, k)
    sch.parallel(io)
    return sch


def test_trace_prints_as_python() -> None:
    assert str(_schedule().trace).splitlines() == [
        "b0 = sch.get_block('C')",
        "l1, l2, l3 = sch.get_loops(b0)",
        "l4, l5 = sch.split(l1, factors=[None, 4])",
        "l6, l7 = sch.split(l2, factors=[None, 8])",
        "sch.reorder(l4, l6, l3, l5, l7)",
        "sch.vectorize(l7)",
        "b8 = sch.get_block('D')",
        "sch.reverse_compute_at(b8, l6)",
        "b9 = sch.decompose_reduction(b0, l3)",
        "sch.parallel(l4)",
    ]


def test_replay_on_fresh_func_gives_same_ir_and_result() -> None:
    sch = _schedule()
    wl = W.matmul_relu(16, 16, 16)
    again = sch.trace.apply_to(wl[0])
    assert str(again.mod) == str(sch.mod)
    W.check(again.mod, wl)


def test_json_round_trip() -> None:
    sch = _schedule()
    text = sch.trace.as_json()
    back = Trace.from_json(text)
    assert str(back) == str(sch.trace)
    assert str(back.apply_to(W.matmul_relu(16, 16, 16)[0]).mod) == str(sch.mod)


def test_failed_call_is_not_recorded() -> None:
    sch = Schedule(W.matmul(8, 8, 8)[0])
    _, _, k = sch.get_loops(sch.get_block("C"))
    try:
        sch.parallel(k)
    except Exception:
        pass
    assert len(sch.trace) == 2
