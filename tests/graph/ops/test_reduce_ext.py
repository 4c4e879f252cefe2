"""ReduceProd/L1/L2/SumSquare/LogSum/LogSumExp, ArgMin and Hardmax: references against
onnxruntime, dtypes against the ONNX schema, empty sets, errors."""

from __future__ import annotations

import numpy as np
import pytest

from tests.graph.ops.util import check_vs_ort, data, infer, make_node, ref
from toolchain.errors import ModelError
from toolchain.graph.ops import PatternKind, get_op
from toolchain.graph.ops.common import ALL_TYPES

MORE = ["ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
        "ReduceLogSumExp"]


@pytest.mark.parametrize("op", MORE)
@pytest.mark.parametrize("axes, keepdims", [(None, 1), ([1], 0), ([0, 2], 1), ([-1], 0)])
def test_float_reductions_match_onnxruntime(op, axes, keepdims):
    x = data("float32", (2, 3, 4), positive=op == "ReduceLogSum") / 3
    ins = [x] if axes is None else [x, np.array(axes, np.int64)]
    check_vs_ort(op, ins, {"keepdims": keepdims}, const=[1], rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("op", ["ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare"])
@pytest.mark.parametrize("dtype", ["int32", "int64", "float64"])
def test_other_dtypes_match_onnxruntime(op, dtype):
    x = data(dtype, (3, 5, 2)) % 7 if dtype != "float64" else data(dtype, (3, 5, 2))
    check_vs_ort(op, [x, np.array([1], np.int64)], {"keepdims": 0}, const=[1], rtol=1e-12)


def test_empty_sets_and_large_values():
    x = np.zeros((2, 0, 3), np.float32)
    axes = np.array([1], np.int64)
    assert ref("ReduceProd", [x, axes])[0].tolist() == [[[1, 1, 1]]] * 2
    assert np.all(ref("ReduceLogSum", [x, axes])[0] == -np.inf)
    assert np.all(ref("ReduceLogSumExp", [x, axes])[0] == -np.inf)
    big = np.array([[1000.0, 1000.0], [-np.inf, -np.inf]], np.float32)
    y = ref("ReduceLogSumExp", [big, np.array([1], np.int64)], {"keepdims": 0})[0]
    assert y[0] == np.float32(1000.0 + np.log(2.0)) and y[1] == -np.inf


def test_dtypes_accepted_agree_with_the_onnx_schema():
    import onnx.defs

    for op in MORE + ["ArgMin", "Hardmax"]:  # (TopK: in test_topk_matches_onnxruntime)
        schema = onnx.defs.get_schema(op, 28)
        allowed = {t.type_param_str: set(t.allowed_type_strs)
                   for t in schema.type_constraints}[schema.inputs[0].type_str]
        for dtype in ALL_TYPES:
            name = {"float32": "float", "float64": "double"}.get(dtype, dtype)
            try:
                infer(op, [data(dtype)])
                ok = True
            except ModelError:
                ok = False
            assert ok == (f"tensor({name})" in allowed), (op, dtype)


@pytest.mark.parametrize("attrs", [{}, {"axis": 1, "keepdims": 0},
                                   {"axis": -1, "select_last_index": 1}])
@pytest.mark.parametrize("dtype", ["float32", "int32", "uint8"])
def test_argmin_matches_onnxruntime(attrs, dtype):
    check_vs_ort("ArgMin", [data(dtype, (3, 4, 5)) % 3], attrs)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_hardmax_matches_onnxruntime(axis):
    x = np.round(data("float32", (3, 4, 5)))  # ties: the first maximum wins
    check_vs_ort("Hardmax", [x], {"axis": axis}, opset=13)


def test_patterns_and_errors():
    assert get_op("ReduceL2").pattern_of(make_node("ReduceL2", [data("float32")])) is \
        PatternKind.REDUCTION
    assert get_op("Hardmax").pattern is PatternKind.OPAQUE
    with pytest.raises(ModelError, match=r"node 'n' \(ArgMin\): cannot take ArgMin over axis 1 "
                                         "of length 0"):
        infer("ArgMin", [np.zeros((2, 0), np.float32)], {"axis": 1})
    with pytest.raises(ModelError, match=r"node 'n' \(Hardmax\): attribute 'axis' 2 is out of "
                                         "range"):
        infer("Hardmax", [data("float32", (2, 3))], {"axis": 2})
    with pytest.raises(ModelError, match=r"node 'n' \(ReduceLogSum\): input 0 .*int32"):
        infer("ReduceLogSum", [data("int32")])


@pytest.mark.parametrize("axis, k, largest", [(-1, 3, 1), (0, 2, 0), (1, 5, 1), (1, 1, 0)])
@pytest.mark.parametrize("dtype", ["float32", "int64", "uint8", "float64"])
def test_topk_matches_onnxruntime(axis, k, largest, dtype):
    x = data(dtype, (4, 5, 3)) % 4  # ties: the lower index comes first
    check_vs_ort("TopK", [x, np.array([k], np.int64)], {"axis": axis, "largest": largest},
                 const=[1], n_outputs=2)


def test_topk_errors():
    with pytest.raises(ModelError, match=r"node 'n' \(TopK\): K = 7 must be in \[1, 5\]"):
        infer("TopK", [data("float32", (2, 5)), np.array([7], np.int64)], const=[1])
    with pytest.raises(ModelError, match=r"node 'n' \(TopK\): input 1 \(K.*compile time"):
        infer("TopK", [data("float32", (2, 5)), np.array([2], np.int64)])
