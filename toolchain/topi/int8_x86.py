"""Lane-wise requantization for the x86 int8 kernels (:mod:`toolchain.schedules.x86_int8`).

The x86 computes of :mod:`toolchain.topi.int8` accumulate ``L`` output channels per vector
(``acc[..., mo, ..., l]`` holds channel ``mo * L + l``) but requantize per output element
of the NCHW result, reading the accumulators ``L`` apart: gcc leaves that int64 epilogue
scalar (~11 cycles per element). :func:`lane_requant` requantizes the accumulator tile
itself, ``L`` contiguous int32 lanes against ``L`` contiguous per-channel tables, so the
int64 multiplies become vector multiplies; :func:`unpack_lanes` then only moves bytes::

    before:  qconv[ch, y, x] = finish(acc[ch / L, y, x, ch % L] + bias[ch], mult[ch], ...)
    after:   x86_req[mo, y, x, l] = finish(acc[mo, y, x, l] + bias_p[mo*L + l], ...)
             qconv[ch, y, x]      = x86_req[ch / L, y, x, ch % L]

The arithmetic is :func:`toolchain.topi.int8.finish_te` unchanged, so the integers are
the same bit for bit. The per-channel tables are zero-padded to ``Mo * L`` channels at
compile time (:func:`pad_channels`); padded lanes are computed and never stored.

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
from toolchain.topi.int8 import finish_te


def pad_channels(v: np.ndarray, lanes: int) -> np.ndarray:
    """Per-channel table ``[M, ...]`` zero-padded to a multiple of ``lanes`` channels."""
    v = np.asarray(v)
    m = v.shape[0]
    out = np.zeros((-(-m // lanes) * lanes, *v.shape[1:]), v.dtype)
    out[:m] = v
    return out


def pad_shifts(s: np.ndarray, lanes: int) -> np.ndarray:
    """``[M, 2]`` shift table -> ``[2, Mo*L]``: padded and transposed so that both powers
    of ``L`` lanes are contiguous loads.

    >>> pad_shifts(np.array([[4, 8], [1, 2]], np.int32), 4).tolist()
    [[4, 1, 0, 0], [8, 2, 0, 0]]
    """
    return np.ascontiguousarray(pad_channels(s, lanes).T)


def lane_requant(acc: te.Tensor, bias: te.Tensor, mult: te.Tensor, shifts: te.Tensor,
                 attrs: dict[str, Any], name: str = "x86_req") -> te.Tensor:
    """Requantize every lane of ``acc`` (``[..., Mo, ..., L]`` int32, ``Mo`` at axis 1; a
    dense accumulator ``[P, Mo, L]`` too) against :func:`pad_channels`-padded tables
    ``bias[Mo*L]``, ``mult[Mo*L]`` and the shift table transposed, ``shifts[2, Mo*L]`` (each
    row contiguous). The result is int32 (already clamped to the output range): gcc then
    vectorizes the int64 arithmetic in full-width registers (an int8 result made it pick
    16-byte vectors, 2 int64 lanes each, slower than the scalar epilogue)."""
    lanes = int(acc.shape[-1].value)
    attrs = {**attrs, "out_dtype": "int32"}  # clamped to the output range, stored as int32

    def f(*i: Any) -> Any:
        ch = i[1] * lanes + i[-1]
        total = te.cast(acc[i], "int64") + te.cast(bias[ch], "int64")
        return finish_te(total, mult[ch], shifts[0, ch], shifts[1, ch], attrs)

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


def pack_dw_weights(w: np.ndarray, lanes: int) -> np.ndarray:
    """Depthwise ``[C, 1, KH, KW]`` int8 weights -> int32 ``[C/L, KH, KW, L]``.

    >>> pack_dw_weights(np.arange(4, dtype=np.int8).reshape(4, 1, 1, 1), 2)[:, 0, 0].tolist()
    [[0, 1], [2, 3]]
    """
    c, _, kh, kw = w.shape
    out = np.asarray(w, np.int32).reshape(c // lanes, lanes, kh, kw)
    return np.ascontiguousarray(np.moveaxis(out, 1, -1))


def qdwconv_x86(x: te.Tensor, wp: te.Tensor, bias: te.Tensor, mult: te.Tensor,
                shifts: te.Tensor, attrs: dict[str, Any]) -> tuple[te.Tensor, te.Tensor]:
    """Depthwise NCHW convolution vectorized over ``L`` channels (``C`` a multiple of
    ``L``): the zero-point-shifted, padded input is re-laid per channel block as
    ``x86_band[n, co, y, x, l]`` (int32), so that each multiply-accumulate reads ``L``
    contiguous channels; requantized by :func:`lane_requant`. Returns (``x86_req``, ``acc``)
    before :func:`unpack_lanes`."""
    from toolchain.topi.int8 import shifted
    from toolchain.topi.nn.conv2d import pad_spatial

    co_n, kh, kw, lanes = (int(d.value) for d in wp.shape)
    sh, sw = attrs["strides"]
    dh, dw = attrs["dilations"]
    pt, pl, pb, pr = attrs["pads"]
    xp = pad_spatial(shifted(x, attrs["x_zero_point"]), (2, 3), (pt, pl), (pb, pr))
    n, _, hp, wdt = (int(d.value) for d in xp.shape)
    band = te.compute((n, co_n, hp, wdt, lanes), lambda b, co, yy, xx, li: te.cast(
        xp[b, co * lanes + li, yy, xx], "int32"), name="x86_band", tag="injective")
    oh, ow = (hp - dh * (kh - 1) - 1) // sh + 1, (wdt - dw * (kw - 1) - 1) // sw + 1
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    acc = te.compute((n, co_n, oh, ow, lanes), lambda b, co, y, xx, li: te.sum(
        band[b, co, y * sh + ry * dh, xx * sw + rx * dw, li] * wp[co, ry, rx, li],
        axis=[ry, rx]), name="x86_acc", tag="conv")
    return lane_requant(acc, bias, mult, shifts, attrs), acc
