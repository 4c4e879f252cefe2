"""Reuse memory of allocations whose lifetimes do not overlap: ``storage_rewrite``."""

from __future__ import annotations

from toolchain.tir import ir
from toolchain.tir.functor import StmtExprMutator, StmtMutator
from toolchain.tir.transform.remove_noop import vars_used


class _Retarget(StmtExprMutator):
    """Point every access of the buffers in ``bmap`` (by data Var) at the shared buffer."""

    def __init__(self, bmap: dict[ir.Var, ir.Buffer]) -> None:
        self.bmap = bmap

    def visit_buffer(self, b: ir.Buffer) -> ir.Buffer:
        return self.bmap.get(b.data, b)

    def visit_Var(self, e: ir.Var) -> ir.PrimExpr:
        new = self.bmap.get(e)
        return new.data if new is not None else e


def _plan(allocs: list[ir.Buffer], seq: tuple[ir.Stmt, ...]) -> dict[ir.Var, ir.Buffer]:
    """Greedy first-fit of buffers into shared slots by lifetime (first/last statement)."""
    spans = []
    uses = [vars_used(s) for s in seq]  # one walk per statement, not per buffer and statement
    for b in allocs:
        used = [k for k, names in enumerate(uses) if b.data in names]
        size = ir.const_int(b.shape[0]) if len(b.shape) == 1 else None
        if not used or size is None:
            continue
        spans.append((used[0], used[-1], b, size))
    spans.sort(key=lambda t: (t[0], t[1]))
    slots: list[list] = []  # [last use, dtype, scope, size, members]
    for first, last, b, size in spans:
        for slot in slots:
            if slot[0] < first and slot[1] == b.dtype and slot[2] == b.scope:
                slot[0] = last
                slot[3] = max(slot[3], size)
                slot[4].append(b)
                break
        else:
            slots.append([last, b.dtype, b.scope, size, [b]])
    out: dict[ir.Var, ir.Buffer] = {}
    for _, dtype, scope, size, members in slots:
        if len(members) < 2:
            continue
        head = members[0]
        shared = ir.Buffer(head.name, (size,), dtype, scope, (), head.align, None, head.data)
        for b in members:
            out[b.data] = shared
    return out


class _StorageRewrite(StmtMutator):
    def visit_Allocate(self, s: ir.Allocate) -> ir.Stmt:
        chain: list[ir.Buffer] = []
        node: ir.Stmt = s
        while isinstance(node, ir.Allocate):
            chain.append(node.buffer)
            node = node.body
        body = self.visit_stmt(node)
        if isinstance(body, ir.SeqStmt) and len(chain) > 1:
            bmap = _plan(chain, body.seq)
            if bmap:
                body = _Retarget(bmap).visit_stmt(body)
                kept: list[ir.Buffer] = []
                for b in chain:
                    nb = bmap.get(b.data, b)
                    if nb.data is b.data:
                        kept.append(nb)
                chain = kept
        for b in reversed(chain):
            body = ir.Allocate(b, body)
        return body


def storage_rewrite(func: ir.PrimFunc) -> ir.PrimFunc:
    """Let allocations of the same dtype and scope share memory when their lifetimes
    (first to last top-level statement using them) do not overlap. Run after flattening.

    Before::

        T1 = T.allocate((1024,), "float32")
        T2 = T.allocate((1024,), "float32")
        T3 = T.allocate((1024,), "float32")
        for i in range(1024):
            T1[i] = A[i] + T.float32(1.0)
        for i in range(1024):
            T2[i] = T1[i] * T.float32(2.0)
        for i in range(1024):
            T3[i] = T2[i] - T.float32(3.0)
        for i in range(1024):
            B[i] = T3[i]

    After (``T3`` lives in ``T1``'s memory)::

        T1 = T.allocate((1024,), "float32")
        T2 = T.allocate((1024,), "float32")
        for i in range(1024):
            T1[i] = A[i] + T.float32(1.0)
        for i in range(1024):
            T2[i] = T1[i] * T.float32(2.0)
        for i in range(1024):
            T1[i] = T2[i] - T.float32(3.0)
        for i in range(1024):
            B[i] = T1[i]
    """
    return _StorageRewrite().visit(func)
