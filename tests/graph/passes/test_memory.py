"""The static memory planner: validity, in-place reuse, scratch, the zoo table, properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.graph.passes.helpers import GraphBuilder, zoo_graph
from toolchain.errors import OptionError
from toolchain.graph.ir import Value
from toolchain.graph.memory import (
    MemoryPlan,
    PlanError,
    TensorPlan,
    plan_lifetimes,
    plan_memory,
)
from toolchain.graph.passes import fuse, run_pipeline
from toolchain.zoo import ZOO


def _chain(n: int = 4, size: int = 256):
    b = GraphBuilder()
    h = b.input("x", (size,))
    for i, op in enumerate(["Exp", "Neg", "Tanh", "Abs", "Sigmoid"][:n]):
        h = b.op(op, [h], name=f"n{i}")
    return b.graph([h])


def test_chain_alternates_two_buffers_without_inplace():
    plan = plan_memory(_chain(), inplace=False)
    plan.check()
    # 3 intermediates of 1 KiB; each step reads one and writes the next
    assert (plan.arena_bytes, plan.lower_bound, plan.naive_bytes) == (2048, 2048, 3072)
    a, b, c = (plan.tensor(f"n{i}_out") for i in range(3))
    assert (a.first, a.last, b.first, b.last) == (0, 1, 1, 2)
    assert a.offset != b.offset and a.offset == c.offset


def test_inplace_elementwise_chain_uses_one_buffer():
    plan = plan_memory(_chain())
    plan.check()
    assert plan.arena_bytes == plan.lower_bound == 1024
    assert plan.tensor("n1_out").inplace_of == "n0_out"
    assert plan.tensor("n2_out").inplace_of == "n1_out"
    assert {t.offset for t in plan.tensors} == {0}


def test_no_inplace_over_an_input_that_is_read_later():
    b = GraphBuilder()
    x = b.input("x", (256,))
    a = b.op("Exp", [x], name="a")
    n = b.op("Neg", [a], name="n")
    y = b.op("Add", [n, a], name="add")  # a is still needed after Neg
    plan = plan_memory(b.graph([y]))
    plan.check()
    assert plan.tensor("n_out").inplace_of is None
    assert plan.tensor("n_out").offset != plan.tensor("a_out").offset


def test_no_inplace_across_a_broadcast_or_a_non_elementwise_op():
    b = GraphBuilder()
    x = b.input("x", (4, 4))
    a = b.op("Exp", [x], name="a")
    t = b.op("Transpose", [a], {"perm": (1, 0)}, name="t")  # reads a[j, i] for out[i, j]
    s = b.op("Exp", [b.input("v", (4,))], name="s")
    m = b.op("Mul", [t, s], name="m")  # s (4,) broadcasts: not same-index
    y = b.op("Relu", [m], name="y")
    plan = plan_memory(b.graph([y]))
    plan.check()
    assert plan.tensor("t_out").inplace_of is None
    assert plan.tensor("m_out").inplace_of == "t_out"  # same shape as t: allowed


def test_fused_conv_add_relu_may_write_over_its_residual_but_not_its_conv_input():
    b = GraphBuilder()
    x = b.input("x", (1, 4, 8, 8))
    r = b.op("Relu", [x], name="pre")
    c = b.op("Conv", [r, b.weight("w", (4, 4, 3, 3))], {"pads": (1, 1, 1, 1)}, name="c1")
    c2 = b.op("Conv", [c, b.weight("w2", (4, 4, 3, 3))], {"pads": (1, 1, 1, 1)}, name="c2")
    s = b.op("Add", [c2, r], name="add")
    y = b.op("Flatten", [b.op("Relu", [s], name="relu")], name="out")
    g = fuse(b.graph([y]))
    plan = plan_memory(g)
    plan.check()
    by_step = {t.first: t for t in plan.tensors}
    block = by_step[2]  # conv2 + add + relu writes over the residual (pre's output)
    assert block.inplace_of == "pre_out"
    assert by_step[1].inplace_of is None  # conv1 cannot write over its own input


def test_scratch_buffers_are_planned_at_their_step():
    g = _chain(3)
    plan = plan_memory(g, scratch={"n1": 3000}, inplace=False)
    plan.check()
    s = plan.tensor("n1:scratch")
    assert (s.kind, s.first, s.last, s.size) == ("scratch", 1, 1, 3000)
    # live at step 1: n0_out, n1_out and the 3008-byte (aligned) scratch
    assert plan.lower_bound == 1024 + 1024 + 3008 == plan.arena_bytes
    assert plan.naive_bytes == 2 * 1024 + 3008


def test_bad_scratch_node_and_alignment_are_option_errors():
    with pytest.raises(OptionError, match="scratch bytes given for 'nope', which are not "
                                          "nodes of graph 'g'"):
        plan_memory(_chain(), scratch={"nope": 10})
    with pytest.raises(OptionError, match="alignment 48 must be a power of two"):
        plan_memory(_chain(), alignment=48)


def test_alignment_is_respected():
    b = GraphBuilder()
    h = b.input("x", (3,))
    for i in range(4):
        h = b.op("Concat", [h, b.input(f"z{i}", (1,))], {"axis": 0}, name=f"cat{i}")
    plan = plan_memory(b.graph([h]), alignment=16)
    plan.check()
    assert all(t.offset % 16 == 0 for t in plan.tensors)
    assert plan.alignment == 16


def test_graph_inputs_outputs_and_constants_are_not_in_the_arena():
    b = GraphBuilder()
    x = b.input("x", (64,))
    a = b.op("Add", [x, b.weight("w", (64,))], name="a")
    y = b.op("Relu", [a], name="y")
    plan = plan_memory(b.graph([a, y]))
    assert plan.tensors == [] and plan.arena_bytes == 0


def test_views_of_a_graph_input_take_no_arena_and_are_never_written_over():
    b = GraphBuilder()
    x = b.input("x", (4, 16))
    f = b.op("Flatten", [x], {"axis": 0}, name="f")          # a view of x
    shape = Value.constant("s", np.array([64], np.int64))
    r = b.op("Reshape", [f, shape], name="r")                # a view of the view
    e = b.op("Relu", [r], name="e")                          # may not write over x's bytes
    y = b.op("Neg", [e], name="y")
    plan = plan_memory(b.graph([y]))  # unfused: one view kernel each
    plan.check()
    assert plan.views == {"f_out": "x", "r_out": "x"}
    assert all(t.inplace_of not in plan.views for t in plan.tensors)
    assert plan.arena_bytes == 256  # e alone (y is the caller's)
    assert plan.to_dict()["views"] == plan.views


def test_check_catches_overlapping_live_tensors():
    bad = MemoryPlan(128, 128, 128, 64, ["s0", "s1"], [
        TensorPlan("a", 64, 0, 0, 1), TensorPlan("b", 64, 32 + 32, 1, 1),
        TensorPlan("c", 64, 0, 1, 1)])
    with pytest.raises(PlanError, match="tensors 'a' .* and 'c' .* are live together and "
                                        "overlap"):
        bad.check()
    with pytest.raises(PlanError, match="misaligned or outside"):
        MemoryPlan(64, 64, 64, 64, ["s0"], [TensorPlan("a", 64, 32, 0, 0)]).check()


def test_plans_are_deterministic():
    g = run_pipeline(zoo_graph("mobilenet_v2")[0])
    assert plan_memory(g).to_dict() == plan_memory(g).to_dict()


@pytest.mark.parametrize("layout", ["nchw", "nchw8c"])
def test_zoo_arena_within_five_percent_of_the_lower_bound(layout, capsys):
    rows = []
    for name, spec in ZOO.items():
        if spec.slow:
            continue
        plan = plan_memory(run_pipeline(zoo_graph(name)[0], target_layout=layout))
        plan.check()
        assert plan.lower_bound <= plan.arena_bytes <= 1.05 * plan.lower_bound, name
        assert plan.arena_bytes <= plan.naive_bytes
        rows.append(f"{name:26s} {plan.arena_bytes:>10,} {plan.lower_bound:>10,} "
                    f"{plan.naive_bytes:>10,}")
    with capsys.disabled():
        print(f"\nmemory plans ({layout}): model, arena, lower bound, naive (bytes)")
        print("\n".join(rows))


lifetimes = st.lists(
    st.tuples(st.integers(0, 5000), st.integers(0, 30), st.integers(0, 8)),
    min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(lifetimes, st.sampled_from([1, 16, 64]))
def test_random_lifetimes_always_give_a_valid_plan_above_the_bound(spec, alignment):
    tensors = [(f"t{i}", size, first, first + length)
               for i, (size, first, length) in enumerate(spec)]
    plan = plan_lifetimes(tensors, alignment=alignment, search_moves=50)
    plan.check()
    assert plan.lower_bound <= plan.arena_bytes <= plan.naive_bytes
    # the lower bound is exact: the busiest step really holds that many bytes
    step_bytes = [sum(-(-s // alignment) * alignment for _, s, f, last in tensors
                      if f <= k <= last) for k in range(40)]
    assert plan.lower_bound == max(step_bytes)


def test_local_search_improves_on_greedy_somewhere():
    rng = np.random.default_rng(3)
    better = 0
    for _ in range(10):
        tensors = [(f"t{i}", int(rng.integers(1, 5000)), int(f), int(f + rng.integers(0, 8)))
                   for i, f in enumerate(rng.integers(0, 60, 60))]
        greedy = plan_lifetimes(tensors, search_moves=0)
        searched = plan_lifetimes(tensors)
        searched.check()
        assert searched.arena_bytes <= greedy.arena_bytes
        better += searched.arena_bytes < greedy.arena_bytes
    assert better >= 1
