"""GPU schedules with shared memory, hand-built one-block kernels, and a runner for
their SIMT emulation in C."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import numpy as np

from toolchain import te
from toolchain.codegen.backend import SimtCBackend
from toolchain.codegen.cstyle import render_helpers
from toolchain.runtime.build import BASE_FLAGS, compile_shared
from toolchain.tir import ir
from toolchain.tir.functor import StmtExprMutator
from toolchain.tir.schedule import Schedule
from toolchain.tir.transform.inject_barriers import is_barrier

#: Every emulation build treats compiler warnings as errors.
STRICT = ("-Wall", "-Wextra", "-Werror")

#: small operands of hand-built one-block kernels
A8 = ir.Buffer("A", (8,), "float32")
B8 = ir.Buffer("B", (8,), "float32")


class _DropBarrier(StmtExprMutator):
    """Remove the ``which``-th barrier (program order) of a function: a planted race."""

    def __init__(self, which: int) -> None:
        self.which, self.seen = which, -1

    def visit_Evaluate(self, s: ir.Evaluate) -> ir.Stmt:
        if is_barrier(s):
            self.seen += 1
            if self.seen == self.which:
                return ir.Evaluate(ir.IntImm(0))
        return s


def without_barrier(f: ir.PrimFunc, which: int) -> ir.PrimFunc:
    """``f`` with its ``which``-th barrier (program order) taken out: a planted race."""
    return _DropBarrier(which).visit(f)


def one_block(body_of_t: Callable[[ir.Var, ir.Buffer], ir.Stmt], *, n: int = 8,
              shared: bool = True) -> ir.PrimFunc:
    """Kernel ``k(A8, B8)``: one block of ``n`` threads ``t`` running ``body_of_t(t, S)``,
    ``S`` a shared buffer of ``n`` floats (not allocated if ``shared`` is False)."""
    S = ir.Buffer("S", (n,), "float32", scope="shared")
    t = ir.Var("t")
    body = ir.For(t, 0, n, "thread_binding", body_of_t(t, S), "threadIdx.x")
    return ir.PrimFunc((A8, B8), ir.Allocate(S, body) if shared else body, "k")


def tiled_gemm(n: int = 64, tile: int = 32, bk: int = 8, threads: int = 8,
               local: bool = False) -> Schedule:
    """``C = A @ B`` (n x n), one block per ``tile x tile`` tile of C with ``threads x
    threads`` threads, each computing ``tile/threads`` squared outputs; the k loop steps by
    ``bk``, and per step the block loads an A and a B tile into shared memory
    cooperatively (each thread ``tile*bk/threads**2`` elements). ``local``: accumulate in
    a ``local`` buffer (kept by each thread across the k loop's barriers) and write C back
    from thread-bound loops."""
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    sch = Schedule(te.create_prim_func([A, B, C], name="gemm"), target="cuda-sm80")
    c = sch.get_block("C")
    cl = sch.cache_write(c, 0, "local") if local else None
    i, j, kk = sch.get_loops(c)
    bi, ti, ii = sch.split(i, [None, threads, tile // threads])
    bj, tj, jj = sch.split(j, [None, threads, tile // threads])
    ko, ki = sch.split(kk, [None, bk])
    sch.reorder(bi, bj, ko, ti, tj, ki, ii, jj)
    sch.bind(bi, "blockIdx.y")
    sch.bind(bj, "blockIdx.x")
    sch.bind(ti, "threadIdx.y")
    sch.bind(tj, "threadIdx.x")
    if cl is not None:
        sch.reverse_compute_at(cl, bj)
        a0, a1 = sch.get_loops(cl)[-2:]
        t0, _ = sch.split(a0, [threads, None])
        t1, _ = sch.split(a1, [threads, None])
        sch.reorder(t0, t1)
        sch.bind(t0, "threadIdx.y")
        sch.bind(t1, "threadIdx.x")
    for operand in (0, 1):
        s = sch.cache_read(c, operand, "shared")
        sch.compute_at(s, ko)
        fused = sch.fuse(*sch.get_loops(s)[-2:])
        _, ty, tx = sch.split(fused, [None, threads, threads])
        sch.bind(ty, "threadIdx.y")
        sch.bind(tx, "threadIdx.x")
    return sch


def run_simt(lowered: ir.PrimFunc, *arrays: np.ndarray, name: str = "emu") -> None:
    """Render ``lowered`` with :class:`SimtCBackend` (the C a ``--emulate`` bundle gets),
    compile it with strict warnings and run it on ``arrays`` (written in place)."""
    art = SimtCBackend().kernel(lowered, name)
    assert not art.vector_types, "vector kernels need the bundle's typedefs"
    src = "\n".join([
        "#include <math.h>", "#include <stdbool.h>", "#include <stddef.h>",
        "#include <stdint.h>", art.support.render(),
        render_helpers(art.helpers),
        f"int32_t {art.name}({', '.join(art.params)}) {{", *art.body, "  return 0;", "}", ""])
    lib_path, _ = compile_shared(src, [*BASE_FLAGS, *STRICT], stem=name)
    fn = getattr(ctypes.CDLL(str(lib_path)), art.name)
    fn.restype = ctypes.c_int32
    args: list[Any] = [ctypes.c_void_p(a.ctypes.data) for a in arrays]
    scratch = np.zeros(max(art.scratch_bytes, 1), np.uint8)
    if art.scratch_bytes:
        args.append(ctypes.c_void_p(scratch.ctypes.data))
    assert fn(*args) == 0
