"""Small models using these ops, imported by the ONNX frontend and run by the numpy
reference executor, against onnxruntime — including opset-11 forms the frontend upgrades."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolchain.frontend.onnx import from_onnx
from toolchain.graph.reference import run_graph

from ._helpers import rand


def _init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def _compare(model, feeds, rtol=1e-4, atol=1e-5):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = sess.run(None, feeds)
    got = run_graph(from_onnx(model), feeds)
    for out, e in zip(model.graph.output, expected, strict=True):
        g = got[out.name]
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)


def test_small_cnn():
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c1", "s", "bb", "m", "v"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["r"]),
        helper.make_node("Conv", ["r", "wd"], ["dw"], group=8, pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["dw"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Resize", ["p", "", "sc"], ["up"], mode="linear"),
        helper.make_node("GlobalAveragePool", ["up"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fcb"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["y"]),
    ]
    inits = [
        _init("w1", rand(8, 3, 3, 3, seed=1)), _init("b1", rand(8, seed=2)),
        _init("s", rand(8, seed=3)), _init("bb", rand(8, seed=4)), _init("m", rand(8, seed=5)),
        _init("v", np.abs(rand(8, seed=6)) + 0.5), _init("wd", rand(8, 1, 3, 3, seed=7)),
        _init("sc", np.array([1, 1, 2, 2], np.float32)), _init("fc", rand(10, 8, seed=8)),
        _init("fcb", rand(10, seed=9)),
    ]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    _compare(model, {"x": rand(2, 3, 16, 16)})


@pytest.mark.parametrize("axis", [1, 2, -1])
def test_opset11_softmax_split_squeeze_forms(axis):
    nodes = [
        helper.make_node("Softmax", ["x"], ["s"], axis=axis),
        helper.make_node("Split", ["s"], ["a", "b"], axis=3, split=[2, 3]),
        helper.make_node("Split", ["x"], ["c", "d", "e"], axis=2),
        helper.make_node("Unsqueeze", ["c"], ["cu"], axes=[0]),
        helper.make_node("Squeeze", ["cu"], ["cs"], axes=[0, 3]),
        helper.make_node("Pad", ["b", "pads", "cv"], ["pb"], mode="constant"),
        helper.make_node("Slice", ["pb", "st", "en", "ax", "sp"], ["sl"]),
        helper.make_node("LogSoftmax", ["sl"], ["y"]),
    ]
    inits = [_init("pads", np.array([0, 0, 1, 0, 0, 0, 0, 2], np.int64)),
             _init("cv", np.array(1.5, np.float32)),
             _init("st", np.array([-1, 0], np.int64)), _init("en", np.array([-100, 4], np.int64)),
             _init("ax", np.array([3, 2], np.int64)), _init("sp", np.array([-2, 2], np.int64))]
    graph = helper.make_graph(
        nodes, "legacy", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 3, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 2, 3]),
         helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3, 3, 2]),
         helper.make_tensor_value_info("cs", TensorProto.FLOAT, [2, 3, 5]),
         helper.make_tensor_value_info("e", TensorProto.FLOAT, [2, 3, 1, 5])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 7
    _compare(model, {"x": rand(2, 3, 3, 5)})
