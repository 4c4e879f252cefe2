"""The ``Fused`` op: one fused group of nodes, which becomes one kernel.

A ``Fused`` node's attributes hold the group:

* ``graph`` — the inner :class:`~toolchain.graph.ir.Graph` (its inputs are the kernel's
  parameters, in the same order as the node's inputs; weights arrive as inputs too, while
  scalars and small integer operands such as shapes, axes and pads stay inner constants,
  baked into the kernel);
* ``pattern`` — the group's pattern kind (``"injective"``, ``"reduction"``,
  ``"complex-out-fusable"``, ``"opaque"``), which is also the node's pattern kind;
* ``kernel`` — a stable C-safe kernel name such as ``fused_conv2d_add_relu_3``.

Its reference runs the inner graph with :func:`~toolchain.graph.reference.run_graph`, so a
fused graph still runs on the numpy oracle.  The op is in the op table of
:mod:`toolchain.graph.ops.registry` (``OPS`` below).

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ir import Graph, Node, Value
    >>> x, y, z = (Value(n, (2,), "float32") for n in "xyz")
    >>> inner = Graph("fused_neg_relu_0", [x], [z],
    ...               [Node("Neg", "neg", [x], [y]), Node("Relu", "relu", [y], [z])])
    >>> node = fused_node(inner, "injective", [x])
    >>> from toolchain.graph.reference import run_node
    >>> run_node(node, [np.array([-1.0, 2.0], np.float32)])
    [array([1., 0.], dtype=float32)]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from toolchain.errors import ModelError
from toolchain.graph.ir import Graph, Node, TensorType, Value
from toolchain.graph.ops.registry import Attr, OpDef, PatternKind, get_op


def _infer(node: Node) -> list[TensorType]:
    inner: Graph = node.attrs["graph"]
    if len(node.inputs) != len(inner.inputs):
        raise ModelError(f"{node.describe()}: {len(node.inputs)} inputs but the fused graph "
                         f"takes {len(inner.inputs)}")
    for outer, v in zip(node.inputs, inner.inputs, strict=True):
        if outer is None or outer.type != v.type:
            raise ModelError(f"{node.describe()}: input {v.name!r} should be {v.type}")
    return [v.type for v in inner.outputs]


def _reference(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    from toolchain.graph.reference import run_graph

    inner: Graph = attrs["graph"]
    results = run_graph(inner, {v.name: a for v, a in zip(inner.inputs, ins, strict=True)})
    return [results[v.name] for v in inner.outputs]


def _pattern(node: Node) -> PatternKind:
    return PatternKind(node.attrs["pattern"])


def _flops(node: Node) -> int:
    inner: Graph = node.attrs["graph"]
    return sum(get_op(n.op).flops_of(n) for n in inner.nodes)


#: the fusion pass's op (registered by the op table, ``registry.builtin_ops``)
OPS: tuple[OpDef, ...] = (OpDef(
    "Fused", inputs=("inputs*",), infer=_infer, reference=_reference, pattern=_pattern,
    attrs=(Attr("graph", "graph"),
           Attr("pattern", "string", choices=tuple(str(k) for k in PatternKind)),
           Attr("kernel", "string")),
    num_outputs=(1, 1 << 16), flops=_flops,
    doc="a fused group of nodes (one kernel); attrs: graph, pattern, kernel",
),)


def fused_node(inner: Graph, pattern: str | PatternKind, inputs: Sequence[Value]) -> Node:
    """A ``Fused`` node running ``inner`` (named after it) on ``inputs``."""
    return Node("Fused", inner.name, tuple(inputs), inner.outputs,
                {"graph": inner, "pattern": str(pattern), "kernel": inner.name})


def format_graph(graph: Graph) -> str:
    """``str(graph)`` followed by the body of every ``Fused`` node's kernel.

    The outer graph shows each kernel as one line; the bodies follow, one per kernel::

        graph g(%x: float32[2]) -> (%z: float32[2]) {
          %z: float32[2] = Fused(%x, graph=<Graph 'fused_neg_relu_0': 2 nodes>, ...)
        }
        kernel fused_neg_relu_0 (injective):
        graph fused_neg_relu_0(%x: float32[2]) -> (%z: float32[2]) { ... }
    """
    parts = [str(graph)]
    for node in graph.nodes:
        if node.op == "Fused":
            parts.append(f"\nkernel {node.attrs['kernel']} ({node.attrs['pattern']}):")
            parts.append(str(node.attrs["graph"]))
    return "\n".join(parts)
