"""Reductions: sum, mean, max, min over any set of axes (with ``keepdims``), and argmax.

Each reduction is one ``te.compute`` whose body is a ``te.sum``/``te.max``/``te.min`` over
one reduce axis per reduced dimension; ``mean`` adds an elementwise division stage.
``argmax`` needs a (value, index) pair reduction, which TE does not have, so it is two
stages: the maximum, then the first (or last) index where the input equals it.

Accumulation is in the input dtype (the registry's reference accumulates floats in
float64, so float32 sums agree to float32 rounding). A result of rank 0 is a ``(1,)``
buffer.

Example::

    >>> from toolchain import te
    >>> x = te.placeholder((2, 3, 4), name="x")
    >>> y = reduce(x, axes=(1,), keepdims=True, kind="sum")
    >>> [d.value for d in y.shape]
    [2, 1, 4]
"""

from __future__ import annotations

from collections.abc import Sequence

from toolchain import te
from toolchain.errors import OptionError
from toolchain.tir import ir
from toolchain.topi.utils import const_shape, highest, lowest, scalar

_KINDS = ("sum", "mean", "max", "min")
_any = te.comm_reducer(lambda x, y: ir.Or(x, y), lambda dt: ir.IntImm(0, "bool"), "any")
#: the product reducer (``product(expr, axis=k)``), ReduceProd's and ScatterND mul's
product = te.comm_reducer(lambda x, y: x * y, lambda dt: scalar(1, dt), "prod")
_all = te.comm_reducer(lambda x, y: ir.And(x, y), lambda dt: ir.IntImm(1, "bool"), "all")


def _norm_axes(axes: Sequence[int] | None, rank: int, op: str) -> list[int]:
    if axes is None:
        return list(range(rank))
    out = []
    for a in axes:
        if not -rank <= a < rank:
            raise OptionError(f"{op}: axis {a} is out of range for rank {rank}")
        out.append(a % rank)
    if len(set(out)) != len(out):
        raise OptionError(f"{op}: axes {list(axes)} repeat an axis")
    return sorted(out)


def _reduced_shape(shape: Sequence[int], axes: Sequence[int], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _input_index(out_idx: Sequence[ir.PrimExpr], rank: int, axes: Sequence[int],
                 raxes: Sequence[te.AxisVar], keepdims: bool) -> tuple[ir.PrimExpr, ...]:
    idx: list[ir.PrimExpr] = []
    pos = 0
    r = iter(raxes)
    for d in range(rank):
        if d in axes:
            idx.append(next(r))
            if keepdims:
                pos += 1
        else:
            idx.append(out_idx[pos])
            pos += 1
    return tuple(idx)


def reduce(x: te.Tensor, axes: Sequence[int] | None = None, keepdims: bool = True,
           kind: str = "sum", name: str | None = None) -> te.Tensor:
    """Reduce ``x`` over ``axes`` (all when ``None``) with ``kind`` in sum/mean/max/min.

    Integer ``mean`` is the (wrapping) sum divided by the count, truncated toward zero.
    """
    if kind not in _KINDS:
        raise OptionError(f"reduce: kind {kind!r} is not one of {', '.join(_KINDS)}")
    shape = const_shape(x, f"reduce_{kind}")
    ax = _norm_axes(axes, len(shape), f"reduce_{kind}")
    out_shape = _reduced_shape(shape, ax, keepdims)
    raxes = [te.reduce_axis((0, shape[a]), name=f"k{a}") for a in ax]
    dt = x.dtype

    def body(*o: ir.PrimExpr) -> ir.PrimExpr:
        src = x[_input_index(o if out_shape else (), len(shape), ax, raxes, keepdims)]
        if not raxes:
            return src
        if kind in ("sum", "mean"):
            return te.sum(src, axis=raxes)
        if dt == "bool":  # max/min of bools are or/and (no bool max/min needed in C)
            return (_any if kind == "max" else _all)(src, axis=raxes)
        if kind == "max":
            return te.max(src, axis=raxes, init=lowest(dt))
        return te.min(src, axis=raxes, init=highest(dt))

    red = te.compute(out_shape or (1,), body, name=name or f"reduce_{kind}", tag="reduce")
    if kind != "mean":
        return red
    count = 1
    for a in ax:
        count *= shape[a]
    return te.compute(red.shape, lambda *i: ir.Div(red[i], scalar(count, dt)),
                      name=name or "reduce_mean_div", tag="elemwise")


def sum(x: te.Tensor, axes: Sequence[int] | None = None,  # noqa: A001 - the op's name
        keepdims: bool = True) -> te.Tensor:
    """Sum over ``axes``."""
    return reduce(x, axes, keepdims, "sum")


def mean(x: te.Tensor, axes: Sequence[int] | None = None, keepdims: bool = True) -> te.Tensor:
    """Mean over ``axes``."""
    return reduce(x, axes, keepdims, "mean")


def max(x: te.Tensor, axes: Sequence[int] | None = None,  # noqa: A001 - the op's name
        keepdims: bool = True) -> te.Tensor:
    """Maximum over ``axes``."""
    return reduce(x, axes, keepdims, "max")


def min(x: te.Tensor, axes: Sequence[int] | None = None,  # noqa: A001 - the op's name
        keepdims: bool = True) -> te.Tensor:
    """Minimum over ``axes``."""
    return reduce(x, axes, keepdims, "min")


#: reductions of :func:`reduce_ext`: kind -> (ONNX op, what it computes)
EXT_KINDS = {
    "prod": "ReduceProd", "l1": "ReduceL1", "l2": "ReduceL2", "sum_square": "ReduceSumSquare",
    "log_sum": "ReduceLogSum", "log_sum_exp": "ReduceLogSumExp",
}


def reduce_ext(x: te.Tensor, axes: Sequence[int] | None = None, keepdims: bool = True,
               kind: str = "prod") -> te.Tensor:
    """ReduceProd/L1/L2/SumSquare/LogSum/LogSumExp over ``axes`` (all when ``None``):
    ``kind`` is one of :data:`EXT_KINDS`.  Accumulates in the input dtype like
    :func:`reduce`; ``log_sum_exp`` is max-shifted (two reductions), an all ``-inf`` row
    gives ``-inf``; integer ``l2`` truncates the square root.

    >>> x = te.placeholder((2, 3, 4), name="x")
    >>> [d.value for d in reduce_ext(x, (2,), False, "l2").shape]
    [2, 3]
    """
    if kind not in EXT_KINDS:
        raise OptionError(f"reduce_ext: kind {kind!r} is not one of {', '.join(EXT_KINDS)}")
    shape = const_shape(x, f"reduce_{kind}")
    ax = _norm_axes(axes, len(shape), f"reduce_{kind}")
    out_shape = _reduced_shape(shape, ax, keepdims)
    dt = x.dtype
    shift: te.Tensor | None = None
    if kind == "log_sum_exp":
        shift = reduce(x, ax, keepdims, "max", name="reduce_log_sum_exp_max")
    raxes = [te.reduce_axis((0, shape[a]), name=f"k{a}") for a in ax]

    def term(v: ir.PrimExpr, o: Sequence[ir.PrimExpr]) -> ir.PrimExpr:
        if kind == "l1":
            return te.abs(v)
        if kind in ("l2", "sum_square"):
            return v * v
        if kind == "log_sum_exp" and shift is not None:
            m = shift[o]
            return te.exp(v - te.select(_finite(m), m, scalar(0, dt)))
        return v

    def body(*o: ir.PrimExpr) -> ir.PrimExpr:
        src = term(x[_input_index(o if out_shape else (), len(shape), ax, raxes, keepdims)],
                   o if out_shape else (ir.IntImm(0),))
        if not raxes:
            return src
        return product(src, axis=raxes) if kind == "prod" else te.sum(src, axis=raxes)

    red = te.compute(out_shape or (1,), body, name=f"reduce_{kind}", tag="reduce")
    if kind in ("prod", "l1", "sum_square"):
        return red

    def finish(*i: ir.PrimExpr) -> ir.PrimExpr:
        v = red[i]
        if kind == "l2":
            if ir.is_float(dt):
                return te.sqrt(v)
            return te.cast(te.trunc(te.sqrt(te.cast(v, "float64"))), dt)
        if kind == "log_sum":
            return te.log(v)
        assert shift is not None
        m = shift[i]
        return te.log(v) + te.select(_finite(m), m, scalar(0, dt))

    return te.compute(red.shape, finish, name=f"reduce_{kind}_out", tag="elemwise")


def _finite(v: ir.PrimExpr) -> ir.PrimExpr:
    """``v`` is neither NaN nor ±inf (``v - v`` is 0 exactly then)."""
    return te.equal(v - v, scalar(0, v.dtype))


def argmax(x: te.Tensor, axis: int = 0, keepdims: bool = True,
           select_last_index: bool = False, kind: str = "max") -> te.Tensor:
    """int64 index of the maximum along ``axis``; ties give the first index (the last with
    ``select_last_index``).  ``kind="min"``: of the minimum (ArgMin, see :func:`argmin`).

    >>> x = te.placeholder((3, 5), name="x")
    >>> argmax(x, axis=1, keepdims=False).dtype
    'int64'
    """
    name = "arg" + kind
    shape = const_shape(x, name)
    a = _norm_axes([axis], len(shape), name)
    n = shape[a[0]]
    if n == 0:
        raise OptionError(f"{name}: axis {axis} of shape {list(shape)} is empty")
    mx = reduce(x, a, keepdims, kind, name=f"{name}_value")
    out_shape = _reduced_shape(shape, a, keepdims) or (1,)
    k = te.reduce_axis((0, n), name="k")

    def body(*o: ir.PrimExpr) -> ir.PrimExpr:
        src = x[_input_index(o if len(shape) > 1 or keepdims else (), len(shape), a, [k],
                             keepdims)]
        hit = te.equal(src, mx[o])
        kk = te.cast(k, "int64")
        if select_last_index:
            return te.max(te.select(hit, kk, scalar(-1, "int64")), axis=k)
        return te.min(te.select(hit, kk, scalar(n, "int64")), axis=k)

    return te.compute(out_shape, body, name=name, tag="reduce")


def argmin(x: te.Tensor, axis: int = 0, keepdims: bool = True,
           select_last_index: bool = False) -> te.Tensor:
    """int64 index of the minimum along ``axis`` (ties as :func:`argmax`)."""
    return argmax(x, axis, keepdims, select_last_index, kind="min")


def hardmax(x: te.Tensor, axis: int = -1) -> te.Tensor:
    """1 at the first maximum along ``axis``, 0 elsewhere, in x's dtype.

    >>> hardmax(te.placeholder((2, 5), name="x")).dtype
    'float32'
    """
    shape = const_shape(x, "hardmax")
    a = _norm_axes([axis], len(shape), "hardmax")[0]
    if shape[a] == 0:
        return te.compute(shape, lambda *i: x[i], name="hardmax", tag="injective")
    idx = argmax(x, a, True)

    def body(*i: ir.PrimExpr) -> ir.PrimExpr:
        at = tuple(ir.IntImm(0) if d == a else v for d, v in enumerate(i))
        hit = te.equal(te.cast(i[a], "int64"), idx[at])
        return te.select(hit, scalar(1, x.dtype), scalar(0, x.dtype))

    return te.compute(shape, body, name="hardmax", tag="injective")


def topk(x: te.Tensor, k: int, axis: int = -1, largest: bool = True
         ) -> tuple[te.Tensor, te.Tensor]:
    """The ``k`` largest (or smallest) values along ``axis`` and their int64 indices,
    sorted, equal values lower index first (ONNX TopK).

    Two reductions, no sort: the rank of every element (how many elements come before it
    in that order; O(n²) along the axis), then for output slot ``j`` the position whose
    rank is ``j``.  Ranks are distinct unless the axis holds NaN.

    >>> v, i = topk(te.placeholder((2, 6), name="x"), 3)
    >>> [d.value for d in i.shape], i.dtype
    ([2, 3], 'int64')
    """
    shape = const_shape(x, "topk")
    ax = _norm_axes([axis], len(shape), "topk")[0]
    n = shape[ax]
    if not 0 < k <= n:
        raise OptionError(f"topk: k = {k} must be in [1, {n}]")
    c = te.reduce_axis((0, n), name="c")

    def at(i: Sequence[ir.PrimExpr], v: ir.PrimExpr) -> tuple[ir.PrimExpr, ...]:
        return tuple(i[:ax]) + (v,) + tuple(i[ax + 1:])

    def rank(*i: ir.PrimExpr) -> ir.PrimExpr:
        mine, other = x[i], x[at(i, c)]
        ahead = other > mine if largest else other < mine
        first = te.all(te.equal(other, mine), c < i[ax])
        return te.sum(te.select(ahead, 1, te.select(first, 1, 0)), axis=c)

    r = te.compute(shape, rank, name="topk_rank", tag="reduce")
    e = te.reduce_axis((0, n), name="e")
    out = tuple(k if d == ax else s for d, s in enumerate(shape))

    def pick(*j: ir.PrimExpr) -> ir.PrimExpr:
        hit = te.equal(r[at(j, e)], j[ax])
        return te.sum(te.select(hit, te.cast(e, "int64"), scalar(0, "int64")), axis=e)

    idx = te.compute(out, pick, name="topk_indices", tag="reduce")

    def value(*j: ir.PrimExpr) -> ir.PrimExpr:
        pos = te.minimum(te.maximum(te.cast(idx[j], "int32"), 0), n - 1)
        return x[at(j, pos)]

    return te.compute(out, value, name="topk_values", tag="injective"), idx
