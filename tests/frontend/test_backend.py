"""The Kiln ONNX backend: runtime shape operands are bound, results match onnxruntime."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from tests.frontend.helpers import make_model, run_onnxruntime
from toolchain.frontend.backend import KilnBackend, static_operand_inputs

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _slice_model():
    nodes = [helper.make_node("Slice", ["x", "starts", "ends"], ["s"]),
             helper.make_node("Mul", ["s", "k"], ["y"])]
    return make_model(nodes, [("x", F, [4, 6]), ("starts", I64, [2]), ("ends", I64, [2]),
                              ("k", F, [1])], [("y", F, [2, 3])])


def test_static_operands_are_found():
    assert static_operand_inputs(_slice_model()) == {"starts", "ends"}


def test_runtime_operands_are_bound_and_data_inputs_stay_inputs():
    model = _slice_model()
    rep = KilnBackend.prepare(model)
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    feeds = {"x": x, "starts": np.array([1, 2], np.int64), "ends": np.array([3, 5], np.int64),
             "k": np.array([2.0], np.float32)}
    (y,) = rep.run([feeds[n] for n in ("x", "starts", "ends", "k")])
    np.testing.assert_array_equal(y, run_onnxruntime(model, feeds)["y"])
    graph, bound = rep.graph_for(feeds)
    assert bound == {"starts", "ends"}
    assert [v.name for v in graph.inputs] == ["x", "k"]


def test_new_operand_values_give_a_new_graph():
    rep = KilnBackend.prepare(_slice_model())
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    k = np.ones(1, np.float32)
    a = rep.run([x, np.array([0, 0]), np.array([2, 3]), k])[0]
    b = rep.run([x, np.array([1, 1]), np.array([3, 4]), k])[0]
    np.testing.assert_array_equal(a, x[0:2, 0:3])
    np.testing.assert_array_equal(b, x[1:3, 1:4])


def test_run_model_accepts_a_dict():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [3])],
                       [("y", F, [3])])
    (y,) = KilnBackend.run_model(model, {"x": np.array([-1, 0, 1], np.float32)})
    assert y.tolist() == [0, 0, 1]
    assert KilnBackend.supports_device("CPU") and not KilnBackend.supports_device("CUDA")
