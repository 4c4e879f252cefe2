"""Operator fusion by the TVM paper's rules (Chen et al., OSDI 2018, section 3).

Every node is put into exactly one group; every group becomes one ``Fused`` node (see
:mod:`toolchain.graph.passes.fused_op`), i.e. one kernel.  Groups are grown in topological
order: each node starts a group of its own pattern kind and may then absorb the groups that
produce its inputs, by these rules:

1. **injective + injective**: an injective node absorbs injective producer groups — chains
   and trees of element-wise and data-movement ops become one injective kernel;
2. **injective -> reduction**: a reduction node absorbs injective producer groups (the
   scale-then-sum of the paper); nothing is fused onto a reduction's output;
3. **complex-out-fusable -> element-wise**: an element-wise node (its ``OpDef`` has the
   ``elementwise`` trait) whose output has the shape of a complex-out-fusable group's output
   (conv, dense, matmul, pooling) joins that group — ``conv -> add(bias or residual) ->
   relu`` is one kernel.  A group holds at most one complex op, and a complex op never absorbs
   producers (what feeds a conv is computed by its own kernel);
4. **opaque** ops (softmax, layer norm, …) stand alone, and nothing fuses into them.

**Multi-consumer values.**  A producer group is absorbed only when every value it exports
is read by the absorbing node alone and is not a graph output, so no value is ever both
kept in memory and recomputed: a value with several consumers always ends its group and is
materialised once.  Kiln never duplicates work — not even cheap injective ops — which also
keeps every group acyclic (all of a group's inputs are computed before it starts).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from toolchain.graph.ir import Graph, Node, Value
from toolchain.graph.ops.registry import PatternKind, get_op
from toolchain.graph.passes._util import Namer
from toolchain.graph.passes.fused_op import fused_node

INJ, RED, OUT, OPQ = (PatternKind.INJECTIVE, PatternKind.REDUCTION,
                      PatternKind.COMPLEX_OUT_FUSABLE, PatternKind.OPAQUE)

_SHORT = {"Conv": "conv", "Gemm": "dense", "MatMul": "matmul", "BatchNormalization": "bn",
          "LayoutTransform": "layout"}
_MAX_NAME_OPS = 5
#: the longest chain of nodes one fused kernel holds. Inlining an elementwise op copies its
#: input's expression once per use (Relu's select reads it twice), so a chain of k such
#: ops is a 2^k-leaf expression, and every expression visitor recurses k deep: a longer
#: chain is split into several kernels (the zoo's deepest group is 5)
MAX_FUSED_DEPTH = 8


@dataclass(eq=False)
class _Group:
    kind: PatternKind
    nodes: list[Node] = field(default_factory=list)
    #: per member node (by id): the longest chain of members ending at it
    depth: dict[int, int] = field(default_factory=dict)


def _pattern(node: Node) -> PatternKind:
    if node.op == "Fused":
        return OPQ  # already a kernel: never fused again
    return get_op(node.op).pattern_of(node)


def _exports_only_to(group: _Group, node: Node, consumers: dict[Value, list[Node]],
                     outputs: set[Value]) -> bool:
    members = set(map(id, group.nodes))
    for m in group.nodes:
        for out in m.outputs:
            if out in outputs:
                return False
            if any(c is not node and id(c) not in members for c in consumers.get(out, [])):
                return False
    return True


def _may_absorb(group: _Group, node: Node, producer: _Group) -> bool:
    if producer.kind == INJ:
        return group.kind in (INJ, RED, OUT) and _pattern(node) in (INJ, RED)
    if producer.kind == OUT and group.kind == INJ and get_op(node.op).elementwise:
        exported = producer.nodes[-1].outputs[0]
        return node.outputs[0].shape == exported.shape
    return False


def _groups(graph: Graph) -> list[_Group]:
    consumers = graph.consumers()
    outputs = set(graph.outputs)
    producer_of = graph.producers()
    group_of: dict[int, _Group] = {}
    groups: list[_Group] = []
    for node in graph.nodes:
        group = _Group(_pattern(node), [node], {id(node): 1})
        if group.kind in (INJ, RED):
            seen: set[int] = set()
            for v in node.inputs:
                p = producer_of.get(v) if v is not None else None
                if p is None or id(group_of[id(p)]) in seen:
                    continue
                pg = group_of[id(p)]
                seen.add(id(pg))
                if _may_absorb(group, node, pg) and \
                        _exports_only_to(pg, node, consumers, outputs) and \
                        pg.depth[id(p)] < MAX_FUSED_DEPTH:
                    if pg.kind == OUT:
                        group.kind = OUT
                    group.nodes = pg.nodes + group.nodes
                    group.depth = {**pg.depth, **group.depth}
                    group.depth[id(node)] = max(group.depth[id(node)], pg.depth[id(p)] + 1)
                    groups.remove(pg)
        groups.append(group)
        for m in group.nodes:
            group_of[id(m)] = group
    order = {id(n): i for i, n in enumerate(graph.nodes)}
    for g in groups:
        g.nodes.sort(key=lambda n: order[id(n)])
    return groups


def _snake(op: str) -> str:
    return _SHORT.get(op) or re.sub(r"(?<!^)(?=[A-Z])", "_", op).lower()


def kernel_name(nodes: list[Node], index: int) -> str:
    """``fused_<op>_<op>…_<index>`` from the ops of a group (at most five op names;
    ``Conv`` spelled ``conv1d``/``conv2d``/``conv3d`` by its rank).

    Example::

        >>> from toolchain.graph.ir import Value
        >>> x = Value("x", (1, 1, 4, 4), "float32")
        >>> kernel_name([Node("Conv", "c", [x, x], [x]), Node("Add", "a", [x, x], [x]),
        ...              Node("Relu", "r", [x], [x])], 3)
        'fused_conv2d_add_relu_3'
    """
    names: list[str] = []
    for n in nodes:
        short = _snake(n.attrs["pool"] if n.op == "LayoutPool" else n.op)
        if n.op == "LayoutConv":
            short = "conv2d"  # only 2-D convolutions get a layout
        elif short == "conv" and n.inputs and n.inputs[0] is not None:
            short = f"conv{max(n.inputs[0].rank - 2, 1)}d"
        if not names or names[-1] != short:
            names.append(short)
    if len(names) > _MAX_NAME_OPS:
        names = names[:_MAX_NAME_OPS - 1] + [f"{len(names) - _MAX_NAME_OPS + 1}more"]
    return "fused_" + "_".join(names) + f"_{index}"


def _baked(n: Node, i: int, v: Value) -> bool:
    """Constants compiled into the kernel: scalars, small integer operands, and every
    operand the op reads at compile time (``OpDef.compile_time``: shapes, axes, pads, slice
    bounds, Resize scales); every other constant is a weight passed to the kernel."""
    return (v.size <= 1 or (v.dtype.startswith(("int", "uint", "bool")) and v.size <= 64)
            or i in get_op(n.op).compile_time)


def _fuse_group(group: _Group, index: int, graph: Graph, consumers: dict[Value, list[Node]],
                namer: Namer) -> Node:
    name = namer(kernel_name(group.nodes, index))
    members = set(map(id, group.nodes))
    produced = {o for n in group.nodes for o in n.outputs}
    params: list[Value] = []
    inner_of: dict[Value, Value] = {}
    for n in group.nodes:
        for i, v in enumerate(n.inputs):
            if v is None or v in produced or v in inner_of or (v.is_constant
                                                                and _baked(n, i, v)):
                continue
            inner_of[v] = Value(v.name, v.shape, v.dtype) if v.is_constant else v
            params.append(v)
    nodes = [n.replace(inputs=tuple(
        v if v is None or (v.is_constant and _baked(n, i, v)) else inner_of.get(v, v)
        for i, v in enumerate(n.inputs))) for n in group.nodes]
    outs = [o for n in group.nodes for o in n.outputs
            if o in graph.outputs or any(id(c) not in members for c in consumers.get(o, []))]
    inner = Graph(name, [inner_of[v] for v in params], outs, nodes)
    return fused_node(inner, group.kind, params)


def fuse(graph: Graph) -> Graph:
    """Group the nodes by the fusion rules and turn every group into a ``Fused`` node.

    Before / after (``format_graph`` prints the kernels' bodies)::

        graph g(%x: float32[1, 3, 8, 8]) -> (%y: float32[1, 4, 8, 8]) {
          %c: float32[1, 4, 8, 8] = Conv(%x, %w, %b, pads=[1, 1, 1, 1])  # conv
          %s: float32[1, 4, 8, 8] = Add(%c, %r)  # add
          %y: float32[1, 4, 8, 8] = Relu(%s)  # relu
        }
        graph g(%x: float32[1, 3, 8, 8]) -> (%y: float32[1, 4, 8, 8]) {
          %y: float32[1, 4, 8, 8] = Fused(%x, %w, %b, %r, kernel='fused_conv2d_add_relu_0',
                                          pattern='complex-out-fusable', graph=...)
        }

    Example::

        >>> x, y, z = (Value(n, (2,), "float32") for n in "xyz")
        >>> g = Graph("g", [x], [z], [Node("Neg", "neg", [x], [y]),
        ...                           Node("Relu", "relu", [y], [z])])
        >>> [(n.op, n.attrs["kernel"], n.attrs["pattern"]) for n in fuse(g).nodes]
        [('Fused', 'fused_neg_relu_0', 'injective')]
    """
    consumers = graph.consumers()
    namer = Namer(graph)
    nodes = [_fuse_group(g, i, graph, consumers, namer)
             for i, g in enumerate(_groups(graph))]
    return graph.replace(nodes=nodes)
