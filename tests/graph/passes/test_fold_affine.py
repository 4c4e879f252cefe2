"""fold_affine: BatchNorm and per-channel Mul/Add/Sub/Div folded into conv / dense weights."""

from __future__ import annotations

import numpy as np
import pytest

from tests.graph.passes.helpers import GraphBuilder, assert_same_results, ops
from toolchain.graph.passes import fold_affine


def _bn(b: GraphBuilder, x, c: int, name: str = "bn"):
    return b.op("BatchNormalization", [
        x, b.weight(f"{name}.s", (c,), 0.5, 1.5), b.weight(f"{name}.b", (c,)),
        b.weight(f"{name}.m", (c,)), b.weight(f"{name}.v", (c,), 0.1, 2.0)],
        {"epsilon": 1e-3}, name=name)


@pytest.mark.parametrize("bias", [True, False])
def test_conv_batchnorm_becomes_one_conv(bias):
    b = GraphBuilder()
    x = b.input("x", (1, 3, 8, 8))
    ins = [x, b.weight("w", (4, 3, 3, 3))] + ([b.weight("cb", (4,))] if bias else [])
    c = b.op("Conv", ins, {"pads": (1, 1, 1, 1)}, name="conv")
    y = b.op("Relu", [_bn(b, c, 4)], name="relu")
    g = b.graph([y])
    out = fold_affine(g)
    assert ops(out) == ["Conv", "Relu"]
    conv = out.node("conv")
    assert len(conv.inputs) == 3 and all(v.is_constant for v in conv.inputs[1:])
    assert_same_results(g, out)


def test_conv_output_with_another_consumer_is_not_folded():
    b = GraphBuilder()
    x = b.input("x", (1, 3, 8, 8))
    c = b.op("Conv", [x, b.weight("w", (4, 3, 3, 3))], name="conv")
    n = _bn(b, c, 4)
    other = b.op("Neg", [c], name="neg")
    g = b.graph([n, other])
    out = fold_affine(g)
    # the conv keeps its weights; the BatchNorm becomes an element-wise Mul + Add
    assert ops(out) == ["Conv", "Mul", "Add", "Neg"]
    assert out.node("conv").inputs[1] is g.node("conv").inputs[1]
    assert_same_results(g, out)


def test_conv_transpose_grouped_batchnorm():
    b = GraphBuilder()
    x = b.input("x", (1, 4, 5, 5))
    c = b.op("ConvTranspose", [x, b.weight("w", (4, 3, 3, 3)), b.weight("cb", (6,))],
             {"group": 2, "strides": (2, 2)}, name="convt")
    g = b.graph([_bn(b, c, 6)])
    out = fold_affine(g)
    assert ops(out) == ["ConvTranspose"]
    assert_same_results(g, out)


@pytest.mark.parametrize("trans_b,with_c", [(0, False), (1, True), (1, False)])
def test_gemm_batchnorm(trans_b, with_c):
    b = GraphBuilder()
    x = b.input("x", (5, 6))
    w = b.weight("w", (4, 6) if trans_b else (6, 4))
    ins = [x, w] + ([b.weight("c", (4,))] if with_c else [])
    gm = b.op("Gemm", ins, {"transB": trans_b, "beta": 0.5, "alpha": 2.0}, name="gemm")
    g = b.graph([_bn(b, gm, 4)])
    out = fold_affine(g)
    assert ops(out) == ["Gemm"]
    assert_same_results(g, out)


def test_matmul_2d_plus_bias_becomes_gemm():
    b = GraphBuilder()
    x = b.input("x", (3, 6))
    m = b.op("MatMul", [x, b.weight("w", (6, 4))], name="mm")
    y = b.op("Add", [b.weight("bias", (4,)), m], name="add")  # constant first
    g = b.graph([y])
    out = fold_affine(g)
    assert ops(out) == ["Gemm"] and out.outputs[0] is y
    assert_same_results(g, out)


def test_matmul_3d_takes_a_scale_but_not_a_shift():
    b = GraphBuilder()
    x = b.input("x", (2, 3, 6))
    m = b.op("MatMul", [x, b.weight("w", (6, 4))], name="mm")
    s = b.op("Mul", [m, b.weight("s", (1, 1, 4))], name="mul")
    y = b.op("Add", [s, b.weight("bias", (4,))], name="add")
    g = b.graph([y])
    out = fold_affine(g)
    assert ops(out) == ["MatMul", "Add"]
    assert_same_results(g, out)


@pytest.mark.parametrize("op,const_shape,folds", [
    ("Mul", (1, 4, 1, 1), True), ("Mul", (), True), ("Add", (4, 1, 1), True),
    ("Sub", (1, 4, 1, 1), True), ("Div", (1,), True),
    ("Mul", (1, 1, 8, 8), False),  # varies over space: not per channel
    ("Add", (2, 4, 8, 8), False),  # broadcasting the conv output to a bigger shape
])
def test_scalar_and_per_channel_ops_fold_into_conv(op, const_shape, folds):
    b = GraphBuilder()
    x = b.input("x", (1, 3, 8, 8))
    c = b.op("Conv", [x, b.weight("w", (4, 3, 3, 3))], {"pads": (1, 1, 1, 1)}, name="conv")
    y = b.op(op, [c, b.weight("k", const_shape, 0.5, 1.5)], name="affine")
    g = b.graph([y])
    out = fold_affine(g)
    assert ops(out) == (["Conv"] if folds else ["Conv", op])
    assert_same_results(g, out)


def test_chains_fold_repeatedly_and_sub_with_constant_first_does_not():
    b = GraphBuilder()
    x = b.input("x", (1, 3, 8, 8))
    c = b.op("Conv", [x, b.weight("w", (4, 3, 3, 3))], name="conv")
    m = b.op("Mul", [c, b.weight("k", (1, 4, 1, 1))], name="mul")
    a = b.op("Add", [m, b.weight("a", (1, 4, 1, 1))], name="add")
    y = b.op("Sub", [b.weight("s", (1, 4, 1, 1)), a], name="sub")
    g = b.graph([y])
    out = fold_affine(g)
    assert ops(out) == ["Conv", "Sub"]
    assert_same_results(g, out)


def test_weights_keep_dtype_and_fold_in_float64():
    b = GraphBuilder()
    x = b.input("x", (1, 3, 4, 4))
    c = b.op("Conv", [x, b.weight("w", (2, 3, 1, 1))], name="conv")
    y = b.op("Div", [c, b.const("k", np.float32(3.0))], name="div")
    out = fold_affine(b.graph([y]))
    w = out.node("conv").inputs[1]
    assert w.dtype == "float32"
    np.testing.assert_array_equal(
        w.data, (b.nodes[0].inputs[1].data.astype(np.float64) / 3.0).astype(np.float32))


def test_batchnorm_with_nothing_to_fold_into_becomes_mul_add_and_fuses():
    from toolchain.graph.passes import fuse

    b = GraphBuilder()
    x = b.input("x", (1, 4, 6, 6))
    c = b.op("Conv", [x, b.weight("w", (4, 4, 3, 3))], {"pads": (1, 1, 1, 1)}, name="conv")
    s = b.op("Add", [c, x], name="add")  # pre-activation ResNet: BN after the residual add
    y = b.op("Relu", [_bn(b, s, 4)], name="relu")
    g = b.graph([y])
    out = fold_affine(g)
    assert ops(out) == ["Conv", "Add", "Mul", "Add", "Relu"]
    assert out.nodes[2].inputs[1].shape == (4, 1, 1)
    assert_same_results(g, out)
    fused = fuse(out)
    assert [n.attrs["kernel"] for n in fused.nodes] == ["fused_conv2d_add_mul_add_relu_0"]
    assert_same_results(g, fused)
