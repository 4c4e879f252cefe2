"""The graph IR: :class:`Graph`, :class:`Node`, :class:`Value`.

A ``Graph`` is a static-shape dataflow graph in topological order.  Every tensor is a
``Value`` with a unique name, a static shape and a dtype; a constant (ONNX initializer or
folded result) carries its numpy array in ``Value.data``.  A ``Node`` applies one op from
the registry (:mod:`toolchain.graph.ops`) to input values and produces output values.
Optional ONNX inputs that are absent are ``None`` in ``Node.inputs``.

The IR is immutable by convention: passes build new nodes and graphs instead of editing
them (``Node.replace`` and ``Graph.replace`` help).  Values compare by identity.

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ir import Graph, Node, Value
    >>> x = Value("x", (1, 4), "float32")
    >>> w = Value.constant("w", np.ones((4, 2), np.float32))
    >>> y = Value("y", (1, 2), "float32")
    >>> g = Graph("tiny", inputs=[x], outputs=[y], nodes=[Node("MatMul", "mm", [x, w], [y])])
    >>> print(g)  # doctest: +NORMALIZE_WHITESPACE
    graph tiny(%x: float32[1, 4]) -> (%y: float32[1, 2]) {
      const %w: float32[4, 2]
      %y: float32[1, 2] = MatMul(%x, %w)  # mm
    }
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from toolchain.errors import ModelError

#: Kiln dtype name -> numpy dtype.  These are the dtypes a graph may carry.
DTYPES: dict[str, np.dtype] = {
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "float64": np.dtype(np.float64),
    "int8": np.dtype(np.int8),
    "uint8": np.dtype(np.uint8),
    "int16": np.dtype(np.int16),
    "uint16": np.dtype(np.uint16),
    "int32": np.dtype(np.int32),
    "uint32": np.dtype(np.uint32),
    "int64": np.dtype(np.int64),
    "uint64": np.dtype(np.uint64),
    "bool": np.dtype(np.bool_),
}


def dtype_of(array_or_dtype: Any) -> str:
    """Kiln dtype name of a numpy array or dtype (``np.float32`` -> ``"float32"``)."""
    dt = np.dtype(getattr(array_or_dtype, "dtype", array_or_dtype))
    for name, npdt in DTYPES.items():
        if npdt == dt:
            return name
    raise ModelError(f"dtype {dt} is not supported by Kiln (supported: {', '.join(DTYPES)})")


def np_dtype(name: str) -> np.dtype:
    """numpy dtype of a Kiln dtype name."""
    try:
        return DTYPES[name]
    except KeyError:
        raise ModelError(
            f"dtype {name!r} is not supported by Kiln (supported: {', '.join(DTYPES)})"
        ) from None


@dataclass(frozen=True)
class TensorType:
    """A static shape and a dtype."""

    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        if self.dtype not in DTYPES:
            raise ModelError(f"dtype {self.dtype!r} is not supported by Kiln")

    @property
    def size(self) -> int:
        """Number of elements."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * DTYPES[self.dtype].itemsize

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"


@dataclass(eq=False)
class Value:
    """A tensor in the graph: a unique name, a static type, and for constants the data.

    ``Value`` objects are compared and hashed by identity, so two values with the same
    name in different graphs are distinct.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    data: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.shape = tuple(int(d) for d in self.shape)
        if self.dtype not in DTYPES:
            raise ModelError(f"value {self.name!r}: dtype {self.dtype!r} is not supported")
        if self.data is not None:
            if tuple(self.data.shape) != self.shape or dtype_of(self.data) != self.dtype:
                raise ModelError(
                    f"value {self.name!r}: data {dtype_of(self.data)}{list(self.data.shape)}"
                    f" does not match declared type {self.type}"
                )

    @classmethod
    def constant(cls, name: str, data: Any) -> Value:
        """A constant value holding ``data`` (converted to a numpy array)."""
        arr = np.asarray(data)
        return cls(name, arr.shape, dtype_of(arr), arr)

    @property
    def type(self) -> TensorType:
        return TensorType(self.shape, self.dtype)

    @property
    def is_constant(self) -> bool:
        return self.data is not None

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * DTYPES[self.dtype].itemsize

    def __repr__(self) -> str:
        kind = "const " if self.is_constant else ""
        return f"<Value {kind}%{self.name}: {self.type}>"


@dataclass(frozen=True, eq=False)
class Node:
    """One op applied to inputs (``None`` for an absent optional input)."""

    op: str
    name: str
    inputs: tuple[Value | None, ...]
    outputs: tuple[Value, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "attrs", dict(self.attrs))

    def replace(self, **changes: Any) -> Node:
        """A copy of this node with some fields changed."""
        fields = {
            "op": self.op, "name": self.name, "inputs": self.inputs,
            "outputs": self.outputs, "attrs": self.attrs,
        }
        fields.update(changes)
        return Node(**fields)

    def input(self, i: int) -> Value | None:
        """The i-th input, or ``None`` when it is absent or beyond the given inputs."""
        return self.inputs[i] if i < len(self.inputs) else None

    def describe(self) -> str:
        """``node 'name' (Op)`` — the prefix of every error message about this node."""
        return f"node {self.name!r} ({self.op})"

    def __repr__(self) -> str:
        return f"<Node {self.op} {self.name!r}>"


def _fmt_attr(v: Any) -> str:
    if isinstance(v, np.ndarray):
        if v.size <= 8:
            return f"{dtype_of(v)}{list(v.shape)}{v.tolist()}"
        return f"{dtype_of(v)}{list(v.shape)}"
    if isinstance(v, float):
        return repr(float(f"{v:.6g}"))
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt_attr(x) for x in v) + "]"
    return repr(v)


class Graph:
    """A static-shape dataflow graph whose nodes are kept in topological order.

    ``inputs`` are the runtime inputs (never constants), ``outputs`` the results.
    Constants are values with ``data`` that no node produces.
    """

    def __init__(
        self,
        name: str,
        inputs: Sequence[Value],
        outputs: Sequence[Value],
        nodes: Iterable[Node],
        *,
        opset: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.inputs: tuple[Value, ...] = tuple(inputs)
        self.outputs: tuple[Value, ...] = tuple(outputs)
        self.nodes: tuple[Node, ...] = tuple(nodes)
        self.opset = opset
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.nodes = tuple(self._topo_sort())

    # -- structure ---------------------------------------------------------------------
    def _topo_sort(self) -> list[Node]:
        """Nodes in a stable topological order; raises on cycles, dangling inputs, or
        values produced twice."""
        producer: dict[int, Node] = {}
        for node in self.nodes:
            for out in node.outputs:
                if id(out) in producer:
                    raise ModelError(
                        f"value {out.name!r} is produced by both {producer[id(out)].describe()}"
                        f" and {node.describe()}"
                    )
                producer[id(out)] = node
        graph_inputs = {id(v) for v in self.inputs}
        for v in self.inputs:
            if id(v) in producer:
                raise ModelError(
                    f"graph input {v.name!r} is also produced by {producer[id(v)].describe()}"
                )
        for node in self.nodes:
            for v in node.inputs:
                if v is None or id(v) in producer or id(v) in graph_inputs or v.is_constant:
                    continue
                raise ModelError(
                    f"{node.describe()} reads {v.name!r}, which is not a graph input, "
                    "a constant, or the output of any node (a dangling input)"
                )
        for v in self.outputs:
            if id(v) not in producer and id(v) not in graph_inputs and not v.is_constant:
                raise ModelError(f"graph output {v.name!r} is produced by no node")

        order: list[Node] = []
        state: dict[int, int] = {}  # 1 = visiting, 2 = done
        for root in self.nodes:
            if state.get(id(root)) == 2:
                continue
            stack: list[tuple[Node, int]] = [(root, 0)]
            state[id(root)] = 1
            while stack:
                node, i = stack.pop()
                preds = [producer[id(v)] for v in node.inputs
                         if v is not None and id(v) in producer]
                if i < len(preds):
                    stack.append((node, i + 1))
                    p = preds[i]
                    s = state.get(id(p))
                    if s == 1:
                        cycle = [n.name for n, _ in stack if state.get(id(n)) == 1]
                        raise ModelError(
                            "the graph has a cycle through nodes "
                            + " -> ".join(repr(n) for n in cycle + [p.name])
                        )
                    if s is None:
                        state[id(p)] = 1
                        stack.append((p, 0))
                else:
                    state[id(node)] = 2
                    order.append(node)
        return order

    def replace(self, **changes: Any) -> Graph:
        """A new graph with some of ``name, inputs, outputs, nodes, opset, metadata`` changed."""
        fields = {
            "name": self.name, "inputs": self.inputs, "outputs": self.outputs,
            "nodes": self.nodes, "opset": self.opset, "metadata": self.metadata,
        }
        fields.update(changes)
        name = fields.pop("name")
        return Graph(name, fields.pop("inputs"), fields.pop("outputs"), fields.pop("nodes"),
                     **fields)

    # -- queries -----------------------------------------------------------------------
    def producers(self) -> dict[Value, Node]:
        """Map each node output to the node that produces it."""
        return {out: node for node in self.nodes for out in node.outputs}

    def consumers(self) -> dict[Value, list[Node]]:
        """Map each value to the nodes that read it (in topological order)."""
        result: dict[Value, list[Node]] = {}
        for node in self.nodes:
            for v in node.inputs:
                if v is not None:
                    result.setdefault(v, []).append(node)
        return result

    def constants(self) -> list[Value]:
        """Constant values read by nodes or returned as outputs, in first-use order."""
        seen: dict[int, Value] = {}
        for node in self.nodes:
            for v in node.inputs:
                if v is not None and v.is_constant and id(v) not in seen:
                    seen[id(v)] = v
        for v in self.outputs:
            if v.is_constant and id(v) not in seen:
                seen[id(v)] = v
        return list(seen.values())

    def values(self) -> Iterator[Value]:
        """Every value: inputs, constants, then node outputs in order."""
        yield from self.inputs
        yield from self.constants()
        for node in self.nodes:
            yield from node.outputs

    def value(self, name: str) -> Value:
        """The value called ``name``."""
        for v in self.values():
            if v.name == name:
                return v
        raise KeyError(f"graph {self.name!r} has no value named {name!r}")

    def node(self, name: str) -> Node:
        """The node called ``name``."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"graph {self.name!r} has no node named {name!r}")

    # -- printing ----------------------------------------------------------------------
    def __str__(self) -> str:
        def decl(v: Value) -> str:
            return f"%{v.name}: {v.type}"

        ins = ", ".join(decl(v) for v in self.inputs)
        outs = ", ".join(decl(v) for v in self.outputs)
        lines = [f"graph {self.name}({ins}) -> ({outs}) {{"]
        for c in self.constants():
            lines.append(f"  const {decl(c)}")
        for node in self.nodes:
            args = ", ".join("_" if v is None else f"%{v.name}" for v in node.inputs)
            attrs = ", ".join(f"{k}={_fmt_attr(v)}" for k, v in sorted(node.attrs.items()))
            lhs = ", ".join(decl(o) for o in node.outputs)
            call = f"{node.op}({args}{', ' if args and attrs else ''}{attrs})"
            lines.append(f"  {lhs} = {call}  # {node.name}")
        lines.append("}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Graph {self.name!r}: {len(self.nodes)} nodes>"
