"""The SIMT emulation: emulate_threads runs blocks and threads as serial loops, split at
barriers (loop fission), with per-thread copies of what a thread keeps across one."""

from __future__ import annotations

import numpy as np
import pytest

from tests.codegen.gpu_workloads import A8 as A
from tests.codegen.gpu_workloads import B8 as B
from tests.codegen.gpu_workloads import one_block, tiled_gemm
from tests.codegen.test_cuda import shared_memory_matmul
from toolchain.driver import lower
from toolchain.errors import UnsupportedError
from toolchain.tir import ir
from toolchain.tir.interpreter import run
from toolchain.tir.transform.inject_barriers import barrier, is_barrier
from toolchain.tir.transform.simt import SIMT_BLOCK, SIMT_THREAD, emulate_threads


def test_kernel_without_barriers_just_serializes_its_thread_loops() -> None:
    f = one_block(lambda t, S: B.store(A[t] * 2.0, [t]), shared=False)
    emu = emulate_threads(f)
    assert str(emu) == str(f).replace('T.thread_binding(8, thread="threadIdx.x")', "range(8)")


def test_tiled_gemm_is_split_into_phases_with_the_k_loop_outside() -> None:
    emu = emulate_threads(lower(tiled_gemm()))
    text = str(emu)
    lines = [line.strip() for line in text.splitlines()]
    assert lines[3:6] == [
        "for j_0 in T.serial(2, annotations={'simt_block': 'blockIdx.x'}):",
        'A_shared = T.allocate((256,), "float32", scope="shared")',
        'B_shared = T.allocate((256,), "float32", scope="shared")']
    assert lines[6].startswith("for k_0 in")
    # the k loop's body: (both tile loads in one phase) barrier (product) barrier
    k0 = next(s for s in _loops(emu) if s.loop_var.name == "k_0")
    phases = k0.body.seq
    assert [type(p).__name__ if not is_barrier(p) else "sync" for p in phases] == \
        ["For", "sync", "For", "sync"]
    assert [p.annotations.get(SIMT_THREAD) for p in (phases[0], phases[2])] == \
        ["threadIdx.y", "threadIdx.y"]
    assert "thread_binding" not in text


def _loops(f: ir.PrimFunc) -> list[ir.For]:
    from tests.tir_transform.helpers import loops

    return loops(f.body)


def test_emulation_runs_like_the_gpu_in_the_interpreter() -> None:
    for sch in (tiled_gemm(n=32, tile=16, bk=8, threads=4),
                tiled_gemm(n=32, tile=16, bk=8, threads=4, local=True)):
        f = lower(sch)
        rng = np.random.default_rng(0)
        a, b = (rng.standard_normal((32, 32)).astype("float32") for _ in range(2))
        c = np.zeros((32, 32), "float32")
        run(emulate_threads(f), a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_a_value_kept_across_a_barrier_becomes_a_per_thread_array() -> None:
    def body(t: ir.Var, S: ir.Buffer) -> ir.Stmt:
        x = ir.Var("x", "float32")
        return ir.LetStmt(x, A[t] * 2.0, ir.seq(S.store(x, [t]), barrier(),
                                                 B.store(S[7 - t] + x, [t])))

    emu = emulate_threads(one_block(body))
    text = str(emu)
    assert 'x_per_thread = T.allocate((8,), "float32")' in text
    assert "B[threadIdx_x] = S[7 - threadIdx_x] + x_per_thread[threadIdx_x]" in text
    a = np.arange(8, dtype="float32")
    b = np.zeros(8, "float32")
    run(emu, a, b)
    np.testing.assert_array_equal(b, a[::-1] * 2 + a * 2)


def test_local_array_across_a_barrier_gets_one_slice_per_thread() -> None:
    def body(t: ir.Var, S: ir.Buffer) -> ir.Stmt:
        L = ir.Buffer("L", (2,), "float32", scope="local")
        return ir.Allocate(L, ir.seq(L.store(A[t], [0]), L.store(A[t] + 1.0, [1]),
                                     S.store(L[0], [t]), barrier(),
                                     B.store(S[7 - t] * L[1], [t])))

    emu = emulate_threads(one_block(body))
    assert "L_per_thread[threadIdx_x * 2 + 1]" in str(emu)
    a = np.arange(8, dtype="float32")
    b = np.zeros(8, "float32")
    run(emu, a, b)
    np.testing.assert_array_equal(b, a[::-1] * (a + 1))


@pytest.mark.parametrize("case", ["if", "loop", "partial"])
def test_barrier_under_thread_dependent_control_flow_is_refused(case: str) -> None:
    def body(t: ir.Var, S: ir.Buffer) -> ir.Stmt:
        phases = ir.seq(S.store(A[t], [t]), barrier(), B.store(S[7 - t], [t]))
        if case == "if":
            return ir.IfThenElse(t < 4, phases)
        if case == "loop":
            return ir.For(ir.Var("r"), 0, t, "serial", phases)
        u = ir.Var("u")  # a thread loop over half the block
        return ir.seq(ir.For(u, 0, 4, "thread_binding", phases, "threadIdx.x"),
                      B.store(A[t], [t]))

    want = {"if": r"`if t < 4`", "loop": r"loop r \(bounds 0, threadIdx_x\)",
            "partial": r"thread loop u \(threadIdx.x of extent 4, the block has 8\)"}[case]
    with pytest.raises(UnsupportedError, match=r"SIMT emulation: kernel k: a barrier .*"
                       + want + r".*depends on the thread index"):
        emulate_threads(one_block(body))


def test_uniform_loop_around_a_barrier_goes_outside_the_thread_loops() -> None:
    def body(t: ir.Var, S: ir.Buffer) -> ir.Stmt:
        r = ir.Var("r")
        return ir.For(r, 0, 3, "serial", ir.seq(
            S.store(B[t] + 1.0, [t]), barrier(), B.store(S[7 - t], [t]), barrier()))

    emu = emulate_threads(one_block(body))
    r = next(s for s in _loops(emu) if s.loop_var.name == "r")
    assert all(s.annotations.get(SIMT_THREAD) for s in r.body.seq if isinstance(s, ir.For))
    a = np.zeros(8, "float32")
    b = np.arange(8, dtype="float32")
    want = b.copy()
    for _ in range(3):
        want = (want + 1)[::-1]
    run(emu, a, b)
    np.testing.assert_array_equal(b, want)


def test_block_loops_are_marked() -> None:
    emu = emulate_threads(lower(shared_memory_matmul(64, 16)))
    tags = [s.annotations.get(SIMT_BLOCK) for s in _loops(emu) if SIMT_BLOCK in s.annotations]
    assert sorted(tags) == ["blockIdx.x", "blockIdx.y"]
