"""RoiAlign: one reduction over a bin's sample points per output element; MaxRoiPool: a
max over the image masked to each output element's bin.

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


def max_roi_pool(x: te.Tensor, rois: te.Tensor, pooled: tuple[int, int],
                 spatial_scale: float = 1.0) -> te.Tensor:
    """ONNX MaxRoiPool of ``x`` ``[N, C, H, W]`` by boxes ``rois`` ``[R, 5]``:
    ``[R, C, *pooled]``.  Each output element is a max over the whole image, masked to its
    bin (the bins' sizes depend on the run-time boxes): O(H·W) per element."""
    n_img, chans, hgt, wid = const_shape(x, "max_roi_pool")
    n_roi = const_shape(rois, "max_roi_pool")[0]
    rh, rw = te.reduce_axis((0, hgt), name="rh"), te.reduce_axis((0, wid), name="rw")
    scale = scalar(spatial_scale, _W)
    half, zero = scalar(0.5, _W), scalar(0, _W)

    def pixel(r: Expr, k: int) -> Expr:  # C's round(): halves away from zero
        v = te.cast(rois[r, k], _W) * scale
        return te.select(v >= zero, te.floor(v + half), zero - te.floor(half - v))

    def span(r: Expr, lo: int, hi: int, i: Expr, bins: int, limit: int) -> tuple[Expr, Expr]:
        start = pixel(r, lo)
        size = te.max(pixel(r, hi) - start + scalar(1, _W), scalar(1, _W))
        step = size / scalar(bins, _W)
        cap = scalar(limit, _W)
        b0 = te.min(te.max(te.floor(te.cast(i, _W) * step) + start, zero), cap)
        b1 = te.min(te.max(te.ceil(te.cast(i + 1, _W) * step) + start, zero), cap)
        return b0, b1

    def bounds(r: Expr, i: Expr, j: Expr) -> tuple[Expr, Expr, Expr, Expr]:
        return (*span(r, 2, 4, i, pooled[0], hgt), *span(r, 1, 3, j, pooled[1], wid))

    def body(r: Expr, c: Expr, i: Expr, j: Expr) -> Expr:
        h0, h1, w0, w1 = bounds(r, i, j)
        b = te.cast(rois[r, 0], "int64")
        b = te.min(te.max(b, ir.IntImm(0, "int64")), ir.IntImm(n_img - 1, "int64"))
        hh, ww = te.cast(rh, _W), te.cast(rw, _W)
        inside = te.all(hh >= h0, hh < h1, ww >= w0, ww < w1)
        return te.max(te.select(inside, x[b, c, rh, rw], te.min_value(x.dtype)),
                      axis=[rh, rw])

    shape = (n_roi, chans, pooled[0], pooled[1])
    acc = te.compute(shape, body, name="max_roi_acc", tag="reduce")

    def finish(r: Expr, c: Expr, i: Expr, j: Expr) -> Expr:  # an empty bin is 0
        h0, h1, w0, w1 = bounds(r, i, j)
        return te.select(te.any(h1 <= h0, w1 <= w0), scalar(0, x.dtype), acc[r, c, i, j])

    return te.compute(shape, finish, name="max_roi_pool", tag="elemwise")
