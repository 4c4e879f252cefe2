"""MaxUnpool: a gather over the pooling windows that can cover each output element.

An output element at position ``o`` (per spatial axis) can only come from the input
positions whose pooling windows cover it (MaxPool's indices point inside their own
window): ``p = ⌊(o + pad) / stride⌋ − r`` for ``r < ⌈kernel / stride⌉``, with the begin
``pad``; with ``output_shape`` the pads are unknown (the specification ignores them), so
``pad = kernel − 1`` and ``⌈(kernel − 1) / stride⌉`` more candidates cover every begin pad
a window can have.  Among those whose index ``I`` equals ``o``'s flat index, the last in
``X``'s order wins (a max reduction over their flat positions), else the element is 0;
an index outside its own window is not found (the reference scatters it anywhere).  Cost:
a few candidates per output element, not a sweep over ``X``.  See
:mod:`toolchain.graph.ops.pool_ext` for the semantics.

Example::

    >>> from toolchain import te
    >>> x = te.placeholder((1, 2, 3, 3), name="x")
    >>> i = te.placeholder((1, 2, 3, 3), "int64", name="i")
    >>> y = max_unpool(x, i, (2, 2), (2, 2), (0, 0), (1, 2, 7, 6), exact=False)
    >>> [d.value for d in y.shape]
    [1, 2, 7, 6]
"""

from __future__ import annotations

from collections.abc import Sequence

from toolchain import te
from toolchain.tir import ir
from toolchain.topi.utils import const_shape, scalar

Expr = ir.PrimExpr
_I = "int64"


def max_unpool(x: te.Tensor, indices: te.Tensor, kernel: Sequence[int],
               strides: Sequence[int], pads: Sequence[int], out_shape: Sequence[int],
               exact: bool = True) -> te.Tensor:
    """ONNX MaxUnpool of ``x`` ``[N, C, *in]`` by its MaxPool ``indices`` (flat over
    ``out_shape``).  ``pads``: the begin pads (``exact``) or, with an ``output_shape``,
    the most a window may start before the output (``kernel − 1``: :func:`unpool_geometry`)."""
    shape = const_shape(x, "max_unpool")
    nsp = len(kernel)
    spatial = shape[2:]
    reach = [-(-kernel[a] // strides[a]) + (0 if exact else -(-pads[a] // strides[a]))
             for a in range(nsp)]
    r = [te.reduce_axis((0, reach[a]), name=f"r{a}") for a in range(nsp)]

    def i64(v: Expr) -> Expr:
        return te.cast(v, _I)

    def src(*o: Expr) -> Expr:
        n, c, pos = o[0], o[1], o[2:]
        flat = i64(n) * scalar(out_shape[1], _I) + i64(c)
        for a in range(nsp):
            flat = flat * scalar(out_shape[2 + a], _I) + i64(pos[a])
        conds, at, key = [], [], scalar(0, _I)
        for a in range(nsp):
            p = te.floordiv(pos[a] + pads[a], strides[a]) - r[a]
            conds += [p >= 0, p < spatial[a]]
            at.append(te.min(te.max(p, ir.IntImm(0)), ir.IntImm(spatial[a] - 1)))
            key = key * scalar(spatial[a], _I) + i64(p)
        hit = te.all(*conds, te.equal(indices[(n, c, *at)], flat))
        return te.max(te.select(hit, key, scalar(-1, _I)), axis=r)

    last = te.compute(tuple(out_shape), src, name="max_unpool_src", tag="reduce")

    def body(*o: Expr) -> Expr:
        k = te.max(last[o], scalar(0, _I))
        at = []
        for a in range(nsp - 1, -1, -1):
            at.append(te.cast(te.floormod(k, spatial[a]), "int32"))
            k = te.floordiv(k, spatial[a])
        at.reverse()
        return te.select(last[o] >= 0, x[(o[0], o[1], *at)], scalar(0, x.dtype))

    return te.compute(tuple(out_shape), body, name="max_unpool", tag="injective")
