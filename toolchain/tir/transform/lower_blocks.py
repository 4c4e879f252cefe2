"""Lower TensorIR blocks to plain loops: ``lower_init_block`` and ``lower_blocks``.

After these two passes the function has no ``Block``/``BlockRealize`` left: block variables
are replaced by their bindings, block predicates become ``if`` guards, reduction ``init``
statements run under "first iteration of every reduce variable" guards, and
``alloc_buffers`` become ``Allocate`` statements (with the strides requested by
``storage_align``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from toolchain.tir import ir
from toolchain.tir.functor import (
    StmtExprMutator,
    StmtMutator,
    StmtVisitor,
    free_vars,
    substitute,
)

#: Loop annotation set by :func:`lower_blocks`: names of buffers whose values are carried
#: from one iteration to the next (the loop was bound to a reduce block var). Allocation
#: planning never moves such a buffer inside the loop.
CARRIED = "carried"


def _guard_init(s: ir.Block) -> ir.Block:
    """The block with its init moved into the body under "every reduce var at its start"."""
    if s.init is None:
        return s
    conds = [iv.var.equal(iv.dom.min) for iv in s.iter_vars if iv.iter_type == "reduce"]
    if conds:
        cond = conds[0]
        for c in conds[1:]:
            cond = ir.And(cond, c)
        init: ir.Stmt = ir.IfThenElse(cond, s.init)
    else:
        init = s.init
    return replace(s, init=None, body=ir.seq(init, s.body))


class _InitLowerer(StmtMutator):
    def visit_Block(self, s: ir.Block) -> ir.Stmt:
        return _guard_init(super().visit_Block(s))


def lower_init_block(func: ir.PrimFunc) -> ir.PrimFunc:
    """Move each block's ``init`` into its body under a first-iteration guard.

    Before::

        with T.block("B"):
            vi = T.axis.spatial(8, i)
            vk = T.axis.reduce(8, k)
            with T.init():
                B[vi] = T.float32(0.0)
            B[vi] = B[vi] + A[vi, vk]

    After::

        with T.block("B"):
            vi = T.axis.spatial(8, i)
            vk = T.axis.reduce(8, k)
            if vk == 0:
                B[vi] = T.float32(0.0)
            B[vi] = B[vi] + A[vi, vk]
    """
    return _InitLowerer().visit(func)


def aligned_strides(buf: ir.Buffer, aligns: Sequence[tuple[int, int, int]]) -> tuple:
    """Row-major strides of ``buf`` with ``stride[axis] % factor == offset`` padding."""
    want = {axis: (factor, offset) for axis, factor, offset in aligns}
    strides: list[Any] = [None] * buf.ndim
    stride: Any = ir.IntImm(1)
    for d in range(buf.ndim - 1, -1, -1):
        if d in want and isinstance(stride, ir.IntImm):
            factor, offset = want[d]
            v = stride.value
            pad = (offset - v % factor) % factor
            stride = ir.IntImm(v + pad)
        strides[d] = stride
        stride = stride * buf.shape[d]
        if isinstance(stride, ir.Mul) and all(isinstance(x, ir.IntImm) for x in (stride.a,
                                                                               stride.b)):
            stride = ir.IntImm(stride.a.value * stride.b.value)
    return tuple(strides)


class _AlignCollector(StmtVisitor):
    def __init__(self) -> None:
        self.aligns: dict[str, list[tuple[int, int, int]]] = {}

    def visit_Block(self, s: ir.Block) -> None:
        for name, axis, factor, offset in s.annotations.get("buffer_dim_align", []):
            self.aligns.setdefault(name, []).append((int(axis), int(factor), int(offset)))
        super().visit_Block(s)


class _CarriedCollector(StmtVisitor):
    """Loop vars bound to reduce block vars -> names of the buffers the block writes."""

    def __init__(self) -> None:
        self.carried: dict[ir.Var, set[str]] = {}

    def visit_BlockRealize(self, s: ir.BlockRealize) -> None:
        names = {r.buffer.name for r in s.block.writes}
        for iv, v in zip(s.block.iter_vars, s.iter_values, strict=True):
            if iv.iter_type == "reduce":
                for lv in free_vars(v):
                    self.carried.setdefault(lv, set()).update(names)
        super().visit_BlockRealize(s)


class _BlockLowerer(StmtExprMutator):
    def __init__(self, aligns: dict[str, list[tuple[int, int, int]]],
                 carried: dict[ir.Var, set[str]]) -> None:
        self.aligns = aligns
        self.carried = carried
        self.bmap: dict[ir.Buffer, ir.Buffer] = {}

    def visit_For(self, s: ir.For) -> ir.Stmt:
        new = super().visit_For(s)
        names = self.carried.get(s.loop_var)
        if names and isinstance(new, ir.For):
            old = tuple(new.annotations.get(CARRIED, ()))
            ann = {**new.annotations, CARRIED: tuple(sorted(set(old) | names))}
            new = replace(new, annotations=ann)
        return new

    def visit_buffer(self, b: ir.Buffer) -> ir.Buffer:
        return self.bmap.get(b, b)

    def visit_BlockRealize(self, s: ir.BlockRealize) -> ir.Stmt:
        blk = _guard_init(s.block)  # in case lower_init_block did not run
        for b in blk.alloc_buffers:
            if b.name in self.aligns and not b.strides:
                self.bmap[b] = replace(b, strides=aligned_strides(b, self.aligns[b.name]),
                                       dim_align=tuple(self.aligns[b.name]))
        body = blk.body
        vmap = {iv.var: v for iv, v in zip(blk.iter_vars, s.iter_values, strict=True)}
        body = self.visit_stmt(substitute(body, vmap))
        if not ir.is_const_int(s.predicate, 1):
            body = ir.IfThenElse(self.visit_expr(s.predicate), body)
        for b in reversed(blk.alloc_buffers):
            body = ir.Allocate(self.visit_buffer(b), body)
        return body

    def visit_Block(self, s: ir.Block) -> ir.Stmt:  # a Block outside a BlockRealize
        return self.visit_BlockRealize(ir.BlockRealize(
            tuple(iv.var for iv in s.iter_vars), ir.IntImm(1, "bool"), s))


def lower_blocks(func: ir.PrimFunc) -> ir.PrimFunc:
    """Replace every block by its body with block vars bound; predicates become guards.

    Run after :func:`lower_init_block`. ``alloc_buffers`` become ``T.allocate``. Loops
    bound to reduce block variables are annotated ``carried`` with the names of the
    buffers the reduction accumulates into.

    Before::

        for i_0, i_1 in T.grid(3, 4):
            with T.block("B"):
                vi = T.axis.spatial(10, i_0 * 4 + i_1)
                T.where(i_0 * 4 + i_1 < 10)
                B[vi] = A[vi] + T.float32(1.0)

    After::

        for i_0, i_1 in T.grid(3, 4):
            if i_0 * 4 + i_1 < 10:
                B[i_0 * 4 + i_1] = A[i_0 * 4 + i_1] + T.float32(1.0)
    """
    col = _AlignCollector()
    col.visit(func)
    car = _CarriedCollector()
    car.visit(func)
    return _BlockLowerer(col.aligns, car.carried).visit(func)
