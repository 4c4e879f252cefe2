"""Rewrite QDQ groups into integer-only ops (``quantize_ops``).

A QDQ model (as ``onnxruntime.quantization.quantize_static`` with ``QuantFormat.QDQ`` or
``kiln quantize`` writes it) computes in float between ``DequantizeLinear`` and
``QuantizeLinear`` nodes. This pass finds each group

    DequantizeLinear(x_q) [, DequantizeLinear(w_q)] -> OP [-> Relu | Clip] -> QuantizeLinear

with per-tensor activation parameters and symmetric (zero point 0) per-tensor or
per-channel int8 weights, and replaces it by one integer op of
:mod:`toolchain.graph.ops.qops` whose scales are fixed-point ``(multiplier, shift)`` pairs
(computed here, at compile time) and whose Relu/Clip became the output clamp:

* ``Conv`` (2-D, any group) -> ``QConv``; ``Gemm`` (transA 0, alpha/beta 1) and ``MatMul``
  with a constant weight -> ``QGemm`` (weights stored ``[N, K]``); a float bias is quantized
  to int32 with scale ``x_scale * w_scale``;
* ``Add`` of two quantized tensors of equal shape -> ``QAdd``;
* ``AveragePool`` (no padding, or ``count_include_pad``) / ``GlobalAveragePool`` ->
  ``QAvgPool``;
* ``MaxPool``, ``Reshape``, ``Flatten``, ``Squeeze``, ``Unsqueeze``, ``Transpose``,
  ``Concat`` whose input and output quantization parameters are equal run directly on the
  int8 tensor.

Anything else stays as it was (float between its DequantizeLinear and QuantizeLinear),
so the graph is always correct; :func:`unconverted` lists what stayed float. The pass must
run before ``constant_fold`` (which would fold the weights' DequantizeLinear to float).

Before::

    %xd = DequantizeLinear(%xq, %sx, %zx); %wd = DequantizeLinear(%wq, %sw)
    %c = Conv(%xd, %wd, %b); %r = Relu(%c); %yq = QuantizeLinear(%r, %sy, %zy)

After::

    %yq = QConv(%xq, %wq, %b_int32, %multiplier, %shift_pow, x_zero_point=.., out_min=zy, ..)

Example::

    >>> g2 = quantize_ops(g)  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from toolchain.graph.ir import Graph, Node, Value
from toolchain.graph.ops.nn_common import attrs_of, window_geometry
from toolchain.quantize.fixed_point import (
    quantize_multiplier,
    quantize_multipliers,
    shift_table,
)

_PASSTHROUGH = ("MaxPool", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose",
                "Concat")
_QRANGE = {"int8": (-128, 127), "uint8": (0, 255)}


@dataclass(frozen=True)
class QParams:
    """Per-tensor quantization parameters of an activation."""

    scale: float
    zero_point: int
    dtype: str


def _per_tensor(node: Node, first: int, data_dtype: str) -> QParams | None:
    s, z = node.input(first), node.input(first + 1)
    if s is None or s.data is None or s.data.size != 1 or data_dtype not in _QRANGE:
        return None
    if node.attrs.get("block_size", 0):
        return None
    zp = 0 if z is None else (int(z.data.reshape(-1)[0]) if z.data is not None else None)
    if zp is None:
        return None
    return QParams(float(s.data.reshape(-1)[0]), zp, data_dtype)


class _Ctx:
    def __init__(self, graph: Graph) -> None:
        self.producers = graph.producers()
        self.consumers = graph.consumers()
        self.outputs = set(graph.outputs)

    def only_use(self, v: Value) -> bool:
        return v not in self.outputs and len(self.consumers.get(v, [])) == 1

    def dq_act(self, v: Value | None) -> tuple[Value, QParams] | None:
        p = self.producers.get(v) if v is not None else None
        if p is None or p.op != "DequantizeLinear" or p.inputs[0] is None:
            return None
        qp = _per_tensor(p, 1, p.inputs[0].dtype)
        return None if qp is None else (p.inputs[0], qp)

    def dq_weight(self, v: Value | None, axis: int) -> tuple[np.ndarray, np.ndarray] | None:
        """``(int8 data, per-channel scales along axis)`` of a DequantizeLinear'd constant."""
        p = self.producers.get(v) if v is not None else None
        if p is None or p.op != "DequantizeLinear":
            return None
        w, s, z = p.input(0), p.input(1), p.input(2)
        if w is None or w.data is None or w.dtype != "int8" or s is None or s.data is None:
            return None
        if z is not None and (z.data is None or np.any(z.data != 0)):
            return None
        scales = np.asarray(s.data, np.float64).reshape(-1)
        ax = int(p.attrs.get("axis", 1)) % w.rank
        if scales.size == 1:
            scales = np.full(w.shape[axis], scales[0])
        elif ax != axis or scales.size != w.shape[axis] or p.attrs.get("block_size", 0):
            return None
        return np.asarray(w.data), scales


def _clamp(act: Node | None, y: QParams) -> tuple[int, int] | None:
    lo, hi = _QRANGE[y.dtype]
    if act is None:
        return lo, hi

    def q(v: float) -> int:
        return int(np.clip(np.rint(np.float32(v) / np.float32(y.scale)) + y.zero_point, lo, hi))

    if act.op == "Relu":
        return max(lo, q(0.0)), hi
    mn, mx = act.input(1), act.input(2)
    if any(v is not None and v.data is None for v in (mn, mx)):
        return None
    return (lo if mn is None else q(float(mn.data)), hi if mx is None else q(float(mx.data)))


def _out_attrs(y: QParams, clamp: tuple[int, int]) -> dict[str, Any]:
    return {"y_zero_point": y.zero_point, "out_min": clamp[0], "out_max": clamp[1],
            "out_dtype": y.dtype}


def _bias(ctx: _Ctx, v: Value | None, n: int, acc_scale: np.ndarray) -> np.ndarray | None:
    if v is None:
        return np.zeros(n, np.int32)
    if v.data is not None:
        b = np.asarray(v.data, np.float64).reshape(-1)
    else:
        p = ctx.producers.get(v)
        if p is None or p.op != "DequantizeLinear" or p.inputs[0].data is None:  # type: ignore[union-attr]
            return None
        raw = np.asarray(p.inputs[0].data).reshape(-1)  # type: ignore[union-attr]
        s = np.asarray(p.inputs[1].data, np.float64).reshape(-1)  # type: ignore[union-attr]
        if raw.dtype == np.int32 and np.allclose(s, acc_scale, rtol=1e-6, atol=0):
            return raw.astype(np.int32)
        b = (raw.astype(np.float64) * s)
    if b.size != n:
        return None
    return np.clip(np.rint(b / acc_scale), -(2**31), 2**31 - 1).astype(np.int32)


def _requant_inputs(name: str, bias: np.ndarray, real: np.ndarray) -> list[Value]:
    m, s = quantize_multipliers(real)
    return [Value.constant(f"{name}_bias_q", bias), Value.constant(f"{name}_multiplier", m),
            Value.constant(f"{name}_shift_pow", shift_table(s))]


def _conv(ctx: _Ctx, n: Node, y: QParams, clamp: tuple[int, int], out: Value) -> Node | None:
    xa, wa = ctx.dq_act(n.input(0)), ctx.dq_weight(n.input(1), 0)
    if xa is None or wa is None or len(wa[0].shape) != 4:
        return None
    (xq, xp), (w, ws) = xa, wa
    a = attrs_of(n)
    strides, dil = list(a["strides"] or [1, 1]), list(a["dilations"] or [1, 1])
    geom = window_geometry(xq.shape[2:], w.shape[2:], strides=strides, dilations=dil,
                           pads=list(a["pads"] or [0] * 4), auto_pad=a["auto_pad"])
    acc_scale = xp.scale * ws
    bias = _bias(ctx, n.input(2), w.shape[0], acc_scale)
    if bias is None:
        return None
    attrs = {"strides": tuple(strides), "dilations": tuple(dil), "group": a["group"],
             "pads": (geom.pads_begin[0], geom.pads_begin[1], geom.pads_end[0],
                      geom.pads_end[1]),
             "x_zero_point": xp.zero_point, **_out_attrs(y, clamp)}
    ins = [xq, Value.constant(f"{n.name}_w_q", np.array(w, copy=True)),
           *_requant_inputs(n.name, bias, acc_scale / y.scale)]
    return Node("QConv", n.name, ins, [out], attrs)


def _gemm(ctx: _Ctx, n: Node, y: QParams, clamp: tuple[int, int], out: Value) -> Node | None:
    if n.op == "Gemm":
        a = attrs_of(n)
        if a["transA"] or a["alpha"] != 1.0 or (n.input(2) is not None and a["beta"] != 1.0):
            return None
        trans_b, bias_v = bool(a["transB"]), n.input(2)
    else:
        trans_b, bias_v = False, None
    xa = ctx.dq_act(n.input(0))
    wa = ctx.dq_weight(n.input(1), 0 if trans_b else 1)
    if xa is None or wa is None or wa[0].ndim != 2:
        return None
    (xq, xp), (w, ws) = xa, wa
    w = w if trans_b else w.T
    acc_scale = xp.scale * ws
    bias = _bias(ctx, bias_v, w.shape[0], acc_scale)
    if bias is None or (n.op == "Gemm" and xq.rank != 2):
        return None
    ins = [xq, Value.constant(f"{n.name}_w_q", np.array(w, order="C", copy=True)),
           *_requant_inputs(n.name, bias, acc_scale / y.scale)]
    return Node("QGemm", n.name, ins, [out],
                {"x_zero_point": xp.zero_point, **_out_attrs(y, clamp)})


def _add(ctx: _Ctx, n: Node, y: QParams, clamp: tuple[int, int], out: Value) -> Node | None:
    aa, ba = ctx.dq_act(n.input(0)), ctx.dq_act(n.input(1))
    if aa is None or ba is None or aa[0].shape != ba[0].shape or aa[0].shape != out.shape:
        return None
    (aq, ap), (bq, bp) = aa, ba
    twice = 2.0 * max(ap.scale, bp.scale)
    ma, sa = quantize_multiplier(ap.scale / twice)
    mb, sb = quantize_multiplier(bp.scale / twice)
    my, sy = quantize_multiplier(twice / ((1 << 20) * y.scale))
    attrs = {"a_zero_point": ap.zero_point, "b_zero_point": bp.zero_point,
             "a_multiplier": ma, "a_shift": sa, "b_multiplier": mb, "b_shift": sb,
             "y_multiplier": my, "y_shift": sy, "left_shift": 20, **_out_attrs(y, clamp)}
    return Node("QAdd", n.name, [aq, bq], [out], attrs)


def _pool(ctx: _Ctx, n: Node, y: QParams, clamp: tuple[int, int], out: Value) -> Node | None:
    xa = ctx.dq_act(n.input(0))
    if xa is None or xa[0].rank != 4:
        return None
    xq, xp = xa
    if n.op == "GlobalAveragePool":
        kernel, strides, pads = list(xq.shape[2:]), [1, 1], (0, 0, 0, 0)
    else:
        a = attrs_of(n)
        kernel, strides = list(a["kernel_shape"]), list(a["strides"] or [1, 1])
        if a.get("ceil_mode") or any(d != 1 for d in (a.get("dilations") or [1, 1])):
            return None
        geom = window_geometry(xq.shape[2:], kernel, strides=strides, dilations=[1, 1],
                               pads=list(a["pads"] or [0] * 4), auto_pad=a["auto_pad"])
        pads = (geom.pads_begin[0], geom.pads_begin[1], geom.pads_end[0], geom.pads_end[1])
        if any(pads) and not a["count_include_pad"]:
            return None
    m, s = quantize_multiplier(xp.scale / (y.scale * kernel[0] * kernel[1]))
    attrs = {"kernel_shape": tuple(kernel), "strides": tuple(strides), "pads": pads,
             "x_zero_point": xp.zero_point, "multiplier": m, "shift": s,
             **_out_attrs(y, clamp)}
    node = Node("QAvgPool", n.name, [xq], [out], attrs)
    return node if tuple(_infer_shape(node)) == out.shape else None


def _infer_shape(node: Node) -> tuple[int, ...]:
    from toolchain.graph.ops import get_op

    return tuple(get_op(node.op).infer(node)[0].shape)


def _passthrough(ctx: _Ctx, n: Node, y: QParams, act: Node | None, out: Value) -> Node | None:
    if act is not None:
        return None
    data_inputs = n.inputs if n.op == "Concat" else n.inputs[:1]
    new_inputs = []
    for v in data_inputs:
        xa = ctx.dq_act(v)
        if xa is None or xa[1] != y:
            return None
        new_inputs.append(xa[0])
    return n.replace(inputs=tuple(new_inputs) + tuple(n.inputs[len(data_inputs):]),
                     outputs=(out,))


_REWRITES = {"Conv": _conv, "Gemm": _gemm, "MatMul": _gemm, "Add": _add,
             "AveragePool": _pool, "GlobalAveragePool": _pool}


def _rewrite(ctx: _Ctx, q: Node) -> tuple[Node, list[Node]] | None:
    """The integer node replacing the group that ends in QuantizeLinear ``q``, and the
    float nodes it replaces."""
    src = q.inputs[0]
    y = _per_tensor(q, 1, q.outputs[0].dtype)
    core = ctx.producers.get(src) if src is not None else None
    if y is None or core is None or not ctx.only_use(src):  # type: ignore[arg-type]
        return None
    act = None
    if core.op in ("Relu", "Clip"):
        inner = ctx.producers.get(core.inputs[0]) if core.inputs[0] is not None else None
        if inner is not None and inner.op in _REWRITES and ctx.only_use(core.inputs[0]):  # type: ignore[arg-type]
            act, core = core, inner
    out = q.outputs[0]
    if core.op in _PASSTHROUGH:
        new = _passthrough(ctx, core, y, act, out)
    elif core.op in _REWRITES:
        clamp = _clamp(act, y)
        new = None if clamp is None else _REWRITES[core.op](ctx, core, y, clamp, out)
    else:
        new = None
    if new is None:
        return None
    return new, [q, core] + ([act] if act is not None else [])


def _drop_dead(nodes: list[Node], outputs: set[Value]) -> list[Node]:
    while True:
        used = {v for n in nodes for v in n.inputs if v is not None} | outputs
        keep = [n for n in nodes if any(o in used for o in n.outputs)]
        if len(keep) == len(nodes):
            return keep
        nodes = keep


def quantize_ops(graph: Graph) -> Graph:
    """The graph with every QDQ group it can convert made integer-only (module docstring)."""
    ctx = _Ctx(graph)
    replaced: dict[int, Node | None] = {}
    for q in graph.nodes:
        if q.op != "QuantizeLinear":
            continue
        found = _rewrite(ctx, q)
        if found is None:
            continue
        new, old = found
        if any(id(o) in replaced for o in old):
            continue
        for o in old:
            replaced[id(o)] = None
        replaced[id(q)] = new
    nodes = [replaced.get(id(n), n) for n in graph.nodes]
    kept = _drop_dead([n for n in nodes if n is not None], set(graph.outputs))
    return graph.replace(nodes=kept)


def unconverted(graph: Graph) -> list[Node]:
    """Nodes of a quantize_ops'd graph that still compute in float between Q/DQ nodes."""
    producers = graph.producers()
    out = []
    for n in graph.nodes:
        if n.op in ("QuantizeLinear", "DequantizeLinear"):
            continue
        if any(v is not None and v in producers and producers[v].op == "DequantizeLinear"
               for v in n.inputs):
            out.append(n)
    return out
