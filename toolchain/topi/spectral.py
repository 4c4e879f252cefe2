"""DFT and STFT computed directly: one reduction over the input samples per output element.

``θ = 2π · ((j·k) mod n) / n`` in float64 (the ``mod`` keeps the angle small, so ``sin`` /
``cos`` stay exact to float64 rounding); each output element is ``Σ_j`` of the input's
real/imaginary parts times ``cos θ`` / ``± sin θ``, accumulated in float64 and rounded
once.  O(n²) along the axis — no FFT — which is what the short signal axes of models
need; see :mod:`toolchain.graph.ops.spectral` for the semantics.

Example::

    >>> from toolchain import te
    >>> x = te.placeholder((1, 8, 3, 1), name="x")
    >>> [d.value for d in dft(x, axis=1, n=8, onesided=True).shape]
    [1, 5, 3, 2]
"""

from __future__ import annotations

import math

from toolchain import te
from toolchain.graph.ops.spectral import dft_plan, stft_plan
from toolchain.tir import ir
from toolchain.topi.utils import const_shape, scalar

Expr = ir.PrimExpr
_W = "float64"


def dft(x: te.Tensor, axis: int = -2, n: int | None = None, inverse: bool = False,
        onesided: bool = False) -> te.Tensor:
    """ONNX DFT (forward, inverse, onesided, irfft) of ``x`` (last axis: 1 or 2 values)."""
    shape = const_shape(x, "dft")
    ax, n, out = dft_plan("dft", shape, axis, n, inverse, onesided)
    m = min(shape[ax], n if not (inverse and onesided) else n // 2 + 1)
    complex_in = shape[-1] == 2
    j = te.reduce_axis((0, m), name="j")
    step = scalar(2.0 * math.pi / n, _W)
    irfft = inverse and onesided

    def body(*o: Expr) -> Expr:
        k, part = o[ax], o[-1]
        at = tuple(o[:ax]) + (j,) + tuple(o[ax + 1:-1])
        re = te.cast(x[at + (ir.IntImm(0),)], _W)
        im = te.cast(x[at + (ir.IntImm(1),)], _W) if complex_in else scalar(0, _W)
        theta = te.cast(te.floormod(j * k, n), _W) * step
        c, s = te.cos(theta), te.sin(theta)
        if irfft:  # Hermitian half spectrum: the k and n-k terms of a real signal
            twice = te.all(j > 0, (j * 2) < n)
            w = te.select(twice, scalar(2, _W), scalar(1, _W))
            term = w * (re * c - im * s)
        elif inverse:
            term = te.select(te.equal(part, 0), re * c - im * s, re * s + im * c)
        else:
            term = te.select(te.equal(part, 0), re * c + im * s, im * c - re * s)
        return te.sum(term, axis=j)

    acc = te.compute(out, body, name="dft_acc", tag="reduce")
    scale = 1.0 / n if inverse else 1.0

    def finish(*i: Expr) -> Expr:
        v = acc[i] * scalar(scale, _W) if inverse else acc[i]
        return te.cast(v, x.dtype)

    return te.compute(out, finish, name="dft", tag="elemwise")


def stft(x: te.Tensor, step: int, window: te.Tensor | None = None, length: int | None = None,
         onesided: bool = True) -> te.Tensor:
    """ONNX STFT of ``x`` ``[batch, length, 1 | 2]``: ``[batch, frames, bins, 2]``.

    ``out[b, f, k] = Σ_j x[b, f·step + j] · window[j] · e^(-2πi jk/n)``, in float64.

    >>> x = te.placeholder((1, 16, 1), name="x")
    >>> [d.value for d in stft(x, 4, length=8).shape]
    [1, 3, 5, 2]
    """
    shape = const_shape(x, "stft")
    wlen = None if window is None else const_shape(window, "stft")[0]
    n, frames, bins = stft_plan("stft", shape, step, wlen, length, onesided)
    complex_in = shape[-1] == 2
    j = te.reduce_axis((0, n), name="j")
    step_angle = scalar(2.0 * math.pi / n, _W)

    def body(b: Expr, f: Expr, k: Expr, part: Expr) -> Expr:
        t = f * step + j
        re = te.cast(x[b, t, ir.IntImm(0)], _W)
        im = te.cast(x[b, t, ir.IntImm(1)], _W) if complex_in else scalar(0, _W)
        if window is not None:
            w = te.cast(window[j], _W)
            re, im = re * w, im * w
        theta = te.cast(te.floormod(j * k, n), _W) * step_angle
        c, s = te.cos(theta), te.sin(theta)
        return te.sum(te.select(te.equal(part, 0), re * c + im * s, im * c - re * s), axis=j)

    out = (shape[0], frames, bins, 2)
    acc = te.compute(out, body, name="stft_acc", tag="reduce")
    return te.compute(out, lambda *i: te.cast(acc[i], x.dtype), name="stft", tag="elemwise")
