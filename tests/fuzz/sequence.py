"""Recurrent and attention generators for :mod:`tests.fuzz.modern` (``--recurrent``,
``--attention``).

* LSTM, GRU and RNN over a ``[seq, batch, input]`` tensor (a rank-2 one gets a batch of
  1): every direction, 1–5 hidden units, the activations Kiln and onnxruntime both know
  (with their alpha/beta given, as Kiln requires for Affine, ThresholdedRelu and
  ScaledTanh), ``clip``, constant ``sequence_lens`` (shorter sequences, now and then an
  empty one), initial states (constants or computed tensors), biases, peepholes,
  ``input_forget``, ``linear_before_reset``, any subset of the outputs; ``Y`` reshaped to
  ``[seq, batch, dirs·hidden]`` so a second layer can follow; ``layout`` 1 now and then
  (``[batch, seq, ...]``): onnxruntime's CPU provider refuses it, so the oracle gives
  onnxruntime the layout-0 twin between Transposes (:func:`tests.fuzz.oracle.run_ort`).
* The scaled-dot-product pattern as exporters write it, from a ``[batch, seq, embed]``
  tensor: Q/K/V projections, Reshape to heads and Transposes (K straight to ``[B, H, D,
  S]`` or via ``[B, H, S, D]``), the scale (on the scores, by Mul or Div, or on Q and K
  both), an additive mask (every broadcast shape, ``-inf`` entries) or ``Where`` with a
  fill (either operand order), Softmax, the product with V, heads back to ``[B, S, E]``;
  multi-query (one K/V head), cross attention from another tensor, intermediates read by
  other nodes or made outputs (the pattern then stays separate kernels); and the
  ``Attention`` op (opset 23: 3-D and 4-D, GQA, ``is_causal``, ``scale``, ``softcap``,
  bool and float masks).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tests.fuzz.graphs import F32, Builder

#: activations and how many of (alpha, beta) each takes, as onnxruntime reads them
ACTIVATIONS = {"Sigmoid": (0, 0), "Tanh": (0, 0), "Relu": (0, 0), "HardSigmoid": (1, 1),
               "LeakyRelu": (1, 0), "Elu": (1, 0), "Softsign": (0, 0), "Softplus": (0, 0),
               "Affine": (1, 1), "ThresholdedRelu": (1, 0), "ScaledTanh": (1, 1)}


def _seq_input(b: Builder) -> tuple[str, tuple[int, int, int]] | None:
    x = b.pick(lambda s: len(s) in (2, 3) and s[-1] <= 16 and s[0] <= 6 and
               (len(s) == 2 or s[1] <= 4))
    if x is None:
        return None
    s = b.tensors[x]
    if len(s) == 2:
        x = b.node("Unsqueeze", [x, b.const(np.array([1], np.int64))], (s[0], 1, s[1]))[0]
        s = b.tensors[x]
    return x, (s[0], s[1], s[2])


def _rnn(b: Builder) -> bool:
    got = _seq_input(b)
    if got is None:
        return False
    x, (seq, batch, isz) = got
    layout = int(b.rng.random() < 0.3)  # [batch, seq, input]: the same tensor read so
    if layout:
        seq, batch = batch, seq
    op = b.choice(["LSTM", "GRU", "RNN"])
    gates, n_act = {"LSTM": (4, 3), "GRU": (3, 2), "RNN": (1, 1)}[op]
    direction = b.choice(["forward", "reverse", "bidirectional"])
    dirs = 2 if direction == "bidirectional" else 1
    h = b.randint(1, 5)
    attrs: dict = {"hidden_size": h, "direction": direction}
    if layout:
        attrs["layout"] = 1
    if b.rng.random() < 0.4:
        acts = [b.choice(list(ACTIVATIONS)) for _ in range(n_act * dirs)]
        attrs["activations"] = acts
        alpha = [float(b.choice([0.1, 0.5, 1.3])) for a in acts if ACTIVATIONS[a][0]]
        beta = [float(b.choice([0.0, 0.2, 0.5])) for a in acts if ACTIVATIONS[a][1]]
        if alpha:
            attrs["activation_alpha"] = alpha
        if beta:
            attrs["activation_beta"] = beta
    if b.rng.random() < 0.3:
        attrs["clip"] = float(b.choice([0.5, 1.0, 3.0]))
    if op == "LSTM" and b.rng.random() < 0.2:
        attrs["input_forget"] = 1
    if op == "GRU":
        attrs["linear_before_reset"] = b.randint(0, 1)
    inputs = [x, b.weight((dirs, gates * h, isz)), b.weight((dirs, gates * h, h))]
    inputs.append(b.weight((dirs, 2 * gates * h), 0.3) if b.rng.random() < 0.7 else "")
    if b.rng.random() < 0.35:
        lens = b.rng.integers(1, seq + 1, batch)
        if b.rng.random() < 0.15:
            lens[0] = 0
        inputs.append(b.const(lens.astype(np.int32)))
    else:
        inputs.append("")
    hs = (batch, dirs, h) if layout else (dirs, batch, h)
    for _ in range(2 if op == "LSTM" else 1):  # initial_h (and initial_c)
        r = b.rng.random()
        state = b.pick(lambda t: t == hs) if 0.3 <= r < 0.45 else None
        if r < 0.3:
            inputs.append(b.weight(hs, 0.5))
        else:
            inputs.append(state or "")
    if op == "LSTM" and b.rng.random() < 0.3:
        inputs.append(b.weight((dirs, 3 * h), 0.5))
    while inputs and inputs[-1] == "":
        inputs.pop()
    n_out = 3 if op == "LSTM" else 2
    names = b.node(op, inputs, None, n_out=n_out, **attrs)
    keep = [b.rng.random() < 0.8, b.rng.random() < 0.5, b.rng.random() < 0.4]
    if not any(keep[:n_out]):
        keep[0] = True
    node = b.nodes[-1]
    for i in range(n_out):
        if not keep[i]:
            node.output[i] = ""
    while node.output and node.output[-1] == "":
        node.output.pop()
    if keep[0] and layout:  # Y [batch, seq, dirs, hidden] as the next layer's input
        y = names[0]
        b.tensors[y] = (batch, seq, dirs, h)
        b.node("Reshape", [y, b.const(np.array([batch, seq, dirs * h], np.int64))],
               (batch, seq, dirs * h))
    elif keep[0]:  # Y as the next layer's input: [seq, batch, dirs * hidden]
        y = names[0]
        b.tensors[y] = (seq, dirs, batch, h)
        t = b.node("Transpose", [y], (seq, batch, dirs, h), perm=[0, 2, 1, 3])[0]
        b.node("Reshape", [t, b.const(np.array([seq, batch, dirs * h], np.int64))],
               (seq, batch, dirs * h))
    for i in (1, 2):
        if i < n_out and keep[i]:
            b.tensors[names[i]] = hs
    return True


def _mask(b: Builder, shape: tuple[int, ...]) -> np.ndarray:
    """A boolean keep-mask of ``shape`` (broadcasting to the scores) with at least one
    kept key in every row: random, or causal."""
    sq, sk = shape[-2], shape[-1]
    if b.rng.random() < 0.4 and sq <= sk:
        keep = np.tril(np.ones((sq, sk), bool), sk - sq)
        return np.broadcast_to(keep, shape).copy()
    keep = b.rng.random(shape) < 0.7
    keep[..., 0] = True
    return keep


def _heads(b: Builder, x: str, s: tuple[int, int, int], heads: int, d: int,
           kt: bool = False) -> str:
    """``x @ W`` reshaped to ``[B, heads, S, d]`` (``kt``: ``[B, heads, d, S]``)."""
    bsz, seq, e = s
    p = b.node("MatMul", [x, b.weight((e, heads * d))], None)[0]
    if b.rng.random() < 0.4:
        p = b.node("Add", [p, b.weight((heads * d,), 0.2)], None)[0]
    r = b.node("Reshape", [p, b.const(np.array([bsz, seq, heads, d], np.int64))], None)[0]
    if kt and b.rng.random() < 0.6:
        return b.node("Transpose", [r], None, perm=[0, 2, 3, 1])[0]
    t = b.node("Transpose", [r], None, perm=[0, 2, 1, 3])[0]
    if kt:
        return b.node("Transpose", [t], None, perm=[0, 1, 3, 2])[0]
    return t


def _attention_pattern(b: Builder) -> bool:
    x = b.pick(lambda s: len(s) == 3 and s[1] <= 8 and s[2] <= 16)
    if x is None:
        return False
    s = b.tensors[x]
    bsz, sq, e = s
    src = b.pick(lambda t: len(t) == 3 and t[0] == bsz and t[1] <= 8 and t[2] <= 16) \
        if b.rng.random() < 0.3 else x
    ks = b.tensors[src]
    sk = ks[1]
    heads, d = b.randint(1, 3), b.randint(1, 4)
    kvh = 1 if b.rng.random() < 0.2 else heads  # multi-query: one K/V head
    q = _heads(b, x, s, heads, d)
    k = _heads(b, src, ks, kvh, d, kt=True)
    dv = b.randint(1, 4)
    v = _heads(b, src, ks, kvh, dv)
    scale = 1.0 / np.sqrt(d)
    how = b.choice(["after", "after", "qk", "none"])
    if how == "qk":  # PyTorch's SDPA export: Q and Kt each times d^-1/4
        c = b.const(np.array(scale ** 0.5, F32))
        q = b.node("Mul", [q, c], None)[0]
        k = b.node("Mul", [k, c], None)[0]
    sc = b.node("MatMul", [q, k], None)[0]
    if how == "after":
        if b.rng.random() < 0.5:
            sc = b.node("Div", [sc, b.const(np.array(np.sqrt(d), F32))], None)[0]
        else:
            sc = b.node("Mul", [sc, b.const(np.array(scale, F32))], None)[0]
    full = (bsz, heads, sq, sk)
    m = b.rng.random()
    if m < 0.6:
        mshape = b.choice([(sq, sk), (1, 1, sq, sk), (bsz, 1, 1, sk), full, (bsz, 1, sq, sk)])
        keep = _mask(b, mshape)
        if b.rng.random() < 0.5:
            fill = b.choice([-np.inf, -1e9, -1e4])
            add = np.where(keep, b.rng.standard_normal(mshape) * 0.5, fill).astype(F32)
            sc = b.node("Add", [sc, b.const(add)] if b.rng.random() < 0.7 else
                        [b.const(add), sc], None)[0]
        else:
            fill = b.const(np.array(b.choice([-np.inf, -1e9]), F32))
            if b.rng.random() < 0.5:
                sc = b.node("Where", [b.const(keep), sc, fill], None)[0]
            else:
                sc = b.node("Where", [b.const(~keep), fill, sc], None)[0]
    p = b.node("Softmax", [sc], None, axis=b.choice([-1, 3]))[0]
    ctx = b.node("MatMul", [p, v], (bsz, heads, sq, dv))[0]
    if b.rng.random() < 0.3:  # an intermediate read again: the pattern must stay unfused
        b.tensors[p] = full
    t = b.node("Transpose", [ctx], (bsz, sq, heads, dv), perm=[0, 2, 1, 3])[0]
    out = b.node("Reshape", [t, b.const(np.array([bsz, sq, heads * dv], np.int64))],
                 (bsz, sq, heads * dv))[0]
    if b.rng.random() < 0.5:
        b.node("MatMul", [out, b.weight((heads * dv, e))], (bsz, sq, e))
    return True


def _attention_op(b: Builder) -> bool:
    """The Attention op (opset 23)."""
    x = b.pick(lambda s: len(s) == 3 and s[1] <= 8 and s[2] <= 16)
    if x is None:
        return False
    bsz, sq, e = b.tensors[x]
    kvh = b.randint(1, 2)
    heads = kvh * b.randint(1, 2)
    d, dv = b.randint(1, 4), b.randint(1, 4)
    sk = sq if b.rng.random() < 0.7 else b.randint(1, 6)
    attrs: dict = {}
    three_d = b.rng.random() < 0.5
    q = b.node("MatMul", [x, b.weight((e, heads * d))], None)[0]
    kx = x if sk == sq else b.const(b.rng.standard_normal((bsz, sk, e)).astype(F32))
    k = b.node("MatMul", [kx, b.weight((e, kvh * d))], None)[0]
    v = b.node("MatMul", [kx, b.weight((e, kvh * dv))], None)[0]
    if three_d:
        attrs.update(q_num_heads=heads, kv_num_heads=kvh)
    else:
        def four(t: str, n: int, s: int, dd: int) -> str:
            r = b.node("Reshape", [t, b.const(np.array([bsz, s, n, dd], np.int64))], None)[0]
            return b.node("Transpose", [r], None, perm=[0, 2, 1, 3])[0]
        q, k, v = four(q, heads, sq, d), four(k, kvh, sk, d), four(v, kvh, sk, dv)
    if b.rng.random() < 0.3:
        attrs["is_causal"] = 1
    if b.rng.random() < 0.3:
        attrs["scale"] = float(b.choice([0.1, 0.5, 1.0]))
    if b.rng.random() < 0.2:
        attrs["softcap"] = float(b.choice([1.0, 5.0]))
    inputs = [q, k, v]
    if b.rng.random() < 0.4:
        mshape = b.choice([(sq, sk), (1, 1, sq, sk), (bsz, 1, sq, sk)])
        keep = _mask(b, mshape)
        if "is_causal" in attrs:  # a row all masked by both: zeros (opset 25) vs NaN
            keep = np.ones(mshape, bool)
        inputs.append(b.const(keep) if b.rng.random() < 0.5 else
                      b.const(np.where(keep, 0.0, -np.inf).astype(F32)))
    y = b.node("Attention", inputs, None, **attrs)[0]
    if three_d:
        b.tensors[y] = (bsz, sq, heads * dv)
    else:
        t = b.node("Transpose", [y], (bsz, sq, heads, dv), perm=[0, 2, 1, 3])[0]
        b.node("Reshape", [t, b.const(np.array([bsz, sq, heads * dv], np.int64))],
               (bsz, sq, heads * dv))
    return True


Gen = tuple[tuple[Callable[[Builder], bool], float], ...]
RECURRENT: Gen = ((_rnn, 2.5),)
ATTENTION: Gen = ((_attention_pattern, 2.5), (_attention_op, 1.0))
