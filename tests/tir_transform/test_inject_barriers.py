"""inject_barriers: barriers from the shared-memory read/write sets of GPU kernels."""

from __future__ import annotations

import pytest

from tests.codegen.gpu_workloads import tiled_gemm
from tests.tir_transform.helpers import count, loops
from toolchain import te
from toolchain.driver import lower
from toolchain.errors import UnsupportedError
from toolchain.tir import ir
from toolchain.tir.schedule import Schedule
from toolchain.tir.transform import PHASES, inject_barriers
from toolchain.tir.transform.inject_barriers import barrier, is_barrier

A = ir.Buffer("A", (64,), "float32")
B = ir.Buffer("B", (64,), "float32")


def _kernel(*stmts_of_t, shared: tuple[ir.Buffer, ...] | None = None, n: int = 64
            ) -> ir.PrimFunc:
    """One block of ``n`` threads running each ``stmt_of_t(t)`` as its own thread loop."""
    S = ir.Buffer("S", (n,), "float32", scope="shared")
    nests = []
    for k, make in enumerate(stmts_of_t):
        t = ir.Var(f"t{k}")
        nests.append(ir.For(t, 0, n, "thread_binding", make(t, S), "threadIdx.x"))
    return ir.PrimFunc((A, B), ir.Allocate(S, ir.seq(*nests)), "k")


def _syncs(f: ir.PrimFunc) -> int:
    found: list[ir.Stmt] = []
    from toolchain.tir.functor import post_order_visit

    post_order_visit(f.body, lambda x: found.append(x) if isinstance(x, ir.Stmt) and
                     is_barrier(x) else None)
    return len(found)


def test_pass_runs_last_in_phase_3() -> None:
    assert PHASES[3][-1] is inject_barriers


def test_kernel_without_shared_memory_is_unchanged() -> None:
    X = te.placeholder((1024,), name="X")
    Y = te.compute((1024,), lambda i: X[i] * 2.0, name="Y")
    sch = Schedule(te.create_prim_func([X, Y]))
    bx, tx = sch.split(sch.get_loops(sch.get_block("Y"))[0], [None, 128])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    trace: list = []
    lower(sch, trace=trace)
    before = dict(trace)["storage_rewrite"]
    assert inject_barriers(before) is before
    assert "storage_sync" not in str(dict(trace)["inject_barriers"])


def test_read_after_write_of_another_thread_gets_a_barrier() -> None:
    f = _kernel(lambda t, S: S.store(A[t], [t]), lambda t, S: B.store(S[63 - t], [t]))
    body = inject_barriers(f).body.body
    assert isinstance(body, ir.SeqStmt) and is_barrier(body.seq[1]) and len(body.seq) == 3


def test_a_thread_reading_back_its_own_element_needs_none() -> None:
    f = _kernel(lambda t, S: S.store(A[t], [t]), lambda t, S: B.store(S[t] * 2.0, [t]))
    assert inject_barriers(f) is f


def test_write_after_read_and_write_after_write() -> None:
    war = _kernel(lambda t, S: B.store(S[63 - t], [t]), lambda t, S: S.store(A[t], [t]))
    waw = _kernel(lambda t, S: S.store(A[t], [t]), lambda t, S: S.store(B[t], [63 - t]))
    assert _syncs(inject_barriers(war)) == 1
    assert _syncs(inject_barriers(waw)) == 1
    rr = _kernel(lambda t, S: B.store(S[63 - t], [t]), lambda t, S: A.store(S[t], [t]))
    assert _syncs(inject_barriers(rr)) == 0


def test_loop_carried_conflict_gets_a_barrier_at_the_end_of_the_body() -> None:
    S = ir.Buffer("S", (64,), "float32", scope="shared")
    C = ir.Buffer("C", (64 * 8,), "float32")
    k, t0, t1 = ir.Var("k"), ir.Var("t0"), ir.Var("t1")
    body = ir.For(k, 0, 8, "serial", ir.seq(
        ir.For(t0, 0, 64, "thread_binding", S.store(C[k * 64 + t0], [t0]), "threadIdx.x"),
        ir.For(t1, 0, 64, "thread_binding", B.store(B[t1] + S[63 - t1], [t1]),
               "threadIdx.x")))
    f = inject_barriers(ir.PrimFunc((C, B), ir.Allocate(S, body), "k"))
    text = str(f).splitlines()
    syncs = [n for n, line in enumerate(text) if "storage_sync" in line]
    assert len(syncs) == 2
    assert "S[t0] = C[k * 64 + t0]" in text[syncs[0] - 1]  # load; sync; use; sync
    assert text[syncs[1]].startswith(" " * 8) and syncs[1] == len(text) - 1


def test_cooperative_loads_of_disjoint_elements_need_no_barrier_between_iterations() -> None:
    # each of 64 threads stores 4 elements (v * 64 + t): no two threads share one
    f = lower(tiled_gemm())
    fetch = [lp for lp in loops(f.body) if lp.loop_var.name.startswith("ax0_ax1_fused_0")]
    assert fetch and all(_syncs(ir.PrimFunc((), lp)) == 0 for lp in fetch)


def test_tiled_gemm_barrier_placement_on_the_printed_ir() -> None:
    text = str(lower(tiled_gemm())).splitlines()
    syncs = [n for n, line in enumerate(text) if "T.storage_sync('shared')" in line]
    assert len(syncs) == 2
    k0 = next(n for n, line in enumerate(text) if line.lstrip().startswith("for k_0 in"))
    indent = text[k0].index("for") + 4  # statements of the k loop's body
    assert all(text[n].index("T.") == indent for n in syncs)
    # load B; load A; sync; compute; sync (the end of the k loop)
    order = [line.strip()[:12] for line in text[k0 + 1:] if len(line) - len(line.lstrip())
             == indent and not line.lstrip().startswith(("A_shared =", "B_shared ="))]
    assert order == ["for ax0_ax1_", "for ax0_ax1_", "T.storage_sy", "for i_1 in T",
                     "T.storage_sy"]


def test_existing_barriers_are_kept_and_not_doubled() -> None:
    f = _kernel(lambda t, S: S.store(A[t], [t]), lambda t, S: B.store(S[63 - t], [t]))
    once = inject_barriers(f)
    assert _syncs(inject_barriers(once)) == 1
    body = once.body.body
    manual = ir.PrimFunc(f.params, ir.Allocate(f.body.buffer, ir.seq(
        body.seq[0], barrier(), body.seq[2])), "k")
    assert inject_barriers(manual) is manual


def test_barrier_needed_under_a_thread_dependent_condition_is_an_error() -> None:
    S = ir.Buffer("S", (64,), "float32", scope="shared")
    t = ir.Var("t")
    branch = ir.IfThenElse(t < 32, ir.seq(S.store(A[t], [t]), B.store(S[31 - t], [t])))
    f = ir.PrimFunc((A, B), ir.Allocate(S, ir.For(t, 0, 64, "thread_binding", branch,
                                                     "threadIdx.x")), "diverge")
    with pytest.raises(UnsupportedError, match=r"function diverge: .*B\[t\] = S\[31 - t\].*"
                       r"`if t < 32`.*depends on the thread"):
        inject_barriers(f)


def test_uniform_condition_may_hold_a_barrier() -> None:
    S = ir.Buffer("S", (64,), "float32", scope="shared")
    t, k = ir.Var("t"), ir.Var("k")
    branch = ir.IfThenElse(k < 2, ir.seq(S.store(A[t], [t]), B.store(S[63 - t], [t])))
    f = ir.PrimFunc((A, B), ir.Allocate(S, ir.For(k, 0, 4, "serial", ir.For(
        t, 0, 64, "thread_binding", branch, "threadIdx.x"))), "uniform")
    assert _syncs(inject_barriers(f)) >= 1


def test_unknown_index_conflicts_conservatively() -> None:
    # an index read from memory cannot be enumerated: assume other threads' elements
    S = ir.Buffer("S", (64,), "float32", scope="shared")
    I32 = ir.Buffer("I", (64,), "int32")
    t0, t1 = ir.Var("t0"), ir.Var("t1")
    body = ir.Allocate(S, ir.seq(
        ir.For(t0, 0, 64, "thread_binding", S.store(A[t0], [t0]), "threadIdx.x"),
        ir.For(t1, 0, 64, "thread_binding", B.store(S[I32[t1]], [t1]), "threadIdx.x")))
    f = inject_barriers(ir.PrimFunc((A, I32, B), body, "gather"))
    assert _syncs(f) == 1
    assert count(f.body, ir.Evaluate) == 1
