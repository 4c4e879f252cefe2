"""Unregistered ONNX function ops are expanded into their (registered) definitions."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.frontend.helpers import make_model, run_onnxruntime
from toolchain.errors import ModelError, UnsupportedError
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.reference import run_graph

F = TensorProto.FLOAT
X = np.random.default_rng(4).standard_normal((2, 4, 3, 3)).astype(np.float32)


def _model(node, opset, inits=None):
    return make_model([node], [("x", F, list(X.shape))], [("y", F, list(X.shape))],
                      inits or {}, opset=opset)


@pytest.mark.parametrize(("node", "opset", "inits"), [
    (helper.make_node("Swish", ["x"], ["y"], alpha=0.7), 24, None),
    (helper.make_node("MeanVarianceNormalization", ["x"], ["y"]), 13, None),
    (helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2), 21,
     {"s": np.array([1.5, 0.5, 1.0, 2.0], np.float32), "b": np.arange(4, dtype=np.float32)}),
], ids=["Swish", "MeanVarianceNormalization", "GroupNormalization"])
def test_function_op_matches_onnxruntime(node, opset, inits):
    model = _model(node, opset, inits)
    graph = from_onnx(model)
    assert node.op_type not in {n.op for n in graph.nodes}
    got = run_graph(graph, {"x": X})["y"]
    np.testing.assert_allclose(got, run_onnxruntime(model, {"x": X})["y"], rtol=1e-5,
                               atol=1e-5)


def test_context_dependent_function_is_built_from_input_types():
    node = helper.make_node("CastLike", ["x", "t"], ["y"])
    model = make_model([node], [("x", F, [3])], [("y", TensorProto.INT64, [3])],
                       {"t": np.zeros(1, np.int64)}, opset=21)
    graph = from_onnx(model)
    assert [(n.op, n.attrs.get("to")) for n in graph.nodes] == [("Cast", 7)]


def test_function_op_with_unregistered_body_ops_is_reported_as_itself():
    # Bernoulli's body draws with RandomUniformLike: the node is refused as a Bernoulli
    node = helper.make_node("Bernoulli", ["p"], ["y"], name="b1")
    model = make_model([node], [("p", F, [8])], [("y", F, [8])], {}, opset=22)
    with pytest.raises(UnsupportedError, match=r"Bernoulli: Bernoulli draws random numbers.*"
                                               r"— at node 'b1' \(opset 22\)"):
        from_onnx(model)


def test_window_with_a_run_time_size_is_refused_naming_the_input():
    """A window's size gives its output shape: a model input there is refused, with how to
    make it a constant (a constant one folds)."""
    node = helper.make_node("HannWindow", ["size"], ["y"], name="hw")
    model = make_model([node], [("size", TensorProto.INT64, [])], [("y", F, [8])], {},
                       opset=20)
    with pytest.raises(ModelError, match=r"node 'hw' \(HannWindow\): input 0 \(size, value "
                                         r"'size'\) must be known at compile time.*'size' is "
                                         r"itself an input of the model"):
        from_onnx(model)
    folded = make_model([node], [], [("y", F, [8])], {"size": np.array(8, np.int64)},
                        opset=20)
    g = from_onnx(folded)
    assert not g.nodes
    np.testing.assert_allclose(g.outputs[0].data, np.hanning(9)[:8], atol=1e-7)
