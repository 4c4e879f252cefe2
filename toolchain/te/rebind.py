"""Rewire a compute DAG: :func:`rebind` rebuilds the tensors of a DAG with some of their
inputs replaced (how a fused group's computes are chained, and how a pool in a blocked
layout reads its input through an index map).
"""

from __future__ import annotations

from dataclasses import replace

from toolchain.te import tensor as te
from toolchain.tir import ir
from toolchain.tir.functor import StmtExprMutator


class SwapBuffers(StmtExprMutator):
    """Loads of the buffers in ``swap`` (keyed by ``id(old buffer)``) read the new one."""

    def __init__(self, swap: dict[int, ir.Buffer]) -> None:
        self.swap = swap

    def visit_buffer(self, b: ir.Buffer) -> ir.Buffer:
        return self.swap.get(id(b), b)


class _UnitIndex(StmtExprMutator):
    """``B[0, i1, i2]`` -> ``B[i0, i1, i2]`` where ``i0`` is the compute's own unit axis:
    the same element, but an index made of the block's vars is what
    ``reverse_compute_inline`` / ``reverse_compute_at`` need to fuse a tail into its
    producer (broadcasting computes write a size-1 axis as the constant 0)."""

    def __init__(self, axis: tuple[te.AxisVar, ...]) -> None:
        self.axis = axis

    def visit_BufferLoad(self, e: ir.BufferLoad) -> ir.PrimExpr:
        e = super().visit_BufferLoad(e)
        if len(e.indices) != len(self.axis):
            return e
        new: list[ir.PrimExpr] = []
        for ix, ax, dim in zip(e.indices, self.axis, e.buffer.shape, strict=True):
            if ix is ax:
                new.append(ix)
            elif (ir.is_const_int(ix, 0) and ir.is_const_int(dim, 1)
                  and ir.is_const_int(ax.dom.extent, 1)):
                new.append(ax)
            else:
                return e
        return ir.BufferLoad(e.buffer, tuple(new))


def _map_body(body: ir.PrimExpr, m: StmtExprMutator) -> ir.PrimExpr:
    if isinstance(body, te.Reduce):
        src, cond = m.visit_expr(body.source), m.visit_expr(body.condition)
        if src is body.source and cond is body.condition:
            return body
        return replace(body, source=src, condition=cond)
    return m.visit_expr(body)


def rebind(outputs: list[te.Tensor], mapping: dict[int, te.Tensor]) -> list[te.Tensor]:
    """Rebuild the compute DAG of ``outputs`` with the tensors whose buffer id is in
    ``mapping`` replaced (placeholders by the tensors that really produce them).

    >>> a = te.placeholder((4,), name="a")
    >>> b = te.compute((4,), lambda i: a[i] * 2.0, name="b")
    >>> c = te.compute((4,), lambda i: a[i] + 1.0, name="c")
    >>> str(rebind([b], {id(a.buffer): c})[0].op.body)
    'c[i] * T.float32(2.0)'
    """
    memo: dict[int, te.Tensor] = {}
    return [_rebound(t, mapping, memo) for t in outputs]


def _rebound(t: te.Tensor, mapping: dict[int, te.Tensor],
             memo: dict[int, te.Tensor]) -> te.Tensor:
    # a module function, not a closure calling itself: that is a reference cycle keeping
    # the rebuilt DAG for the cyclic collector
    if id(t.buffer) in mapping:
        return mapping[id(t.buffer)]
    if not isinstance(t.op, te.ComputeOp):
        return t
    if id(t) in memo:
        return memo[id(t)]
    swap = {}
    for dep in t.op.input_tensors():
        new = _rebound(dep, mapping, memo)
        if new is not dep:
            swap[id(dep.buffer)] = new.buffer
    out = t
    body = _map_body(t.op.body, SwapBuffers(swap)) if swap else t.op.body
    body = _map_body(body, _UnitIndex(t.op.axis))
    if body is not t.op.body:
        op = te.ComputeOp(t.op.name, t.op.axis, body, t.op.tag, dict(t.op.attrs))
        out = te.Tensor(ir.Buffer(t.name, t.shape, t.dtype), op)
    memo[id(t)] = out
    return out


