"""The memory planner's overlap pairs (``plan_memory(..., overlap=...)``): an output placed
its kernel's declared lead before its input, checked by ``MemoryPlan.check``."""

from __future__ import annotations

import dataclasses
import random

import pytest

from toolchain.errors import OptionError
from toolchain.graph.ir import Graph, Node, Value
from toolchain.graph.memory import PlanError, plan_memory, replan


def _chain(shapes: list[tuple[int, ...]]) -> Graph:
    """x -> Neg -> t0 -> Conv -> t1 -> ... -> Neg -> y (int8; t_i of ``shapes``)."""
    x = Value("x", shapes[0], "int8")
    ts = [Value(f"t{i}", s, "int8") for i, s in enumerate(shapes)]
    y = Value("y", shapes[-1], "int8")
    nodes = [Node("Neg", "n0", [x], [ts[0]])]
    nodes += [Node("Conv", f"c{i}", [ts[i - 1]], [ts[i]]) for i in range(1, len(ts))]
    nodes.append(Node("Neg", "n1", [ts[-1]], [y]))
    return Graph("g", [x], [y], nodes)


def test_an_output_starts_its_lead_before_its_input() -> None:
    g = _chain([(1, 8, 8, 8), (1, 16, 8, 8)])  # 512 B -> 1024 B
    base = plan_memory(g)
    plan = plan_memory(g, overlap={"c1": ("t0", 256)})
    plan.check()
    t0, t1 = plan.tensor("t0"), plan.tensor("t1")
    assert (t1.inplace_of, t1.lead) == ("t0", 256) and t1.offset == t0.offset - 256
    assert base.arena_bytes == 1536 and plan.arena_bytes == plan.lower_bound == 1024
    assert replan(plan.tensors, overlap=False).arena_bytes == base.arena_bytes


def test_a_chain_of_overlaps_keeps_the_leads_that_help() -> None:
    """A shrinking then growing chain (stride-2 depthwise, then pointwise): t1 inside t0,
    t2 from t1's start (parts of one buffer); t3 64 B before t2 would grow that buffer past
    t0's 1,024 B for its whole life, so that overlap is not taken."""
    g = _chain([(1, 16, 8, 8), (1, 16, 4, 4), (1, 32, 4, 4), (1, 32, 4, 4)])
    leads = {"c1": ("t0", 0), "c2": ("t1", 0), "c3": ("t2", 64)}
    plan = plan_memory(g, overlap=leads)
    plan.check()
    for node, src in (("c1", "t0"), ("c2", "t1")):
        out = plan.tensor(f"t{node[1]}")
        assert (out.inplace_of, out.offset) == (src, plan.tensor(src).offset)
    assert plan.tensor("t3").inplace_of is None
    assert plan.arena_bytes == 1024
    assert plan_memory(g).arena_bytes == 1280  # t0 and t1 live together
    alone = plan_memory(g, overlap={"c3": ("t2", 64)})  # no help alone: the plain plan
    assert alone.to_dict() == plan_memory(g).to_dict()


def test_an_input_read_later_is_not_overlapped() -> None:
    """The input must die at the step: a second reader keeps it whole, and a plan that
    gains nothing keeps no overlap pair (the same plan as without)."""
    x = Value("x", (1, 8, 8, 8), "int8")
    a, b, y = (Value(n, s, "int8") for n, s in (("a", (1, 8, 8, 8)), ("b", (1, 16, 8, 8)),
                                                 ("y", (1, 16, 8, 8))))
    g = Graph("g", [x], [y], [Node("Neg", "n0", [x], [a]), Node("Conv", "c", [a], [b]),
                              Node("Mul", "m", [b, a], [y])])
    plan = plan_memory(g, overlap={"c": ("a", 0)})
    assert plan.tensor("b").inplace_of is None
    assert plan.to_dict() == plan_memory(g).to_dict()


def test_check_refuses_an_output_away_from_its_declared_lead() -> None:
    g = _chain([(1, 8, 8, 8), (1, 16, 8, 8)])
    plan = plan_memory(g, overlap={"c1": ("t0", 256)})
    moved = dataclasses.replace(plan.tensor("t1"), offset=plan.tensor("t1").offset + 64)
    plan.tensors = [moved if t.name == "t1" else t for t in plan.tensors]
    plan.arena_bytes += 64
    with pytest.raises(PlanError, match="the offset its kernel declared"):
        plan.check()
    plan.tensors = [dataclasses.replace(t, inplace_of=None, lead=0) for t in plan.tensors]
    with pytest.raises(PlanError, match="are live together and overlap"):
        plan.check()


def test_bad_overlaps_are_named() -> None:
    g = _chain([(1, 8, 8, 8), (1, 16, 8, 8)])
    with pytest.raises(OptionError, match="multiple of the alignment 64"):
        plan_memory(g, overlap={"c1": ("t0", 100)})
    with pytest.raises(OptionError, match="'nope'"):
        plan_memory(g, overlap={"nope": ("t0", 0)})


@pytest.mark.parametrize("seed", range(6))
def test_random_chains_with_overlaps_check_and_never_grow(seed: int) -> None:
    """Random branchy int8 graphs with random overlap leads: every plan is valid, at least
    its lower bound, and not larger than the plan without the overlaps."""
    rng = random.Random(seed)
    x = Value("x", (1, 4, 8, 8), "int8")
    values, nodes, leads = [x], [], {}
    for i in range(14):
        shape = (1, rng.choice((2, 4, 8, 16)), 8, 8)
        out = Value(f"t{i}", shape, "int8")
        srcs = rng.sample(values[-3:], k=min(len(values[-3:]), rng.choice((1, 1, 2))))
        nodes.append(Node("Conv" if len(srcs) == 1 else "Concat", f"n{i}", srcs, [out]))
        if len(srcs) == 1 and srcs[0] is not x:
            leads[f"n{i}"] = (srcs[0].name, 64 * rng.randrange(0, 17))
        values.append(out)
    g = Graph("g", [x], [values[-1]], nodes)
    plan = plan_memory(g, overlap=leads)
    plan.check()
    assert plan.lower_bound <= plan.arena_bytes <= plan_memory(g).arena_bytes
    again = replan(plan.tensors)
    again.check()
