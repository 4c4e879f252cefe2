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


def argmax(x: te.Tensor, axis: int = 0, keepdims: bool = True,
           select_last_index: bool = False) -> te.Tensor:
    """int64 index of the maximum along ``axis``; ties give the first index (the last with
    ``select_last_index``).

    >>> x = te.placeholder((3, 5), name="x")
    >>> argmax(x, axis=1, keepdims=False).dtype
    'int64'
    """
    shape = const_shape(x, "argmax")
    a = _norm_axes([axis], len(shape), "argmax")
    n = shape[a[0]]
    if n == 0:
        raise OptionError(f"argmax: axis {axis} of shape {list(shape)} is empty")
    mx = reduce(x, a, keepdims, "max", name="argmax_value")
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

    return te.compute(out_shape, body, name="argmax", tag="reduce")
