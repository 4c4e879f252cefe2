"""Normalisations: layer norm, instance norm, batch norm (inference).

Layer and instance norm are two-pass (mean, then the mean of squared deviations), which
is more accurate than ``E[x²] - E[x]²``:

    mean[i]    = sum_k x[i, k] / n
    var[i]     = sum_k (x[i, k] - mean[i])² / n
    inv_std[i] = 1 / sqrt(var[i] + eps)
    out[i, k]  = (x[i, k] - mean[i]) * inv_std[i] * scale + bias

Batch norm in inference mode is a per-channel affine map (one elementwise stage).

Example::

    >>> from toolchain import te
    >>> x = te.placeholder((2, 3, 8), name="x"); g = te.placeholder((8,), name="g")
    >>> y, mean, inv_std = layer_norm(x, g, None, axis=-1)
    >>> [d.value for d in mean.shape]
    [2, 3, 1]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from toolchain import te
from toolchain.tir import ir
from toolchain.topi.utils import broadcast_index, const_shape, scalar

Expr = ir.PrimExpr


def _moments(x: te.Tensor, axes: Sequence[int], dt: str, prefix: str
             ) -> tuple[te.Tensor, te.Tensor]:
    """(mean, inv_std without eps) helpers: returns mean and the variance, keepdims."""
    shape = const_shape(x, prefix)
    red = tuple(1 if d in axes else s for d, s in enumerate(shape))
    n = math.prod(shape[a] for a in axes)

    def src(i: tuple[Expr, ...], ks: list[te.AxisVar]) -> tuple[Expr, ...]:
        it = iter(ks)
        return tuple(next(it) if d in axes else i[d] for d in range(len(shape)))

    k1 = [te.reduce_axis((0, shape[a]), name=f"k{a}") for a in axes]
    total = te.compute(red, lambda *i: te.sum(te.cast(x[src(i, k1)], dt), axis=k1),
                       name=f"{prefix}_sum", tag=prefix)
    mean = te.compute(red, lambda *i: total[i] / scalar(n, dt), name=f"{prefix}_mean",
                      tag=prefix)
    k2 = [te.reduce_axis((0, shape[a]), name=f"k{a}") for a in axes]

    def sq(*i: Expr) -> Expr:
        d = te.cast(x[src(i, k2)], dt) - mean[i]
        return te.sum(d * d, axis=k2)

    var_sum = te.compute(red, sq, name=f"{prefix}_var_sum", tag=prefix)
    var = te.compute(red, lambda *i: var_sum[i] / scalar(n, dt), name=f"{prefix}_var",
                     tag=prefix)
    return mean, var


def _at(stat: te.Tensor, i: tuple[Expr, ...], axes: Sequence[int]) -> Expr:
    return stat[tuple(ir.IntImm(0) if d in axes else v for d, v in enumerate(i))]


def layer_norm(x: te.Tensor, scale: te.Tensor, bias: te.Tensor | None = None, axis: int = -1,
               epsilon: float = 1e-5, stash_dtype: str | None = None
               ) -> tuple[te.Tensor, te.Tensor, te.Tensor]:
    """ONNX LayerNormalization over axes ``[axis, rank)``: returns ``(Y, Mean, InvStdDev)``
    (statistics in ``stash_dtype``, default x's dtype, with the normalised axes kept as 1).

    ``scale`` and ``bias`` broadcast to x (numpy rules).
    """
    shape = const_shape(x, "layer_norm")
    axis = axis % len(shape)
    axes = list(range(axis, len(shape)))
    sdt = stash_dtype or x.dtype
    mean, var = _moments(x, axes, sdt, "layer_norm")
    inv = te.compute(mean.shape, lambda *i: scalar(1.0, sdt) / te.sqrt(
        var[i] + scalar(epsilon, sdt)), name="layer_norm_inv_std", tag="layer_norm")

    def f(*i: Expr) -> Expr:
        normed = te.cast((te.cast(x[i], sdt) - _at(mean, i, axes)) * _at(inv, i, axes),
                         x.dtype)
        y = normed * scale[broadcast_index(scale, i)]
        if bias is not None:
            y = y + bias[broadcast_index(bias, i)]
        return y

    y = te.compute(x.shape, f, name="layer_norm", tag="layer_norm")
    return y, mean, inv


def instance_norm(x: te.Tensor, scale: te.Tensor, bias: te.Tensor, epsilon: float = 1e-5
                  ) -> te.Tensor:
    """Normalise each ``(n, c)`` of ``[N, C, *spatial]`` over the spatial axes, then
    ``* scale[c] + bias[c]``."""
    shape = const_shape(x, "instance_norm")
    axes = list(range(2, len(shape)))
    dt = x.dtype
    mean, var = _moments(x, axes, dt, "instance_norm")

    def f(*i: Expr) -> Expr:
        inv = scalar(1.0, dt) / te.sqrt(_at(var, i, axes) + scalar(epsilon, dt))
        return (x[i] - _at(mean, i, axes)) * inv * scale[i[1]] + bias[i[1]]

    return te.compute(x.shape, f, name="instance_norm", tag="instance_norm")


def batch_norm_inference(x: te.Tensor, scale: te.Tensor, bias: te.Tensor, mean: te.Tensor,
                         var: te.Tensor, epsilon: float = 1e-5, axis: int = 1) -> te.Tensor:
    """``(x - mean) * scale / sqrt(var + eps) + bias`` per channel ``axis``."""
    dt = x.dtype

    def f(*i: Expr) -> Expr:
        c = i[axis]
        inv = scale[c] / te.sqrt(var[c] + scalar(epsilon, dt))
        return (x[i] - mean[c]) * inv + bias[c]

    return te.compute(x.shape, f, name="batch_norm", tag="batch_norm")
