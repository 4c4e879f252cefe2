"""Small ONNX models built with ``onnx.helper`` for the frontend, CLI and bad-input tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def make_model(nodes: Sequence[onnx.NodeProto], inputs, outputs, initializers=(),
               opset: int = 17, name: str = "g") -> onnx.ModelProto:
    """A model from nodes; ``inputs``/``outputs`` are ``(name, elem_type, shape)`` tuples
    and ``initializers`` numpy arrays by name (a dict)."""
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in dict(initializers).items()]
    graph = helper.make_graph(
        list(nodes), name,
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 10)  # onnxruntime reads IR <= 10
    return model


def relu_model(shape=(2, 3), opset: int = 17) -> onnx.ModelProto:
    """y = Relu(x)."""
    return make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                      [("x", TensorProto.FLOAT, list(shape))],
                      [("y", TensorProto.FLOAT, list(shape))], opset=opset)


def tiny_cnn(batch="N", seed: int = 0) -> onnx.ModelProto:
    """Conv -> Relu -> MaxPool -> PyTorch-style flatten (Shape/Gather/Unsqueeze/Concat/
    Reshape) -> MatMul -> Softmax, with a dynamic batch by default."""
    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["c"], pads=[1, 1, 1, 1],
                         name="conv"),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2],
                         name="pool"),
        helper.make_node("Shape", ["p"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["shp"], axis=0),
        helper.make_node("Reshape", ["p", "shp"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "fc.w"], ["logits"], name="fc"),
        helper.make_node("Softmax", ["logits"], ["prob"], axis=-1, name="softmax"),
    ]
    inits = {
        "conv.w": rng.standard_normal((8, 3, 3, 3)).astype(np.float32),
        "conv.b": rng.standard_normal(8).astype(np.float32),
        "fc.w": (rng.standard_normal((128, 10)) * 0.1).astype(np.float32),
        "zero": np.array(0, np.int64), "ax0": np.array([0], np.int64),
        "minus1": np.array([-1], np.int64),
    }
    return make_model(nodes, [("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
                      [("prob", TensorProto.FLOAT, [batch, 10])], inits, name="tiny_cnn")


def save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


def run_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict:
    """Outputs of onnxruntime (the second opinion) by name."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds), strict=True))
