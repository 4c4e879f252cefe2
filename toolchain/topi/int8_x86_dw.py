"""x86 int8 depthwise computes (the schedules: :mod:`toolchain.schedules.x86.int8_dw`).

Three kernels over blocks of ``L`` channels (16 or 8), each with its weight packing:

* :func:`qdwconv_x86`: int32 lanes, the band int16 (``x86_64-avx2``);
* :func:`qdwconv_x86_pairs`: lane-wise ``vpdpwssd`` over int16 column pairs;
* :func:`qdwconv_x86_quads`: lane-wise ``vpdpbusd`` over u8 row quads, one call per 3-high
  kernel column (``x86_64-avx512``, where the target declares ``dot_u8s8_lanes_Lx4``).

Example: a 3 x 3 kernel's quads, the kernel rows of each column side by side::

    >>> w = np.arange(1, 10, dtype=np.int8).reshape(1, 1, 3, 3)
    >>> pack_dw_quads(w, 1)[0, :, 0, 0].tolist()
    [[1, 4, 7, 0], [2, 5, 8, 0], [3, 6, 9, 0]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from toolchain import te
from toolchain.topi.int8_x86 import lane_requant, quad_offset, to_unsigned


def pack_dw_weights(w: np.ndarray, lanes: int) -> np.ndarray:
    """Depthwise ``[C, 1, KH, KW]`` int8 weights -> int8 ``[C/L, KH, KW, L]`` (stored as
    int8, widened in the kernel: :func:`qdwconv_x86`).

    >>> p = pack_dw_weights(np.arange(4, dtype=np.int8).reshape(4, 1, 1, 1), 2)
    >>> p[:, 0, 0].tolist(), p.dtype.name
    ([[0, 1], [2, 3]], 'int8')
    """
    c, _, kh, kw = w.shape
    out = np.asarray(w, np.int8).reshape(c // lanes, lanes, kh, kw)
    return np.ascontiguousarray(np.moveaxis(out, 1, -1))


def qdwconv_x86(x: te.Tensor, wp: te.Tensor, bias: te.Tensor, mult: te.Tensor,
                shifts: te.Tensor, attrs: dict[str, Any], fits: bool = False
                ) -> tuple[te.Tensor, te.Tensor]:
    """Depthwise NCHW convolution vectorized over ``L`` channels (``C`` a multiple of
    ``L``): the zero-point-shifted, padded input is re-laid per channel block as
    ``x86_band[n, co, y, x, l]`` (int16, widened as it is read), so that each
    multiply-accumulate reads ``L`` contiguous channels; requantized by
    :func:`lane_requant`. Returns (``x86_req``, ``acc``) before :func:`unpack_lanes`. An
    ``x`` of rank 5 is the input in ``NCHW{L}c``: the band is then only padded and
    widened, each pixel's ``L`` channels one contiguous load."""
    from toolchain.topi.int8 import shifted
    from toolchain.topi.nn.conv2d import pad_spatial

    co_n, kh, kw, lanes = (int(d.value) for d in wp.shape)
    sh, sw = attrs["strides"]
    dh, dw = attrs["dilations"]
    pt, pl, pb, pr = attrs["pads"]
    xp = pad_spatial(shifted(x, attrs["x_zero_point"]), (2, 3), (pt, pl), (pb, pr))
    n, _, hp, wdt = (int(d.value) for d in xp.shape[:4])
    if len(x.shape) == 5:  # already NCHW{L}c: the band is the padded input itself
        band = te.compute((n, co_n, hp, wdt, lanes), lambda b, co, yy, xx, li:
                          xp[b, co, yy, xx, li], name="x86_band", tag="injective")
    else:
        band = te.compute((n, co_n, hp, wdt, lanes), lambda b, co, yy, xx, li:
                          xp[b, co * lanes + li, yy, xx], name="x86_band", tag="injective")
    oh, ow = (hp - dh * (kh - 1) - 1) // sh + 1, (wdt - dw * (kw - 1) - 1) // sw + 1
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    acc = te.compute((n, co_n, oh, ow, lanes), lambda b, co, y, xx, li: te.sum(
        te.cast(band[b, co, y * sh + ry * dh, xx * sw + rx * dw, li], "int32")
        * te.cast(te.cast(wp[co, ry, rx, li], "int16"), "int32"),
        axis=[ry, rx]), name="x86_acc", tag="conv")
    return lane_requant(acc, bias, mult, shifts, attrs, fits=fits), acc


def pack_dw_pairs(w: np.ndarray, lanes: int) -> np.ndarray:
    """Depthwise ``[C, 1, KH, KW]`` int8 weights -> int8 ``[C/L, KH, ceil(KW/2), L, 2]``:
    per channel the weights of kernel columns ``2 q`` and ``2 q + 1`` side by side (0 past
    ``KW``), the ``B[j, k]`` operand of the lane-wise ``dot_i16_lanes_Lx2`` intrinsics
    (stored as int8, widened to int16 by the intrinsic as it loads them).

    >>> p = pack_dw_pairs(np.arange(1, 7, dtype=np.int8).reshape(2, 1, 1, 3), 2)
    >>> p[0, 0].tolist(), p.dtype.name
    ([[[1, 2], [4, 5]], [[3, 0], [6, 0]]], 'int8')
    """
    c, _, kh, kw = w.shape
    q = -(-kw // 2)
    out = np.zeros((c, kh, q * 2), np.int8)
    out[:, :, :kw] = np.asarray(w)[:, 0]
    out = out.reshape(c // lanes, lanes, kh, q, 2)
    return np.ascontiguousarray(out.transpose(0, 2, 3, 1, 4))


def qdwconv_x86_pairs(x: te.Tensor, wp: te.Tensor, attrs: dict[str, Any]) -> te.Tensor:
    """The accumulators ``x86_acc[n, co, y, x, l]`` of a depthwise convolution over
    :func:`pack_dw_pairs` weights, two kernel columns per lane-wise ``dot_i16_lanes_Lx2``
    call: the shifted, padded input (``NCHW{L}c``, or NCHW gathered per block) as
    ``x86_band[n, co, yy, xx, l]`` (one more zero column on the right), then zipped into
    ``x86_dwpairs[n, co, yy, xx, l, k]`` = ``x86_band[n, co, yy, xx + k, l]`` (the
    ``zip_i16_Lx2`` intrinsic: two unpacks a column)::

        x86_acc[n, co, y, x, l] = sum over ry, q, k of
            x86_dwpairs[n, co, y*sh + ry*dh, x*sw + 2 q*dw, l, k] * wp[co, ry, q, l, k]

    with dilation 1 along the columns (``k`` steps one column). The same integers as
    :func:`qdwconv_x86`."""
    from toolchain.topi.int8 import shifted
    from toolchain.topi.nn.conv2d import pad_spatial

    co_n, kh, q_n, lanes, _ = (int(d.value) for d in wp.shape)
    sh, sw = attrs["strides"]
    dh, _ = attrs["dilations"]
    pt, pl, pb, pr = attrs["pads"]
    # one more zero column on the right: the second of the last pair
    xp = pad_spatial(shifted(x, attrs["x_zero_point"]), (2, 3), (pt, pl), (pb, pr + 1))
    n, _, hp, wdt = (int(d.value) for d in xp.shape[:4])
    wdt -= 1
    if len(x.shape) == 5:
        cols = te.compute((n, co_n, hp, wdt + 1, lanes), lambda b, co, yy, xx, li:
                          xp[b, co, yy, xx, li], name="x86_band", tag="injective")
    else:
        cols = te.compute((n, co_n, hp, wdt + 1, lanes), lambda b, co, yy, xx, li:
                          xp[b, co * lanes + li, yy, xx], name="x86_band", tag="injective")
    band = te.compute((n, co_n, hp, wdt, lanes, 2), lambda b, co, yy, xx, li, k:
                      cols[b, co, yy, xx + k, li], name="x86_dwpairs", tag="injective")
    kw = int(attrs["kernel_width"])
    oh, ow = (hp - dh * (kh - 1) - 1) // sh + 1, (wdt - kw) // sw + 1
    ry = te.reduce_axis((0, kh), name="ry")
    rq = te.reduce_axis((0, q_n), name="rq")
    rk = te.reduce_axis((0, 2), name="rk")
    return te.compute((n, co_n, oh, ow, lanes), lambda b, co, y, xx, li: te.sum(
        te.cast(band[b, co, y * sh + ry * dh, xx * sw + rq * 2, li, rk], "int32")
        * te.cast(wp[co, ry, rq, li, rk], "int32"), axis=[ry, rq, rk]),
        name="x86_acc", tag="conv")


def pack_dw_quads(w: np.ndarray, lanes: int) -> np.ndarray:
    """Depthwise ``[C, 1, KH, KW]`` int8 weights -> int8 ``[C/L, KW, ceil(KH/4), L, 4]``:
    per channel and kernel column the weights of kernel rows ``4 q .. 4 q + 3`` side by side
    (0 past ``KH``), the ``B[j, k]`` operand of the lane-wise ``dot_u8s8_lanes_Lx4``
    intrinsics (:func:`qdwconv_x86_quads`).

    >>> pack_dw_quads(np.arange(1, 7, dtype=np.int8).reshape(1, 1, 3, 2), 1)[0, :, 0].tolist()
    [[[1, 3, 5, 0]], [[2, 4, 6, 0]]]
    """
    c, _, kh, kw = w.shape
    q = -(-kh // 4)
    out = np.zeros((c, q * 4, kw), np.int8)
    out[:, :kh] = np.asarray(w)[:, 0]
    out = out.reshape(c // lanes, lanes, q, 4, kw)
    return np.ascontiguousarray(out.transpose(0, 4, 2, 1, 3))


def qdwconv_x86_quads(x: te.Tensor, wp: te.Tensor, attrs: dict[str, Any]) -> te.Tensor:
    """The biased accumulators ``x86_acc[n, co, y, x, l]`` of a depthwise convolution over
    :func:`pack_dw_quads` weights, four kernel rows per lane-wise ``dot_u8s8_lanes_Lx4``
    call (``vpdpbusd``: a 3-high kernel column is one call, a 3 x 3 kernel three). The
    input is made unsigned (:func:`to_unsigned`) and padded with ``x_zp + off``, as the quad
    convolutions do, so ``(x_zp + off) * sum w`` comes off the bias at compile time
    (:func:`fold_quad_bias`). Its ``L``-channel pixels (``x86_band[n, co, yy, xx, l]``,
    ``NCHW{L}c`` copied or NCHW gathered per block; ``4 ceil(KH/4) - KH`` more padding rows
    at the bottom) are zipped per output row (``zip_u8_lanes_Lx4``: four 16-byte loads, two
    rounds of unpacks a padded column) into::

        x86_dwquads[n, co, y, xx, q, l, k] = x86_band[n, co, y*sh + 4 q + k, xx, l]
        x86_acc[n, co, y, x, l] = sum over rx, q, k of
            x86_dwquads[n, co, y, x*sw + rx*dw, q, l, k] * wp[co, rx, q, l, k]

    One output row's quads are one padded row (``Wp L 4`` bytes) and each is zipped once.
    Dilation 1 along the rows. The same integers as :func:`qdwconv_x86` once the bias is
    folded."""
    from toolchain.topi.nn.conv2d import pad_spatial

    co_n, kw, q_n, lanes, _ = (int(d.value) for d in wp.shape)
    sh, sw = attrs["strides"]
    _, dw = attrs["dilations"]
    pt, pl, pb, pr = attrs["pads"]
    kh = int(attrs["kernel_height"])
    extra = 4 * q_n - kh
    off = quad_offset(str(x.dtype))
    xu = te.compute(x.shape, lambda *i: to_unsigned(x[i], off), name="x_shifted",
                    tag="injective")
    xp = pad_spatial(xu, (2, 3), (pt, pl), (pb + extra, pr), value=attrs["x_zero_point"] + off)
    n, _, hp, wdt = (int(d.value) for d in xp.shape[:4])
    if len(x.shape) == 5:
        cols = te.compute((n, co_n, hp, wdt, lanes), lambda b, co, yy, xx, li:
                          xp[b, co, yy, xx, li], name="x86_band", tag="injective")
    else:
        cols = te.compute((n, co_n, hp, wdt, lanes), lambda b, co, yy, xx, li:
                          xp[b, co * lanes + li, yy, xx], name="x86_band", tag="injective")
    oh, ow = (hp - extra - kh) // sh + 1, (wdt - dw * (kw - 1) - 1) // sw + 1
    band = te.compute((n, co_n, oh, wdt, q_n, lanes, 4), lambda b, co, y, xx, q, li, k:
                      cols[b, co, y * sh + q * 4 + k, xx, li], name="x86_dwquads",
                      tag="injective")
    rx = te.reduce_axis((0, kw), name="rx")
    rq = te.reduce_axis((0, q_n), name="rq")
    rk = te.reduce_axis((0, 4), name="rk")
    return te.compute((n, co_n, oh, ow, lanes), lambda b, co, y, xx, li: te.sum(
        te.cast(band[b, co, y, xx * sw + rx * dw, rq, li, rk], "int32")
        * te.cast(wp[co, rx, rq, li, rk], "int32"), axis=[rx, rq, rk]),
        name="x86_acc", tag="conv")
