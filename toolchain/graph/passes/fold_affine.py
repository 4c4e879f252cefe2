"""Fold per-channel affine ops into the preceding convolution or dense layer.

An inference ``BatchNormalization`` is ``y = x * a + b`` per channel with
``a = scale / sqrt(var + eps)`` and ``b = B - mean * a``; a ``Mul``/``Add``/``Sub``/``Div``
by a constant that is a scalar or per-output-channel is the same with ``b = 0`` or
``a = 1``.  When such an op reads the output of a ``Conv``, ``ConvTranspose``, ``Gemm`` or
``MatMul`` whose weight is a constant, and nothing else reads that output, the affine map is
multiplied into the weights (``W' = W * a`` along the output channels) and the bias
(``bias' = bias * a + b``), and the op disappears.  Weights are recomputed in float64 and
rounded once.

Where the output channel is: axis 1 for ``Conv``/``ConvTranspose`` (and a BatchNorm),
the last axis for ``Gemm``/``MatMul``.  A ``MatMul`` has no bias input, so an additive
part is folded only when its operands are 2-D (the ``MatMul`` becomes a ``Gemm``); a
``MatMul`` of higher rank takes multiplicative folds only.

A BatchNorm with nothing to fold into (after an ``Add`` or a pool, as in pre-activation
ResNets and DenseNets) becomes ``Mul`` + ``Add`` by per-channel constants: element-wise
ops, which then fuse onto the preceding kernel and follow its layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from toolchain.graph.ir import Graph, Node, Value
from toolchain.graph.passes._util import Namer, single_consumer

_PRODUCERS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
_AFFINE = ("BatchNormalization", "Mul", "Add", "Sub", "Div")


@dataclass
class _Affine:
    """``y = x * a + b`` per output channel (``a``, ``b`` 1-D of the channel count)."""

    a: np.ndarray
    b: np.ndarray


def _channel_axis(producer: Node) -> int | None:
    out = producer.outputs[0]
    if producer.op in ("Conv", "ConvTranspose"):
        return 1
    if producer.op == "Gemm":
        return 1
    # MatMul: output channels are the last axis; needs a 2-D constant right operand
    w = producer.inputs[1]
    a = producer.inputs[0]
    if w is None or w.rank != 2 or a is None or a.rank < 2:
        return None
    return out.rank - 1


def _per_channel(c: Value, out: Value, axis: int) -> np.ndarray | None:
    """``c`` as a 1-D per-channel vector when it broadcasts only along ``axis``."""
    if c.rank > out.rank:
        return None
    shape = (1,) * (out.rank - c.rank) + c.shape
    channels = out.shape[axis]
    if any(d != 1 for i, d in enumerate(shape) if i != axis) or shape[axis] not in (1,
                                                                                   channels):
        return None
    return np.broadcast_to(c.data.reshape(-1).astype(np.float64), (channels,))


def _affine_of(node: Node, x: Value, axis: int) -> _Affine | None:
    """The per-channel affine map ``node`` applies to ``x`` (``None`` if it is not one)."""
    out = node.outputs[0]
    if out.shape != x.shape or out.dtype != x.dtype or out.dtype not in ("float32",
                                                                        "float64", "float16"):
        return None
    channels = x.shape[axis]
    if node.op == "BatchNormalization":
        params = node.inputs[1:5]
        if axis != 1 or len(node.outputs) != 1 or node.attrs.get("training_mode", 0) or \
                any(p is None or not p.is_constant for p in params):
            return None
        scale, bias, mean, var = (p.data.astype(np.float64) for p in params)
        a = scale / np.sqrt(var + float(node.attrs.get("epsilon", 1e-5)))
        return _Affine(a, bias - mean * a)
    if len(node.inputs) != 2:
        return None
    lhs, rhs = node.inputs
    if node.op in ("Mul", "Add") and lhs is not x:
        lhs, rhs = rhs, lhs
    if lhs is not x or rhs is None or not rhs.is_constant or rhs is x:
        return None
    c = _per_channel(rhs, out, axis)
    if c is None:
        return None
    ones, zeros = np.ones(channels), np.zeros(channels)
    return {
        "Mul": lambda: _Affine(c, zeros), "Div": lambda: _Affine(1.0 / c, zeros),
        "Add": lambda: _Affine(ones, c), "Sub": lambda: _Affine(ones, -c),
    }[node.op]()


def _scale_weight(producer: Node, w: np.ndarray, a: np.ndarray) -> np.ndarray:
    """``w`` with output channel ``o`` multiplied by ``a[o]``."""
    if producer.op == "Conv":
        return w * a.reshape((-1,) + (1,) * (w.ndim - 1))
    if producer.op == "ConvTranspose":
        group = int(producer.attrs.get("group", 1))
        cin, cout_g = w.shape[0], w.shape[1]
        grouped = w.reshape((group, cin // group, cout_g) + w.shape[2:])
        factor = a.reshape((group, 1, cout_g) + (1,) * (w.ndim - 2))
        return (grouped * factor).reshape(w.shape)
    if producer.op == "Gemm" and int(producer.attrs.get("transB", 0)):
        return w * a[:, None]
    return w * a[None, :]  # Gemm (K, N) and MatMul (K, N)


def _fold(producer: Node, aff: _Affine, out: Value, namer: Namer) -> Node | None:
    """The producer with the affine map folded in, writing ``out`` (or ``None``)."""
    w = producer.inputs[1]
    if w is None or not w.is_constant:
        return None
    has_shift = bool(np.any(aff.b != 0))
    new_w = _scale_weight(producer, w.data.astype(np.float64), aff.a).astype(w.dtype)
    w_value = Value.constant(namer(f"{w.name}_folded"), new_w)
    attrs = dict(producer.attrs)
    if producer.op in ("Conv", "ConvTranspose"):
        bias = producer.input(2)
        if bias is not None and not bias.is_constant:
            return None
        old = np.zeros(len(aff.a)) if bias is None else bias.data.astype(np.float64)
        if bias is None and not has_shift:
            return producer.replace(inputs=(producer.inputs[0], w_value), outputs=(out,))
        new_b = Value.constant(namer(f"{(bias or w).name}_bias_folded"),
                               (old * aff.a + aff.b).astype(w.dtype))
        return producer.replace(inputs=(producer.inputs[0], w_value, new_b), outputs=(out,))
    if producer.op == "MatMul":
        if not has_shift:
            return producer.replace(inputs=(producer.inputs[0], w_value), outputs=(out,))
        if producer.inputs[0].rank != 2:
            return None
        new_c = Value.constant(namer(f"{w.name}_bias_folded"), aff.b.astype(w.dtype))
        return Node("Gemm", producer.name, (producer.inputs[0], w_value, new_c), (out,), {})
    # Gemm: Y = alpha * A' B' + beta * C
    c = producer.input(2)
    if c is not None and not c.is_constant:
        return None
    beta = float(attrs.get("beta", 1.0))
    old_c = np.zeros(1) if c is None else beta * c.data.astype(np.float64)
    if c is None and not has_shift:
        return producer.replace(inputs=(producer.inputs[0], w_value), outputs=(out,))
    new_c = Value.constant(namer(f"{(c or w).name}_bias_folded"),
                           (old_c * aff.a + aff.b).astype(w.dtype))
    attrs["beta"] = 1.0
    return producer.replace(inputs=(producer.inputs[0], w_value, new_c), outputs=(out,),
                            attrs=attrs)


def _fold_into(node: Node, nodes: list[Node], at: dict[Value, int], graph: Graph,
               consumers: dict[Value, list[Node]], namer: Namer) -> bool:
    """Fold ``node`` into the already emitted producer of one of its inputs, in place in
    ``nodes``; whether it was folded."""
    for v in node.inputs:
        if v is None or v.is_constant or v not in at:
            continue
        i = at[v]
        producer = nodes[i]
        if producer.op not in _PRODUCERS or len(producer.outputs) != 1 or \
                single_consumer(graph, v, consumers) is not node:
            continue
        axis = _channel_axis(producer)
        aff = None if axis is None else _affine_of(node, v, axis)
        new = None if aff is None else _fold(producer, aff, node.outputs[0], namer)
        if new is not None:
            nodes[i] = new
            at[node.outputs[0]] = i
            return True
    return False


def fold_affine(graph: Graph) -> Graph:
    """Fold BatchNorm and per-channel ``Mul``/``Add``/``Sub``/``Div`` by constants into the
    preceding ``Conv``/``ConvTranspose``/``Gemm``/``MatMul`` (see the module docstring).

    Before / after::

        graph g(%x: float32[1, 3, 8, 8]) -> (%z: float32[1, 4, 8, 8]) {
          const %w: float32[4, 3, 3, 3]
          const %s: float32[4] ...
          %y: float32[1, 4, 8, 8] = Conv(%x, %w, pads=[1, 1, 1, 1])  # conv
          %z: float32[1, 4, 8, 8] = BatchNormalization(%y, %s, %b, %m, %v)  # bn
        }
        graph g(%x: float32[1, 3, 8, 8]) -> (%z: float32[1, 4, 8, 8]) {
          const %w_folded: float32[4, 3, 3, 3]
          const %w_bias_folded: float32[4]
          %z: float32[1, 4, 8, 8] = Conv(%x, %w_folded, %w_bias_folded, pads=[1, 1, 1, 1])  # conv
        }

    Example::

        >>> import numpy as np
        >>> x = Value("x", (2, 3), "float32")
        >>> y, z = Value("y", (2, 4), "float32"), Value("z", (2, 4), "float32")
        >>> w = Value.constant("w", np.ones((3, 4), np.float32))
        >>> s = Value.constant("s", np.float32(2.0))
        >>> g = Graph("g", [x], [z], [Node("MatMul", "mm", [x, w], [y]),
        ...                           Node("Mul", "mul", [y, s], [z])])
        >>> out = fold_affine(g)
        >>> [n.op for n in out.nodes], out.nodes[0].inputs[1].data[0, 0]
        (['MatMul'], np.float32(2.0))
    """
    # One forward sweep: a folded producer keeps its place and takes over the affine op's
    # output value, so a chain (conv -> mul -> add) folds link by link.
    namer = Namer(graph)
    consumers = graph.consumers()
    nodes: list[Node] = []
    at: dict[Value, int] = {}
    changed = False
    for node in graph.nodes:
        if node.op in _AFFINE and len(node.outputs) == 1 and \
                _fold_into(node, nodes, at, graph, consumers, namer):
            changed = True
            continue
        split = _as_mul_add(node, namer) if node.op == "BatchNormalization" else None
        changed |= split is not None
        for new in split or [node]:
            nodes.append(new)
            for out in new.outputs:
                at[out] = len(nodes) - 1
    return graph.replace(nodes=nodes) if changed else graph


def _as_mul_add(node: Node, namer: Namer) -> list[Node] | None:
    """An inference BatchNorm with no conv to fold into, as ``Mul`` + ``Add`` by
    per-channel constants: element-wise ops, which fuse and follow layouts."""
    x = node.inputs[0]
    aff = _affine_of(node, x, 1) if x is not None and x.rank >= 2 else None
    if aff is None:
        return None
    shape = (x.shape[1],) + (1,) * (x.rank - 2)
    dtype = x.dtype
    a = Value.constant(namer(f"{node.name}_scale"), aff.a.reshape(shape).astype(dtype))
    b = Value.constant(namer(f"{node.name}_shift"), aff.b.reshape(shape).astype(dtype))
    scaled = Value(namer(f"{node.name}_scaled"), x.shape, dtype)
    return [Node("Mul", namer(f"{node.name}_mul"), (x, a), (scaled,)),
            Node("Add", node.name, (scaled, b), node.outputs)]
