"""The graph op → compute registry: coverage, input mapping, errors."""

from __future__ import annotations

import numpy as np
import pytest

from tests.topi.util import make_node, rand
from toolchain import te
from toolchain.errors import InputError, ModelError, UnsupportedError
from toolchain.graph.ir import Node, Value
from toolchain.graph.ops import all_ops
from toolchain.graph.passes.pipeline import LOWERS
from toolchain.topi.registry import compute_for_node, node_compute, supported_ops

#: ops that graph passes create; the schedule layer compiles them (toolchain/schedules)
PASS_INTERNAL_OPS = {"Fused", "LayoutConv", "LayoutPool", "LayoutTransform"}
#: ops a graph pass rewrites into other ops before anything is compiled (LOWERS)
EXPANDED_OPS = {op for ops in LOWERS.values() for op in ops}


def test_every_op_but_constant_has_a_compute() -> None:
    # import the passes so the registry holds their internal ops whatever the test order
    import toolchain.graph.passes.pipeline  # noqa: F401
    from toolchain.schedules.registry import registered

    # Constant has no kernel: the frontend folds it into Value.data
    assert set(all_ops()) - set(supported_ops()) - PASS_INTERNAL_OPS - EXPANDED_OPS \
        == {"Constant"}
    scheduled = {op for op, kind in registered() if kind == "cpu"}
    for op in PASS_INTERNAL_OPS - set(supported_ops()):
        assert op in scheduled, f"{op} has neither a compute nor a CPU schedule"


def test_constant_is_refused_with_the_node_named() -> None:
    y = Value("y", (2,), "float32")
    node = Node("Constant", "c7", [], [y], {"value": np.ones(2, np.float32)})
    with pytest.raises(UnsupportedError, match=r"node 'c7' \(Constant\): op 'Constant' has "
                                               r"no compute definition"):
        compute_for_node(node)


def test_inputs_follow_node_order_and_skip_compile_time_operands() -> None:
    node = make_node("Pad", [rand(3, 4), np.array([1, 0, 0, 2], np.int64),
                             np.array(5.0, np.float32)], const=(1, 2))
    nc = node_compute(node)
    assert [v.name for v in nc.input_values] == ["in0"]
    node = make_node("Clip", [rand(3, 4), np.array(0.0, np.float32), None])
    nc = node_compute(node)
    assert [v.name for v in nc.input_values] == ["in0", "in1"]
    assert [t.shape[0].value for t in nc.inputs] == [3, 1]  # rank-0 -> (1,)


def test_conv_weights_are_kernel_inputs() -> None:
    node = make_node("Conv", [rand(1, 2, 5, 5), rand(3, 2, 3, 3), rand(3)], const=(1, 2))
    ins, outs = compute_for_node(node)
    assert [t.name for t in ins] == ["in0", "in1", "in2"]
    func = te.create_prim_func(ins + outs)
    assert [p.name for p in func.params] == ["in0", "in1", "in2", "bias_add"]


def test_value_names_are_sanitised_for_buffers() -> None:
    x = Value("input:0/x", (4,), "float32")
    y = Value("y", (4,), "float32")
    ins, _ = compute_for_node(Node("Relu", "r", [x], [y]))
    assert ins[0].name == "input_0_x"


def test_shape_operand_that_is_not_constant_is_a_model_error() -> None:
    x = Value("x", (5,), "float32")
    starts, ends = Value("st", (1,), "int64"), Value.constant("en", np.array([3]))
    y = Value("y", (2,), "float32")
    with pytest.raises(ModelError, match=r"node 'sl' \(Slice\): input 1 \(starts"):
        compute_for_node(Node("Slice", "sl", [x, starts, ends], [y]))


def test_packed_weights_are_described_by_packs_and_feeds() -> None:
    from toolchain.topi.nn.winograd import winograd_weight_transform

    w = rand(4, 3, 3, 3, seed=1)
    node = make_node("Conv", [rand(1, 3, 6, 6), w], {"pads": (1, 1, 1, 1)}, const=(1,))
    nc = node_compute(node, algorithm="winograd2")
    assert list(nc.packs) == [1]
    assert [t.shape[0].value for t in nc.inputs] == [1, 4]  # x, U[4, 4, C, K]
    x = rand(1, 3, 6, 6)
    fed = nc.feeds({"in0": x})
    assert fed[0] is x or np.array_equal(fed[0], x)
    np.testing.assert_array_equal(fed[1], winograd_weight_transform(w, 2))
    assert node_compute(node).packs == {}


def test_feeds_refuses_a_name_that_is_no_kernel_input_and_a_wrong_shape() -> None:
    # a misspelt key used to be dropped: the weight's own data ran in place of the array
    w = rand(4, 3, 3, 3, seed=1)
    nc = node_compute(make_node("Conv", [rand(1, 3, 6, 6), w], {}, const=(1,)))
    x = rand(1, 3, 6, 6)
    with pytest.raises(InputError, match=r"feeds: no kernel input named 'in_0' \(kernel "
                                         r"inputs: in0, in1\)"):
        nc.feeds({"in0": x, "in_0": x})
    with pytest.raises(InputError, match=r"kernel input 'in1' has shape \(4, 27\), expected "
                                         r"\(4, 3, 3, 3\)"):
        nc.feeds({"in0": x, "in1": w.reshape(4, 27)})
    np.testing.assert_array_equal(nc.feeds({"in0": x, "in1": 2 * w})[1], 2 * w)


def test_the_compute_table_is_the_modules_tables_and_refuses_an_op_in_two(monkeypatch):
    from toolchain.topi import int8, layout, registry_nn, registry_ops
    from toolchain.topi.registry import computes

    table = computes()
    modules = (registry_nn, registry_ops, int8, layout)
    assert table == {op: fn for m in modules for op, fn in m.COMPUTES.items()}
    assert table["QConv"] is int8.COMPUTES["QConv"] and len(table) > 150
    monkeypatch.setitem(int8.COMPUTES, "Relu", int8.COMPUTES["QConv"])
    with pytest.raises(RuntimeError, match="'Relu' has a compute in two tables"):
        computes()
