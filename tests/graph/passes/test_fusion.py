"""fuse: the TVM paper's fusion rules, Fused nodes, kernel names."""

from __future__ import annotations

import re

import numpy as np

from tests.graph.passes.helpers import GraphBuilder, assert_same_results, ops
from toolchain.graph.passes import fuse, run_pipeline


def _groups(g):
    """[(pattern, [inner ops])] of a fused graph."""
    assert all(n.op == "Fused" for n in g.nodes)
    return [(n.attrs["pattern"], ops(n.attrs["graph"])) for n in g.nodes]


def _conv(b, x, cin, cout, name):
    return b.op("Conv", [x, b.weight(f"{name}.w", (cout, cin, 3, 3)),
                         b.weight(f"{name}.b", (cout,))], {"pads": (1, 1, 1, 1)}, name=name)


def test_conv_bn_relu_is_one_group_after_bn_folding():
    b = GraphBuilder()
    x = b.input("x", (1, 3, 8, 8))
    c = _conv(b, x, 3, 4, "conv")
    bn = b.op("BatchNormalization", [c] + [b.weight(f"bn{i}", (4,), 0.5, 1.5)
                                           for i in range(4)], name="bn")
    y = b.op("Relu", [bn], name="relu")
    g = b.graph([y])
    out = run_pipeline(g)
    assert _groups(out) == [("complex-out-fusable", ["Conv", "Relu"])]
    assert out.nodes[0].attrs["kernel"] == "fused_conv2d_relu_0"
    assert_same_results(g, out)


def test_residual_add_and_relu_join_the_conv():
    b = GraphBuilder()
    x = b.input("x", (1, 4, 8, 8))
    skip = b.op("Relu", [x], name="pre")
    c1 = _conv(b, skip, 4, 4, "c1")
    c2 = _conv(b, c1, 4, 4, "c2")
    s = b.op("Add", [c2, skip], name="add")
    y = b.op("Relu", [s], name="relu")
    g = b.graph([y])
    out = fuse(g)
    assert _groups(out) == [("injective", ["Relu"]), ("complex-out-fusable", ["Conv"]),
                            ("complex-out-fusable", ["Conv", "Add", "Relu"])]
    last = out.nodes[-1]
    assert last.attrs["kernel"] == "fused_conv2d_add_relu_2"
    assert skip in last.inputs and c1 in last.inputs  # the residual is a kernel input
    assert_same_results(g, out)


def test_reduction_takes_injective_producers_but_not_consumers():
    b = GraphBuilder()
    x = b.input("x", (4, 16))
    m = b.op("Mul", [x, b.const("k", np.float32(0.5))])
    e = b.op("Exp", [m])
    r = b.op("ReduceSum", [e, b.const("axes", np.array([1], np.int64))], name="sum")
    y = b.op("Log", [r], name="log")
    g = b.graph([y])
    out = fuse(g)
    assert _groups(out) == [("reduction", ["Mul", "Exp", "ReduceSum"]), ("injective", ["Log"])]
    # the scalar and the axes stay compile-time constants inside the kernel
    assert [v.name for v in out.nodes[0].inputs] == ["x"]
    assert_same_results(g, out)


def test_opaque_ops_stand_alone():
    b = GraphBuilder()
    x = b.input("x", (2, 8))
    r = b.op("Relu", [x])
    s = b.op("Softmax", [r], {"axis": 1})
    y = b.op("Neg", [s])
    g = b.graph([y])
    assert _groups(fuse(g)) == [("injective", ["Relu"]), ("opaque", ["Softmax"]),
                                ("injective", ["Neg"])]


def test_multi_consumer_value_ends_its_group():
    b = GraphBuilder()
    x = b.input("x", (1, 4, 8, 8))
    c = _conv(b, x, 4, 4, "conv")
    r = b.op("Relu", [c], name="relu")
    n = b.op("Neg", [r], name="neg")
    e = b.op("Exp", [r], name="exp")
    y = b.op("Add", [n, e], name="add")
    g = b.graph([y])
    out = fuse(g)
    # relu's output has two readers: it is materialised once; neg and exp each fuse into add
    assert _groups(out) == [("complex-out-fusable", ["Conv", "Relu"]),
                            ("injective", ["Neg", "Exp", "Add"])]
    assert_same_results(g, out)


def test_conv_output_read_twice_is_not_fused_and_not_recomputed():
    b = GraphBuilder()
    x = b.input("x", (1, 4, 8, 8))
    c = _conv(b, x, 4, 4, "conv")
    r = b.op("Relu", [c], name="relu")
    s = b.op("Sigmoid", [c], name="sig")
    g = b.graph([r, s])
    groups = _groups(fuse(g))
    assert groups[0] == ("complex-out-fusable", ["Conv"])
    assert sum(inner.count("Conv") for _, inner in groups) == 1


def test_graph_output_is_never_hidden_inside_a_group():
    b = GraphBuilder()
    x = b.input("x", (1, 4, 8, 8))
    c = _conv(b, x, 4, 4, "conv")
    r = b.op("Relu", [c], name="relu")
    g = b.graph([c, r])
    out = fuse(g)
    assert _groups(out) == [("complex-out-fusable", ["Conv"]), ("injective", ["Relu"])]
    assert_same_results(g, out)


def test_two_complex_ops_never_share_a_group():
    b = GraphBuilder()
    x = b.input("x", (1, 4, 8, 8))
    c1, c2 = _conv(b, x, 4, 4, "c1"), _conv(b, x, 4, 4, "c2")
    y = b.op("Add", [c1, c2], name="add")
    g = b.graph([y])
    groups = _groups(fuse(g))
    assert groups == [("complex-out-fusable", ["Conv"]),
                      ("complex-out-fusable", ["Conv", "Add"])]


def test_non_elementwise_injective_does_not_join_a_conv_but_fuses_with_injective():
    b = GraphBuilder()
    x = b.input("x", (1, 4, 8, 8))
    c = _conv(b, x, 4, 4, "conv")
    f = b.op("Flatten", [c], name="flat")
    y = b.op("Relu", [f], name="relu")
    g = b.graph([y])
    assert _groups(fuse(g)) == [("complex-out-fusable", ["Conv"]),
                                ("injective", ["Flatten", "Relu"])]


def test_elementwise_broadcasting_the_conv_output_stays_out():
    b = GraphBuilder()
    x = b.input("x", (1, 4, 1, 1))
    z = b.input("z", (1, 4, 8, 8))
    c = b.op("Conv", [x, b.weight("w", (4, 4, 1, 1))], name="conv")
    y = b.op("Add", [c, z], name="add")  # output (1,4,8,8) is bigger than the conv's
    g = b.graph([y])
    assert _groups(fuse(g)) == [("complex-out-fusable", ["Conv"]), ("injective", ["Add"])]


def test_fusion_is_idempotent_and_kernel_names_are_unique_c_identifiers():
    b = GraphBuilder()
    x = b.input("x", (1, 4, 8, 8))
    h = x
    for i in range(3):
        h = b.op("Relu", [_conv(b, h, 4, 4, f"conv{i}")], name=f"relu{i}")
    g = b.graph([h])
    once = fuse(g)
    twice = fuse(once)
    assert len(twice.nodes) == len(once.nodes) == 3
    names = [n.attrs["kernel"] for n in once.nodes]
    assert len(set(names)) == 3
    assert all(re.fullmatch(r"[a-z_][a-z0-9_]*", n) for n in names)
    assert names == [n.name for n in once.nodes]
    assert_same_results(g, twice)


def test_fused_node_flops_are_the_sum_of_its_inner_nodes():
    from toolchain.graph.ops.registry import get_op

    b = GraphBuilder()
    x = b.input("x", (1, 4, 8, 8))
    y = b.op("Relu", [_conv(b, x, 4, 4, "conv")], name="relu")
    g = b.graph([y])
    out = fuse(g)
    total = sum(get_op(n.op).flops_of(n) for n in g.nodes)
    assert get_op("Fused").flops_of(out.nodes[0]) == total > 0
