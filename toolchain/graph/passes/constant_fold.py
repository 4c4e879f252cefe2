"""Constant folding: run nodes whose inputs are all constants at compile time.

The frontend already folds the ``Shape -> Gather -> Reshape`` chains of exported models
while importing; this pass folds whatever later passes (or hand-built graphs) leave behind,
with each op's numpy reference from the registry, so the result is exactly what the node
would compute at run time.

**Size cap.** A folded result becomes a weight stored in the bundle.  A node whose result
is larger than its constant inputs *and* larger than ``max_bytes`` (default 64 KiB) is left
alone: ``ConstantOfShape([1024, 1024])`` or ``Expand(scalar, big shape)`` costs a few bytes
of code at run time but megabytes of flash when folded.  Results no larger than their
inputs are always folded (folding never grows the weights then).
"""

from __future__ import annotations

from toolchain.graph.ir import Graph, Node, Value
from toolchain.graph.reference import run_node

#: default size cap in bytes (see the module docstring)
DEFAULT_MAX_BYTES = 64 * 1024


def _foldable(node: Node, max_bytes: int) -> bool:
    if node.op == "Fused" or any(v is not None and not v.is_constant for v in node.inputs):
        return False
    out_bytes = sum(o.nbytes for o in node.outputs)
    in_bytes = sum(v.nbytes for v in node.inputs if v is not None)
    return out_bytes <= max(in_bytes, max_bytes)


def constant_fold(graph: Graph, max_bytes: int = DEFAULT_MAX_BYTES) -> Graph:
    """Fold every node whose inputs are all constants (see the size cap above).

    The folded output keeps its value name, so graph outputs keep theirs.

    Before / after::

        graph g(%x: float32[2]) -> (%y: float32[2]) {
          const %a: float32[2]
          %b: float32[2] = Neg(%a)  # neg
          %y: float32[2] = Add(%x, %b)  # add
        }
        graph g(%x: float32[2]) -> (%y: float32[2]) {
          const %b: float32[2]
          %y: float32[2] = Add(%x, %b)  # add
        }

    Example::

        >>> import numpy as np
        >>> a = Value.constant("a", np.array([1.0, 2.0], np.float32))
        >>> x, b, y = (Value(n, (2,), "float32") for n in "xby")
        >>> g = Graph("g", [x], [y], [Node("Neg", "neg", [a], [b]),
        ...                           Node("Add", "add", [x, b], [y])])
        >>> [n.op for n in constant_fold(g).nodes]
        ['Add']
    """
    mapping: dict[Value, Value] = {}
    nodes: list[Node] = []
    for node in graph.nodes:
        ins = tuple(None if v is None else mapping.get(v, v) for v in node.inputs)
        node = node.replace(inputs=ins) if ins != node.inputs else node
        if not _foldable(node, max_bytes):
            nodes.append(node)
            continue
        arrays = run_node(node, [None if v is None else v.data for v in node.inputs])
        for out, array in zip(node.outputs, arrays, strict=True):
            mapping[out] = Value.constant(out.name, array.copy())
    outputs = [mapping.get(v, v) for v in graph.outputs]
    return graph.replace(nodes=nodes, outputs=outputs)
