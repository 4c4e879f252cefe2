"""Small helpers shared by the graph passes (not a pass themselves).

Passes never edit a graph: they build a new node list, substituting values through a
``dict[Value, Value]`` as they go (:func:`resolve`), and give fresh, unique names to the
values and nodes they create (:class:`Namer`).
"""

from __future__ import annotations

from collections.abc import Mapping

from toolchain.graph.ir import Graph, Node, Value


def resolve(mapping: Mapping[Value, Value], v: Value | None) -> Value | None:
    """Follow ``mapping`` from ``v`` until a value that is not remapped.

    Example::

        >>> a, b, c = (Value(n, (1,), "float32") for n in "abc")
        >>> resolve({a: b, b: c}, a).name
        'c'
    """
    seen = 0
    while v is not None and v in mapping:
        v = mapping[v]
        seen += 1
        if seen > len(mapping):  # a cycle in the mapping: a pass bug
            raise RuntimeError(f"value substitution cycles through {v.name!r}")
    return v


class Namer:
    """Hands out names not used by any value or node of a graph (``base``, ``base_1``…)."""

    def __init__(self, graph: Graph) -> None:
        self.used: set[str] = {v.name for v in graph.values()}
        self.used |= {n.name for n in graph.nodes}
        for node in graph.nodes:
            inner = node.attrs.get("graph")
            if isinstance(inner, Graph):
                self.used |= {v.name for v in inner.values()}

    def __call__(self, base: str) -> str:
        name, i = base, 0
        while name in self.used:
            i += 1
            name = f"{base}_{i}"
        self.used.add(name)
        return name


def single_consumer(graph: Graph, value: Value,
                    consumers: Mapping[Value, list[Node]] | None = None) -> Node | None:
    """The one node reading ``value`` when exactly one node does and it is not a graph
    output; otherwise ``None``."""
    users = (consumers if consumers is not None else graph.consumers()).get(value, [])
    if len(users) != 1 or any(v is value for v in graph.outputs):
        return None
    return users[0]
