"""Interleave virtual threads: ``inject_virtual_thread``.

A loop bound to ``vthread`` says "these iterations are independent; interleave them so
that their memory accesses and computations overlap". The pass removes the loop and pushes
the copies of the body down to the innermost statements that depend on the virtual thread,
so the copies run side by side inside the shared loops (the TVM paper's latency hiding).
Allocations inside get one slice per virtual thread, also one the thread does not index when
it sits in a statement that depends on the thread (each thread then has its own copy: the
accelerator's double buffering).
A loop annotated :data:`INSTRUCTION` is one accelerator instruction: the copies stay whole
loop nests, one instruction per thread, instead of being pushed inside it.
"""

from __future__ import annotations

from dataclasses import replace

from toolchain.errors import ScheduleError
from toolchain.tir import arith, ir
from toolchain.tir.functor import StmtExprMutator, substitute, uses_var

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


def _inject(s: ir.Stmt, vt: ir.Var, n: int) -> ir.Stmt:
    if not _uses(s, vt):
        return s
    if isinstance(s, ir.SeqStmt):
        return ir.seq(*(_inject(x, vt, n) for x in s.seq))
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


class _VThread(StmtExprMutator):
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

    A loop annotated ``instruction`` is copied whole. Before::

        for vt in T.thread_binding(2, thread="vthread"):
            for r in T.serial(4, annotations={"instruction": 1}):
                T.call_extern("int32", "vta.gemm_reset", T.address_of(acc[vt * 4 + r, 0, 0]))

    After::

        for r in T.serial(4, annotations={"instruction": 1}):
            T.call_extern("int32", "vta.gemm_reset", T.address_of(acc[r, 0, 0]))
        for r in T.serial(4, annotations={"instruction": 1}):
            T.call_extern("int32", "vta.gemm_reset", T.address_of(acc[4 + r, 0, 0]))
    """
    return _VThread().visit(func)
