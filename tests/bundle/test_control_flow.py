"""If / Loop / Scan with compile-time conditions (``frontend/onnx_control.py``), compiled
into bundles for the host target and compared with onnxruntime: the taken branch of an
If, a Loop unrolled with a carried value and a scan output, a Scan in both directions, an If
nested in a Loop body that reads values of both enclosing scopes, and Loops nested two deep."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.bundle.helpers import assert_matches, compile_run, make_model, run_ort
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.reference import run_graph
from toolchain.target import host_target

F = np.float32
N = helper.make_node


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _check(model, inputs, tmp_path):
    want = run_ort(model, inputs)
    ref = run_graph(from_onnx(model), inputs)
    assert_matches({k: ref[k] for k in want}, want, rtol=1e-5)
    _, got = compile_run(model, tmp_path, inputs, target=host_target())
    assert_matches(got, want, rtol=1e-5)


def _if_model(flag: bool):
    then = helper.make_graph([N("Mul", ["x", "two"], ["t"])], "then", [],
                             [_vi("t", TensorProto.FLOAT, [2, 3])])
    other = helper.make_graph([N("Neg", ["x"], ["e0"]), N("Relu", ["e0"], ["e"])], "else", [],
                              [_vi("e", TensorProto.FLOAT, [2, 3])])
    nodes = [N("Greater", ["a", "b"], ["c"]),  # folds to the constant `flag`
             N("If", ["c"], ["y"], name="if1", then_branch=then, else_branch=other),
             N("Add", ["y", "x"], ["z"])]
    return make_model(nodes, {"x": (F, [2, 3])}, {"z": (F, [2, 3])},
                      {"two": np.array(2.0, F), "a": np.array(1.0 if flag else 0.0, F),
                       "b": np.array(0.5, F)}, opset=17)


@pytest.mark.parametrize("flag", [True, False])
def test_if_with_constant_condition_takes_its_branch(flag, tmp_path):
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(F)
    model = _if_model(flag)
    assert "If" not in {n.op for n in from_onnx(model).nodes}
    _check(model, {"x": x}, tmp_path)


def _loop_model(nested: bool = False):
    """Loop(M=3): y_out = y_in * w + x[i] (w, x from the outer scope); scan out y_out."""
    body_nodes = [N("Identity", ["cond_in"], ["cond_out"]),
                  N("Gather", ["x", "i"], ["xi"], axis=0),
                  N("Mul", ["y_in", "w"], ["yw"]), N("Add", ["yw", "xi"], ["y_out"])]
    if nested:  # an If in the body whose branches read the body's and the model's values
        then = helper.make_graph([N("Add", ["y_out", "w"], ["t"])], "then", [],
                                 [_vi("t", TensorProto.FLOAT, [4])])
        other = helper.make_graph([N("Sub", ["y_out", "x0"], ["e"])], "else", [],
                                  [_vi("e", TensorProto.FLOAT, [4])])
        body_nodes += [N("Equal", ["i", "one"], ["odd"]),
                       N("If", ["odd"], ["s"], then_branch=then, else_branch=other)]
    else:
        body_nodes += [N("Tanh", ["y_out"], ["s"])]
    body = helper.make_graph(
        body_nodes, "body",
        [_vi("i", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []),
         _vi("y_in", TensorProto.FLOAT, [4])],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("y_out", TensorProto.FLOAT, [4]),
         _vi("s", TensorProto.FLOAT, [4])])
    nodes = [N("Gather", ["x", "zero"], ["x0"], axis=0),
             N("Loop", ["M", "", "y0"], ["y", "scan"], name="loop1", body=body)]
    return make_model(nodes, {"x": (F, [3, 4]), "y0": (F, [4])},
                      {"y": (F, [4]), "scan": (F, [3, 4])},
                      {"M": np.array(3, np.int64), "w": np.array(0.5, F),
                       "zero": np.array(0, np.int64), "one": np.array(1, np.int64)},
                      opset=17)


@pytest.mark.parametrize("nested", [False, True])
def test_loop_with_constant_trip_count_is_unrolled(nested, tmp_path):
    rng = np.random.default_rng(2)
    inputs = {"x": rng.standard_normal((3, 4)).astype(F),
              "y0": rng.standard_normal(4).astype(F)}
    model = _loop_model(nested)
    assert {"Loop", "If"}.isdisjoint(n.op for n in from_onnx(model).nodes)
    _check(model, inputs, tmp_path)


def test_scan_over_a_static_sequence_is_unrolled(tmp_path):
    """Two scan inputs (one along axis 1, one reversed), a running sum and a running max
    as states, scan outputs along axis 0 and (reversed) along axis 1."""
    body = helper.make_graph(
        [N("Add", ["s_in", "a"], ["s_out"]), N("Max", ["m_in", "b"], ["m_out"]),
         N("Mul", ["s_out", "m_out"], ["p"]), N("Sub", ["a", "b"], ["d"])], "body",
        [_vi("s_in", TensorProto.FLOAT, [2]), _vi("m_in", TensorProto.FLOAT, [2]),
         _vi("a", TensorProto.FLOAT, [2]), _vi("b", TensorProto.FLOAT, [2])],
        [_vi("s_out", TensorProto.FLOAT, [2]), _vi("m_out", TensorProto.FLOAT, [2]),
         _vi("p", TensorProto.FLOAT, [2]), _vi("d", TensorProto.FLOAT, [2])])
    scan = N("Scan", ["s0", "m0", "xa", "xb"], ["s", "m", "ps", "ds"], name="scan1",
             body=body, num_scan_inputs=2, scan_input_axes=[1, 0],
             scan_input_directions=[0, 1], scan_output_axes=[0, -1],
             scan_output_directions=[0, 1])
    model = make_model([scan], {"s0": (F, [2]), "m0": (F, [2]), "xa": (F, [2, 5]),
                                "xb": (F, [5, 2])},
                       {"s": (F, [2]), "m": (F, [2]), "ps": (F, [5, 2]),
                        "ds": (F, [2, 5])}, opset=17)
    rng = np.random.default_rng(3)
    inputs = {k: rng.standard_normal(s).astype(F) for k, s in
              (("s0", 2), ("m0", 2), ("xa", (2, 5)), ("xb", (5, 2)))}
    _check(model, inputs, tmp_path)


def test_nested_loops_read_every_enclosing_scope(tmp_path):
    """An opset-11 Loop (3 trips) whose body runs a Loop (2 trips) reading the outer body's
    iteration number and a model initializer; scan outputs at both levels."""
    inner = helper.make_graph(
        [N("Identity", ["c2"], ["c2o"]), N("Cast", ["j"], ["jf"], to=TensorProto.FLOAT),
         N("Mul", ["jf", "scale"], ["t"]), N("Add", ["acc_in", "t"], ["acc_out"]),
         N("Add", ["acc_out", "i_f"], ["s"])], "inner",
        [_vi("j", TensorProto.INT64, []), _vi("c2", TensorProto.BOOL, []),
         _vi("acc_in", TensorProto.FLOAT, [2])],
        [_vi("c2o", TensorProto.BOOL, []), _vi("acc_out", TensorProto.FLOAT, [2]),
         _vi("s", TensorProto.FLOAT, [2])])
    outer = helper.make_graph(
        [N("Identity", ["c"], ["co"]), N("Cast", ["i"], ["i_f"], to=TensorProto.FLOAT),
         N("Loop", ["two", "", "y_in"], ["y_out", "ss"], body=inner),
         N("ReduceSum", ["ss"], ["r"], keepdims=0, axes=[0])], "outer",
        [_vi("i", TensorProto.INT64, []), _vi("c", TensorProto.BOOL, []),
         _vi("y_in", TensorProto.FLOAT, [2])],
        [_vi("co", TensorProto.BOOL, []), _vi("y_out", TensorProto.FLOAT, [2]),
         _vi("r", TensorProto.FLOAT, [2])])
    model = make_model([N("Loop", ["three", "", "x"], ["y", "rs"], body=outer)],
                       {"x": (F, [2])}, {"y": (F, [2]), "rs": (F, [3, 2])},
                       {"three": np.array(3, np.int64), "two": np.array(2, np.int64),
                        "scale": np.array([0.5, -1.0], F)}, opset=11)
    _check(model, {"x": np.array([1.0, 2.0], F)}, tmp_path)
