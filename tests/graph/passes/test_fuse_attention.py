"""The ``fuse_attention`` pass: which attention graphs become one ``FusedAttention`` node,
which stay as they are, and that the reference executor gives the same results before and
after."""

from __future__ import annotations

import math

import numpy as np
import pytest

from toolchain.graph.ir import Graph, Node, Value
from toolchain.graph.ops import get_op
from toolchain.graph.passes import fuse_attention
from toolchain.graph.reference import run_graph

F = "float32"


def _v(name, shape, dtype=F):
    return Value(name, shape, dtype)


def _c(name, x, dtype=np.float32):
    return Value.constant(name, np.asarray(x, dtype))


def _feed(g, seed=0):
    rng = np.random.default_rng(seed)
    return {v.name: (rng.random(v.shape) > 0.3 if v.dtype == "bool"
                     else rng.standard_normal(v.shape).astype(np.float32))
            for v in g.inputs}


def sdpa(b=1, h=2, sq=6, sk=6, d=4, *, scale="div", mask=None, mask_shape=None,
         extra_reader=False, axis=-1):
    q, kt, v = _v("q", (b, h, sq, d)), _v("kt", (b, h, d, sk)), _v("v", (b, h, sk, d))
    full = (b, h, sq, sk)
    s0 = _v("s0", full)
    nodes = [Node("MatMul", "qk", [q, kt], [s0])]
    inputs, cur = [q, kt, v], s0
    if scale == "div":
        s1 = _v("s1", full)
        nodes.append(Node("Div", "div", [cur, _c("c", math.sqrt(d))], [s1]))
        cur = s1
    elif scale == "mul_left":
        s1 = _v("s1", full)
        nodes.append(Node("Mul", "mul", [_c("c", 1 / math.sqrt(d)), cur], [s1]))
        cur = s1
    if mask == "add":
        m = _v("m", mask_shape or (sq, sk))
        out_shape = np.broadcast_shapes(full, m.shape)
        s2 = _v("s2", out_shape)
        nodes.append(Node("Add", "add", [cur, m], [s2]))
        inputs.append(m)
        cur = s2
    elif mask == "where_fill_first":  # masked_fill(mask, -inf): Where(mask, -inf, s)
        m = _v("m", mask_shape or (sq, sk), "bool")
        s2 = _v("s2", full)
        nodes.append(Node("Where", "where", [m, _c("ninf", -np.inf), cur], [s2]))
        inputs.append(m)
        cur = s2
    p = _v("p", cur.shape)
    y = _v("y", (*cur.shape[:-1], d))
    nodes += [Node("Softmax", "sm", [cur], [p], {"axis": axis}),
              Node("MatMul", "pv", [p, v], [y])]
    outputs = [y]
    if extra_reader:
        outputs.append(p)
    return Graph("g", inputs, outputs, nodes)


def _same(g, fused, seed=0):
    feed = _feed(g, seed)
    before, after = run_graph(g, feed), run_graph(fused, feed)
    for k in before:
        np.testing.assert_allclose(after[k], before[k], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kw", [
    dict(), dict(scale="mul_left"), dict(scale=None), dict(mask="add"),
    dict(mask="add", mask_shape=(1, 2, 1, 6)), dict(mask="where_fill_first"),
])
def test_pattern_becomes_one_node(kw):
    g = sdpa(**kw)
    fused = fuse_attention(g)
    ops = [n.op for n in fused.nodes]
    assert ops.count("FusedAttention") == 1 and "Softmax" not in ops, ops
    node = next(n for n in fused.nodes if n.op == "FusedAttention")
    want = 1.0 if kw.get("scale", "div") is None else 0.5
    assert node.attrs["scale"] == pytest.approx(want)
    _same(g, fused)


@pytest.mark.parametrize("kw", [
    dict(mask="add", mask_shape=(3, 1, 2, 6, 6)),   # grows the scores to rank 5
    dict(extra_reader=True),                         # the probabilities are an output too
    dict(axis=2),                                    # softmax over the queries
])
def test_pattern_left_alone(kw):
    g = sdpa(**kw)
    fused = fuse_attention(g)
    assert [n.op for n in fused.nodes] == [n.op for n in g.nodes]


def test_mask_before_the_scale_is_left_alone():
    q, kt, v = _v("q", (1, 1, 3, 2)), _v("kt", (1, 1, 2, 3)), _v("v", (1, 1, 3, 2))
    m = _v("m", (3, 3))
    s0, s1, s2, p = (_v(n, (1, 1, 3, 3)) for n in ("s0", "s1", "s2", "p"))
    y = _v("y", (1, 1, 3, 2))
    g = Graph("g", [q, kt, v, m], [y], [
        Node("MatMul", "qk", [q, kt], [s0]), Node("Add", "add", [s0, m], [s1]),
        Node("Div", "div", [s1, _c("c", 2.0)], [s2]),
        Node("Softmax", "sm", [s2], [p], {"axis": -1}), Node("MatMul", "pv", [p, v], [y])])
    assert "FusedAttention" not in [n.op for n in fuse_attention(g).nodes]


def test_attention_op_3d_becomes_transposes_and_one_node():
    q, k, v = _v("q", (2, 5, 12)), _v("k", (2, 7, 6)), _v("v", (2, 7, 6))
    y = _v("y", (2, 5, 12))
    g = Graph("g", [q, k, v], [y], [Node("Attention", "att", [q, k, v], [y],
                                         {"q_num_heads": 4, "kv_num_heads": 2,
                                          "is_causal": 1})])
    fused = fuse_attention(g)
    node = next(n for n in fused.nodes if n.op == "FusedAttention")
    assert node.attrs["right"] == 0 and node.attrs["empty"] == "zero"
    assert node.attrs["scale"] == pytest.approx(1 / math.sqrt(3))
    _same(g, fused, seed=4)


def test_attention_reference_zero_rows_and_errors():
    q = np.ones((1, 1, 2, 2), np.float32)
    mask = np.array([[False, False], [True, False]])
    y = get_op("Attention").reference([q, q, q, mask], {})[0]
    assert y[0, 0, 0].tolist() == [0.0, 0.0] and y[0, 0, 1].tolist() == [1.0, 1.0]
    bad = Node("Attention", "att", [_v("q", (1, 2, 3, 4)), _v("k", (1, 3, 3, 4)),
                                    _v("v", (1, 3, 3, 4))], [_v("y", (1, 2, 3, 4))])
    with pytest.raises(Exception, match="node 'att' \\(Attention\\).*not a multiple"):
        get_op("Attention").infer(bad)


def test_skipping_the_pass_with_an_attention_node_names_the_node():
    from toolchain.errors import OptionError
    from toolchain.graph.passes import DEFAULT_PASSES
    from toolchain.graph.passes.pipeline import check_lowered

    q, y = _v("q", (1, 2, 4, 8)), _v("y", (1, 2, 4, 8))
    g = Graph("g", [q], [y], [Node("Attention", "att", [q, q, q], [y], {})])
    passes = [p for p in DEFAULT_PASSES if p != "fuse_attention"]
    with pytest.raises(OptionError, match=r"node 'att' \(Attention\): only the graph pass "
                                          r"'fuse_attention' lowers.*--skip-pass"):
        check_lowered(g, passes)
