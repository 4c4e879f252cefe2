"""Helpers for op tests: build one-node Kiln nodes and one-node ONNX models (onnxruntime).

    >>> y, = ref("Relu", [np.array([-1.0, 2.0], np.float32)])
    >>> ort("Relu", [np.array([-1.0, 2.0], np.float32)])[0].tolist() == y.tolist()
    True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnxruntime
from onnx import helper, numpy_helper

from toolchain.graph.ir import Node, TensorType, Value, dtype_of
from toolchain.graph.ops import get_op
from toolchain.graph.ops.common import KILN_TO_ONNX

Arrays = Sequence[np.ndarray | None]

#: the data of :func:`data`; reseeded from each test's id by ``tests/conftest.py``
RNG = np.random.default_rng(0)


def data(dtype: str, shape: Sequence[int] = (3, 4), *, positive: bool = False,
         nonzero: bool = False, seed: int | None = None) -> np.ndarray:
    """Random test data of a Kiln dtype: normal*3 for floats, small ints, random bools."""
    rng = RNG if seed is None else np.random.default_rng(seed)
    shape = tuple(shape)
    if dtype == "bool":
        return rng.random(shape) > 0.5
    if dtype.startswith("float"):
        x = rng.standard_normal(shape) * 3
        x = np.abs(x) + 0.1 if positive else x
        return x.astype(dtype)
    info = np.iinfo(dtype)
    lo = 1 if positive else max(int(info.min), -50)
    x = rng.integers(lo, min(int(info.max), 50), shape, endpoint=True).astype(dtype)
    if nonzero:
        x[x == 0] = 1
    return x


def make_node(
    op: str, inputs: Arrays | Sequence[Value | None], attrs: Mapping[str, Any] | None = None,
    *, const: Sequence[int] = (), n_outputs: int = 1, name: str = "n",
) -> Node:
    """A node over ``inputs``; arrays become runtime inputs unless their index is in
    ``const``; Values are used as they are.  Outputs are placeholders (see :func:`infer`)."""
    values: list[Value | None] = []
    for i, a in enumerate(inputs):
        if a is None or isinstance(a, Value):
            values.append(a)
        elif i in const:
            values.append(Value.constant(f"in{i}", np.asarray(a)))
        else:
            arr = np.asarray(a)
            values.append(Value(f"in{i}", arr.shape, dtype_of(arr)))
    outs = [Value(f"out{k}", (), "float32") for k in range(n_outputs)]
    return Node(op, name, values, outs, dict(attrs or {}))


def infer(op: str, inputs: Arrays | Sequence[Value | None], attrs: Mapping[str, Any] | None = None,
          **kw: Any) -> list[TensorType]:
    """Inferred output types of a one-node graph."""
    node = make_node(op, inputs, attrs, **kw)
    return list(get_op(op).infer(node))


def ref(op: str, inputs: Arrays, attrs: Mapping[str, Any] | None = None) -> list[np.ndarray]:
    """The Kiln numpy reference."""
    return list(get_op(op).reference(list(inputs), dict(attrs or {})))


def ort(
    op: str, inputs: Arrays, attrs: Mapping[str, Any] | None = None, *,
    const: Sequence[int] = (), n_outputs: int = 1, opset: int = 21,
    out_dtypes: Sequence[str] | None = None,
) -> list[np.ndarray]:
    """Run a one-node ONNX model in onnxruntime (CPU).  Inputs in ``const`` are initializers.

    Where onnxruntime has no CPU kernel for the dtypes, ``onnx.reference`` runs it instead.

    Output dtypes default to Kiln's inferred ones (ORT checks them against its own rule)."""
    if out_dtypes is None:
        out_dtypes = [t.dtype for t in infer(op, inputs, attrs, const=const,
                                             n_outputs=n_outputs)]
    names, graph_inputs, inits, feeds = [], [], [], {}
    for i, a in enumerate(inputs):
        if a is None:
            names.append("")
            continue
        arr = np.asarray(a)
        names.append(f"in{i}")
        if i in const:
            inits.append(numpy_helper.from_array(arr, f"in{i}"))
        else:
            graph_inputs.append(helper.make_tensor_value_info(
                f"in{i}", KILN_TO_ONNX[dtype_of(arr)], list(arr.shape)))
            feeds[f"in{i}"] = arr
    outs = [f"out{k}" for k in range(n_outputs)]
    node = helper.make_node(op, names, outs, **dict(attrs or {}))
    graph = helper.make_graph(
        [node], "one", graph_inputs,
        [helper.make_tensor_value_info(o, KILN_TO_ONNX[d], None)
         for o, d in zip(outs, out_dtypes, strict=True)],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    try:
        sess = onnxruntime.InferenceSession(model.SerializeToString(),
                                            providers=["CPUExecutionProvider"])
    except onnxruntime.capi.onnxruntime_pybind11_state.NotImplemented:
        # No CPU kernel for this dtype: the ONNX reference evaluator is the second opinion.
        from onnx.reference import ReferenceEvaluator

        return [np.asarray(r) for r in ReferenceEvaluator(model).run(None, feeds)]
    return [np.asarray(r) for r in sess.run(None, feeds)]


def check_vs_ort(
    op: str, inputs: Arrays, attrs: Mapping[str, Any] | None = None, *,
    const: Sequence[int] = (), n_outputs: int = 1, opset: int = 21,
    rtol: float = 1e-6, atol: float = 0.0,
) -> list[np.ndarray]:
    """Kiln's inferred types and reference must match onnxruntime (dtype exactly)."""
    types = infer(op, inputs, attrs, const=const, n_outputs=n_outputs)
    got = ref(op, inputs, attrs)[:n_outputs]
    want = ort(op, inputs, attrs, const=const, n_outputs=n_outputs, opset=opset)
    for t, g, w in zip(types, got, want, strict=True):
        assert g.dtype == w.dtype, (op, g.dtype, w.dtype)
        assert t.dtype == dtype_of(w) and t.shape == w.shape, (op, t, w.shape)
        assert g.shape == w.shape, (op, g.shape, w.shape)
        if w.dtype.kind in "fc":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
        else:
            np.testing.assert_array_equal(g, w)
    return got
