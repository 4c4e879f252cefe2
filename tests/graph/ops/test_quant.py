"""QuantizeLinear / DequantizeLinear: per-tensor, per-axis and blocked, against onnxruntime;
rounding, saturation, output dtypes and errors."""

from __future__ import annotations

import numpy as np
import pytest

from tests.graph.ops.util import check_vs_ort, data, infer, make_node, ref
from toolchain.errors import ModelError
from toolchain.graph.ir import TensorType, Value
from toolchain.graph.ops import PatternKind, get_op
from toolchain.graph.ops.common import KILN_TO_ONNX

QTYPES = ["int8", "uint8", "int16", "uint16"]


def _x(shape=(2, 3, 4), scale=40.0):
    return (np.random.default_rng(5).standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize("zp_dtype", QTYPES + [None])
def test_quantize_per_tensor_matches_onnxruntime(zp_dtype):
    x = _x(scale=400.0 if zp_dtype and "16" in zp_dtype else 40.0)
    scale = np.array(0.5, np.float32)
    ins = [x, scale] if zp_dtype is None else [x, scale, np.array(3, zp_dtype)]
    (y,) = check_vs_ort("QuantizeLinear", ins, const=[1, 2])
    assert y.dtype == np.dtype(zp_dtype or "uint8")


def test_quantize_rounds_half_to_even_and_saturates():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 1000.0, -1000.0, 126.5], np.float32)
    (y,) = check_vs_ort("QuantizeLinear", [x, np.array(1.0, np.float32),
                                           np.array(0, np.int8)], const=[1, 2])
    assert y.tolist() == [0, 2, 2, 0, -2, -2, 127, -128, 126]
    (u,) = check_vs_ort("QuantizeLinear", [x, np.array(2.0, np.float32),
                                           np.array(128, np.uint8)], const=[1, 2])
    assert u.tolist() == [128, 129, 129, 128, 127, 127, 255, 0, 191]


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("zp_dtype", ["int8", "uint8"])
def test_quantize_per_axis_matches_onnxruntime(axis, zp_dtype):
    x = _x()
    n = x.shape[axis]
    scale = np.linspace(0.2, 1.0, n).astype(np.float32)
    zp = np.arange(n).astype(zp_dtype)
    check_vs_ort("QuantizeLinear", [x, scale, zp], {"axis": axis}, const=[1, 2])
    check_vs_ort("DequantizeLinear", [data(zp_dtype, x.shape), scale, zp], {"axis": axis},
                 const=[1, 2])


@pytest.mark.parametrize("shape, axis, block", [((4, 6), 1, 2), ((5, 4), 0, 2), ((3, 7), 1, 3)])
def test_blocked_quantization_matches_onnxruntime(shape, axis, block):
    x = _x(shape)
    sshape = list(shape)
    sshape[axis] = -(-shape[axis] // block)
    scale = np.random.default_rng(1).uniform(0.2, 1.0, sshape).astype(np.float32)
    zp = np.random.default_rng(2).integers(-3, 3, sshape).astype(np.int8)
    attrs = {"axis": axis, "block_size": block}
    (q,) = check_vs_ort("QuantizeLinear", [x, scale, zp], attrs, const=[1, 2])
    check_vs_ort("DequantizeLinear", [q, scale, zp], attrs, const=[1, 2])
    # blocked == per-element scale repeated block_size times along the axis
    full = np.repeat(scale, block, axis=axis).take(range(shape[axis]), axis=axis)
    zfull = np.repeat(zp, block, axis=axis).take(range(shape[axis]), axis=axis)
    want = np.clip(np.rint(x / full) + zfull, -128, 127).astype(np.int8)
    np.testing.assert_array_equal(q, want)


def test_quantize_float16_and_output_dtype():
    x = _x((3, 4)).astype(np.float16)
    check_vs_ort("QuantizeLinear", [x, np.array(0.5, np.float16), np.array(1, np.int8)],
                 const=[1, 2])
    (y,) = check_vs_ort("QuantizeLinear", [_x((3, 4)), np.array(0.5, np.float32)],
                        {"output_dtype": KILN_TO_ONNX["int8"]}, const=[1], opset=23)
    assert y.dtype == np.int8
    assert infer("QuantizeLinear", [x, np.array(0.5, np.float16)]) == [
        TensorType((3, 4), "uint8")]


@pytest.mark.parametrize("xt", QTYPES + ["int32"])
def test_dequantize_per_tensor_matches_onnxruntime(xt):
    x = data(xt, (3, 5))
    ins = [x, np.array(0.25, np.float32)]
    if xt != "int32":
        ins.append(np.array(2, xt))
    (y,) = check_vs_ort("DequantizeLinear", ins, const=[1, 2])
    assert y.dtype == np.float32


def test_dequantize_output_dtypes():
    x = data("int8", (2, 3))
    (h,) = check_vs_ort("DequantizeLinear", [x, np.array(0.5, np.float16), np.array(1, np.int8)],
                        const=[1, 2], rtol=1e-3)
    assert h.dtype == np.float16
    (f,) = check_vs_ort("DequantizeLinear", [x, np.array(0.5, np.float32)],
                        {"output_dtype": 10}, const=[1], opset=23, rtol=1e-3)
    assert f.dtype == np.float16


def test_quantize_dequantize_round_trip_error_is_half_a_step():
    x = np.random.default_rng(0).uniform(-1, 1, 1000).astype(np.float32)
    s = np.array(2 / 255, np.float32)
    (q,) = ref("QuantizeLinear", [x, s, np.array(0, np.int8)], {})
    (d,) = ref("DequantizeLinear", [q, s, np.array(0, np.int8)], {})
    assert np.abs(d - x).max() <= s / 2 + 1e-7


# -- errors ---------------------------------------------------------------------------------

def _infer_error(op, ins, attrs=None, const=(1, 2)):
    node = make_node(op, ins, attrs, const=const, name="q1")
    with pytest.raises(ModelError) as info:
        get_op(op).infer(node)
    msg = str(info.value)
    assert msg.startswith(f"node 'q1' ({op}): "), msg
    return msg


def test_quant_shape_errors():
    x = _x((2, 3, 4))
    msg = _infer_error("QuantizeLinear", [x, np.ones(4, np.float32)])
    assert "per-axis scale must have shape [3]" in msg and "axis 1" in msg
    msg = _infer_error("QuantizeLinear", [x, np.ones(3, np.float32), np.zeros(2, np.int8)])
    assert "zero point shape [2] must equal the scale shape [3]" in msg
    msg = _infer_error("DequantizeLinear", [data("int8", (4, 6)), np.ones((4, 2), np.float32)],
                       {"axis": 1, "block_size": 2})
    assert "block_size 2 on axis 1 the scale must have shape [4, 3]" in msg
    msg = _infer_error("QuantizeLinear", [x, np.ones(3, np.float32)], {"axis": 5})
    assert "attribute 'axis' 5 is out of range" in msg


def test_quant_attribute_and_dtype_errors():
    x = _x((2, 3))
    s = np.array(1.0, np.float32)
    msg = _infer_error("QuantizeLinear", [x, s, np.array(0, np.int8)],
                       {"output_dtype": KILN_TO_ONNX["uint8"]})
    assert "'output_dtype' = UINT8 does not match the zero point's dtype int8" in msg
    msg = _infer_error("QuantizeLinear", [x, s], {"output_dtype": 22})
    assert "attribute 'output_dtype' = 22: output_dtype INT4 is not supported" in msg
    msg = _infer_error("QuantizeLinear", [x, s], {"block_size": -1})
    assert "attribute 'block_size' = -1: must be >= 0" in msg
    msg = _infer_error("QuantizeLinear", [x, s, np.array(0, np.int32)])
    assert "input 2 (y_zero_point)" in msg and "int32" in msg
    msg = _infer_error("DequantizeLinear", [data("uint8", (2, 3)), s, np.array(0, np.int8)])
    assert "must have the same dtype" in msg
    msg = _infer_error("DequantizeLinear", [x, s])
    assert "input 0 (x)" in msg and "float32" in msg


def test_quant_pattern_and_flops():
    x = Value("x", (4, 4), "float32")
    node = make_node("QuantizeLinear", [x, np.array(1.0, np.float32)], const=[1])
    node = node.replace(outputs=(Value("y", (4, 4), "uint8"),))
    assert get_op("QuantizeLinear").pattern_of(node) is PatternKind.INJECTIVE
    assert get_op("QuantizeLinear").flops_of(node) == 48
