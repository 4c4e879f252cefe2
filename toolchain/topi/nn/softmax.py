"""Softmax and log-softmax over one axis, numerically stable (the maximum is subtracted).

Stages (``k`` runs over ``axis``)::

    softmax_max[i]     = max_k x[i, k]
    softmax_exp[i, k]  = exp(x[i, k] - softmax_max[i])
    softmax_sum[i]     = sum_k softmax_exp[i, k]
    softmax[i, k]      = softmax_exp[i, k] / softmax_sum[i]
    log_softmax[i, k]  = x[i, k] - softmax_max[i] - log(softmax_sum[i])

The reductions keep ``axis`` with extent 1 so every stage indexes the same way.

Example::

    >>> from toolchain import te
    >>> x = te.placeholder((2, 5), name="x")
    >>> [t.name for t in softmax(x).op.input_tensors()]
    ['softmax_exp', 'softmax_sum']
"""

from __future__ import annotations

from toolchain import te
from toolchain.tir import ir
from toolchain.topi.utils import const_shape, lowest

Expr = ir.PrimExpr


def _stats(x: te.Tensor, axis: int) -> tuple[int, te.Tensor, te.Tensor, te.Tensor]:
    shape = const_shape(x, "softmax")
    axis = axis % len(shape)
    red_shape = tuple(1 if d == axis else s for d, s in enumerate(shape))

    def along(i: tuple[Expr, ...], k: Expr) -> tuple[Expr, ...]:
        return tuple(k if d == axis else i[d] for d in range(len(shape)))

    k1 = te.reduce_axis((0, shape[axis]), name="k")
    mx = te.compute(red_shape, lambda *i: te.max(x[along(i, k1)], axis=k1, init=lowest(x.dtype)),
                    name="softmax_max", tag="softmax")

    def at0(i: tuple[Expr, ...]) -> tuple[Expr, ...]:
        return tuple(ir.IntImm(0) if d == axis else i[d] for d in range(len(shape)))

    e = te.compute(shape, lambda *i: te.exp(x[i] - mx[at0(i)]), name="softmax_exp",
                   tag="softmax")
    k2 = te.reduce_axis((0, shape[axis]), name="k")
    s = te.compute(red_shape, lambda *i: te.sum(e[along(i, k2)], axis=k2), name="softmax_sum",
                   tag="softmax")
    return axis, mx, e, s


def softmax(x: te.Tensor, axis: int = -1) -> te.Tensor:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``."""
    ax, _, e, s = _stats(x, axis)
    rank = x.ndim
    return te.compute(x.shape, lambda *i: e[i] / s[tuple(
        ir.IntImm(0) if d == ax else i[d] for d in range(rank))], name="softmax",
        tag="softmax")


def log_softmax(x: te.Tensor, axis: int = -1) -> te.Tensor:
    """``x - max - log(sum(exp(x - max)))`` along ``axis``."""
    ax, mx, _, s = _stats(x, axis)
    rank = x.ndim

    def f(*i: Expr) -> Expr:
        j = tuple(ir.IntImm(0) if d == ax else i[d] for d in range(rank))
        return x[i] - mx[j] - te.log(s[j])

    return te.compute(x.shape, f, name="log_softmax", tag="softmax")
