"""Simplification: drop nodes that do nothing and merge chains of data-movement ops.

Dropped (the output is replaced by the input):

* ``Identity``; inference ``Dropout`` (its optional mask output becomes an all-true
  constant);
* no-op ``Reshape``/``Flatten``/``Squeeze``/``Unsqueeze``/``Expand``/``Tile`` (output shape
  equals the input's), ``Transpose`` with the identity permutation, ``Cast`` to the dtype
  the input already has, ``Slice`` keeping everything (same shape, positive steps), ``Pad``
  with all-zero pads, ``Concat`` of one input.

Merged:

* a chain of reshape-like ops (``Reshape``, ``Flatten``, ``Squeeze``, ``Unsqueeze``) into one
  ``Reshape`` to the final shape;
* ``Transpose(Transpose(x, p1), p2)`` into ``Transpose(x, [p1[i] for i in p2])`` (dropped when
  that is the identity); an ``NCHW``/``NHWC`` ``LayoutTransform`` counts as a transpose, so
  a TensorFlow model's ``Transpose(NHWC -> NCHW)`` followed by the layout pass's transform
  back to ``NHWC`` disappears.

Rewritten: a ``Transpose`` that moves only size-1 axes, and a ``LayoutTransform`` that moves
no data (the two layouts store the elements in the same order: spatial size 1, as after a
global pool, or a block of 1) become a ``Reshape``, which then merges with neighbouring
reshapes (a transpose chain is merged first, as it may cancel entirely).

When a dropped node's output is a graph output, its producer is made to write that value
instead, so the caller's output names never change; when that is impossible (the input is
itself a graph input or output) the node stays.
"""

from __future__ import annotations

import numpy as np

from toolchain.graph.ir import Graph, Node, Value
from toolchain.graph.passes._util import Namer, resolve
from toolchain.graph.passes.layout_ops import nchw_shape, to_layout

_VIEWS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")
_SAME_SHAPE_NOOPS = _VIEWS + ("Expand", "Tile")
#: layout transforms that are plain transposes
_LAYOUT_PERMS = {("NCHW", "NHWC"): (0, 2, 3, 1), ("NHWC", "NCHW"): (0, 3, 1, 2)}


def _perm(node: Node) -> tuple[int, ...]:
    perm = tuple(node.attrs.get("perm", ()))
    return perm or tuple(reversed(range(node.inputs[0].rank)))


def _perm_of(node: Node) -> tuple[int, ...] | None:
    """The permutation a ``Transpose`` (or an NCHW <-> NHWC ``LayoutTransform``) applies."""
    if node.op == "Transpose":
        return _perm(node)
    if node.op == "LayoutTransform":
        return _LAYOUT_PERMS.get((node.attrs["src_layout"], node.attrs["dst_layout"]))
    return None


def _is_noop(node: Node) -> bool:
    x = node.input(0)
    if x is None or len(node.outputs) != 1 and node.op != "Dropout":
        return False
    y = node.outputs[0]
    if y.shape != x.shape or y.dtype != x.dtype:
        return False
    if node.op in ("Identity", "Dropout", "Cast") + _SAME_SHAPE_NOOPS:
        return True
    if node.op == "Transpose":
        return _perm(node) == tuple(range(x.rank))
    if node.op == "Slice":
        steps = node.input(4)
        return steps is None or (steps.is_constant and bool(np.all(steps.data > 0)))
    if node.op == "Pad":
        pads = node.input(1)
        return pads is not None and pads.is_constant and not np.any(pads.data)
    if node.op == "Concat":
        return len(node.inputs) == 1
    return False


def _moves_no_data(node: Node) -> bool:
    """A ``Transpose`` moving only size-1 axes, or a ``LayoutTransform`` whose source and
    destination store the elements in the same order (spatial size 1, block 1, one
    channel …): a reshape, not a data movement."""
    x = node.inputs[0]
    if node.op == "Transpose":  # only size-1 axes move
        kept = [p for p in _perm(node) if x.shape[p] != 1]
        return kept == sorted(kept)
    if node.op != "LayoutTransform" or x.size > 1 << 20:
        return False
    src, dst = node.attrs["src_layout"], node.attrs["dst_layout"]
    probe = np.arange(x.size, dtype=np.int32).reshape(nchw_shape(x.shape, src))
    return bool(np.array_equal(to_layout(probe, src).ravel(), to_layout(probe, dst).ravel()))


def _reshape(x: Value, y: Value, name: str, namer: Namer) -> Node:
    shape = Value.constant(namer(f"{y.name}_shape"), np.array(y.shape, np.int64))
    return Node("Reshape", name, (x, shape), (y,), {"allowzero": int(0 in y.shape)})


def _merged(node: Node, producer: Node | None, namer: Namer) -> Node | None:
    """``node`` rewritten to read past a mergeable ``producer`` (or ``None``)."""
    if producer is None:
        return None
    if node.op in _VIEWS and producer.op in _VIEWS:
        return _reshape(producer.inputs[0], node.outputs[0], node.name, namer)
    p1, p2 = _perm_of(producer), _perm_of(node)
    if p1 is not None and p2 is not None:
        return Node("Transpose", node.name, (producer.inputs[0],), node.outputs,
                    {"perm": tuple(p1[i] for i in p2)})
    return None


def _sweep(graph: Graph, namer: Namer) -> tuple[Graph, bool]:
    """One forward pass over the nodes; the new graph and whether anything changed."""
    mapping: dict[Value, Value] = {}  # dropped value -> the value that replaces it
    rename: dict[Value, Value] = {}  # a producer's output -> the graph output it now writes
    nodes: list[Node] = []
    at: dict[Value, int] = {}
    outputs, inputs = set(graph.outputs), set(graph.inputs)
    changed = False
    for node in graph.nodes:
        ins = tuple(resolve(mapping, v) for v in node.inputs)
        node = node.replace(inputs=ins) if ins != node.inputs else node
        if _is_noop(node):
            src, dst = node.inputs[0], node.outputs[0]
            droppable = dst not in outputs or not (
                src.is_constant or src in inputs or src in outputs or src in rename
                or src not in at)
            if droppable:
                if dst in outputs:
                    rename[src] = dst  # the producer writes the graph output directly
                else:
                    mapping[dst] = src
                for extra in node.outputs[1:]:  # Dropout's mask: all true in inference
                    mapping[extra] = Value.constant(extra.name, np.ones(extra.shape, np.bool_))
                changed = True
                continue
        else:
            x = node.input(0)
            new = _merged(node, nodes[at[x]] if x in at else None, namer)
            if new is None and _moves_no_data(node):
                new = _reshape(node.inputs[0], node.outputs[0], node.name, namer)
            if new is not None:
                node, changed = new, True
        nodes.append(node)
        for out in node.outputs:
            at[out] = len(nodes) - 1
    if rename:
        nodes = [n.replace(inputs=tuple(resolve(rename, v) for v in n.inputs),
                           outputs=tuple(resolve(rename, v) for v in n.outputs)) for n in nodes]
    return graph.replace(nodes=nodes, outputs=[resolve(mapping, v) for v in graph.outputs]), \
        changed


def simplify(graph: Graph) -> Graph:
    """Drop no-op nodes and merge reshape and transpose chains (see the module docstring).

    Before / after::

        graph g(%x: float32[2, 3]) -> (%z: float32[3, 2]) {
          %a: float32[2, 3] = Identity(%x)  # id
          %b: float32[6] = Reshape(%a, %s6)  # r1
          %z: float32[3, 2] = Reshape(%b, %s32)  # r2
        }
        graph g(%x: float32[2, 3]) -> (%z: float32[3, 2]) {
          const %z_shape: int64[2]
          %z: float32[3, 2] = Reshape(%x, %z_shape, allowzero=0)  # r2
        }

    (the first ``Reshape`` is left for :func:`~toolchain.graph.passes.dce.dead_code_elimination`
    when nothing else reads it).

    Example::

        >>> x, y = Value("x", (2,), "float32"), Value("y", (2,), "float32")
        >>> z = Value("z", (2,), "float32")
        >>> g = Graph("g", [x], [z], [Node("Identity", "id", [x], [y]),
        ...                           Node("Relu", "relu", [y], [z])])
        >>> print(simplify(g))  # doctest: +NORMALIZE_WHITESPACE
        graph g(%x: float32[2]) -> (%z: float32[2]) {
          %z: float32[2] = Relu(%x)  # relu
        }
    """
    namer = Namer(graph)
    changed = True
    while changed:  # merged transposes may cancel: sweep again until nothing changes
        graph, changed = _sweep(graph, namer)
    return graph
