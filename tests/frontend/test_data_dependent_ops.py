"""Ops Kiln never compiles are refused naming the node and saying why: output shapes that
depend on the data (NonZero, Unique, Compress, NonMaxSuppression) and random ops (a
bundle is deterministic).  Both are judged after constant folding: a NonZero of a
constant folds; a random op never folds (that would freeze one draw into the bundle)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.frontend.helpers import make_model
from toolchain.errors import UnsupportedError
from toolchain.frontend.onnx import from_onnx

F, I64 = TensorProto.FLOAT, TensorProto.INT64


@pytest.mark.parametrize("op, inputs", [("NonZero", ["x"]), ("Unique", ["x"]),
                                        ("Compress", ["x", "c"])])
def test_data_dependent_shape_is_refused_naming_the_node(op, inputs):
    g = helper.make_graph(
        [helper.make_node(op, inputs, ["y"], name="dd1")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [2])][:len(inputs)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedError, match=rf"{op}'s output shape depends on the input "
                                               r"data .*static shapes.* at node 'dd1'"):
        from_onnx(m)


def test_non_max_suppression_is_refused_for_its_data_dependent_box_count():
    m = make_model([helper.make_node("NonMaxSuppression", ["b", "s"], ["y"], name="nms")],
                   [("b", F, [1, 4, 4]), ("s", F, [1, 1, 4])], [("y", I64, [None, 3])],
                   opset=11)
    with pytest.raises(UnsupportedError, match=r"NonMaxSuppression's output shape depends on "
                                               r"the input data \(the number of boxes kept\)"
                                               r".* at node 'nms'"):
        from_onnx(m)


def test_non_zero_of_a_constant_folds():
    """Fold, then check: NonZero of an initializer is computed at compile time."""
    nodes = [helper.make_node("NonZero", ["c"], ["nz"], name="nz1"),
             helper.make_node("Cast", ["nz"], ["f"], to=F),
             helper.make_node("Add", ["x", "f"], ["y"])]
    c = np.array([[0, 3, 0], [1, 0, 2]], np.int64)
    m = make_model(nodes, [("x", F, [2, 3])], [("y", F, [2, 3])], {"c": c}, opset=17)
    g = from_onnx(m)
    assert [n.op for n in g.nodes] == ["Add"]
    np.testing.assert_array_equal(g.nodes[0].inputs[1].data, np.nonzero(c))


@pytest.mark.parametrize("op, inputs, attrs", [
    ("RandomNormal", [], {"shape": [2, 3]}),
    ("RandomUniform", [], {"shape": [2, 3]}),
    ("RandomNormalLike", ["x"], {}),
    ("RandomUniformLike", ["c"], {}),  # of a constant: still never folded
    ("Bernoulli", ["p"], {}),
])
def test_random_op_is_refused_not_folded(op, inputs, attrs):
    nodes = [helper.make_node(op, inputs, ["r"], name="rnd1", **attrs),
             helper.make_node("Add", ["x", "r"], ["y"])]
    m = make_model(nodes, [("x", F, [2, 3])], [("y", F, [2, 3])],
                   {"c": np.zeros((2, 3), np.float32),
                    "p": np.full((2, 3), 0.5, np.float32)}, opset=22)
    with pytest.raises(UnsupportedError, match=rf"{op} draws random numbers, but a Kiln "
                                               r"bundle is deterministic.* at node 'rnd1'"):
        from_onnx(m)


def test_multinomial_is_refused_naming_the_node():
    m = make_model([helper.make_node("Multinomial", ["x"], ["y"], sample_size=4, name="mn")],
                   [("x", F, [2, 3])], [("y", TensorProto.INT32, [2, 4])], opset=22)
    with pytest.raises(UnsupportedError, match=r"Multinomial draws random numbers.*training-"
                                               r"time noise.* at node 'mn'"):
        from_onnx(m)
