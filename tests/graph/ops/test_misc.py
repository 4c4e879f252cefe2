"""Constant, ConstantOfShape, Shape, Identity, Dropout: references against onnxruntime,
inference, errors."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from tests.graph.ops.util import check_vs_ort, data, infer, make_node, ref
from toolchain.errors import ModelError, UnsupportedError
from toolchain.graph.ir import TensorType, Value
from toolchain.graph.ops import PatternKind, get_op
from toolchain.graph.ops.misc import shape_result


@pytest.mark.parametrize("attrs, expected", [
    ({"value": np.arange(6, dtype=np.int32).reshape(2, 3)}, np.arange(6).reshape(2, 3)),
    ({"value_float": 1.5}, np.array(1.5, np.float32)),
    ({"value_floats": [1.0, 2.5]}, np.array([1.0, 2.5], np.float32)),
    ({"value_int": 7}, np.array(7, np.int64)),
    ({"value_ints": [3, 4, 5]}, np.array([3, 4, 5], np.int64)),
])
def test_constant_matches_onnxruntime(attrs, expected):
    onnx_attrs = dict(attrs)
    if "value" in onnx_attrs:
        onnx_attrs["value"] = numpy_helper.from_array(onnx_attrs["value"], "v")
    (y,) = check_vs_ort("Constant", [], onnx_attrs)
    np.testing.assert_array_equal(y, expected)
    (t,) = infer("Constant", [], attrs)
    assert t.shape == expected.shape


def test_constant_needs_exactly_one_value_attribute():
    for attrs, found in (({}, "none"), ({"value_int": 1, "value_float": 2.0},
                                        "value_float, value_int")):
        node = make_node("Constant", [], attrs, name="k")
        with pytest.raises(ModelError, match=rf"node 'k' \(Constant\): exactly one of the "
                                             rf"attributes .* \(found: {found}\)"):
            get_op("Constant").infer(node)
    node = make_node("Constant", [], {"value_string": "hi"}, name="k")
    with pytest.raises(ModelError, match="attribute 'value_string' = 'hi': string tensors"):
        get_op("Constant").infer(node)
    bf16 = helper.make_tensor("v", 16, [2], [0, 0])
    node = make_node("Constant", [], {"value": bf16}, name="k")
    with pytest.raises(ModelError, match=r"(?s)attribute 'value'.*ONNX data type BFLOAT16, "
                                         "which Kiln does not support"):
        get_op("Constant").infer(node)
    assert ref("Constant", [], {"value_ints": ()})[0].shape == (0,)


@pytest.mark.parametrize("value", [None, np.array([2.5], np.float32),
                                   np.array([7], np.int64), np.array([1], np.int32),
                                   np.array([True])])
@pytest.mark.parametrize("shape", [[2, 3], [4], [0], []])
def test_constant_of_shape_matches_onnxruntime(value, shape):
    attrs = {} if value is None else {"value": value}
    onnx_attrs = {} if value is None else {"value": numpy_helper.from_array(value, "v")}
    shape_in = np.array(shape, np.int64)
    (t,) = infer("ConstantOfShape", [shape_in], attrs, const=[0])
    assert t == TensorType(tuple(shape), "float32" if value is None else str(value.dtype))
    got = ref("ConstantOfShape", [shape_in], attrs)[0]
    want = check_vs_ort("ConstantOfShape", [shape_in], onnx_attrs, const=[0])[0]
    np.testing.assert_array_equal(got, want)


def test_constant_of_shape_errors():
    node = make_node("ConstantOfShape", [np.array([2, 3], np.int64)], name="cos")
    with pytest.raises(ModelError, match=r"node 'cos' \(ConstantOfShape\): input 0.*must be "
                                         "known at compile time"):
        get_op("ConstantOfShape").infer(node)
    node = make_node("ConstantOfShape", [np.array([2, -1], np.int64)], const=[0], name="cos")
    with pytest.raises(ModelError, match=r"shape \[2, -1\] has a negative dimension"):
        get_op("ConstantOfShape").infer(node)
    node = make_node("ConstantOfShape", [np.array([2], np.int64)],
                     {"value": np.array([1.0, 2.0], np.float32)}, const=[0], name="cos")
    with pytest.raises(ModelError, match="'value' must hold exactly one element"):
        get_op("ConstantOfShape").infer(node)


@pytest.mark.parametrize("start, end", [(None, None), (1, None), (None, 2), (-2, None),
                                        (None, -1), (1, -1), (-10, 10), (3, 1), (0, 0)])
def test_shape_matches_onnxruntime(start, end):
    x = data("float32", (2, 3, 4, 5))
    attrs = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    (y,) = check_vs_ort("Shape", [x], attrs)
    node = make_node("Shape", [x], attrs)
    np.testing.assert_array_equal(shape_result(node), y)
    assert infer("Shape", [x], attrs) == [TensorType(y.shape, "int64")]


def test_shape_of_scalar_and_bool():
    assert ref("Shape", [np.float32(1.0)], {})[0].shape == (0,)
    check_vs_ort("Shape", [data("bool", (3, 1))])


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "uint8", "float16"])
def test_identity_matches_onnxruntime(dtype):
    check_vs_ort("Identity", [data(dtype, (2, 5))])


@pytest.mark.parametrize("ins, const", [
    (lambda x: [x], ()),
    (lambda x: [x, np.array(0.3, np.float32)], (1,)),
    (lambda x: [x, np.array(0.3, np.float32), np.array(False)], (1, 2)),
    (lambda x: [x, None, np.array(False)], (2,)),
])
@pytest.mark.parametrize("n_outputs", [1, 2])
def test_dropout_inference_matches_onnxruntime(ins, const, n_outputs):
    x = data("float32", (3, 4))
    out = check_vs_ort("Dropout", ins(x), const=const, n_outputs=n_outputs)
    np.testing.assert_array_equal(out[0], x)
    if n_outputs == 2:
        assert out[1].dtype == np.bool_ and out[1].all()


def test_dropout_refuses_training_mode():
    x = data("float32", (3, 4))
    node = make_node("Dropout", [x, None, np.array(True)], const=[2], name="drop1")
    with pytest.raises(UnsupportedError, match=r"node 'drop1' \(Dropout\): training_mode is true.*"
                                         r"eval mode"):
        get_op("Dropout").infer(node)
    node = make_node("Dropout", [x, None, np.array(False)], name="drop2")
    with pytest.raises(ModelError, match=r"node 'drop2' \(Dropout\): input 2 \(training_mode.*"
                                         "must be a constant false"):
        get_op("Dropout").infer(node)
    with pytest.raises(ModelError, match="training_mode is true"):
        ref("Dropout", [x, None, np.array(True)])


def test_dropout_infers_one_or_two_outputs():
    x = Value("x", (2, 2), "float16")
    assert infer("Dropout", [x]) == [x.type]
    assert infer("Dropout", [x], n_outputs=2) == [x.type, TensorType((2, 2), "bool")]
    assert get_op("Dropout").num_outputs == (1, 2)
    node = make_node("Dropout", [x], {"seed": "x"}, name="d")
    with pytest.raises(ModelError, match=r"node 'd' \(Dropout\): attribute 'seed'"):
        get_op("Dropout").infer(node)


def test_misc_patterns_and_flops():
    for op in ("Constant", "ConstantOfShape", "Shape", "Identity", "Dropout"):
        assert get_op(op).pattern is PatternKind.INJECTIVE
    x = Value("x", (2, 2), "float32")
    node = make_node("Identity", [x]).replace(outputs=(Value("y", (2, 2), "float32"),))
    assert get_op("Identity").flops_of(node) == 0
