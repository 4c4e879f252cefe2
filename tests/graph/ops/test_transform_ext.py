"""DepthToSpace, SpaceToDepth, Trilu, Size, Range, OneHot, CumSum, GatherElements,
GatherND, ScatterElements, ScatterND, TensorScatter: references against onnxruntime, dtypes
against the ONNX schema, constant operands, errors naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from tests.graph.ops.util import check_vs_ort, data, infer, make_node, ref
from toolchain.errors import ModelError
from toolchain.graph.ops import PatternKind, get_op
from toolchain.graph.ops.transform_ext import OPS

I64 = np.int64


def test_patterns():
    kinds = {op.name: op.pattern for op in OPS}
    assert {k for k, v in kinds.items() if v is PatternKind.OPAQUE} == {
        "CumSum", "CumProd", "ScatterElements", "ScatterND"}


@pytest.mark.parametrize("op", ["DepthToSpace", "SpaceToDepth"])
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("dtype", ["float32", "int64", "uint8"])
def test_depth_space_match_onnxruntime(op, mode, dtype):
    shape = (2, 8, 3, 2) if op == "DepthToSpace" else (2, 3, 4, 6)
    if op == "SpaceToDepth" and mode == "CRD":  # CRD SpaceToDepth is opset 28 (onnx only)
        from onnx import helper
        from onnx.reference import ReferenceEvaluator

        x = data(dtype, shape)
        node = helper.make_node(op, ["x"], ["y"], blocksize=2, mode=mode)
        want = ReferenceEvaluator(node).run(None, {"x": x})[0]
        np.testing.assert_array_equal(ref(op, [x], {"blocksize": 2, "mode": mode})[0], want)
        return
    attrs = {"blocksize": 2} if op == "SpaceToDepth" else {"blocksize": 2, "mode": mode}
    check_vs_ort(op, [data(dtype, shape)], attrs, opset=18)


@pytest.mark.parametrize("k", [None, 0, 1, -2, 9])
@pytest.mark.parametrize("upper", [0, 1])
def test_trilu_matches_onnxruntime(k, upper):
    ins = [data("float32", (2, 3, 5))] + ([] if k is None else [np.array(k, I64)])
    check_vs_ort("Trilu", ins, {"upper": upper}, const=[1])


@pytest.mark.parametrize("vals", [(1, 7, 2), (10, 4, -3), (0.5, 2.0, 0.25), (3, 3, 1),
                                  (-2.5, 3.1, 1.2)])
def test_range_matches_onnxruntime(vals):
    dt = np.float32 if any(isinstance(v, float) for v in vals) else np.int32
    ins = [np.array(v, dt) for v in vals]
    check_vs_ort("Range", ins, const=[0, 1, 2], rtol=1e-6)


def test_range_needs_constants_and_nonzero_delta():
    with pytest.raises(ModelError, match=r"node 'n' \(Range\): input 1 \(limit.*compile time"):
        infer("Range", [np.array(1, I64), np.array(5, I64), np.array(1, I64)], const=[0, 2])
    with pytest.raises(ModelError, match=r"node 'n' \(Range\): delta must not be 0"):
        infer("Range", [np.array(1, I64)] * 2 + [np.array(0, I64)], const=[0, 1, 2])


def test_size_matches_onnxruntime():
    check_vs_ort("Size", [data("float32", (3, 4, 2))])
    check_vs_ort("Size", [data("bool", (0, 4))])


@pytest.mark.parametrize("axis", [-1, 0, 1, -3])
@pytest.mark.parametrize("idt, vdt", [("int64", "float32"), ("float32", "int32"),
                                      ("int32", "int64")])
def test_one_hot_matches_onnxruntime(axis, idt, vdt):
    idx = np.array([[0, 3, -1], [5, -4, 2]]).astype(idt)
    ins = [idx, np.array(4).astype(idt), np.array([-2, 7]).astype(vdt)]
    check_vs_ort("OneHot", ins, {"axis": axis}, const=[1])


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("dtype", ["float32", "int64", "float64"])
def test_cumsum_matches_onnxruntime(exclusive, reverse, dtype):
    ins = [data(dtype, (3, 4, 5)), np.array(-2, I64)]
    check_vs_ort("CumSum", ins, {"exclusive": exclusive, "reverse": reverse}, const=[1],
                 rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_cumprod_matches_onnx_reference(exclusive, reverse, dtype):
    # CumProd is opset 26, beyond onnxruntime 1.32: ONNX's own reference judges it
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    x = data(dtype, (3, 4, 5)) / (3 if dtype == "float32" else 7)
    attrs = {"exclusive": exclusive, "reverse": reverse}
    node = helper.make_node("CumProd", ["x", "a"], ["y"], **attrs)
    want = ReferenceEvaluator(node).run(None, {"x": x, "a": np.array(1, I64)})[0]
    got = ref("CumProd", [x, np.array(1, I64)], attrs)[0]
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_gather_elements_matches_onnxruntime(axis):
    x = data("float32", (3, 4, 5))
    n = x.shape[axis]
    shape = [2, 3, 4]
    idx = np.random.default_rng(axis).integers(-n, n, shape).astype(I64)
    check_vs_ort("GatherElements", [x, idx], {"axis": axis})


@pytest.mark.parametrize("ishape, b", [((4, 2), 0), ((2, 3, 3), 0), ((3, 2, 1), 1),
                                       ((3, 2), 1)])
def test_gather_nd_matches_onnxruntime(ishape, b):
    x = data("float32", (3, 4, 5))
    hi = np.array(x.shape[b:b + ishape[-1]])
    idx = np.random.default_rng(5).integers(0, 1 << 20, ishape) % hi
    check_vs_ort("GatherND", [x, idx.astype(I64)], {"batch_dims": b})


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatters_match_onnxruntime(reduction):
    x, upd = data("float32", (4, 5)), data("float32", (2, 3), seed=9)
    idx = np.array([[1, 0, 3], [2, -1, 2]], I64)  # no duplicates along axis 1 rows
    check_vs_ort("ScatterElements", [x, idx, upd], {"axis": 1, "reduction": reduction},
                 opset=18)
    nidx = np.array([[[1], [3]], [[0], [-2]]], I64)
    check_vs_ort("ScatterND", [x, nidx, data("float32", (2, 2, 5), seed=3)],
                 {"reduction": reduction}, opset=18)


def test_scatter_duplicates_last_wins_and_combine():
    x = np.zeros((3,), np.float32)
    idx, upd = np.array([[1], [1], [0]], I64), np.array([5.0, 7.0, 2.0], np.float32)
    assert ref("ScatterND", [x, idx, upd])[0].tolist() == [2.0, 7.0, 0.0]
    assert ref("ScatterND", [x, idx, upd], {"reduction": "add"})[0].tolist() == [2, 12, 0]


@pytest.mark.parametrize("op, ins, attrs, const, match", [
    ("DepthToSpace", [np.zeros((1, 6, 2, 2), np.float32)], {"blocksize": 2}, [],
     "channels 6 must be a multiple of blocksize² = 4"),
    ("SpaceToDepth", [np.zeros((1, 1, 3, 4), np.float32)], {"blocksize": 2}, [],
     "height 3 and width 4 must be multiples of blocksize 2"),
    ("DepthToSpace", [np.zeros((1, 4, 2, 2), np.float32)], {"blocksize": 0}, [],
     "'blocksize' = 0: must be > 0"),
    ("GatherElements", [np.zeros((3, 4), np.float32), np.array([[0, 5]], I64)],
     {"axis": 1}, [1], "indices value 5 at \\[0, 1\\] is out of range"),
    ("GatherND", [np.zeros((3, 4), np.float32), np.zeros((2, 3), I64)], {}, [],
     "the last axis of indices \\[2, 3\\] must be 1..rank\\(data\\) - batch_dims = 2"),
    ("ScatterND", [np.zeros((3, 4), np.float32), np.zeros((2, 1), I64),
                   np.zeros((2, 3), np.float32)], {}, [],
     "updates must have shape \\[2, 4\\]"),
    ("ScatterElements", [np.zeros((3,), np.bool_), np.zeros((1,), I64),
                         np.zeros((1,), np.bool_)], {"reduction": "add"}, [],
     "input 0 \\(data\\).*bool"),
    ("OneHot", [np.zeros((2,), I64), np.array(3, I64), np.zeros((3,), np.float32)], {}, [1],
     "input 2 \\(values\\) must hold exactly 2 values"),
    ("CumSum", [np.zeros((2, 3), np.float32), np.array(2, I64)], {}, [1],
     "axis 2 is out of range for a rank-2 input"),
])
def test_errors_name_the_node(op, ins, attrs, const, match):
    with pytest.raises(ModelError, match=rf"node 'n' \({op}\): .*{match}"):
        get_op(op).infer(make_node(op, ins, attrs, const=const))


def test_dtypes_accepted_agree_with_the_onnx_schema():
    import onnx.defs

    from toolchain.graph.ops.common import ALL_TYPES

    def accepts(op, dtype):
        x = data(dtype, (2, 4, 2, 2))
        ins = {"DepthToSpace": [x], "SpaceToDepth": [x], "Trilu": [x], "Size": [x],
               "CumSum": [x, np.array(0, I64)], "CumProd": [x, np.array(0, I64)],
               "GatherElements": [x, np.zeros((2, 4, 2, 2), I64)],
               "GatherND": [x, np.zeros((1, 1), I64)],
               "ScatterElements": [x, np.zeros((1, 1, 1, 1), I64), x[:1, :1, :1, :1]],
               "ScatterND": [x, np.zeros((1, 1), I64), x[:1]]}[op]
        try:
            infer(op, ins, {"blocksize": 2} if "Space" in op or "Depth" in op else None,
                  const=[1] if op.startswith("Cum") else [])
        except ModelError:
            return False
        return True

    for op in ["DepthToSpace", "SpaceToDepth", "Trilu", "Size", "CumSum", "CumProd",
               "GatherElements", "GatherND", "ScatterElements", "ScatterND"]:
        schema = onnx.defs.get_schema(op, 28)
        allowed = {t.type_param_str: set(t.allowed_type_strs)
                   for t in schema.type_constraints}[schema.inputs[0].type_str]
        for dtype in ALL_TYPES:
            name = {"float32": "float", "float64": "double"}.get(dtype, dtype)
            assert accepts(op, dtype) == (f"tensor({name})" in allowed), (op, dtype)


@pytest.mark.parametrize("k, dtype", [(0, None), (1, 6), (-2, 1)])
def test_eye_like_matches_onnxruntime(k, dtype):
    attrs = {"k": k} | ({} if dtype is None else {"dtype": dtype})
    check_vs_ort("EyeLike", [data("float32", (4, 5))], attrs)


@pytest.mark.parametrize("batch_axis, time_axis", [(1, 0), (0, 1)])
def test_reverse_sequence_matches_onnxruntime(batch_axis, time_axis):
    x = data("float32", (5, 4, 3) if time_axis == 0 else (4, 5, 3))
    check_vs_ort("ReverseSequence", [x, np.array([1, 5, 2, 3], I64)],
                 {"batch_axis": batch_axis, "time_axis": time_axis})


def test_reverse_sequence_errors():
    with pytest.raises(ModelError, match=r"node 'n' \(ReverseSequence\): sequence_lens must "
                                         r"have shape \[4\]"):
        infer("ReverseSequence", [data("float32", (5, 4)), np.array([1, 2], I64)])


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("cache, update, axis, starts", [
    ((2, 3, 8, 4), (2, 3, 2, 4), -2, [0, 5]),
    ((3, 6, 2), (3, 4, 2), 1, [5, 1, 2]),
    ((2, 5), (2, 5), 1, None),
])
def test_tensor_scatter_matches_onnxruntime(mode, cache, update, axis, starts):
    ins = [data("float32", cache), data("float32", update, seed=1)]
    if starts is not None:
        ins.append(np.array(starts, np.int64))
    if mode == "linear" and starts is not None:  # linear: the update must fit
        ins[2] = np.minimum(ins[2], cache[axis] - update[axis])
    check_vs_ort("TensorScatter", ins, {"mode": mode, "axis": axis}, opset=24)


def test_tensor_scatter_errors():
    with pytest.raises(ModelError, match=r"node 'n' \(TensorScatter\): axis 0 is the batch "
                                         r"axis"):
        infer("TensorScatter", [data("float32", (2, 4)), data("float32", (2, 4))], {"axis": 0})
    with pytest.raises(ModelError, match=r"node 'n' \(TensorScatter\): update \[2, 5, 3\] "
                                         r"must have past_cache's shape \[2, 4, 3\] except "
                                         r"along axis 1, where it may not be longer"):
        infer("TensorScatter", [data("float32", (2, 4, 3)), data("float32", (2, 5, 3))],
              {"axis": 1})
    with pytest.raises(ModelError, match=r"write_indices \[3\] must be \[2\]"):
        infer("TensorScatter", [data("float32", (2, 4, 3)), data("float32", (2, 1, 3)),
                                np.zeros(3, np.int64)])
