"""Insert QuantizeLinear/DequantizeLinear pairs into a float graph (``kiln quantize``).

Input: a simplified float :class:`~toolchain.graph.ir.Graph` (BatchNorm folded) and the
calibrated range of every tensor. Output: the same graph in QDQ form, as
``onnxruntime.quantization`` writes it, ready for :func:`~toolchain.quantize.export.to_onnx`
and for :func:`~toolchain.graph.passes.quantize_ops.quantize_ops`:

* every float activation read by a quantizable op (``Conv``, ``Gemm``, ``MatMul`` with a
  constant weight, ``Add``, ``AveragePool``, ``GlobalAveragePool``, ``MaxPool``,
  ``Reshape``, ``Flatten``, ``Squeeze``, ``Unsqueeze``, ``Transpose``, ``Relu``, ``Clip``)
  and every such op's output gets ``x -> QuantizeLinear -> DequantizeLinear`` (scale and
  zero point from the range, per tensor);
* a ``Relu``/``Clip`` right after a Conv/Gemm/MatMul/Add is fused: only its output is
  quantized (the clamp becomes the integer op's output range);
* data-movement ops and MaxPool keep their input's parameters on their output, so they
  run on int8 unchanged;
* weights are symmetric int8 in ``[-127, 127]``, per output channel (``per_channel``) or
  per tensor; biases are int32 with scale ``x_scale * w_scale`` and zero point 0.

Activation parameters (``rmin = min(lo, 0)``, ``rmax = max(hi, 0)``):
asymmetric ``scale = (rmax - rmin) / 255``, ``zero_point = round(qmin - rmin / scale)``;
symmetric ``scale = max(|rmin|, |rmax|) / 127`` (int8) with zero point 0 (128 for uint8).
Ops that are not quantizable stay float and are listed in :attr:`QdqResult.float_ops`; such
an op reads a float graph input as it is (the autoencoder's score ``mean((y - x)^2)`` reads
``x``, not ``DQ(Q(x))``).

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ir import Graph, Node, Value
    >>> x, y = Value("x", (1, 4), "float32"), Value("y", (1, 2), "float32")
    >>> w = Value.constant("w", np.ones((4, 2), np.float32))
    >>> g = Graph("g", [x], [y], [Node("MatMul", "mm", [x, w], [y])])
    >>> r = insert_qdq(g, {"x": (-1.0, 1.0), "y": (-4.0, 4.0)})
    >>> [n.op for n in r.graph.nodes]  # doctest: +NORMALIZE_WHITESPACE
    ['QuantizeLinear', 'DequantizeLinear', 'DequantizeLinear', 'MatMul', 'QuantizeLinear',
     'DequantizeLinear']
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from toolchain.graph.ir import Graph, Node, Value

COMPUTE = ("Conv", "Gemm", "MatMul", "Add", "AveragePool", "GlobalAveragePool")
PASSTHROUGH = ("MaxPool", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose")
ACTIVATIONS = ("Relu", "Clip")
_FLOAT = ("float32",)


@dataclass
class QdqResult:
    """The QDQ graph, how many nodes were quantized, and the ops left in float."""

    graph: Graph
    quantized: list[str] = field(default_factory=list)
    float_ops: list[str] = field(default_factory=list)
    #: ``{name: (scale, zero_point, dtype)}`` of integer graph inputs/outputs
    #: (``quantize_model(..., integer_io=True)``)
    io: dict[str, tuple[float, int, str]] = field(default_factory=dict)


def power_of_two(scale: Any) -> np.ndarray:
    """The smallest powers of two >= ``scale`` (positive values; float32, exact): the
    scales of ``power_of_two=True``, which still cover the calibrated range.

    >>> power_of_two(np.array([0.01, 0.25, 3.0])).tolist()
    [0.015625, 0.25, 4.0]
    """
    s = np.asarray(scale, np.float64)
    return np.ldexp(1.0, np.ceil(np.log2(s)).astype(np.int64)).astype(np.float32)


def activation_params(lo: float, hi: float, dtype: str = "int8", symmetric: bool = False,
                      power_of_two_scale: bool = False) -> tuple[float, int]:
    """``(scale, zero_point)`` of a tensor with range ``[lo, hi]`` (module docstring);
    ``power_of_two_scale``: the scale rounded up to a power of two (:func:`power_of_two`),
    the zero point then chosen for it (``rmin`` still at ``qmin``).

    >>> s, z = activation_params(0.0, 2.55); round(s, 6), z
    (0.01, -128)
    >>> s, z = activation_params(-1.0, 0.5, symmetric=True); round(s * 127, 6), z
    (1.0, 0)
    >>> activation_params(0.0, 2.55, power_of_two_scale=True)
    (0.015625, -128)
    """
    qmin, qmax = (-128, 127) if dtype == "int8" else (0, 255)
    rmin, rmax = min(float(lo), 0.0), max(float(hi), 0.0)
    if symmetric:
        bound = max(abs(rmin), abs(rmax))
        scale = bound / 127.0 if bound > 0 else 1.0
        if power_of_two_scale:
            scale = float(power_of_two(scale))
        return float(np.float32(scale)), (0 if dtype == "int8" else 128)
    scale = (rmax - rmin) / (qmax - qmin) if rmax > rmin else 1.0
    scale = float(np.float32(scale))
    if power_of_two_scale:
        scale = float(power_of_two(scale))
    zp = int(np.clip(round(qmin - rmin / scale), qmin, qmax))
    return scale, zp


def _weight_axis(node: Node) -> int | None:
    """Output-channel axis of the node's weight (input 1), or None when not quantizable."""
    w = node.input(1)
    if w is None or w.data is None or w.dtype not in _FLOAT:
        return None
    if node.op == "Conv":
        return 0 if w.rank == 4 else None
    if node.op == "Gemm":
        if node.attrs.get("transA", 0) or w.rank != 2:
            return None
        return 0 if node.attrs.get("transB", 0) else 1
    if node.op == "MatMul":
        return 1 if w.rank == 2 else None
    return None


def quantize_weight(w: np.ndarray, axis: int, per_channel: bool,
                    power_of_two_scale: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 weights in [-127, 127] and their (per-channel or 1-element) scales
    (rounded up to powers of two with ``power_of_two_scale``)."""
    w = np.asarray(w, np.float64)
    if per_channel:
        red = tuple(i for i in range(w.ndim) if i != axis)
        bound = np.abs(w).max(axis=red)
    else:
        bound = np.array([np.abs(w).max()])
    scale = np.where(bound > 0, bound / 127.0, 1.0).astype(np.float32)
    if power_of_two_scale:
        scale = power_of_two(scale)
    shape = [1] * w.ndim
    if per_channel:
        shape[axis] = -1
    q = np.clip(np.rint(w / scale.astype(np.float64).reshape(shape)), -127, 127)
    return q.astype(np.int8), scale


class _Builder:
    def __init__(self, graph: Graph, ranges: Mapping[str, tuple[float, float]], dtype: str,
                 symmetric: bool, per_channel: bool, power_of_two_scales: bool = False
                 ) -> None:
        self.graph, self.ranges, self.dtype = graph, ranges, dtype
        self.symmetric, self.per_channel = symmetric, per_channel
        self.pow2 = power_of_two_scales
        self.params: dict[Value, tuple[float, int]] = {}
        self.dq: dict[Value, Value] = {}
        self.nodes: list[Node] = []

    def qparams(self, v: Value) -> tuple[float, int]:
        if v not in self.params:
            lo, hi = self.ranges.get(v.name, (0.0, 0.0))
            self.params[v] = activation_params(lo, hi, self.dtype, self.symmetric, self.pow2)
        return self.params[v]

    def qdq_pair(self, v: Value, out: Value | None = None) -> Value:
        """``DequantizeLinear(QuantizeLinear(v))`` (emitted once per value), written to
        ``out`` when given."""
        if v in self.dq:
            return self.dq[v]
        scale, zp = self.qparams(v)
        s = Value.constant(f"{v.name}_scale", np.float32(scale))
        z = Value.constant(f"{v.name}_zero_point", np.array(zp, self.dtype))
        q = Value(f"{v.name}_quantized", v.shape, self.dtype)
        d = out or Value(f"{v.name}_dequantized", v.shape, v.dtype)
        self.nodes += [Node("QuantizeLinear", f"{v.name}_QuantizeLinear", [v, s, z], [q]),
                       Node("DequantizeLinear", f"{v.name}_DequantizeLinear", [q, s, z], [d])]
        self.dq[v] = d
        return d

    def weight(self, node: Node, axis: int) -> tuple[Value, np.ndarray]:
        w = node.inputs[1]
        assert w is not None and w.data is not None
        q, scale = quantize_weight(w.data, axis, self.per_channel, self.pow2)
        per_axis = self.per_channel
        qv = Value.constant(f"{w.name}_quantized", q)
        sv = Value.constant(f"{w.name}_scale", scale if per_axis else scale.reshape(()))
        zv = Value.constant(f"{w.name}_zero_point",
                            np.zeros(scale.shape if per_axis else (), np.int8))
        d = Value(f"{w.name}_dequantized", w.shape, w.dtype)
        self.nodes.append(Node("DequantizeLinear", f"{w.name}_DequantizeLinear", [qv, sv, zv],
                               [d], {"axis": axis} if per_axis else {}))
        return d, scale

    def bias(self, b: Value, x_scale: float, w_scale: np.ndarray, channels: int
             ) -> Value | None:
        """The int32 bias of a layer with ``channels`` outputs, or None where ``b`` is no
        per-output-channel bias (a Gemm's ``C`` may be a whole ``(M, N)`` matrix or an
        ``(M, 1)`` column: it stays float); a ``C`` of one value, broadcast over the
        outputs, is quantized per channel like a full one (seed 141057)."""
        assert b.data is not None
        shape = tuple(b.data.shape)
        if any(d != 1 for d in shape[:-1]) or (shape and shape[-1] not in (1, channels)):
            return None
        scale = (np.float64(x_scale) * w_scale.astype(np.float64)).reshape(-1)
        data = np.broadcast_to(np.asarray(b.data, np.float64).reshape(-1), (channels,))
        scale = np.broadcast_to(scale, data.shape).astype(np.float32)
        q = np.clip(np.rint(data / scale.astype(np.float64)), -(2**31), 2**31 - 1)
        qv = Value.constant(f"{b.name}_quantized", q.astype(np.int32))
        sv = Value.constant(f"{b.name}_scale", scale)
        d = Value(f"{b.name}_dequantized", (data.size,), b.dtype)
        self.nodes.append(Node("DequantizeLinear", f"{b.name}_DequantizeLinear", [qv, sv], [d],
                               {"axis": 0}))
        return d


def _plan(graph: Graph) -> tuple[set[Value], set[Node]]:
    """The activations to quantize and the nodes that will run quantized."""
    consumers = graph.consumers()
    producers = graph.producers()
    quantized: set[Node] = set()
    for n in graph.nodes:
        ins_float = all(v is None or v.dtype in _FLOAT or v.data is not None
                        for v in n.inputs[:1])
        if not ins_float or n.outputs[0].dtype not in _FLOAT:
            continue
        if n.op in ("Conv", "Gemm", "MatMul") and _weight_axis(n) is None:
            continue
        if n.op == "Add" and (n.inputs[0] is None or n.inputs[1] is None or
                              any(v.data is not None for v in n.inputs[:2]) or
                              n.inputs[0].shape != n.inputs[1].shape):  # type: ignore[union-attr]
            continue
        if n.op in COMPUTE + PASSTHROUGH + ACTIVATIONS:
            quantized.add(n)
    acts: set[Value] = set()
    for n in quantized:
        data = n.inputs[:2] if n.op == "Add" else n.inputs[:1]
        for v in data:
            if v is None or v.data is not None:
                continue
            p = producers.get(v)
            fused = (n.op in ACTIVATIONS and p is not None and p.op in ("Conv", "Gemm",
                     "MatMul", "Add") and p in quantized and len(consumers.get(v, [])) == 1)
            if not fused:
                acts.add(v)
        out = n.outputs[0]
        users = consumers.get(out, [])
        fuse_next = (n.op in ("Conv", "Gemm", "MatMul", "Add") and len(users) == 1 and
                     users[0].op in ACTIVATIONS and users[0] in quantized and
                     out not in graph.outputs)
        if not fuse_next:
            acts.add(out)
    return acts, quantized


def insert_qdq(graph: Graph, ranges: Mapping[str, tuple[float, float]], *,
               activation_dtype: str = "int8", symmetric_activations: bool = False,
               per_channel: bool = True, power_of_two_scales: bool = False) -> QdqResult:
    """The QDQ form of ``graph`` (module docstring); ``ranges`` from calibration.
    ``power_of_two_scales``: every activation and weight scale is a power of two, so every
    requantization multiplier (``x_scale * w_scale / y_scale``, a QAdd's ``a_scale /
    y_scale``) is one too, and requantizing is a rounding shift (the form an accelerator
    ALU without a high multiply can compute; docs/int8.md)."""
    acts, quantized = _plan(graph)
    b = _Builder(graph, ranges, activation_dtype, symmetric_activations, per_channel,
                 power_of_two_scales)
    # data-movement ops and MaxPool keep their input's parameters
    for n in graph.nodes:
        if n in quantized and n.op in PASSTHROUGH and n.inputs[0] in acts:
            b.params[n.outputs[0]] = b.qparams(n.inputs[0])  # type: ignore[index]
    renamed: dict[Value, Value] = {}
    for v in graph.outputs:  # a quantized graph output: Q/DQ writes the output name
        if v in acts and v not in graph.inputs:
            renamed[v] = Value(f"{v.name}_float", v.shape, v.dtype)
    result = QdqResult(graph)
    for v in graph.inputs:
        if v in acts:
            b.qdq_pair(v)
    for n in graph.nodes:
        ins = list(n.inputs)
        for i, v in enumerate(ins):
            # a float op reads a float graph input itself, not DQ(Q(input)): exact, and
            # the int8 copy of the input dies after the quantized ops that read it
            if v is not None and v in acts and v not in renamed and (
                    n in quantized or v not in graph.inputs):
                ins[i] = b.qdq_pair(v)
        if n in quantized and n.op in ("Conv", "Gemm", "MatMul"):
            axis = _weight_axis(n)
            assert axis is not None
            ins[1], w_scale = b.weight(n, axis)
            x = n.inputs[0]
            bias = n.input(2)
            if bias is not None and bias.data is not None and x is not None and x in acts:
                qb = b.bias(bias, b.qparams(x)[0], w_scale, int(n.inputs[1].shape[axis]))
                ins[2] = qb if qb is not None else bias
        outs = [renamed.get(o, o) for o in n.outputs]
        b.nodes.append(n.replace(inputs=tuple(ins), outputs=tuple(outs)))
        (result.quantized if n in quantized else result.float_ops).append(
            n.op if n not in quantized else n.name)
        for o, orig in zip(outs, n.outputs, strict=True):
            if orig in acts:
                b.params[o] = b.qparams(orig)
                b.qdq_pair(o, out=orig if orig in renamed else None)
    result.graph = graph.replace(nodes=b.nodes)
    result.float_ops = sorted(set(result.float_ops))
    return result
