"""Reductions and ArgMax: references against onnxruntime, shape inference, errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tests.graph.ops.util import check_vs_ort, data, infer, make_node, ref
from toolchain.errors import ModelError
from toolchain.graph.ir import TensorType, Value
from toolchain.graph.ops import PatternKind, get_op

REDUCE = ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"]
AXES = [None, [], [1], [-1], [0, 2], [2, 0], [0, 1, 2]]


@pytest.mark.parametrize("axes", AXES, ids=str)
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("op", REDUCE)
def test_reductions_match_onnxruntime(op, axes, keepdims):
    x = data("float32", (2, 3, 4))
    ins = [x] if axes is None else [x, np.array(axes, np.int64)]
    check_vs_ort(op, ins, {"keepdims": keepdims}, const=[1], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", REDUCE)
@pytest.mark.parametrize("dtype", ["float16", "float64", "int32", "int64", "uint32", "uint64",
                                   "int8", "uint8", "bool"])
def test_reduction_dtypes_match_onnxruntime(op, dtype):
    try:
        infer(op, [data(dtype)])
    except ModelError:
        assert dtype in ("int8", "uint8", "bool") and op in ("ReduceMean", "ReduceSum")
        return
    x = data(dtype, (3, 5, 2))
    tol = {"rtol": 2e-3, "atol": 2e-3} if dtype == "float16" else {}
    check_vs_ort(op, [x, np.array([1], np.int64)], {"keepdims": 0}, const=[1], **tol)
    check_vs_ort(op, [x], {}, **tol)


def test_integer_mean_truncates_like_onnxruntime():
    x = np.array([[-7, 0], [2, 3], [-1, -2]], np.int32)
    (y,) = check_vs_ort("ReduceMean", [x, np.array([1], np.int64)], {"keepdims": 0},
                        const=[1])
    assert y.tolist() == [-3, 2, -1]


@pytest.mark.parametrize("op", REDUCE)
def test_noop_with_empty_axes_is_identity(op):
    x = data("float32", (2, 3))
    for ins in ([x], [x, np.array([], np.int64)]):
        assert infer(op, ins, {"noop_with_empty_axes": 1}, const=[1]) == [
            TensorType((2, 3), "float32")]
        check_vs_ort(op, ins, {"noop_with_empty_axes": 1}, const=[1])
        node = make_node(op, ins, {"noop_with_empty_axes": 1}, const=[1])
        assert get_op(op).pattern_of(node) is PatternKind.INJECTIVE
    node = make_node(op, [x, np.array([0])], {"noop_with_empty_axes": 1}, const=[1])
    assert get_op(op).pattern_of(node) is PatternKind.REDUCTION


@pytest.mark.parametrize("op, dtype, expected", [
    ("ReduceSum", "float32", 0.0), ("ReduceMax", "float32", -np.inf),
    ("ReduceMin", "float32", np.inf), ("ReduceMax", "int32", np.iinfo(np.int32).min),
    ("ReduceMin", "uint8", 255), ("ReduceMax", "bool", False), ("ReduceMin", "bool", True),
])
def test_reductions_over_an_empty_set_give_the_identity(op, dtype, expected):
    x = np.zeros((2, 0, 4), dtype)
    (t,) = infer(op, [x, np.array([1], np.int64)], const=[1])
    assert t == TensorType((2, 1, 4), dtype)
    (y,) = ref(op, [x, np.array([1], np.int64)], {})
    assert y.shape == (2, 1, 4) and y.dtype == np.dtype(dtype)
    assert (y == expected).all()


def test_reduce_shape_inference():
    x = Value("x", (2, 3, 4, 5), "float32")
    axes = Value.constant("axes", np.array([-1, 1], np.int64))
    assert infer("ReduceSum", [x, axes]) == [TensorType((2, 1, 4, 1), "float32")]
    assert infer("ReduceMax", [x, axes], {"keepdims": 0}) == [TensorType((2, 4), "float32")]
    assert infer("ReduceMean", [x], {"keepdims": 0}) == [TensorType((), "float32")]


def test_reduce_axes_must_be_constant():
    node = make_node("ReduceSum", [data("float32"), np.array([1], np.int64)], name="rs")
    with pytest.raises(ModelError, match=r"node 'rs' \(ReduceSum\): input 1 \(axes.*must be "
                                         r"known at compile time.*--input-shape"):
        get_op("ReduceSum").infer(node)


@pytest.mark.parametrize("axes, message", [
    ([0, -2], r"axes \[0, -2\] name an axis twice"),
    ([2], r"axes entry 2 is out of range for a rank-2 input \(allowed -2..1\)"),
])
def test_bad_axes_are_reported(axes, message):
    node = make_node("ReduceMin", [data("float32"), np.array(axes, np.int64)], const=[1],
                     name="red")
    with pytest.raises(ModelError, match=r"node 'red' \(ReduceMin\): " + message):
        get_op("ReduceMin").infer(node)


def test_reduce_attribute_validation_names_node_and_attribute():
    node = make_node("ReduceMean", [data("float32")], {"keepdims": 2}, name="m")
    with pytest.raises(ModelError, match=r"node 'm' \(ReduceMean\): attribute 'keepdims' = 2 "
                                         r"is not one of 0, 1"):
        get_op("ReduceMean").infer(node)
    node = make_node("ReduceSum", [data("int8")], name="s8")
    with pytest.raises(ModelError, match=r"node 's8' \(ReduceSum\).*int8"):
        get_op("ReduceSum").infer(node)


def test_reduce_flops_and_pattern():
    x = Value("x", (4, 8), "float32")
    node = make_node("ReduceMean", [x, np.array([1], np.int64)], const=[1])
    node = node.replace(outputs=(Value("y", (4, 1), "float32"),))
    assert get_op("ReduceMean").flops_of(node) == 32 + 4
    assert get_op("ReduceMean").pattern_of(node) is PatternKind.REDUCTION


# -- ArgMax ---------------------------------------------------------------------------------

@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("last", [0, 1])
def test_argmax_matches_onnxruntime(axis, keepdims, last):
    # few distinct values so that ties (first vs last index) happen
    x = np.random.default_rng(3).integers(0, 3, (3, 4, 5)).astype(np.float32)
    attrs = {"axis": axis, "keepdims": keepdims, "select_last_index": last}
    (y,) = check_vs_ort("ArgMax", [x], attrs)
    assert y.dtype == np.int64


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8", "float64", "float16", "int8"])
def test_argmax_dtypes(dtype):
    check_vs_ort("ArgMax", [data(dtype, (4, 6))], {"axis": 1})


def test_argmax_ties_pick_first_or_last():
    x = np.array([[1, 5, 5, 2]], np.float32)
    assert ref("ArgMax", [x], {"axis": 1})[0].tolist() == [[1]]
    assert ref("ArgMax", [x], {"axis": 1, "select_last_index": 1})[0].tolist() == [[2]]


def test_argmax_inference_and_errors():
    x = Value("x", (2, 3, 4), "float32")
    assert infer("ArgMax", [x]) == [TensorType((1, 3, 4), "int64")]
    assert infer("ArgMax", [x], {"axis": -1, "keepdims": 0}) == [TensorType((2, 3), "int64")]
    node = make_node("ArgMax", [x], {"axis": 3}, name="am")
    with pytest.raises(ModelError, match=r"node 'am' \(ArgMax\): attribute 'axis' 3 is out of "
                                         r"range for a rank-3 input"):
        get_op("ArgMax").infer(node)
    node = make_node("ArgMax", [Value("z", (2, 0), "float32")], {"axis": 1}, name="am0")
    with pytest.raises(ModelError, match="axis 1 of length 0"):
        get_op("ArgMax").infer(node)
    assert get_op("ArgMax").pattern is PatternKind.REDUCTION


@settings(max_examples=30, deadline=None)
@given(
    shape=hnp.array_shapes(min_dims=1, max_dims=4, max_side=4),
    op=st.sampled_from(REDUCE),
    keepdims=st.sampled_from([0, 1]),
    data_=st.data(),
)
def test_reductions_property_against_onnxruntime(shape, op, keepdims, data_):
    rank = len(shape)
    axes = data_.draw(st.lists(st.integers(-rank, rank - 1), max_size=rank,
                               unique_by=lambda a: a % rank))
    x = data("float32", shape, seed=len(axes))
    ins = [x, np.array(axes, np.int64)]
    (t,) = infer(op, ins, {"keepdims": keepdims}, const=[1])
    expect_all = not axes
    reduced = set(range(rank)) if expect_all else {a % rank for a in axes}
    want = tuple(1 if i in reduced else d for i, d in enumerate(shape)) if keepdims else \
        tuple(d for i, d in enumerate(shape) if i not in reduced)
    assert t.shape == want
    check_vs_ort(op, ins, {"keepdims": keepdims}, const=[1], rtol=1e-5, atol=1e-5)
