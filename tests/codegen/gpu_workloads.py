"""GPU schedules with shared memory."""

from __future__ import annotations

from toolchain import te
from toolchain.tir.schedule import Schedule


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
