"""Expand vectorized loops into vector expressions: ``vectorize_loop``.

The loop variable becomes ``Ramp(min, 1, lanes)``; scalars meeting vectors are
``Broadcast``; loads/stores get vector dtypes. Bodies the C vector extensions cannot
express (inner loops, calls other than an ``if_then_else`` whose condition is the same in
every lane, comparisons, selects, min/max, non-affine indices, lanes that
are not a power of two) keep the scalar loop, marked ``pragma_simd`` (when it has no inner
loops) so the code generator asks the C compiler to vectorize it (``#pragma omp simd``).
"""

from __future__ import annotations

from dataclasses import replace

from toolchain.tir import arith, ir
from toolchain.tir.functor import (
    ExprMutator,
    StmtExprMutator,
    StmtMutator,
    post_order_visit,
    uses_var,
)

#: Widest vector the expansion produces (lanes); wider loops use the simd pragma.
MAX_LANES = 64


class CannotVectorize(Exception):
    """Raised inside the expansion when the body needs the scalar fallback."""


def _bcast(e: ir.PrimExpr, lanes: int) -> ir.PrimExpr:
    if ir.lanes_of(e.dtype) == lanes:
        return e
    return ir.Broadcast(e, lanes)


class _VecExpr(ExprMutator):
    def __init__(self, var: ir.Var, start: ir.PrimExpr, lanes: int) -> None:
        self.var, self.start, self.lanes = var, start, lanes

    def visit_Var(self, e: ir.Var) -> ir.PrimExpr:
        return ir.Ramp(self.start, 1, self.lanes) if e is self.var else e

    def visit_BinaryOp(self, e: ir.BinaryOp) -> ir.PrimExpr:
        a, b = self.visit_expr(e.a), self.visit_expr(e.b)
        la, lb = ir.lanes_of(a.dtype), ir.lanes_of(b.dtype)
        if la == 1 and lb == 1:
            return e if a is e.a and b is e.b else type(e)(a, b)
        t = type(e)
        ramp = _ramp_arith(t, a, b, self.lanes)
        if ramp is not None:
            return ramp
        if t not in (ir.Add, ir.Sub, ir.Mul, ir.Div) or (t is ir.Div and not ir.is_float(
                e.dtype)):
            raise CannotVectorize(f"{t.__name__} on vectors")
        return t(_bcast(a, self.lanes), _bcast(b, self.lanes))

    def visit_Cast(self, e: ir.Cast) -> ir.PrimExpr:
        v = self.visit_expr(e.value)
        if ir.lanes_of(v.dtype) == 1:
            return e if v is e.value else ir.Cast(e.dtype, v)
        return ir.Cast(ir.with_lanes(e.dtype, self.lanes), v)

    def visit_BufferLoad(self, e: ir.BufferLoad) -> ir.PrimExpr:
        idx = tuple(self.visit_expr(i) for i in e.indices)
        if all(ir.lanes_of(i.dtype) == 1 for i in idx):
            return e if all(a is b for a, b in zip(idx, e.indices, strict=True)) else \
                ir.BufferLoad(e.buffer, idx)
        if len(idx) != 1 or not isinstance(idx[0], ir.Ramp):
            raise CannotVectorize("load with a non-affine vector index")
        if ir.is_bool(e.buffer.dtype):
            raise CannotVectorize("bool vectors")
        return ir.BufferLoad(e.buffer, idx)

    def _no(self, e: ir.PrimExpr) -> ir.PrimExpr:
        if uses_var(e, self.var):
            raise CannotVectorize(f"{type(e).__name__} depends on the vector lane")
        return e

    def visit_Call(self, e: ir.Call) -> ir.PrimExpr:  # noqa: N802 - visitor naming
        # if_then_else on a condition that is the same in every lane (padding tests on the
        # outer loops): the vectorized branches under a scalar condition, still evaluated
        # only when taken (the code generator renders it as C's ?:)
        if e.op != "tir.if_then_else" or uses_var(e.args[0], self.var):
            return self._no(e)
        t, f = (self.visit_expr(a) for a in e.args[1:])
        if ir.lanes_of(t.dtype) == 1 and ir.lanes_of(f.dtype) == 1:
            return e
        t, f = _bcast(t, self.lanes), _bcast(f, self.lanes)
        return ir.Call(t.dtype, e.op, [e.args[0], t, f])

    visit_Select = visit_Let = visit_Not = _no


def _ramp_arith(t: type, a: ir.PrimExpr, b: ir.PrimExpr, lanes: int) -> ir.PrimExpr | None:
    """Keep affine index arithmetic in Ramp form (``Ramp + x``, ``Ramp * c``)."""
    if not (ir.is_int(a.dtype) and ir.is_int(b.dtype)):
        return None
    sa, sb = ir.lanes_of(a.dtype) == 1, ir.lanes_of(b.dtype) == 1
    if isinstance(a, ir.Ramp) and isinstance(b, ir.Ramp) and t in (ir.Add, ir.Sub):
        return ir.Ramp(arith.simplify(t(a.base, b.base)), arith.simplify(t(a.stride, b.stride)),
                       lanes)
    if isinstance(a, ir.Ramp) and sb and t in (ir.Add, ir.Sub):
        return ir.Ramp(arith.simplify(t(a.base, b)), a.stride, lanes)
    if isinstance(b, ir.Ramp) and sa and t is ir.Add:
        return ir.Ramp(arith.simplify(a + b.base), b.stride, lanes)
    if isinstance(a, ir.Ramp) and sb and t is ir.Mul:
        return ir.Ramp(arith.simplify(a.base * b), arith.simplify(a.stride * b), lanes)
    if isinstance(b, ir.Ramp) and sa and t is ir.Mul:
        return ir.Ramp(arith.simplify(b.base * a), arith.simplify(b.stride * a), lanes)
    if isinstance(a, ir.Broadcast) and isinstance(b, ir.Ramp) or isinstance(
            b, ir.Broadcast) and isinstance(a, ir.Ramp):
        sa2 = a.value if isinstance(a, ir.Broadcast) else a
        sb2 = b.value if isinstance(b, ir.Broadcast) else b
        return _ramp_arith(t, sa2, sb2, lanes)
    return None


class _VecStmt(StmtExprMutator):
    def __init__(self, var: ir.Var, start: ir.PrimExpr, lanes: int) -> None:
        self.ex = _VecExpr(var, start, lanes)
        self.lanes = lanes

    def visit_expr(self, e: ir.PrimExpr) -> ir.PrimExpr:
        return self.ex.visit_expr(e)

    def visit_BufferStore(self, s: ir.BufferStore) -> ir.Stmt:
        idx = tuple(self.visit_expr(i) for i in s.indices)
        val = self.visit_expr(s.value)
        if all(ir.lanes_of(i.dtype) == 1 for i in idx):
            raise CannotVectorize("store to the same element from every lane")
        if len(idx) != 1 or not isinstance(idx[0], ir.Ramp):
            raise CannotVectorize("store with a non-affine vector index")
        if ir.is_bool(s.buffer.dtype):
            raise CannotVectorize("bool vectors")
        return ir.BufferStore(s.buffer, _bcast(val, self.lanes), idx)

    def visit_IfThenElse(self, s: ir.IfThenElse) -> ir.Stmt:
        if ir.lanes_of(self.visit_expr(s.condition).dtype) != 1:
            raise CannotVectorize("a condition that depends on the vector lane")
        return super().visit_IfThenElse(s)

    def _no(self, s: ir.Stmt) -> ir.Stmt:
        raise CannotVectorize(f"{type(s).__name__} inside the vectorized loop")

    visit_For = visit_Allocate = visit_Evaluate = visit_LetStmt = visit_AttrStmt = _no


def _has_loop(s: ir.Stmt) -> bool:
    found: list[ir.For] = []
    post_order_visit(s, lambda x: found.append(x) if isinstance(x, ir.For) else None)
    return bool(found)


class _Vectorize(StmtMutator):
    def visit_For(self, s: ir.For) -> ir.Stmt:
        body = self.visit_stmt(s.body)
        if s.kind != "vectorized":
            return s if body is s.body else replace(s, body=body)
        lanes = ir.const_int(s.extent)
        try:
            if lanes is None or lanes < 2 or lanes > MAX_LANES or lanes & (lanes - 1):
                raise CannotVectorize(f"extent {s.extent}")
            return _VecStmt(s.loop_var, s.min, lanes).visit_stmt(body)
        except CannotVectorize as why:
            ann = {**s.annotations, "vectorize_fallback": str(why)}
            if not _has_loop(body):  # OpenMP forbids most constructs inside a simd loop
                ann["pragma_simd"] = 1
            return replace(s, kind="serial", body=body, annotations=ann)


def vectorize_loop(func: ir.PrimFunc) -> ir.PrimFunc:
    """Expand each ``T.vectorized`` loop into vector loads, arithmetic and stores.

    Run after :func:`~toolchain.tir.transform.flatten_buffer.flatten_buffer`.

    Before::

        for i_0 in range(8):
            for i_1 in T.vectorized(16):
                B[i_0 * 16 + i_1] = A[i_0 * 16 + i_1] * s[0]

    After::

        for i_0 in range(8):
            B[T.Ramp(i_0 * 16, 1, 16)] = A[T.Ramp(i_0 * 16, 1, 16)] * T.Broadcast(s[0], 16)

    A body that cannot be expressed (say ``T.exp(A[i])``) stays a scalar loop
    annotated ``pragma_simd`` (rendered as ``#pragma omp simd``).
    """
    return _Vectorize().visit(func)
