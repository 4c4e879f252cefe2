"""Small int8 (QDQ) models for the accelerator bundle tests, built and quantized here."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _const(name: str, a: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(a.astype(np.float32), name)


def small_cnn(ic: int = 3, mid: int = 32, hw: int = 8, classes: int = 10,
              seed: int = 0) -> onnx.ModelProto:
    """conv (ic -> mid) -> relu -> conv (mid -> mid) -> relu -> maxpool -> flatten -> gemm."""
    rng = np.random.default_rng(seed)
    flat = mid * (hw // 2) ** 2
    inits = [_const("w1", rng.standard_normal((mid, ic, 3, 3)) * 0.3),
             _const("b1", rng.standard_normal(mid) * 0.1),
             _const("w2", rng.standard_normal((mid, mid, 3, 3)) * 0.1),
             _const("b2", rng.standard_normal(mid) * 0.1),
             _const("wf", rng.standard_normal((classes, flat)) * 0.05),
             _const("bf", rng.standard_normal(classes) * 0.1)]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1] * 4),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("MaxPool", ["r2"], ["p"], name="pool", kernel_shape=[2, 2],
                              strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], name="fc", transB=1)]
    g = helper.make_graph(
        nodes, "small_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, ic, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, classes])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def small_mlp(m: int = 4, k: int = 64, n: int = 48, seed: int = 0) -> onnx.ModelProto:
    """gemm (k -> n) -> relu -> gemm (n -> 10) on ``m`` rows."""
    rng = np.random.default_rng(seed)
    inits = [_const("w1", rng.standard_normal((k, n)) * 0.2),
             _const("b1", rng.standard_normal(n)),
             _const("w2", rng.standard_normal((n, 10)) * 0.2),
             _const("b2", rng.standard_normal(10))]
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="fc1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["y"], name="fc2")]
    g = helper.make_graph(
        nodes, "small_mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, 10])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def quantized(model: onnx.ModelProto, samples: int = 8, seed: int = 1) -> onnx.ModelProto:
    """``model`` through Kiln's post-training quantization (QDQ, int8 activations)."""
    from toolchain.frontend.onnx import from_onnx
    from toolchain.quantize.ptq import quantize_model

    rng = np.random.default_rng(seed)
    cal = {v.name: rng.standard_normal((samples, *v.shape)).astype(np.float32)
           for v in from_onnx(model).inputs}
    return quantize_model(model, cal)[0]


def assert_cnn_bundle_bit_exact(pkg, q: onnx.ModelProto, seeds: tuple[int, ...] = (5, 6)
                                ) -> None:
    """The bundle ``pkg`` of :func:`small_cnn` quantized as ``q`` gives exactly the integer
    reference's outputs (``quantize_ops`` of the imported graph) on random inputs."""
    import toolchain
    from toolchain.frontend.onnx import from_onnx
    from toolchain.graph.passes.quantize_ops import quantize_ops
    from toolchain.graph.reference import run_graph

    ref = quantize_ops(from_onnx(q))
    for seed in seeds:
        x = {"x": np.random.default_rng(seed).standard_normal((1, 3, 8, 8)).astype(np.float32)}
        got, want = toolchain.run(pkg, x).outputs, run_graph(ref, x)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])
