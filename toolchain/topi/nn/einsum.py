"""Einsum as one tensor expression: ``out[free] = Σ_contracted Π_operands op[letters]``.

The equation is resolved by :func:`toolchain.graph.ops.nn_ext.einsum_plan` (ellipsis axes
as digit letters, implicit output).  Each output letter is a spatial axis, each contracted
letter a reduce axis; an operand indexes its axes by their letters, so a repeated letter
reads a diagonal and an ellipsis axis of extent 1 reads index 0 (broadcasting).  float16 is
accumulated in float32.

Example::

    >>> from toolchain import te
    >>> a = te.placeholder((5, 2, 3), name="a"); b = te.placeholder((5, 3, 4), name="b")
    >>> [d.value for d in einsum("bij,bjk->bik", [a, b]).shape]
    [5, 2, 4]
"""

from __future__ import annotations

from collections.abc import Sequence

from toolchain import te
from toolchain.graph.ops.nn_ext import einsum_plan
from toolchain.tir import ir
from toolchain.topi.utils import const_shape

Expr = ir.PrimExpr


def einsum(equation: str, operands: Sequence[te.Tensor],
           shapes: Sequence[tuple[int, ...]] | None = None) -> te.Tensor:
    """``numpy.einsum(equation, *operands)`` as a te.compute (see the module docstring).

    ``shapes``: the operands' graph shapes when they differ from the tensors' (a rank-0
    value is a ``(1,)`` buffer)."""
    shapes = [tuple(s) for s in shapes] if shapes is not None else [
        const_shape(t, "einsum") for t in operands]
    plan = einsum_plan("einsum", equation, shapes)
    dt = operands[0].dtype
    acc = "float32" if dt == "float16" else dt
    red = {ch: te.reduce_axis((0, plan.sizes[ch]), name=f"r_{ch}") for ch in plan.contracted}
    out_shape = tuple(plan.sizes[ch] for ch in plan.output)

    def body(*o: Expr) -> Expr:
        var = dict(zip(plan.output, o, strict=False)) if out_shape else {}
        var.update(red)
        term: Expr | None = None
        for t, letters, shape in zip(operands, plan.operands, shapes, strict=True):
            idx = tuple(ir.IntImm(0) if n == 1 and plan.sizes[ch] != 1 else var[ch]
                        for ch, n in zip(letters, shape, strict=True))
            v = te.cast(t[idx] if idx else t[(ir.IntImm(0),) * t.ndim], acc)
            term = v if term is None else term * v
        assert term is not None
        if red:
            return te.sum(term, axis=list(red.values()))
        return te.cast(term, dt) if acc != dt else term

    out = te.compute(out_shape or (1,), body, name="einsum", tag="reduce" if red else
                     "injective")
    if acc == dt or not red:
        return out
    return te.compute(out.shape, lambda *i: te.cast(out[i], dt), name="einsum_cast",
                      tag="elemwise")

