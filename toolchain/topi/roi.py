"""RoiAlign: one reduction over a bin's sample points per output element.

Box geometry is computed per output element from ``rois`` (a run-time input), in float64;
the sample grid is ``sampling_ratio × sampling_ratio`` points (a static reduction extent,
so ``sampling_ratio`` must be > 0: the grid of 0 depends on each box).  Interpolation
indices are clamped into the image (a point more than a pixel outside is masked to 0), and
the image index ``batch_indices[n]`` is clamped into ``[0, N)``, so no load leaves its
buffer; see :mod:`toolchain.graph.ops.roi` for the semantics.

Example::

    >>> from toolchain import te
    >>> x = te.placeholder((1, 3, 8, 8), name="x")
    >>> r = te.placeholder((5, 4), name="r")
    >>> b = te.placeholder((5,), "int64", name="b")
    >>> [d.value for d in roi_align(x, r, b, 2, 2, 2).shape]
    [5, 3, 2, 2]
"""

from __future__ import annotations

from toolchain import te
from toolchain.errors import OptionError
from toolchain.tir import ir
from toolchain.topi.utils import const_shape, scalar

Expr = ir.PrimExpr
_W = "float64"


def _axis(v: Expr, n: int) -> tuple[Expr, Expr, Expr]:
    """``(low, high, fraction)`` of coordinate ``v >= 0`` on an axis of ``n`` pixels."""
    low0 = te.cast(te.floor(v), "int64")
    edge = low0 >= n - 1
    last = ir.IntImm(n - 1, "int64")
    low = te.select(edge, last, low0)
    return low, te.select(edge, last, low0 + 1), te.select(edge, scalar(0, _W),
                                                           v - te.cast(low0, _W))


def roi_align(x: te.Tensor, rois: te.Tensor, batch: te.Tensor, out_h: int, out_w: int,
              sampling_ratio: int, spatial_scale: float = 1.0, mode: str = "avg",
              half_pixel: bool = True) -> te.Tensor:
    """ONNX RoiAlign of ``x`` ``[N, C, H, W]``: ``[R, C, out_h, out_w]``."""
    n_img, chans, hgt, wid = const_shape(x, "roi_align")
    n_roi = const_shape(rois, "roi_align")[0]
    if sampling_ratio < 1:
        raise OptionError("roi_align: sampling_ratio must be >= 1 (0 makes the sample grid "
                          "depend on the boxes)")
    g = sampling_ratio
    iy, ix = te.reduce_axis((0, g), name="iy"), te.reduce_axis((0, g), name="ix")
    off = scalar(0.5 if half_pixel else 0.0, _W)
    scale = scalar(spatial_scale, _W)

    def coord(r: Expr, k: int) -> Expr:
        return te.cast(rois[r, k], _W) * scale - off

    def body(r: Expr, c: Expr, ph: Expr, pw: Expr) -> Expr:
        x1, y1, x2, y2 = (coord(r, k) for k in range(4))
        h, w = y2 - y1, x2 - x1
        if not half_pixel:
            h, w = te.max(h, scalar(1, _W)), te.max(w, scalar(1, _W))
        bh, bw = h / scalar(out_h, _W), w / scalar(out_w, _W)
        half = scalar(0.5, _W)
        y = y1 + te.cast(ph, _W) * bh + (te.cast(iy, _W) + half) * bh / scalar(g, _W)
        xx = x1 + te.cast(pw, _W) * bw + (te.cast(ix, _W) + half) * bw / scalar(g, _W)
        inside = te.all(y >= scalar(-1, _W), y <= scalar(hgt, _W),
                        xx >= scalar(-1, _W), xx <= scalar(wid, _W))
        yl, yh, ly = _axis(te.max(y, scalar(0, _W)), hgt)
        xl, xh, lx = _axis(te.max(xx, scalar(0, _W)), wid)
        b = te.min(te.max(batch[r], ir.IntImm(0, "int64")), ir.IntImm(n_img - 1, "int64"))
        one = scalar(1, _W)

        def at(yi: Expr, xi: Expr) -> Expr:
            return te.cast(x[b, c, yi, xi], _W)

        terms = [(one - ly) * (one - lx) * at(yl, xl), (one - ly) * lx * at(yl, xh),
                 ly * (one - lx) * at(yh, xl), ly * lx * at(yh, xh)]
        zero = scalar(0, _W)
        if mode == "avg":
            v = terms[0] + terms[1] + terms[2] + terms[3]
            return te.sum(te.select(inside, v, zero), axis=[iy, ix])
        v = te.max(te.max(terms[0], terms[1]), te.max(terms[2], terms[3]))
        return te.max(te.select(inside, v, zero), axis=[iy, ix])

    shape = (n_roi, chans, out_h, out_w)
    acc = te.compute(shape, body, name="roi_acc", tag="reduce")
    norm = scalar(1.0 / (g * g) if mode == "avg" else 1.0, _W)
    return te.compute(shape, lambda *i: te.cast(acc[i] * norm, x.dtype), name="roi_align",
                      tag="elemwise")
