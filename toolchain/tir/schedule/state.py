"""Tree utilities the schedule primitives share: find, locate, replace and remove nodes.

The IR is immutable, so "editing" a function means rebuilding the path from the root to
the edited node. Nodes are found by identity; loops by their ``loop_var`` (which survives
rebuilding) and blocks by their unique ``name_hint``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from toolchain.errors import ScheduleError
from toolchain.tir import arith, ir
from toolchain.tir.functor import StmtExprMutator


def children(s: ir.Stmt) -> list[ir.Stmt]:
    """Direct child statements of ``s``."""
    if isinstance(s, ir.SeqStmt):
        return list(s.seq)
    if isinstance(s, (ir.For, ir.LetStmt, ir.AttrStmt, ir.Allocate)):
        return [s.body]
    if isinstance(s, ir.IfThenElse):
        return [s.then_case] + ([s.else_case] if s.else_case is not None else [])
    if isinstance(s, ir.BlockRealize):
        return [s.block]
    if isinstance(s, ir.Block):
        return ([s.init] if s.init is not None else []) + [s.body]
    return []


def walk(s: ir.Stmt, path: tuple[ir.Stmt, ...] = ()) -> Iterator[tuple[ir.Stmt,
                                                                     tuple[ir.Stmt, ...]]]:
    """Pre-order ``(node, ancestors)`` over statements."""
    yield s, path
    for c in children(s):
        yield from walk(c, path + (s,))


def find_loop(func: ir.PrimFunc, var: ir.Var) -> tuple[ir.For, tuple[ir.Stmt, ...]] | None:
    """The ``For`` whose loop var is ``var`` and its ancestors, or None."""
    for node, path in walk(func.body):
        if isinstance(node, ir.For) and node.loop_var is var:
            return node, path
    return None


def find_block(func: ir.PrimFunc, name: str) -> tuple[ir.BlockRealize,
                                                      tuple[ir.Stmt, ...]] | None:
    """The ``BlockRealize`` of the block named ``name`` and its ancestors, or None."""
    for node, path in walk(func.body):
        if isinstance(node, ir.BlockRealize) and node.block.name_hint == name:
            return node, path
    return None


def all_blocks(func: ir.PrimFunc) -> list[ir.BlockRealize]:
    """Every BlockRealize in program order (the root block included)."""
    return [n for n, _ in walk(func.body) if isinstance(n, ir.BlockRealize)]


def block_names(func: ir.PrimFunc) -> list[str]:
    """Names of the non-root blocks in program order."""
    return [r.block.name_hint for r in all_blocks(func) if r.block.name_hint != "root"]


def loops_of(path: tuple[ir.Stmt, ...]) -> list[ir.For]:
    """The ``For`` ancestors up to the nearest enclosing block, outermost first."""
    out: list[ir.For] = []
    for node in reversed(path):
        if isinstance(node, ir.Block):
            break
        if isinstance(node, ir.For):
            out.append(node)
    return out[::-1]


def enclosing_block(path: tuple[ir.Stmt, ...]) -> ir.Block | None:
    """The nearest Block ancestor in ``path``."""
    for node in reversed(path):
        if isinstance(node, ir.Block):
            return node
    return None


def loop_ranges(path: tuple[ir.Stmt, ...]) -> dict[ir.Var, ir.Range]:
    """Ranges of every loop var (and block var of enclosing blocks) in ``path``."""
    out: dict[ir.Var, ir.Range] = {}
    for node in path:
        if isinstance(node, ir.For):
            out[node.loop_var] = ir.Range(node.min, node.extent)
        elif isinstance(node, ir.Block):
            for iv in node.iter_vars:
                out[iv.var] = iv.dom
    return out


def blocks_under(s: ir.Stmt) -> list[tuple[ir.BlockRealize, tuple[ir.Stmt, ...]]]:
    """Blocks under ``s`` not nested in another block under ``s``, with paths from ``s``."""
    out = []

    def rec(node: ir.Stmt, path: tuple[ir.Stmt, ...]) -> None:
        if isinstance(node, ir.BlockRealize):
            out.append((node, path))
            return
        for c in children(node):
            rec(c, path + (node,))

    rec(s, ())
    return out


class _Replace(StmtExprMutator):
    def __init__(self, mapping: dict[int, ir.Stmt | None]) -> None:
        self.mapping = mapping

    def visit_expr(self, e: ir.PrimExpr) -> ir.PrimExpr:
        return e  # statements only

    def visit_stmt(self, s: ir.Stmt) -> ir.Stmt:
        if id(s) in self.mapping:
            return self.mapping[id(s)]  # type: ignore[return-value]
        return super().visit_stmt(s)

    def visit_SeqStmt(self, s: ir.SeqStmt) -> ir.Stmt:
        new = [self.visit_stmt(x) for x in s.seq]
        if all(a is b for a, b in zip(new, s.seq, strict=True)):
            return s
        return ir.seq(*[x for x in new if x is not None])


def replace_stmts(func: ir.PrimFunc, mapping: dict[int, ir.Stmt | None]) -> ir.PrimFunc:
    """Replace statements (keyed by ``id``) in ``func``; ``None`` removes from a sequence."""
    body = _Replace(mapping).visit_stmt(func.body)
    return func.with_body(body)


def replace_block(func: ir.PrimFunc, old: ir.Block, new: ir.Block) -> ir.PrimFunc:
    """Replace one Block (keeping its BlockRealize)."""
    return replace_stmts(func, {id(old): new})


def root_block(func: ir.PrimFunc) -> ir.Block:
    """The function's root block."""
    body = func.body
    if isinstance(body, ir.BlockRealize):
        return body.block
    raise ScheduleError(
        f"function {func.name!r} has no root block: it was already lowered; schedule the "
        "function produced by te.create_prim_func instead")


def with_root_allocs(func: ir.PrimFunc, add: tuple[ir.Buffer, ...] = (),
                     remove: tuple[ir.Buffer, ...] = ()) -> ir.PrimFunc:
    """Add/remove buffers in the root block's ``alloc_buffers``."""
    root = root_block(func)
    allocs = tuple(b for b in root.alloc_buffers if b not in remove) + tuple(add)
    return replace_block(func, root, replace(root, alloc_buffers=allocs))


def simplify_bindings(s: ir.Stmt, ranges: dict[ir.Var, ir.Range]) -> ir.Stmt:
    """Simplify every block binding and predicate under ``s`` with the loop ranges."""

    class _M(StmtExprMutator):
        def __init__(self) -> None:
            self.ranges = dict(ranges)

        def visit_expr(self, e: ir.PrimExpr) -> ir.PrimExpr:
            return e

        def visit_For(self, f: ir.For) -> ir.Stmt:
            self.ranges[f.loop_var] = ir.Range(f.min, f.extent)
            body = self.visit_stmt(f.body)
            return f if body is f.body else replace(f, body=body)

        def visit_BlockRealize(self, r: ir.BlockRealize) -> ir.Stmt:
            vals = tuple(arith.simplify(v, self.ranges) for v in r.iter_values)
            pred = arith.simplify(r.predicate, self.ranges)
            return ir.BlockRealize(vals, pred, r.block)

    return _M().visit_stmt(s)


def make_loop_nest(loops: list[tuple[ir.Var, ir.PrimExpr]], body: ir.Stmt) -> ir.Stmt:
    """Serial loops ``for v in range(extent)`` around ``body`` (outermost first)."""
    for v, ext in reversed(loops):
        body = ir.For(v, 0, ext, "serial", body)
    return body


def exclusive_nest_top(realize: ir.BlockRealize, path: tuple[ir.Stmt, ...]) -> ir.Stmt:
    """The outermost statement whose subtree contains only this block and its loops."""
    top: ir.Stmt = realize
    for node in reversed(path):
        if isinstance(node, ir.For) and node.body is top:
            top = node
        else:
            break
    return top


def program_order(func: ir.PrimFunc) -> dict[int, int]:
    """Pre-order index of every statement (by id)."""
    return {id(n): k for k, (n, _) in enumerate(walk(func.body))}


def fmt_loops(loops: list[ir.For]) -> str:
    """``i(128), k(64)`` for messages."""
    return ", ".join(f"{f.loop_var.name}({f.extent})" for f in loops) or "(none)"


def const_extent(f: ir.For) -> int | None:
    """The loop's extent if it is a constant."""
    return f.extent.value if isinstance(f.extent, ir.IntImm) else None


def uses(node: Any, var_set: set[ir.Var]) -> bool:
    """True if any Var of ``var_set`` occurs in ``node``."""
    from toolchain.tir.functor import free_vars

    return any(v in var_set for v in free_vars(node))


def map_exprs(s: ir.Stmt, fn: Callable[[ir.PrimExpr], ir.PrimExpr]) -> ir.Stmt:
    """Apply ``fn`` to every top-level expression of every statement under ``s``."""

    class _M(StmtExprMutator):
        def visit_expr(self, e: ir.PrimExpr) -> ir.PrimExpr:
            return fn(e)

    return _M().visit_stmt(s)
