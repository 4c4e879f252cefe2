"""Lane-wise requantization for the x86 int8 kernels (:mod:`toolchain.schedules.x86.int8`).

The x86 computes of :mod:`toolchain.topi.int8` accumulate ``L`` output channels per vector
(``acc[..., mo, ..., l]`` holds channel ``mo * L + l``) but requantize per output element
of the NCHW result, reading the accumulators ``L`` apart: gcc leaves that int64 epilogue
scalar (~11 cycles per element). :func:`lane_requant` requantizes the accumulator tile
itself, ``L`` contiguous int32 lanes against ``L`` contiguous per-channel tables, so the
int64 multiplies become vector multiplies; :func:`unpack_lanes` then only moves bytes::

    before:  qconv[ch, y, x] = finish(acc[ch / L, y, x, ch % L] + bias[ch], mult[ch], ...)
    after:   x86_req[mo, y, x, l] = finish(acc[mo, y, x, l] + bias_p[mo*L + l], ...)
             qconv[ch, y, x]      = x86_req[ch / L, y, x, ch % L]

Each lane is requantized by the C helper ``kiln_x86_requantize`` (``c_helpers`` of
``targets/c-generic.yaml``): the arithmetic of :func:`toolchain.topi.int8.finish_te` with
the shift table as two shift counts (:func:`pad_shifts`), one 32 x 32 -> 64-bit multiply and
32-bit lanes everywhere else, so the integers are the same bit for bit at a third of the
cost (DS-CNN pointwise layer: requantization 14.6 -> 4.4 us of the kernel). The per-channel
tables are zero-padded to ``Mo * L`` channels at compile time (:func:`pad_channels`);
padded lanes are computed and never stored.

Example::

    >>> import numpy as np
    >>> pad_channels(np.array([5, 6, 7], np.int32), 2).tolist()
    [5, 6, 7, 0]
    >>> pad_channels(np.array([[1, 2]], np.int32), 4).shape
    (4, 2)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from toolchain import te


def pad_channels(v: np.ndarray, lanes: int) -> np.ndarray:
    """Per-channel table ``[M, ...]`` zero-padded to a multiple of ``lanes`` channels."""
    v = np.asarray(v)
    m = v.shape[0]
    out = np.zeros((-(-m // lanes) * lanes, *v.shape[1:]), v.dtype)
    out[:m] = v
    return out


def pad_shifts(s: np.ndarray, lanes: int) -> np.ndarray:
    """``[M, 2]`` shift table of powers ``(2**ls, 2**(30 - rs))``
    (:func:`toolchain.quantize.fixed_point.shift_table`) -> ``[2, Mo*L]`` int32 shift
    counts ``(ls, rs)``: padded (padded lanes: 0, 0) and transposed so that both rows of
    ``L`` lanes are contiguous loads.

    >>> pad_shifts(np.array([[4, 2**30], [1, 2**27]], np.int32), 4).tolist()
    [[2, 0, 0, 0], [0, 3, 0, 0]]
    """
    s = np.asarray(s, np.int64)
    if np.any(s <= 0) or np.any(s & (s - 1)):
        raise ValueError(f"shift table entries must be powers of two, got {s.tolist()}")
    counts = np.stack([np.log2(s[:, 0]), 30 - np.log2(s[:, 1])], axis=-1).round()
    return np.ascontiguousarray(pad_channels(counts.astype(np.int32), lanes).T)


def acc_bound(node: Any) -> np.ndarray | None:
    """Per output channel of QConv/QGemm ``node``, a bound on ``|acc + bias|`` from the
    constant weights, bias and the input's range (``sum |w| * max |x - x_zp| + |bias|``),
    or None where an operand is not constant or the input is not 8-bit."""
    w, b, s = (node.input(k) for k in (1, 2, 4))
    x = node.input(0)
    if any(v is None or v.data is None for v in (w, b, s)) or x.dtype not in ("int8", "uint8"):
        return None
    lo, hi = (-128, 127) if x.dtype == "int8" else (0, 255)
    zp = int(node.attrs.get("x_zero_point", 0))
    wd = np.abs(np.asarray(w.data, np.int64).reshape(int(w.shape[0]), -1)).sum(axis=1)
    return wd * max(abs(lo - zp), abs(hi - zp)) + np.abs(np.asarray(b.data, np.int64))


def requant_fits_int32(node: Any) -> bool:
    """Whether every ``acc + bias`` of QConv/QGemm ``node`` fits int32 and no channel shifts
    left (``shift_pow`` left powers all 1), from the constant weights, bias and the input's
    range: ``|acc| <= sum |w| * max |x - x_zp|`` per output channel.

    >>> from toolchain.graph.ir import Node, Value
    >>> x = Value("x", (1, 4), "int8"); y = Value("y", (1, 2), "int8")
    >>> c = [Value.constant("w", np.full((2, 4), 127, np.int8)),
    ...      Value.constant("b", np.array([2**30, 0], np.int32)),
    ...      Value.constant("m", np.full(2, 1 << 30, np.int32)),
    ...      Value.constant("s", np.array([[1, 2**27], [1, 2**30]], np.int32))]
    >>> requant_fits_int32(Node("QGemm", "fc", [x, *c], [y], {"x_zero_point": 0}))
    True
    """
    bound = acc_bound(node)
    return bound is not None and bool(np.all(np.asarray(node.input(4).data)[:, 0] == 1)
                                      and np.all(bound < 2**31 - 1))


def lane_requant(acc: te.Tensor, bias: te.Tensor, mult: te.Tensor, shifts: te.Tensor,
                 attrs: dict[str, Any], name: str = "x86_req", fits: bool = False,
                 rounded: bool = False, biased: bool = False, right: bool = False
                 ) -> te.Tensor:
    """Requantize every lane of ``acc`` (``[..., Mo, ..., L]`` int32, ``Mo`` at axis 1; a
    dense accumulator ``[P, Mo, L]`` too) against :func:`pad_channels`-padded tables
    ``bias[Mo*L]``, ``mult[Mo*L]`` and the shift counts of :func:`pad_shifts`,
    ``shifts[2, Mo*L]`` (each row contiguous), by the C helper ``kiln_x86_requantize``
    (registered by ``load_intrinsics("c-generic")``). The result is int32 (already clamped
    to the output range): gcc then vectorizes the helper in full-width registers (an int8
    result made it pick 16-byte vectors, slower than the scalar epilogue). ``fits``: the
    caller proved (:func:`requant_fits_int32`) that ``acc + bias`` fits int32 and no
    channel shifts left, so ``kiln_x86_requantize_r`` skips the int64 step. ``rounded``:
    ``shifts`` is the ``pad_round_shifts`` table and the caller proved
    ``requant_rounding_fits`` (both :mod:`toolchain.topi.int8_x86_requant`), so
    ``kiln_x86_requantize_z`` rounds in one add and shift and adds the output zero point on
    the way. ``biased``: ``acc`` already holds the bias (``bias_init``). ``right`` (with
    ``rounded``): every channel shifts right (``requant_shifts_right``),
    ``kiln_x86_requantize_z1``."""
    from toolchain.tir import ir

    lanes = int(acc.shape[-1].value)
    lo, hi = (te.const(attrs[k], "int32") for k in ("out_min", "out_max"))

    def f(*i: Any) -> Any:
        ch = i[1] * lanes + i[-1]
        helper = ("kiln_x86_requantize_z1" if right else "kiln_x86_requantize_z") if rounded \
            else \
            "kiln_x86_requantize_r" if fits else "kiln_x86_requantize"
        b = te.const(0, "int32") if biased else bias[ch]
        y = ir.Call("int32", helper, [acc[i], b, mult[ch], shifts[0, ch], shifts[1, ch]])
        if not rounded:
            y = y + te.const(attrs["y_zero_point"], "int32")
        return te.maximum(te.minimum(y, hi), lo)

    return te.compute(acc.shape, f, name=name, tag="injective")


def unpack_lanes(req: te.Tensor, shape: tuple[int, ...], dtype: str, name: str) -> te.Tensor:
    """``out[n, ch, *rest] = dtype(req[n, ch / L, *rest, ch % L])`` (``shape`` the real
    output, ``dtype`` its 8-bit type)."""
    lanes = int(req.shape[-1].value)

    def at(i: tuple) -> Any:
        return te.cast(req[(i[0], te.floordiv(i[1], lanes), *i[2:], te.floormod(i[1], lanes))],
                       dtype)

    if len(shape) == 2:
        return te.compute(shape, lambda b, ch: at((b, ch)), name=name, tag="injective")
    return te.compute(shape, lambda b, ch, y, x: at((b, ch, y, x)), name=name,
                      tag="injective")


def find_tensor(out: te.Tensor, name: str) -> te.Tensor:
    """The tensor called ``name`` read by ``out``'s compute (e.g. the ``x86_acc`` stage)."""
    for t in out.op.input_tensors():
        if t.op.name == name:
            return t
    raise KeyError(f"{out.op.name} reads no tensor named {name!r}")


def qadd_x86(a: te.Tensor, b: te.Tensor, attrs: dict[str, Any]) -> te.Tensor:
    """Integer addition (:func:`toolchain.topi.int8.qadd`) with its three requantizations
    by ``kiln_x86_requantize`` (each input's with bias 0, then the sum's: the helper adds
    its first two operands in int64, as the reference adds the two sides); only where
    :func:`toolchain.topi.int8.qadd_dsp_applies` (``(v - zp) << left_shift`` fits int32).
    Same integers as the int64 kernel, in 32-bit lanes (ResNet-8's residual adds)."""
    from toolchain.tir import ir

    i32 = "int32"

    def counts(shift: int) -> list[Any]:
        return [te.const(max(shift, 0), i32), te.const(max(-shift, 0), i32)]

    def side(v: te.Tensor, p: str, i: Any) -> Any:
        d = (te.cast(v[i], i32) - te.const(attrs[f"{p}_zero_point"], i32)) * te.const(
            1 << attrs["left_shift"], i32)
        return ir.Call(i32, "kiln_x86_requantize", [d, te.const(0, i32), te.const(
            attrs[f"{p}_multiplier"], i32), *counts(attrs[f"{p}_shift"])])

    lo, hi = (te.const(attrs[k], i32) for k in ("out_min", "out_max"))

    def f(*i: Any) -> Any:
        y = ir.Call(i32, "kiln_x86_requantize", [side(a, "a", i), side(b, "b", i), te.const(
            attrs["y_multiplier"], i32), *counts(attrs["y_shift"])])
        y = te.maximum(te.minimum(y + te.const(attrs["y_zero_point"], i32), hi), lo)
        return te.cast(y, attrs["out_dtype"])

    return te.compute(a.shape, f, name="qadd", tag="injective")


def pack_x86_pairs(w: np.ndarray, lanes: int) -> np.ndarray:
    """``[M, C, KH, KW]`` int8 weights -> int8 ``[Mo, ceil(C/2), KH, KW, L, 2]``: per
    output channel ``mo * L + l`` the weights of input channels ``2 c2`` and ``2 c2 + 1``
    side by side (zero-padded channels), the ``B[j, k]`` operand of the ``dot_i16_*x2``
    intrinsics (one ``vpdpwssd`` / ``vpmaddwd`` per pair of input channels). Stored as
    int8, half the bytes of the int16 the multiply takes: the intrinsic widens ``B`` as it
    loads it (``vpmovsxbw``), so flash holds one byte per weight.

    >>> pack_x86_pairs(np.arange(1, 4, dtype=np.int8).reshape(1, 3, 1, 1), 2)[0, :, 0, 0].tolist()
    [[[1, 2], [0, 0]], [[3, 0], [0, 0]]]
    """
    m, c, kh, kw = w.shape
    mo, c2 = -(-m // lanes), -(-c // 2)
    out = np.zeros((mo * lanes, c2 * 2, kh, kw), np.int8)
    out[:m, :c] = w
    out = out.reshape(mo, lanes, c2, 2, kh, kw)
    return np.ascontiguousarray(out.transpose(0, 2, 4, 5, 1, 3))


def qconv2d_x86_pairs(x: te.Tensor, wp: te.Tensor, attrs: dict[str, Any]) -> te.Tensor:
    """The int32 accumulators ``x86_acc[n, mo, y, x, l]`` of a group-1 NCHW convolution over
    :func:`pack_x86_pairs`-packed ``wp``: the zero-point-shifted, padded input re-laid as
    int16 channel pairs ``x86_pairs[n, c2, y, x, h]`` = channel ``2 c2 + h`` (0 past ``C``),
    so that one 32-bit load gives the ``A[k]`` pair of the ``dot_i16_*x2`` intrinsics::

        x86_acc[n, mo, y, x, l] = sum over c2, ry, rx, h of
            x86_pairs[n, c2, y*sh + ry*dh, x*sw + rx*dw, h] * wp[mo, c2, ry, rx, l, h]

    Same integers as :func:`toolchain.topi.int8.qconv2d_nchw`."""
    from toolchain.topi.int8 import shifted
    from toolchain.topi.nn.conv2d import pad_spatial

    pt, pl, pb, pr = attrs["pads"]
    xp = pad_spatial(shifted(x, attrs["x_zero_point"]), (2, 3), (pt, pl), (pb, pr))
    return _grouped_acc(xp, wp, int(x.shape[1].value), 2, "x86_pairs", attrs["strides"],
                        attrs["dilations"])


def _grouped_acc(xp: te.Tensor, wp: te.Tensor, c: int, g: int, name: str,
                 strides: Any, dilations: Any) -> te.Tensor:
    """The accumulators of a convolution over the padded input ``xp`` with its ``c``
    channels in groups of ``g`` (the band ``name``: pairs or quads, zero past ``c``) and
    the weights ``wp`` packed ``[Mo, C/g, KH, KW, L, g]``."""
    mo_n, cg_n, kh, kw, lanes, _ = (int(d.value) for d in wp.shape)
    n, _, hp, wdt = (int(d.value) for d in xp.shape[:4])
    (sh, sw), (dh, dw) = strides, dilations

    if len(xp.shape) == 5:
        return _blocked_grouped_acc(xp, wp, g, name, strides, dilations)

    def group(b: Any, cg: Any, yy: Any, xx: Any, h: Any) -> Any:
        ch = cg * g + h
        if c % g == 0:
            return xp[b, ch, yy, xx]
        v = xp[b, te.minimum(ch, te.const(c - 1)), yy, xx]
        return te.if_then_else(ch < c, v, te.const(0, xp.dtype))

    band = te.compute((n, cg_n, hp, wdt, g), group, name=name, tag="injective")
    oh, ow = (hp - dh * (kh - 1) - 1) // sh + 1, (wdt - dw * (kw - 1) - 1) // sw + 1
    rc = te.reduce_axis((0, cg_n), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    rh = te.reduce_axis((0, g), name="rh")
    return te.compute((n, mo_n, oh, ow, lanes), lambda b, mo, y, xx, li: te.sum(
        te.cast(band[b, rc, y * sh + ry * dh, xx * sw + rx * dw, rh], "int32")
        * te.cast(wp[mo, rc, ry, rx, li, rh], "int32"), axis=[rc, ry, rx, rh]),
        name="x86_acc", tag="conv")


def _blocked_grouped_acc(xp: te.Tensor, wp: te.Tensor, g: int, name: str, strides: Any,
                         dilations: Any) -> te.Tensor:
    """:func:`_grouped_acc` over a padded ``NCHW{B}c`` input (``B`` a multiple of ``g``):
    the band keeps the blocks (``name[n, cb, y, x, e]``, a contiguous copy of each pixel's
    ``B`` channels) and group ``q`` of block ``cb`` is its ``g`` bytes from ``q * g``."""
    mo_n, cg_n, kh, kw, lanes, _ = (int(d.value) for d in wp.shape)
    n, cb_n, hp, wdt, blk = (int(d.value) for d in xp.shape)
    (sh, sw), (dh, dw) = strides, dilations
    per = blk // g
    band = te.compute((n, cb_n, hp, wdt, blk), lambda b, cb, yy, xx, e: xp[b, cb, yy, xx, e],
                      name=name, tag="injective")
    oh, ow = (hp - dh * (kh - 1) - 1) // sh + 1, (wdt - dw * (kw - 1) - 1) // sw + 1
    rb = te.reduce_axis((0, cb_n), name="rb")
    rq = te.reduce_axis((0, per), name="rq")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    rh = te.reduce_axis((0, g), name="rh")
    return te.compute((n, mo_n, oh, ow, lanes), lambda b, mo, y, xx, li: te.sum(
        te.cast(band[b, rb, y * sh + ry * dh, xx * sw + rx * dw, rq * g + rh], "int32")
        * te.cast(wp[mo, rb * per + rq, ry, rx, li, rh], "int32"), axis=[rb, rq, ry, rx, rh]),
        name="x86_acc", tag="conv")


def pack_x86_dense_pairs(w: np.ndarray, lanes: int) -> np.ndarray:
    """Dense ``[M, K]`` int8 weights -> int8 ``[Mo, ceil(K/2), 1, 1, L, 2]``: the weights of
    a 1x1 convolution (:func:`pack_x86_pairs`), so the dense layer takes the same nest and
    the same ``dot_i16_*x2`` intrinsics.

    >>> pack_x86_dense_pairs(np.arange(1, 4, dtype=np.int8).reshape(1, 3), 2).shape
    (1, 2, 1, 1, 2, 2)
    """
    return pack_x86_pairs(np.asarray(w)[:, :, None, None], lanes)


def qgemm_x86_pairs(x: te.Tensor, wp: te.Tensor, attrs: dict[str, Any]) -> te.Tensor:
    """The accumulators of a dense layer ``x[P, K] . w[M, K]^T`` as a 1x1 convolution over
    ``P`` pixels of one row: ``x86_pairs[0, k2, 0, p, h] = x[p, 2 k2 + h] - x_zp`` (0 past
    ``K``), ``x86_acc[0, mo, 0, p, l]`` over :func:`pack_x86_dense_pairs` weights (the nest
    and intrinsics of :func:`qconv2d_x86_pairs`). Same integers as
    :func:`toolchain.topi.int8.qgemm`."""
    zp = te.const(attrs["x_zero_point"], "int16")
    return _grouped_dense_acc(x, wp, 2, lambda v: te.cast(v, "int16") - zp, "int16",
                              "x86_pairs")


def _grouped_dense_acc(x: te.Tensor, wp: te.Tensor, g: int, convert: Any, dtype: str,
                       name: str) -> te.Tensor:
    """The accumulators of a dense layer over ``x[P, K]`` with ``K`` in groups of ``g``
    (the band ``name``: ``convert`` of each element, a ``dtype`` 0 past ``K``) and the
    weights ``wp`` packed ``[Mo, K/g, 1, 1, L, g]``, as a 1x1 convolution over ``P``
    pixels of one row."""
    p, k = (int(d.value) for d in x.shape)
    mo_n, kg_n, _, _, lanes, _ = (int(d.value) for d in wp.shape)

    def group(b: Any, kg: Any, y: Any, i: Any, h: Any) -> Any:
        kk = kg * g + h
        if k % g == 0:
            return convert(x[i, kk])
        v = convert(x[i, te.minimum(kk, te.const(k - 1))])
        return te.if_then_else(kk < k, v, te.const(0, dtype))

    band = te.compute((1, kg_n, 1, p, g), group, name=name, tag="injective")
    rc = te.reduce_axis((0, kg_n), name="rc")
    rh = te.reduce_axis((0, g), name="rh")
    return te.compute((1, mo_n, 1, p, lanes), lambda b, mo, y, i, li: te.sum(
        te.cast(band[b, rc, y, i, rh], "int32") * te.cast(wp[mo, rc, 0, 0, li, rh], "int32"),
        axis=[rc, rh]), name="x86_acc", tag="dense")


def pack_blocked(req: te.Tensor, dtype: str, name: str) -> te.Tensor:
    """``out[n, mo, y, x, l] = dtype(req[n, mo, y, x, l])``: the requantized tile stored as
    it is, the output in ``NCHW{L}c`` (no channel re-lay; :func:`unpack_lanes` for NCHW)."""
    return te.compute(req.shape, lambda *i: te.cast(req[i], dtype), name=name, tag="injective")


def unpack_dense(req: te.Tensor, m: int, dtype: str, name: str = "qgemm") -> te.Tensor:
    """``out[p, ch] = dtype(req[0, ch / L, 0, p, ch % L])`` (the dense output ``[P, M]``)."""
    lanes = int(req.shape[-1].value)
    p = int(req.shape[3].value)
    return te.compute((p, m), lambda i, ch: te.cast(
        req[0, te.floordiv(ch, lanes), 0, i, te.floormod(ch, lanes)], dtype), name=name,
        tag="injective")


def quad_offset(dtype: str) -> int:
    """What makes an activation of ``dtype`` unsigned for ``vpdpbusd``: 128 for int8
    (``x + 128`` = ``x ^ 0x80`` as a byte), 0 for uint8."""
    return 128 if dtype == "int8" else 0


def to_unsigned(v: Any, off: int) -> Any:
    """The 8-bit activation ``v`` made unsigned for ``vpdpbusd``: ``v + off`` (``off`` of
    :func:`quad_offset`) as a uint8 add that wraps, which for ``off = 128`` is ``v + 128``
    exactly (``x ^ 0x80``): one byte add a vector (``vpaddb``), where the int16 detour
    (widen, add, pack back) cost about 7 instructions per 16 bytes of every quad band."""
    u = te.cast(v, "uint8")
    return u + te.const(off, "uint8") if off else u


def fold_quad_bias(bias: np.ndarray, w: np.ndarray, zu: int) -> np.ndarray:
    """The int32 bias of the u8 x s8 kernels: ``bias[m] - zu * sum w[m]`` (``zu`` = the
    input zero point made unsigned, ``x_zp + quad_offset``), since
    ``sum (x - x_zp) w = sum (x + off) w - zu * sum w``. Raises ``ValueError`` where it
    leaves int32 (:func:`quads_apply` says beforehand).

    >>> fold_quad_bias(np.array([10, -4], np.int32), np.array([[1, 2], [-3, 0]], np.int8), 128)
    array([-374,  380], dtype=int32)
    """
    w64 = np.asarray(w, np.int64).reshape(len(bias), -1)
    out = np.asarray(bias, np.int64) - zu * w64.sum(axis=1)
    if np.any(np.abs(out) >= 2**31):
        raise ValueError(f"folded bias leaves int32: {out.tolist()}")
    return out.astype(np.int32)


def quads_apply(node: Any) -> bool:
    """Whether QConv/QGemm ``node`` can take the u8 x s8 kernels: constant weights and bias,
    8-bit input, and every biased accumulator ``sum (x + off) w`` (``|.| <= 255 sum |w|``)
    and folded bias (:func:`fold_quad_bias`) inside int32.

    >>> from toolchain.graph.ir import Node, Value
    >>> x = Value("x", (1, 4), "int8"); y = Value("y", (1, 2), "int8")
    >>> c = [Value.constant("w", np.full((2, 4), 127, np.int8)),
    ...      Value.constant("b", np.zeros(2, np.int32))]
    >>> quads_apply(Node("QGemm", "fc", [x, *c], [y], {"x_zero_point": -3}))
    True
    """
    w, b, x = node.input(1), node.input(2), node.input(0)
    if w is None or b is None or w.data is None or b.data is None or \
            x.dtype not in ("int8", "uint8"):
        return False
    zu = int(node.attrs.get("x_zero_point", 0)) + quad_offset(x.dtype)
    w64 = np.asarray(w.data, np.int64).reshape(int(w.shape[0]), -1)
    folded = np.asarray(b.data, np.int64) - zu * w64.sum(axis=1)
    return bool(np.all(255 * np.abs(w64).sum(axis=1) < 2**31)
                and np.all(np.abs(folded) < 2**31))


def pack_x86_quads(w: np.ndarray, lanes: int) -> np.ndarray:
    """``[M, C, KH, KW]`` int8 weights -> int8 ``[Mo, ceil(C/4), KH, KW, L, 4]``: per output
    channel ``mo * L + l`` the weights of input channels ``4 c4 .. 4 c4 + 3`` side by side
    (zero-padded channels), the ``B[j, k]`` operand of the ``dot_u8s8_*x4`` intrinsics (one
    ``vpdpbusd`` per four input channels).

    >>> pack_x86_quads(np.arange(1, 6, dtype=np.int8).reshape(1, 5, 1, 1), 2)[0, :, 0, 0].tolist()
    [[[1, 2, 3, 4], [0, 0, 0, 0]], [[5, 0, 0, 0], [0, 0, 0, 0]]]
    """
    m, c, kh, kw = w.shape
    mo, c4 = -(-m // lanes), -(-c // 4)
    out = np.zeros((mo * lanes, c4 * 4, kh, kw), np.int8)
    out[:m, :c] = w
    out = out.reshape(mo, lanes, c4, 4, kh, kw)
    return np.ascontiguousarray(out.transpose(0, 2, 4, 5, 1, 3))


def pack_x86_dense_quads(w: np.ndarray, lanes: int) -> np.ndarray:
    """Dense ``[M, K]`` int8 weights -> int8 ``[Mo, ceil(K/4), 1, 1, L, 4]`` (the weights of
    a 1x1 convolution, :func:`pack_x86_quads`)."""
    return pack_x86_quads(np.asarray(w)[:, :, None, None], lanes)


def qconv2d_x86_quads(x: te.Tensor, wp: te.Tensor, attrs: dict[str, Any]) -> te.Tensor:
    """The biased int32 accumulators ``x86_acc[n, mo, y, x, l]`` of a group-1 NCHW
    convolution over :func:`pack_x86_quads`-packed ``wp``: the input made unsigned
    (``x + quad_offset``, ``x_zp + quad_offset`` in the padding) and re-laid as u8 channel
    quads ``x86_quads[n, c4, y, x, h]`` = channel ``4 c4 + h`` (0 past ``C``), so that one
    32-bit load gives the ``A[k]`` quad of the ``dot_u8s8_*x4`` intrinsics::

        x86_acc[n, mo, y, x, l] = sum over c4, ry, rx, h of
            x86_quads[n, c4, y*sh + ry*dh, x*sw + rx*dw, h] * wp[mo, c4, ry, rx, l, h]

    This is :func:`qconv2d_x86_pairs`'s accumulator plus ``(x_zp + off) * sum w``, which
    :func:`fold_quad_bias` takes out of the bias at compile time: the same integers. An
    ``x`` of rank 5 is the input in ``NCHW{B}c`` (``B`` 8 or 16): quad ``c4`` is then four
    contiguous bytes of block ``c4 / (B/4)``."""
    from toolchain.topi.nn.conv2d import pad_spatial

    off = quad_offset(str(x.dtype))
    pt, pl, pb, pr = attrs["pads"]
    xu = te.compute(x.shape, lambda *i: to_unsigned(x[i], off), name="x_shifted",
                    tag="injective")
    xp = pad_spatial(xu, (2, 3), (pt, pl), (pb, pr), value=attrs["x_zero_point"] + off)
    c = int(x.shape[1].value) * (int(x.shape[4].value) if len(x.shape) == 5 else 1)
    if zip_planes_apply(x, attrs):
        return _plane_quads(xu, wp, attrs, attrs["x_zero_point"] + off)
    return _grouped_acc(xp, wp, c, 4, "x86_quads", attrs["strides"], attrs["dilations"])


#: pixels the ``zip_u8_16x4`` intrinsic interleaves at once (:func:`_plane_quads`)
ZIP_PIXELS = 16


def zip_planes_apply(x: Any, attrs: dict[str, Any]) -> bool:
    """Whether the u8 quad band of an NCHW input ``x`` (a ``te.Tensor``) is zipped from
    planes (:func:`_plane_quads`): one quad of channels (``c <= 4``: an RGB input), no left
    padding and a width in whole zips of :data:`ZIP_PIXELS`, so that each plane's
    16-column vectors are contiguous loads of the input's rows."""
    shape = [int(d.value) for d in x.shape]
    return len(shape) == 4 and shape[1] <= 4 and attrs["pads"][1] == 0 \
        and shape[3] % ZIP_PIXELS == 0


def _plane_quads(xu: te.Tensor, wp: te.Tensor, attrs: dict[str, Any], pad_value: int
                 ) -> te.Tensor:
    """:func:`_grouped_acc` for one quad of channels (:func:`zip_planes_apply`) with the
    quad band zipped from planes instead of built byte by byte: the unsigned input ``xu``,
    padded with ``pad_value``, as four planes ``x86_planes[n, h, yy, xx]`` (channel
    ``min(h, c - 1)``: the weights are zero past ``c``; columns up to a whole zip, the
    extra ones padding), then
    ``x86_quads[n, 0, yy, xx, h] = x86_planes[n, h, yy, xx]``, which the schedule
    tensorizes with ``zip_u8_16x4`` (four 16-byte loads, two rounds of unpacks). The
    planes read whole 16-column vectors of a row (the last one again past the row, rows
    clamped to the last): contiguous loads, the padding a blend."""
    from toolchain.topi.utils import scalar

    n, c, h_in, w_in = (int(d.value) for d in xu.shape)
    mo_n, _, kh, kw, lanes, _ = (int(d.value) for d in wp.shape)
    pt, _, pb, pr = attrs["pads"]
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilations"]
    z = ZIP_PIXELS
    hp, wdt = h_in + pt + pb, w_in + pr
    wq = -(-wdt // z) * z
    pad = scalar(pad_value, "uint8")

    def plane(b: Any, h: Any, yy: Any, xx: Any) -> Any:
        row = te.maximum(te.minimum(yy - pt, te.const(h_in - 1)), te.const(0))
        col = te.minimum(xx - xx % z, te.const(w_in - z)) + xx % z
        v = xu[b, te.minimum(h, te.const(c - 1)), row, col]
        return te.if_then_else(te.all(yy >= pt, yy < pt + h_in, xx < w_in), v, pad)

    planes = te.compute((n, 4, hp, wq), plane, name="x86_planes", tag="injective")
    band = te.compute((n, 1, hp, wq, 4), lambda b, cg, yy, xx, h: planes[b, h, yy, xx],
                      name="x86_quads", tag="injective")
    oh, ow = (hp - dh * (kh - 1) - 1) // sh + 1, (wdt - dw * (kw - 1) - 1) // sw + 1
    rc = te.reduce_axis((0, 1), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    rh = te.reduce_axis((0, 4), name="rh")
    return te.compute((n, mo_n, oh, ow, lanes), lambda b, mo, y, xx, li: te.sum(
        te.cast(band[b, rc, y * sh + ry * dh, xx * sw + rx * dw, rh], "int32")
        * te.cast(wp[mo, rc, ry, rx, li, rh], "int32"), axis=[rc, ry, rx, rh]),
        name="x86_acc", tag="conv")


def qgemm_x86_quads(x: te.Tensor, wp: te.Tensor, attrs: dict[str, Any]) -> te.Tensor:
    """The biased accumulators of a dense layer ``x[P, K] . w[M, K]^T`` as a 1x1 convolution
    over ``P`` pixels of one row (:func:`qconv2d_x86_quads`):
    ``x86_quads[0, k4, 0, p, h] = x[p, 4 k4 + h] + quad_offset`` (0 past ``K``)."""
    off = quad_offset(str(x.dtype))
    return _grouped_dense_acc(x, wp, 4, lambda v: to_unsigned(v, off), "uint8", "x86_quads")


def colquads_apply(node: Any) -> bool:
    """Whether QConv ``node`` takes its quads along the kernel's columns instead of the
    channels (:func:`qconv2d_x86_colquads`): one input channel (a quad of channels would be
    three quarters zeros: DS-CNN's 10 x 4 first layer), group 1, a kernel at least 2 wide."""
    x, w = node.input(0), node.input(1)
    return (node.op == "QConv" and len(x.shape) == 4 and int(x.shape[1]) == 1
            and w is not None and len(w.shape) == 4 and int(w.shape[3]) >= 2
            and int(node.attrs.get("group", 1)) == 1)


def pack_x86_colquads(w: np.ndarray, lanes: int) -> np.ndarray:
    """One-channel ``[M, 1, KH, KW]`` int8 weights -> int8 ``[Mo, ceil(KW/4), KH, 1, L, 4]``:
    four kernel columns side by side (zero past ``KW``), the ``B[j, k]`` operand of
    ``dot_u8s8_*x4`` for :func:`qconv2d_x86_colquads`.

    >>> pack_x86_colquads(np.arange(1, 6, dtype=np.int8).reshape(1, 1, 1, 5), 2)[0, :, 0, 0, 0]
    array([[1, 2, 3, 4],
           [5, 0, 0, 0]], dtype=int8)
    """
    w = np.asarray(w)
    return pack_x86_quads(np.ascontiguousarray(w.transpose(0, 3, 2, 1)), lanes)


def qconv2d_x86_colquads(x: te.Tensor, wp: te.Tensor, attrs: dict[str, Any]) -> te.Tensor:
    """The biased accumulators of a one-channel convolution with the quads taken along the
    kernel's columns: ``x86_quads[n, kq, yy, ox, h]`` = the padded, unsigned input at row
    ``yy``, column ``ox*sw + (4 kq + h)*dw`` (0 past ``KW``), so each output pixel's four
    taps of a kernel row are one ``A[k]`` quad::

        x86_acc[n, mo, y, x, l] = sum over kq, ry, h of
            x86_quads[n, kq, y*sh + ry*dh, x, h] * wp[mo, kq, ry, 0, l, h]

    over :func:`pack_x86_colquads` weights; ``(x_zp + off) * sum w`` is folded into the bias
    as for :func:`qconv2d_x86_quads`: the same integers."""
    from toolchain.topi.nn.conv2d import pad_spatial

    mo_n, kq_n, kh, _, lanes, _ = (int(d.value) for d in wp.shape)
    off = quad_offset(str(x.dtype))
    sh, sw = attrs["strides"]
    dh, dw = attrs["dilations"]
    pt, pl, pb, pr = attrs["pads"]
    xu = te.compute(x.shape, lambda *i: to_unsigned(x[i], off), name="x_shifted",
                    tag="injective")
    xp = pad_spatial(xu, (2, 3), (pt, pl), (pb, pr), value=attrs["x_zero_point"] + off)
    n, _, hp, wdt = (int(d.value) for d in xp.shape)
    kw = int(attrs["kernel_width"])
    oh, ow = (hp - dh * (kh - 1) - 1) // sh + 1, (wdt - dw * (kw - 1) - 1) // sw + 1

    def quad(b: Any, kq: Any, yy: Any, ox: Any, h: Any) -> Any:
        rx = kq * 4 + h
        if kw % 4 == 0:
            return xp[b, 0, yy, ox * sw + rx * dw]
        v = xp[b, 0, yy, ox * sw + te.minimum(rx, te.const(kw - 1)) * dw]
        return te.if_then_else(rx < kw, v, te.const(0, "uint8"))

    band = te.compute((n, kq_n, hp, ow, 4), quad, name="x86_quads", tag="injective")
    rc = te.reduce_axis((0, kq_n), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rh = te.reduce_axis((0, 4), name="rh")
    return te.compute((n, mo_n, oh, ow, lanes), lambda b, mo, y, xx, li: te.sum(
        te.cast(band[b, rc, y * sh + ry * dh, xx, rh], "int32")
        * te.cast(wp[mo, rc, ry, 0, li, rh], "int32"), axis=[rc, ry, rh]),
        name="x86_acc", tag="conv")


def x86_depthwise(node: Any) -> bool:
    """Whether QConv ``node`` (given in ``NCHW``) is a depthwise convolution the x86
    depthwise kernel takes: :func:`~toolchain.topi.int8.dsp_depthwise`'s, with more than one
    kernel tap. A 1x1 one (a per-channel scale: fuzzer seed 302015) has no reduction loop
    left once ``compute_at`` elides the unit ones, and the kernel's schedule needs one; the
    generic int8 kernel takes it.

    >>> from toolchain.graph.ir import Node, Value
    >>> x = Value("x", (1, 8, 4, 4), "int8"); y = Value("y", (1, 8, 4, 4), "int8")
    >>> attrs = {"group": 8, "dilations": (1, 1)}
    >>> [x86_depthwise(Node("QConv", "dw", [x, Value.constant("w", np.ones((8, 1, k, k),
    ...                                                                  np.int8))], [y], attrs))
    ...  for k in (1, 3)]
    [False, True]
    """
    from toolchain.topi.int8 import dsp_depthwise

    w = node.input(1)
    return dsp_depthwise(node) and int(w.shape[2]) * int(w.shape[3]) > 1


def blocked_layouts(node: Any) -> tuple[str, str] | None:
    """The layouts in which the x86 int8 kernels can read and write QConv ``node`` (given
    in ``NCHW``) without re-laying channels at the kernel's edges: ``(input, output)``,
    ``NCHW{L}c`` for the output (``L`` the kernel's lanes) and for an input whose channels
    the kernel reads in blocks (depthwise: the same ``L``; u8 quads: 16 or 8 channels),
    ``NCHW`` for an input it takes as it is (a one-channel input read in quads of kernel
    columns, channels not a multiple of 8); None where no such kernel applies (on a target
    with ``dot_u8s8`` quads: :func:`toolchain.graph.passes.layout.LayoutTarget`'s
    ``int8``).

    >>> from toolchain.graph.ir import Node, Value
    >>> x = Value("x", (1, 32, 6, 6), "int8"); y = Value("y", (1, 32, 6, 6), "int8")
    >>> c = [Value.constant("w", np.ones((32, 1, 3, 3), np.int8)),
    ...      Value.constant("b", np.zeros(32, np.int32)),
    ...      Value.constant("m", np.full(32, 1 << 30, np.int32)),
    ...      Value.constant("s", np.full((32, 2), 1 << 30, np.int32))]
    >>> attrs = {"group": 32, "dilations": (1, 1), "pads": (1, 1, 1, 1), "strides": (1, 1)}
    >>> blocked_layouts(Node("QConv", "dw", [x, *c], [y], attrs))
    ('NCHW16c', 'NCHW16c')
    """
    from toolchain.topi.int8 import x86_applies, x86_lanes

    x, w = node.input(0), node.input(1)
    if node.op != "QConv" or len(x.shape) != 4 or w is None or w.data is None or \
            len(w.shape) != 4 or any(node.input(k) is None or node.input(k).data is None
                                     for k in (2, 3, 4)):
        return None
    c, m = int(x.shape[1]), int(w.shape[0])
    if int(node.attrs.get("group", 1)) != 1:
        if not x86_depthwise(node) or c % 8:
            return None
        lay = f"NCHW{16 if c % 16 == 0 else 8}c"
        return lay, lay
    lanes = x86_lanes(m)
    if not x86_applies(node) or not quads_apply(node) or m % lanes:
        return None
    kh, kw = int(w.shape[2]), int(w.shape[3])
    if colquads_apply(node):
        return ("NCHW", f"NCHW{lanes}c") if kh > 1 or kw > 4 else None
    if c <= 4 and kh * kw == 1:  # one quad, 1x1: the quad nest refuses it
        return None
    data = f"NCHW{16 if c % 16 == 0 else 8}c" if c % 8 == 0 else "NCHW"
    return data, f"NCHW{lanes}c"
