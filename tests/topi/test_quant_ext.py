"""MatMulInteger and QLinearMatMul computes vs the registry's references (zero points per
tensor / row / column, batch broadcasting, saturation, halves)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.topi.util import check_node, rand


@pytest.mark.parametrize("adt, bdt", [("uint8", "uint8"), ("int8", "uint8"), ("uint8", "int8")])
@pytest.mark.parametrize("zp", ["none", "tensor", "row_col"])
def test_matmul_integer(adt, bdt, zp):
    lo_a, lo_b = (-128 if adt == "int8" else 0), (-128 if bdt == "int8" else 0)
    a = rand(2, 4, 6, dtype=adt, lo=lo_a, hi=lo_a + 255)
    b = rand(6, 3, dtype=bdt, lo=lo_b, hi=lo_b + 255, seed=1)
    zps = {"none": [None, None],
           "tensor": [np.array(3, adt), np.array(-2 if bdt == "int8" else 9, bdt)],
           "row_col": [np.arange(4).astype(adt), np.arange(3).astype(bdt)]}[zp]
    check_node("MatMulInteger", [a, b, *zps])


@pytest.mark.parametrize("per_axis", [False, True])
@pytest.mark.parametrize("out", ["uint8", "int8"])
def test_qlinear_matmul(per_axis, out):
    a = rand(3, 5, dtype="uint8", lo=0, hi=255)
    b = rand(5, 4, dtype="int8", lo=-128, hi=127, seed=2)
    sa = np.array([0.02, 0.05, 0.1], np.float32) if per_axis else np.array(0.03, np.float32)
    sb = np.array([0.01, 0.2, 0.05, 0.1], np.float32) if per_axis else np.array(0.04, np.float32)
    zb = np.array([1, -2, 0, 3], np.int8) if per_axis else np.array(-1, np.int8)
    ins = [a, sa, np.array(128, np.uint8), b, sb, zb, np.array(0.5, np.float32),
           np.array(10 if out == "uint8" else -5, out)]
    check_node("QLinearMatMul", ins)


@pytest.mark.parametrize("lo, hi", [(-3.0, 5.0), (0.5, 4.0), (-6.0, -1.0), (0.0, 0.0)])
def test_dynamic_quantize_linear(lo, hi):
    x = rand(3, 7, lo=lo, hi=hi) if hi > lo else np.zeros((3, 7), np.float32)
    check_node("DynamicQuantizeLinear", [x], n_out=3)


@pytest.mark.parametrize("attrs", [{}, {"pads": [1, 1, 1, 1], "strides": [2, 2]},
                                   {"group": 2, "dilations": [2, 1]},
                                   {"auto_pad": "SAME_UPPER"}])
def test_conv_integer_and_qlinear_conv(attrs):
    x = rand(1, 4, 6, 5, dtype="uint8", lo=0, hi=255)
    cin = 4 // attrs.get("group", 1)
    w = rand(6, cin, 3, 3, dtype="int8", lo=-128, hi=127, seed=1)
    xz, wz = np.array(120, np.uint8), np.arange(6).astype(np.int8)
    check_node("ConvInteger", [x, w, xz, wz], attrs)
    ins = [x, np.array(0.02, np.float32), xz, w, np.linspace(0.01, 0.05, 6).astype(np.float32),
           np.zeros(6, np.int8), np.array(0.8, np.float32), np.array(7, np.uint8),
           np.arange(-3, 3).astype(np.int32) * 50]
    check_node("QLinearConv", ins, attrs)
