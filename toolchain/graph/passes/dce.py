"""Dead-code elimination: remove nodes none of whose outputs is used."""

from __future__ import annotations

from toolchain.graph.ir import Graph, Node, Value


def dead_code_elimination(graph: Graph) -> Graph:
    """Remove every node whose outputs are neither graph outputs nor read by a live node.

    Kiln ops have no side effects, so liveness flows backwards from the graph outputs in one
    reverse sweep over the topological order.

    Before / after::

        graph g(%x: float32[2]) -> (%y: float32[2]) {
          %y: float32[2] = Relu(%x)  # relu
          %unused: float32[2] = Neg(%x)  # neg
        }
        graph g(%x: float32[2]) -> (%y: float32[2]) {
          %y: float32[2] = Relu(%x)  # relu
        }

    Example::

        >>> from toolchain.graph.ir import Node, Value
        >>> x, y, u = (Value(n, (2,), "float32") for n in ("x", "y", "unused"))
        >>> g = Graph("g", [x], [y], [Node("Relu", "relu", [x], [y]),
        ...                           Node("Neg", "neg", [x], [u])])
        >>> [n.name for n in dead_code_elimination(g).nodes]
        ['relu']
    """
    live: set[Value] = set(graph.outputs)
    kept: list[Node] = []
    for node in reversed(graph.nodes):
        if any(o in live for o in node.outputs):
            kept.append(node)
            live.update(v for v in node.inputs if v is not None)
    if len(kept) == len(graph.nodes):
        return graph
    return graph.replace(nodes=list(reversed(kept)))
