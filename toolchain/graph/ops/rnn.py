"""Recurrent ops: LSTM, GRU and RNN (OPAQUE).

ONNX's LSTM with its default activations (sigmoid for the gates, tanh for the cell input
and output), peepholes ``P``, ``clip``, initial states, the three directions and both
layouts.  Kiln compiles fixed shapes, so ``sequence_lens``, when given, must be a constant
equal to the sequence length for every batch entry (no per-entry masking); other
activations and ``input_forget=1`` are refused with an :class:`UnsupportedError` naming the
node.

Per step (gates ordered i, o, f, c in W, R, B; ``⊙`` elementwise)::

    g = X_t Wᵀ + H_{t-1} Rᵀ + Wb + Rb
    i = σ(g_i + P_i ⊙ C_{t-1});  f = σ(g_f + P_f ⊙ C_{t-1});  c = tanh(g_c)
    C_t = f ⊙ C_{t-1} + i ⊙ c;   o = σ(g_o + P_o ⊙ C_t);      H_t = o ⊙ tanh(C_t)

``clip`` clamps every activation's input (peephole term included) to ±clip, as
onnxruntime does (ONNX's reference ignores ``clip``).

GRU (gates z, r, h) and RNN follow the same rules (default activations only, clip on every
activation's input, full-length ``sequence_lens`` only)::

    z = σ(X_t W_zᵀ + H_{t-1} R_zᵀ + b_z);  r = σ(…_r)
    h̃ = tanh(X_t W_hᵀ + (r ⊙ H_{t-1}) R_hᵀ + Rb_h + Wb_h)       linear_before_reset = 0
    h̃ = tanh(X_t W_hᵀ + r ⊙ (H_{t-1} R_hᵀ + Rb_h) + Wb_h)       linear_before_reset = 1
    H_t = (1 - z) ⊙ h̃ + z ⊙ H_{t-1}                 (RNN: H_t = tanh(X_t Wᵀ + H_{t-1} Rᵀ + b))

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ops import get_op
    >>> x = np.ones((2, 1, 3), np.float32); w = np.zeros((1, 8, 3), np.float32)
    >>> y, yh, yc = get_op("LSTM").reference([x, w, np.zeros((1, 8, 2), np.float32)], {})
    >>> y.shape, yh.shape, float(yc[0, 0, 0])
    ((2, 1, 1, 2), (1, 1, 2), 0.0)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from toolchain.errors import ModelError, UnsupportedError
from toolchain.graph.ir import Node, TensorType, Value
from toolchain.graph.ops.common import FLOAT_TYPES, check_dtype, defop, input_value
from toolchain.graph.ops.registry import Attr, OpDef, PatternKind, const_input

#: the activations Kiln compiles (ONNX's defaults), per op
DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"),
                       "RNN": ("Tanh",)}
#: gates per op (rows of W and R are gates · hidden_size)
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
LSTM_ACTIVATIONS = DEFAULT_ACTIVATIONS["LSTM"]
_DIRECTIONS = ("forward", "reverse", "bidirectional")


def _check_param(node: Node, i: int, what: str, shape: tuple[int, ...]) -> None:
    v: Value | None = node.input(i)
    if v is not None and v.shape != shape:
        raise ModelError(f"{node.describe()}: input {i} ({what}) must have shape "
                         f"{list(shape)}, got {list(v.shape)}")


def rnn_dims(node: Node, attrs: dict[str, Any]) -> tuple[int, int, int, int, int]:
    """``(seq_length, batch, input_size, hidden_size, num_directions)`` of an LSTM, GRU or
    RNN node; checks every operand and the supported attribute values, raising naming the
    node."""
    g = GATES[node.op]
    x, w, r = (input_value(node, i, n) for i, n in enumerate(("X", "W", "R")))
    dt = check_dtype(node, x, "input 0 (X)", FLOAT_TYPES)
    for i, v in ((1, w), (2, r)):
        check_dtype(node, v, f"input {i}", (dt,))
    if x.rank != 3 or w.rank != 3 or r.rank != 3:
        raise ModelError(f"{node.describe()}: X, W and R must be 3-D, got {list(x.shape)}, "
                         f"{list(w.shape)}, {list(r.shape)}")
    s, b, n_in = (x.shape[1], x.shape[0], x.shape[2]) if attrs["layout"] else x.shape
    dirs = 2 if attrs["direction"] == "bidirectional" else 1
    h = attrs["hidden_size"] if attrs["hidden_size"] is not None else r.shape[-1]
    if w.shape != (dirs, g * h, n_in) or r.shape != (dirs, g * h, h):
        raise ModelError(f"{node.describe()}: W {list(w.shape)} and R {list(r.shape)} must be "
                         f"[{dirs}, {g * h}, {n_in}] and [{dirs}, {g * h}, {h}] (direction "
                         f"{attrs['direction']!r}, hidden_size {h}, input size {n_in})")
    _check_param(node, 3, "B", (dirs, 2 * g * h))
    state = (b, dirs, h) if attrs["layout"] else (dirs, b, h)
    _check_param(node, 5, "initial_h", state)
    if node.op == "LSTM":
        _check_param(node, 6, "initial_c", state)
        _check_param(node, 7, "P", (dirs, 3 * h))
    default = DEFAULT_ACTIVATIONS[node.op]
    acts = tuple(attrs["activations"])
    if acts and acts not in (default, default * 2):
        raise UnsupportedError(f"{node.describe()}: activations {list(acts)} are not "
                               f"supported; Kiln compiles the default {list(default)}")
    if attrs.get("input_forget"):
        raise UnsupportedError(f"{node.describe()}: input_forget = 1 is not supported")
    if node.input(4) is not None:
        lens = const_input(node, 4, "sequence_lens")
        if lens is None or lens.shape != (b,) or np.any(lens != s):
            raise UnsupportedError(
                f"{node.describe()}: sequence_lens must equal the sequence length {s} for "
                "every batch entry (Kiln compiles fixed shapes and does not mask); drop the "
                "input or pad the batch")
    return s, b, n_in, h, dirs


def _rnn_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    s, b, _, h, dirs = rnn_dims(node, attrs)
    dt = node.inputs[0].dtype
    y = (b, s, dirs, h) if attrs["layout"] else (s, dirs, b, h)
    state = (b, dirs, h) if attrs["layout"] else (dirs, b, h)
    return [TensorType(y, dt)] + [TensorType(state, dt)] * (2 if node.op == "LSTM" else 1)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _lstm_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    dt = x.dtype
    f64 = [None if v is None else np.asarray(v, np.float64) for v in ins]
    xs = np.swapaxes(f64[0], 0, 1) if attrs["layout"] else f64[0]  # (S, B, I)
    w, r = f64[1], f64[2]
    dirs, h4 = w.shape[0], w.shape[1]
    h = h4 // 4
    s, b = xs.shape[0], xs.shape[1]
    bias = f64[3] if f64[3] is not None else np.zeros((dirs, 2 * h4))
    peep = f64[7] if f64[7] is not None else np.zeros((dirs, 3 * h))

    def state(v: np.ndarray | None) -> np.ndarray:
        if v is None:
            return np.zeros((dirs, b, h))
        return np.swapaxes(v, 0, 1) if attrs["layout"] else v

    h0, c0 = state(f64[5]), state(f64[6])
    clip = attrs["clip"]

    def cut(v: np.ndarray) -> np.ndarray:
        return v if clip is None else np.clip(v, -clip, clip)

    y = np.zeros((s, dirs, b, h))
    yh, yc = np.zeros((dirs, b, h)), np.zeros((dirs, b, h))
    for d in range(dirs):
        reverse = attrs["direction"] == "reverse" or d == 1
        ht, ct = h0[d], c0[d]
        pi, po, pf = np.split(peep[d], 3)
        for t in (range(s - 1, -1, -1) if reverse else range(s)):
            g = xs[t] @ w[d].T + ht @ r[d].T + bias[d][:h4] + bias[d][h4:]
            gi, go, gf, gc = np.split(g, 4, axis=-1)
            i = _sigmoid(cut(gi + pi * ct))
            f = _sigmoid(cut(gf + pf * ct))
            ct = f * ct + i * np.tanh(cut(gc))
            o = _sigmoid(cut(go + po * ct))
            ht = o * np.tanh(ct)
            y[t, d] = ht
        yh[d], yc[d] = ht, ct
    if attrs["layout"]:
        y, yh, yc = np.transpose(y, (2, 0, 1, 3)), np.swapaxes(yh, 0, 1), np.swapaxes(yc, 0, 1)
    return [y.astype(dt), yh.astype(dt), yc.astype(dt)]


def _gru_rnn_ref(op: str):
    def ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
        dt = np.asarray(ins[0]).dtype
        f64 = [None if v is None else np.asarray(v, np.float64) for v in ins]
        xs = np.swapaxes(f64[0], 0, 1) if attrs["layout"] else f64[0]  # (S, B, I)
        w, r = f64[1], f64[2]
        dirs, gh = w.shape[0], w.shape[1]
        h = gh // GATES[op]
        s, b = xs.shape[0], xs.shape[1]
        bias = f64[3] if f64[3] is not None else np.zeros((dirs, 2 * gh))
        h0 = np.zeros((dirs, b, h)) if f64[5] is None else (
            np.swapaxes(f64[5], 0, 1) if attrs["layout"] else f64[5])
        clip = attrs["clip"]

        def cut(v: np.ndarray) -> np.ndarray:
            return v if clip is None else np.clip(v, -clip, clip)

        y = np.zeros((s, dirs, b, h))
        yh = np.zeros((dirs, b, h))
        for d in range(dirs):
            ht = h0[d]
            wb, rb = bias[d][:gh], bias[d][gh:]
            for t in (range(s - 1, -1, -1) if attrs["direction"] == "reverse" or d == 1
                      else range(s)):
                xw = xs[t] @ w[d].T + wb
                if op == "RNN":
                    ht = np.tanh(cut(xw + ht @ r[d].T + rb))
                else:
                    hr = ht @ r[d].T + rb
                    z = _sigmoid(cut(xw[:, :h] + hr[:, :h]))
                    rr = _sigmoid(cut(xw[:, h:2 * h] + hr[:, h:2 * h]))
                    if attrs["linear_before_reset"]:
                        cand = xw[:, 2 * h:] + rr * hr[:, 2 * h:]
                    else:
                        cand = xw[:, 2 * h:] + (rr * ht) @ r[d][2 * h:].T + rb[2 * h:]
                    ht = (1 - z) * np.tanh(cut(cand)) + z * ht
                y[t, d] = ht
            yh[d] = ht
        if attrs["layout"]:
            y, yh = np.transpose(y, (2, 0, 1, 3)), np.swapaxes(yh, 0, 1)
        return [y.astype(dt), yh.astype(dt)]

    return ref


def _lstm_flops(node: Node) -> int:
    x, w = node.input(0), node.input(1)
    if x is None or w is None or x.rank != 3 or w.rank != 3:
        return 0
    gh = w.shape[1]
    h = gh // GATES[node.op]
    steps = x.shape[0] * x.shape[1] * w.shape[0]
    return steps * (2 * gh * (w.shape[2] + h) + 10 * h)


_COMMON = (Attr("activation_alpha", "floats", ()), Attr("activation_beta", "floats", ()),
           Attr("activations", "strings", ()), Attr("clip", "float", None),
           Attr("direction", "string", "forward", _DIRECTIONS),
           Attr("hidden_size", "int", None), Attr("layout", "int", 0, (0, 1)))

#: this family's ops (registered by the op table, ``registry.builtin_ops``)
OPS: tuple[OpDef, ...] = (
    defop("LSTM", ("X", "W", "R", "B?", "sequence_lens?", "initial_h?", "initial_c?", "P?"),
          PatternKind.OPAQUE, num_outputs=(0, 3), infer=_rnn_infer, reference=_lstm_ref,
          attrs=_COMMON + (Attr("input_forget", "int", 0, (0, 1)),),
          flops=_lstm_flops, min_opset=7,
          doc="long short-term memory (default activations, peepholes, clip, initial states, "
              "forward/reverse/bidirectional, both layouts); outputs Y, Y_h, Y_c"),
    defop("GRU", ("X", "W", "R", "B?", "sequence_lens?", "initial_h?"), PatternKind.OPAQUE,
          num_outputs=(0, 2), infer=_rnn_infer, reference=_gru_rnn_ref("GRU"),
          attrs=_COMMON + (Attr("linear_before_reset", "int", 0, (0, 1)),),
          flops=_lstm_flops, min_opset=7,
          doc="gated recurrent unit (gates z, r, h; linear_before_reset; default activations, "
              "clip, initial state, directions, layouts); outputs Y, Y_h"),
    defop("RNN", ("X", "W", "R", "B?", "sequence_lens?", "initial_h?"), PatternKind.OPAQUE,
          num_outputs=(0, 2), infer=_rnn_infer, reference=_gru_rnn_ref("RNN"),
          attrs=_COMMON, flops=_lstm_flops, min_opset=7,
          doc="simple recurrence H_t = tanh(X_t Wᵀ + H_{t-1} Rᵀ + Wb + Rb); outputs Y, Y_h"),
)
