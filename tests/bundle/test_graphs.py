"""Small graphs that stress the bundle: tensors read far apart, data-movement chains,
every broadcasting case.  Each is compiled, built with strict flags and compared with
onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests.bundle.helpers import assert_matches, compile_run, make_model, random_inputs, run_ort

F = np.float32


def _check(model, tmp_path, **kw):
    inputs = random_inputs(model, seed=3)
    _, got = compile_run(model, tmp_path, inputs, **kw)
    assert_matches(got, run_ort(model, inputs))


def test_tensor_read_by_consumers_far_apart(tmp_path):
    """x and the first activation feed nodes at the very end: their arena bytes must
    survive every kernel in between (and in-place reuse must not clobber them)."""
    n = [helper.make_node("Relu", ["x"], ["a0"])]
    for i in range(1, 7):
        n.append(helper.make_node("Conv", [f"a{i - 1}", f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]))
        n.append(helper.make_node("Tanh", [f"c{i}"], [f"a{i}"]))
    n += [helper.make_node("Add", ["a6", "a0"], ["s"]), helper.make_node("Mul", ["s", "x"], ["m"]),
          helper.make_node("Sub", ["m", "a3"], ["y"]),
          helper.make_node("ReduceMean", ["a0"], ["z"], axes=[2, 3], keepdims=1)]
    rng = np.random.default_rng(0)
    inits = {f"w{i}": (rng.standard_normal((4, 4, 3, 3)) * 0.3).astype(F) for i in range(1, 7)}
    m = make_model(n, {"x": (F, [1, 4, 8, 8])},
                   {"y": (F, [1, 4, 8, 8]), "z": (F, [1, 4, 1, 1])}, inits)
    _check(m, tmp_path)


def test_concat_split_slice_pad_gather_chain(tmp_path):
    n = [
        helper.make_node("Split", ["x", "split"], ["s0", "s1", "s2"], axis=1),
        helper.make_node("Relu", ["s0"], ["r0"]),
        helper.make_node("Concat", ["s2", "r0", "s1"], ["c"], axis=1),
        helper.make_node("Slice", ["c", "starts", "ends", "axes", "steps"], ["sl"]),
        helper.make_node("Pad", ["sl", "pads", "pv"], ["p"], mode="constant"),
        helper.make_node("Gather", ["p", "idx"], ["g"], axis=2),
        helper.make_node("Concat", ["g", "g"], ["gg"], axis=0),
        helper.make_node("Pad", ["gg", "pads2"], ["y"], mode="reflect"),
    ]
    inits = {"split": np.array([2, 3, 1], np.int64),
             "starts": np.array([1, 0], np.int64), "ends": np.array([6, 7], np.int64),
             "axes": np.array([1, 3], np.int64), "steps": np.array([2, 2], np.int64),
             "pads": np.array([0, 0, 1, 2, 0, 1, 0, 0], np.int64), "pv": np.array(0.5, F),
             "idx": np.array([[0, 2], [5, 1]], np.int64),
             "pads2": np.array([0, 0, 0, 0, 1, 0, 0, 1, 0, 1], np.int64)}
    m = make_model(n, {"x": (F, [1, 6, 5, 7])}, {"y": (F, [2, 4, 3, 2, 8])}, inits)
    _check(m, tmp_path)


def test_gather_embedding_with_integer_input(tmp_path):
    n = [helper.make_node("Gather", ["table", "ids"], ["e"], axis=0),
         helper.make_node("ReduceSum", ["e", "ax"], ["y"], keepdims=0)]
    table = np.random.default_rng(1).standard_normal((4, 6)).astype(F)
    m = make_model(n, {"ids": (np.int64, [2, 3])}, {"y": (F, [2, 6])},
                   {"table": table, "ax": np.array([1], np.int64)})
    _check(m, tmp_path)


# (shape of a, shape of b): scalars, rank differences, size-1 axes on either side, both
BROADCASTS = [
    ([2, 3, 4, 5], []), ([], [2, 3, 4, 5]), ([2, 3, 4, 5], [1]), ([2, 3, 4, 5], [5]),
    ([2, 3, 4, 5], [4, 1]), ([2, 3, 4, 5], [3, 1, 1]), ([2, 3, 4, 5], [1, 3, 1, 1]),
    ([2, 1, 4, 1], [1, 3, 1, 5]), ([1, 3, 1, 5], [2, 1, 4, 1]), ([2, 3, 1, 5], [4, 1]),
    ([5], [2, 3, 4, 1]), ([2, 3, 4, 5], [2, 3, 4, 5]),
]


@pytest.mark.parametrize("op", ["Add", "Mul", "Sub", "Div", "Max", "Pow"])
def test_every_broadcasting_case(op, tmp_path):
    """One model per op holding every broadcast pair: both operands inputs, and the second
    a constant (weights broadcast too)."""
    rng = np.random.default_rng(7)
    nodes, ins, outs, inits = [], {}, {}, {}
    for k, (sa, sb) in enumerate(BROADCASTS):
        ins[f"a{k}"] = (F, sa)
        ins[f"b{k}"] = (F, sb)
        inits[f"c{k}"] = (rng.uniform(0.5, 1.5, sb)).astype(F)
        shape = list(np.broadcast_shapes(tuple(sa), tuple(sb)))
        base = f"a{k}"
        if op in ("Div", "Pow"):  # keep the base positive and away from zero
            nodes.append(helper.make_node("Abs", [f"a{k}"], [f"abs{k}"]))
            nodes.append(helper.make_node("Add", [f"abs{k}", "one"], [f"pos{k}"]))
            base = f"pos{k}"
        second = f"b{k}" if op not in ("Div", "Pow") else f"c{k}"
        nodes.append(helper.make_node(op, [base, second], [f"y{k}"]))
        nodes.append(helper.make_node(op, [base, f"c{k}"], [f"z{k}"]))
        outs[f"y{k}"] = (F, shape)
        outs[f"z{k}"] = (F, shape)
    inits["one"] = np.array(1.0, F)
    used = {i for n in nodes for i in n.input}
    ins = {k: v for k, v in ins.items() if k in used}
    _check(make_model(nodes, ins, outs, inits), tmp_path)


def test_where_three_way_broadcast_and_passthrough_outputs(tmp_path):
    """Where broadcasting three operands; a graph output that is an input and one that is
    a constant (no kernel writes them: the bundle copies)."""
    n = [helper.make_node("Greater", ["x", "t"], ["cond"]),
         helper.make_node("Where", ["cond", "x", "w"], ["y"]),
         helper.make_node("Identity", ["x"], ["x_out"]),
         helper.make_node("Identity", ["k"], ["k_out"])]
    m = make_model(n, {"x": (F, [2, 1, 5]), "w": (F, [3, 1])},
                   {"y": (F, [2, 3, 5]), "x_out": (F, [2, 1, 5]), "k_out": (F, [3])},
                   {"t": np.array([0.1, -0.2, 0.3, 0.0, 0.5], F),
                    "k": np.array([1.0, 2.0, 3.0], F)})
    _check(m, tmp_path)


def test_integer_and_boolean_outputs(tmp_path):
    """ArgMax (int64), Cast to int32 and a comparison (bool) cross the C API exactly."""
    n = [helper.make_node("ArgMax", ["x"], ["idx"], axis=1, keepdims=0),
         helper.make_node("Cast", ["x"], ["xi"], to=6),
         helper.make_node("Greater", ["x", "zero"], ["pos"])]
    m = make_model(n, {"x": (F, [3, 5])},
                   {"idx": (np.int64, [3]), "xi": (np.int32, [3, 5]), "pos": (np.bool_, [3, 5])},
                   {"zero": np.array(0.0, F)})
    inputs = {"x": (np.random.default_rng(5).standard_normal((3, 5)) * 4).astype(F)}
    _, got = compile_run(m, tmp_path, inputs)
    assert got["idx"].dtype == np.int64 and got["pos"].dtype == np.bool_
    assert_matches(got, run_ort(m, inputs))
