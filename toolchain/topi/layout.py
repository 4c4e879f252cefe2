"""Computes of the graph layout pass's own ops: ``LayoutTransform`` (a tensor stored in
another layout) and ``LayoutPool`` (a pool computed in a blocked layout). The layout pass
makes these ops, so they only reach code generation inside fused groups.

>>> from toolchain import te
>>> x = te.placeholder((1, 8, 2, 3), name="x")
>>> [int(d.value) for d in layout_transform(x, "NCHW", "NCHW4c").shape]
[1, 2, 2, 3, 4]
"""

from __future__ import annotations

from toolchain import te
from toolchain.graph.passes.layout_ops import block_of, layout_shape, nchw_node, nchw_shape
from toolchain.te.rebind import rebind
from toolchain.tir import ir
from toolchain.topi.registry import ComputeFn, Ctx, node_compute


def _nchw_index(o: tuple[ir.PrimExpr, ...], layout: str) -> tuple[ir.PrimExpr, ...]:
    """The ``NCHW`` index of element ``o`` of a tensor stored in ``layout``."""
    if layout == "NCHW":
        return o
    if layout == "NHWC":
        return (o[0], o[3], o[1], o[2])
    b = block_of(layout) or 1
    return (o[0], o[1] * b + o[4], o[2], o[3])


def _layout_index(i: tuple[ir.PrimExpr, ...], layout: str) -> tuple[ir.PrimExpr, ...]:
    """Where ``NCHW`` element ``i`` lives in a tensor stored in ``layout``."""
    if layout == "NCHW":
        return i
    if layout == "NHWC":
        return (i[0], i[2], i[3], i[1])
    b = block_of(layout) or 1
    return (i[0], te.floordiv(i[1], b), i[2], i[3], te.floormod(i[1], b))


def layout_transform(x: te.Tensor, src: str, dst: str, name: str = "layout_transform"
                     ) -> te.Tensor:
    """``x`` (stored in ``src``) stored in ``dst`` (``NCHW``, ``NHWC``, ``NCHW<b>c``).

    >>> x = te.placeholder((1, 8, 2, 3), name="x")
    >>> [int(d.value) for d in layout_transform(x, "NCHW", "NCHW4c").shape]
    [1, 2, 2, 3, 4]
    """
    shape = nchw_shape([int(d.value) for d in x.shape], src)
    out = layout_shape(shape, dst)
    return te.compute(out, lambda *o: x[_layout_index(_nchw_index(o, dst), src)], name=name,
                      tag="injective")


def _layout_transform_compute(ctx: Ctx) -> list[te.Tensor]:
    a = ctx.attrs
    return [layout_transform(ctx.tensor(0), a["src_layout"], a["dst_layout"])]


def _layout_pool_compute(ctx: Ctx) -> list[te.Tensor]:
    layout = ctx.attrs["layout"]
    x = ctx.tensor(0)
    view = layout_transform(x, layout, "NCHW", name="pool_input")
    plain = nchw_node(ctx.node)
    nc = node_compute(plain)
    (pooled,) = rebind(list(nc.outputs), {id(nc.inputs[0].buffer): view})
    return [layout_transform(pooled, "NCHW", layout)]


#: graph op -> its compute: the table :func:`toolchain.topi.registry.computes` reads
COMPUTES: dict[str, ComputeFn] = {
    "LayoutTransform": _layout_transform_compute,
    "LayoutPool": _layout_pool_compute,
}
