"""Split loops annotated ``partition`` where the conditions in their body change value:
``partition_loops`` (TVM's LoopPartition, for constant loop bounds).

A padded copy (``data_pack[hh, ww] = if_then_else(3 <= ww < 227, X[clamp(ww - 3)], 0)``)
evaluates its condition and clamps its index for every element, which keeps a C compiler
from vectorizing the copy. Annotated (``sch.annotate(loop, PARTITION, 1)``), the loop is
cut where any condition that depends on its variable alone (and constants) changes value:
the pieces are sibling loops over the sub-ranges. Outer loops are cut first, each piece's
body with those conditions' values put in and folded (a border row keeps one loop of
zeros; only the interior rows' columns are cut), and the ``simplify`` pass that follows
(it knows each loop's range) folds what is left of the conditions and clamps away.

Before (``ww`` annotated)::

    for ww in T.serial(8, annotations={"partition": 1}):
        B[ww] = T.if_then_else(ww - 1 >= 0 and ww - 1 < 6, A[T.max(T.min(ww - 1, 5), 0)],
                               T.float32(0.0))

After (then ``simplify``)::

    B[0] = T.float32(0.0)
    for ww in range(1, 7):
        B[ww] = A[ww - 1]
    B[7] = T.float32(0.0)

Loops without the annotation, or whose conditions never change over the range, are left
as they were (the annotation is dropped).
"""

from __future__ import annotations

from dataclasses import replace

from toolchain.tir import arith, ir
from toolchain.tir.functor import StmtExprMutator, StmtExprVisitor, StmtMutator

#: the loop annotation that asks for the split
PARTITION = "partition"

#: the longest loop whose conditions are evaluated value by value
MAX_EXTENT = 4096


class _Atoms(StmtExprVisitor):
    """The comparisons in the conditions of ``tir.if_then_else`` calls, Selects and
    ifs that mention ``var`` and no other variable."""

    def __init__(self, var: ir.Var) -> None:
        self.var = var
        self.atoms: list[ir.PrimExpr] = []

    def _conds(self, c: ir.PrimExpr) -> None:
        if isinstance(c, (ir.And, ir.Or)):
            self._conds(c.a)
            self._conds(c.b)
        elif isinstance(c, ir.Not):
            self._conds(c.a)
        elif _free_vars(c) == {self.var} and not any(c is a for a in self.atoms):
            self.atoms.append(c)

    def visit_Call(self, e: ir.Call) -> None:
        if e.op == "tir.if_then_else":
            self._conds(e.args[0])
        super().visit_Call(e)

    def visit_Select(self, e: ir.Select) -> None:
        self._conds(e.condition)
        super().visit_Select(e)

    def visit_IfThenElse(self, s: ir.IfThenElse) -> None:
        self._conds(s.condition)
        super().visit_IfThenElse(s)


class _Vars(StmtExprVisitor):
    def __init__(self) -> None:
        self.vars: set[ir.Var] = set()

    def visit_Var(self, e: ir.Var) -> None:
        self.vars.add(e)


def _free_vars(e: ir.PrimExpr) -> set[ir.Var]:
    v = _Vars()
    v.visit_expr(e)
    return v.vars


def _pieces(f: ir.For) -> list[tuple[int, int, dict[int, bool]]] | None:
    """``[(start, end, values), ...]``: the sub-ranges of ``f`` over which every condition
    on its variable keeps one value, with those values (by the condition's ``id``); None
    when there is one piece (or the bounds are not constant)."""
    if not (isinstance(f.min, ir.IntImm) and isinstance(f.extent, ir.IntImm)) \
            or f.extent.value > MAX_EXTENT:
        return None
    finder = _Atoms(f.loop_var)
    finder.visit_stmt(f.body)
    if not finder.atoms:
        return None
    lo, hi = f.min.value, f.min.value + f.extent.value
    pieces: list[tuple[int, int, dict[int, bool]]] = []
    for v in range(lo, hi):
        at = {f.loop_var: ir.Range(ir.IntImm(v, f.loop_var.dtype),
                                   ir.IntImm(1, f.loop_var.dtype))}
        key = {id(a): arith.prove(a, at) for a in finder.atoms}
        if pieces and pieces[-1][2] == key:
            pieces[-1] = (pieces[-1][0], v + 1, key)
        else:
            pieces.append((v, v + 1, key))
    return pieces if len(pieces) > 1 else None


class _Fold(StmtExprMutator):
    """One piece's body: its conditions' values put in and the conditions folded (a
    branch that cannot be taken is dropped, so the loops inside split only where they
    still matter)."""

    def __init__(self, values: dict[int, bool]) -> None:
        super().__init__()
        self.values = values

    def visit_expr(self, e: ir.PrimExpr) -> ir.PrimExpr:
        if id(e) in self.values:
            return ir.IntImm(int(self.values[id(e)]), "bool")
        return super().visit_expr(e)

    def _cond(self, c: ir.PrimExpr) -> ir.PrimExpr:
        return arith.simplify(self.visit_expr(c))

    def visit_Call(self, e: ir.Call) -> ir.PrimExpr:
        if e.op != "tir.if_then_else":
            return super().visit_Call(e)
        c = self._cond(e.args[0])
        if ir.is_const_int(c):
            return self.visit_expr(e.args[1] if c.value else e.args[2])
        return replace(e, args=(c, self.visit_expr(e.args[1]), self.visit_expr(e.args[2])))

    def visit_Select(self, e: ir.Select) -> ir.PrimExpr:
        c = self._cond(e.condition)
        if ir.is_const_int(c):
            return self.visit_expr(e.true_value if c.value else e.false_value)
        return replace(e, condition=c, true_value=self.visit_expr(e.true_value),
                       false_value=self.visit_expr(e.false_value))


class _Partition(StmtMutator):
    def visit_For(self, s: ir.For) -> ir.Stmt:
        if PARTITION not in s.annotations:
            return super().visit_For(s)
        s = replace(s, annotations={k: v for k, v in s.annotations.items() if k != PARTITION})
        pieces = _pieces(s)
        if pieces is None:
            return super().visit_For(s)
        # outer loops first: a piece's folded body decides where its inner loops split
        return ir.seq(*(self.visit_stmt(replace(
            s, min=ir.IntImm(a, s.loop_var.dtype), extent=ir.IntImm(b - a, s.loop_var.dtype),
            body=_Fold(values).visit_stmt(s.body))) for a, b, values in pieces))


def partition_loops(func: ir.PrimFunc) -> ir.PrimFunc:
    """Split every loop annotated :data:`PARTITION` (see the module docstring); a function
    without such loops is returned as it is."""
    return _Partition().visit(func)
