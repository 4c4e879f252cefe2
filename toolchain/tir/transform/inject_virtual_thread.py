"""Interleave virtual threads: ``inject_virtual_thread``.

A loop bound to ``vthread`` says "these iterations are independent; interleave them so
that their memory accesses and computations overlap". The pass removes the loop and pushes
the copies of the body down to the innermost statements that depend on the virtual thread,
so the copies run side by side inside the shared loops (the TVM paper's latency hiding).
Allocations inside get one slice per virtual thread, also one the thread does not index when
it sits in a statement that depends on the thread (each thread then has its own copy: the
accelerator's double buffering).
A loop annotated :data:`INSTRUCTION` is one accelerator instruction: the copies stay whole
loop nests, one instruction per thread, instead of being pushed inside it. The annotation's
value names the instruction's stage (the engine that runs it); consecutive instructions of
one stage are interleaved as a unit — thread 0's input and weight loads, then thread 1's —
so an engine that runs its queue in order finishes one thread's work before the next's.
"""

from __future__ import annotations

from dataclasses import replace

from toolchain.errors import ScheduleError
from toolchain.tir import arith, ir
from toolchain.tir.functor import StmtExprMutator, StmtMutator, substitute, uses_var

#: loop annotation of a nest that folds into one accelerator instruction (never split)
INSTRUCTION = "instruction"


class _BufferExpand(StmtExprMutator):
    """Give ``buf`` a leading dimension of ``n`` indexed by ``vt``."""

    def __init__(self, old: ir.Buffer, new: ir.Buffer, vt: ir.Var) -> None:
        self.old, self.new, self.vt = old, new, vt

    def visit_BufferLoad(self, e: ir.BufferLoad) -> ir.PrimExpr:
        e2 = super().visit_BufferLoad(e)
        if isinstance(e2, ir.BufferLoad) and e2.buffer is self.old:
            return ir.BufferLoad(self.new, (self.vt, *e2.indices))
        return e2

    def visit_BufferStore(self, s: ir.BufferStore) -> ir.Stmt:
        s2 = super().visit_BufferStore(s)
        if isinstance(s2, ir.BufferStore) and s2.buffer is self.old:
            return ir.BufferStore(self.new, s2.value, (self.vt, *s2.indices))
        return s2


def _uses(s: ir.Stmt, vt: ir.Var) -> bool:
    return uses_var(s, vt)


def _stage_runs(seq: tuple[ir.Stmt, ...], vt: ir.Var) -> list[list[ir.Stmt]]:
    """Consecutive instruction nests that depend on ``vt`` and carry the same
    :data:`INSTRUCTION` value (the same stage, e.g. the load engine) form one run."""
    runs: list[list[ir.Stmt]] = []
    prev = None
    for x in seq:
        stage = x.annotations.get(INSTRUCTION) if isinstance(x, ir.For) else None
        if stage is not None and stage == prev and _uses(x, vt) and _uses(runs[-1][-1], vt):
            runs[-1].append(x)
        else:
            runs.append([x])
        prev = stage
    return runs


def _inject(s: ir.Stmt, vt: ir.Var, n: int) -> ir.Stmt:
    if not _uses(s, vt):
        return s
    if isinstance(s, ir.SeqStmt):
        out: list[ir.Stmt] = []
        for run in _stage_runs(s.seq, vt):
            if len(run) == 1:
                out.append(_inject(run[0], vt, n))
            else:  # one stage of a decoupled machine: each thread's run of it in turn
                out += [arith.simplify(substitute(ir.seq(*run), {vt: k})) for k in range(n)]
        return ir.seq(*out)
    if isinstance(s, ir.For) and not uses_var(ir.Evaluate(s.extent), vt) and not uses_var(
            ir.Evaluate(s.min), vt) and s.kind in ("serial", "unrolled", "thread_binding") \
            and INSTRUCTION not in s.annotations:
        return replace(s, body=_inject(s.body, vt, n))
    if isinstance(s, ir.IfThenElse) and not uses_var(ir.Evaluate(s.condition), vt):
        other = _inject(s.else_case, vt, n) if s.else_case is not None else None
        return ir.IfThenElse(s.condition, _inject(s.then_case, vt, n), other)
    if isinstance(s, ir.Allocate):
        buf = s.buffer
        new = ir.Buffer(buf.name, (n, *buf.shape), buf.dtype, buf.scope, (), buf.align)
        body = _BufferExpand(buf, new, vt).visit_stmt(s.body)
        return ir.Allocate(new, _inject(body, vt, n))
    return ir.seq(*(arith.simplify(substitute(s, {vt: k})) for k in range(n)))


class _VThread(StmtMutator):
    def visit_For(self, s: ir.For) -> ir.Stmt:
        body = self.visit_stmt(s.body)
        if not (s.kind == "thread_binding" and (s.thread_tag or "").startswith("vthread")):
            return s if body is s.body else replace(s, body=body)
        n = ir.const_int(s.extent)
        if n is None:
            raise ScheduleError(
                f"virtual thread loop {s.loop_var.name} has a symbolic extent {s.extent}; "
                "split it by a constant factor before binding it to vthread")
        if not ir.is_const_int(s.min, 0):
            body = substitute(body, {s.loop_var: s.loop_var + s.min})
        return _inject(body, s.loop_var, n)


def inject_virtual_thread(func: ir.PrimFunc) -> ir.PrimFunc:
    """Replace ``vthread`` loops by interleaved copies of the statements that use them.

    Run after block lowering, before buffer flattening.

    Before::

        for vt in T.thread_binding(2, thread="vthread"):
            for k in range(16):
                C[vt * 16 + k] = A[vt * 16 + k] + T.float32(1.0)

    After::

        for k in range(16):
            C[k] = A[k] + T.float32(1.0)
            C[16 + k] = A[16 + k] + T.float32(1.0)

    A loop annotated ``instruction`` is copied whole, and consecutive ones of the same stage
    as a unit. Before::

        for vt in T.thread_binding(2, thread="vthread"):
            for r in T.serial(4, annotations={"instruction": "load"}):
                T.call_extern("int32", "vta.load_wgt", ...W[vt * 4 + r]...)
            for r in T.serial(4, annotations={"instruction": "load"}):
                T.call_extern("int32", "vta.load_inp", ...X[vt * 4 + r]...)
            for r in T.serial(4, annotations={"instruction": "compute"}):
                T.call_extern("int32", "vta.gemm", ...)

    After (thread 0's two loads, thread 1's two loads, then the two GEMMs)::

        for r in T.serial(4, annotations={"instruction": "load"}): ...W[r]...
        for r in T.serial(4, annotations={"instruction": "load"}): ...X[r]...
        for r in T.serial(4, annotations={"instruction": "load"}): ...W[4 + r]...
        for r in T.serial(4, annotations={"instruction": "load"}): ...X[4 + r]...
        for r in T.serial(4, annotations={"instruction": "compute"}): ... thread 0
        for r in T.serial(4, annotations={"instruction": "compute"}): ... thread 1
    """
    return _VThread().visit(func)
