"""Remove statements that do nothing: ``remove_noop``."""

from __future__ import annotations

from dataclasses import replace

from toolchain.tir import ir
from toolchain.tir.functor import StmtExprVisitor, StmtMutator


def is_noop(s: ir.Stmt | None) -> bool:
    """True for ``Evaluate`` of a constant and empty sequences."""
    if s is None:
        return True
    if isinstance(s, ir.Evaluate):
        return isinstance(s.value, (ir.IntImm, ir.FloatImm))
    if isinstance(s, ir.SeqStmt):
        return all(is_noop(x) for x in s.seq)
    return False


_NOOP = ir.Evaluate(ir.IntImm(0))


class _Uses(StmtExprVisitor):
    def __init__(self, data: ir.Var) -> None:
        self.data = data
        self.found = False

    def visit_Var(self, e: ir.Var) -> None:
        if e is self.data:
            self.found = True

    def visit_BufferLoad(self, e: ir.BufferLoad) -> None:
        self.found = self.found or e.buffer.data is self.data
        super().visit_BufferLoad(e)

    def visit_BufferStore(self, s: ir.BufferStore) -> None:
        self.found = self.found or s.buffer.data is self.data
        super().visit_BufferStore(s)


def uses_buffer(s: ir.Stmt, data: ir.Var) -> bool:
    """True if ``s`` reads, writes or takes the address of the buffer with pointer ``data``."""
    v = _Uses(data)
    v.visit_stmt(s)
    return v.found


class _Used(StmtExprVisitor):
    def __init__(self) -> None:
        self.vars: set[ir.Var] = set()

    def visit_Var(self, e: ir.Var) -> None:
        self.vars.add(e)

    def visit_BufferLoad(self, e: ir.BufferLoad) -> None:
        self.vars.add(e.buffer.data)
        super().visit_BufferLoad(e)

    def visit_BufferStore(self, s: ir.BufferStore) -> None:
        self.vars.add(s.buffer.data)
        super().visit_BufferStore(s)


def vars_used(s: ir.Stmt) -> set[ir.Var]:
    """Every variable ``s`` names and the pointer of every buffer it reads or writes, in one
    walk: ``uses_buffer(s, data)`` is ``data in vars_used(s)``, for any number of buffers.

    >>> x = ir.Buffer("x", (4,), "float32")
    >>> y = ir.Buffer("y", (4,), "float32")
    >>> s = ir.BufferStore(x, ir.FloatImm(1.0, "float32"), [ir.IntImm(0)])
    >>> [x.data in vars_used(s), y.data in vars_used(s)]
    [True, False]
    """
    v = _Used()
    v.visit_stmt(s)
    return v.vars


class _RemoveNoOp(StmtMutator):
    def visit_For(self, s: ir.For) -> ir.Stmt:
        body = self.visit_stmt(s.body)
        if is_noop(body) or ir.is_const_int(s.extent, 0):
            return _NOOP
        return s if body is s.body else replace(s, body=body)

    def visit_IfThenElse(self, s: ir.IfThenElse) -> ir.Stmt:
        t = self.visit_stmt(s.then_case)
        e = self.visit_stmt(s.else_case) if s.else_case is not None else None
        if is_noop(e):
            e = None
        if is_noop(t) and e is None:
            return _NOOP
        if is_noop(t):
            return ir.IfThenElse(ir.Not(s.condition), e)
        if t is s.then_case and e is s.else_case:
            return s
        return ir.IfThenElse(s.condition, t, e)

    def visit_SeqStmt(self, s: ir.SeqStmt) -> ir.Stmt:
        new = [self.visit_stmt(x) for x in s.seq]
        kept = [x for x in new if not is_noop(x)]
        if not kept:
            return _NOOP
        if len(kept) == len(s.seq) and all(a is b for a, b in zip(kept, s.seq, strict=True)):
            return s
        return ir.seq(*kept)

    def visit_Allocate(self, s: ir.Allocate) -> ir.Stmt:
        body = self.visit_stmt(s.body)
        if not uses_buffer(body, s.buffer.data):
            return body
        return s if body is s.body else ir.Allocate(s.buffer, body)

    def visit_LetStmt(self, s: ir.LetStmt) -> ir.Stmt:
        body = self.visit_stmt(s.body)
        if is_noop(body):
            return _NOOP
        return s if body is s.body else ir.LetStmt(s.var, s.value, body)

    def visit_AttrStmt(self, s: ir.AttrStmt) -> ir.Stmt:
        body = self.visit_stmt(s.body)
        if is_noop(body):
            return _NOOP
        return s if body is s.body else ir.AttrStmt(s.node, s.key, s.value, body)


def remove_noop(func: ir.PrimFunc) -> ir.PrimFunc:
    """Drop empty loops, empty branches, unused allocations and constant evaluations.

    Before::

        X = T.allocate((4,), "float32", scope="local")
        for i in range(0):
            B[i] = A[i]
        if n > 2:
            0
        B[0] = A[0]

    After::

        B[0] = A[0]
    """
    return _RemoveNoOp().visit(func)
