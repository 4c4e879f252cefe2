"""DeformConv: one reduction over (input channel of the group, kernel row, kernel column)
per output element, each term a bilinear sample of the input at the tap's moved position.

Sample positions come from the run-time ``offset`` input; the four corner loads use
indices clamped into the image and a zero weight for corners outside it, so no load leaves
its buffer.  Accumulated in float64, rounded once; see :mod:`toolchain.graph.ops.deform`
for the semantics.

Example::

    >>> from toolchain import te
    >>> x = te.placeholder((1, 4, 6, 6), name="x")
    >>> w = te.placeholder((2, 4, 3, 3), name="w")
    >>> off = te.placeholder((1, 18, 4, 4), name="off")
    >>> [d.value for d in deform_conv2d(x, w, off, None, None, (1, 1), (0, 0, 0, 0), (1, 1),
    ...                                 1, 1).shape]
    [1, 2, 4, 4]
"""

from __future__ import annotations

from collections.abc import Sequence

from toolchain import te
from toolchain.graph.ops.deform import deform_geometry
from toolchain.tir import ir
from toolchain.topi.utils import const_shape, scalar

Expr = ir.PrimExpr
_W = "float64"


def deform_conv2d(x: te.Tensor, w: te.Tensor, offset: te.Tensor, bias: te.Tensor | None,
                  mask: te.Tensor | None, strides: Sequence[int], pads: Sequence[int],
                  dilations: Sequence[int], group: int, offset_group: int) -> te.Tensor:
    """ONNX DeformConv (2-D) of ``x`` ``[N, C, H, W]`` with ``w`` ``[M, C/group, kh, kw]``."""
    xs, ws = const_shape(x, "deform_conv2d"), const_shape(w, "deform_conv2d")
    g = deform_geometry("deform_conv2d", xs, ws, {
        "kernel_shape": ws[2:], "strides": tuple(strides), "dilations": tuple(dilations),
        "pads": tuple(pads), "group": group, "offset_group": offset_group})
    (kh, kw), (sh, sw), (dh, dw) = g["kernel"], g["strides"], g["dilations"]
    n, ic, hgt, wid = xs
    m, icg = ws[0], ws[1]
    per_og = ic // offset_group
    c = te.reduce_axis((0, icg), name="c")
    a = te.reduce_axis((0, kh), name="a")
    b = te.reduce_axis((0, kw), name="b")

    def body(bn: Expr, o: Expr, i: Expr, j: Expr) -> Expr:
        ci = te.floordiv(o, m // group) * icg + c
        og = te.floordiv(ci, per_og)
        tap = (og * kh + a) * kw + b
        y = te.cast(i * sh - g["pads"][0] + a * dh, _W) + te.cast(offset[bn, tap * 2, i, j], _W)
        xx = te.cast(j * sw - g["pads"][1] + b * dw, _W) + te.cast(
            offset[bn, tap * 2 + 1, i, j], _W)
        y0f, x0f = te.floor(y), te.floor(xx)
        fy, fx = y - y0f, xx - x0f
        y0, x0 = te.cast(y0f, "int64"), te.cast(x0f, "int64")
        one, zero = scalar(1, _W), scalar(0, _W)
        total = zero
        for dy, wy in ((0, one - fy), (1, fy)):
            for dx, wx in ((0, one - fx), (1, fx)):
                yy, xi = y0 + dy, x0 + dx
                ok = te.all(yy >= 0, yy < hgt, xi >= 0, xi < wid)
                yc = te.min(te.max(yy, ir.IntImm(0, "int64")), ir.IntImm(hgt - 1, "int64"))
                xc = te.min(te.max(xi, ir.IntImm(0, "int64")), ir.IntImm(wid - 1, "int64"))
                total = total + te.select(ok, wy * wx * te.cast(x[bn, ci, yc, xc], _W), zero)
        if mask is not None:
            total = total * te.cast(mask[bn, tap, i, j], _W)
        return te.sum(te.cast(w[o, c, a, b], _W) * total, axis=[c, a, b])

    shape = (n, m, *g["out"])
    acc = te.compute(shape, body, name="deform_acc", tag="reduce")

    def finish(bn: Expr, o: Expr, i: Expr, j: Expr) -> Expr:
        v = acc[bn, o, i, j]
        if bias is not None:
            v = v + te.cast(bias[o], _W)
        return te.cast(v, x.dtype)

    return te.compute(shape, finish, name="deform_conv2d", tag="elemwise")
