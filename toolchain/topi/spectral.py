"""DFT and STFT computed directly: one reduction over the input samples per output element;
the window functions (Hann, Hamming, Blackman, MelWeightMatrix) as formulas of the index.

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
from toolchain.graph.ops.spectral import dft_plan, stft_plan, window_period
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


def window(kind: str, size: int, periodic: bool = True, dtype: str = "float32") -> te.Tensor:
    """ONNX HannWindow / HammingWindow / BlackmanWindow (``kind``) of ``size`` samples, in
    float64 rounded once to ``dtype``.

    >>> [d.value for d in window("HannWindow", 10).shape]
    [10]
    """
    period = window_period(size, periodic)
    step = scalar(2.0 * math.pi / period if period else math.nan, _W)  # N = 0: NaN, as ONNX

    def cos(k: int, n: Expr) -> Expr:
        return te.cos(te.cast(n, _W) * step * scalar(k, _W))

    def body(n: Expr) -> Expr:
        if kind == "HannWindow":  # sin²(πn/N) = (1 − cos(2πn/N)) / 2
            v = te.sin(te.cast(n, _W) * step * scalar(0.5, _W))
            w = v * v
        elif kind == "HammingWindow":
            w = scalar(25 / 46, _W) - scalar(21 / 46, _W) * cos(1, n)
        elif kind == "BlackmanWindow":
            w = scalar(0.42, _W) - scalar(0.5, _W) * cos(1, n) + scalar(0.08, _W) * cos(2, n)
        else:
            raise ValueError(f"window: unknown window {kind!r}")
        return te.cast(w, dtype)

    return te.compute((size,), body, name=kind.lower(), tag="injective")


def mel_weight_matrix(edges: list[int], dft_length: int, dtype: str = "float32") -> te.Tensor:
    """ONNX MelWeightMatrix ``[dft_length/2 + 1, len(edges) − 2]`` from its filter edges
    (spectrogram bins, :func:`toolchain.graph.ops.spectral.mel_edges`): filter ``m`` rises
    from ``edges[m]`` to 1 at ``edges[m + 1]`` and falls to 0 at ``edges[m + 2]``.

    The edges are compile-time integers; each element reads its filter's three edges with a
    select over the filters (no table in memory).

    >>> [d.value for d in mel_weight_matrix([0, 1, 3, 4], 8).shape]
    [5, 2]
    """
    bins = len(edges) - 2

    def edge(m: Expr) -> Expr:
        e: Expr = scalar(edges[-1], _W)
        for k in range(len(edges) - 2, -1, -1):
            e = te.select(te.equal(m, k), scalar(edges[k], _W), e)
        return e

    def body(j: Expr, m: Expr) -> Expr:
        jj = te.cast(j, _W)
        low, center, high = edge(m), edge(m + 1), edge(m + 2)
        one, zero = scalar(1, _W), scalar(0, _W)
        rise = (jj - low) / te.max(center - low, one)
        fall = (high - jj) / te.max(high - center, one)
        at_center = te.all(te.equal(jj, center), te.any(low <= center, high > center))
        v = te.select(at_center, one,
                      te.select(te.all(jj >= low, jj < center), rise,
                                te.select(te.all(jj > center, jj < high), fall, zero)))
        return te.cast(v, dtype)

    return te.compute((dft_length // 2 + 1, bins), body, name="mel_weight_matrix",
                      tag="injective")
