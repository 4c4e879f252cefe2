"""``--precision fp16``: a float32 model computed with float16 tensors in memory.

:func:`to_fp16` rewrites a graph so that every float32 tensor between its inputs and its
outputs is float16: float32 constants (weights) are stored as float16, each float32 input
is converted once (``Cast`` to float16) where the model starts, each float32 output is
converted back (``Cast`` to float32) where it ends. The bundle's C API is unchanged (float32
in, float32 out); inside it, tensors take half the memory and the kernels read half the
bytes. The kernels compute in float32 on float16 storage
(:func:`~toolchain.tir.transform.legalize_f16.legalize_f16`: a load widens, a store rounds
once), so a reduction -- a GEMM, a convolution, a softmax's sum -- accumulates in float32;
on CUDA targets with tensor cores the GEMMs take ``wmma`` (float16 products, float32 sums:
``docs/cuda.md``).

Rules: a ``Cast`` to float32 inside the model casts to float16 instead; a float32
constant that an op takes only as float32 (Resize's ``scales`` and ``roi``) stays
float32; an op whose output is float32 whatever its inputs (``ConstantOfShape``, a
``Cast`` from an integer...) gets a ``Cast`` to float16 after it; integer and boolean
tensors are untouched. A finite constant
beyond float16's range (|x| > 65504: an attention mask's -1e9, say) is clamped to
±65504, not made infinite (an infinity times zero would be NaN).

Before / after::

    graph g(%x: float32[2, 3]) -> (%y: float32[2, 4]) {
      const %w: float32[3, 4]
      %y: float32[2, 4] = MatMul(%x, %w)  # mm
    }
    graph g(%x: float32[2, 3]) -> (%y: float32[2, 4]) {
      const %w: float16[3, 4]
      %x_fp16: float16[2, 3] = Cast(%x, to=10)  # x_to_fp16
      %y_fp16: float16[2, 4] = MatMul(%x_fp16, %w)  # mm
      %y: float32[2, 4] = Cast(%y_fp16, to=1)  # y_to_fp32
    }

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ir import Graph, Node, Value
    >>> x, y = Value("x", (2, 3), "float32"), Value("y", (2, 4), "float32")
    >>> w = Value.constant("w", np.ones((3, 4), np.float32))
    >>> g = to_fp16(Graph("g", [x], [y], [Node("MatMul", "mm", [x, w], [y])]))
    >>> [(n.op, n.outputs[0].dtype) for n in g.nodes]
    [('Cast', 'float16'), ('MatMul', 'float16'), ('Cast', 'float32')]
"""

from __future__ import annotations

import numpy as np

from toolchain.errors import ModelError
from toolchain.graph.ir import Graph, Node, Value
from toolchain.graph.ops.registry import get_op

#: ONNX TensorProto codes of the two types (Cast's ``to``)
ONNX_FLOAT, ONNX_FLOAT16 = 1, 10
#: the largest finite float16
FP16_MAX = 65504.0
#: what ``--precision`` accepts
PRECISIONS = ("fp32", "fp16")


def _half_constant(v: Value) -> Value:
    data = np.asarray(v.data, np.float32)
    finite = np.isfinite(data)
    data = np.where(finite, np.clip(data, -FP16_MAX, FP16_MAX), data)
    return Value.constant(v.name, data.astype(np.float16))


def to_fp16(graph: Graph) -> Graph:
    """``graph`` with float16 tensors inside and its float32 inputs and outputs kept (see
    the module docstring). A graph without float32 tensors is returned as it is."""
    names = {v.name for v in graph.values()}

    def fresh(base: str) -> str:
        name, k = base, 1
        while name in names:
            name, k = f"{base}_{k}", k + 1
        names.add(name)
        return name

    mapped: dict[Value, Value] = {}
    nodes: list[Node] = []
    for x in graph.inputs:
        if x.dtype == "float32":
            h = Value(fresh(f"{x.name}_fp16"), x.shape, "float16")
            nodes.append(Node("Cast", fresh(f"{x.name}_to_fp16"), [x], [h],
                              {"to": ONNX_FLOAT16}))
            mapped[x] = h
    changed = bool(mapped)

    def new_input(v: Value | None) -> Value | None:
        nonlocal changed
        if v is None or v in mapped:
            return mapped.get(v) if v is not None else None
        if v.is_constant and v.dtype == "float32":
            mapped[v] = _half_constant(v)
            changed = True
            return mapped[v]
        return v

    for node in graph.nodes:
        attrs = dict(node.attrs)
        if node.op == "Cast" and attrs.get("to") == ONNX_FLOAT:
            attrs["to"] = ONNX_FLOAT16
        ins = [new_input(v) for v in node.inputs]
        probe = node.replace(inputs=ins, attrs=attrs)
        try:
            types = get_op(node.op).infer(probe)
        except ModelError as err:
            # a float32 constant the op takes only as float32 (Resize's scales and roi)
            # stays float32
            kept = [v if v is not None and v.is_constant else w
                    for v, w in zip(node.inputs, ins, strict=True)]
            probe = node.replace(inputs=kept, attrs=attrs)
            try:
                types = get_op(node.op).infer(probe)
            except ModelError:
                raise ModelError(f"--precision fp16: {node.describe()} does not take its "
                                 f"float16 inputs ({err}); compile it with --precision fp32"
                                 ) from None
        outs, casts = [], []
        for o, t in zip(node.outputs, types, strict=True):
            if t.dtype == o.dtype and o.dtype != "float32":
                outs.append(o)
                continue
            changed = True
            if t.dtype == "float32":  # float32 whatever the inputs: rounded after the op
                wide = Value(fresh(f"{o.name}_fp32"), t.shape, "float32")
                h = Value(fresh(f"{o.name}_fp16"), t.shape, "float16")
                casts.append(Node("Cast", fresh(f"{o.name}_to_fp16"), [wide], [h],
                                  {"to": ONNX_FLOAT16}))
                outs.append(wide)
            else:
                h = Value(fresh(f"{o.name}_fp16"), t.shape, t.dtype)
                outs.append(h)
            mapped[o] = h
        nodes.append(probe.replace(outputs=outs))
        nodes.extend(casts)
    if not changed:
        return graph
    for y in graph.outputs:
        h = mapped.get(y)
        if h is None or y in graph.inputs:
            continue
        if h.dtype == y.dtype:  # an output of an op whose type does not follow its inputs
            nodes = [n.replace(outputs=[y if o is h else o for o in n.outputs]) for n in nodes]
            continue
        nodes.append(Node("Cast", fresh(f"{y.name}_to_fp32"), [h], [y], {"to": ONNX_FLOAT}))
    return graph.replace(nodes=nodes)


__all__ = ["PRECISIONS", "to_fp16"]
