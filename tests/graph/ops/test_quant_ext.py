"""MatMulInteger and QLinearMatMul: references against onnxruntime, errors."""

from __future__ import annotations

import numpy as np
import pytest

from tests.graph.ops.util import check_vs_ort, data, infer
from toolchain.errors import ModelError


@pytest.mark.parametrize("adt, bdt", [("uint8", "uint8"), ("uint8", "int8"), ("int8", "int8")])
@pytest.mark.parametrize("zp", [False, True])
def test_matmul_integer_matches_onnxruntime(adt, bdt, zp):
    rng = np.random.default_rng(3)
    a = rng.integers(-128 if adt == "int8" else 0, 128 if adt == "int8" else 256,
                     (2, 4, 6)).astype(adt)
    b = rng.integers(-128 if bdt == "int8" else 0, 128 if bdt == "int8" else 256,
                     (6, 3)).astype(bdt)
    ins = [a, b] + ([np.array(7, adt), np.array(3, bdt)] if zp else [])
    check_vs_ort("MatMulInteger", ins)


@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("out", ["uint8", "int8"])
def test_qlinear_matmul_matches_onnxruntime(per_column, out):
    rng = np.random.default_rng(4)
    a = rng.integers(0, 256, (3, 5)).astype(np.uint8)
    b = rng.integers(-128, 128, (5, 4)).astype(np.int8)
    sb = np.array([0.01, 0.2, 0.05, 0.1], np.float32) if per_column else np.array(0.04,
                                                                                  np.float32)
    zb = np.zeros(4, np.int8) if per_column else np.array(0, np.int8)
    ins = [a, np.array(0.03, np.float32), np.array(128, np.uint8), b, sb, zb,
           np.array(0.5, np.float32), np.array(10 if out == "uint8" else -5, out)]
    check_vs_ort("QLinearMatMul", ins)


def test_errors_name_the_node():
    with pytest.raises(ModelError, match=r"node 'n' \(MatMulInteger\): A \[4\] and B \[4, 2\] "
                                         "must have rank >= 2"):
        infer("MatMulInteger", [data("uint8", (4,)), data("uint8", (4, 2))])
    with pytest.raises(ModelError, match=r"node 'n' \(MatMulInteger\): input 2 \(a_zero_point\) "
                                         r"must have one element or shape \[3\]"):
        infer("MatMulInteger", [data("uint8", (3, 4)), data("uint8", (4, 2)),
                                data("uint8", (2,))])


@pytest.mark.parametrize("scale", [1.0, 0.01, 100.0])
def test_dynamic_quantize_linear_matches_onnxruntime(scale):
    x = (data("float32", (4, 6)) * scale).astype(np.float32)
    check_vs_ort("DynamicQuantizeLinear", [x], n_outputs=3)
    check_vs_ort("DynamicQuantizeLinear", [np.abs(x)], n_outputs=3)  # min adjusted to 0


@pytest.mark.parametrize("attrs", [{}, {"pads": [1, 1, 1, 1], "strides": [2, 2]},
                                   {"group": 2}, {"auto_pad": "SAME_UPPER"}])
def test_conv_integer_and_qlinear_conv_match_onnxruntime(attrs):
    rng = np.random.default_rng(6)
    x = rng.integers(0, 256, (1, 4, 6, 5)).astype(np.uint8)
    cin = 4 // attrs.get("group", 1)
    wu = rng.integers(0, 256, (6, cin, 3, 3)).astype(np.uint8)
    check_vs_ort("ConvInteger", [x, wu, np.array(120, np.uint8), np.array(130, np.uint8)],
                 attrs)
    w = rng.integers(-128, 128, (6, cin, 3, 3)).astype(np.int8)
    ins = [x, np.array(0.02, np.float32), np.array(120, np.uint8), w,
           np.linspace(0.01, 0.05, 6).astype(np.float32), np.zeros(6, np.int8),
           np.array(0.8, np.float32), np.array(7, np.uint8),
           (np.arange(-3, 3) * 50).astype(np.int32)]
    check_vs_ort("QLinearConv", ins, attrs)


def test_conv_integer_errors_name_the_node():
    with pytest.raises(ModelError, match=r"node 'n' \(ConvInteger\): group = 3 must divide"):
        infer("ConvInteger", [data("uint8", (1, 4, 5, 5)), data("uint8", (6, 4, 3, 3))],
              {"group": 3})
