"""Expand ``LSTM``, ``GRU`` and ``RNN`` nodes into ops that compile to fast kernels.

The sequence length is static, so the recurrence is unrolled, linearly in its length:

* per direction, the input projection of **all** time steps is one ``MatMul``
  (``[seq*batch, input] x [input, gates*hidden]``, a real GEMM) plus the biases;
* per time step, one ``Gemm`` of the previous hidden state by the transposed recurrence
  weights plus that step's rows of the projection (two GEMMs for a GRU without
  ``linear_before_reset``), ``Slice``\\ s of the gates, the activations (clipped when ``clip`` is
  set) and the element-wise state update;
* ``Concat``/``Unsqueeze``/``Transpose`` assemble ``Y``, ``Y_h``, ``Y_c`` in the node's
  layout.  The reverse direction walks the steps backwards; with constant
  ``sequence_lens`` of different lengths its input rows are first permuted per batch
  entry (one ``Gather``), the state stops changing after each sequence's end (``Where``
  by a constant mask) and ``Y`` rows past it are 0, as onnxruntime computes them.

Weights are sliced per direction (``Gather``) and transposed by ops of the graph, so
constant weights fold at compile time (``constant_fold`` runs right after) and weights
that are inputs still work.  Each step's state is read by the next step and by ``Y``, so
fusion materialises it: a step is about three kernels (the recurrence GEMM, the cell
update, the output gate), and no fused expression grows with
the sequence length.

Before / after (``format_graph``; a forward RNN of 2 steps, constants' lines left out)::

    graph g(%x: float32[2, 1, 3]) -> (%y_h: float32[1, 1, 4]) {
      %y, %y_h = RNN(%x, %w, %r, hidden_size=4)  # rnn
    }
    ---
    graph g(%x: float32[2, 1, 3]) -> (%y_h: float32[1, 1, 4]) {
      %rnn/x2d: float32[2, 3] = Reshape(%x, %rnn/shape)
      %rnn/w: float32[4, 3] = Gather(%w, %rnn/d0, axis=0)
      %rnn/wT: float32[3, 4] = Transpose(%rnn/w, perm=[1, 0])
      %rnn/xw: float32[2, 4] = MatMul(%rnn/x2d, %rnn/wT)
      ...
      %rnn/t0/x: float32[1, 4] = Slice(%rnn/xw, [0], [1], [0])
      %rnn/t0/h: float32[1, 4] = Tanh(%rnn/t0/x)
      %rnn/t1/x: float32[1, 4] = Slice(%rnn/xw, [1], [2], [0])
      %rnn/t1/g: float32[1, 4] = Gemm(%rnn/t0/h, %rnn/rT, %rnn/t1/x)
      %rnn/t1/h: float32[1, 4] = Tanh(%rnn/t1/g)
      %y_h: float32[1, 1, 4] = Unsqueeze(%rnn/t1/h, [0])
    }
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from toolchain.errors import InternalError
from toolchain.graph.ir import Graph, Node, Value
from toolchain.graph.ops.registry import get_op
from toolchain.graph.ops.rnn import RECURRENT, Activation, Resolved, resolve
from toolchain.graph.passes._util import Namer

ActSpec = tuple[Activation, float, float]


class _Emitter:
    """Appends nodes for one recurrent node, naming them ``<node>/<hint>``, with output
    types from each op's own shape rule."""

    def __init__(self, namer: Namer, prefix: str) -> None:
        self.namer = namer
        self.prefix = prefix
        self.nodes: list[Node] = []
        self.scope = ""

    def name(self, hint: str) -> str:
        return self.namer(f"{self.prefix}/{self.scope}{hint}")

    def const(self, hint: str, array: Any, dtype: Any = np.float32) -> Value:
        return Value.constant(self.name(hint), np.asarray(array, dtype))

    def op(self, op: str, inputs: Sequence[Value | None], hint: str,
           out: Value | None = None, **attrs: Any) -> Value:
        name = self.name(hint)
        node = Node(op, name, inputs, [Value(name, (), "float32")], attrs)
        t = get_op(op).infer(node)[0]
        if out is None:
            out = Value(name, t.shape, t.dtype)
        elif out.type != t:
            raise InternalError(f"expand_recurrent: {self.prefix}: {out.name!r} is {out.type} "
                                f"but its expansion computes {t}")
        self.nodes.append(node.replace(outputs=(out,)))
        return out

    # -- shorthands ---------------------------------------------------------------------------
    def slice(self, x: Value, start: int, stop: int, axis: int, hint: str) -> Value:
        return self.op("Slice", [x, self.const("starts", [start], np.int64),
                                 self.const("ends", [stop], np.int64),
                                 self.const("axes", [axis], np.int64)], hint)

    def pick(self, x: Value, index: int, axis: int, hint: str) -> Value:
        """``x`` at ``index`` of ``axis`` (that axis removed)."""
        return self.op("Gather", [x, self.const("index", index, np.int64)], hint, axis=axis)

    def unsqueeze(self, x: Value, axis: int, hint: str, out: Value | None = None) -> Value:
        return self.op("Unsqueeze", [x, self.const("axes", [axis], np.int64)], hint, out=out)

    def add(self, a: Value | None, b: Value | None, hint: str) -> Value | None:
        if a is None or b is None:
            return a if b is None else b
        return self.op("Add", [a, b], hint)

    def matmul(self, a: Value | None, b: Value, c: Value | None, hint: str) -> Value | None:
        """``a @ b + c``; ``a`` None is 0.  The addend is Gemm's ``C``, read by the GEMM
        kernel itself: fusion may put an injective producer of an ``Add`` after a MatMul
        into the MatMul's kernel, which the anchored schedule cannot build."""
        if a is None:
            return c
        if c is None:
            return self.op("MatMul", [a, b], hint)
        return self.op("Gemm", [a, b, c], hint)

    def scalar(self, v: float) -> Value:
        return self.const("c", np.float32(v))

    def activation(self, x: Value, spec: ActSpec, clip: float | None, hint: str) -> Value:
        """``act(clip(x))`` in registered ops."""
        act, alpha, beta = spec
        if clip is not None:
            x = self.op("Clip", [x, self.scalar(-clip), self.scalar(clip)], f"{hint}_clip")
        name = act.name
        if name in ("Sigmoid", "Tanh", "Relu"):
            return self.op(name, [x], hint)
        if name == "HardSigmoid":
            return self.op(name, [x], hint, alpha=alpha, beta=beta)
        if name == "LeakyRelu":
            return self.op(name, [x], hint, alpha=alpha)
        if name == "Affine":
            return self.op("Add", [self.op("Mul", [x, self.scalar(alpha)], f"{hint}_scale"),
                                   self.scalar(beta)], hint)
        if name == "ThresholdedRelu":
            above = self.op("Greater", [x, self.scalar(alpha)], f"{hint}_above")
            return self.op("Where", [above, x, self.scalar(0.0)], hint)
        if name == "ScaledTanh":
            t = self.op("Tanh", [self.op("Mul", [x, self.scalar(beta)], f"{hint}_in")],
                        f"{hint}_tanh")
            return self.op("Mul", [t, self.scalar(alpha)], hint)
        if name == "Elu":
            neg = self.op("Less", [x, self.scalar(0.0)], f"{hint}_neg")
            em1 = self.op("Sub", [self.op("Exp", [x], f"{hint}_exp"), self.scalar(1.0)],
                          f"{hint}_em1")
            return self.op("Where", [neg, self.op("Mul", [em1, self.scalar(alpha)],
                                                  f"{hint}_scaled"), x], hint)
        if name == "Softsign":
            den = self.op("Add", [self.op("Abs", [x], f"{hint}_abs"), self.scalar(1.0)],
                          f"{hint}_den")
            return self.op("Div", [x, den], hint)
        if name == "Softplus":  # max(x, 0) + log(1 + e^-|x|): no overflow
            e = self.op("Exp", [self.op("Neg", [self.op("Abs", [x], f"{hint}_abs")],
                                        f"{hint}_nabs")], f"{hint}_exp")
            log = self.op("Log", [self.op("Add", [e, self.scalar(1.0)], f"{hint}_1p")],
                          f"{hint}_log")
            return self.op("Add", [self.op("Relu", [x], f"{hint}_pos"), log], hint)
        raise InternalError(f"expand_recurrent: activation {name} has no expansion")


class _Direction:
    """The per-direction operands of one recurrent node, sliced and transposed."""

    def __init__(self, em: _Emitter, node: Node, rs: Resolved, d: int, x2d: Value) -> None:
        g, h = RECURRENT[node.op].gates, rs.hidden
        self.rs, self.d, self.hidden = rs, d, h
        em.scope = f"d{d}/" if rs.directions > 1 else ""
        w = em.op("Transpose", [em.pick(node.inputs[1], d, 0, "w")], "wT", perm=(1, 0))
        self.r_t = em.op("Transpose", [em.pick(node.inputs[2], d, 0, "r")], "rT", perm=(1, 0))
        #: a GRU without linear_before_reset multiplies (r * H) by the h gate's columns
        self.r_split = (em.slice(self.r_t, 0, 2 * h, 1, "rT_zr"),
                        em.slice(self.r_t, 2 * h, 3 * h, 1, "rT_h")) \
            if node.op == "GRU" and not node.attrs.get("linear_before_reset") else None
        bias = node.input(3)
        self.x_bias = self.h_bias = None
        if bias is not None:
            bd = em.pick(bias, d, 0, "b")
            wb, rb = em.slice(bd, 0, g * h, 0, "wb"), em.slice(bd, g * h, 2 * g * h, 0, "rb")
            if node.op == "GRU" and node.attrs.get("linear_before_reset"):
                # the hidden gate's recurrence bias sits inside r * (...): kept apart
                keep = np.r_[np.ones(2 * h), np.zeros(h)].astype(np.float32)
                self.h_bias = em.slice(rb, 2 * h, 3 * h, 0, "rbh")
                rb = em.op("Mul", [rb, em.const("zr", keep)], "rb_zr")
            self.x_bias = em.add(wb, rb, "bias")
        xw = em.matmul(x2d, w, self.x_bias, "xw")
        lengths = rs.lengths
        if rs.reverse[d] and lengths is not None:
            # row s*B + b of the permuted projection is time step len_b - 1 - s of entry b
            xw = em.op("Gather", [xw, em.const("perm", self.permutation(), np.int64)],
                       "xw_rev", axis=0)
        self.xw = xw
        self.peephole = None
        if node.op == "LSTM" and node.input(7) is not None:
            self.peephole = [em.slice(em.pick(node.inputs[7], d, 0, "p"), k * h,
                                      (k + 1) * h, 0, f"p{'iof'[k]}") for k in range(3)]
        self.h0 = self.initial(em, node.input(5), "h0")
        self.c0 = self.initial(em, node.input(6) if node.op == "LSTM" else None, "c0")

    def initial(self, em: _Emitter, v: Value | None, hint: str) -> Value | None:
        """This direction's initial state; ``None`` when it is 0 (absent, or a constant
        of zeros as exporters write it): step 0 then skips the recurrence GEMM."""
        if v is None or (v.data is not None and not v.data.any()):
            return None
        return em.pick(v, self.d, 1 if self.rs.layout else 0, hint)

    def permutation(self) -> np.ndarray:
        """Rows of the ``[seq*batch, ...]`` projection in the order the reverse direction
        reads them with sequence lengths (an involution: it also puts ``Y`` back)."""
        rs = self.rs
        assert rs.lengths is not None
        perm = np.arange(rs.seq * rs.batch).reshape(rs.seq, rs.batch)
        for b, n in enumerate(rs.lengths):
            perm[:n, b] = perm[:n, b][::-1]
        return perm.reshape(-1)

    def step_order(self) -> list[int]:
        """The projection rows' time steps in processing order."""
        s = self.rs.seq
        if self.rs.reverse[self.d] and self.rs.lengths is None:
            return list(range(s - 1, -1, -1))
        return list(range(s))


def _cell(em: _Emitter, node: Node, dr: _Direction, xt: Value, h: Value | None,
          c: Value | None) -> tuple[Value, Value | None]:
    """One time step: the new hidden (and LSTM cell) state; ``None`` states are 0."""
    rs, hid = dr.rs, dr.hidden
    f, g, *rest = rs.activations[dr.d] + ((None, 0.0, 0.0),)
    clip = rs.clip

    def gate(x: Value, k: int, hint: str) -> Value:
        return em.slice(x, k * hid, (k + 1) * hid, 1, hint)

    if node.op == "RNN":
        return em.activation(em.matmul(h, dr.r_t, xt, "g"), f, clip, "h"), None
    if node.op == "LSTM":
        gates = em.matmul(h, dr.r_t, xt, "g")
        pi, po, pf = dr.peephole or (None, None, None)

        def peep(x: Value, p: Value | None, state: Value | None, hint: str) -> Value:
            if p is None or state is None:
                return x
            return em.op("Add", [x, em.op("Mul", [p, state], f"{hint}_p")], f"{hint}_pre")

        i = em.activation(peep(gate(gates, 0, "gi"), pi, c, "i"), f, clip, "i")
        if node.attrs.get("input_forget"):
            forget = em.op("Sub", [em.scalar(1.0), i], "f")
        else:
            forget = em.activation(peep(gate(gates, 2, "gf"), pf, c, "f"), f, clip, "f")
        new = em.op("Mul", [i, em.activation(gate(gates, 3, "gc"), g, clip, "c")], "ic")
        c_new = new if c is None else em.op("Add", [em.op("Mul", [forget, c], "fc"), new],
                                             "C")
        o = em.activation(peep(gate(gates, 1, "go"), po, c_new, "o"), f, clip, "o")
        h_act = rest[0]
        return em.op("Mul", [o, em.activation(c_new, h_act, None, "hc")], "H"), c_new
    # GRU
    lbr = bool(node.attrs.get("linear_before_reset"))
    xz, xr, xh = (gate(xt, k, f"x{'zrh'[k]}") for k in range(3))
    if h is None:
        z = em.activation(xz, f, clip, "z")
        r = em.activation(xr, f, clip, "r")
        inner = em.op("Mul", [r, dr.h_bias], "rbh") if lbr and dr.h_bias is not None else None
        cand = em.activation(em.add(xh, inner, "hpre"), g, clip, "hh")
        return em.op("Mul", [em.op("Sub", [em.scalar(1.0), z], "1mz"), cand], "H"), None
    if lbr:
        hr = em.op("MatMul", [h, dr.r_t], "hr")
        z = em.activation(em.add(xz, gate(hr, 0, "hz"), "zpre"), f, clip, "z")
        r = em.activation(em.add(xr, gate(hr, 1, "hr_r"), "rpre"), f, clip, "r")
        lin = em.add(gate(hr, 2, "hh"), dr.h_bias, "hh_b")
        cand_pre = em.add(xh, em.op("Mul", [r, lin], "rh"), "hpre")
    else:
        rzr, rh = dr.r_split
        hzr = em.op("MatMul", [h, rzr], "hzr")
        z = em.activation(em.add(xz, gate(hzr, 0, "hz"), "zpre"), f, clip, "z")
        r = em.activation(em.add(xr, gate(hzr, 1, "hr_r"), "rpre"), f, clip, "r")
        cand_pre = em.matmul(em.op("Mul", [r, h], "rh"), rh, xh, "hpre")
    cand = em.activation(cand_pre, g, clip, "hh")
    # (1 - z) * cand + z * h = cand + z * (h - cand)
    delta = em.op("Mul", [z, em.op("Sub", [h, cand], "hmc")], "zd")
    return em.op("Add", [cand, delta], "H"), None


def _zeros(em: _Emitter, rs: Resolved, hint: str) -> Value:
    return em.const(hint, np.zeros((rs.batch, rs.hidden), np.float32))


def _run_direction(em: _Emitter, node: Node, dr: _Direction
                   ) -> tuple[list[Value], Value, Value | None]:
    """Unroll one direction: ``Y`` rows per time step (in time order), final H and C."""
    rs = dr.rs
    h, c = dr.h0, dr.c0
    lengths = np.array(rs.lengths) if rs.lengths is not None else None
    ys: dict[int, Value] = {}
    zero = None
    for s, t in enumerate(dr.step_order()):
        em.scope = (f"d{dr.d}/" if rs.directions > 1 else "") + f"t{t}/"
        active = None if lengths is None else s < lengths
        if active is not None and not active.any():
            zero = zero or _zeros(em, rs, "zero")
            ys[s] = zero
            continue
        xt = em.slice(dr.xw, t * rs.batch, (t + 1) * rs.batch, 0, "x")
        h_new, c_new = _cell(em, node, dr, xt, h, c)
        if active is None or active.all():
            ys[s] = h_new
            h, c = h_new, c_new
            continue
        mask = em.const("mask", active[:, None], np.bool_)
        zero = zero or _zeros(em, rs, "zero")
        ys[s] = em.op("Where", [mask, h_new, em.scalar(0.0)], "y")
        h = em.op("Where", [mask, h_new, h if h is not None else zero], "H_kept")
        if c_new is not None:
            c = em.op("Where", [mask, c_new, c if c is not None else zero], "C_kept")
    em.scope = f"d{dr.d}/" if rs.directions > 1 else ""
    h = h if h is not None else _zeros(em, rs, "h_empty")
    if lengths is not None and (lengths == 0).any():  # onnxruntime: empty sequences end at 0
        some = em.const("nonempty", (lengths > 0)[:, None], np.bool_)
        h = em.op("Where", [some, h, em.scalar(0.0)], "h_last")
        c = em.op("Where", [some, c, em.scalar(0.0)], "c_last") if c is not None else None
    rows = [ys[s] for s in range(rs.seq)]
    if rs.reverse[dr.d] and lengths is None:
        rows = rows[::-1]
    return rows, h, c


def _y_of_direction(em: _Emitter, dr: _Direction, rows: list[Value]) -> Value:
    """``[seq, batch, hidden]`` outputs of one direction, in time order."""
    rs = dr.rs
    y = em.op("Concat", [em.unsqueeze(r, 0, "y_row") for r in rows], "y_seq", axis=0)
    if rs.reverse[dr.d] and rs.lengths is not None:
        flat = em.op("Reshape", [y, em.const("shape", [rs.seq * rs.batch, rs.hidden],
                                             np.int64)], "y_flat")
        back = em.op("Gather", [flat, em.const("perm", dr.permutation(), np.int64)],
                     "y_back", axis=0)
        y = em.op("Reshape", [back, em.const("shape", [rs.seq, rs.batch, rs.hidden],
                                             np.int64)], "y_time")
    return y


def _stack(em: _Emitter, parts: list[Value], axis: int, hint: str, out: Value | None
           ) -> Value:
    if len(parts) == 1:
        return em.unsqueeze(parts[0], axis, hint, out=out)
    return em.op("Concat", [em.unsqueeze(p, axis, f"{hint}_part") for p in parts], hint,
                 out=out, axis=axis)


def expand_node(node: Node, namer: Namer, used: set[Value]) -> list[Node]:
    """The nodes replacing one recurrent ``node``; only outputs in ``used`` are computed."""
    rs = resolve(node, get_op(node.op).normalize_attrs(
        {k: v for k, v in node.attrs.items() if v is not None}, node.describe()))
    em = _Emitter(namer, node.name)
    x = node.inputs[0]
    assert x is not None
    if rs.layout:
        x = em.op("Transpose", [x], "x_tbi", perm=(1, 0, 2))
    x2d = em.op("Reshape", [x, em.const("shape", [rs.seq * rs.batch, rs.input_size],
                                        np.int64)], "x2d")
    outs = list(node.outputs) + [None] * 3
    y_out, h_out, c_out = outs[0], outs[1], outs[2] if node.op == "LSTM" else None
    ys, hs, cs = [], [], []
    for d in range(rs.directions):
        dr = _Direction(em, node, rs, d, x2d)
        rows, h, c = _run_direction(em, node, dr)
        if y_out is not None and y_out in used:
            ys.append(_y_of_direction(em, dr, rows))
        hs.append(h)
        cs.append(c if c is not None else _zeros(em, rs, "c_zero"))
    em.scope = ""
    if ys:
        if rs.layout:
            y = _stack(em, ys, 1, "y_tdbh", None)
            em.op("Transpose", [y], "y", out=y_out, perm=(2, 0, 1, 3))
        else:
            _stack(em, ys, 1, "y", y_out)
    axis = 1 if rs.layout else 0
    if h_out is not None and h_out in used:
        _stack(em, hs, axis, "y_h", h_out)
    if c_out is not None and c_out in used:
        _stack(em, cs, axis, "y_c", c_out)
    return em.nodes


def expand_recurrent(graph: Graph) -> Graph:
    """Replace every ``LSTM``/``GRU``/``RNN`` node by its expansion (module docstring);
    a graph without them is returned unchanged.

    Example::

        >>> from toolchain.graph.reference import run_graph
        >>> x = Value("x", (3, 1, 2), "float32")
        >>> w = Value.constant("w", np.full((1, 4, 2), 0.5, np.float32))
        >>> r = Value.constant("r", np.full((1, 4, 4), 0.1, np.float32))
        >>> y, y_h = Value("y", (3, 1, 1, 4), "float32"), Value("y_h", (1, 1, 4), "float32")
        >>> g = Graph("g", [x], [y_h], [Node("RNN", "rnn", [x, w, r], [y, y_h],
        ...                                   {"hidden_size": 4})])
        >>> e = expand_recurrent(g)
        >>> sorted({n.op for n in e.nodes})
        ['Gather', 'Gemm', 'MatMul', 'Reshape', 'Slice', 'Tanh', 'Transpose', 'Unsqueeze']
        >>> feed = {"x": np.ones((3, 1, 2), np.float32)}
        >>> bool(np.allclose(run_graph(g, feed)["y_h"], run_graph(e, feed)["y_h"]))
        True
    """
    if not any(n.op in RECURRENT for n in graph.nodes):
        return graph
    namer = Namer(graph)
    used = set(graph.consumers()) | set(graph.outputs)
    nodes: list[Node] = []
    for node in graph.nodes:
        if node.op in RECURRENT:
            nodes += expand_node(node, namer, used)
        else:
            nodes.append(node)
    return graph.replace(nodes=nodes)
