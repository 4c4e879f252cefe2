"""Det as Gaussian elimination with partial pivoting, one compute stage per step.

The matrices (the last two axes, batch axes flattened) are copied to float64; step ``k``
(``k < M - 1``) finds the pivot row ``p`` (the first row ``≥ k`` of largest ``|a[·, k]|``:
a max reduction, then a min reduction over the rows that reach it), swaps rows ``k`` and
``p`` and eliminates column ``k`` below the diagonal (a zero pivot column is left alone:
its zero diagonal makes the determinant 0).  Each elimination is written as a one-term
reduction: the default schedules inline every cheap injective stage into its readers, and
the chain of steps inlined into each other would grow as ``4^M``; a reduction block is
materialised, one ``M × M`` buffer per step.  The determinant is the product of the
diagonal, negated once per step whose pivot row was not ``k``.  ``4·(M − 1) + 2`` stages;
see :mod:`toolchain.graph.ops.linalg` for the semantics.

Example::

    >>> from toolchain import te
    >>> x = te.placeholder((2, 3, 3), name="x")
    >>> [d.value for d in det(x).shape]
    [2]
"""

from __future__ import annotations

import math

from toolchain import te
from toolchain.errors import OptionError
from toolchain.tir import ir
from toolchain.topi.utils import const_shape, scalar

Expr = ir.PrimExpr
_W = "float64"


def _unflatten(b: Expr, dims: tuple[int, ...]) -> list[Expr]:
    idx: list[Expr] = []
    for d in reversed(dims):
        idx.append(te.floormod(b, d))
        b = te.floordiv(b, d)
    return idx[::-1]


def _step(a: te.Tensor, k: int, m: int) -> tuple[te.Tensor, te.Tensor]:
    """Pivot and eliminate column ``k``: ``(next matrix, pivot row)``."""
    r = te.reduce_axis((k, m), name="r")
    peak = te.compute((a.shape[0],), lambda b: te.max(te.abs(a[b, r, k]), axis=r),
                      name=f"det_peak{k}", tag="reduce")
    q = te.reduce_axis((k, m), name="q")
    piv = te.compute((a.shape[0],), lambda b: te.min(te.select(
        te.equal(te.abs(a[b, q, k]), peak[b]), q, ir.IntImm(m, q.dtype)), axis=q),
        name=f"det_pivot{k}", tag="reduce")

    def swapped(b: Expr, i: Expr, j: Expr) -> Expr:
        p = te.min(piv[b], ir.IntImm(m - 1, piv.dtype))  # m only for an all-NaN column
        return te.select(te.equal(i, k), a[b, p, j],
                         te.select(te.equal(i, p), a[b, k, j], a[b, i, j]))

    sw = te.compute(a.shape, swapped, name=f"det_swap{k}", tag="injective")

    one = te.reduce_axis((0, 1), name="one")

    def eliminated(b: Expr, i: Expr, j: Expr) -> Expr:
        d = sw[b, k, k]
        zero = scalar(0, _W)
        f = te.select(te.equal(d, zero), zero, sw[b, i, k] / d)
        return te.sum(te.select(i > k, sw[b, i, j] - f * sw[b, k, j], sw[b, i, j]), axis=one)

    return te.compute(a.shape, eliminated, name=f"det_elim{k}", tag="reduce"), piv


def det(x: te.Tensor) -> te.Tensor:
    """ONNX Det of ``x`` ``[*, M, M]``: ``[*]`` (``(1,)`` for a single matrix)."""
    shape = const_shape(x, "det")
    if len(shape) < 2 or shape[-1] != shape[-2] or shape[-1] < 1:
        raise OptionError(f"det: input {list(shape)} must end in a square matrix")
    batch, m = shape[:-2], shape[-1]
    n = math.prod(batch)
    a = te.compute((n, m, m), lambda b, i, j: te.cast(x[(*_unflatten(b, batch), i, j)], _W),
                   name="det_in", tag="injective")
    pivots = []
    for k in range(m - 1):
        a, piv = _step(a, k, m)
        pivots.append((k, piv))
    out_shape = batch or (1,)

    def result(*o: Expr) -> Expr:
        b: Expr = ir.IntImm(0, "int32")
        for idx, d in zip(o if batch else (), batch, strict=False):
            b = b * d + idx
        v = a[b, 0, 0]
        for i in range(1, m):
            v = v * a[b, i, i]
        for k, piv in pivots:
            v = te.select(te.equal(piv[b], k), v, -v)
        return te.cast(v, x.dtype)

    return te.compute(out_shape, result, name="det", tag="injective")
