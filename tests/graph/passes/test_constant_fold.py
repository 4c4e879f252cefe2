"""constant_fold: all-constant nodes run at compile time, within a size cap."""

from __future__ import annotations

import numpy as np

from tests.graph.passes.helpers import GraphBuilder, assert_same_results, ops
from toolchain.graph.passes import constant_fold, dead_code_elimination


def test_folds_a_chain_of_constant_nodes_and_keeps_the_consumer():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    c = b.const("c", np.arange(6, dtype=np.float32).reshape(2, 3))
    n = b.op("Neg", [c])
    e = b.op("Exp", [n])
    y = b.op("Add", [x, e], name="add")
    g = b.graph([y])
    folded = constant_fold(g)
    assert ops(folded) == ["Add"]
    const = folded.nodes[0].inputs[1]
    assert const.is_constant and const.name == e.name
    np.testing.assert_allclose(const.data, np.exp(-c.data), rtol=1e-6)
    assert_same_results(g, folded)


def test_a_folded_graph_output_keeps_its_name():
    b = GraphBuilder()
    x = b.input("x", (2,))
    y = b.op("Relu", [x])
    k = b.op("Neg", [b.const("c", np.ones(2, np.float32))], name="negc")
    g = b.graph([y, k])
    folded = constant_fold(g)
    assert ops(folded) == ["Relu"]
    assert [v.name for v in folded.outputs] == [y.name, k.name]
    assert folded.outputs[1].is_constant
    assert_same_results(g, folded)


def test_size_cap_leaves_growing_results_unfolded():
    b = GraphBuilder()
    x = b.input("x", (512, 512))
    big = b.op("Expand", [b.const("one", np.float32(1.0)),
                          b.const("shape", np.array([512, 512], np.int64))], name="expand")
    y = b.op("Add", [x, big])
    g = b.graph([y])
    # 1 MiB result from 4+16 bytes of inputs: over the default 64 KiB cap
    assert ops(constant_fold(g)) == ["Expand", "Add"]
    assert ops(constant_fold(g, max_bytes=2 << 20)) == ["Add"]
    assert_same_results(g, constant_fold(g))


def test_results_no_larger_than_inputs_are_always_folded():
    b = GraphBuilder()
    x = b.input("x", (256, 256))
    t = b.op("Transpose", [b.weight("w", (256, 256))], {"perm": (1, 0)})
    y = b.op("Mul", [x, t])
    g = b.graph([y])
    assert ops(constant_fold(g, max_bytes=0)) == ["Mul"]


def test_dead_code_elimination_removes_unused_chains_only():
    b = GraphBuilder()
    x = b.input("x", (2,))
    y = b.op("Relu", [x], name="relu")
    dead1 = b.op("Neg", [x], name="neg")
    b.op("Exp", [dead1], name="exp")
    s = b.op("Split", [y], {"axis": 0, "num_outputs": 2}, name="split", n_out=2)
    g = b.graph([y, s[0]])
    out = dead_code_elimination(g)
    # the Split stays: one of its outputs is used
    assert [n.name for n in out.nodes] == ["relu", "split"]
    assert dead_code_elimination(out) is out
    assert_same_results(g, out)
