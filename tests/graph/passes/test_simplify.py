"""simplify: no-op removal and reshape / transpose chain merging."""

from __future__ import annotations

import numpy as np
import pytest

from tests.graph.passes.helpers import GraphBuilder, assert_same_results, ops
from toolchain.graph.passes import dead_code_elimination, simplify


def _i64(*v):
    return np.array(v, np.int64)


def test_identity_and_dropout_are_dropped():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    a = b.op("Identity", [x])
    d = b.op("Dropout", [a], name="drop")
    y = b.op("Relu", [d], name="relu")
    g = b.graph([y])
    out = simplify(g)
    assert ops(out) == ["Relu"] and out.nodes[0].inputs[0] is x
    assert_same_results(g, out)


def test_dropout_mask_becomes_an_all_true_constant():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    d, mask = b.op("Dropout", [x], name="drop", n_out=2)
    y = b.op("Relu", [d])
    z = b.op("Not", [mask])
    g = b.graph([y, z])
    out = simplify(g)
    assert "Dropout" not in ops(out)
    not_node = out.nodes[-1] if out.nodes[-1].op == "Not" else out.nodes[0]
    assert not_node.inputs[0].is_constant and not_node.inputs[0].data.all()
    assert_same_results(g, out)


def test_dropping_a_node_that_writes_a_graph_output_keeps_the_output_name():
    b = GraphBuilder()
    x = b.input("x", (2,))
    r = b.op("Relu", [x], name="relu")
    y = b.op("Identity", [r], name="id")
    g = b.graph([y])
    out = simplify(g)
    assert ops(out) == ["Relu"] and out.outputs[0] is y and out.nodes[0].outputs[0] is y
    assert_same_results(g, out)


def test_identity_from_input_to_output_stays():
    b = GraphBuilder()
    x = b.input("x", (2,))
    y = b.op("Identity", [x])
    g = b.graph([y])
    assert ops(simplify(g)) == ["Identity"]


@pytest.mark.parametrize("op,extra,attrs", [
    ("Reshape", [_i64(2, 3)], {}),
    ("Transpose", [], {"perm": (0, 1)}),
    ("Cast", [], {"to": 1}),
    ("Expand", [_i64(1, 3)], {}),
    ("Slice", [_i64(0), _i64(10)], {}),
    ("Pad", [_i64(0, 0, 0, 0)], {}),
    ("Concat", [], {"axis": 0}),
])
def test_noop_data_movement_is_dropped(op, extra, attrs):
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    e = b.op("Exp", [x], name="exp")
    consts = [b.const(f"c{i}", c) for i, c in enumerate(extra)]
    m = b.op(op, [e] + consts, attrs, name="noop")
    y = b.op("Neg", [m], name="neg")
    g = b.graph([y])
    out = simplify(g)
    assert ops(out) == ["Exp", "Neg"]
    assert_same_results(g, out)


def test_shape_preserving_reversal_is_not_a_noop():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    s = b.op("Slice", [x, b.const("s", _i64(-1)), b.const("e", _i64(-10)),
                       b.const("a", _i64(1)), b.const("st", _i64(-1))])
    g = b.graph([s])
    assert ops(simplify(g)) == ["Slice"]


def test_reshape_like_chain_merges_into_one_reshape():
    b = GraphBuilder()
    x = b.input("x", (2, 3, 4))
    f = b.op("Flatten", [x], {"axis": 1})
    u = b.op("Unsqueeze", [f, b.const("ax", _i64(0))])
    r = b.op("Reshape", [u, b.const("shape", _i64(4, 6))], name="last")
    y = b.op("Relu", [r])
    g = b.graph([y])
    out = dead_code_elimination(simplify(g))
    assert ops(out) == ["Reshape", "Relu"]
    assert out.nodes[0].inputs[0] is x and list(out.nodes[0].inputs[1].data) == [4, 6]
    assert_same_results(g, out)


def test_transpose_chain_composes_and_cancels():
    b = GraphBuilder()
    x = b.input("x", (2, 3, 4))
    t1 = b.op("Transpose", [x], {"perm": (2, 0, 1)})
    t2 = b.op("Transpose", [t1], {"perm": (0, 2, 1)}, name="t2")
    g = b.graph([t2])
    out = dead_code_elimination(simplify(g))
    assert ops(out) == ["Transpose"] and out.nodes[0].attrs["perm"] == (2, 1, 0)
    assert_same_results(g, out)

    b = GraphBuilder()
    x = b.input("x", (2, 3, 4))
    t1 = b.op("Transpose", [x], {"perm": (2, 0, 1)})
    t2 = b.op("Transpose", [t1], {"perm": (1, 2, 0)})
    y = b.op("Exp", [t2])
    g = b.graph([y])
    out = dead_code_elimination(simplify(g))
    assert ops(out) == ["Exp"] and out.nodes[0].inputs[0] is x
    assert_same_results(g, out)


def test_intermediate_with_other_consumers_survives_a_merge():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    r1 = b.op("Reshape", [x, b.const("s1", _i64(6))], name="r1")
    r2 = b.op("Reshape", [r1, b.const("s2", _i64(3, 2))], name="r2")
    other = b.op("Neg", [r1], name="neg")
    g = b.graph([r2, other])
    out = dead_code_elimination(simplify(g))
    assert sorted(n.name for n in out.nodes) == ["neg", "r1", "r2"]
    assert out.node("r2").inputs[0] is x
    assert_same_results(g, out)


def test_layout_transform_that_moves_no_data_becomes_a_reshape_and_merges():
    from toolchain.graph.ir import Graph, Node, Value

    x = Value("x", (1, 2, 1, 1, 8), "float32")  # NCHW8c after a global pool
    t = Value("t", (1, 16, 1, 1), "float32")
    y = Value("y", (1, 16), "float32")
    g = Graph("g", [x], [y], [
        Node("LayoutTransform", "lt", [x], [t], {"src_layout": "NCHW8c", "dst_layout": "NCHW"}),
        Node("Flatten", "flat", [t], [y], {"axis": 1})])
    out = dead_code_elimination(simplify(g))
    assert ops(out) == ["Reshape"] and out.nodes[0].inputs[0] is x
    assert_same_results(g, out)

    big = Value("big", (1, 2, 3, 3, 8), "float32")  # real data movement: stays
    t2 = Value("t2", (1, 16, 3, 3), "float32")
    g2 = Graph("g2", [big], [t2], [Node("LayoutTransform", "lt", [big], [t2],
                                        {"src_layout": "NCHW8c", "dst_layout": "NCHW"})])
    assert ops(simplify(g2)) == ["LayoutTransform"]


def test_transpose_of_size_one_axes_becomes_a_reshape():
    b = GraphBuilder()
    x = b.input("x", (1, 49, 10, 1))
    t = b.op("Transpose", [x], {"perm": (0, 3, 1, 2)}, name="t")  # NHWC -> NCHW, C = 1
    y = b.op("Flatten", [t], name="flat")
    g = b.graph([y])
    out = dead_code_elimination(simplify(g))
    assert ops(out) == ["Reshape"]
    assert_same_results(g, out)
