"""Arithmetic simplification of a whole function: ``simplify``."""

from __future__ import annotations

from toolchain.tir import arith, ir
from toolchain.tir.functor import StmtExprMutator, substitute


class _Simplify(StmtExprMutator):
    def __init__(self) -> None:
        self.ranges: dict[ir.Var, ir.Range] = {}

    def visit_expr(self, e: ir.PrimExpr) -> ir.PrimExpr:
        return arith.simplify(e, self.ranges)

    def visit_For(self, s: ir.For) -> ir.Stmt:
        mn, ext = self.visit_expr(s.min), self.visit_expr(s.extent)
        if ir.is_const_int(ext, 1) and s.kind != "thread_binding":
            return self.visit_stmt(substitute(s.body, {s.loop_var: mn}))
        self.ranges[s.loop_var] = ir.Range(mn, ext)
        try:
            body = self.visit_stmt(s.body)
        finally:
            del self.ranges[s.loop_var]
        if mn is s.min and ext is s.extent and body is s.body:
            return s
        return ir.For(s.loop_var, mn, ext, s.kind, body, s.thread_tag, s.annotations)

    def visit_IfThenElse(self, s: ir.IfThenElse) -> ir.Stmt:
        c = self.visit_expr(s.condition)
        if ir.is_const_int(c):
            if c.value:
                return self.visit_stmt(s.then_case)
            return self.visit_stmt(s.else_case) if s.else_case is not None else _noop()
        if arith.prove(c, self.ranges):
            return self.visit_stmt(s.then_case)
        t = self.visit_stmt(s.then_case)
        e = self.visit_stmt(s.else_case) if s.else_case is not None else None
        if c is s.condition and t is s.then_case and e is s.else_case:
            return s
        return ir.IfThenElse(c, t, e)


def _noop() -> ir.Stmt:
    return ir.Evaluate(ir.IntImm(0))


def simplify(func: ir.PrimFunc) -> ir.PrimFunc:
    """Simplify every expression with the loop ranges in scope; drop guards proven true.

    Loops of extent 1 are replaced by their body with the loop variable set to its start.

    Before::

        for i_0, i_1 in T.grid(4, 32):
            if i_0 * 32 + i_1 < 128:
                B[(i_0 * 32 + i_1) // 32 * 32 + (i_0 * 32 + i_1) % 32] = A[i_0 * 32 + i_1]

    After::

        for i_0, i_1 in T.grid(4, 32):
            B[i_0 * 32 + i_1] = A[i_0 * 32 + i_1]

    A function this pass returned unchanged is returned at once the next time (the
    pipeline simplifies three times; where the passes between change nothing, the last
    simplification repeats one that found nothing to do).
    """
    if func.__dict__.get(_FIXED_POINT):
        return func
    out = _Simplify().visit(func)
    if out is func:
        object.__setattr__(func, _FIXED_POINT, True)
    return out


#: the attribute marking a function ``simplify`` returned as it was (a fixed point)
_FIXED_POINT = "_simplified"
