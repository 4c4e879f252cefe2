"""Q/DQ insertion (``toolchain.quantize.qdq``) on the shapes a Gemm's ``C`` may take: a
bias per output channel (one value broadcast, a vector, a ``1 x N`` row) is quantized to
int32; a whole ``M x N`` matrix or an ``M x 1`` column is no per-channel bias and stays
float. Either way the quantized model computes what the float one does (within the int8
rounding) and its bundle equals the integer reference bit for bit."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.fuzz.oracle import check_int8, run_ort
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.passes.quantize_ops import quantize_ops
from toolchain.quantize.ptq import quantize_model

M, K, N = 4, 6, 5


def _gemm(c_shape: tuple[int, ...], alpha: float) -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    w = rng.standard_normal((N, K)).astype(np.float32)
    c = (rng.standard_normal(c_shape) + 0.5).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "c"], ["y"], transB=1, alpha=alpha)], "gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [M, K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [M, N])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(c, "c")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("alpha", [1.0, 0.5])
@pytest.mark.parametrize("c_shape, per_channel", [
    ((), True), ((1,), True), ((N,), True), ((1, N), True), ((M, N), False), ((M, 1), False)])
def test_gemm_bias_of_every_broadcast_shape(c_shape, per_channel, alpha) -> None:
    model = _gemm(c_shape, alpha)
    cal = np.random.default_rng(0).standard_normal((8, M, K)).astype(np.float32)
    x = {"x": cal[0]}  # inside the calibrated ranges: no output is clipped
    qdq, _ = quantize_model(model, {"x": cal})
    biases = [n for n in qdq.graph.node if n.op_type == "DequantizeLinear"
              and n.input[0] == "c_quantized"]
    assert bool(biases) == per_channel
    want, got = run_ort(model, x)["y"], run_ort(qdq, x)["y"]
    assert np.abs(got - want).max() <= 0.05 * np.abs(want).max()
    if alpha == 1.0:  # an integer kernel where the bias is per channel, else float
        ops = {n.op for n in quantize_ops(from_onnx(qdq)).nodes}
        assert ("QGemm" in ops) == per_channel
    assert check_int8(model, x, ("c-generic",)) == []


def test_a_column_bias_of_a_square_gemm_is_not_read_per_output() -> None:
    """M = N: a ``C`` of shape ``(M, 1)`` (one bias per row) has as many values as there
    are output channels; read as a per-channel bias it was broadcast across the columns
    instead, a silently wrong quantized model (error 6.6 on outputs up to 8.9)."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((5, 5)).astype(np.float32)
    c = (3 * rng.standard_normal((5, 1))).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "c"], ["y"], transB=1)], "square",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 5])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(c, "c")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    cal = np.random.default_rng(0).standard_normal((8, 5, 5)).astype(np.float32)
    qdq, _ = quantize_model(model, {"x": cal})
    want, got = run_ort(model, {"x": cal[0]})["y"], run_ort(qdq, {"x": cal[0]})["y"]
    assert np.abs(got - want).max() <= 0.02 * np.abs(want).max()
