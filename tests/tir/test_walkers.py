"""Walkers that act on statements only walk statements only.

A :class:`~toolchain.tir.functor.StmtExprMutator` or ``StmtExprVisitor`` subclass that
overrides no expression method enters every expression of a kernel and leaves it as it
was; :class:`~toolchain.tir.functor.StmtMutator` / ``StmtVisitor`` give the same result
without that walk (expressions are most of a kernel's nodes). This checks every such
class in ``toolchain/``.
"""

from __future__ import annotations

import ast
from pathlib import Path

from toolchain.tir import functor, ir
from toolchain.tir.functor import StmtExprMutator, StmtMutator

ROOT = Path(__file__).resolve().parents[2] / "toolchain"

#: the methods through which a walker sees expressions (``visit_<Expr node>`` and the
#: hooks the statement walkers call on a statement's expressions and buffers)
EXPRESSION_METHODS = frozenset(
    {"visit_expr", "visit_buffer", "visit_range", "visit_region", "visit_IterVar"}
    | {f"visit_{name}" for name, cls in vars(ir).items()
       if isinstance(cls, type) and issubclass(cls, ir.PrimExpr)})


def _statement_only_walkers() -> list[str]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "")
                     for b in node.bases}
            if not bases & {"StmtExprMutator", "StmtExprVisitor"}:
                continue
            methods = {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
            if not methods & EXPRESSION_METHODS:
                found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} {node.name}")
    return found


def test_walkers_without_expression_methods_skip_expressions() -> None:
    lazy = _statement_only_walkers()
    assert not lazy, ("these override no expression method, so they walk every expression "
                      "for nothing: subclass StmtMutator / StmtVisitor instead: "
                      + ", ".join(lazy))


def test_the_expression_methods_are_the_visitors_own() -> None:
    """The list the check uses is complete: every expression node has its method."""
    assert "visit_BufferLoad" in EXPRESSION_METHODS and "visit_Call" in EXPRESSION_METHODS
    walked = {m for m in dir(functor.ExprMutator) if m.startswith("visit_")}
    assert walked <= EXPRESSION_METHODS | {"visit"}


def test_a_statement_mutator_keeps_expressions_and_rebuilds_statements() -> None:
    i = ir.Var("i")
    a = ir.Buffer("A", (8,), "float32")
    loop = ir.For(i, 0, 8, "serial", a.store(a[i] + 1.0, [i]))

    class Parallel(StmtMutator):
        def visit_For(self, s: ir.For) -> ir.Stmt:
            from dataclasses import replace
            return replace(s, kind="parallel", body=self.visit_stmt(s.body))

    class Same(StmtExprMutator):
        def visit_For(self, s: ir.For) -> ir.Stmt:
            from dataclasses import replace
            return replace(s, kind="parallel", body=self.visit_stmt(s.body))

    fast, slow = Parallel().visit_stmt(loop), Same().visit_stmt(loop)
    assert str(fast) == str(slow) and fast.kind == "parallel"
    assert fast.body is loop.body  # the store and its expressions kept as they were
