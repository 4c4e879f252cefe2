"""Control flow whose condition or trip count is known only at run time is refused,
naming the node and the operand (``frontend/onnx_control.py``)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolchain.errors import ModelError, UnsupportedError
from toolchain.frontend.onnx import from_onnx

N = helper.make_node


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _branch(name, op):
    return helper.make_graph([N(op, ["x"], [name])], name, [],
                             [_vi(name, TensorProto.FLOAT, [3])])


def test_if_with_a_run_time_condition_is_refused():
    m = _model([N("ReduceSum", ["x"], ["s"], keepdims=0),
                N("Greater", ["s", "zero"], ["c"]),
                N("If", ["c"], ["y"], name="if7", then_branch=_branch("t", "Relu"),
                  else_branch=_branch("e", "Neg"))],
               [_vi("x", TensorProto.FLOAT, [3])], [_vi("y", TensorProto.FLOAT, [3])],
               [numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    with pytest.raises(ModelError, match=r"node 'if7' \(If, opset 17\): its condition 'c' is "
                                         r"computed at run time, not a compile time constant"
                                         r".*inlines an If only when"):
        from_onnx(m)


def _loop(trip_input: bool, cond_out_runtime: bool = False):
    body = helper.make_graph(
        [N("ReduceMax", ["y_in"], ["r"], keepdims=0), N("Less", ["r", "ten"], ["c"])
         if cond_out_runtime else N("Identity", ["cond_in"], ["c"]),
         N("Add", ["y_in", "y_in"], ["y_out"])], "body",
        [_vi("i", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []),
         _vi("y_in", TensorProto.FLOAT, [3])],
        [_vi("c", TensorProto.BOOL, []), _vi("y_out", TensorProto.FLOAT, [3])])
    inputs = [_vi("x", TensorProto.FLOAT, [3])]
    inits = [numpy_helper.from_array(np.array(10.0, np.float32), "ten"),
             numpy_helper.from_array(np.array(True), "go")]
    if trip_input:
        inputs.append(_vi("M", TensorProto.INT64, []))
    else:
        inits.append(numpy_helper.from_array(np.array(4, np.int64), "M"))
    return _model([N("Loop", ["M", "go", "x"], ["y"], name="loop3", body=body)],
                  inputs, [_vi("y", TensorProto.FLOAT, [3])], inits)


def test_loop_with_a_run_time_trip_count_is_refused_with_a_hint():
    with pytest.raises(ModelError, match=r"node 'loop3' \(Loop, opset 17\): its trip count 'M' "
                                         r"is computed at run time.*unrolls a Loop only when"
                                         r".*'M' is an input of the model.*bind="):
        from_onnx(_loop(trip_input=True))


def test_loop_whose_body_computes_its_condition_at_run_time_is_refused():
    with pytest.raises(ModelError, match=r"node 'loop3' \(Loop, opset 17\): the condition its "
                                         r"body computes in iteration 0, 'loop3__it0__c' is "
                                         r"computed at run time"):
        from_onnx(_loop(trip_input=False, cond_out_runtime=True))


def test_loop_body_problems_are_listed_with_the_other_unsupported_features():
    body = helper.make_graph(
        [N("Identity", ["cond_in"], ["c"]), N("Gelu", ["y_in"], ["y_out"], approximate="erf"),
         N("NonZero", ["y_in"], ["nz"], name="nz1")], "body",
        [_vi("i", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []),
         _vi("y_in", TensorProto.FLOAT, [3])],
        [_vi("c", TensorProto.BOOL, []), _vi("y_out", TensorProto.FLOAT, [3])])
    m = _model([N("Loop", ["M", "", "x"], ["y"], name="loop4", body=body)],
               [_vi("x", TensorProto.FLOAT, [3])], [_vi("y", TensorProto.FLOAT, [3])],
               [numpy_helper.from_array(np.array(2, np.int64), "M")], opset=20)
    with pytest.raises(UnsupportedError) as info:
        from_onnx(m)
    text = str(info.value)
    assert "at node 'loop4/Gelu_1'" in text and "'erf'" in text
    assert "NonZero's output shape depends on the input data" in text
    assert "at node 'loop4/nz1'" in text


def test_unrolled_loop_matches_onnx_reference_when_cond_stops_it_early():
    """``cond`` computed from constants stops the loop after 2 of 5 iterations."""
    from onnx.reference import ReferenceEvaluator

    from toolchain.graph.reference import run_graph

    body = helper.make_graph(
        [N("Less", ["i", "one"], ["c"]), N("Add", ["y_in", "x"], ["y_out"])], "body",
        [_vi("i", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []),
         _vi("y_in", TensorProto.FLOAT, [3])],
        [_vi("c", TensorProto.BOOL, []), _vi("y_out", TensorProto.FLOAT, [3])])
    m = _model([N("Loop", ["M", "go", "x"], ["y"], name="loop5", body=body)],
               [_vi("x", TensorProto.FLOAT, [3])], [_vi("y", TensorProto.FLOAT, [3])],
               [numpy_helper.from_array(np.array(5, np.int64), "M"),
                numpy_helper.from_array(np.array(True), "go"),
                numpy_helper.from_array(np.array(1, np.int64), "one")])
    x = np.array([1.0, -2.0, 0.5], np.float32)
    got = run_graph(from_onnx(m), {"x": x})["y"]
    np.testing.assert_array_equal(got, ReferenceEvaluator(m).run(None, {"x": x})[0])
    np.testing.assert_array_equal(got, 3 * x)


def test_scan_of_opset_8_is_refused():
    body = helper.make_graph([N("Add", ["s", "a"], ["t"]), N("Identity", ["t"], ["o"])], "b",
                             [_vi("s", TensorProto.FLOAT, [2]), _vi("a", TensorProto.FLOAT, [2])],
                             [_vi("t", TensorProto.FLOAT, [2]), _vi("o", TensorProto.FLOAT, [2])])
    m = _model([N("Scan", ["", "s0", "x"], ["y", "z"], name="sc8", body=body,
                  num_scan_inputs=1)],
               [_vi("s0", TensorProto.FLOAT, [1, 2]), _vi("x", TensorProto.FLOAT, [1, 3, 2])],
               [_vi("y", TensorProto.FLOAT, [1, 2]), _vi("z", TensorProto.FLOAT, [1, 3, 2])],
               opset=8)
    with pytest.raises(UnsupportedError, match=r"node 'sc8' \(Scan, opset 8\): Scan of opset 8"):
        from_onnx(m)
