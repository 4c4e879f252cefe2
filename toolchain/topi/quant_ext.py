"""MatMulInteger and QLinearMatMul computes (the ops of
:mod:`toolchain.graph.ops.quant_ext`).

``int_matmul`` is one reduction over K of ``(a - a_zp) · (b - b_zp)`` in int32 (batch axes
broadcast, zero points per tensor / per row of A / per column of B); ``qlinear_matmul`` adds
the requantizing stage: the multiplier ``a_scale · b_scale / y_scale`` in float32, the
product scaled in float64, rounded half to even (``nearbyint``), shifted by ``y_zp`` and
saturated — the registry's reference step by step.

Example::

    >>> from toolchain import te
    >>> a = te.placeholder((2, 4, 8), name="a", dtype="uint8")
    >>> b = te.placeholder((8, 3), name="b", dtype="int8")
    >>> y = int_matmul(a, b)
    >>> [d.value for d in y.shape], y.dtype
    ([2, 4, 3], 'int32')
"""

from __future__ import annotations

from collections.abc import Sequence

from toolchain import te
from toolchain.tir import ir
from toolchain.topi.reduction import reduce
from toolchain.topi.utils import broadcast_shape, const_shape, scalar

Expr = ir.PrimExpr


def _param(t: te.Tensor | None, i: Expr, dtype: str) -> Expr:
    """A per-tensor (one element) or per-index (``[n]``, read at ``i``) parameter."""
    if t is None:
        return scalar(0, dtype)
    n = 1
    for d in const_shape(t):
        n *= d
    v = t[(ir.IntImm(0),) * t.ndim] if n == 1 else t[(i,)]
    return te.cast(v, dtype)


def _batch_index(shape: Sequence[int], out_batch: Sequence[Expr]) -> tuple[Expr, ...]:
    lead = shape[:-2]
    off = len(out_batch) - len(lead)
    return tuple(ir.IntImm(0) if d == 1 else out_batch[off + k] for k, d in enumerate(lead))


def int_matmul(a: te.Tensor, b: te.Tensor, a_zp: te.Tensor | None = None,
               b_zp: te.Tensor | None = None) -> te.Tensor:
    """int32 ``(a - a_zp) @ (b - b_zp)`` for operands of rank >= 2."""
    sa, sb = const_shape(a, "int_matmul"), const_shape(b, "int_matmul")
    batch = broadcast_shape([sa[:-2], sb[:-2]], "int_matmul")
    kk = te.reduce_axis((0, sa[-1]), name="k")

    def f(*o: Expr) -> Expr:
        m, n = o[-2], o[-1]
        ob = o[:-2]
        x = te.cast(a[_batch_index(sa, ob) + (m, kk)], "int32") - _param(a_zp, m, "int32")
        y = te.cast(b[_batch_index(sb, ob) + (kk, n)], "int32") - _param(b_zp, n, "int32")
        return te.sum(x * y, axis=kk)

    return te.compute(tuple(batch) + (sa[-2], sb[-1]), f, name="matmul_integer", tag="reduce")


def qlinear_matmul(a: te.Tensor, a_scale: te.Tensor, a_zp: te.Tensor | None, b: te.Tensor,
                   b_scale: te.Tensor, b_zp: te.Tensor | None, y_scale: te.Tensor,
                   y_zp: te.Tensor | None, out_dtype: str) -> te.Tensor:
    """ONNX QLinearMatMul (see the module docstring)."""
    acc = int_matmul(a, b, a_zp, b_zp)
    lo, hi = te.min_value(out_dtype).value, te.max_value(out_dtype).value

    def f(*o: Expr) -> Expr:
        m, n = o[-2], o[-1]
        mult = _param(a_scale, m, "float32") * _param(b_scale, n, "float32") / _param(
            y_scale, ir.IntImm(0), "float32")
        d = te.cast(acc[o], "float64") * te.cast(mult, "float64")
        d = te.round(d + _param(y_zp, ir.IntImm(0), "float64"))
        d = te.minimum(te.maximum(d, scalar(lo, "float64")), scalar(hi, "float64"))
        return te.cast(d, out_dtype)

    return te.compute(acc.shape, f, name="qlinear_matmul", tag="elemwise")


def dynamic_quantize_linear(x: te.Tensor) -> tuple[te.Tensor, te.Tensor, te.Tensor]:
    """ONNX DynamicQuantizeLinear: (y uint8, y_scale float32, y_zero_point uint8); the
    scalars are ``(1,)`` buffers.  float32 arithmetic as the reference."""
    f32 = "float32"
    hi = reduce(x, None, False, "max", name="dql_max")
    lo = reduce(x, None, False, "min", name="dql_min")
    zero, top = scalar(0, f32), scalar(255, f32)

    def scale_of(i: Expr) -> Expr:
        h, m = te.maximum(hi[(i,)], zero), te.minimum(lo[(i,)], zero)
        return te.select(te.equal(h, m), scalar(1, f32), h - m) / top

    scale = te.compute((1,), scale_of, name="dql_scale", tag="elemwise")
    zpf = te.compute((1,), lambda i: te.round(te.minimum(te.maximum(
        zero - te.minimum(lo[(i,)], zero) / scale[(i,)], zero), top)), name="dql_zp_f",
        tag="elemwise")
    first = (ir.IntImm(0),)

    def quant(*i: Expr) -> Expr:
        q = te.round(x[i] / scale[first]) + zpf[first]
        return te.cast(te.minimum(te.maximum(q, zero), top), "uint8")

    y = te.compute(x.shape, quant, name="dql_y", tag="elemwise")
    zp = te.compute((1,), lambda i: te.cast(zpf[(i,)], "uint8"), name="dql_zero_point",
                    tag="elemwise")
    return y, scale, zp


def int_conv(x: te.Tensor, w: te.Tensor, x_zp: te.Tensor | None, w_zp: te.Tensor | None,
             out_shape: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
             pads_begin: Sequence[int], group: int = 1) -> te.Tensor:
    """int32 N-D grouped convolution of ``(x - x_zp)`` and ``(w - w_zp)`` (``w_zp`` per
    tensor or per output channel); a tap in the padding contributes 0."""
    xs, ws = const_shape(x, "int_conv"), const_shape(w, "int_conv")
    nsp = len(xs) - 2
    cg = ws[1]
    mg = ws[0] // group
    rc = te.reduce_axis((0, cg), name="rc")
    rk = [te.reduce_axis((0, ws[2 + d]), name=f"r{d}") for d in range(nsp)]

    def f(*o: Expr) -> Expr:
        n, m, sp = o[0], o[1], o[2:]
        c = te.floordiv(m, mg) * cg + rc if group > 1 else rc
        idx, conds = [], []
        for d in range(nsp):
            v = sp[d] * strides[d] + rk[d] * dilations[d] - pads_begin[d]
            conds += [v >= 0, v < xs[2 + d]]
            idx.append(te.minimum(te.maximum(v, 0), xs[2 + d] - 1))
        xv = te.cast(x[(n, c, *idx)], "int32") - _param(x_zp, ir.IntImm(0), "int32")
        xv = te.select(te.all(*conds), xv, scalar(0, "int32"))
        wv = te.cast(w[(m, rc, *rk)], "int32") - _param(w_zp, m, "int32")
        return te.sum(xv * wv, axis=[rc, *rk])

    return te.compute(tuple(out_shape), f, name="conv_integer", tag="reduce")


def qlinear_conv(acc: te.Tensor, x_scale: te.Tensor, w_scale: te.Tensor, y_scale: te.Tensor,
                 y_zp: te.Tensor | None, bias: te.Tensor | None, out_dtype: str) -> te.Tensor:
    """QLinearConv's epilogue on the int32 convolution ``acc``: ``+ B``, the float32
    multiplier ``x_scale · w_scale / y_scale`` (per output channel when ``w_scale`` is),
    float64 product, clamp, round half to even."""
    lo, hi = te.min_value(out_dtype).value, te.max_value(out_dtype).value

    def f(*o: Expr) -> Expr:
        m = o[1]
        v = acc[o] + _param(bias, m, "int32") if bias is not None else acc[o]
        mult = _param(x_scale, ir.IntImm(0), "float32") * _param(w_scale, m, "float32") / \
            _param(y_scale, ir.IntImm(0), "float32")
        d = te.cast(v, "float64") * te.cast(mult, "float64") + _param(y_zp, ir.IntImm(0),
                                                                       "float64")
        d = te.minimum(te.maximum(d, scalar(lo, "float64")), scalar(hi, "float64"))
        return te.cast(te.round(d), out_dtype)

    return te.compute(acc.shape, f, name="qlinear_conv", tag="elemwise")
