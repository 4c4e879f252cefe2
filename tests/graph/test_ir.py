"""Graph IR: construction, topological order, structural errors, printing."""

from __future__ import annotations

import numpy as np
import pytest

from toolchain.errors import ModelError
from toolchain.graph.ir import Graph, Node, Value


def _chain():
    x = Value("x", (2, 3), "float32")
    a = Value("a", (2, 3), "float32")
    b = Value("b", (2, 3), "float32")
    n1 = Node("Relu", "r1", [x], [a])
    n2 = Node("Neg", "n2", [a], [b])
    return x, a, b, n1, n2


def test_nodes_are_sorted_topologically():
    x, a, b, n1, n2 = _chain()
    g = Graph("g", [x], [b], [n2, n1])
    assert [n.name for n in g.nodes] == ["r1", "n2"]


def test_cycle_is_reported_with_node_names():
    x = Value("x", (1,), "float32")
    a = Value("a", (1,), "float32")
    b = Value("b", (1,), "float32")
    n1 = Node("Add", "first", [x, b], [a])
    n2 = Node("Relu", "second", [a], [b])
    with pytest.raises(ModelError, match="cycle.*first.*second|cycle.*second.*first"):
        Graph("g", [x], [b], [n1, n2])


def test_dangling_input_is_reported():
    x = Value("x", (1,), "float32")
    ghost = Value("ghost", (1,), "float32")
    y = Value("y", (1,), "float32")
    with pytest.raises(ModelError, match="'ghost'.*dangling"):
        Graph("g", [x], [y], [Node("Add", "add0", [x, ghost], [y])])


def test_constant_data_must_match_type():
    with pytest.raises(ModelError, match="does not match"):
        Value("w", (2,), "float32", np.zeros(3, np.float32))


def test_printer_lists_constants_and_attributes():
    x = Value("x", (1, 4), "float32")
    w = Value.constant("w", np.ones((4, 2), np.float32))
    y = Value("y", (1, 2), "float32")
    g = Graph("tiny", [x], [y], [Node("Gemm", "fc", [x, w], [y], {"alpha": 0.5})])
    text = str(g)
    assert "const %w: float32[4, 2]" in text
    assert "%y: float32[1, 2] = Gemm(%x, %w, alpha=0.5)  # fc" in text

