"""Pooling over the trailing spatial axes of ``[N, C, *spatial]`` (1-D, 2-D, 3-D, …):
max / average with strides, dilations, explicit pads, ``ceil_mode`` and
``count_include_pad``; global max / average pools; max-pool ``Indices``.

A pooling op is a pad stage (``-inf`` / the dtype's minimum for max, ``0`` for average;
omitted without padding) and a ``te.max`` / ``te.sum`` over the window. Average pooling
divides by the number of cells that count, computed in closed form per axis — cells
inside the input always count, cells in the model's pads count with
``count_include_pad``, cells added by ``ceil_mode`` never count:

    count_axis(o) = #{t in [0, k) : lo <= o*s - pb + t*d < hi}

Example::

    >>> from toolchain import te
    >>> x = te.placeholder((1, 2, 7, 7), name="x")
    >>> y = pool(x, "max", kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1), ceil_mode=True)
    >>> [d.value for d in y.shape]
    [1, 2, 4, 4]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from toolchain import te
from toolchain.errors import OptionError
from toolchain.tir import ir
from toolchain.topi.nn.conv2d import pad_spatial
from toolchain.topi.utils import const_shape, lowest, scalar, window_index

Expr = ir.PrimExpr


def pool_geometry(spatial: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                  dilations: Sequence[int], pads: Sequence[int], ceil_mode: bool
                  ) -> tuple[list[int], list[int], list[int]]:
    """(output extents, pads_begin, pads_end incl. the ceil-mode extension) — ONNX rules:
    with ``ceil_mode`` a last window that would start inside the end padding is dropped."""
    r = len(spatial)
    out, pb, pe = [], [], []
    for i in range(r):
        k_eff = (kernel[i] - 1) * dilations[i] + 1
        b, e = pads[i], pads[r + i]
        span = spatial[i] + b + e - k_eff
        s = strides[i]
        if span < 0:
            raise OptionError(f"pool: window {k_eff} does not fit the padded axis "
                              f"{spatial[i]} + {b} + {e}")
        if ceil_mode:
            n = -(-span // s) + 1
            if (n - 1) * s >= spatial[i] + b:
                n -= 1
        else:
            n = span // s + 1
        extra = max(0, (n - 1) * s + k_eff - (spatial[i] + b + e))
        out.append(n)
        pb.append(b)
        pe.append(e + extra)
    return out, pb, pe


def _axis_count(o: Expr, n: int, k: int, s: int, d: int, b: int, e: int,
                include_pad: bool) -> Expr:
    lo = -b if include_pad else 0
    hi = n + (e if include_pad else 0)
    start = o * s - b
    t_min = te.maximum(te.floordiv(lo - start + (d - 1), d), 0)
    t_max = te.minimum(te.floordiv(hi - 1 - start, d), k - 1)
    return te.maximum(t_max - t_min + 1, 0)


def pool(x: te.Tensor, kind: str, kernel: Sequence[int], strides: Sequence[int] | None = None,
         dilations: Sequence[int] | None = None, pads: Sequence[int] | None = None,
         ceil_mode: bool = False, count_include_pad: bool = False) -> te.Tensor:
    """Max (``kind="max"``) or average (``"avg"``) pooling; ``pads`` is
    ``[begin..., end...]`` over the spatial axes."""
    if kind not in ("max", "avg"):
        raise OptionError(f"pool: kind {kind!r} must be 'max' or 'avg'")
    shape = const_shape(x, f"{kind}_pool")
    nsp = len(kernel)
    spatial = shape[2:]
    if len(spatial) != nsp:
        raise OptionError(f"pool: input {list(shape)} needs {nsp} spatial axes for kernel "
                          f"{list(kernel)}")
    strides = list(strides or [1] * nsp)
    dilations = list(dilations or [1] * nsp)
    pads = list(pads or [0] * 2 * nsp)
    out, pb, pe = pool_geometry(spatial, kernel, strides, dilations, pads, ceil_mode)
    dt = x.dtype
    fill = lowest(dt)
    if kind == "max" and (any(pb) or any(pe)):
        edge = all(d == 1 for d in dilations) and all(
            b < k and e < k for b, e, k in zip(pb, pe, kernel, strict=True))
        padded = _clamp_edges(x, pb, pe) if edge else _pad_with(x, pb, pe, fill)
    elif kind == "max":
        padded = x
    else:
        padded = pad_spatial(x, tuple(range(2, 2 + nsp)), pb, pe, 0.0, name="pad")
    r = [te.reduce_axis((0, kernel[i]), name=f"r{i}") for i in range(nsp)]

    def window(i: Sequence[Expr]) -> tuple[Expr, ...]:
        return tuple(i[:2]) + tuple(window_index(i[2 + a], strides[a], r[a], dilations[a])
                                    for a in range(nsp))

    if kind == "max":
        return te.compute(tuple(shape[:2]) + tuple(out), lambda *i: te.max(
            padded[window(i)], axis=r, init=lowest(dt)), name="max_pool", tag="pool_max")
    total = te.compute(tuple(shape[:2]) + tuple(out), lambda *i: te.sum(
        padded[window(i)], axis=r), name="avg_pool_sum", tag="pool_sum")
    mpe = pads[nsp:]
    const_count = (count_include_pad or not any(pads)) and all(
        e == m for e, m in zip(pe, mpe, strict=True))

    def divide(*i: Expr) -> Expr:
        if const_count:
            return total[i] / scalar(math.prod(kernel), dt)
        cnt: Expr | None = None
        for a in range(nsp):
            c = _axis_count(i[2 + a], spatial[a], kernel[a], strides[a], dilations[a], pb[a],
                            mpe[a], count_include_pad)
            cnt = c if cnt is None else cnt * c
        assert cnt is not None
        return total[i] / te.cast(te.maximum(cnt, 1), dt)

    return te.compute(total.shape, divide, name="avg_pool", tag="pool_avg")


def _pad_with(x: te.Tensor, pb: Sequence[int], pe: Sequence[int], fill: Expr) -> te.Tensor:
    shape = const_shape(x)
    nsp = len(pb)
    out = tuple(shape[:2]) + tuple(s + b + e for s, b, e in zip(shape[2:], pb, pe,
                                                                 strict=True))

    def f(*i: Expr) -> Expr:
        conds, idx = [], list(i[:2])
        for a in range(nsp):
            v = i[2 + a] - pb[a] if pb[a] else i[2 + a]
            idx.append(v)
            if pb[a]:
                conds.append(v >= 0)
            if pe[a]:
                conds.append(v < shape[2 + a])
        load = x[tuple(idx)]
        return te.if_then_else(te.all(*conds), load, fill) if conds else load

    return te.compute(out, f, name="pad", tag="pad")


def _clamp_edges(x: te.Tensor, pb: Sequence[int], pe: Sequence[int]) -> te.Tensor:
    """Max-pool padding by the nearest edge element instead of ``-inf``.

    Same maximum whenever every window is contiguous (dilation 1) and holds at least one
    input element (pads smaller than the kernel): the edge element a padded cell repeats
    is then in the same window. The load needs no bounds test, so the window's ``max``
    over a channel block is a straight vector loop for the C compiler (a guarded load
    per cell kept it scalar)."""
    shape = const_shape(x)
    nsp = len(pb)
    out = tuple(shape[:2]) + tuple(s + b + e for s, b, e in zip(shape[2:], pb, pe,
                                                                 strict=True))

    def f(*i: Expr) -> Expr:
        idx = list(i[:2])
        for a in range(nsp):
            v = i[2 + a] - pb[a] if pb[a] else i[2 + a]
            if pb[a]:
                v = te.maximum(v, 0)
            if pe[a]:
                v = te.minimum(v, shape[2 + a] - 1)
            idx.append(v)
        return x[tuple(idx)]

    return te.compute(out, f, name="pad", tag="pad")


def max_pool_indices(x: te.Tensor, pooled: te.Tensor, kernel: Sequence[int],
                     strides: Sequence[int] | None = None,
                     dilations: Sequence[int] | None = None,
                     pads: Sequence[int] | None = None, ceil_mode: bool = False,
                     storage_order: int = 0) -> te.Tensor:
    """ONNX MaxPool ``Indices``: the int64 flat index into ``x`` of the first window cell
    (in window order) equal to the maximum ``pooled``; the spatial part of the index is
    row-major (``storage_order=0``) or column-major (``1``).

    Two stages: ``max_pool_first_tap`` (the smallest window position holding the maximum)
    and ``max_pool_indices`` (that position turned into the flat index).
    """
    shape = const_shape(x, "max_pool_indices")
    nsp = len(kernel)
    spatial = shape[2:]
    strides = list(strides or [1] * nsp)
    dilations = list(dilations or [1] * nsp)
    pads = list(pads or [0] * 2 * nsp)
    out, pb, _ = pool_geometry(spatial, kernel, strides, dilations, pads, ceil_mode)
    r = [te.reduce_axis((0, kernel[i]), name=f"r{i}") for i in range(nsp)]
    ntaps = math.prod(kernel)
    oshape = tuple(shape[:2]) + tuple(out)

    def first_tap(*i: Expr) -> Expr:
        pos = [i[2 + a] * strides[a] - pb[a] + r[a] * dilations[a] for a in range(nsp)]
        inside = te.all(*[te.all(p >= 0, p < spatial[a]) for a, p in enumerate(pos)])
        clamped = tuple(te.minimum(te.maximum(p, 0), spatial[a] - 1)
                        for a, p in enumerate(pos))
        tap: Expr = r[0]
        for a in range(1, nsp):
            tap = tap * kernel[a] + r[a]
        hit = te.all(inside, te.equal(x[tuple(i[:2]) + clamped], pooled[i]))
        return te.min(te.select(hit, tap, ntaps), axis=r)

    first = te.compute(oshape, first_tap, name="max_pool_first_tap", tag="pool_max")
    # element strides of the spatial axes in the flat index
    order = range(nsp - 1, -1, -1) if storage_order == 0 else range(nsp)
    elem = [0] * nsp
    acc = 1
    for a in order:
        elem[a] = acc
        acc *= spatial[a]

    def index(*i: Expr) -> Expr:
        t = first[i]
        flat: Expr = te.cast((i[0] * shape[1] + i[1]) * math.prod(spatial), "int64")
        rest = t
        for a in range(nsp - 1, -1, -1):
            ka = te.floormod(rest, kernel[a]) if a > 0 else rest
            rest = te.floordiv(rest, kernel[a])
            p = i[2 + a] * strides[a] - pb[a] + ka * dilations[a]
            flat = flat + te.cast(p * elem[a], "int64")
        return flat

    return te.compute(oshape, index, name="max_pool_indices", tag="pool_max")


def global_pool(x: te.Tensor, kind: str) -> te.Tensor:
    """Reduce every spatial axis of ``[N, C, *spatial]`` to 1 (``kind`` max or avg)."""
    shape = const_shape(x, f"global_{kind}_pool")
    r = [te.reduce_axis((0, d), name=f"r{a}") for a, d in enumerate(shape[2:])]
    out = tuple(shape[:2]) + (1,) * len(r)

    def idx(i: Sequence[Expr]) -> tuple[Expr, ...]:
        return tuple(i[:2]) + tuple(r)

    if kind == "max":
        return te.compute(out, lambda *i: te.max(x[idx(i)], axis=r, init=lowest(x.dtype)),
                          name="global_max_pool", tag="pool_max")
    total = te.compute(out, lambda *i: te.sum(x[idx(i)], axis=r), name="global_avg_pool_sum",
                       tag="pool_sum")
    n = math.prod(shape[2:])
    return te.compute(out, lambda *i: total[i] / scalar(n, x.dtype), name="global_avg_pool",
                      tag="pool_avg")
