"""Integer compute definitions of the quantized ops (QConv, QGemm, QAdd, QAvgPool).

Every kernel is int8 x int8 -> int32 accumulation followed by the fixed-point
requantization of :func:`toolchain.quantize.fixed_point.requantize_te` (int64 arithmetic,
no float) and a saturating clamp to the output dtype; the arithmetic is the one the
references in :mod:`toolchain.graph.ops.qops` define, so built kernels match them bit for
bit. Per-channel shifts arrive as ``[C, 2]`` int32 tables of
``(2**max(shift, 0), 2**(30 - max(-shift, 0)))`` (input ``shift_pow``), so kernels divide
only by constant powers of two (shifts after compilation) and no operand needs packing.

Its ``COMPUTES`` table is part of :mod:`toolchain.topi.registry`'s.

Example::

    >>> from toolchain import te
    >>> from toolchain.graph.ir import Node, Value
    >>> from toolchain.topi.registry import node_compute
    >>> import numpy as np
    >>> x = Value("x", (2, 8), "int8"); y = Value("y", (2, 4), "int8")
    >>> consts = [Value.constant("w", np.ones((4, 8), np.int8)),
    ...           Value.constant("b", np.zeros(4, np.int32)),
    ...           Value.constant("m", np.full(4, 1 << 30, np.int32)),
    ...           Value.constant("s", np.full((4, 2), 1 << 30, np.int32))]
    >>> nc = node_compute(Node("QGemm", "fc", [x, *consts], [y]))
    >>> [t.dtype for t in nc.outputs]
    ['int8']
"""

from __future__ import annotations

from typing import Any

import numpy as np

from toolchain import te
from toolchain.graph.ops.qops import nchw_qconv
from toolchain.quantize.fixed_point import requantize_te, shift_powers
from toolchain.topi.nn.conv2d import conv2d_nchw, pad_spatial
from toolchain.topi.registry import ComputeFn, Ctx

_QRANGE = {"int8": (-128, 127), "uint8": (0, 255)}


def finish_te(acc: Any, mult: Any, lp: Any, rp: Any, attrs: dict[str, Any]) -> Any:
    """``clamp(requantize(acc) + y_zero_point, out_min, out_max)`` cast to the out dtype."""
    y = requantize_te(acc, mult, lp, rp) + te.const(attrs["y_zero_point"], "int64")
    y = te.maximum(te.minimum(y, te.const(attrs["out_max"], "int64")),
                   te.const(attrs["out_min"], "int64"))
    return te.cast(y, attrs["out_dtype"])


def shifted(x: te.Tensor, zero_point: int, name: str = "x_shifted") -> te.Tensor:
    """``int16(x) - zero_point`` (so that padding with 0 equals padding with the zp; int16
    holds any difference of two 8-bit values and halves a materialised padded band)."""
    return te.compute(x.shape, lambda *i: te.cast(x[i], "int16") - te.const(zero_point,
                                                                              "int16"),
                      name=name, tag="injective")


def padded_q15(x: te.Tensor, zero_point: int, spatial: tuple[int, int],
               lo: tuple[int, int], hi: tuple[int, int], fold_zp: bool = False) -> te.Tensor:
    """``x`` widened to int16 and padded on its ``spatial`` axes: :func:`shifted` padded
    with 0, or (``fold_zp``: the bias is :func:`fold_zero_point`'s, which takes the zero
    point's products back out) ``int16(x)`` itself padded with the zero point."""
    if not fold_zp:
        return pad_spatial(shifted(x, zero_point), spatial, lo, hi)
    xs = te.compute(x.shape, lambda *i: te.cast(x[i], "int16"), name="x_shifted",
                    tag="injective")
    return pad_spatial(xs, spatial, lo, hi, value=zero_point)


def requant_epilogue(acc: te.Tensor, bias: te.Tensor, mult: te.Tensor, shifts: te.Tensor,
                     axis: int, attrs: dict[str, Any], name: str) -> te.Tensor:
    """Per-channel (along ``axis``) bias add, requantization and clamp of int32 ``acc``."""

    def f(*i: Any) -> Any:
        c = i[axis]
        total = te.cast(acc[i], "int64") + te.cast(bias[c], "int64")
        return finish_te(total, mult[c], shifts[c, 0], shifts[c, 1], attrs)

    return te.compute(acc.shape, f, name=name, tag="injective")


def qconv2d_nchw(x: te.Tensor, w: te.Tensor, bias: te.Tensor, mult: te.Tensor,
                 shifts: te.Tensor, attrs: dict[str, Any]) -> te.Tensor:
    """Integer NCHW convolution (incl. grouped / depthwise), see the module docstring."""
    xs = shifted(x, attrs["x_zero_point"])
    pads = tuple(attrs["pads"])
    acc = conv2d_nchw(xs, w, tuple(attrs["strides"]), pads, tuple(attrs["dilations"]),
                      attrs["group"], out_dtype="int32")
    return requant_epilogue(acc, bias, mult, shifts, 1, attrs, "qconv")


def qgemm(x: te.Tensor, w: te.Tensor, bias: te.Tensor, mult: te.Tensor, shifts: te.Tensor,
          attrs: dict[str, Any]) -> te.Tensor:
    """Integer ``x[..., K] . w[N, K]^T`` with per-column requantization."""
    xs = shifted(x, attrs["x_zero_point"])
    kdim = int(w.shape[1].value)
    k = te.reduce_axis((0, kdim), name="k")
    shape = tuple(x.shape[:-1]) + (w.shape[0],)
    acc = te.compute(shape, lambda *i: te.sum(
        te.cast(xs[tuple(i[:-1]) + (k,)], "int32") * te.cast(w[i[-1], k], "int32"), axis=k),
        name="qgemm_acc", tag="dense")
    return requant_epilogue(acc, bias, mult, shifts, len(shape) - 1, attrs, "qgemm")


def pack_dsp_weights(w: np.ndarray) -> np.ndarray:
    """``[M, ...]`` int8 weights -> ``[M, Kp]`` for the Cortex-M dual-MAC kernels.

    ``K`` (the product of the other axes) is zero-padded to ``Kp``, a multiple of 4, and
    each group of four is stored as ``(k0, k2, k1, k3)``: then ``SXTB16`` of one 32-bit
    word gives the int16 pair ``(k0, k1)`` and ``SXTB16(ROR 8)`` gives ``(k2, k3)``, the
    same pairs a plain 32-bit load of the int16 activations gives — no activation shuffling.

    >>> pack_dsp_weights(np.arange(1, 6, dtype=np.int8).reshape(1, 5)).tolist()
    [[1, 3, 2, 4, 5, 0, 0, 0]]
    """
    m = w.shape[0]
    flat = np.asarray(w).reshape(m, -1)
    k = flat.shape[1]
    kp = -(-k // 4) * 4
    out = np.zeros((m, kp), flat.dtype)
    out[:, :k] = flat
    return np.ascontiguousarray(out.reshape(m, kp // 4, 4)[:, :, [0, 2, 1, 3]].reshape(m, kp))


def pack_dsp_weights_q15(w: np.ndarray) -> np.ndarray:
    """``[M, ...]`` int8 weights -> ``[M, Kp]`` int16 for the Cortex-M kernels that take
    their weights widened at compile time (``dot_q15q15``: no SXTB16 in the dot loop, twice
    the flash): ``K`` zero-padded to a multiple of 4, natural k order (a 32-bit load of
    two int16 weights pairs with the same load of the activations).

    >>> pack_dsp_weights_q15(np.arange(-2, 3, dtype=np.int8).reshape(1, 5)).tolist()
    [[-2, -1, 0, 1, 2, 0, 0, 0]]
    """
    m = w.shape[0]
    flat = np.asarray(w).reshape(m, -1)
    kp = -(-flat.shape[1] // 4) * 4
    out = np.zeros((m, kp), np.int16)
    out[:, :flat.shape[1]] = flat
    return out


def finish_dsp(acc: Any, bias: Any, mult: Any, lp: Any, rq: Any, attrs: dict[str, Any]) -> Any:
    """:func:`finish_te` as a call of the Cortex-M helper ``kiln_cm_requantize`` (the same
    arithmetic in C with int64 shifts: ~15 instructions instead of ~80) and SSAT/USAT #8
    when the clamp is the full 8-bit range (``out_min``/``out_max`` otherwise). With
    ``attrs["unit_left_shift"]`` (every channel's ``lp`` is 1, known from the constant
    shift table: :func:`unit_left_shift`) ``lp`` is the constant 1, so the C compiler drops
    the multiply and its overflow test; with ``attrs["requantize_bounded"]`` as well
    (:func:`requantize_bounded`) it calls ``kiln_cm_requantize_b`` (no overflow test, SRDHM
    as one SMMULR); with ``attrs["requantize_shift"]`` (:func:`requantize_shift`: the shift
    table packed by :func:`pack_shift_halves`) ``kiln_cm_requantize_s``, whose rounding
    division by ``2**e`` and the output zero point are two adds and one arithmetic shift."""
    from toolchain.tir import ir

    if attrs.get("requantize_shift"):  # lp, rq: (2**(e-1) + zp 2**e, e) (pack_shift_halves)
        y = ir.Call("int32", "kiln_cm_requantize_s", [acc, bias, mult, lp, rq])
    else:
        if attrs.get("requantize_bounded"):
            y = ir.Call("int32", "kiln_cm_requantize_b", [acc, bias, mult, rq])
        else:
            if attrs.get("unit_left_shift"):
                lp = te.const(1, "int32")
            y = ir.Call("int32", "kiln_cm_requantize", [acc, bias, mult, lp, rq])
        y = y + te.const(attrs["y_zero_point"], "int32")
    lo, hi = attrs["out_min"], attrs["out_max"]
    if (lo, hi) == (-128, 127):
        y = ir.Call("int32", "kiln_ssat8", [y])
    elif (lo, hi) == (0, 255):
        y = ir.Call("int32", "kiln_usat8", [y])
    else:
        y = te.maximum(te.minimum(y, te.const(hi, "int32")), te.const(lo, "int32"))
    return te.cast(y, attrs["out_dtype"])


def unit_left_shift(node: Any) -> bool:
    """Whether the constant shift table of QConv/QGemm ``node`` (input 4, rows
    ``(2**max(shift, 0), ...)``) has no left shift in any channel.

    >>> from toolchain.graph.ir import Node, Value
    >>> s = Value.constant("s", np.array([[1, 1 << 20], [1, 1 << 29]], np.int32))
    >>> unit_left_shift(Node("QGemm", "fc", [None, None, None, None, s], []))
    True
    """
    s = node.input(4)
    return s is not None and s.data is not None and bool(np.all(np.asarray(s.data)[:, 0] == 1))


def requantize_bounded(node: Any) -> bool:
    """Whether QConv ``node`` (constant weights and bias, no left shift) keeps
    ``|acc + bias| < 2**30`` for every input: ``|x - x_zp| <= 255``, so ``|acc|`` is at most
    ``255 * sum_k |w[m, k]|`` per channel ``m``.

    >>> from toolchain.graph.ir import Node, Value
    >>> ins = [None, Value.constant("w", np.full((2, 1, 3, 3), -128, np.int8)),
    ...        Value.constant("b", np.array([7, 2**29], np.int32)), None,
    ...        Value.constant("s", np.array([[1, 1 << 20], [1, 1 << 29]], np.int32))]
    >>> requantize_bounded(Node("QConv", "c", ins, []))   # 255 * 9 * 128 + 2**29 < 2**30
    True
    >>> ins[2] = Value.constant("b", np.array([7, 2**30 - 1000], np.int32))
    >>> requantize_bounded(Node("QConv", "c", ins, []))
    False
    """
    w, b = node.input(1), node.input(2)
    if node.op != "QConv" or not unit_left_shift(node) or w is None or w.data is None \
            or b is None or b.data is None:
        return False
    wabs = np.abs(np.asarray(w.data, np.int64)).reshape(w.shape[0], -1).sum(axis=1)
    return bool(np.all(255 * wabs + np.abs(np.asarray(b.data, np.int64)) < 2**30))


def requantize_shift(node: Any) -> bool:
    """Whether QConv ``node`` takes ``kiln_cm_requantize_s``: :func:`requantize_bounded`
    (so ``|h| < 2**30`` after the SRDHM), every channel divides by ``2**e`` with
    ``e >= 1`` (``rq = 2**(30 - e)`` in the shift table) and the output zero point moved
    inside the shift, ``(h + 2**(e-1) - [h < 0] + zp 2**e) >> e``, stays in int32.

    >>> from toolchain.graph.ir import Node, Value
    >>> ins = [None, Value.constant("w", np.ones((2, 1, 3, 3), np.int8)),
    ...        Value.constant("b", np.zeros(2, np.int32)), None,
    ...        Value.constant("s", np.array([[1, 1 << 20], [1, 1 << 29]], np.int32))]
    >>> node = Node("QConv", "c", ins, [], {"y_zero_point": -128})
    >>> requantize_shift(node)                     # e = 10 and 1
    True
    >>> ins[4] = Value.constant("s", np.array([[1, 1 << 20], [1, 1 << 30]], np.int32))
    >>> requantize_shift(Node("QConv", "c", ins, [], {"y_zero_point": -128}))  # e = 0
    False
    """
    if not requantize_bounded(node):
        return False
    rq = np.asarray(node.input(4).data, np.int64)[:, 1]
    if not np.all((rq >= 1) & (rq <= 2**29) & (rq & (rq - 1) == 0)):
        return False
    e = 30 - np.log2(rq).round().astype(np.int64)
    zp = abs(int(node.attrs["y_zero_point"]))
    return bool(np.all(2**30 + (1 << (e - 1)) + (zp << e) < 2**31))


def pack_shift_halves(table: np.ndarray, zero_point: int) -> np.ndarray:
    """A ``[C, 2]`` shift table ``(1, 2**(30 - e))`` as ``(2**(e-1) + zp 2**e, e)`` per
    channel (the operands of ``kiln_cm_requantize_s``, where :func:`requantize_shift` holds).

    >>> pack_shift_halves(np.array([[1, 1 << 20], [1, 1 << 29]], np.int32), -128).tolist()
    [[-130560, 10], [-255, 1]]
    """
    e = 30 - np.log2(np.asarray(table, np.int64)[:, 1]).round().astype(np.int64)
    half = np.left_shift(1, e - 1) + np.left_shift(zero_point, e)
    return np.stack([half, e], axis=1).astype(np.int32)


def dsp_epilogue(acc: te.Tensor, bias: te.Tensor, mult: te.Tensor, shifts: te.Tensor,
                 axis: int, attrs: dict[str, Any], name: str) -> te.Tensor:
    """:func:`requant_epilogue` with :func:`finish_dsp` (``acc`` indexed like the output)."""

    def f(*i: Any) -> Any:
        c = i[axis]
        return finish_dsp(acc[i], bias[c], mult[c], shifts[c, 0], shifts[c, 1], attrs)

    return te.compute(acc.shape, f, name=name, tag="injective")


def dsp_dot(col: te.Tensor, wp: te.Tensor, name: str = "dsp_acc") -> te.Tensor:
    """``acc[p, m] = sum_k col[p, k] * w[m, k]`` (int16 x int8 -> int32) over a packed
    weight matrix ``wp`` (:func:`pack_dsp_weights`): ``k = 4 ko + 2 h + l`` reads
    ``wp[m, 4 ko + h + 2 l]`` — the behaviour of the Cortex-M ``dot_q15q7`` intrinsics;
    int16 weights (:func:`pack_dsp_weights_q15`) are read in natural order,
    ``wp[m, 4 ko + 2 h + l]`` (``dot_q15q15``)."""
    p, kp = (int(d.value) for d in col.shape)
    m = int(wp.shape[0].value)
    ko = te.reduce_axis((0, kp // 4), name="ko")
    h = te.reduce_axis((0, 2), name="h")
    lo = te.reduce_axis((0, 2), name="l")
    wide = wp.dtype == "int16"
    return te.compute((p, m), lambda i, j: te.sum(
        te.cast(col[i, ko * 4 + h * 2 + lo], "int32")
        * te.cast(wp[j, ko * 4 + h * 2 + lo if wide else ko * 4 + h + lo * 2], "int32"),
        axis=[ko, h, lo]), name=name, tag="dense")


def qconv2d_dsp(x: te.Tensor, wp: te.Tensor, wshape: tuple[int, ...], bias: te.Tensor,
                mult: te.Tensor, shifts: te.Tensor, attrs: dict[str, Any],
                even_pixels: bool = False, fold_zp: bool = False) -> te.Tensor:
    """Integer NCHW convolution (group 1) as im2col (q7 -> q15, like CMSIS-NN) and a
    dot product with :func:`pack_dsp_weights`-packed weights ``wp`` (``wshape``: the
    unpacked ``[M, C, KH, KW]``); same integers as :func:`qconv2d_nchw`.

    ``attrs["data_layout"] == "NHWC"``: ``x`` is read channels-last (the caller's image of
    a model whose first node transposes it to NCHW, docs/embedded.md "NHWC input"); the
    im2col row is the same, only its gather's indexing changes.  The output stays NCHW.

    ``even_pixels`` (batch 1): the im2col and accumulator rows are rounded up to an even
    count, the extra row repeating the last pixel, so that a schedule may take the pixels
    two at a time (the extra row is computed, never stored).

    ``fold_zp``: ``bias`` is :func:`fold_zero_point`'s (``bias - x_zp * sum_k w``), so the
    im2col rows hold ``int16(x)`` itself and the padding ``x_zp`` (whose product the folded
    bias takes back out): no subtraction per element; the same integers."""
    m, c, kh, kw = wshape
    sh, sw = attrs["strides"]
    dh, dw = attrs["dilations"]
    pt, pl, pb, pr = attrs["pads"]
    nhwc = attrs.get("data_layout", "NCHW") == "NHWC"
    spatial = (1, 2) if nhwc else (2, 3)
    xp = padded_q15(x, attrs["x_zero_point"], spatial, (pt, pl), (pb, pr), fold_zp)
    n, hp, wdt = (int(xp.shape[a].value) for a in (0, *spatial))
    oh, ow = (hp - dh * (kh - 1) - 1) // sh + 1, (wdt - dw * (kw - 1) - 1) // sw + 1
    k = c * kh * kw
    kp = int(wp.shape[1].value)
    rows = n * oh * ow
    pad_row = even_pixels and n == 1 and rows % 2 == 1

    def col_f(p: Any, kk: Any) -> Any:
        if pad_row:
            p = te.minimum(p, te.const(rows - 1))
        b, rem = te.floordiv(p, oh * ow), te.floormod(p, oh * ow)
        y, xx = te.floordiv(rem, ow), te.floormod(rem, ow)
        # (ch, ry, rx) of kk; the padded tail (kk >= K) reads a valid element of channel C-1
        # (times a zero weight). Written so that kk split into (c, ry, rx) loops simplifies
        # to plain loop variables (no division in the kernel)
        ch, r = te.floordiv(kk, kh * kw), te.floormod(kk, kh * kw)
        if kp > k:
            ch = te.minimum(ch, te.const(c - 1))
        ry, rx = te.floordiv(r, kw), te.floormod(r, kw)
        iy, ix = y * sh + ry * dh, xx * sw + rx * dw
        v = xp[b, iy, ix, ch] if nhwc else xp[b, ch, iy, ix]
        return te.if_then_else(kk < k, v, te.const(0, "int16")) if kp > k else v

    col = te.compute((rows + pad_row, kp), col_f, name="im2col", tag="injective")
    acc = dsp_dot(col, wp)

    def f(b: Any, ch: Any, y: Any, xx: Any) -> Any:
        return finish_dsp(acc[(b * oh + y) * ow + xx, ch], bias[ch], mult[ch], shifts[ch, 0],
                          shifts[ch, 1], attrs)

    return te.compute((n, m, oh, ow), f, name="qconv", tag="injective")


def pack_dsp_depthwise(w: np.ndarray) -> np.ndarray:
    """``[C, 1, KH, KW]`` int8 depthwise weights -> ``[C, KH, KWp]``: each kernel row packed
    by :func:`pack_dsp_weights` (``KWp`` = ``KW`` rounded up to 4, zero-padded).

    >>> pack_dsp_depthwise(np.arange(1, 4, dtype=np.int8).reshape(1, 1, 1, 3)).tolist()
    [[[1, 3, 2, 0]]]
    """
    c, _, kh, kw = w.shape
    return pack_dsp_weights(np.asarray(w).reshape(c * kh, kw)).reshape(c, kh, -1)


def qdwconv_dsp(x: te.Tensor, wp: te.Tensor, kw: int, bias: te.Tensor, mult: te.Tensor,
                shifts: te.Tensor, attrs: dict[str, Any], fold_zp: bool = False) -> te.Tensor:
    """Integer NCHW depthwise convolution (channel multiplier 1, no dilation) over
    :func:`pack_dsp_depthwise`-packed ``wp``: four kernel columns at a time, the input padded
    on the right so the last group reads inside it (times a zero weight); same integers as
    :func:`qconv2d_nchw`. ``fold_zp``: ``bias`` is :func:`fold_zero_point`'s, the padded
    plane holds ``int16(x)`` and pads with ``x_zp`` (as :func:`qconv2d_dsp`)."""
    c, kh, kwp = (int(d.value) for d in wp.shape)
    sh, sw = attrs["strides"]
    pt, pl, pb, pr = attrs["pads"]
    n, _, h, w = (int(d.value) for d in x.shape)
    oh, ow = (h + pt + pb - kh) // sh + 1, (w + pl + pr - kw) // sw + 1
    extra = max(0, (ow - 1) * sw + kwp - (w + pl + pr))
    xp = padded_q15(x, attrs["x_zero_point"], (2, 3), (pt, pl), (pb, pr + extra), fold_zp)
    ry = te.reduce_axis((0, kh), name="ry")
    rxo = te.reduce_axis((0, kwp // 4), name="rxo")
    hh = te.reduce_axis((0, 2), name="h")
    lo = te.reduce_axis((0, 2), name="l")
    acc = te.compute((n, c, oh, ow), lambda b, ch, y, xx: te.sum(
        te.cast(xp[b, ch, y * sh + ry, xx * sw + rxo * 4 + hh * 2 + lo], "int32")
        * te.cast(wp[ch, ry, rxo * 4 + hh + lo * 2], "int32"), axis=[ry, rxo, hh, lo]),
        name="dw_acc", tag="depthwise")
    return dsp_epilogue(acc, bias, mult, shifts, 1, attrs, "qconv")


def qgemm_dsp(x: te.Tensor, wp: te.Tensor, k: int, bias: te.Tensor, mult: te.Tensor,
              shifts: te.Tensor, attrs: dict[str, Any]) -> te.Tensor:
    """Integer ``x[P, K] . w[N, K]^T`` over :func:`pack_dsp_weights`-packed ``wp``;
    same integers as :func:`qgemm`."""
    p = int(x.shape[0].value)
    kp = int(wp.shape[1].value)
    zp = te.const(attrs["x_zero_point"], "int16")

    def col_f(i: Any, kk: Any) -> Any:
        v = te.cast(x[i, te.minimum(kk, te.const(k - 1))], "int16") - zp
        return te.if_then_else(kk < k, v, te.const(0, "int16")) if kp > k else v

    col = te.compute((p, kp), col_f, name="x_q15", tag="injective")
    acc = dsp_dot(col, wp)
    return dsp_epilogue(acc, bias, mult, shifts, 1, attrs, "qgemm")


def qadd(a: te.Tensor, b: te.Tensor, attrs: dict[str, Any]) -> te.Tensor:
    """Integer addition (TFLite scheme, see :mod:`toolchain.graph.ops.qops`)."""
    ls = 1 << attrs["left_shift"]

    def side(v: te.Tensor, p: str, i: Any) -> Any:
        lp, rp = (int(t) for t in shift_powers(attrs[f"{p}_shift"]))
        d = (te.cast(v[i], "int64") - te.const(attrs[f"{p}_zero_point"], "int64")) * ls
        return requantize_te(d, attrs[f"{p}_multiplier"], lp, rp)

    ylp, yrp = (int(t) for t in shift_powers(attrs["y_shift"]))
    return te.compute(a.shape, lambda *i: finish_te(
        side(a, "a", i) + side(b, "b", i), attrs["y_multiplier"], ylp, yrp, attrs),
        name="qadd", tag="injective")


def fold_zero_point(bias: np.ndarray, w: np.ndarray, zp: int) -> np.ndarray:
    """``bias - zp * sum_k w`` (int64): the bias that makes ``sum_k x * w`` equal
    ``sum_k (x - zp) * w`` plus the original bias.

    >>> fold_zero_point(np.array([10]), np.array([[1, 2, 3]], np.int8), 2).tolist()
    [-2]
    """
    w2 = np.asarray(w, np.int64).reshape(np.asarray(w).shape[0], -1)
    return np.asarray(bias, np.int64) - int(zp) * w2.sum(axis=1)


def qgemm_s8_applies(node: Any) -> bool:
    """Whether QGemm ``node`` takes the int8 x int8 kernel: int8 2-D input, K a multiple of
    4, constant weights and bias, and the folded bias within int32."""
    x, w, b = node.input(0), node.input(1), node.input(2)
    if x.dtype != "int8" or len(x.shape) != 2 or w is None or w.data is None:
        return False
    if b is None or b.data is None or int(w.shape[1]) % 4:
        return False
    folded = fold_zero_point(b.data, w.data, node.attrs["x_zero_point"])
    return bool(np.all(np.abs(folded) < 2**31 - 1))


def qgemm_s8(x: te.Tensor, w: te.Tensor, bias: te.Tensor, mult: te.Tensor, shifts: te.Tensor,
             attrs: dict[str, Any]) -> te.Tensor:
    """Integer ``x[P, K] . w[M, K]^T`` on the raw int8 input, ``bias`` already folded
    (:func:`fold_zero_point`); same integers as :func:`qgemm`."""
    p, kdim = (int(d.value) for d in x.shape)
    m = int(w.shape[0].value)
    k = te.reduce_axis((0, kdim), name="k")
    acc = te.compute((p, m), lambda i, j: te.sum(
        te.cast(x[i, k], "int32") * te.cast(w[j, k], "int32"), axis=k),
        name="dsp_acc", tag="dense")
    return dsp_epilogue(acc, bias, mult, shifts, 1, attrs, "qgemm")


def qadd_dsp_applies(attrs: dict[str, Any]) -> bool:
    """Whether ``(v - zp) << left_shift`` fits int32 for every 8-bit ``v`` (the C helper
    takes int32 operands; the generic kernel computes it in int64)."""
    return 255 << attrs["left_shift"] < 2**31


def qadd_dsp(a: te.Tensor, b: te.Tensor, attrs: dict[str, Any]) -> te.Tensor:
    """:func:`qadd` with the three requantizations done by the Cortex-M helper
    ``kiln_cm_requantize`` and the clamp by SSAT/USAT (:func:`finish_dsp`); same integers.

    Where neither input side shifts left, each side ``(v - zp) << left_shift`` is below
    ``255 * 2**left_shift`` in magnitude and so is its requantization (a multiplier below 1),
    so with ``left_shift <= 20`` the sides and the sum (``2 * (255 * 2**20 + 1) < 2**30``)
    take the bounded helper ``kiln_cm_requantize_b`` (the output's where it has no left
    shift either)."""
    from toolchain.tir import ir

    i32 = "int32"
    ls = 1 << attrs["left_shift"]
    lps = {p: int(shift_powers(attrs[f"{p}_shift"])[0]) for p in ("a", "b", "y")}
    bounded = lps["a"] == lps["b"] == 1 and 2 * (255 * ls + 1) < 2**30

    def side(v: te.Tensor, p: str, i: Any) -> Any:
        lp, rp = (int(t) for t in shift_powers(attrs[f"{p}_shift"]))
        d = (te.cast(v[i], i32) - te.const(attrs[f"{p}_zero_point"], i32)) * te.const(ls, i32)
        mult = te.const(attrs[f"{p}_multiplier"], i32)
        if bounded:
            return ir.Call(i32, "kiln_cm_requantize_b", [d, te.const(0, i32), mult,
                                                          te.const(rp, i32)])
        return ir.Call(i32, "kiln_cm_requantize", [d, te.const(0, i32), mult,
                                                   te.const(lp, i32), te.const(rp, i32)])

    ylp, yrp = (te.const(int(t), i32) for t in shift_powers(attrs["y_shift"]))
    ym = te.const(attrs["y_multiplier"], i32)
    fin = {**attrs, "requantize_bounded": bounded and lps["y"] == 1}
    return te.compute(a.shape, lambda *i: finish_dsp(side(a, "a", i), side(b, "b", i), ym,
                                                     ylp, yrp, fin),
                      name="qadd", tag="injective")


def qadd_side_table(attrs: dict[str, Any], p: str, dtype: str) -> np.ndarray:
    """int32 ``[256]``: QAdd side ``p``'s (``"a"`` or ``"b"``) requantized ``(v - zp) <<
    left_shift`` for every 8-bit ``v`` of ``dtype``, at ``v - min(dtype)`` (the reference's
    arithmetic, :func:`toolchain.graph.ops.qops.qadd_sum`, evaluated at compile time).

    >>> attrs = {"left_shift": 20, "a_zero_point": -128, "a_multiplier": 1 << 30,
    ...          "a_shift": -20}
    >>> qadd_side_table(attrs, "a", "int8")[[0, 1, 255]].tolist()   # (v + 128) / 2
    [0, 1, 128]
    """
    from toolchain.quantize.fixed_point import requantize

    lo = _QRANGE[dtype][0]
    v = np.arange(lo, lo + 256, dtype=np.int64)
    side = requantize((v - attrs[f"{p}_zero_point"]) << attrs["left_shift"],
                      attrs[f"{p}_multiplier"], attrs[f"{p}_shift"])
    return side.astype(np.int32)


def qadd_lut(a: te.Tensor, b: te.Tensor, ta: te.Tensor, tb: te.Tensor,
             attrs: dict[str, Any]) -> te.Tensor:
    """:func:`qadd` with each side read from its compile-time table ``ta`` / ``tb``
    (:func:`qadd_side_table`: one load instead of a requantization per side) and the
    output requantized by the Cortex-M helpers (:func:`finish_dsp`): the shift helper
    ``kiln_cm_requantize_s`` where the table sums stay below ``2**30`` and the output
    divides by ``2**e`` (``e >= 1``, as :func:`requantize_shift`), else the bounded or the
    general one; same integers.

    Where the table maxima say the sum may not fit int32 the caller keeps :func:`qadd_dsp`
    (:func:`qadd_lut_bound`)."""
    i32 = "int32"
    lo = te.const(_QRANGE[a.dtype][0], i32)
    ylp, yrq = (int(t) for t in shift_powers(attrs["y_shift"]))
    bound = qadd_lut_bound(attrs, a.dtype, b.dtype)
    fin = dict(attrs)
    e = 30 - int(np.log2(yrq)) if yrq & (yrq - 1) == 0 else 0
    zp = int(attrs["y_zero_point"])
    if ylp == 1 and bound < 2**30 and 1 <= e and \
            2**30 + (1 << (e - 1)) + (abs(zp) << e) < 2**31:
        fin["requantize_shift"] = True
        lp, rq = te.const((1 << (e - 1)) + (zp << e), i32), te.const(e, i32)
    else:
        fin["requantize_bounded"] = ylp == 1 and bound < 2**30
        lp, rq = te.const(ylp, i32), te.const(yrq, i32)
    ym = te.const(attrs["y_multiplier"], i32)

    def f(*i: Any) -> Any:
        total = ta[te.cast(a[i], i32) - lo] + tb[te.cast(b[i], i32) - lo]
        return finish_dsp(total, te.const(0, i32), ym, lp, rq, fin)

    return te.compute(a.shape, f, name="qadd", tag="injective")


def qadd_lut_bound(attrs: dict[str, Any], a_dtype: str, b_dtype: str) -> int:
    """The largest ``|side a + side b|`` the tables of :func:`qadd_lut` can sum."""
    return int(np.abs(qadd_side_table(attrs, "a", a_dtype).astype(np.int64)).max()
               + np.abs(qadd_side_table(attrs, "b", b_dtype).astype(np.int64)).max())


def qavgpool(x: te.Tensor, attrs: dict[str, Any]) -> te.Tensor:
    """Integer average pool: window sum of ``x - x_zp`` requantized by one multiplier.

    Without padding every window holds ``kh * kw`` inputs, so the sum is that of ``x``
    itself minus ``x_zp * kh * kw`` once per output (no subtraction per input); with
    padding the shifted input is padded with zeros and summed. An ``x`` of rank 5 is in
    ``NCHW{B}c``: the window sums are taken ``B`` channels at a time (``qpool_sum[n, c/B,
    y, x, B]``) and the result is in ``NCHW{B}c`` too."""
    kh, kw = attrs["kernel_shape"]
    sh, sw = attrs["strides"]
    pt, pl, pb, pr = attrs["pads"]
    zp = int(attrs["x_zero_point"])
    padded = any((pt, pl, pb, pr))
    xs = pad_spatial(shifted(x, zp), (2, 3), (pt, pl), (pb, pr)) if padded else x
    n, c, h, w = (int(d.value) for d in xs.shape[:4])
    oh, ow = (h - kh) // sh + 1, (w - kw) // sw + 1
    ry, rx = te.reduce_axis((0, kh), name="ry"), te.reduce_axis((0, kw), name="rx")
    off = te.const(0 if padded else zp * kh * kw, "int32")
    lp, rp = (int(t) for t in shift_powers(attrs["shift"]))
    # NCHW{B}c in and out: sums of whole blocks. Widened through int16: gcc scalarizes a
    # 16 x int8 -> 16 x int32 vector conversion into byte loads and inserts (DS-CNN's pool
    # 2.0 -> 0.6 us); a global pool sums its plane in one flat loop
    if len(xs.shape) == 5 and (oh, ow, kh, kw) == (1, 1, h, w):
        blk = int(xs.shape[4].value)
        rr = te.reduce_axis((0, h * w), name="rr")
        acc = te.compute((n, c, 1, 1, blk), lambda b, cb, y, xx, e: te.sum(
            te.cast(te.cast(xs[b, cb, rr // w, rr % w, e], "int16"), "int32"), axis=[rr]),
            name="qpool_sum", tag="pool")
    elif len(xs.shape) == 5:
        blk = int(xs.shape[4].value)
        acc = te.compute((n, c, oh, ow, blk), lambda b, cb, y, xx, e: te.sum(
            te.cast(te.cast(xs[b, cb, y * sh + ry, xx * sw + rx, e], "int16"), "int32"),
            axis=[ry, rx]), name="qpool_sum", tag="pool")
    else:
            acc = te.compute((n, c, oh, ow), lambda b, ch, y, xx: te.sum(
            te.cast(xs[b, ch, y * sh + ry, xx * sw + rx], "int32"), axis=[ry, rx]),
            name="qpool_sum", tag="pool")
    return te.compute(acc.shape, lambda *i: finish_te(acc[i] - off, attrs["multiplier"], lp,
                                                      rp, attrs),
                      name="qavgpool", tag="injective")


def x86_lanes(m: int) -> int:
    """Output channels per vector of the x86 int8 kernels: 16 int32 (one zmm) unless ``m``
    is a multiple of 8 but not of 16 or smaller than 16 (8: one ymm, less padding)."""
    return 8 if m % 16 and (m % 8 == 0 or m < 8) else 16


def pack_x86_weights(w: np.ndarray, lanes: int = 16, dtype: Any = None) -> np.ndarray:
    """``[M, ...]`` int8 weights -> ``[ceil(M / lanes), ..., lanes]`` (zero-padded channels,
    as ``dtype``, default the weights'): the inner loop of the x86 kernels reads ``lanes``
    output channels of one ``k`` at once. They stay int8 in the bundle and are widened
    in the kernel: int32 weights, as before, cost 4x the flash for 3-20 % of c-generic's
    int8 speed (gcc widens with ``vpmovsxbd`` on AVX, with shuffles on plain SSE2).

    >>> pack_x86_weights(np.arange(6, dtype=np.int8).reshape(3, 2), 2).tolist()
    [[[0, 2], [1, 3]], [[4, 0], [5, 0]]]
    """
    w = np.asarray(w)
    m = w.shape[0]
    mo = -(-m // lanes)
    out = np.zeros((mo * lanes, *w.shape[1:]), w.dtype if dtype is None else dtype)
    out[:m] = w
    out = out.reshape(mo, lanes, *w.shape[1:])
    return np.ascontiguousarray(np.moveaxis(out, 1, -1))


def qconv2d_x86(x: te.Tensor, wp: te.Tensor, m: int, bias: te.Tensor, mult: te.Tensor,
                shifts: te.Tensor, attrs: dict[str, Any]) -> te.Tensor:
    """Integer NCHW convolution (group 1) over :func:`pack_x86_weights`-packed ``wp``
    (``[Mo, C, KH, KW, L]``): ``x86_acc[n, mo, y, x, l]`` holds output channel
    ``mo * L + l``; ``m`` is the real channel count. Same integers as :func:`qconv2d_nchw`."""
    _, c, kh, kw, lanes = (int(d.value) for d in wp.shape)
    mo_n = int(wp.shape[0].value)
    sh, sw = attrs["strides"]
    dh, dw = attrs["dilations"]
    pt, pl, pb, pr = attrs["pads"]
    acc_t = "float32" if wp.dtype == "float32" else "int32"
    xs = shifted(x, attrs["x_zero_point"])
    if acc_t == "float32":
        xs = te.compute(xs.shape, lambda *i: te.cast(xs[i], "float32"), name="x_float",
                        tag="injective")
    xp = pad_spatial(xs, (2, 3), (pt, pl), (pb, pr))
    n, _, hp, wdt = (int(d.value) for d in xp.shape)
    oh, ow = (hp - dh * (kh - 1) - 1) // sh + 1, (wdt - dw * (kw - 1) - 1) // sw + 1
    rc = te.reduce_axis((0, c), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    acc = te.compute((n, mo_n, oh, ow, lanes), lambda b, mo, y, xx, li: te.sum(
        te.cast(xp[b, rc, y * sh + ry * dh, xx * sw + rx * dw], acc_t)
        * te.cast(wp[mo, rc, ry, rx, li], acc_t), axis=[rc, ry, rx]),
        name="x86_acc", tag="conv")
    return te.compute((n, m, oh, ow), lambda b, ch, y, xx: finish_te(
        te.cast(acc[b, te.floordiv(ch, lanes), y, xx, te.floormod(ch, lanes)], "int64")
        + te.cast(bias[ch], "int64"), mult[ch], shifts[ch, 0], shifts[ch, 1], attrs),
        name="qconv", tag="injective")


def qgemm_x86(x: te.Tensor, wp: te.Tensor, m: int, bias: te.Tensor, mult: te.Tensor,
              shifts: te.Tensor, attrs: dict[str, Any]) -> te.Tensor:
    """Integer ``x[P, K] . w[M, K]^T`` over :func:`pack_x86_weights`-packed ``wp``
    (``[Mo, K, L]``); same integers as :func:`qgemm`."""
    p = int(x.shape[0].value)
    mo_n, kdim, lanes = (int(d.value) for d in wp.shape)
    xs = shifted(x, attrs["x_zero_point"])
    k = te.reduce_axis((0, kdim), name="k")
    acc = te.compute((p, mo_n, lanes), lambda i, mo, li: te.sum(
        te.cast(xs[i, k], "int32") * te.cast(wp[mo, k, li], "int32"), axis=k),
        name="x86_acc", tag="dense")
    return te.compute((p, m), lambda i, j: finish_te(
        te.cast(acc[i, te.floordiv(j, lanes), te.floormod(j, lanes)], "int64")
        + te.cast(bias[j], "int64"), mult[j], shifts[j, 0], shifts[j, 1], attrs),
        name="qgemm", tag="injective")


def x86_applies(node: Any) -> bool:
    """Whether the ``algorithm="x86"`` computes handle ``node`` (constant weights; QConv:
    2-D, group 1; QGemm: 2-D input)."""
    w = node.input(1)
    if w is None or w.data is None:
        return False
    if node.op == "QConv":
        return len(w.shape) == 4 and int(node.attrs["group"]) == 1
    return node.op == "QGemm" and len(node.input(0).shape) == 2


def _requant_tensors(ctx: Ctx) -> tuple[te.Tensor, te.Tensor, te.Tensor]:
    return ctx.tensor(2), ctx.tensor(3), ctx.tensor(4)


def _dsp_requant_tensors(ctx: Ctx, what: str) -> tuple[te.Tensor, te.Tensor, te.Tensor]:
    """The bias, multipliers and shifts of a DSP convolution; with the ``fold_zp`` option
    the bias is :func:`fold_zero_point`'s (the input zero point taken out at compile
    time)."""
    bias, mult, shifts = _requant_tensors(ctx)
    if ctx.options.get("fold_zp"):
        w8, x_zp = ctx.node.input(1).data, ctx.attrs["x_zero_point"]
        bias = ctx.packed_tensor(2, lambda v: fold_zero_point(v, w8, x_zp).astype(np.int32),
                                 what)
    return bias, mult, shifts


def dsp_applies(node: Any) -> bool:
    """Whether the ``algorithm="dsp"`` computes handle ``node`` (constant weights; QConv:
    2-D, group 1; QGemm: 2-D input)."""
    w = node.input(1)
    if w is None or w.data is None:
        return False
    if node.op == "QConv":
        return len(w.shape) == 4 and (dsp_depthwise(node) or int(node.attrs["group"]) == 1)
    return node.op == "QGemm" and len(node.input(0).shape) == 2


def dsp_depthwise(node: Any) -> bool:
    """Whether QConv ``node`` is a depthwise convolution the DSP kernel takes (one output
    channel per input channel, no dilation)."""
    w, x = node.input(1), nchw_qconv(node).input(0)
    g = int(node.attrs["group"])
    return (g > 1 and len(w.shape) == 4 and w.shape[1] == 1 and g == w.shape[0] == x.shape[1]
            and tuple(node.attrs["dilations"]) == (1, 1))


def _qconv(ctx: Ctx) -> list[te.Tensor]:
    if ctx.options.get("algorithm") == "dsp":
        ctx.attrs = {**ctx.attrs, "unit_left_shift": unit_left_shift(ctx.node),
                     "requantize_bounded": requantize_bounded(ctx.node),
                     "requantize_shift": requantize_shift(ctx.node)}
        if ctx.attrs["requantize_shift"]:
            ctx.packed_tensor(4, lambda t, zp=int(ctx.attrs["y_zero_point"]):
                              pack_shift_halves(t, zp),
                              "the Cortex-M DSP requantization")
    nhwc = ctx.attrs.get("data_layout", "NCHW") == "NHWC"
    dense_dsp = ctx.options.get("algorithm") == "dsp" and not dsp_depthwise(ctx.node)
    # an NHWC input only the dense DSP kernel gathers as it is; the others read it
    # through an NCHW view (inlined into their loads)
    x = nhwc_as_nchw(ctx.tensor(0)) if nhwc and not dense_dsp else ctx.tensor(0)
    if ctx.options.get("algorithm") == "dsp" and not dense_dsp:
        kw = int(ctx.node.input(1).shape[3])
        wp = ctx.packed_tensor(1, pack_dsp_depthwise, "the Cortex-M DSP depthwise convolution")
        bias, mult, shifts = _dsp_requant_tensors(ctx, "the Cortex-M DSP depthwise convolution")
        return [qdwconv_dsp(x, wp, kw, bias, mult, shifts, ctx.attrs,
                            bool(ctx.options.get("fold_zp")))]
    if ctx.options.get("algorithm") == "x86":
        m = int(ctx.node.input(1).shape[0])
        wp = ctx.packed_tensor(1, lambda w: pack_x86_weights(w, x86_lanes(m)),
                               "the x86 int8 convolution")
        return [qconv2d_x86(x, wp, m, *_requant_tensors(ctx), ctx.attrs)]
    if dense_dsp:
        wshape = tuple(ctx.node.input(1).shape)
        if ctx.options.get("q15_weights"):
            wp = ctx.packed_tensor(1, pack_dsp_weights_q15, "the Cortex-M DSP convolution",
                                   "int16")
        else:
            wp = ctx.packed_tensor(1, pack_dsp_weights, "the Cortex-M DSP convolution")
        bias, mult, shifts = _dsp_requant_tensors(ctx, "the Cortex-M DSP convolution")
        return [qconv2d_dsp(ctx.tensor(0), wp, wshape, bias, mult, shifts, ctx.attrs,
                            bool(ctx.options.get("even_pixels")),
                            bool(ctx.options.get("fold_zp")))]
    return [qconv2d_nchw(x, ctx.tensor(1), *_requant_tensors(ctx), ctx.attrs)]


def nhwc_as_nchw(x: te.Tensor) -> te.Tensor:
    """An ``NHWC`` tensor read as ``NCHW`` (an injective view a schedule inlines).

    >>> [d.value for d in nhwc_as_nchw(te.placeholder((1, 4, 5, 3), "int8", "x")).shape]
    [1, 3, 4, 5]
    """
    n, h, w, c = x.shape
    return te.compute((n, c, h, w), lambda b, ch, y, xx: x[b, y, xx, ch], name="x_nchw",
                      tag="injective")


def _qgemm(ctx: Ctx) -> list[te.Tensor]:
    if ctx.options.get("algorithm") == "dsp":
        ctx.attrs = {**ctx.attrs, "unit_left_shift": unit_left_shift(ctx.node)}
    if ctx.options.get("algorithm") == "dsp" and qgemm_s8_applies(ctx.node):
        w, zp = ctx.node.input(1).data, ctx.attrs["x_zero_point"]
        b = ctx.packed_tensor(2, lambda v: fold_zero_point(v, w, zp).astype(np.int32),
                              "the Cortex-M int8 x int8 dense layer")
        return [qgemm_s8(ctx.tensor(0), ctx.tensor(1), b, ctx.tensor(3), ctx.tensor(4),
                         ctx.attrs)]
    if ctx.options.get("algorithm") == "x86":
        m = int(ctx.node.input(1).shape[0])
        wp = ctx.packed_tensor(1, lambda w: pack_x86_weights(w, x86_lanes(m)),
                               "the x86 int8 dense layer")
        return [qgemm_x86(ctx.tensor(0), wp, m, *_requant_tensors(ctx), ctx.attrs)]
    if ctx.options.get("algorithm") == "dsp":
        k = int(ctx.node.input(1).shape[1])
        wp = ctx.packed_tensor(1, pack_dsp_weights, "the Cortex-M DSP dense layer")
        return [qgemm_dsp(ctx.tensor(0), wp, k, *_requant_tensors(ctx), ctx.attrs)]
    return [qgemm(ctx.tensor(0), ctx.tensor(1), *_requant_tensors(ctx), ctx.attrs)]


def _qadd(ctx: Ctx) -> list[te.Tensor]:
    if ctx.options.get("algorithm") == "dsp" and qadd_dsp_applies(ctx.attrs):
        a, b = ctx.tensor(0), ctx.tensor(1)
        if ctx.options.get("lut") and qadd_lut_bound(ctx.attrs, a.dtype, b.dtype) < 2**31:
            ta = ctx.derived_constant("side_a", qadd_side_table(ctx.attrs, "a", a.dtype))
            tb = ctx.derived_constant("side_b", qadd_side_table(ctx.attrs, "b", b.dtype))
            return [qadd_lut(a, b, ta, tb, ctx.attrs)]
        return [qadd_dsp(a, b, ctx.attrs)]
    if ctx.options.get("algorithm") == "x86" and qadd_dsp_applies(ctx.attrs):
        from toolchain.topi.int8_x86 import qadd_x86

        return [qadd_x86(ctx.tensor(0), ctx.tensor(1), ctx.attrs)]
    return [qadd(ctx.tensor(0), ctx.tensor(1), ctx.attrs)]


def _qavgpool(ctx: Ctx) -> list[te.Tensor]:
    return [qavgpool(ctx.tensor(0), ctx.attrs)]


def requant_positions(acc: te.Tensor, bias: te.Tensor, mult: te.Tensor, shifts: te.Tensor,
                      axis: int, attrs: dict[str, Any], name: str) -> te.Tensor:
    """:func:`requant_epilogue` whose ``bias`` covers ``acc``'s dims from ``axis`` on (a
    bias per channel and position, as QRequant takes after an accelerator layer)."""

    def f(*i: Any) -> Any:
        c = i[axis]
        total = te.cast(acc[i], "int64") + te.cast(bias[i[axis:]], "int64")
        return finish_te(total, mult[c], shifts[c, 0], shifts[c, 1], attrs)

    return te.compute(acc.shape, f, name=name, tag="injective")


def _requant_of(ctx: Ctx, acc: te.Tensor, first: int, ax: int) -> te.Tensor:
    """QRequant of ``acc`` with bias, multiplier and shift table at inputs ``first..+2``."""
    bias, mult, shifts = ctx.tensor(first), ctx.tensor(first + 1), ctx.tensor(first + 2)
    if len(bias.shape) == 1:
        return requant_epilogue(acc, bias, mult, shifts, ax, ctx.attrs, "qrequant")
    return requant_positions(acc, bias, mult, shifts, ax, ctx.attrs, "qrequant")


def _qrequant(ctx: Ctx) -> list[te.Tensor]:
    return [_requant_of(ctx, ctx.tensor(0), 1, int(ctx.attrs["axis"]))]


def _vta_conv2d(ctx: Ctx) -> list[te.Tensor]:
    # the accelerator computes it in a bundle; this is the same sum on the CPU
    acc = conv2d_nchw(shifted(ctx.tensor(0), 0), ctx.tensor(1), tuple(ctx.attrs["strides"]),
                      tuple(ctx.attrs["pads"]), (1, 1), 1, out_dtype="int32")
    return [acc if ctx.node.input(2) is None else _requant_of(ctx, acc, 2, 1)]


def _vta_dense(ctx: Ctx) -> list[te.Tensor]:
    x, w = ctx.tensor(0), ctx.tensor(1)
    k = te.reduce_axis((0, int(w.shape[1].value)), name="k")
    acc = te.compute((x.shape[0], w.shape[0]), lambda i, j: te.sum(
        te.cast(x[i, k], "int32") * te.cast(w[j, k], "int32"), axis=k), name="vta_dense_acc",
        tag="dense")
    return [acc if ctx.node.input(2) is None else _requant_of(ctx, acc, 2, 1)]


#: graph op -> its compute: the table :func:`toolchain.topi.registry.computes` reads
COMPUTES: dict[str, ComputeFn] = {
    "QConv": _qconv,
    "QGemm": _qgemm,
    "QAdd": _qadd,
    "QAvgPool": _qavgpool,
    "QRequant": _qrequant,
    "VtaConv2d": _vta_conv2d,
    "VtaDense": _vta_dense,
    "VtaAdd": lambda ctx: [qadd(ctx.tensor(0), ctx.tensor(1), ctx.attrs)],
}
