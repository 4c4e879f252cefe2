"""Resize (ONNX): nearest, linear and cubic over any axes, every coordinate mode.

Per resized axis ``d`` small stages tabulate, for output cell ``y`` and tap ``t``:

* ``resize_index_d[y, t]``  — the (clamped) source index,
* ``resize_weight_d[y, t]`` — the tap's weight (linear and cubic),
* ``resize_outside_d[y]``   — whether ``y`` falls outside the input
  (``tf_crop_and_resize`` only; such cells get ``extrapolation_value``).

Source coordinates are computed from the static sizes as the registry's reference does:
in float64, except for ``nearest`` with a ``scales`` input, whose whole-cell choice follows
onnxruntime's and PyTorch's float32 arithmetic (``coord_dtype``). ``nearest`` is one
gather stage through the index tables; ``linear`` and ``cubic`` interpolate one axis per
stage in float64 (the interpolation is separable, and so is the reference), then a last
stage casts to x's dtype (integers rounded half to even and saturated). Tables keep the
main stages' indices simple (one load each), which the access-region analysis of
``create_prim_func`` needs.

Example::

    >>> from toolchain import te
    >>> x = te.placeholder((1, 1, 4, 4), name="x")
    >>> y = resize(x, (1, 1, 8, 8), (1.0, 1.0, 2.0, 2.0), mode="linear")
    >>> [t.name for t in y.op.input_tensors()]
    ['resize_axis_3']
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from toolchain import te
from toolchain.errors import OptionError
from toolchain.graph.ops.transform import resizes_axis
from toolchain.tir import ir
from toolchain.topi.utils import const_shape, scalar

Expr = ir.PrimExpr
F64 = "float64"
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
_CTM = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
        "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize")


def _c(v: float) -> Expr:
    return scalar(v, F64)


def source_coord(y: Expr, ctm: str, in_len: int, out_len: int, scale: float,
                 roi: tuple[float, float], dtype: str = F64) -> Expr:
    """Source coordinate of output cell ``y`` (ONNX ``coordinate_transformation_mode``;
    ``roi`` is used by ``tf_crop_and_resize``), computed in ``dtype`` (see
    :func:`toolchain.graph.ops.nn_common.resize_coord_dtype`)."""
    def c(v: float) -> Expr:
        return scalar(v, dtype)

    f = te.cast(y, dtype)
    s = c(scale)
    out_w = scale * in_len  # the real-valued output length the modes are defined with
    if ctm == "half_pixel":
        return (f + c(0.5)) / s - c(0.5)
    if ctm == "pytorch_half_pixel":
        return (f + c(0.5)) / s - c(0.5) if out_w > 1 else c(-0.5)
    if ctm == "half_pixel_symmetric":
        offset = in_len / 2 * (1 - out_len / out_w)
        return c(offset) + (f + c(0.5)) / s - c(0.5)
    if ctm == "align_corners":
        return f * c(in_len - 1) / c(out_w - 1) if out_w != 1 else c(0.0)
    if ctm == "asymmetric":
        return f / s
    if ctm == "tf_half_pixel_for_nn":
        return (f + c(0.5)) / s
    if ctm == "tf_crop_and_resize":
        start, end = roi
        if out_w != 1:
            x = f * c(end - start) * c(in_len - 1) / c(out_w - 1)
        else:
            x = c((end - start) * (in_len - 1) / 2)
        return x + c(start * (in_len - 1))
    raise OptionError(f"resize: coordinate_transformation_mode {ctm!r} is not one of {_CTM}")


def _nearest_index(xf: Expr, mode: str, in_len: int, dtype: str) -> Expr:
    half = scalar(0.5, dtype)
    if mode == "round_prefer_floor":
        r = te.ceil(xf - half)
    elif mode == "round_prefer_ceil":
        r = te.floor(xf + half)
    elif mode == "floor":
        r = te.floor(xf)
    else:
        r = te.ceil(xf)
    return te.minimum(te.maximum(te.cast(r, "int32"), 0), in_len - 1)


def _tap_weight(mode: str, r: Expr, offset: int, cubic_a: float) -> Expr:
    """Weight of the tap at ``floor(x) + offset`` for fraction ``r = x - floor(x)``."""
    if mode == "linear":
        return _c(1.0) - r if offset == 0 else r
    return _kernel(mode, te.abs(_c(float(offset)) - r), cubic_a)


def _kernel(mode: str, d: Expr, cubic_a: float) -> Expr:
    """The interpolation kernel at distance ``d >= 0``: the tent (linear) or Keys' cubic."""
    if mode == "linear":
        return te.maximum(_c(1.0) - d, _c(0.0))
    a = cubic_a
    near = ((_c(a + 2) * d - _c(a + 3)) * d * d) + _c(1.0)
    far = ((_c(a) * d - _c(5 * a)) * d + _c(8 * a)) * d - _c(4 * a)
    return te.select(d <= _c(1.0), near, te.select(d < _c(2.0), far, _c(0.0)))


class _Axis:
    """The tables of one resized axis."""

    def __init__(self, d: int, in_len: int, out_len: int, scale: float,
                 roi: tuple[float, float], mode: str, ctm: str, nearest_mode: str,
                 cubic_a: float, exclude_outside: bool, antialias: bool = False,
                 coord_dtype: str = F64) -> None:
        offsets = {"nearest": [0], "linear": [0, 1], "cubic": [-1, 0, 1, 2]}[mode]
        # antialias when downsampling: the kernel stretched by 1 / scale, its taps widened to
        # cover its support, the weights normalised (ONNX Resize, antialias=1)
        stretch = antialias and mode != "nearest" and scale < 1.0
        if stretch:
            start = int(np.floor(-(1 if mode == "linear" else 2) / scale) + 1)
            offsets = list(range(start, 2 - start))
        self.taps = len(offsets)

        cdt = coord_dtype if mode == "nearest" else F64

        def coord(y: Expr) -> Expr:
            return source_coord(y, ctm, in_len, out_len, scale, roi, cdt)

        def raw_index(y: Expr, k: int) -> Expr:
            return te.cast(te.floor(coord(y)), "int32") + offsets[k]

        def pick(t: Expr, values: list[Expr]) -> Expr:
            out = values[-1]
            for k in range(len(values) - 2, -1, -1):
                out = te.select(te.equal(t, k), values[k], out)
            return out

        def index(y: Expr, t: Expr) -> Expr:
            if mode == "nearest":
                return _nearest_index(coord(y), nearest_mode, in_len, cdt)
            raw = pick(t, [raw_index(y, k) for k in range(self.taps)])
            return te.minimum(te.maximum(raw, 0), in_len - 1)

        def weight(y: Expr, t: Expr) -> Expr:
            xf = coord(y)
            r = xf - te.floor(xf)
            ws = [_tap_weight(mode, r, offsets[k], cubic_a) for k in range(self.taps)]
            if exclude_outside:
                inside = [te.all(raw_index(y, k) >= 0, raw_index(y, k) < in_len)
                          for k in range(self.taps)]
                ws = [te.select(inside[k], ws[k], _c(0.0)) for k in range(self.taps)]
                total = ws[0]
                for w in ws[1:]:
                    total = total + w
                total = te.select(te.equal(total, _c(0.0)), _c(1.0), total)
                return pick(t, ws) / total
            return pick(t, ws)

        if stretch:  # tap t at floor(x) + start + t: one expression per table entry
            def first(y: Expr) -> Expr:
                return te.cast(te.floor(coord(y)), "int32") + offsets[0]

            def raw_weight(y: Expr, t: Expr) -> Expr:
                xf = coord(y)
                dist = te.abs(te.cast(t, F64) + _c(float(offsets[0])) - (xf - te.floor(xf)))
                w = _kernel(mode, dist * _c(scale), cubic_a)
                if exclude_outside:
                    at = first(y) + t
                    w = te.select(te.all(at >= 0, at < in_len), w, _c(0.0))
                return w

            raw = te.compute((out_len, self.taps), raw_weight, name=f"resize_kernel_{d}",
                             tag="resize_table")
            k = te.reduce_axis((0, self.taps), name="k")
            total = te.compute((out_len,), lambda y: te.sum(raw[y, k], axis=k),
                               name=f"resize_total_{d}", tag="resize_table")
            self.index = te.compute(
                (out_len, self.taps),
                lambda y, t: te.minimum(te.maximum(first(y) + t, 0), in_len - 1),
                name=f"resize_index_{d}", tag="resize_table")
            self.weight = te.compute(
                (out_len, self.taps), lambda y, t: raw[y, t] / te.select(
                    te.equal(total[y], _c(0.0)), _c(1.0), total[y]),
                name=f"resize_weight_{d}", tag="resize_table")
        else:
            self.index = te.compute((out_len, self.taps), index, name=f"resize_index_{d}",
                                    tag="resize_table")
            self.weight = None if mode == "nearest" else te.compute(
                (out_len, self.taps), weight, name=f"resize_weight_{d}", tag="resize_table")
        self.outside = None
        if ctm == "tf_crop_and_resize":
            self.outside = te.compute((out_len,), lambda y: te.any(
                coord(y) < scalar(0.0, cdt), coord(y) > scalar(in_len - 1, cdt)),
                name=f"resize_outside_{d}",
                tag="resize_table")


def resize(x: te.Tensor, out_shape: Sequence[int], scales: Sequence[float],
           mode: str = "nearest", coordinate_transformation_mode: str = "half_pixel",
           nearest_mode: str = "round_prefer_floor",
           rois: Sequence[tuple[float, float]] | None = None, cubic_coeff_a: float = -0.75,
           exclude_outside: bool = False, extrapolation_value: float = 0.0,
           antialias: bool = False, coord_dtype: str = F64) -> te.Tensor:
    """Resize every axis whose size, scale or ROI differs from the identity.

    ``scales[d]`` is the scale the coordinate modes use (the registry takes it from
    ``resize_plan``); ``rois[d]`` the ``(start, end)`` pair of ``tf_crop_and_resize``;
    ``antialias`` (linear and cubic) stretches the kernel by ``1 / scale`` on the axes it
    shrinks; ``coord_dtype``: what nearest source coordinates are computed in
    (:func:`toolchain.graph.ops.nn_common.resize_coord_dtype`).
    """
    shape = const_shape(x, "resize")
    if mode not in ("nearest", "linear", "cubic"):
        raise OptionError(f"resize: mode {mode!r} is not nearest, linear or cubic")
    if nearest_mode not in _NEAREST:
        raise OptionError(f"resize: nearest_mode {nearest_mode!r} is not one of {_NEAREST}")
    rois = list(rois) if rois is not None else [(0.0, 1.0)] * len(shape)
    ctm = coordinate_transformation_mode
    axes = [d for d in range(len(shape))
            if resizes_axis(shape[d], out_shape[d], scales[d], rois[d], ctm)]
    if not axes:
        return te.compute(tuple(out_shape), lambda *i: x[i], name="resize", tag="injective")
    tabs = {d: _Axis(d, shape[d], out_shape[d], scales[d], rois[d], mode, ctm, nearest_mode,
                     cubic_coeff_a, exclude_outside, antialias, coord_dtype) for d in axes}
    fill = extrapolation_value

    if mode == "nearest":
        def fn(*i: Expr) -> Expr:
            val = x[tuple(tabs[d].index[i[d], 0] if d in axes else i[d]
                          for d in range(len(shape)))]
            outs = [tabs[d].outside[i[d]] for d in axes if tabs[d].outside is not None]
            return te.select(te.any(*outs), scalar(fill, x.dtype), val) if outs else val
        return te.compute(tuple(out_shape), fn, name="resize", tag="injective")

    cur = x
    for d in axes:
        tab = tabs[d]

        def interp(*i: Expr, d: int = d, src: te.Tensor = cur, tab: _Axis = tab) -> Expr:
            acc: Expr | None = None
            assert tab.weight is not None
            for t in range(tab.taps):
                idx = tuple(tab.index[i[d], t] if k == d else i[k] for k in range(len(shape)))
                term = te.cast(src[idx], F64) * tab.weight[i[d], t]
                acc = term if acc is None else acc + term
            assert acc is not None
            if tab.outside is not None:
                acc = te.select(tab.outside[i[d]], _c(fill), acc)
            return acc

        sh = tuple(out_shape[k] if k == d else n for k, n in enumerate(const_shape(cur)))
        cur = te.compute(sh, interp, name=f"resize_axis_{d}", tag="injective")
    acc_t = cur
    if ir.is_float(x.dtype):
        return te.compute(tuple(out_shape), lambda *i: te.cast(acc_t[i], x.dtype),
                          name="resize", tag="injective")
    info = np.iinfo(np.dtype(x.dtype))

    def to_int(*i: Expr) -> Expr:
        rounded = te.round(acc_t[i])
        return te.cast(te.minimum(te.maximum(rounded, _c(float(info.min))),
                                  _c(float(info.max))), x.dtype)

    return te.compute(tuple(out_shape), to_int, name="resize", tag="injective")
