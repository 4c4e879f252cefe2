"""LRN, LpNormalization, LpPool and Col2Im computes (ops of
:mod:`toolchain.graph.ops.nn_ext`).

* ``lrn``: a sum of squares over a channel window (a reduction of ``size`` taps, clipped to
  the tensor by a guarded load), then ``x / (bias + alpha/size · s)^beta`` — float16 is
  computed in float32;
* ``lp_normalize``: a sum of ``|x|`` or ``x²`` along the axis, then ``x / norm`` (0 where
  the norm is 0);
* ``lp_pool``: zero padding (with the ceil-mode extension), ``Σ_window |x|^p``, then the
  p-th root (``sqrt`` for p = 2, none for p = 1).

Example::

    >>> from toolchain import te
    >>> x = te.placeholder((1, 3, 7, 7), name="x")
    >>> [d.value for d in lp_pool(x, 2, (3, 3), (2, 2), pads=(1, 1, 1, 1)).shape]
    [1, 3, 4, 4]
"""

from __future__ import annotations

from collections.abc import Sequence

from toolchain import te
from toolchain.errors import OptionError
from toolchain.graph.ops.nn_ext import Col2ImPlan
from toolchain.tir import ir
from toolchain.topi.nn.conv2d import pad_spatial
from toolchain.topi.nn.pooling import pool_geometry
from toolchain.topi.utils import const_shape, ravel, scalar, window_index

Expr = ir.PrimExpr


def _work(dtype: str) -> str:
    return "float32" if dtype == "float16" else dtype


def lrn(x: te.Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0
        ) -> te.Tensor:
    """Local response normalisation across channels (axis 1) of ``[N, C, *spatial]``."""
    shape = const_shape(x, "lrn")
    if size < 1:
        raise OptionError(f"lrn: size {size} must be >= 1")
    c = shape[1]
    below = (size - 1) // 2
    wt = _work(x.dtype)
    r = te.reduce_axis((0, size), name="r")

    def sq(*i: Expr) -> Expr:
        ch = i[1] + (r - below)
        ok = te.all(ch >= 0, ch < c)
        v = te.cast(x[(i[0], te.minimum(te.maximum(ch, 0), c - 1)) + tuple(i[2:])], wt)
        return te.sum(te.select(ok, v * v, scalar(0, wt)), axis=r)

    s = te.compute(shape, sq, name="lrn_sum", tag="reduce")

    def f(*i: Expr) -> Expr:
        base = scalar(bias, wt) + scalar(alpha / size, wt) * s[i]
        y = te.cast(x[i], wt) / te.power(base, scalar(beta, wt))
        return te.cast(y, x.dtype) if wt != x.dtype else y

    return te.compute(shape, f, name="lrn", tag="injective")


def lp_normalize(x: te.Tensor, axis: int = -1, p: int = 2) -> te.Tensor:
    """``x / ‖x‖_p`` along ``axis`` (p 1 or 2); 0 where the norm is 0."""
    if p not in (1, 2):
        raise OptionError(f"lp_normalize: p = {p} must be 1 or 2")
    shape = const_shape(x, "lp_normalize")
    ax = axis % len(shape)
    wt = _work(x.dtype)
    k = te.reduce_axis((0, shape[ax]), name="k")

    def norm(*i: Expr) -> Expr:
        v = te.cast(x[tuple(i[:ax]) + (k,) + tuple(i[ax + 1:])], wt)
        return te.sum(te.abs(v) if p == 1 else v * v, axis=k)

    nshape = tuple(1 if d == ax else n for d, n in enumerate(shape))
    s = te.compute(nshape, norm, name="lp_norm", tag="reduce")

    def f(*i: Expr) -> Expr:
        at = tuple(ir.IntImm(0) if d == ax else v for d, v in enumerate(i))
        n = s[at] if p == 1 else te.sqrt(s[at])
        zero = scalar(0, wt)
        y = te.select(te.equal(n, zero), zero, te.cast(x[i], wt) / n)
        return te.cast(y, x.dtype) if wt != x.dtype else y

    return te.compute(shape, f, name="lp_normalize", tag="injective")


def lp_pool(x: te.Tensor, p: int, kernel: Sequence[int], strides: Sequence[int] | None = None,
            dilations: Sequence[int] | None = None, pads: Sequence[int] | None = None,
            ceil_mode: bool = False) -> te.Tensor:
    """``(Σ_window |x|^p)^(1/p)`` over the trailing spatial axes; ``pads`` is
    ``[begin..., end...]``; padding cells are zeros."""
    if p < 1:
        raise OptionError(f"lp_pool: p = {p} must be >= 1")
    shape = const_shape(x, "lp_pool")
    nsp = len(kernel)
    strides = list(strides or [1] * nsp)
    dilations = list(dilations or [1] * nsp)
    pads = list(pads or [0] * 2 * nsp)
    out, pb, pe = pool_geometry(shape[2:], kernel, strides, dilations, pads, ceil_mode)
    padded = pad_spatial(x, tuple(range(2, 2 + nsp)), pb, pe, 0.0, name="pad")
    r = [te.reduce_axis((0, kernel[i]), name=f"r{i}") for i in range(nsp)]
    dt = x.dtype

    def power(v: Expr) -> Expr:
        if p == 1:
            return te.abs(v)
        if p == 2:
            return v * v
        return te.power(te.abs(v), scalar(p, dt))

    def total(*i: Expr) -> Expr:
        idx = tuple(i[:2]) + tuple(window_index(i[2 + a], strides[a], r[a], dilations[a])
                                   for a in range(nsp))
        return te.sum(power(padded[idx]), axis=r)

    s = te.compute(tuple(shape[:2]) + tuple(out), total, name="lp_pool_sum", tag="pool_sum")

    def root(*i: Expr) -> Expr:
        v = s[i]
        if p == 1:
            return v
        if p == 2:
            return te.sqrt(v)
        return te.power(v, scalar(1.0 / p, dt))

    return te.compute(s.shape, root, name="lp_pool", tag="pool_avg")


def col2im(x: te.Tensor, plan: Col2ImPlan) -> te.Tensor:
    """ONNX Col2Im as a gather: image element ``y`` sums the column entries of every block
    offset ``k`` whose block position ``(y + pad - k·dilation) / stride`` is a whole number
    inside the grid of positions (a reduction over the block offsets)."""
    shape = const_shape(x, "col2im")
    r = len(plan.image)
    kk = 1
    for b in plan.block:
        kk *= b
    ks = [te.reduce_axis((0, b), name=f"k{d}") for d, b in enumerate(plan.block)]
    dt = x.dtype
    acc_dt = _work(dt)

    def f(*i: Expr) -> Expr:
        n, c, y = i[0], i[1], i[2:]
        conds: list[Expr] = []
        pos: list[Expr] = []
        for d in range(r):
            q = y[d] + plan.pads[d] - ks[d] * plan.dilations[d]
            s_d = plan.strides[d]
            p = te.floordiv(q, s_d) if s_d > 1 else q
            if s_d > 1:
                conds.append(te.equal(te.floormod(q, s_d), 0))
            conds += [q >= 0, p < plan.positions[d]]
            pos.append(te.minimum(te.maximum(p, 0), plan.positions[d] - 1))
        row = c * kk + ravel(list(ks), list(plan.block))
        col = ravel(pos, list(plan.positions))
        v = te.cast(x[(n, row, col)], acc_dt)
        return te.sum(te.select(te.all(*conds), v, scalar(0, acc_dt)), axis=ks)

    out = te.compute((shape[0], shape[1] // kk) + plan.image, f, name="col2im", tag="reduce")
    if acc_dt == dt:
        return out
    return te.compute(out.shape, lambda *i: te.cast(out[i], dt), name="col2im_cast",
                      tag="elemwise")
