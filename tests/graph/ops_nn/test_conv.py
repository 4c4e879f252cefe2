"""Conv and ConvTranspose against onnxruntime: grouped, depthwise, strides, dilations, pads,
auto_pad, 1-D/2-D/3-D (the ONNX node suite has no grouped or depthwise case)."""

from __future__ import annotations

import numpy as np
import pytest

from toolchain.graph.ops import get_op

from ._helpers import check_op, make_node, rand, run_ort

# (X shape, W shape, attrs) — W is (M, C/group, *K)
CONV_CASES = [
    # grouped
    ((2, 6, 9, 8), (6, 2, 3, 3), dict(group=3, strides=[2, 1], pads=[1, 0, 2, 1],
                                      dilations=[1, 2])),
    ((1, 8, 10, 10), (12, 2, 3, 3), dict(group=4, pads=[1, 1, 1, 1])),
    ((1, 8, 11, 7), (4, 4, 2, 3), dict(group=2, strides=[3, 2], auto_pad="SAME_UPPER")),
    ((1, 4, 7, 7), (8, 2, 3, 3), dict(group=2, dilations=[2, 2], auto_pad="VALID")),
    # depthwise (group == C), with channel multiplier 1 and 2
    ((1, 6, 9, 8), (6, 1, 3, 3), dict(group=6, auto_pad="SAME_UPPER", strides=[2, 2])),
    ((2, 6, 9, 8), (6, 1, 4, 4), dict(group=6, auto_pad="SAME_LOWER", strides=[3, 2])),
    ((1, 5, 12, 12), (10, 1, 3, 3), dict(group=5, pads=[2, 2, 2, 2], dilations=[2, 2])),
    ((1, 8, 14, 14), (8, 1, 5, 5), dict(group=8, pads=[2, 2, 2, 2], strides=[2, 2])),
    ((1, 3, 8, 8), (3, 1, 3, 3), dict(group=3, pads=[0, 1, 2, 0])),
    # plain
    ((2, 6, 9, 8), (4, 6, 4, 4), dict(auto_pad="VALID", strides=[3, 2])),
    ((1, 3, 17, 15), (5, 3, 7, 7), dict(strides=[2, 2], pads=[3, 3, 3, 3])),
    ((1, 3, 10, 10), (2, 3, 1, 1), dict()),
    ((1, 2, 5, 5), (2, 2, 3, 3), dict(kernel_shape=[3, 3], auto_pad="SAME_LOWER")),
    # 1-D and 3-D
    ((1, 4, 10), (4, 2, 3), dict(group=2)),
    ((2, 3, 12), (6, 3, 5), dict(strides=[2], dilations=[2], pads=[3, 1])),
    ((1, 4, 5, 6, 7), (2, 4, 3, 2, 3), dict(pads=[1, 0, 1, 0, 1, 1])),
    ((1, 4, 6, 6, 6), (4, 1, 3, 3, 3), dict(group=4, strides=[2, 2, 2],
                                          auto_pad="SAME_UPPER")),
]


@pytest.mark.parametrize("xs,ws,attrs", CONV_CASES)
@pytest.mark.parametrize("bias", [False, True])
def test_conv_matches_onnxruntime(xs, ws, attrs, bias):
    b = rand(ws[0], seed=3) if bias else None
    check_op("Conv", [rand(*xs), rand(*ws, seed=1), b], attrs, rtol=1e-4, atol=1e-4)


def test_conv_float64_and_float16():
    # onnxruntime has no float64 Conv kernel: compare with its float32 result
    x, w = rand(1, 4, 6, 6, dtype=np.float64), rand(4, 1, 3, 3, dtype=np.float64, seed=1)
    (y64,) = get_op("Conv").reference([x, w], {"group": 4})
    (y32,) = run_ort("Conv", [x.astype(np.float32), w.astype(np.float32)], {"group": 4})
    assert y64.dtype == np.float64
    np.testing.assert_allclose(y64, y32, rtol=1e-5, atol=1e-5)
    x, w = rand(1, 4, 6, 6, dtype=np.float16), rand(2, 4, 3, 3, dtype=np.float16, seed=1)
    (y,) = get_op("Conv").reference([x, w], {})
    expected = get_op("Conv").reference([x.astype(np.float32), w.astype(np.float32)], {})[0]
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float32), expected, rtol=1e-2, atol=1e-2)


def test_conv_flops_count_two_per_mac():
    x, w = rand(1, 8, 10, 10), rand(16, 2, 3, 3)
    node = make_node("Conv", [x, w], {"group": 4, "pads": [1, 1, 1, 1]}, const=[1])
    out = get_op("Conv").infer(node)[0]
    assert out.shape == (1, 16, 10, 10)
    from toolchain.graph.ir import Value
    node = node.replace(outputs=(Value("y", out.shape, out.dtype),))
    assert get_op("Conv").flops_of(node) == 2 * 16 * 100 * 2 * 9


CONVT_CASES = [
    ((2, 4, 5, 6), (4, 3, 3, 3), dict(group=2, strides=[2, 3], pads=[1, 0, 0, 1],
                                      output_padding=[1, 2])),
    ((2, 4, 5, 6), (4, 3, 3, 2), dict(strides=[2, 2], dilations=[2, 1])),
    ((1, 4, 5, 6), (4, 3, 3, 3), dict(strides=[2, 2], output_shape=[10, 13])),
    ((1, 4, 5, 6), (4, 3, 3, 3), dict(strides=[2, 2], output_shape=[10, 13],
                                      auto_pad="SAME_UPPER")),
    ((1, 4, 5, 6), (4, 3, 3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 4, 5, 6), (4, 3, 3, 3), dict(strides=[2, 2], auto_pad="SAME_LOWER")),
    ((1, 4, 5, 6), (4, 3, 4, 4), dict(strides=[2, 2], auto_pad="VALID")),
    # depthwise transposed
    ((1, 4, 5, 6), (4, 1, 3, 3), dict(group=4, strides=[1, 2])),
    ((1, 6, 4, 4), (6, 1, 4, 4), dict(group=6, strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 2, 5), (2, 3, 4), dict(strides=[3])),
    ((1, 2, 3, 4, 3), (2, 2, 2, 3, 2), dict(strides=[2, 1, 2], pads=[0, 1, 0, 0, 1, 1])),
]


@pytest.mark.parametrize("xs,ws,attrs", CONVT_CASES)
@pytest.mark.parametrize("bias", [False, True])
def test_conv_transpose_matches_onnxruntime(xs, ws, attrs, bias):
    m = ws[1] * attrs.get("group", 1)
    b = rand(m, seed=3) if bias else None
    check_op("ConvTranspose", [rand(*xs), rand(*ws, seed=1), b], attrs, rtol=1e-4, atol=1e-4)


def test_conv_resnet_stem_shape():
    x, w = rand(1, 3, 224, 224), rand(64, 3, 7, 7)
    node = make_node("Conv", [x, w], {"strides": [2, 2], "pads": [3, 3, 3, 3]}, const=[1])
    assert get_op("Conv").infer(node)[0].shape == (1, 64, 112, 112)
    (y,) = get_op("Conv").reference([x, w], node.attrs)
    assert y.shape == (1, 64, 112, 112) and y.dtype == np.float32


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_conv_transpose_same_kernel_smaller_than_stride(auto_pad):
    # the spec's SAME output is in * stride even when that needs negative padding;
    # onnxruntime clamps the padding to 0 (a smaller output), the ONNX reference does not
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    x, w = rand(1, 2, 3, 4), rand(2, 1, 1, 2, seed=1)
    attrs = {"auto_pad": auto_pad, "strides": [2, 3]}
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", 1, x.shape),
                      helper.make_tensor_value_info("w", 1, w.shape)],
        [helper.make_empty_tensor_value_info("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    expected = ReferenceEvaluator(model).run(None, {"x": x, "w": w})[0]
    assert expected.shape == (1, 1, 6, 12)
    assert get_op("ConvTranspose").infer(make_node("ConvTranspose", [x, w], attrs))[0].shape == (
        1, 1, 6, 12)
    (got,) = get_op("ConvTranspose").reference([x, w], attrs)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
