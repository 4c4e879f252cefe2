"""The numpy reference executor: input checks, execution order, internal checks."""

from __future__ import annotations

import numpy as np
import pytest

from toolchain.errors import InputError
from toolchain.graph.ir import Graph, Node, TensorType, Value
from toolchain.graph.ops.registry import get_op
from toolchain.graph.reference import InternalError, check_inputs, run_graph, run_node


def _diamond() -> Graph:
    """y = relu(x) * neg(relu(x)) + w : 'r' is read by two nodes."""
    x = Value("x", (2, 3), "float32")
    w = Value.constant("w", np.full((2, 3), 0.5, np.float32))
    r, n, m, y = (Value(name, (2, 3), "float32") for name in ("r", "n", "m", "y"))
    nodes = [Node("Relu", "relu", [x], [r]), Node("Neg", "neg", [r], [n]),
             Node("Mul", "mul", [r, n], [m]), Node("Add", "add", [m, w], [y])]
    return Graph("diamond", [x], [y], nodes)


def test_runs_nodes_in_order_and_matches_numpy():
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    r = np.maximum(x, 0)
    out = run_graph(_diamond(), {"x": x})
    assert list(out) == ["y"]
    np.testing.assert_allclose(out["y"], r * -r + 0.5, rtol=1e-6)
    assert out["y"].dtype == np.float32


def test_missing_input_is_named_with_expected_type():
    with pytest.raises(InputError, match=r"missing input 'x'; the model's inputs are: "
                                         r"x \(float32\[2, 3\]\)"):
        run_graph(_diamond(), {})


def test_unknown_input_is_named():
    with pytest.raises(InputError, match=r"unknown input 'z'"):
        run_graph(_diamond(), {"x": np.zeros((2, 3), np.float32), "z": np.zeros(1)})


def test_wrong_dtype_is_refused_without_conversion():
    with pytest.raises(InputError, match=r"input 'x' has dtype float64, but the model expects "
                                         r"float32\[2, 3\]; convert it"):
        run_graph(_diamond(), {"x": np.zeros((2, 3))})


def test_wrong_shape_is_refused():
    with pytest.raises(InputError, match=r"input 'x' has shape \[3, 2\], but the model "
                                         r"expects float32\[2, 3\]"):
        run_graph(_diamond(), {"x": np.zeros((3, 2), np.float32)})


def test_check_inputs_returns_arrays_by_name():
    arrays = check_inputs(_diamond(), {"x": np.ones((2, 3), np.float32)})
    assert list(arrays) == ["x"] and arrays["x"].shape == (2, 3)


def test_outputs_are_fresh_copies():
    x = Value("x", (2,), "float32")
    c = Value.constant("c", np.array([1.0, 2.0], np.float32))
    g = Graph("g", [x], [x, c], [])
    feed = np.array([3.0, 4.0], np.float32)
    out = run_graph(g, {"x": feed})
    out["x"][0] = 9
    out["c"][0] = 9
    assert feed[0] == 3 and c.data[0] == 1


def test_op_references_cannot_modify_inputs_or_constants(monkeypatch):
    def mutating(ins, attrs):
        ins[0][0] = 100.0
        return [ins[0]]

    monkeypatch.setattr(get_op("Relu"), "reference", mutating)
    x, y = Value("x", (2,), "float32"), Value("y", (2,), "float32")
    g = Graph("g", [x], [y], [Node("Relu", "relu", [x], [y])])
    feed = np.zeros(2, np.float32)
    with pytest.raises(InternalError, match=r"node 'relu' \(Relu\): the numpy reference"):
        run_graph(g, {"x": feed})
    assert feed[0] == 0


def test_reference_disagreeing_with_declared_type_is_an_internal_error(monkeypatch):
    monkeypatch.setattr(get_op("Neg"), "reference",
                        lambda ins, attrs: [-ins[0].astype(np.float64)])
    with pytest.raises(InternalError, match=r"node 'neg' \(Neg\): the reference produced "
                                            r"float64\[2, 3\] for output 'n', but the node "
                                            r"declares float32\[2, 3\]"):
        run_graph(_diamond(), {"x": np.zeros((2, 3), np.float32)})


def test_reference_returning_too_few_arrays_is_an_internal_error(monkeypatch):
    monkeypatch.setattr(get_op("Relu"), "reference", lambda ins, attrs: [])
    with pytest.raises(InternalError, match=r"returned 0 arrays but the node has 1 outputs"):
        run_graph(_diamond(), {"x": np.zeros((2, 3), np.float32)})


def test_run_node_passes_normalised_attributes(monkeypatch):
    seen = {}
    x, y = Value("x", (2,), "float32"), Value("y", (2,), "float32")
    node = Node("LeakyRelu", "lr", [x], [y])
    opdef = get_op("LeakyRelu")
    original = opdef.reference

    def spy(ins, attrs):
        seen.update(attrs)
        return original(ins, attrs)

    monkeypatch.setattr(opdef, "reference", spy)
    (out,) = run_node(node, [np.array([-1.0, 1.0], np.float32)])
    assert seen == {"alpha": pytest.approx(0.01)}
    np.testing.assert_allclose(out, [-0.01, 1.0], rtol=1e-6)


def test_intermediates_are_freed_after_their_last_use(monkeypatch):
    """Count live arrays with weak references: 'r' must be dropped once 'mul' has run."""
    import gc
    import weakref

    produced: dict[str, weakref.ref] = {}
    for name in ("Relu", "Neg"):
        op = get_op(name)
        ref = op.reference

        def wrapped(ins, attrs, _ref=ref, _name=name):
            out = [np.array(a) for a in _ref(ins, attrs)]
            produced[_name] = weakref.ref(out[0])
            return out

        monkeypatch.setattr(op, "reference", wrapped)
    alive_at_add = {}
    add = get_op("Add")
    add_ref = add.reference

    def add_spy(ins, attrs):
        gc.collect()
        alive_at_add.update({k: r() is not None for k, r in produced.items()})
        return add_ref(ins, attrs)

    monkeypatch.setattr(add, "reference", add_spy)
    run_graph(_diamond(), {"x": np.ones((2, 3), np.float32)})
    assert alive_at_add == {"Relu": False, "Neg": False}


def test_infer_and_reference_agree_for_a_graph_built_by_hand():
    x = Value("x", (1, 4), "float32")
    w = Value.constant("w", np.arange(8, dtype=np.float32).reshape(4, 2))
    node = Node("MatMul", "mm", [x, w], [Value("y", (1, 2), "float32")])
    assert list(get_op("MatMul").infer(node)) == [TensorType((1, 2), "float32")]
    out = run_graph(Graph("g", [x], list(node.outputs), [node]),
                    {"x": np.ones((1, 4), np.float32)})
    np.testing.assert_array_equal(out["y"], [[12.0, 16.0]])
