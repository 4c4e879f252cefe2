"""Op traits: fusion, the layout pass and the memory planner read them from each ``OpDef``,
so an op is fused, laid out and planned by its definition alone."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from tests.graph.passes.helpers import GraphBuilder, assert_same_results
from toolchain.graph.ir import Graph, Node, Value
from toolchain.graph.memory import plan_memory
from toolchain.graph.ops import OpDef, PatternKind, all_ops, register, unregister
from toolchain.graph.ops.registry import elementwise_flops, same_as_input
from toolchain.graph.passes import fuse, transform_layout

SHAPE = (1, 8, 4, 4)
#: the layout pass's own rules (conv, pool, concat, pad): not decided by a trait
OWN_LAYOUT_RULE = {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
                   "Concat", "Pad"}


def _node(op: str, first: Value, name: str = "t") -> tuple[Node, Value]:
    """A node of ``op`` reading ``first`` (and scalar constants for its other required
    inputs) with one output of ``first``'s type.  Not validated by ``infer``: fusion,
    layout and planning look at ops, shapes and traits only."""
    opdef = all_ops()[op]
    extra = [Value.constant(f"{name}_c{i}", np.ones((), np.float32))
             for i in range(1, max(opdef.min_inputs, 1))]
    out = Value(f"{name}_out", first.shape, first.dtype)
    return Node(op, name, [first, *extra], [out]), out


def _conv(b: GraphBuilder, x: Value) -> Value:
    return b.op("Conv", [x, b.weight("w", (SHAPE[1], SHAPE[1], 3, 3))],
                {"pads": (1, 1, 1, 1)}, name="conv")


def _conv_then(op: str) -> Graph:
    b = GraphBuilder()
    c = _conv(b, b.input("x", SHAPE))
    node, y = _node(op, c)
    return Graph("g", b.inputs, [y], [*b.nodes, node])


def _between(op: str) -> Graph:
    """``Exp -> op -> Tanh``: the op's input dies at its step."""
    b = GraphBuilder()
    a = b.op("Exp", [b.input("x", SHAPE)], name="a")
    node, t = _node(op, a)
    y = Value("y", SHAPE, "float32")
    return Graph("g", b.inputs, [y], [*b.nodes, node, Node("Tanh", "tanh", [t], [y])])


_INJECTIVE = sorted(op for op, d in all_ops().items() if d.pattern is PatternKind.INJECTIVE)
_PLANNED = sorted(op for op, d in all_ops().items() if op != "Fused" and d.max_inputs != 0)


@pytest.mark.parametrize("op", _INJECTIVE)
def test_fusion_puts_exactly_the_elementwise_ops_onto_a_conv(op):
    fused = fuse(_conv_then(op))
    assert (len(fused.nodes) == 1) == all_ops()[op].elementwise, [
        n.attrs["kernel"] for n in fused.nodes]


@pytest.mark.parametrize("op", _PLANNED)
def test_the_planner_runs_exactly_the_in_place_ops_in_place(op):
    plan = plan_memory(_between(op))
    plan.check()
    assert (plan.tensor("t_out").inplace_of == "a_out") == all_ops()[op].in_place


@pytest.mark.parametrize("op", sorted(set(_INJECTIVE) - OWN_LAYOUT_RULE))
def test_the_layout_pass_runs_exactly_the_layout_agnostic_ops_in_the_target_layout(op):
    out = transform_layout(_conv_then(op), "nchw8c")
    node = next(n for n in out.nodes if n.name == "t")
    follows = node.outputs[0].shape == (1, 1, 4, 4, 8)
    assert follows == all_ops()[op].layout_agnostic


def test_elementwise_ops_default_to_in_place_and_layout_agnostic_unless_they_say_not():
    ops = all_ops()
    assert ops["Relu"].in_place and ops["Relu"].layout_agnostic and not ops["Relu"].view
    assert ops["Reshape"].in_place and not ops["Reshape"].layout_agnostic
    q = ops["QuantizeLinear"]
    assert q.elementwise and q.in_place and not q.layout_agnostic  # its axis is NCHW's
    assert ops["Identity"].view and ops["Identity"].elementwise


def test_a_trait_the_pattern_kind_contradicts_is_refused():
    with pytest.raises(ValueError, match="'Bad' is declared elementwise or a view but has "
                                         "pattern kind reduction"):
        OpDef("Bad", ("X",), same_as_input(0), lambda ins, a: ins,
              PatternKind.REDUCTION, elementwise=True)


# -- a new op: its OpDef is all it takes ------------------------------------------------------

@pytest.fixture
def square() -> Iterator[str]:
    """``KilnTestSquare``: an element-wise op that exists only for this test."""
    register(OpDef(
        "KilnTestSquare", inputs=("X",), pattern=PatternKind.INJECTIVE, elementwise=True,
        infer=same_as_input(0), reference=lambda ins, attrs: [np.square(ins[0])],
        flops=elementwise_flops, doc="x * x (a test op)"))
    try:
        yield "KilnTestSquare"
    finally:
        unregister("KilnTestSquare")
    assert "KilnTestSquare" not in all_ops()


def test_a_new_elementwise_op_fuses_onto_a_conv(square):
    b = GraphBuilder()
    y = b.op(square, [_conv(b, b.input("x", SHAPE))], name="sq")
    g = b.graph([y])
    fused = fuse(g)
    assert [(n.attrs["kernel"], n.attrs["pattern"]) for n in fused.nodes] == [
        ("fused_conv2d_kiln_test_square_0", "complex-out-fusable")]
    assert_same_results(g, fused)


def test_a_new_elementwise_op_runs_in_place(square):
    b = GraphBuilder()
    a = b.op("Exp", [b.input("x", SHAPE)], name="a")
    y = b.op("Tanh", [b.op(square, [a], name="sq")], name="tanh")
    plan = plan_memory(b.graph([y]))
    plan.check()
    assert plan.tensor("sq_out").inplace_of == "a_out"


def test_a_new_elementwise_op_follows_the_conv_layout(square):
    b = GraphBuilder()
    y = b.op(square, [_conv(b, b.input("x", SHAPE))], name="sq")
    g = b.graph([y])
    out = transform_layout(g, "nchw8c")
    assert [n.op for n in out.nodes] == ["LayoutTransform", "LayoutConv", square,
                                         "LayoutTransform"]
    assert_same_results(g, out)


def test_a_new_elementwise_op_compiles_fused_onto_a_conv(square):
    """End to end: the op's OpDef and its topi compute are all it needs to be fused as
    the tail of a scheduled convolution, built, and run correctly."""
    from tests.schedules.generic.test_fused import run_kernel
    from toolchain import te
    from toolchain.graph.passes.layout import layout_for_target
    from toolchain.graph.passes.pipeline import run_pipeline
    from toolchain.schedules.generic.fused import schedule_fused
    from toolchain.target import load_target
    from toolchain.topi import registry as topi

    topi.register(square)(lambda ctx: [te.compute(
        ctx.tensor(0).shape, lambda *i: ctx.tensor(0)[i] * ctx.tensor(0)[i], name="square",
        tag="injective")])
    try:
        b = GraphBuilder()
        y = b.op(square, [_conv(b, b.input("x", SHAPE))], name="sq")
        t = load_target("c-generic")
        fused = run_pipeline(b.graph([y]), layout_for_target(t))
        (node,) = [n for n in fused.nodes if "kiln_test_square" in n.attrs["kernel"]]
        kernel = schedule_fused(node, t)
        assert kernel.anchor is not None  # the conv's own schedule, the square inlined
        assert run_kernel(node, kernel) < 1e-5
    finally:
        topi.unregister(square)
