"""QuantizeLinear/DequantizeLinear with a per-tensor scale of shape [1] and a scalar zero
point, as ``onnxruntime.quantization.quantize_static`` writes them (e.g. the bias of a
BatchNormalization it does not fold): Kiln reads [1] as per-tensor."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.quantize.helpers import ort_quantize
from toolchain.errors import ModelError
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.ir import Node, Value
from toolchain.graph.ops import get_op
from toolchain.graph.passes.quantize_ops import quantize_ops
from toolchain.graph.reference import run_graph


def _conv_bn_relu() -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in [
        ("w", rng.standard_normal((4, 3, 3, 3)) * 0.3), ("b", rng.standard_normal(4) * 0.1),
        ("gamma", rng.uniform(0.5, 1.5, 4)), ("beta", rng.standard_normal(4) * 0.2),
        ("mean", rng.standard_normal(4) * 0.1), ("var", rng.uniform(0.5, 2.0, 4))]]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"],
                              ["n"]),
             helper.make_node("Relu", ["n"], ["y"])]
    g = helper.make_graph(nodes, "conv_bn", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, 8, 8])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _shape1_dq(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    inits = {t.name: t for t in model.graph.initializer}
    return [n for n in model.graph.node if n.op_type == "DequantizeLinear"
            and list(inits[n.input[1]].dims) == [1] and len(n.input) > 2
            and list(inits[n.input[2]].dims) == []]


def test_onnxruntime_model_with_shape1_scale_matches_onnxruntime(tmp_path) -> None:
    import onnxruntime as ort

    rng = np.random.default_rng(5)
    samples = [{"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(4)]
    qdq = ort_quantize(_conv_bn_relu(), samples, str(tmp_path / "q.onnx"))
    assert _shape1_dq(qdq), "onnxruntime no longer writes a [1] scale with a scalar zero point"
    g = quantize_ops(from_onnx(qdq))  # refused before: "zero point shape [] must equal ..."
    assert "QConv" in {n.op for n in g.nodes}
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    want = ort.InferenceSession(qdq.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = run_graph(g, {"x": x})["y"]
    step = max(float(numpy_helper.to_array(t).reshape(-1)[0]) for t in qdq.graph.initializer
               if t.name.startswith("y") and "scale" in t.name)
    assert np.abs(got - want).max() <= 1.001 * step


@pytest.mark.parametrize("op", ["QuantizeLinear", "DequantizeLinear"])
def test_shape1_scale_scalar_zero_point_is_per_tensor(op: str) -> None:
    xdt = "float32" if op == "QuantizeLinear" else "int8"
    x = Value("x", (2, 3), xdt)
    s = Value.constant("s", np.array([0.5], np.float32))
    z = Value.constant("z", np.array(3, np.int8))
    node = Node(op, "q", [x, s, z], [Value("y", (2, 3), "int8" if xdt == "float32" else
                                            "float32")])
    assert get_op(op).infer(node)[0].shape == (2, 3)
    data = np.arange(6).reshape(2, 3).astype(xdt)
    got = get_op(op).reference([data, s.data, z.data], {})[0]
    want = get_op(op).reference([data, np.float32(0.5), np.int8(3)], {})[0]
    np.testing.assert_array_equal(got, want)


def test_zero_point_of_other_shape_still_refused() -> None:
    x = Value("x", (2, 3), "int8")
    node = Node("DequantizeLinear", "dq", [x, Value.constant("s", np.array([0.5], np.float32)),
                                            Value.constant("z", np.array([1, 2], np.int8))],
                [Value("y", (2, 3), "float32")])
    with pytest.raises(ModelError, match=r"'dq'.*zero point shape \[2\] must equal the scale "
                                         r"shape \[1\]"):
        get_op("DequantizeLinear").infer(node)
