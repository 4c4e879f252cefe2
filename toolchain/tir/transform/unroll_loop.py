"""Unroll loops: ``unroll_loop`` (explicit ``T.unroll`` loops and small innermost loops)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from toolchain.tir import arith, ir
from toolchain.tir.functor import StmtExprMutator, StmtMutator, StmtVisitor

#: Innermost serial loops with a constant extent up to this are unrolled automatically.
AUTO_MAX_EXTENT = 4
#: An explicitly unrolled loop may not produce more statements than this.
MAX_UNROLLED_STMTS = 4096


class _HasLoop(StmtVisitor):
    def __init__(self) -> None:
        self.found = False

    def visit_For(self, s: ir.For) -> None:
        self.found = True

    def visit_Allocate(self, s: ir.Allocate) -> None:
        self.found = True


def _innermost(s: ir.Stmt) -> bool:
    v = _HasLoop()
    v.visit_stmt(s)
    return not v.found


#: Loop annotations asking to unroll every loop nest below with at most N steps in total
#: (``sch.pragma(loop, "auto_unroll_max_step", 16)``).
MAX_STEP_KEYS = ("pragma_auto_unroll_max_step", "pragma_unroll_max_step")


def _steps(s: ir.Stmt) -> int:
    """Statements a fully unrolled ``s`` would have (loops with symbolic extents: huge)."""
    if isinstance(s, ir.For):
        n = ir.const_int(s.extent)
        return (n if n is not None else 1 << 30) * _steps(s.body)
    if isinstance(s, ir.SeqStmt):
        return sum(_steps(x) for x in s.seq)
    if isinstance(s, ir.IfThenElse):
        return _steps(s.then_case) + (_steps(s.else_case) if s.else_case else 0)
    if isinstance(s, (ir.Allocate, ir.LetStmt, ir.AttrStmt)):
        return 1 << 30  # never unroll over a scope
    return 1


class _Specialize(StmtExprMutator):
    """Substitute loop vars by values, keeping only the taken side of a choice whose
    condition becomes constant.

    Unrolling a Winograd transform copies a chain of 36 ``Select``s 36 times; each copy
    needs one branch. Dropping the others here (instead of in the ``simplify`` that follows)
    gives the same IR without building and walking 36x the code.
    """

    def __init__(self, vmap: Mapping[ir.Var, ir.PrimExpr]) -> None:
        self.vmap = vmap

    def visit_Var(self, e: ir.Var) -> ir.PrimExpr:
        return self.vmap.get(e, e)

    def _decided(self, cond: ir.PrimExpr) -> ir.PrimExpr:
        return arith.simplify(self.visit_expr(cond))

    def visit_Select(self, e: ir.Select) -> ir.PrimExpr:
        c = self._decided(e.condition)
        if isinstance(c, ir.IntImm):
            return self.visit_expr(e.true_value if c.value else e.false_value)
        return super().visit_Select(e)

    def visit_Call(self, e: ir.Call) -> ir.PrimExpr:
        if e.op == "tir.if_then_else":
            c = self._decided(e.args[0])
            if isinstance(c, ir.IntImm):
                return self.visit_expr(e.args[1] if c.value else e.args[2])
        return super().visit_Call(e)

    def visit_IfThenElse(self, s: ir.IfThenElse) -> ir.Stmt:
        c = self._decided(s.condition)
        if isinstance(c, ir.IntImm):
            if c.value:
                return self.visit_stmt(s.then_case)
            if s.else_case is not None:
                return self.visit_stmt(s.else_case)
        return super().visit_IfThenElse(s)


def specialize(s: ir.Stmt, vmap: Mapping[ir.Var, ir.PrimExpr]) -> ir.Stmt:
    """``s`` with Vars replaced per ``vmap`` and choices on constant conditions resolved.

    Before (``specialize(body, {e: 1})``)::

        B[e] = T.Select(e == 0, A[0], T.Select(e == 1, A[1] * T.float32(2.0), A[2]))

    After::

        B[1] = A[1] * T.float32(2.0)
    """
    return _Specialize({k: ir.convert(v) for k, v in vmap.items()}).visit_stmt(s)


class _Unroll(StmtMutator):
    def __init__(self, auto_max_extent: int) -> None:
        self.auto = auto_max_extent
        self.max_step = 0

    def visit_For(self, s: ir.For) -> ir.Stmt:
        outer = self.max_step
        for key in MAX_STEP_KEYS:
            if key in s.annotations:
                self.max_step = int(s.annotations[key])
        try:
            body = self.visit_stmt(s.body)
        finally:
            self.max_step = outer
        n = ir.const_int(s.extent)
        explicit = s.kind == "unrolled"
        small = n is not None and n <= self.auto and _innermost(s.body)
        budget = n is not None and 0 < self.max_step and _steps(s) <= self.max_step
        auto = (s.kind == "serial" and (small or budget)
                and "pragma_simd" not in s.annotations)
        if n is not None and (explicit or auto) and 0 < n <= MAX_UNROLLED_STMTS:
            return ir.seq(*(specialize(body, {s.loop_var: arith.simplify(s.min + k)})
                            for k in range(n)))
        if explicit:  # symbolic extent: leave it to the C compiler
            return replace(s, kind="serial", body=body,
                           annotations={**s.annotations, "pragma_unroll": 1})
        return s if body is s.body else replace(s, body=body)


def unroll_loop(func: ir.PrimFunc, auto_max_extent: int = AUTO_MAX_EXTENT) -> ir.PrimFunc:
    """Replace unrolled loops (and innermost serial loops of extent <= ``auto_max_extent``)
    by copies of their body, one per iteration. Under a loop annotated
    ``pragma_auto_unroll_max_step = N``, every serial loop nest of at most ``N`` statements
    once unrolled is unrolled too.

    Before::

        for i in T.unroll(2):
            for j in T.vectorized(16):
                C[i * 16 + j] = C[i * 16 + j] + A[i]

    After (the vector loop was expanded first)::

        C[T.Ramp(0, 1, 16)] = C[T.Ramp(0, 1, 16)] + T.Broadcast(A[0], 16)
        C[T.Ramp(16, 1, 16)] = C[T.Ramp(16, 1, 16)] + T.Broadcast(A[1], 16)

    A loop with a symbolic extent cannot be unrolled; it gets ``pragma_unroll`` instead.
    """
    return _Unroll(auto_max_extent).visit(func)
