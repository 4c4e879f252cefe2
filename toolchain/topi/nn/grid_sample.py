"""GridSample (PyTorch ``grid_sample``) over any number of spatial axes.

Two kinds of stages:

* one coordinate stage per spatial axis ``i``: ``coord_i[n, o...]`` from
  ``grid[n, o..., r-1-i]`` (the grid lists the innermost axis first) — denormalised
  (``align_corners``), rounded half to even for ``nearest``, then clamped (``border``) or
  mirrored (``reflection``) into the axis;
* the output: a reduction over the taps of every axis (1 for nearest, 2 linear, 4 cubic),
  ``Σ Π_i w_i(k_i) · X[n, c, j_0, …]`` with ``j_i = base_i + offset(k_i)``; a tap outside
  the axis reads 0 (``zeros``), the edge (``border``) or its mirror (``reflection``).

Coordinates, weights and the sum are computed in float64, as the registry's reference, and
rounded once to X's dtype.

Example::

    >>> from toolchain import te
    >>> x = te.placeholder((1, 2, 5, 6), name="x"); g = te.placeholder((1, 3, 4, 2), name="g")
    >>> [d.value for d in grid_sample(x, g).shape]
    [1, 2, 3, 4]
"""

from __future__ import annotations

from toolchain import te
from toolchain.errors import OptionError
from toolchain.graph.ops.nn_ext import CUBIC_A, grid_bounds, grid_taps, pads_coordinate
from toolchain.tir import ir
from toolchain.topi.utils import const_shape, scalar

Expr = ir.PrimExpr
_W = "float64"


def _f(v: float) -> Expr:
    return scalar(v, _W)


def _reflect(x: Expr, lo: float, hi: float) -> Expr:
    """Mirror ``x`` at ``lo`` and ``hi`` until it lies between them."""
    rng = hi - lo
    if rng <= 0:
        return _f(lo)
    below = x < _f(lo)
    d = te.select(below, _f(lo) - x, x - _f(hi))
    n = te.trunc(d / _f(rng))
    r = d - n * _f(rng)
    even = te.equal(te.fmod(n, _f(2.0)), _f(0.0))
    low_side = te.select(even, _f(lo) + r, _f(hi) - r)
    high_side = te.select(even, _f(hi) - r, _f(lo) + r)
    return te.select(below, low_side, te.select(x > _f(hi), high_side, x))


def _weight(mode: str, t: Expr, k: int) -> Expr:
    if mode == "nearest":
        return _f(1.0)
    if mode == "linear":
        return _f(1.0) - t if k == 0 else t
    a = CUBIC_A
    one = _f(1.0)
    if k == 0:
        x1 = t + one
        return ((_f(a) * x1 - _f(5 * a)) * x1 + _f(8 * a)) * x1 - _f(4 * a)
    if k == 1:
        return ((_f(a + 2) * t - _f(a + 3)) * t) * t + one
    x2 = one - t
    if k == 2:
        return ((_f(a + 2) * x2 - _f(a + 3)) * x2) * x2 + one
    x3 = x2 + one
    return ((_f(a) * x3 - _f(5 * a)) * x3 + _f(8 * a)) * x3 - _f(4 * a)


def _select_k(k: Expr, values: list[Expr]) -> Expr:
    out = values[-1]
    for j in range(len(values) - 2, -1, -1):
        out = te.select(te.equal(k, j), values[j], out)
    return out


def grid_sample(x: te.Tensor, grid: te.Tensor, mode: str = "linear",
                padding_mode: str = "zeros", align_corners: bool = False) -> te.Tensor:
    """ONNX GridSample (see the module docstring)."""
    if mode not in ("nearest", "linear", "cubic") or padding_mode not in (
            "zeros", "border", "reflection"):
        raise OptionError(f"grid_sample: mode {mode!r} / padding_mode {padding_mode!r}")
    xs, gs = const_shape(x, "grid_sample"), const_shape(grid, "grid_sample")
    dims = xs[2:]
    r = len(dims)
    out_sp = gs[1:-1]

    def coord(i: int) -> te.Tensor:
        d = dims[i]
        lo, hi = grid_bounds(d, align_corners)

        def f(*i_: Expr) -> Expr:
            n, o = i_[0], i_[1:]
            g = te.cast(grid[(n, *o, ir.IntImm(r - 1 - i))], _W)
            c = ((g + _f(1.0)) / _f(2.0)) * _f(d - 1.0) if align_corners else \
                ((g + _f(1.0)) * _f(float(d)) - _f(1.0)) / _f(2.0)
            if mode == "nearest":
                c = te.round(c)
            if not pads_coordinate(mode):
                return c
            if padding_mode == "border":
                out = ir.Or(c < _f(lo), c > _f(hi))
                c = te.select(out, te.minimum(te.maximum(c, _f(0.0)), _f(d - 1.0)), c)
            elif padding_mode == "reflection":
                c = _reflect(c, lo, hi)
            return c

        return te.compute((gs[0], *out_sp), f, name=f"grid_coord{i}", tag="injective")

    coords = [coord(i) for i in range(r)]
    taps = grid_taps(mode)
    ks = [te.reduce_axis((0, len(taps)), name=f"k{i}") for i in range(r)] if len(taps) > 1 \
        else []

    def body(*i_: Expr) -> Expr:
        n, c, o = i_[0], i_[1], i_[2:]
        weight: Expr = _f(1.0)
        idx: list[Expr] = []
        valid: list[Expr] = []
        for i, d in enumerate(dims):
            v = coords[i][(n, *o)]
            base = te.trunc(v) if mode == "nearest" else te.floor(v)
            k: Expr = ks[i] if ks else ir.IntImm(0)
            j = te.cast(base, "int32") + (k + taps[0] if ks else 0)
            if ks:
                weight = weight * _select_k(k, [_weight(mode, v - base, t)
                                                for t in range(len(taps))])
            if padding_mode == "zeros":
                valid += [j >= 0, j < d]
            elif padding_mode == "reflection":
                j = te.cast(te.trunc(_reflect(te.cast(j, _W), *grid_bounds(d, align_corners))),
                            "int32")
            idx.append(te.minimum(te.maximum(j, 0), d - 1))
        pixel = te.cast(x[(n, c, *idx)], _W)
        if valid:
            pixel = te.select(te.all(*valid), pixel, _f(0.0))
        term = weight * pixel
        return te.sum(term, axis=ks) if ks else term

    acc = te.compute((xs[0], xs[1], *out_sp), body, name="grid_sample_acc",
                     tag="reduce" if ks else "injective")
    return te.compute(acc.shape, lambda *i: te.cast(acc[i], x.dtype), name="grid_sample",
                      tag="elemwise")


def affine_grid(theta: te.Tensor, spatial: tuple[int, ...], align_corners: bool = False
                ) -> te.Tensor:
    """ONNX AffineGrid: ``grid[n, o..., k] = Σ_j theta[n, k, j] · base_j(o)`` with the base
    point ``(x, y, [z,] 1)`` of output position ``o`` (x on the innermost axis)."""
    r = len(spatial)
    nb = const_shape(theta, "affine_grid")[0]
    dt = theta.dtype

    def coord(i: Expr, n: int) -> Expr:
        v = te.cast(i, _W)
        if align_corners:
            return _f(-1.0) + v * _f(2.0 / (n - 1)) if n > 1 else _f(-1.0)
        return _f(-1.0) + (v * _f(2.0) + _f(1.0)) / _f(float(n))

    def f(*i: Expr) -> Expr:
        n, o, k = i[0], i[1:-1], i[-1]
        base = [coord(o[r - 1 - j], spatial[r - 1 - j]) for j in range(r)] + [_f(1.0)]
        acc: Expr | None = None
        for j, bj in enumerate(base):
            term = te.cast(theta[(n, k, ir.IntImm(j))], _W) * bj
            acc = term if acc is None else acc + term
        assert acc is not None
        return te.cast(acc, dt)

    return te.compute((nb, *spatial, r), f, name="affine_grid", tag="injective")
