"""``fuse_attention``: scaled dot-product attention becomes one ``FusedAttention`` node.

Two sources (see :mod:`toolchain.graph.ops.attention` for the op):

* **the exported pattern** — what ``torch.onnx`` and most exporters write for
  ``softmax(Q·Kᵀ / √d + mask) · V``::

      s = MatMul(Q', Kt')             Q' = Q or Mul(Q, c1); Kt' = Kt or Mul(Kt, c2)
      s = Div(s, c) | Mul(s, c)       optional; c, c1, c2 scalar constants
      s = Add(s, mask)                optional, float mask broadcasting to s
        | Where(cond, s, fill) | Where(cond, fill, s)     (masked_fill; fill a scalar)
      p = Softmax(s, axis=-1)
      y = MatMul(p, V)

  Q ``[B, H, Sq, D]`` (or 3-D ``[B·H, Sq, D]``: reshaped to 4-D around the node), Kt
  ``[B, H or 1, D, Sk]``, V ``[B, H or 1, Sk, Dv]`` with Kt's heads = V's heads. Every
  intermediate must be read only by the next op of the pattern and not be a graph output.
  Anything else — a mask that would broadcast the scores to a bigger shape, a non-scalar
  scale, a mask added before the scale, a Softmax over another axis, integer or float64
  tensors — is left as it is (still correct, as separate kernels).
* **the ONNX** ``Attention`` **op** — every node (the frontend has expanded the forms Kiln's
  op does not take): 3-D inputs get ``Reshape`` + ``Transpose`` to heads, 4-D K a
  ``Transpose`` to Kt, a mask whose last axis is shorter than the keys is padded with
  ``-inf``/false, ``is_causal`` and the windows become the node's ``left``/``right``.
  ``simplify`` (which runs after this pass) merges the inserted transposes with the
  model's own.

Before / after (the transformer zoo model, one layer; shapes ``[2, 4, 32, 16]``)::

    %scores = MatMul(%q, %kT)                       # kT: [2, 4, 16, 32]
    %scaled = Div(%scores, %c4)                     # c4 = 4.0
    %probs  = Softmax(%scaled, axis=-1)
    %ctx    = MatMul(%probs, %v)
    ---
    %ctx    = FusedAttention(%q, %kT, %v, scale=0.25, softcap=0.0, left=-1, right=-1,
                             fill=-inf, empty='nan')
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from toolchain.graph.ir import Graph, Node, Value, np_dtype
from toolchain.graph.ops.attention import attention_dims, broadcasts_to
from toolchain.graph.passes._util import Namer, single_consumer

_FLOATS = ("float16", "float32")


def _scalar(v: Value | None) -> float | None:
    if v is None or v.data is None or v.data.size != 1 or v.dtype not in _FLOATS:
        return None
    return float(np.asarray(v.data).reshape(-1)[0])


class _Match:
    """One matched pattern: the nodes it replaces and the FusedAttention's operands."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.scale = 1.0
        self.mask: Value | None = None
        self.invert = False       # Where(cond, fill, s): cond marks the *masked* keys
        self.fill = -math.inf
        self.q: Value | None = None
        self.kt: Value | None = None


def _match(graph: Graph, sm: Node, producers: Mapping[Value, Node],
           consumers: Mapping[Value, list[Node]]) -> tuple[_Match, Node] | None:
    """Walk back from a Softmax node; the match and the final MatMul, or None."""
    x = sm.inputs[0]
    if x is None or x.dtype not in _FLOATS or not x.shape or len(x.shape) not in (3, 4):
        return None
    if int(sm.attrs.get("axis", -1)) % len(x.shape) != len(x.shape) - 1:
        return None
    out = single_consumer(graph, sm.outputs[0], consumers)
    if out is None or out.op != "MatMul" or out.inputs[0] is not sm.outputs[0]:
        return None
    m = _Match()
    m.nodes = [sm, out]
    cur = x

    def step(v: Value) -> Node | None:
        """The producer of ``v`` when it is read only by the pattern's next node."""
        p = producers.get(v)
        if p is None or single_consumer(graph, v, consumers) is None:
            return None
        return p

    p = step(cur)
    if p is not None and p.op == "Add":
        a, b = p.inputs
        for s, mask in ((a, b), (b, a)):
            ps = producers.get(s) if s is not None else None
            if (mask is not None and s is not None and ps is not None
                    and ps.op in ("MatMul", "Mul", "Div") and mask.dtype == x.dtype
                    and tuple(s.shape) == tuple(x.shape)
                    and broadcasts_to(mask.shape, x.shape)):
                m.mask, cur = mask, s
                m.nodes.append(p)
                break
        else:
            return None
        p = step(cur)
    elif p is not None and p.op == "Where":
        cond, a, b = p.inputs
        for s, fill, invert in ((a, b, False), (b, a, True)):
            f = _scalar(fill)
            if (s is not None and f is not None and cond is not None
                    and tuple(s.shape) == tuple(x.shape) and broadcasts_to(cond.shape, x.shape)
                    and producers.get(s) is not None):
                m.mask, m.fill, m.invert, cur = cond, f, invert, s
                m.nodes.append(p)
                break
        else:
            return None
        p = step(cur)
    if p is not None and p.op in ("Mul", "Div"):
        a, b = p.inputs
        c = _scalar(b)
        if c is None and p.op == "Mul":
            c, a = _scalar(a), b
        if c is None or c == 0 or a is None:
            return None
        m.scale *= c if p.op == "Mul" else 1.0 / c
        m.nodes.append(p)
        cur = a
        p = step(cur)
    if p is None or p.op != "MatMul":
        return None
    m.nodes.append(p)
    q, kt = p.inputs
    for i, operand in enumerate((q, kt)):
        pm = producers.get(operand) if operand is not None else None
        if (pm is not None and pm.op == "Mul" and operand is not None
                and single_consumer(graph, operand, consumers) is not None):
            a, b = pm.inputs
            c = _scalar(b)
            if c is None:
                c, a = _scalar(a), b
            if c is not None and a is not None and tuple(a.shape) == tuple(operand.shape):
                m.scale *= c
                m.nodes.append(pm)
                q, kt = (a, kt) if i == 0 else (q, a)
    m.q, m.kt = q, kt
    v = out.inputs[1]
    if q is None or kt is None or v is None or not _shapes_ok(q, kt, v, out.outputs[0]):
        return None
    return m, out


def _shapes_ok(q: Value, kt: Value, v: Value, y: Value) -> bool:
    if not (len(q.shape) == len(kt.shape) == len(v.shape) and q.dtype == kt.dtype == v.dtype):
        return False
    if len(q.shape) == 3:
        bh, _, d = q.shape
        return kt.shape[:2] == (bh, d) and v.shape[:2] == (bh, kt.shape[2]) and \
            tuple(y.shape) == (bh, q.shape[1], v.shape[2])
    b, h, sq, d = q.shape
    kb, kh, kd, sk = kt.shape
    vb, vh, vs, dv = v.shape
    return (kb == vb == b and kh == vh and kh in (1, h) and kd == d and vs == sk
            and tuple(y.shape) == (b, h, sq, dv))


class _Builder:
    def __init__(self, namer: Namer, prefix: str) -> None:
        self.namer, self.prefix, self.nodes = namer, prefix, []  # type: ignore[var-annotated]

    def const(self, hint: str, data: Any) -> Value:
        return Value.constant(self.namer(f"{self.prefix}/{hint}"), np.asarray(data))

    def op(self, op: str, inputs: list[Value | None], shape: tuple[int, ...], dtype: str,
           hint: str, out: Value | None = None, **attrs: Any) -> Value:
        y = out or Value(self.namer(f"{self.prefix}/{hint}"), shape, dtype)
        self.nodes.append(Node(op, self.namer(f"{self.prefix}/{hint}_op"), inputs, [y],
                               attrs))
        return y

    def reshape(self, x: Value, shape: tuple[int, ...], hint: str,
                out: Value | None = None) -> Value:
        return self.op("Reshape", [x, self.const(f"{hint}_shape", np.array(shape, np.int64))],
                       shape, x.dtype, hint, out)

    def transpose(self, x: Value, perm: list[int], hint: str, out: Value | None = None) -> Value:
        shape = tuple(x.shape[p] for p in perm)
        return self.op("Transpose", [x], shape, x.dtype, hint, out, perm=perm)


def _from_pattern(m: _Match, out: Node, namer: Namer) -> list[Node]:
    assert m.q is not None and m.kt is not None
    y = out.outputs[0]
    bld = _Builder(namer, out.name)
    q, kt, v = m.q, m.kt, out.inputs[1]
    assert v is not None
    mask = m.mask
    if mask is not None and m.invert:
        if mask.data is not None:
            mask = bld.const("keep", ~np.asarray(mask.data, bool))
        else:
            mask = bld.op("Not", [mask], mask.shape, "bool", "keep")
    if mask is not None and len(mask.shape) > 4 - (len(q.shape) == 3):
        return []
    attrs = {"scale": m.scale, "fill": m.fill, "empty": "nan"}
    if len(q.shape) == 3:  # [B·H, S, D]: one batch of B·H heads
        q = bld.reshape(q, (1, *q.shape), "q4")
        kt = bld.reshape(kt, (1, *kt.shape), "kt4")
        v = bld.reshape(v, (1, *v.shape), "v4")
        y4 = Value(namer(f"{y.name}/4d"), (1, *y.shape), y.dtype)
        bld.nodes.append(Node("FusedAttention", out.name, [q, kt, v, mask], [y4], attrs))
        bld.reshape(y4, y.shape, "y3", out=y)
    else:
        bld.nodes.append(Node("FusedAttention", out.name, [q, kt, v, mask], [y], attrs))
    return bld.nodes


def _from_attention(node: Node, namer: Namer) -> list[Node]:
    d = attention_dims(node)
    a = node.attrs
    q, k, v, mask = (node.input(i) for i in range(4))
    assert q is not None and k is not None and v is not None
    y = node.outputs[0]
    bld = _Builder(namer, node.name)
    b, hq, hk, sq, sk = d["b"], d["hq"], d["hk"], d["sq"], d["sk"]
    if d["rank"] == 3:
        q = bld.transpose(bld.reshape(q, (b, sq, hq, d["d"]), "q_heads"), [0, 2, 1, 3], "q4")
        kt = bld.transpose(bld.reshape(k, (b, sk, hk, d["d"]), "k_heads"), [0, 2, 3, 1], "kt")
        v = bld.transpose(bld.reshape(v, (b, sk, hk, d["dv"]), "v_heads"), [0, 2, 1, 3], "v4")
    else:
        kt = bld.transpose(k, [0, 1, 3, 2], "kt")
    if mask is not None and mask.shape[-1] < sk:
        short = mask.shape[-1]
        pad_value = False if mask.dtype == "bool" else -math.inf
        if mask.data is not None:
            width = [(0, 0)] * (len(mask.shape) - 1) + [(0, sk - short)]
            mask = bld.const("mask", np.pad(mask.data, width, constant_values=pad_value))
        else:
            pads = [0] * len(mask.shape) * 2
            pads[2 * len(mask.shape) - 1] = sk - short
            cv = bld.const("pad_value", np.array(pad_value, np_dtype(mask.dtype)))
            mask = bld.op("Pad", [mask, bld.const("pads", np.array(pads, np.int64)), cv],
                          (*mask.shape[:-1], sk), mask.dtype, "mask", mode="constant")
    scale = a.get("scale")
    right = int(a.get("right_window_size", -1) if a.get("right_window_size") is not None
                else -1)
    if int(a.get("is_causal") or 0):
        right = 0 if right < 0 else min(right, 0)
    left = a.get("left_window_size")
    attrs = {"scale": 1.0 / math.sqrt(d["d"]) if scale is None else float(scale),
             "softcap": float(a.get("softcap") or 0.0), "left": -1 if left is None
             else int(left), "right": right, "empty": "zero"}
    if d["rank"] == 3:
        y4 = Value(namer(f"{y.name}/heads"), (b, hq, sq, d["dv"]), y.dtype)
        bld.nodes.append(Node("FusedAttention", node.name, [q, kt, v, mask], [y4], attrs))
        yt = bld.transpose(y4, [0, 2, 1, 3], "y_t")
        bld.reshape(yt, y.shape, "y", out=y)
    else:
        bld.nodes.append(Node("FusedAttention", node.name, [q, kt, v, mask], [y], attrs))
    return bld.nodes


def fuse_attention(graph: Graph) -> Graph:
    """Replace attention patterns and ``Attention`` nodes by ``FusedAttention`` (module
    docstring); a graph without them is returned unchanged.

    Example::

        >>> from toolchain.graph.reference import run_graph
        >>> q = Value("q", (1, 2, 5, 4), "float32"); kt = Value("kt", (1, 2, 4, 5), "float32")
        >>> v = Value("v", (1, 2, 5, 4), "float32"); c = Value.constant("c", np.float32(2.0))
        >>> s, t, p, y = (Value(n, (1, 2, 5, 5 if n != "y" else 4), "float32") for n in "stpy")
        >>> g = Graph("g", [q, kt, v], [y], [
        ...     Node("MatMul", "qk", [q, kt], [s]), Node("Div", "div", [s, c], [t]),
        ...     Node("Softmax", "sm", [t], [p], {"axis": -1}), Node("MatMul", "pv", [p, v], [y])])
        >>> fused = fuse_attention(g)
        >>> [(n.op, n.attrs["scale"]) for n in fused.nodes]
        [('FusedAttention', 0.5)]
        >>> feed = {n: np.random.default_rng(0).standard_normal(x.shape).astype(np.float32)
        ...         for n, x in (("q", q), ("kt", kt), ("v", v))}
        >>> bool(np.allclose(run_graph(g, feed)["y"], run_graph(fused, feed)["y"], atol=1e-6))
        True
    """
    if not any(n.op in ("Softmax", "Attention") for n in graph.nodes):
        return graph
    producers, consumers = graph.producers(), graph.consumers()
    namer = Namer(graph)
    replaced: dict[int, list[Node]] = {}
    dropped: set[int] = set()
    for node in graph.nodes:
        if node.op == "Attention":
            replaced[id(node)] = _from_attention(node, namer)
        elif node.op == "Softmax":
            found = _match(graph, node, producers, consumers)
            if found is None or any(id(n) in dropped for n in found[0].nodes):
                continue
            m, out = found
            new = _from_pattern(m, out, namer)
            if new:
                dropped.update(id(n) for n in m.nodes)
                replaced[id(out)] = new
    if not replaced:
        return graph
    nodes: list[Node] = []
    for node in graph.nodes:
        if id(node) in replaced:
            nodes += replaced[id(node)]
        elif id(node) not in dropped:
            nodes.append(node)
    return graph.replace(nodes=nodes)
