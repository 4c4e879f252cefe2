"""Spectral ops: DFT and STFT (OPAQUE); the window functions HannWindow, HammingWindow,
BlackmanWindow and MelWeightMatrix (INJECTIVE: each element a formula of its index).

ONNX's DFT (opset 20 form: ``dft_length`` and ``axis`` are inputs, both compile-time
constants; opset 17/19 models have ``axis`` as an attribute, which the frontend moves to
the input).  The last axis of the input holds 1 (real) or 2 (real, imaginary) values; the
transform runs along ``axis`` (a signal axis, not the last one):

* forward: ``X[k] = Σ_j x[j] e^(-2πi jk/n)``, k < n (``onesided``: k ≤ n/2); output complex;
* inverse: ``x[j] = (1/n) Σ_k X[k] e^(+2πi jk/n)``; output complex;
* inverse + onesided (irfft): the input is the half spectrum of a real signal of length
  ``n`` (default ``2·(m-1)``); output real (last axis 1).

``n`` is ``dft_length`` (default: the axis length); shorter inputs are zero-padded, longer
ones truncated.  STFT (opset 17) frames a ``[batch, length, 1 | 2]`` signal (frames of
``frame_length`` samples — default: the window's length, else the whole signal — every
``frame_step``), weights each frame by the window and transforms it (``onesided``, the
default, keeps ``n/2 + 1`` bins): output ``[batch, frames, bins, 2]``.  The reference is
numpy's FFT, in single precision for float32 (as ONNX's
reference, whose round-off the node tests' data carry), else double.

The windows (opset 17) are ``[size]`` tensors of ``output_datatype`` (default float32):
with ``N = size`` (``periodic=1``, the default) or ``size - 1``, Hann
``sin²(πn/N)``, Hamming ``α − (1 − α)·cos(2πn/N)`` (``α = 25/46``), Blackman
``0.42 − 0.5·cos(2πn/N) + 0.08·cos(4πn/N)``.  MelWeightMatrix is the
``[dft_length/2 + 1, num_mel_bins]`` matrix of triangular mel filters (HTK mel scale,
``mel = 2595·log10(1 + hz/700)``) between ``lower_edge_hertz`` and ``upper_edge_hertz``.
All their inputs must be compile-time constants (they give the output's shape); a model's
window is then usually folded into a constant.

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ops import get_op
    >>> x = np.array([[[1.0], [0.0], [0.0], [0.0]]], np.float32)  # an impulse
    >>> get_op("DFT").reference([x, None, np.array(1)], {})[0][0, :, 0].tolist()
    [1.0, 1.0, 1.0, 1.0]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from toolchain.errors import ModelError
from toolchain.graph.ir import Node, TensorType
from toolchain.graph.ops.common import (
    FLOAT_TYPES,
    check_dtype,
    check_onnx_dtype,
    defop,
    input_value,
    kiln_dtype,
)
from toolchain.graph.ops.registry import Attr, OpDef, PatternKind, const_input


def dft_plan(where: str, shape: tuple[int, ...], axis: int, length: int | None,
             inverse: bool, onesided: bool) -> tuple[int, int, tuple[int, ...]]:
    """``(axis, n, output shape)`` of a DFT; raises naming ``where``."""
    rank = len(shape)
    if rank < 2 or shape[-1] not in (1, 2):
        raise ModelError(f"{where}: input {list(shape)} must end in an axis of 1 (real) or 2 "
                         "(real, imaginary) values")
    if not -rank <= axis < rank - 1 and axis != -1:
        raise ModelError(f"{where}: axis {axis} must be a signal axis of input "
                         f"{list(shape)} (not the last)")
    ax = axis % rank
    if ax == rank - 1:
        raise ModelError(f"{where}: axis {axis} is the real/imaginary axis; choose a signal "
                         "axis")
    m = shape[ax]
    n = length if length is not None else (2 * (m - 1) if inverse and onesided else m)
    if n < 1:
        raise ModelError(f"{where}: dft_length {n} must be >= 1")
    if inverse and onesided:
        out = shape[:ax] + (n,) + shape[ax + 1:-1] + (1,)
    else:
        out = shape[:ax] + ((n // 2 + 1) if onesided else n,) + shape[ax + 1:-1] + (2,)
    return ax, n, out


def _scalar(node: Node, i: int, what: str) -> int | None:
    data = const_input(node, i, what)
    if data is None:
        return None
    if data.size != 1:
        raise ModelError(f"{node.describe()}: input {i} ({what}) must be a scalar")
    return int(data.reshape(()))


def _dft_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x = input_value(node, 0, "input")
    check_dtype(node, x, "input 0 (input)", FLOAT_TYPES)
    for i, what in ((1, "dft_length"), (2, "axis")):
        if node.input(i) is not None:
            check_dtype(node, node.inputs[i], f"input {i} ({what})", ("int32", "int64"))
    length, axis = _scalar(node, 1, "dft_length"), _scalar(node, 2, "axis")
    _, _, out = dft_plan(node.describe(), x.shape, -2 if axis is None else axis, length,
                         bool(attrs["inverse"]), bool(attrs["onesided"]))
    return [TensorType(out, x.dtype)]


def _dft_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    length = None if ins[1] is None else int(np.asarray(ins[1]).reshape(()))
    axis = -2 if ins[2] is None else int(np.asarray(ins[2]).reshape(()))
    inverse, onesided = bool(attrs["inverse"]), bool(attrs["onesided"])
    ax, n, _ = dft_plan("DFT", x.shape, axis, length, inverse, onesided)
    # float32 in single precision as ONNX's reference (numpy's FFT keeps complex64): the
    # node tests' expected data carry its round-off
    cdt = np.complex64 if x.dtype == np.float32 else np.complex128
    sig = x[..., 0].astype(cdt)
    if x.shape[-1] == 2:
        sig = sig + 1j * x[..., 1].astype(cdt)
    if inverse and onesided:
        return [np.fft.irfft(sig, n=n, axis=ax)[..., None].astype(x.dtype)]
    y = np.fft.ifft(sig, n=n, axis=ax) if inverse else np.fft.fft(sig, n=n, axis=ax)
    if onesided:
        y = np.take(y, np.arange(n // 2 + 1), axis=ax)
    return [np.stack([y.real, y.imag], axis=-1).astype(x.dtype)]


def stft_plan(where: str, shape: tuple[int, ...], step: int, window: int | None,
              length: int | None, onesided: bool) -> tuple[int, int, int]:
    """``(frame length, frames, bins)`` of an STFT of a signal of ``shape``; raises naming
    ``where``."""
    if len(shape) != 3 or shape[-1] not in (1, 2):
        raise ModelError(f"{where}: signal {list(shape)} must be [batch, length, 1 (real) or "
                         "2 (real, imaginary)]")
    if step < 1:
        raise ModelError(f"{where}: frame_step {step} must be >= 1")
    if window is not None and length is not None and window != length:
        raise ModelError(f"{where}: the window has {window} samples but frame_length is "
                         f"{length}; they must agree")
    n = length if length is not None else window if window is not None else shape[1]
    if not 1 <= n <= shape[1]:
        raise ModelError(f"{where}: frame length {n} must be from 1 to the signal length "
                         f"{shape[1]}")
    return n, 1 + (shape[1] - n) // step, n // 2 + 1 if onesided else n


def _stft_args(node: Node) -> tuple[int, int | None, int | None]:
    step = _scalar(node, 1, "frame_step")
    if step is None:
        raise ModelError(f"{node.describe()}: input 1 (frame_step) is required")
    w = node.input(2)
    return step, None if w is None else w.shape[0], _scalar(node, 3, "frame_length")


def _stft_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x = input_value(node, 0, "signal")
    check_dtype(node, x, "input 0 (signal)", FLOAT_TYPES)
    for i, what in ((1, "frame_step"), (3, "frame_length")):
        if node.input(i) is not None:
            check_dtype(node, node.inputs[i], f"input {i} ({what})", ("int32", "int64"))
    w = node.input(2)
    if w is not None:
        check_dtype(node, w, "input 2 (window)", (x.dtype,))
        if w.rank != 1:
            raise ModelError(f"{node.describe()}: input 2 (window) must be 1-D, not "
                             f"{list(w.shape)}")
    step, wlen, length = _stft_args(node)
    _, frames, bins = stft_plan(node.describe(), x.shape, step, wlen, length,
                                bool(attrs["onesided"]))
    return [TensorType((x.shape[0], frames, bins, 2), x.dtype)]


def _stft_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    window = None if ins[2] is None else np.asarray(ins[2])
    n, frames, bins = stft_plan(
        "STFT", x.shape, int(np.asarray(ins[1]).reshape(())),
        None if window is None else window.shape[0],
        None if ins[3] is None else int(np.asarray(ins[3]).reshape(())),
        bool(attrs["onesided"]))
    step = int(np.asarray(ins[1]).reshape(()))
    cdt = np.complex64 if x.dtype.itemsize <= 4 else np.complex128  # as DFT's reference
    sig = x[..., 0].astype(cdt)
    if x.shape[-1] == 2:
        sig = sig + 1j * x[..., 1].astype(cdt)
    at = np.arange(frames)[:, None] * step + np.arange(n)[None, :]
    framed = sig[:, at]  # [batch, frames, n]
    if window is not None:
        framed = framed * window.astype(x.dtype).astype(cdt)
    y = np.fft.fft(framed, axis=-1)[..., :bins]
    return [np.stack([y.real, y.imag], axis=-1).astype(x.dtype)]


# -- window functions ------------------------------------------------------------------

#: ``window(n, N)`` of each window op, in float64 (``N``: the period)
WINDOWS = {
    "HannWindow": lambda n, big: np.sin(np.pi * n / big) ** 2,
    "HammingWindow": lambda n, big: 25 / 46 - (21 / 46) * np.cos(2 * np.pi * n / big),
    "BlackmanWindow": lambda n, big: (0.42 - 0.5 * np.cos(2 * np.pi * n / big)
                                      + 0.08 * np.cos(4 * np.pi * n / big)),
}


def window_period(size: int, periodic: bool) -> float:
    """``N`` of a window of ``size`` samples (``size − 1`` when symmetric).  A symmetric
    window of one sample has ``N = 0``: its value is 0/0, NaN, as in onnxruntime and ONNX's
    reference."""
    return float(size if periodic else size - 1)


def _size(node: Node, i: int, what: str) -> int:
    x = input_value(node, i, what)
    check_dtype(node, x, f"input {i} ({what})", ("int32", "int64"))
    value = _scalar(node, i, what)
    assert value is not None  # required input, checked above
    return value


def _window_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    size = _size(node, 0, "size")
    if size < 1:
        raise ModelError(f"{node.describe()}: size {size} must be >= 1")
    return [TensorType((size,), kiln_dtype(attrs["output_datatype"], node.describe()))]


def _window_ref(op: str) -> Any:
    def ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
        size = int(np.asarray(ins[0]).reshape(()))
        n = np.arange(size, dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):  # N = 0: NaN, as ONNX
            w = WINDOWS[op](n, np.float64(window_period(size, bool(attrs["periodic"]))))
        return [w.astype(kiln_dtype(attrs["output_datatype"], op))]

    return ref


def mel_edges(num_mel_bins: int, dft_length: int, sample_rate: float, lower_hz: float,
              upper_hz: float) -> np.ndarray:
    """The ``num_mel_bins + 2`` filter edges of MelWeightMatrix as spectrogram bin indices
    (int64): equally spaced on the mel scale, each ``⌊(dft_length + 1)·hz / sample_rate⌋``.

    >>> mel_edges(2, 16, 8000, 0, 4000).tolist()
    [0, 0, 2, 4]
    """
    def to_mel(hz: float) -> float:
        return 2595.0 * np.log1p(hz / 700.0) / np.log(10.0)

    low, high = to_mel(lower_hz), to_mel(upper_hz)
    mel = np.arange(num_mel_bins + 2) * ((high - low) / (num_mel_bins + 2)) + low
    hz = 700.0 * np.expm1(mel / 2595.0 * np.log(10.0))
    return np.floor_divide((dft_length + 1) * hz, sample_rate).astype(np.int64)


def mel_weight(j: np.ndarray, low: np.ndarray, center: np.ndarray,
               high: np.ndarray) -> np.ndarray:
    """The triangle of one filter at bin ``j`` (float64): rising over ``[low, center]``,
    1 at ``center``, falling over ``[center, high)``."""
    rise = np.where(center > low, (j - low) / np.maximum(center - low, 1), 0.0)
    fall = np.where(high > center, (high - j) / np.maximum(high - center, 1), 0.0)
    at_center = (j == center) & ((low <= center) | (high > center))
    return np.where(at_center, 1.0, np.where((j >= low) & (j < center), rise,
                                             np.where((j > center) & (j < high), fall, 0.0)))


_MEL_INPUTS = ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz",
               "upper_edge_hertz")


def mel_args(node: Node) -> tuple[int, int, float, float, float]:
    """The five compile-time inputs of a MelWeightMatrix node (raises naming it)."""
    bins, length = _size(node, 0, "num_mel_bins"), _size(node, 1, "dft_length")
    rate = _size(node, 2, "sample_rate")
    edges = []
    for i in (3, 4):
        v = input_value(node, i, _MEL_INPUTS[i])
        check_dtype(node, v, f"input {i} ({_MEL_INPUTS[i]})", FLOAT_TYPES)
        data = const_input(node, i, _MEL_INPUTS[i])
        assert data is not None
        edges.append(float(np.asarray(data).reshape(())))
    for what, value in (("num_mel_bins", bins), ("dft_length", length),
                        ("sample_rate", rate)):
        if value < 1:
            raise ModelError(f"{node.describe()}: {what} {value} must be >= 1")
    return bins, length, float(rate), edges[0], edges[1]


def _mel_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    bins, length, *_ = mel_args(node)
    return [TensorType((length // 2 + 1, bins),
                       kiln_dtype(attrs["output_datatype"], node.describe()))]


def _mel_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    bins, length, rate = (int(np.asarray(a).reshape(())) for a in ins[:3])
    low_hz, high_hz = (float(np.asarray(a).reshape(())) for a in ins[3:5])
    e = mel_edges(bins, length, rate, low_hz, high_hz)
    j = np.arange(length // 2 + 1, dtype=np.float64)[:, None]
    w = mel_weight(j, e[None, :-2], e[None, 1:-1], e[None, 2:])
    return [w.astype(kiln_dtype(attrs["output_datatype"], "MelWeightMatrix"))]


def _window_op(name: str, what: str) -> OpDef:
    return defop(name, ("size",), PatternKind.INJECTIVE, infer=_window_infer,
                 reference=_window_ref(name),
                 attrs=(Attr("output_datatype", "int", 1, check=check_onnx_dtype),
                        Attr("periodic", "int", 1, (0, 1))),
                 flops=lambda node: 4 * sum(o.size for o in node.outputs), min_opset=17,
                 compile_time=(0,),
                 doc=f"the {what} window of `size` samples (a constant), periodic or "
                     "symmetric, in output_datatype")


#: this family's ops (registered by the op table, ``registry.builtin_ops``)
OPS: tuple[OpDef, ...] = (
    defop("DFT", ("input", "dft_length?", "axis?"), PatternKind.OPAQUE, infer=_dft_infer,
          reference=_dft_ref,
          attrs=(Attr("inverse", "int", 0, (0, 1)), Attr("onesided", "int", 0, (0, 1))),
          flops=lambda node: 8 * sum(o.size for o in node.outputs) * max(
              (node.inputs[0].shape[-2] if node.inputs and node.inputs[0] is not None
               and node.inputs[0].rank >= 2 else 1), 1),
          min_opset=17,
          doc="discrete Fourier transform along a signal axis (forward, inverse, onesided, "
              "irfft); dft_length and axis constant; computed directly (O(n²)), no FFT"),
    defop("STFT", ("signal", "frame_step", "window?", "frame_length?"), PatternKind.OPAQUE,
          infer=_stft_infer, reference=_stft_ref,
          attrs=(Attr("onesided", "int", 1, (0, 1)),),
          flops=lambda node: 8 * sum(o.size for o in node.outputs) * max(
              (o.shape[2] for o in node.outputs[:1]), default=1),
          min_opset=17, compile_time=(1, 3),
          doc="short-time Fourier transform: frames of frame_length samples every frame_step, "
              "times the window, DFT of each; frame_step/frame_length constant; O(n²) per "
              "frame"),
    _window_op("HannWindow", "Hann (raised cosine)"),
    _window_op("HammingWindow", "Hamming"),
    _window_op("BlackmanWindow", "Blackman"),
    defop("MelWeightMatrix", _MEL_INPUTS, PatternKind.INJECTIVE, infer=_mel_infer,
          reference=_mel_ref,
          attrs=(Attr("output_datatype", "int", 1, check=check_onnx_dtype),),
          flops=lambda node: 8 * sum(o.size for o in node.outputs), min_opset=17,
          compile_time=(0, 1, 2, 3, 4),
          doc="[dft_length/2 + 1, num_mel_bins] triangular mel filter bank (HTK mel scale); "
              "every input a constant"),
)
