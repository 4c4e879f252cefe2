"""Write a Kiln :class:`~toolchain.graph.ir.Graph` back out as an ONNX model.

``kiln quantize`` simplifies the float model with Kiln's own passes (BatchNorm folded into
the convolutions, Dropout/Identity removed, constants folded) before it inserts
QuantizeLinear/DequantizeLinear pairs, and writes the result with :func:`to_onnx`. Kiln's
graph is in the newest ONNX form of each op (operands such as ``axes`` are inputs), so the
model is written at :data:`OPSET` (or the first newer opset that has all its ops,
:func:`opset_for`).

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ir import Graph, Node, Value
    >>> x, y = Value("x", (1, 4), "float32"), Value("y", (1, 4), "float32")
    >>> m = to_onnx(Graph("g", [x], [y], [Node("Relu", "r", [x], [y])]))
    >>> [n.op_type for n in m.graph.node], m.opset_import[0].version
    (['Relu'], 21)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from toolchain.errors import ModelError
from toolchain.graph.ir import Graph, Value
from toolchain.graph.ops.common import KILN_TO_ONNX

#: the opset of written models (newest one onnxruntime 1.2x runs for every op Kiln writes)
OPSET = 21


def _value_info(v: Value) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(v.name, KILN_TO_ONNX[v.dtype], list(v.shape))


def _attr(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, np.ndarray):
        return numpy_helper.from_array(value)
    return value


def opset_for(nodes: list[onnx.NodeProto]) -> int:
    """:data:`OPSET`, or the first opset that has every op of ``nodes`` where one is newer
    (an ``Attention`` node needs 23: written at 21 the checker refused the quantized
    model).

    >>> opset_for([helper.make_node("Relu", ["x"], ["y"])])
    21
    >>> opset_for([helper.make_node("Attention", ["q", "k", "v"], ["y"])])
    23
    """
    opset = OPSET
    for node in nodes:
        if node.domain not in ("", "ai.onnx"):
            continue
        while opset < onnx.defs.onnx_opset_version():
            try:
                onnx.defs.get_schema(node.op_type, opset, "")
                break
            except onnx.defs.SchemaError:
                opset += 1
    return opset


def to_onnx(graph: Graph, extra_nodes: list[onnx.NodeProto] | None = None,
            extra_initializers: list[onnx.TensorProto] | None = None) -> onnx.ModelProto:
    """An ONNX model of ``graph`` (constants become initializers); raises
    :class:`ModelError` for a node ONNX cannot express (Kiln-only ops such as ``Fused``)."""
    nodes = []
    for n in graph.nodes:
        if n.op in ("Fused", "LayoutTransform", "LayoutPool") or n.op.startswith("Q") and \
                n.op not in ("QuantizeLinear",):
            raise ModelError(f"{n.describe()}: op {n.op!r} is Kiln-internal and has no ONNX "
                             "form; export the graph before the passes that create it")
        attrs = {k: _attr(v) for k, v in n.attrs.items() if v is not None}
        nodes.append(helper.make_node(n.op, ["" if v is None else v.name for v in n.inputs],
                                      [o.name for o in n.outputs], name=n.name, **attrs))
    inits = [numpy_helper.from_array(np.asarray(c.data), c.name) for c in graph.constants()]
    g = helper.make_graph(nodes + list(extra_nodes or []), graph.name or "model",
                          [_value_info(v) for v in graph.inputs],
                          [_value_info(v) for v in graph.outputs],
                          initializer=inits + list(extra_initializers or []))
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset_for(nodes))],
                              producer_name="kiln")
    model.ir_version = 10
    return model
