"""Data movement: transpose, reshape, flatten, squeeze/unsqueeze, concat, split, slice,
pad, gather, tile, expand, resize (in :mod:`toolchain.topi.resize`, re-exported here), and
layout transforms (NCHW ↔ NHWC ↔ NCHW[x]c).

Every function is one (or, for ``split``, several) injective ``te.compute``. Reads that
may fall outside an input (concat, constant padding, channel padding of a blocked layout)
are guarded with ``te.if_then_else`` so the load is only evaluated where it is in range.

Example::

    >>> from toolchain import te
    >>> x = te.placeholder((1, 6, 4, 4), name="x")
    >>> y = layout_transform(x, "NCHW", "NCHW4c")
    >>> [d.value for d in y.shape]
    [1, 2, 4, 4, 4]
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np

from toolchain import te
from toolchain.errors import OptionError
from toolchain.tir import ir
from toolchain.topi.resize import resize  # noqa: F401 - part of this family's API
from toolchain.topi.utils import (
    broadcast_index,
    broadcast_shape,
    const_shape,
    ravel,
    scalar,
    unravel,
)

Expr = ir.PrimExpr


def transpose(x: te.Tensor, perm: Sequence[int] | None = None) -> te.Tensor:
    """Permute axes: ``out.shape[k] = x.shape[perm[k]]`` (default: reversed)."""
    shape = const_shape(x, "transpose")
    perm = tuple(perm) if perm else tuple(range(len(shape) - 1, -1, -1))
    if sorted(perm) != list(range(len(shape))):
        raise OptionError(f"transpose: perm {list(perm)} is not a permutation of "
                          f"0..{len(shape) - 1}")
    inv = [perm.index(d) for d in range(len(shape))]
    return te.compute(tuple(shape[p] for p in perm) or (1,),
                      lambda *i: x[tuple(i[inv[d]] for d in range(len(shape)))] if shape
                      else x[i], name="transpose", tag="injective")


def reshape(x: te.Tensor, newshape: Sequence[int], name: str = "reshape") -> te.Tensor:
    """Row-major reshape to ``newshape`` (static, no ``-1``/``0`` left).

    Rank-0 shapes are ``(1,)``; an unchanged shape still makes a copy stage.
    """
    shape = const_shape(x, name)
    newshape = tuple(int(d) for d in newshape)
    if math.prod(shape) != math.prod(newshape):
        raise OptionError(f"{name}: cannot reshape {list(shape)} to {list(newshape)}")
    src = shape or (1,)
    dst = newshape or (1,)
    if src == dst:
        return te.compute(dst, lambda *i: x[i], name=name, tag="injective")
    return te.compute(dst, lambda *i: x[unravel(ravel(i, dst), src)], name=name,
                      tag="injective")


def flatten(x: te.Tensor, axis: int = 1) -> te.Tensor:
    """To 2-D: ``[prod(shape[:axis]), prod(shape[axis:])]``."""
    shape = const_shape(x, "flatten")
    axis = axis + len(shape) if axis < 0 else axis
    return reshape(x, (math.prod(shape[:axis]), math.prod(shape[axis:])), "flatten")


def squeeze(x: te.Tensor, axes: Sequence[int] | None = None) -> te.Tensor:
    """Remove size-1 axes (all of them when ``axes`` is ``None``)."""
    shape = const_shape(x, "squeeze")
    axes = [a % len(shape) for a in axes] if axes is not None else \
        [d for d, s in enumerate(shape) if s == 1]
    for a in axes:
        if shape[a] != 1:
            raise OptionError(f"squeeze: axis {a} of {list(shape)} has size {shape[a]}, not 1")
    keep = [d for d in range(len(shape)) if d not in axes]

    def f(*i: Expr) -> Expr:
        it = iter(i)
        return x[tuple(ir.IntImm(0) if d in axes else next(it) for d in range(len(shape)))]

    out = tuple(shape[d] for d in keep)
    if not out:
        return te.compute((1,), lambda i: x[(ir.IntImm(0),) * len(shape)], name="squeeze",
                          tag="injective")
    return te.compute(out, f, name="squeeze", tag="injective")


def unsqueeze(x: te.Tensor, axes: Sequence[int]) -> te.Tensor:
    """Insert size-1 axes at ``axes`` (positions in the output)."""
    shape = const_shape(x, "unsqueeze")
    rank = len(shape) + len(axes)
    axes = sorted(a % rank for a in axes)
    out = []
    it = iter(shape)
    for d in range(rank):
        out.append(1 if d in axes else next(it))

    def f(*i: Expr) -> Expr:
        idx = tuple(i[d] for d in range(rank) if d not in axes)
        return x[idx] if shape else x[(ir.IntImm(0),)]

    return te.compute(tuple(out), f, name="unsqueeze", tag="injective")


def concat(xs: Sequence[te.Tensor], axis: int = 0) -> te.Tensor:
    """Join along ``axis``; each input is read only inside its own range."""
    shapes = [const_shape(t, "concat") for t in xs]
    rank = len(shapes[0])
    axis = axis % rank
    offsets = np.cumsum([0] + [s[axis] for s in shapes]).tolist()
    out = list(shapes[0])
    out[axis] = offsets[-1]
    parts = [(t, o) for t, o, s in zip(xs, offsets, shapes, strict=False) if s[axis] > 0]

    def f(*i: Expr) -> Expr:
        t, o = parts[-1]
        val = t[tuple(i[d] - o if d == axis and o else i[d] for d in range(rank))]
        for t, o in reversed(parts[:-1]):
            end = o + const_shape(t)[axis]
            idx = tuple(i[d] - o if d == axis and o else i[d] for d in range(rank))
            val = te.if_then_else(i[axis] < end, t[idx], val)
        return val

    return te.compute(tuple(out), f, name="concat", tag="injective")


def strided_slice(x: te.Tensor, begin: Sequence[int], end: Sequence[int],
                  strides: Sequence[int] | None = None, name: str = "slice") -> te.Tensor:
    """``x[b0:e0:s0, b1:e1:s1, ...]`` with already clamped, non-negative ``begin``
    (``end`` may be -1 for a negative step running to the front); one value per axis."""
    shape = const_shape(x, name)
    strides = list(strides) if strides is not None else [1] * len(shape)
    out = tuple(len(range(b, e, s)) for b, e, s in zip(begin, end, strides, strict=True))

    def f(*i: Expr) -> Expr:
        return x[tuple(i[d] * strides[d] + begin[d] if (strides[d], begin[d]) != (1, 0)
                       else i[d] for d in range(len(shape)))]

    return te.compute(out or (1,), f, name=name, tag="injective")


def split(x: te.Tensor, sizes: Sequence[int], axis: int = 0) -> list[te.Tensor]:
    """Split into chunks of ``sizes`` along ``axis`` (one compute per chunk)."""
    shape = const_shape(x, "split")
    axis = axis % len(shape)
    if sum(sizes) != shape[axis]:
        raise OptionError(f"split: sizes {list(sizes)} do not sum to axis {axis}'s length "
                          f"{shape[axis]}")
    outs = []
    start = 0
    for k, s in enumerate(sizes):
        b = [0] * len(shape)
        e = list(shape)
        b[axis], e[axis] = start, start + s
        outs.append(strided_slice(x, b, e, name=f"split_{k}"))
        start += s
    return outs


def _pad_index(i: Expr, n: int, mode: str) -> Expr:
    """Source index of padded position ``i`` (may be out of [0, n)) for reflect/edge/wrap."""
    if mode == "edge":
        return te.minimum(te.maximum(i, 0), n - 1)
    if mode == "wrap":
        return te.floormod(i, n)
    # reflect (pads < n): mirror without repeating the edge
    j = te.select(i < 0, 0 - i, i)
    return te.select(j >= n, 2 * (n - 1) - j, j)


def pad(x: te.Tensor, pads_before: Sequence[int], pads_after: Sequence[int],
        mode: str = "constant", value: float | Expr = 0.0, name: str = "pad") -> te.Tensor:
    """Pad (or, with negative pads, crop) every axis; ``mode`` constant/edge/reflect/wrap.

    Negative pads crop first, then the positive ones pad the cropped tensor (ONNX Pad).
    """
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise OptionError(f"pad: mode {mode!r} is not constant, edge, reflect or wrap")
    shape = const_shape(x, name)
    crop_b = [max(-p, 0) for p in pads_before]
    crop_e = [max(-p, 0) for p in pads_after]
    pb = [max(p, 0) for p in pads_before]
    pe = [max(p, 0) for p in pads_after]
    inner = [d - cb - ce for d, cb, ce in zip(shape, crop_b, crop_e, strict=True)]
    out = tuple(n + b + e for n, b, e in zip(inner, pb, pe, strict=True))
    val = value if isinstance(value, ir.PrimExpr) else scalar(value, x.dtype)
    if isinstance(val, ir.PrimExpr) and val.dtype != x.dtype:
        val = te.cast(val, x.dtype)

    def f(*i: Expr) -> Expr:
        src = [i[d] - pb[d] if pb[d] else i[d] for d in range(len(shape))]
        if mode == "constant":
            conds = []
            for d in range(len(shape)):
                if pb[d]:
                    conds.append(src[d] >= 0)
                if pe[d]:
                    conds.append(src[d] < inner[d])
            load = x[tuple(s + cb if cb else s for s, cb in zip(src, crop_b, strict=True))]
            return te.if_then_else(te.all(*conds), load, val) if conds else load
        idx = []
        for d in range(len(shape)):
            s = _pad_index(src[d], inner[d], mode) if (pb[d] or pe[d]) else src[d]
            idx.append(s + crop_b[d] if crop_b[d] else s)
        return x[tuple(idx)]

    return te.compute(out or (1,), f, name=name, tag="pad")


def gather(data: te.Tensor, indices: te.Tensor, axis: int = 0,
           scalar_index: bool = False) -> te.Tensor:
    """``np.take(data, indices, axis)``; negative indices count from the back.

    ``scalar_index`` reads a one-element ``indices`` as a rank-0 index (the axis is
    removed). Out-of-range indices are undefined (the registry rejects constant ones).
    """
    ds = const_shape(data, "gather")
    ishape = () if scalar_index else const_shape(indices, "gather")
    axis = axis % len(ds)
    n = ds[axis]
    out = ds[:axis] + ishape + ds[axis + 1:]

    def f(*i: Expr) -> Expr:
        if not out:  # a rank-0 result is computed as shape (1,): its index is no data index
            i = ()
        ii = i[axis:axis + len(ishape)] if ishape else (ir.IntImm(0),)
        k = te.cast(indices[ii], "int32")
        k = te.select(k < 0, k + n, k)
        return data[tuple(i[:axis]) + (k,) + tuple(i[axis + len(ishape):])]

    return te.compute(out or (1,), f, name="gather", tag="injective")


def tile(x: te.Tensor, repeats: Sequence[int]) -> te.Tensor:
    """Repeat ``x`` ``repeats[d]`` times along each axis."""
    shape = const_shape(x, "tile")
    out = tuple(d * r for d, r in zip(shape, repeats, strict=True))
    return te.compute(out or (1,), lambda *i: x[tuple(
        te.floormod(i[d], shape[d]) if repeats[d] > 1 and shape[d] > 1 else
        (ir.IntImm(0) if shape[d] == 1 else i[d]) for d in range(len(shape)))] if shape
        else x[i], name="tile", tag="injective")


def expand(x: te.Tensor, shape: Sequence[int]) -> te.Tensor:
    """Bidirectional (numpy) broadcast of ``x`` with ``shape``."""
    out = broadcast_shape([const_shape(x, "expand"), tuple(shape)], "expand")
    return te.compute(out or (1,), lambda *i: x[broadcast_index(x, i)], name="expand",
                      tag="broadcast")


# -- layout transforms ----------------------------------------------------------------------

_LAYOUT = re.compile(r"^(NCHW|NHWC)(?:(\d+)c)?$")


def _parse_layout(layout: str) -> tuple[str, int]:
    m = _LAYOUT.match(layout)
    if not m or (m.group(1) == "NHWC" and m.group(2)):
        raise OptionError(f"layout_transform: layout {layout!r} is not NCHW, NHWC or "
                          "NCHW<x>c (e.g. NCHW8c)")
    return m.group(1), int(m.group(2) or 0)


def layout_transform(x: te.Tensor, src: str, dst: str, channels: int | None = None
                     ) -> te.Tensor:
    """Convert data between ``NCHW``, ``NHWC`` and blocked ``NCHW<x>c``.

    Into a blocked layout the channel count is zero-padded up to a multiple of ``x``; out
    of one, ``channels`` (default: all, padding included) says how many to keep.
    """
    s_base, s_blk = _parse_layout(src)
    d_base, d_blk = _parse_layout(dst)
    shape = const_shape(x, "layout_transform")
    if s_blk:
        n, cb, h, w, _ = shape
        c = channels if channels is not None else cb * s_blk
    elif s_base == "NCHW":
        n, c, h, w = shape
    else:
        n, h, w, c = shape

    def read(nn: Expr, cc: Expr, hh: Expr, ww: Expr) -> Expr:
        if s_blk:
            return x[nn, te.floordiv(cc, s_blk), hh, ww, te.floormod(cc, s_blk)]
        if s_base == "NCHW":
            return x[nn, cc, hh, ww]
        return x[nn, hh, ww, cc]

    name = f"layout_{src}_to_{dst}"
    if d_blk:
        cb = -(-c // d_blk)

        def fb(nn: Expr, co: Expr, hh: Expr, ww: Expr, ci: Expr) -> Expr:
            cc = co * d_blk + ci
            if c % d_blk == 0:
                return read(nn, cc, hh, ww)
            return te.if_then_else(cc < c, read(nn, cc, hh, ww), scalar(0, x.dtype))

        return te.compute((n, cb, h, w, d_blk), fb, name=name, tag="layout_transform")
    if d_base == "NCHW":
        return te.compute((n, c, h, w), lambda nn, cc, hh, ww: read(nn, cc, hh, ww),
                          name=name, tag="layout_transform")
    return te.compute((n, h, w, c), lambda nn, hh, ww, cc: read(nn, cc, hh, ww),
                      name=name, tag="layout_transform")


def kernel_layout_transform(w: te.Tensor, ib: int, ob: int) -> te.Tensor:
    """OIHW → ``OIHW{ib}i{ob}o``: ``[O/ob, I/ib, KH, KW, ib, ob]``, zero-padded channels."""
    o, i, kh, kw = const_shape(w, "kernel_layout_transform")
    obn, ibn = -(-o // ob), -(-i // ib)

    def f(oo: Expr, io: Expr, y: Expr, xx: Expr, ii: Expr, oi: Expr) -> Expr:
        oc, ic = oo * ob + oi, io * ib + ii
        conds = ([oc < o] if o % ob else []) + ([ic < i] if i % ib else [])
        load = w[oc, ic, y, xx]
        return te.if_then_else(te.all(*conds), load, scalar(0, w.dtype)) if conds else load

    return te.compute((obn, ibn, kh, kw, ib, ob), f, name=f"kernel_OIHW{ib}i{ob}o",
                      tag="layout_transform")


def pack_kernel_nchwc(w: np.ndarray, ib: int, ob: int) -> np.ndarray:
    """numpy: OIHW weights → ``OIHW{ib}i{ob}o`` (zero-padded), for compile-time packing."""
    o, i, kh, kw = w.shape
    obn, ibn = -(-o // ob), -(-i // ib)
    p = np.zeros((obn * ob, ibn * ib, kh, kw), w.dtype)
    p[:o, :i] = w
    return np.ascontiguousarray(p.reshape(obn, ob, ibn, ib, kh, kw).transpose(0, 2, 4, 5, 3, 1))
