"""Shape inference without a runtime, and the errors a bad node gets: each names the node
(``node 'n0' (Op)``) and says what is wrong."""

from __future__ import annotations

import numpy as np
import pytest

from toolchain.errors import ModelError
from toolchain.graph.ir import Node, Value
from toolchain.graph.ops import get_op

from ._helpers import make_node, rand


def i64(*v: int) -> np.ndarray:
    return np.array(v, dtype=np.int64)


def infer(op, inputs, attrs=None, *, const=(), n_out=1):
    node = make_node(op, inputs, attrs or {}, const=const, n_out=n_out)
    return [(t.shape, t.dtype) for t in get_op(op).infer(node)]


def fails(op, inputs, attrs=None, *, const=(), n_out=1, match: str):
    with pytest.raises(ModelError, match=match) as err:
        infer(op, inputs, attrs, const=const, n_out=n_out)
    assert f"node 'n0' ({op})" in str(err.value)
    return str(err.value)


# -- shape inference ---------------------------------------------------------------------------

def test_resnet_block_shapes():
    x = rand(1, 64, 56, 56)
    assert infer("Conv", [x, rand(128, 64, 3, 3)], {"strides": [2, 2], "pads": [1] * 4}) == [
        ((1, 128, 28, 28), "float32")]
    assert infer("MaxPool", [rand(1, 64, 112, 112)],
                 {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1] * 4}) == [
        ((1, 64, 56, 56), "float32")]
    assert infer("GlobalAveragePool", [x]) == [((1, 64, 1, 1), "float32")]
    assert infer("Gemm", [rand(1, 512), rand(1000, 512), rand(1000)], {"transB": 1}) == [
        ((1, 1000), "float32")]


def test_optional_outputs_follow_the_node():
    x = rand(2, 3, 8, 8)
    assert infer("MaxPool", [x], {"kernel_shape": [2, 2]}, n_out=2)[1] == (
        (2, 3, 7, 7), "int64")
    stats = infer("LayerNormalization", [x, rand(8, 8)], {"axis": 2}, n_out=3)
    assert stats[1:] == [((2, 3, 1, 1), "float32")] * 2
    assert len(infer("LayerNormalization", [x, rand(8)])) == 1


def test_data_movement_shapes():
    x = rand(2, 3, 4, 5)
    assert infer("Slice", [x, i64(-1), i64(-2**63), i64(3), i64(-2)], const=[1, 2, 3, 4]) == [
        ((2, 3, 4, 3), "float32")]
    assert infer("Split", [x], {"axis": 3, "num_outputs": 2}, n_out=2) == [
        ((2, 3, 4, 3), "float32"), ((2, 3, 4, 2), "float32")]
    assert infer("Split", [x], {"axis": 1}, n_out=3)[0] == ((2, 1, 4, 5), "float32")
    assert infer("Resize", [x, None, None, i64(8, 10)], {"axes": [2, 3]}, const=[3]) == [
        ((2, 3, 8, 10), "float32")]
    assert infer("Resize", [x, None, np.array([1, 1, 0.5, 1.5], np.float32)], const=[2]) == [
        ((2, 3, 2, 7), "float32")]
    assert infer("Unsqueeze", [x, i64(-1, 0)], const=[1]) == [((1, 2, 3, 4, 5, 1), "float32")]
    assert infer("Gather", [x, np.zeros((7, 2), np.int64)], {"axis": 2}) == [
        ((2, 3, 7, 2, 5), "float32")]
    assert infer("Pad", [x, i64(0, 0, 1, -1, 0, 0, 1, 2)], const=[1]) == [
        ((2, 3, 6, 6), "float32")]
    assert infer("Expand", [rand(3, 1), i64(2, 1, 6)], const=[1]) == [((2, 3, 6), "float32")]


# -- errors ------------------------------------------------------------------------------------

def test_conv_errors():
    x = rand(1, 6, 8, 8)
    fails("Conv", [x, rand(4, 2, 3, 3)], {"group": 4}, match="group = 4 must divide")
    fails("Conv", [x, rand(6, 3, 3, 3)], {"group": 3}, match=r"expects 9 input channels")
    fails("Conv", [x, rand(6, 6, 3, 3)], {"kernel_shape": [5, 5]},
          match=r"kernel_shape \[5, 5\] does not match the weight shape \[6, 6, 3, 3\]")
    fails("Conv", [x, rand(6, 6, 3, 3)], {"pads": [1, 1]}, match="pads .* must have 4 values")
    fails("Conv", [x, rand(6, 6, 9, 9)], match="window does not fit")
    fails("Conv", [x, rand(6, 6, 3, 3), rand(5)], match=r"bias B float32\[5\] must be")
    fails("Conv", [x, rand(6, 6, 3, 3, dtype=np.float64)], match="dtype float64 but X has")
    fails("Conv", [rand(6, 8), rand(6, 6, 3, 3)], match="rank N\\+2")
    fails("Conv", [x.astype(np.int32), rand(6, 6, 3, 3)], match="dtype int32; supported")


def test_attribute_value_errors_name_the_node():
    x = rand(1, 6, 8, 8)
    msg = fails("Conv", [x, rand(6, 6, 3, 3)], {"auto_pad": "SAME"},
                match="'auto_pad' = 'SAME' is not one of")
    assert "'SAME_UPPER'" in msg
    fails("Conv", [x, rand(6, 6, 3, 3)], {"group": 0}, match="'group' = 0: must be >= 1")
    fails("Conv", [x, rand(6, 6, 3, 3)], {"strides": [0, 1]}, match="every value must be >= 1")
    fails("Conv", [x, rand(6, 6, 3, 3)], {"bogus": 1}, match="'bogus' is not supported")
    fails("MaxPool", [x], {}, match="'kernel_shape' is required")


def test_conv_transpose_errors():
    x = rand(1, 4, 5, 5)
    fails("ConvTranspose", [x, rand(4, 2, 3, 3)], {"strides": [2, 2], "output_padding": [2, 0]},
          match="output_padding .* must be smaller than the stride")
    fails("ConvTranspose", [x, rand(3, 2, 3, 3)], match="must have X's 4 input channels")
    fails("ConvTranspose", [x, rand(4, 2, 3, 3)], {"pads": [4, 4, 4, 4]}, match="is empty")


def test_matmul_gemm_errors():
    fails("MatMul", [rand(2, 3), rand(4, 5)], match="3 columns but B .* has 4 rows")
    fails("MatMul", [rand(2, 2, 3), rand(3, 3, 4)], match="cannot be broadcast")
    fails("Gemm", [rand(2, 3), rand(2, 4)], match="inner dimensions differ")
    fails("Gemm", [rand(2, 3), rand(3, 4), rand(3, 4)], match=r"C \[3, 4\] cannot be broadcast")


def test_pool_errors():
    x = rand(1, 2, 6, 6)
    fails("MaxPool", [x], {"kernel_shape": [3]}, match="must have rank 3 for kernel_shape")
    fails("AveragePool", [x], {"kernel_shape": [2, 2], "pads": [2, 0, 0, 0]},
          match="pads .* must be smaller than the window")
    fails("MaxPool", [x], {"kernel_shape": [2, 2], "ceil_mode": 2}, match="'ceil_mode' = 2")
    fails("GlobalMaxPool", [rand(2, 3)], match="rank >= 3")


def test_normalisation_errors():
    x = rand(2, 3, 4)
    p = [rand(3) for _ in range(4)]
    fails("BatchNormalization", [x, *p], {"training_mode": 1}, match="training_mode = 1")
    fails("BatchNormalization", [x, rand(4), *p[1:]], match=r"scale\) has shape \[4\]")
    fails("LayerNormalization", [x, rand(4)], {"axis": 3}, match="axis = 3 is out of range")
    fails("LayerNormalization", [x, rand(3)], match=r"Scale \[3\] cannot be broadcast")
    fails("LayerNormalization", [x, rand(4)], {"stash_type": 7}, match="'stash_type' = 7")
    fails("InstanceNormalization", [x, rand(2), rand(3)], match=r"scale\) has shape \[2\]")
    fails("Softmax", [x], {"axis": -4}, match="axis = -4 is out of range")


def test_runtime_shape_operand_is_refused():
    x = rand(2, 6)
    msg = fails("Reshape", [x, i64(3, 4)], match="must be known at compile time")
    assert "--input-shape" in msg
    fails("Slice", [x, i64(0), i64(1)], const=[1], match="input 2 \\(ends")


def test_data_movement_errors():
    x = rand(2, 3, 4)
    fails("Reshape", [x, i64(-1, -1)], const=[1], match="more than one -1")
    fails("Reshape", [x, i64(5, -1)], const=[1], match="cannot reshape")
    fails("Reshape", [x, i64(0, 0, 0, 0)], const=[1], match="copies dimension 3")
    fails("Flatten", [x], {"axis": 4}, match="axis = 4 is out of range")
    fails("Transpose", [x], {"perm": [0, 0, 1]}, match="not a permutation")
    fails("Concat", [x, rand(2, 4, 4)], {"axis": 0}, match="does not match input 0")
    fails("Concat", [x], {}, match="'axis' is required")
    fails("Split", [x, i64(1, 1)], {"axis": 1}, const=[1], n_out=2, match="sum to")
    fails("Split", [x, i64(1, 2)], {"axis": 1}, const=[1], n_out=3, match="has 3 outputs")
    fails("Split", [x], {"axis": 2, "num_outputs": 5}, n_out=5, match="too short")
    fails("Slice", [x, i64(0), i64(1), i64(0), i64(0)], const=[1, 2, 3, 4],
          match="steps must not be 0")
    fails("Slice", [x, i64(0), i64(1), i64(0, 1)], const=[1, 2, 3], match="same length")
    fails("Squeeze", [x, i64(1)], const=[1], match="size is 3, not 1")
    fails("Unsqueeze", [x, i64(0, 0)], const=[1], match="repeats an axis")
    fails("Unsqueeze", [x, i64(5)], const=[1], match="out of range")
    fails("Gather", [x, i64(3)], {"axis": 0}, const=[1], match=r"indices must lie in \[-2, 1\]")
    fails("Gather", [x, np.zeros(2, np.float32)], match="dtype float32")
    fails("Pad", [x, i64(1, 1)], const=[1], match="must have 2 \\* 3 values")
    fails("Pad", [x, i64(0, 3, 0, 0, 0, 0)], {"mode": "reflect"}, const=[1],
          match="smaller than axis 1's size 3")
    fails("Pad", [x, i64(0, 0, 0, 0, 0, 0)], {"mode": "mirror"}, const=[1],
          match="'mode' = 'mirror' is not one of")
    fails("Expand", [x, i64(5, 4)], const=[1], match="cannot be broadcast")
    fails("Tile", [x, i64(2, 2)], const=[1], match="one non-negative value per axis")


def test_resize_errors():
    x = rand(1, 2, 4, 4)
    sc = np.array([1, 1, 2, 2], np.float32)
    fails("Resize", [x, None, sc, i64(1, 2, 8, 8)], const=[2, 3], match="exactly one of")
    fails("Resize", [x], match="exactly one of")
    fails("Resize", [x, None, sc[:3]], const=[2], match="must have 4 values")
    fails("Resize", [x, None, sc], {"antialias": 2}, const=[2], match="'antialias' = 2")
    fails("Resize", [x, None, sc], {"mode": "area"}, const=[2], match="'mode' = 'area'")
    fails("Resize", [x, None, sc], {"coordinate_transformation_mode": "tf_crop_and_resize"},
          const=[2], match="needs a roi input")
    fails("Resize", [x, None, -sc], const=[2], match="must be positive")


def test_reference_errors_are_model_errors():
    with pytest.raises(ModelError, match="training_mode"):
        get_op("BatchNormalization").reference([rand(1, 2)] + [rand(2)] * 4,
                                               {"training_mode": 1})
    with pytest.raises(ModelError, match="num_outputs"):
        get_op("Split").reference([rand(4)], {})


def test_node_without_required_input():
    x = Value("x", (1, 2, 4, 4), "float32")
    node = Node("Conv", "c", [x], [Value("y", (), "float32")])
    with pytest.raises(ModelError, match=r"node 'c' \(Conv\): input 1 \(W\) is required"):
        get_op("Conv").infer(node)
