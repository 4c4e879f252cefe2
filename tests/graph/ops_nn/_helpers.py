"""Shared test helpers: one-node ONNX models run by onnxruntime vs Kiln's infer/reference."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from toolchain.graph.ir import Node, Value
from toolchain.graph.ops import get_op

OPSET = 21


def make_node(op: str, inputs: Sequence[np.ndarray | None], attrs: Mapping[str, Any],
              *, const: Sequence[int] = (), n_out: int = 1, name: str = "n0") -> Node:
    """A Kiln node over ``inputs`` (indices in ``const`` become constants)."""
    vals: list[Value | None] = []
    for i, a in enumerate(inputs):
        if a is None:
            vals.append(None)
        elif i in const:
            vals.append(Value.constant(f"in{i}", a))
        else:
            vals.append(Value(f"in{i}", a.shape, str(a.dtype)))
    outs = tuple(Value(f"out{i}", (), "float32") for i in range(n_out))
    return Node(op, name, vals, outs, dict(attrs))


def run_ort(op: str, inputs: Sequence[np.ndarray | None], attrs: Mapping[str, Any],
            *, const: Sequence[int] = (), n_out: int = 1, opset: int = OPSET,
            out_names: Sequence[str] | None = None) -> list[np.ndarray]:
    """Run a one-node ONNX model with onnxruntime (``const`` inputs become initializers)."""
    names, graph_inputs, inits, feeds = [], [], [], {}
    for i, a in enumerate(inputs):
        if a is None:
            names.append("")
            continue
        nm = f"in{i}"
        names.append(nm)
        if i in const:
            inits.append(onnx.numpy_helper.from_array(a, nm))
        else:
            elem = helper.np_dtype_to_tensor_dtype(a.dtype)
            graph_inputs.append(helper.make_tensor_value_info(nm, elem, a.shape))
            feeds[nm] = a
    while names and names[-1] == "":
        names.pop()  # onnxruntime mishandles trailing absent inputs of some kernels
    outs = list(out_names or [f"out{i}" for i in range(n_out)])
    node = helper.make_node(op, names, outs, **dict(attrs))
    graph = helper.make_graph(
        [node], "g", graph_inputs,
        [helper.make_empty_tensor_value_info(o) for o in outs if o], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run([o for o in outs if o], feeds)


def check_op(op: str, inputs: Sequence[np.ndarray | None], attrs: Mapping[str, Any] | None = None,
             *, const: Sequence[int] = (), n_out: int = 1, rtol: float = 1e-5,
             atol: float = 1e-5, opset: int = OPSET) -> list[np.ndarray]:
    """Compare Kiln's shape rule and reference against onnxruntime; returns Kiln's outputs."""
    attrs = dict(attrs or {})
    expected = run_ort(op, inputs, attrs, const=const, n_out=n_out, opset=opset)
    node = make_node(op, inputs, attrs, const=const, n_out=n_out)
    opdef = get_op(op)
    types = opdef.infer(node)
    got = list(opdef.reference(list(inputs), attrs))[:n_out]
    assert len(got) == len(expected)
    for t, g, e in zip(types, got, expected, strict=False):
        assert tuple(t.shape) == e.shape, (op, t.shape, e.shape)
        assert t.dtype == str(e.dtype), (op, t.dtype, e.dtype)
        assert g.shape == e.shape and g.dtype == e.dtype, (op, g.shape, g.dtype, e.shape, e.dtype)
        np.testing.assert_allclose(g.astype(np.float64) if g.dtype != bool else g,
                                   e.astype(np.float64) if e.dtype != bool else e,
                                   rtol=rtol, atol=atol)
    return got


def rand(*shape: int, dtype: Any = np.float32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)
