"""Recurrent layers: ONNX ``LSTM``, ``GRU`` and ``RNN``.

Each op has a shape rule and an exact numpy reference (float64 inside, one rounding at the
end) here; no kernel compiles them directly.  The ``expand_recurrent`` graph pass
(:mod:`toolchain.graph.passes.expand_recurrent`) rewrites every recurrent node, before
the other passes, into ops that already compile to fast bundles: one MatMul for the
input projection of all time steps, then per step a MatMul by the recurrence weights,
the gate activations and the element-wise state update.  So ``kiln inspect`` and the
reference executor see one ``LSTM`` node; compiled bundles see its expansion.

What the ops accept (ONNX opset 14 form; older forms mean the same for these inputs):

* ``direction`` forward, reverse or bidirectional; ``layout`` 0 (``[seq, batch, ...]``)
  or 1 (``[batch, seq, ...]``); ``clip``; LSTM ``input_forget`` and peepholes ``P``; GRU
  ``linear_before_reset``; optional ``B``, ``initial_h``, ``initial_c`` and outputs;
* ``activations`` from :data:`ACTIVATIONS` (case-insensitive, as onnxruntime reads them),
  with ``activation_alpha``/``activation_beta`` consumed in order by the activations
  that take them (a missing value is the activation's default);
* ``sequence_lens`` only as a constant (it decides what the unrolled graph computes):
  a sequence of batch entry ``b`` stops after ``sequence_lens[b]`` steps, its ``Y`` rows
  after that are 0 and its ``Y_h``/``Y_c`` are the state at its last step (0 for an empty
  sequence); the reverse direction reads each sequence backwards from its own last step
  (onnxruntime's rules).

Example::

    >>> import numpy as np
    >>> x = np.ones((2, 1, 3), np.float32)                    # seq 2, batch 1, input 3
    >>> w, r = np.full((1, 4, 3), 0.1, np.float32), np.zeros((1, 4, 4), np.float32)
    >>> y, y_h = rnn_reference("RNN", [x, w, r], {"hidden_size": 4})[:2]
    >>> y.shape, y_h.shape, round(float(y_h[0, 0, 0]), 4)      # tanh(0.3)
    ((2, 1, 1, 4), (1, 1, 4), 0.2913)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from toolchain.errors import ModelError, UnsupportedError
from toolchain.graph.ir import Node, TensorType
from toolchain.graph.ops.common import check_dtype, defop, input_value
from toolchain.graph.ops.registry import Attr, OpDef, PatternKind


@dataclass(frozen=True)
class Activation:
    """One activation of ONNX's recurrent ops: its alpha/beta use and defaults, its numpy
    form (float64), and a short formula for the docs."""

    name: str
    alphas: int
    betas: int
    alpha: float
    beta: float
    fn: Callable[[np.ndarray, float, float], np.ndarray]
    formula: str
    #: alpha/beta must be given: ONNX's defaults are unclear and onnxruntime's differ
    explicit: bool = False


def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


#: the activations ONNX allows in LSTM/GRU/RNN, by lower-case name (all are supported)
ACTIVATIONS: dict[str, Activation] = {a.name.lower(): a for a in (
    Activation("Sigmoid", 0, 0, 0.0, 0.0, lambda x, a, b: _sigmoid(x), "1 / (1 + e^-x)"),
    Activation("Tanh", 0, 0, 0.0, 0.0, lambda x, a, b: np.tanh(x), "tanh(x)"),
    Activation("Relu", 0, 0, 0.0, 0.0, lambda x, a, b: np.maximum(x, 0.0), "max(x, 0)"),
    Activation("HardSigmoid", 1, 1, 0.2, 0.5,
               lambda x, a, b: np.clip(a * x + b, 0.0, 1.0), "min(max(alpha x + beta, 0), 1)"),
    Activation("Affine", 1, 1, 1.0, 0.0, lambda x, a, b: a * x + b, "alpha x + beta", True),
    Activation("LeakyRelu", 1, 0, 0.01, 0.0, lambda x, a, b: np.where(x >= 0, x, a * x),
               "x if x >= 0 else alpha x"),
    Activation("ThresholdedRelu", 1, 0, 1.0, 0.0, lambda x, a, b: np.where(x > a, x, 0.0),
               "x if x > alpha else 0", True),
    Activation("ScaledTanh", 1, 1, 1.0, 1.0, lambda x, a, b: a * np.tanh(b * x),
               "alpha tanh(beta x)", True),
    Activation("Elu", 1, 0, 1.0, 0.0, lambda x, a, b: np.where(x >= 0, x, a * np.expm1(x)),
               "x if x >= 0 else alpha (e^x - 1)"),
    Activation("Softsign", 0, 0, 0.0, 0.0, lambda x, a, b: x / (1.0 + np.abs(x)),
               "x / (1 + |x|)"),
    Activation("Softplus", 0, 0, 0.0, 0.0, lambda x, a, b: np.logaddexp(0.0, x),
               "log(1 + e^x)"),
)}


@dataclass(frozen=True)
class RecurrentKind:
    """What distinguishes LSTM, GRU and RNN: gate count and default activations."""

    op: str
    gates: int
    activations: tuple[str, ...]


#: the recurrent ops, by name
RECURRENT: dict[str, RecurrentKind] = {
    "LSTM": RecurrentKind("LSTM", 4, ("Sigmoid", "Tanh", "Tanh")),
    "GRU": RecurrentKind("GRU", 3, ("Sigmoid", "Tanh")),
    "RNN": RecurrentKind("RNN", 1, ("Tanh",)),
}

_INPUTS = {
    "LSTM": ("X", "W", "R", "B?", "sequence_lens?", "initial_h?", "initial_c?", "P?"),
    "GRU": ("X", "W", "R", "B?", "sequence_lens?", "initial_h?"),
    "RNN": ("X", "W", "R", "B?", "sequence_lens?", "initial_h?"),
}
_OUTPUTS = {"LSTM": 3, "GRU": 2, "RNN": 2}
DIRECTIONS = ("forward", "reverse", "bidirectional")


def _check_activation_names(names: tuple[str, ...]) -> str | None:
    bad = [n for n in names if n.lower() not in ACTIVATIONS]
    if bad:
        known = ", ".join(a.name for a in ACTIVATIONS.values())
        return f"unknown activation(s) {', '.join(map(repr, bad))} (ONNX allows: {known})"
    return None


def _attrs(op: str) -> tuple[Attr, ...]:
    common = (
        Attr("activation_alpha", "floats", None),
        Attr("activation_beta", "floats", None),
        Attr("activations", "strings", None, check=_check_activation_names),
        Attr("clip", "float", None,
             check=lambda c: None if c > 0 else "the clip threshold must be positive"),
        Attr("direction", "string", "forward", DIRECTIONS),
        Attr("hidden_size", "int", None,
             check=lambda h: None if h > 0 else "hidden_size must be positive"),
        Attr("layout", "int", 0, (0, 1)),
    )
    extra = {"LSTM": (Attr("input_forget", "int", 0, (0, 1)),),
             "GRU": (Attr("linear_before_reset", "int", 0, (0, 1)),),
             "RNN": ()}[op]
    return common + extra


@dataclass(frozen=True)
class Resolved:
    """A recurrent node's static facts, checked: sizes, directions, activations."""

    op: str
    seq: int
    batch: int
    input_size: int
    hidden: int
    directions: int
    #: per direction: read the sequence backwards
    reverse: tuple[bool, ...]
    #: per direction: (activation, alpha, beta) for f, g, h (as many as the op uses)
    activations: tuple[tuple[tuple[Activation, float, float], ...], ...]
    clip: float | None
    layout: int
    #: constant sequence lengths (None: every sequence has the full length)
    lengths: tuple[int, ...] | None


def resolve_activations(node: Node, attrs: Mapping[str, Any], directions: int
                        ) -> tuple[tuple[tuple[Activation, float, float], ...], ...]:
    """Per direction, the activations with their alpha and beta.

    The ``activation_alpha``/``activation_beta`` lists are consumed in order by the
    activations that take such a value (onnxruntime's rule); an activation finding the
    list used up gets its default.

    >>> from toolchain.graph.ir import Value
    >>> n = Node("GRU", "g", [], [])
    >>> acts = resolve_activations(
    ...     n, {"activations": ("LeakyRelu", "HardSigmoid"), "activation_alpha": (0.5,)}, 1)
    >>> [(a.name, alpha, beta) for a, alpha, beta in acts[0]]
    [('LeakyRelu', 0.5, 0.0), ('HardSigmoid', 0.2, 0.5)]
    """
    kind = RECURRENT[node.op]
    per_dir = len(kind.activations)
    names = attrs.get("activations")
    if names is None:
        names = kind.activations * directions
    if len(names) != per_dir * directions:
        raise ModelError(
            f"{node.describe()}: attribute 'activations' has {len(names)} entries, but "
            f"{node.op} with {directions} direction(s) takes {per_dir * directions} "
            f"({per_dir} per direction: {', '.join(kind.activations)} by default)")
    unknown = _check_activation_names(tuple(names))
    if unknown:
        raise UnsupportedError(f"{node.describe()}: attribute 'activations': {unknown}")
    alphas = list(attrs.get("activation_alpha") or ())
    betas = list(attrs.get("activation_beta") or ())
    resolved = []
    for name in names:
        act = ACTIVATIONS[name.lower()]
        if act.explicit and (len(alphas) < act.alphas or len(betas) < act.betas):
            which = ("'activation_alpha' and 'activation_beta'" if act.betas
                     else "'activation_alpha'")
            raise UnsupportedError(
                f"{node.describe()}: attribute 'activations': {act.name} needs its value(s) "
                f"given in {which} (ONNX's defaults for it are unclear and onnxruntime's "
                "differ from ONNX's operators); give them explicitly")
        alpha = alphas.pop(0) if act.alphas and alphas else act.alpha
        beta = betas.pop(0) if act.betas and betas else act.beta
        resolved.append((act, float(alpha), float(beta)))
    return tuple(tuple(resolved[d * per_dir:(d + 1) * per_dir]) for d in range(directions))


def _expect(node: Node, i: int, what: str, shape: tuple[int, ...]) -> None:
    v = node.input(i)
    if v is None:
        return
    check_dtype(node, v, f"input {i} ({what})", ("float32",))
    if v.shape != shape:
        raise ModelError(f"{node.describe()}: input {i} ({what}, value {v.name!r}) has shape "
                         f"{list(v.shape)}, but {node.op} needs {list(shape)} here")


def resolve(node: Node, attrs: Mapping[str, Any]) -> Resolved:
    """Check a recurrent node's inputs and attributes; raise naming node and operand."""
    x = input_value(node, 0, "X")
    w = input_value(node, 1, "W")
    check_dtype(node, x, "input 0 (X)", ("float32",))
    kind = RECURRENT[node.op]
    if x.rank != 3 or w.rank != 3:
        raise ModelError(f"{node.describe()}: X and W must be 3-D, but X is {list(x.shape)} "
                         f"and W is {list(w.shape)}")
    layout = attrs["layout"]
    seq, batch, input_size = (x.shape[1], x.shape[0], x.shape[2]) if layout else x.shape
    hidden = attrs.get("hidden_size") or w.shape[1] // kind.gates
    direction = attrs["direction"]
    dirs = 2 if direction == "bidirectional" else 1
    _expect(node, 1, "W", (dirs, kind.gates * hidden, input_size))
    _expect(node, 2, "R", (dirs, kind.gates * hidden, hidden))
    _expect(node, 3, "B", (dirs, 2 * kind.gates * hidden))
    state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    _expect(node, 5, "initial_h", state)
    if node.op == "LSTM":
        _expect(node, 6, "initial_c", state)
        _expect(node, 7, "P", (dirs, 3 * hidden))
    lengths = _lengths(node, seq, batch)
    clip = attrs.get("clip")
    return Resolved(
        node.op, seq, batch, input_size, hidden, dirs,
        tuple(direction == "reverse" or d == 1 for d in range(dirs)),
        resolve_activations(node, attrs, dirs), None if clip is None else float(clip),
        layout, lengths)


def _lengths(node: Node, seq: int, batch: int) -> tuple[int, ...] | None:
    v = node.input(4)
    if v is None:
        return None
    if v.data is None:
        raise UnsupportedError(
            f"{node.describe()}: input 4 (sequence_lens, value {v.name!r}) is computed at run "
            "time; Kiln unrolls the recurrence at compile time and needs it as a constant: "
            "make it an initializer (or from Python bind it: from_onnx(..., bind=...)), or "
            "leave it out when every sequence has the full length")
    check_dtype(node, v, "input 4 (sequence_lens)", ("int32",))
    lengths = tuple(int(n) for n in np.asarray(v.data).reshape(-1))
    if v.shape != (batch,) or any(not 0 <= n <= seq for n in lengths):
        raise ModelError(
            f"{node.describe()}: input 4 (sequence_lens, value {v.name!r}) is "
            f"{list(lengths)} of shape {list(v.shape)}; it needs {batch} length(s) from 0 "
            f"to the sequence length {seq}")
    return None if all(n == seq for n in lengths) else lengths


def _infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    rs = resolve(node, attrs)
    h, d, b, s = rs.hidden, rs.directions, rs.batch, rs.seq
    y = (b, s, d, h) if rs.layout else (s, d, b, h)
    state = (b, d, h) if rs.layout else (d, b, h)
    return [TensorType(t, "float32") for t in (y, state, state)[:_OUTPUTS[node.op]]]


# -- the numpy reference -----------------------------------------------------------------------

def _act(spec: tuple[Activation, float, float], x: np.ndarray, clip: float | None
         ) -> np.ndarray:
    act, alpha, beta = spec
    if clip is not None:
        x = np.clip(x, -clip, clip)
    return act.fn(x, alpha, beta)


def _lstm_cell(acts, clip, attrs, xw, h, c, r, rb, p):
    f, g, hf = acts
    hidden = h.shape[-1]
    gates = xw + h @ r.T + rb
    gi, go, gf, gc = (gates[:, k * hidden:(k + 1) * hidden] for k in range(4))
    pi, po, pf = (p[k * hidden:(k + 1) * hidden] for k in range(3))
    i = _act(f, gi + pi * c, clip)
    forget = 1.0 - i if attrs["input_forget"] else _act(f, gf + pf * c, clip)
    c_new = forget * c + i * _act(g, gc, clip)
    o = _act(f, go + po * c_new, clip)
    return o * _act(hf, c_new, None), c_new


def _gru_cell(acts, clip, attrs, xw, h, c, r, rb, p):
    f, g = acts
    hidden = h.shape[-1]
    rz, rr, rh = (r[k * hidden:(k + 1) * hidden] for k in range(3))
    bz, br, bh = (rb[k * hidden:(k + 1) * hidden] for k in range(3))
    xz, xr, xh = (xw[:, k * hidden:(k + 1) * hidden] for k in range(3))
    z = _act(f, xz + h @ rz.T + bz, clip)
    reset = _act(f, xr + h @ rr.T + br, clip)
    if attrs["linear_before_reset"]:
        cand = _act(g, xh + reset * (h @ rh.T + bh), clip)
    else:
        cand = _act(g, xh + (reset * h) @ rh.T + bh, clip)
    return (1.0 - z) * cand + z * h, c


def _rnn_cell(acts, clip, attrs, xw, h, c, r, rb, p):
    h_new = _act(acts[0], xw + h @ r.T + rb, clip)
    return h_new, c


_CELLS = {"LSTM": _lstm_cell, "GRU": _gru_cell, "RNN": _rnn_cell}


def rnn_reference(op: str, ins: Sequence[Any], attrs: Mapping[str, Any]
                  ) -> list[np.ndarray]:
    """The numpy reference of ``op`` (``LSTM``, ``GRU`` or ``RNN``) on its inputs (absent
    optional ones ``None`` or left out); the outputs Y, Y_h (and Y_c)."""
    from toolchain.graph.ir import Value

    ins = list(ins) + [None] * (len(_INPUTS[op]) - len(ins))
    node = Node(op, op, [None if a is None else Value.constant(f"in{i}", np.asarray(a))
                         for i, a in enumerate(ins)], [])
    full = {a.name: a.default for a in _attrs(op)}
    full.update({k: v for k, v in attrs.items() if v is not None})
    rs = resolve(node, full)
    x, w, r = (np.asarray(a, np.float64) for a in ins[:3])
    s, b, h, nd = rs.seq, rs.batch, rs.hidden, rs.directions
    g = RECURRENT[op].gates
    bias = np.zeros((nd, 2 * g * h)) if ins[3] is None else np.asarray(ins[3], np.float64)
    def state(a: Any) -> np.ndarray:
        if a is None:
            return np.zeros((nd, b, h))
        a = np.asarray(a, np.float64)
        return a.transpose(1, 0, 2) if rs.layout else a

    h0, c0 = state(ins[5]), state(ins[6] if op == "LSTM" else None)
    if rs.layout:
        x = x.transpose(1, 0, 2)
    peep = (np.zeros((nd, 3 * h)) if op != "LSTM" or ins[7] is None
            else np.asarray(ins[7], np.float64))
    lengths = np.array(rs.lengths or (s,) * b)
    y = np.zeros((s, nd, b, h))
    y_h, y_c = np.zeros((nd, b, h)), np.zeros((nd, b, h))
    rows = np.arange(b)
    for d in range(nd):
        hs, cs = h0[d], c0[d]
        for step in range(s):
            active = step < lengths
            t = np.where(active, lengths - 1 - step if rs.reverse[d] else step, 0)
            xw = x[t, rows] @ w[d].T + bias[d, :g * h]
            h_new, c_new = _CELLS[op](rs.activations[d], rs.clip, full, xw, hs, cs, r[d],
                                      bias[d, g * h:], peep[d])
            hs = np.where(active[:, None], h_new, hs)
            cs = np.where(active[:, None], c_new, cs)
            y[t[active], d, rows[active]] = h_new[active]
        # onnxruntime: an empty sequence ends in a zero state, not the initial one
        y_h[d], y_c[d] = (np.where((lengths > 0)[:, None], a, 0.0) for a in (hs, cs))
    if rs.layout:
        y, y_h, y_c = y.transpose(2, 0, 1, 3), y_h.transpose(1, 0, 2), y_c.transpose(1, 0, 2)
    return [a.astype(np.float32) for a in (y, y_h, y_c)[:_OUTPUTS[op]]]


def _flops(node: Node) -> int:
    """Multiply-adds of the input and recurrence MatMuls (2 FLOPs each) and about ten
    element-wise operations per gate element."""
    x, w = node.inputs[0], node.inputs[1]
    assert x is not None and w is not None
    dirs, gh, input_size = w.shape
    hidden = gh // RECURRENT[node.op].gates
    steps = x.shape[0] * x.shape[1]
    return dirs * steps * (2 * gh * (input_size + hidden) + 10 * gh)


def _recurrent(op: str) -> OpDef:
    kind = RECURRENT[op]
    return defop(
        op, _INPUTS[op], PatternKind.OPAQUE, attrs=_attrs(op), infer=_infer,
        reference=lambda ins, attrs: rnn_reference(op, ins, attrs),
        num_outputs=(0, _OUTPUTS[op]), flops=_flops, compile_time=(4,),
        doc=f"one-layer {op} ({kind.gates} gate(s)); expanded into MatMul + element-wise ops "
            "per time step by the expand_recurrent pass")


#: this family's ops (registered by the op table, ``registry.builtin_ops``)
OPS: tuple[OpDef, ...] = (_recurrent("LSTM"), _recurrent("GRU"), _recurrent("RNN"))
