"""QuantizeLinear with a float32 scale runs in single precision (Cortex-M FPUs have no double)
and still gives onnxruntime's integers, saturation and ties included."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolchain.bundle import compile_model, load_bundle


@pytest.mark.parametrize("dtype", [TensorProto.INT8, TensorProto.UINT8])
def test_quantize_linear_float32_is_exact_and_double_free(tmp_path, dtype):
    zp = 3 if dtype == TensorProto.INT8 else 131
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])]
    inits = [numpy_helper.from_array(np.array(0.0625, np.float32), "s"),
             numpy_helper.from_array(np.array(zp, np.int8 if dtype == TensorProto.INT8
                                              else np.uint8), "z")]
    graph = helper.make_graph(nodes, "q", [helper.make_tensor_value_info("x", 1, [64])],
                              [helper.make_tensor_value_info("y", dtype, [64])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    path = tmp_path / "q.onnx"
    onnx.save(model, path)
    # ties (k + 0.5 steps), values near and far past saturation, huge, inf, denormal
    x = np.array([0.03125, 0.09375, -0.03125, -0.09375, 7.96875, 8.0, -8.0, -8.03125,
                  1e20, -1e20, 3e38, -3e38, np.inf, -np.inf, 1e-40, -1e-40,
                  16777216.0, 16777217.0, -16777216.0, 0.0], np.float32)
    x = np.concatenate([x, np.random.default_rng(0).uniform(-12, 12, 64 - x.size)
                        .astype(np.float32)])
    out = compile_model(path, "c-generic", tmp_path / "b", name="q")
    got = load_bundle(out)({"x": x})["y"]
    want = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)
    assert "double" not in (out / "src" / "kernels.c").read_text()
