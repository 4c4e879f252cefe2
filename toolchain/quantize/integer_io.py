"""Integer inputs and outputs for a QDQ graph (``quantize_model(..., integer_io=True)``).

A QDQ model from :func:`~toolchain.quantize.ptq.quantize_model` takes float inputs and
returns float outputs: its first node quantizes the input, its last ones dequantize. A
firmware whose sensor pipeline already delivers int8 (as the MLPerf Tiny int8 reference
models, and microTVM's workspaces measured on them, assume) wants the integer tensors
themselves. This rewrite makes

* a graph input ``x`` read by a per-tensor ``QuantizeLinear`` an int8 input named ``x``
  (the QuantizeLinear is dropped; float ops that read ``x`` read ``DequantizeLinear(x)``);
* a graph output ``y`` written by a per-tensor ``DequantizeLinear`` of an integer tensor
  that integer tensor, named ``y`` (the DequantizeLinear stays only for float ops that
  read it, e.g. a Softmax after the logits).

The scale and zero point of each rewritten input and output are returned (the caller must
quantize inputs with them: ``q = clip(round(x / scale) + zero_point)``) and
:func:`~toolchain.quantize.ptq.quantize_model` writes them into the ONNX model's
``metadata_props`` as ``kiln.io.<name>`` = ``"scale zero_point dtype"``.

Before / after (input ``x``, output ``y``)::

    x -> QuantizeLinear -> xq -> DQ -> Conv -> Q -> yq -> DequantizeLinear -> y
    x(int8) -> DQ -> Conv -> Q -> y(int8)

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ir import Graph, Node, Value
    >>> x, xq = Value("x", (4,), "float32"), Value("xq", (4,), "int8")
    >>> yq, y = Value("yq", (4,), "int8"), Value("y", (4,), "float32")
    >>> s, z = Value.constant("s", np.float32(0.5)), Value.constant("z", np.int8(0))
    >>> g = Graph("g", [x], [y], [Node("QuantizeLinear", "q", [x, s, z], [xq]),
    ...                           Node("MaxPool", "p", [xq], [yq], {"kernel_shape": (1,)}),
    ...                           Node("DequantizeLinear", "d", [yq, s, z], [y])])
    >>> h, io = integer_io(g)
    >>> [(v.name, v.dtype) for v in h.inputs + h.outputs], [n.op for n in h.nodes]
    ([('x', 'int8'), ('y', 'int8')], ['MaxPool'])
    >>> io["x"]
    (0.5, 0, 'int8')
"""

from __future__ import annotations

from toolchain.graph.ir import Graph, Node, Value

_INT = ("int8", "uint8")


def _params(node: Node) -> tuple[float, int] | None:
    """``(scale, zero point)`` of a per-tensor Q/DQ node with constant parameters."""
    s, z = node.input(1), node.input(2)
    if s is None or s.data is None or s.data.size != 1 or node.attrs.get("block_size", 0):
        return None
    if z is not None and (z.data is None or z.data.size != 1):
        return None
    return float(s.data.reshape(-1)[0]), 0 if z is None else int(z.data.reshape(-1)[0])


def integer_io(graph: Graph) -> tuple[Graph, dict[str, tuple[float, int, str]]]:
    """``graph`` with integer inputs/outputs where a Q/DQ pair allows (module docstring),
    and ``{name: (scale, zero_point, dtype)}`` of each input and output it rewrote."""
    consumers, producers = graph.consumers(), graph.producers()
    swap: dict[Value, Value] = {}  # old value -> value that replaces it everywhere
    drop: set[Node] = set()
    io: dict[str, tuple[float, int, str]] = {}
    inputs = list(graph.inputs)
    for i, x in enumerate(inputs):
        users = consumers.get(x, [])
        qs = [n for n in users if n.op == "QuantizeLinear" and n.inputs[0] is x]
        if len(qs) != 1 or x in graph.outputs or qs[0].outputs[0].dtype not in _INT:
            continue
        q = qs[0]
        p = _params(q)
        floats = [n for n in users if n is not q]
        dq = [n for n in consumers.get(q.outputs[0], []) if n.op == "DequantizeLinear"]
        if p is None or (floats and not dq):
            continue
        new = Value(x.name, x.shape, q.outputs[0].dtype)
        inputs[i] = new
        swap[q.outputs[0]] = new
        if floats:
            swap[x] = dq[0].outputs[0]  # float readers take DQ(x), as ONNX QDQ does
        drop.add(q)
        io[x.name] = (*p, new.dtype)
    outputs = list(graph.outputs)
    renamed: dict[Value, Value] = {}  # DQ output -> its float replacement for other readers
    for i, y in enumerate(outputs):
        d = producers.get(y)
        if d is None or d.op != "DequantizeLinear" or d.inputs[0] is None:
            continue
        src, p = d.inputs[0], _params(d)
        if p is None or src.dtype not in _INT or src in graph.inputs or src in graph.outputs \
                or sum(o is src for o in outputs) > 1:
            continue
        new = Value(y.name, y.shape, src.dtype)
        outputs[i] = new
        swap[src] = new
        if consumers.get(y):
            renamed[y] = Value(f"{y.name}_dequantized", y.shape, y.dtype)
        else:
            drop.add(d)
        io[y.name] = (*p, new.dtype)
    swap.update(renamed)

    def sub(v: Value | None) -> Value | None:
        return swap.get(v, v) if v is not None else None

    nodes = [n.replace(inputs=tuple(sub(v) for v in n.inputs),
                       outputs=tuple(sub(o) for o in n.outputs))
             for n in graph.nodes if n not in drop]
    return graph.replace(inputs=inputs, outputs=outputs, nodes=nodes), io
