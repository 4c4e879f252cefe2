"""Compute definitions of the ops of :mod:`toolchain.graph.ops.transform_ext`:
DepthToSpace, SpaceToDepth, Trilu, Size, Range, OneHot, CumSum, GatherElements, GatherND,
ScatterElements and ScatterND.

The data-movement ops are one injective ``te.compute`` each (index arithmetic only).
Run-time indices are wrapped (negative ones count from the back) and then clamped into
range, so a kernel never touches memory outside its buffers whatever the indices hold (ONNX
leaves out-of-range indices undefined; constant ones are rejected at compile time).

Scans and scatters are written as reductions over the output, as TVM's TE can express
them without sequential loops:

* ``cumsum``: ``out[i] = sum_k x[k]`` (or the product) over ``k <= i`` (``<`` exclusive,
  ``>=`` reverse) —
  O(n²) along the axis, fine for the short axes models scan;
* ``scatter_elements`` / ``scatter_nd``: for each output element, a reduction over the
  updates that land on it: with ``reduction="none"`` the *last* such update (the largest
  update position, as ONNX's sequential definition gives), else their sum / product /
  max / min combined with the data element.  O(|data| · updates-per-axis) for
  ScatterElements, O(|data| · |update rows|) for ScatterND.

Example::

    >>> from toolchain import te
    >>> x = te.placeholder((1, 8, 2, 3), name="x")
    >>> [d.value for d in depth_to_space(x, 2, "CRD").shape]
    [1, 2, 4, 6]
"""

from __future__ import annotations

from collections.abc import Sequence

from toolchain import te
from toolchain.errors import OptionError
from toolchain.tir import ir
from toolchain.topi.reduction import product
from toolchain.topi.utils import const_shape, highest, lowest, ravel, scalar, unravel

Expr = ir.PrimExpr


def _index(v: Expr, n: int) -> Expr:
    """A run-time index into an axis of length ``n``: wrapped, then clamped to [0, n)."""
    k = te.cast(v, "int32")
    k = te.select(k < 0, k + n, k)
    return te.minimum(te.maximum(k, ir.IntImm(0)), ir.IntImm(n - 1))


def depth_to_space(x: te.Tensor, blocksize: int, mode: str = "DCR") -> te.Tensor:
    """(N, C, H, W) -> (N, C/b², H·b, W·b); ``mode`` DCR or CRD (ONNX DepthToSpace)."""
    n, c, h, w = const_shape(x, "depth_to_space")
    b = blocksize
    if mode not in ("DCR", "CRD") or c % (b * b):
        raise OptionError(f"depth_to_space: mode {mode!r} / channels {c} vs blocksize {b}")
    oc = c // (b * b)

    def f(ni: Expr, ci: Expr, y: Expr, xi: Expr) -> Expr:
        i, j = te.floormod(y, b), te.floormod(xi, b)
        ch = (i * b + j) * oc + ci if mode == "DCR" else ci * (b * b) + i * b + j
        return x[ni, ch, te.floordiv(y, b), te.floordiv(xi, b)]

    return te.compute((n, oc, h * b, w * b), f, name="depth_to_space", tag="injective")


def space_to_depth(x: te.Tensor, blocksize: int, mode: str = "DCR") -> te.Tensor:
    """(N, C, H, W) -> (N, C·b², H/b, W/b); the inverse of :func:`depth_to_space`."""
    n, c, h, w = const_shape(x, "space_to_depth")
    b = blocksize
    if mode not in ("DCR", "CRD") or h % b or w % b:
        raise OptionError(f"space_to_depth: mode {mode!r} / {h}x{w} vs blocksize {b}")

    def f(ni: Expr, oc: Expr, y: Expr, xi: Expr) -> Expr:
        if mode == "DCR":
            blk, ci = te.floordiv(oc, c), te.floormod(oc, c)
        else:
            ci, blk = te.floordiv(oc, b * b), te.floormod(oc, b * b)
        i, j = te.floordiv(blk, b), te.floormod(blk, b)
        return x[ni, ci, y * b + i, xi * b + j]

    return te.compute((n, c * b * b, h // b, w // b), f, name="space_to_depth", tag="injective")


def trilu(x: te.Tensor, k: int = 0, upper: bool = True) -> te.Tensor:
    """Keep the upper (``j - i >= k``) or lower (``j - i <= k``) triangle of the last two
    axes; zero elsewhere."""
    zero = scalar(0, x.dtype) if x.dtype != "bool" else ir.IntImm(0, "bool")

    def f(*i: Expr) -> Expr:
        d = i[-1] - i[-2]
        keep = d >= k if upper else d <= k
        return te.select(keep, x[i], zero)

    return te.compute(x.shape, f, name="trilu", tag="injective")


def constant_fill(shape: Sequence[int], value: int | float, dtype: str, name: str
                  ) -> te.Tensor:
    """A tensor of ``shape`` (``(1,)`` for a scalar) holding ``value`` (ONNX Size)."""
    v = scalar(value, dtype)
    return te.compute(tuple(shape) or (1,), lambda *i: v, name=name, tag="injective")


def arange(start: float, delta: float, n: int, dtype: str, work: str | None = None
           ) -> te.Tensor:
    """``start + i * delta`` for ``i < n`` in ``dtype``, computed in ``work`` (ONNX Range;
    float16 is computed in float32 or float64, its ``stash_type``)."""
    wt = work or dtype
    s, d = scalar(start, wt), scalar(delta, wt)

    def f(i: Expr) -> Expr:
        v = s + te.cast(i, wt) * d
        return te.cast(v, dtype) if wt != dtype else v

    return te.compute((max(n, 1),), f, name="range", tag="injective")


def one_hot(indices: te.Tensor, depth: int, values: te.Tensor, axis: int = -1) -> te.Tensor:
    """``values[1]`` where the wrapped index equals the position on the new ``axis`` (of
    length ``depth``), ``values[0]`` elsewhere; out-of-range indices match nothing."""
    ishape = const_shape(indices, "one_hot")
    rank = len(ishape) + 1
    ax = axis % rank
    out = ishape[:ax] + (depth,) + ishape[ax:]
    work = "float64" if ir.is_float(indices.dtype) else "int64"
    zero = (ir.IntImm(0),) * values.ndim

    def f(*o: Expr) -> Expr:
        v = te.cast(indices[tuple(o[:ax]) + tuple(o[ax + 1:])] if ishape else
                    indices[(ir.IntImm(0),) * indices.ndim], work)
        dep = scalar(depth, work)
        norm = te.select(v < scalar(0, work), v + dep, v)
        hit = te.equal(norm, te.cast(o[ax], work))
        on = values[(ir.IntImm(1),)] if values.ndim == 1 else values[zero]
        return te.select(hit, on, values[(ir.IntImm(0),) * values.ndim])

    return te.compute(out, f, name="one_hot", tag="injective")


def cumsum(x: te.Tensor, axis: int, exclusive: bool = False, reverse: bool = False,
           kind: str = "sum") -> te.Tensor:
    """Running sum (``kind="prod"``: product) along ``axis`` (see the module docstring);
    integers wrap."""
    shape = const_shape(x, "cumsum")
    ax = axis % len(shape)
    k = te.reduce_axis((0, shape[ax]), name="k")
    if kind not in ("sum", "prod"):
        raise OptionError(f"cumsum: kind {kind!r} must be 'sum' or 'prod'")
    zero = scalar(0 if kind == "sum" else 1, x.dtype)

    def f(*i: Expr) -> Expr:
        if reverse:
            take = k > i[ax] if exclusive else k >= i[ax]
        else:
            take = k < i[ax] if exclusive else k <= i[ax]
        src = x[tuple(i[:ax]) + (k,) + tuple(i[ax + 1:])]
        term = te.select(take, src, zero)
        return te.sum(term, axis=k) if kind == "sum" else product(term, axis=k)

    return te.compute(shape, f, name=f"cum{kind}", tag="reduce")


def gather_elements(data: te.Tensor, indices: te.Tensor, axis: int = 0) -> te.Tensor:
    """``out[i] = data[i with axis replaced by indices[i]]`` (output: the indices' shape)."""
    ds = const_shape(data, "gather_elements")
    ax = axis % len(ds)

    def f(*i: Expr) -> Expr:
        k = _index(indices[i], ds[ax])
        return data[tuple(i[:ax]) + (k,) + tuple(i[ax + 1:])]

    return te.compute(indices.shape, f, name="gather_elements", tag="injective")


def gather_nd(data: te.Tensor, indices: te.Tensor, batch_dims: int = 0) -> te.Tensor:
    """Slices of ``data`` addressed by the last axis of ``indices`` (ONNX GatherND)."""
    ds, ishape = const_shape(data, "gather_nd"), const_shape(indices, "gather_nd")
    b, kk = batch_dims, ishape[-1]
    lead = len(ishape) - 1
    out = ishape[:-1] + ds[b + kk:]

    def f(*o: Expr) -> Expr:
        pos = tuple(o[:lead])
        coords = tuple(_index(indices[pos + (ir.IntImm(j),)], ds[b + j]) for j in range(kk))
        return data[tuple(o[:b]) + coords + tuple(o[lead:])]

    return te.compute(out or (1,), f, name="gather_nd", tag="injective")


_IDENTITY = {"add": lambda dt: scalar(0, dt), "mul": lambda dt: scalar(1, dt),
             "max": lowest, "min": highest}


def _combine(kind: str, src: Expr, hit: Expr, axes: list[te.AxisVar]) -> Expr:
    masked = te.select(hit, src, _IDENTITY[kind](src.dtype))
    if kind == "add":
        return te.sum(masked, axis=axes)
    if kind == "mul":
        return product(masked, axis=axes)
    if kind == "max":
        return te.max(masked, axis=axes, init=lowest(src.dtype))
    return te.min(masked, axis=axes, init=highest(src.dtype))


def _apply(kind: str, d: Expr, r: Expr) -> Expr:
    if kind == "add":
        return d + r
    if kind == "mul":
        return d * r
    return te.maximum(d, r) if kind == "max" else te.minimum(d, r)


def _check_reduction(reduction: str, where: str) -> None:
    if reduction not in ("none", "add", "mul", "max", "min"):
        raise OptionError(f"{where}: reduction {reduction!r} is not one of none, add, mul, "
                          "max, min")


def scatter_elements(data: te.Tensor, indices: te.Tensor, updates: te.Tensor, axis: int = 0,
                     reduction: str = "none") -> te.Tensor:
    """ONNX ScatterElements as a reduction over the updates along ``axis`` (see the module
    docstring)."""
    _check_reduction(reduction, "scatter_elements")
    ds, us = const_shape(data, "scatter_elements"), const_shape(updates, "scatter_elements")
    ax = axis % len(ds)
    r = te.reduce_axis((0, us[ax]), name="r")

    def landing(i: Sequence[Expr]) -> tuple[tuple[Expr, ...], Expr]:
        pos = tuple(r if d == ax else (te.minimum(i[d], ir.IntImm(us[d] - 1))
                                       if us[d] < ds[d] else i[d]) for d in range(len(ds)))
        conds = [i[d] < us[d] for d in range(len(ds)) if d != ax and us[d] < ds[d]]
        hit = te.equal(_index(indices[pos], ds[ax]), i[ax])
        return pos, te.all(*conds, hit) if conds else hit

    if reduction != "none":
        def red(*i: Expr) -> Expr:
            pos, hit = landing(i)
            return _combine(reduction, updates[pos], hit, [r])

        acc = te.compute(ds, red, name="scatter_elements_acc", tag="reduce")
        return te.compute(ds, lambda *i: _apply(reduction, data[i], acc[i]),
                          name="scatter_elements", tag="injective")

    def last(*i: Expr) -> Expr:
        _, hit = landing(i)
        return te.max(te.select(hit, te.cast(r, "int32"), ir.IntImm(-1)), axis=r)

    m = te.compute(ds, last, name="scatter_elements_last", tag="reduce")

    def out(*i: Expr) -> Expr:
        src = tuple(te.maximum(m[i], ir.IntImm(0)) if d == ax else
                    (te.minimum(i[d], ir.IntImm(us[d] - 1)) if us[d] < ds[d] else i[d])
                    for d in range(len(ds)))
        return te.select(m[i] >= 0, updates[src], data[i])

    return te.compute(ds, out, name="scatter_elements", tag="injective")


def scatter_nd(data: te.Tensor, indices: te.Tensor, updates: te.Tensor,
               reduction: str = "none") -> te.Tensor:
    """ONNX ScatterND as a reduction over the update rows (see the module docstring)."""
    _check_reduction(reduction, "scatter_nd")
    ds, ishape = const_shape(data, "scatter_nd"), const_shape(indices, "scatter_nd")
    k = ishape[-1]
    rows = ishape[:-1]
    raxes = [te.reduce_axis((0, n), name=f"u{j}") for j, n in enumerate(rows)]

    def hit_of(i: Sequence[Expr]) -> Expr:
        u = tuple(raxes)
        return te.all(*(te.equal(_index(indices[u + (ir.IntImm(j),)], ds[j]), i[j])
                        for j in range(k)))

    if not rows:  # one row: indices is 1-D
        raxes = []

    if reduction != "none":
        def red(*i: Expr) -> Expr:
            src = updates[tuple(raxes) + tuple(i[k:])]
            if not raxes:
                return src
            return _combine(reduction, src, hit_of(i), raxes)

        acc = te.compute(ds, red, name="scatter_nd_acc", tag="reduce")

        def apply(*i: Expr) -> Expr:
            v = _apply(reduction, data[i], acc[i])
            if raxes:
                return v
            one = te.all(*(te.equal(_index(indices[(ir.IntImm(j),)], ds[j]), i[j])
                           for j in range(k)))
            return te.select(one, v, data[i])

        return te.compute(ds, apply, name="scatter_nd", tag="injective")

    if not raxes:
        def single(*i: Expr) -> Expr:
            one = te.all(*(te.equal(_index(indices[(ir.IntImm(j),)], ds[j]), i[j])
                           for j in range(k)))
            return te.select(one, updates[tuple(i[k:]) or (ir.IntImm(0),)], data[i])

        return te.compute(ds, single, name="scatter_nd", tag="injective")

    def last(*i: Expr) -> Expr:
        flat = te.cast(ravel(list(raxes), list(rows)), "int32")
        return te.max(te.select(hit_of(i), flat, ir.IntImm(-1)), axis=raxes)

    m = te.compute(ds, last, name="scatter_nd_last", tag="reduce")

    def out(*i: Expr) -> Expr:
        u = unravel(te.maximum(m[i], ir.IntImm(0)), list(rows))
        return te.select(m[i] >= 0, updates[tuple(u) + tuple(i[k:])], data[i])

    return te.compute(ds, out, name="scatter_nd", tag="injective")


def range_work_dtype(dtype: str, stash_type: int) -> str:
    """The dtype ONNX Range computes ``dtype`` in (float16: float32, or float64 with
    ``stash_type`` 11)."""
    if dtype != "float16":
        return dtype
    return "float64" if stash_type == 11 else "float32"



def eye_like(shape: Sequence[int], k: int, dtype: str) -> te.Tensor:
    """Ones on diagonal ``k`` (``j - i == k``) of a 2-D ``shape``, zeros elsewhere."""
    one = ir.IntImm(1, "bool") if dtype == "bool" else scalar(1, dtype)
    zero = ir.IntImm(0, "bool") if dtype == "bool" else scalar(0, dtype)
    return te.compute(tuple(shape), lambda i, j: te.select(te.equal(j - i, k), one, zero),
                      name="eye_like", tag="injective")


def reverse_sequence(x: te.Tensor, lens: te.Tensor, batch_axis: int = 1, time_axis: int = 0
                     ) -> te.Tensor:
    """The first ``lens[b]`` steps along ``time_axis`` reversed for each batch entry ``b``;
    lengths are clamped to [0, T]."""
    shape = const_shape(x, "reverse_sequence")
    steps = shape[time_axis]

    def f(*i: Expr) -> Expr:
        n = te.cast(lens[(i[batch_axis],)], "int32")
        n = te.minimum(te.maximum(n, ir.IntImm(0)), ir.IntImm(steps))
        t = i[time_axis]
        src = te.select(t < n, n - 1 - t, t)
        return x[tuple(src if d == time_axis else v for d, v in enumerate(i))]

    return te.compute(shape, f, name="reverse_sequence", tag="injective")


def tensor_scatter(cache: te.Tensor, update: te.Tensor, starts: te.Tensor | None = None,
                   axis: int = -2, circular: bool = False) -> te.Tensor:
    """ONNX TensorScatter: ``cache`` with ``update`` written along ``axis`` from position
    ``starts[b]`` (0 without ``starts``) of each batch entry ``b``; positions wrap modulo
    the cache length when ``circular``.  Each output element reads the update element
    ``position − start`` when that lies in the update, else its cache element."""
    shape = const_shape(cache, "tensor_scatter")
    ax = axis % len(shape)
    seq = const_shape(update, "tensor_scatter")[ax]

    def f(*i: Expr) -> Expr:
        start = (ir.IntImm(0, "int64") if starts is None
                 else te.cast(starts[(i[0],)], "int64"))
        k = te.cast(i[ax], "int64") - start
        if circular:
            k = te.floormod(k, ir.IntImm(shape[ax], "int64"))
        hit = te.all(k >= 0, k < seq)
        at = te.cast(te.min(te.max(k, ir.IntImm(0, "int64")), ir.IntImm(seq - 1, "int64")),
                     "int32")
        return te.select(hit, update[tuple(at if d == ax else v for d, v in enumerate(i))],
                         cache[i])

    return te.compute(shape, f, name="tensor_scatter", tag="injective")
