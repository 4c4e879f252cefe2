"""Execution-order search (toolchain.graph.order): valid orders, never worse than the file's,
the liveness bound the planner really gets, the optimum on small graphs (brute force over
every topological order), results unchanged when run from the arena in the new order, and
bounded work on large graphs."""

from __future__ import annotations

import numpy as np
import pytest

from tests.graph.passes.test_memory_arena import run_in_arena
from tests.graph.passes.test_random_graphs import random_graph
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.ir import Graph, Node, Value
from toolchain.graph.memory import PlanError, plan_memory
from toolchain.graph.order import (
    BEAM,
    STATE_BUDGET,
    order_peak,
    order_peaks,
    plan_in_best_order,
    reorder,
    schedule_for_memory,
    search_order,
)
from toolchain.graph.passes import run_pipeline
from toolchain.graph.reference import run_graph
from toolchain.zoo import DEMOS, ZOO

MODELS = {**ZOO, **DEMOS}


def _fused(name: str, layout: str = "nchw") -> Graph:
    spec = MODELS[name]
    return run_pipeline(from_onnx(spec.build(), input_shapes=spec.input_shapes),
                        target_layout=layout)


def _is_topological(graph: Graph, order: tuple[int, ...]) -> bool:
    ready = set(graph.inputs)
    for i in order:
        node = graph.nodes[i]
        if any(v is not None and not v.is_constant and v not in ready for v in node.inputs):
            return False
        ready.update(node.outputs)
    return sorted(order) == list(range(len(graph.nodes)))


# -- the zoo ---------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["nchw", "nchw8c"])
def test_zoo_orders_are_topological_never_worse_and_what_the_planner_gets(layout):
    for name in MODELS:
        fused = _fused(name, layout)
        scratch = {n.name: 4096 * (i % 3) for i, n in enumerate(fused.nodes)}
        found = search_order(fused, scratch=scratch)
        assert _is_topological(fused, found.order), name
        assert found.peak <= found.file_peak, name
        # the search's bytes are the planner's lower bound, in both orders
        file_plan = plan_memory(fused, scratch=scratch)
        assert found.file_peak == file_plan.lower_bound, name
        ordered = reorder(fused, found.order)
        assert found.peak == plan_memory(ordered, scratch=scratch).lower_bound, name
        best, plan = plan_in_best_order(fused, scratch=scratch)
        plan.check()
        assert plan.arena_bytes <= plan.file_arena_bytes == file_plan.arena_bytes, name
        assert plan.file_lower_bound == file_plan.lower_bound, name
        assert plan.steps == [n.name for n in best.nodes], name


def test_interleaved_branches_run_one_branch_after_the_other():
    fused = _fused("interleaved_branches")
    found = search_order(fused)
    assert found.exact and found.changed
    assert (found.file_peak, found.peak) == (524_288, 294_912)  # 3 x 128 KiB + 2 x 128 KiB
    best, plan = plan_in_best_order(fused)
    assert (plan.file_arena_bytes, plan.arena_bytes) == (524_288, 294_912)
    assert plan.order_search["changed"] and "searched node order" in plan.summary()
    # one branch after the other: each convolution but a branch's first reads the one before
    convs = best.nodes[:9]
    for prev, node in zip(convs, convs[1:], strict=False):
        reads = [v for v in node.inputs if not v.is_constant]
        assert reads == list(best.inputs) or reads == list(prev.outputs), node.name


def test_the_new_order_computes_the_same_from_its_arena():
    spec = DEMOS["interleaved_branches"]
    model = spec.build()
    graph = from_onnx(model)
    inputs = spec.inputs(model)
    best, plan = plan_in_best_order(run_pipeline(graph))
    assert plan.order_search["changed"]
    got = run_in_arena(best, plan, inputs)
    for name, value in run_graph(graph, inputs).items():
        np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("seed", range(12))
def test_random_graphs_compute_the_same_from_the_arena_in_the_searched_order(seed):
    graph = random_graph(seed)
    fused = run_pipeline(graph)
    scratch = {n.name: 64 for n in fused.nodes[::2]}
    best, plan = plan_in_best_order(fused, scratch=scratch, alignment=16)
    plan.check()
    rng = np.random.default_rng(seed)
    inputs = {v.name: rng.standard_normal(v.shape).astype(np.float32) for v in graph.inputs}
    got = run_in_arena(best, plan, inputs)
    for name, value in run_graph(fused, inputs).items():
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6)


def test_search_is_deterministic():
    fused = _fused("interleaved_branches")
    assert search_order(fused) == search_order(fused)
    assert [n.name for n in schedule_for_memory(fused).nodes] == \
        [n.name for n in schedule_for_memory(_fused("interleaved_branches")).nodes]


# -- small graphs: brute force ---------------------------------------------------------------
def _tiny_graph(seed: int, n_nodes: int = 8) -> tuple[Graph, dict[str, int], dict[str, set]]:
    """Up to ``n_nodes`` nodes on 1-D tensors: element-wise ops (in place), views (Reshape of
    the input or of an arena tensor), MatMul-like ops with fresh sizes, a two-output Split,
    a Conv that declares it overwrites its input, dead outputs, several graph outputs."""
    rng = np.random.default_rng(seed)
    x = Value("x", (64,), "float32")
    pool, nodes, scratch, overwrite = [x], [], {}, {}
    sizes = [16, 64, 256, 1024]

    def fresh(shape):
        return Value(f"v{len(nodes)}_{rng.integers(1 << 30)}", shape, "float32")

    def pick():
        return pool[int(rng.integers(len(pool)))]

    while len(nodes) < n_nodes:
        kind = int(rng.integers(6))
        name = f"n{len(nodes)}"
        a = pick()
        if kind == 0:
            outs = [fresh(a.shape)]
            node = Node(str(rng.choice(["Exp", "Relu"])), name, [a], outs)
        elif kind == 1:
            b = pick()
            outs = [fresh(max(a.shape, b.shape, key=lambda s: s[0]))]
            node = Node("Add", name, [a, b], outs)
        elif kind == 2:
            outs = [fresh((int(rng.choice(sizes)),))]
            node = Node("MatMul", name, [a, pick()][:1 + int(rng.integers(2))], outs)
        elif kind == 3:
            outs = [fresh((int(rng.choice(sizes)),)), fresh((int(rng.choice(sizes)),))]
            node = Node("Split", name, [a], outs)
        elif kind == 4:
            outs = [fresh(a.shape)]
            node = Node("Reshape", name, [a, Value.constant(f"s{name}", [a.shape[0]])], outs)
        else:
            outs = [fresh(a.shape)]
            node = Node("Conv", name, [a], outs)
            overwrite[name] = {a.name}
        if rng.random() < 0.3:
            scratch[name] = int(rng.choice(sizes))
        nodes.append(node)
        pool.extend(outs)
    produced = [v for n in nodes for v in n.outputs]
    outputs = [produced[-1]] + [v for v in produced[:-1] if rng.random() < 0.15]
    return Graph(f"tiny{seed}", [x], outputs, nodes), scratch, overwrite


def _all_orders(graph: Graph):
    preds = []
    producer = {v: i for i, n in enumerate(graph.nodes) for v in n.outputs}
    for n in graph.nodes:
        preds.append({producer[v] for v in n.inputs if v is not None and v in producer})

    def walk(done: list[int]):
        if len(done) == len(graph.nodes):
            yield tuple(done)
            return
        for i in range(len(graph.nodes)):
            if i not in done and preds[i] <= set(done):
                done.append(i)
                yield from walk(done)
                done.pop()

    yield from walk([])


@pytest.mark.parametrize("seed", range(40))
def test_exact_search_finds_the_brute_force_optimum(seed):
    graph, scratch, overwrite = _tiny_graph(seed)
    kw = {"scratch": scratch, "overwrite": overwrite, "alignment": 16}
    orders = list(_all_orders(graph))
    peaks = order_peaks(graph, orders, **kw)  # the graph analysed once for every order
    found = search_order(graph, **kw)
    assert found.exact
    assert _is_topological(graph, found.order)
    assert found.peak == min(peaks), (seed, found, min(peaks))
    assert found.file_peak == peaks[orders.index(tuple(range(len(graph.nodes))))]
    assert found.changed == (found.peak < found.file_peak)
    # the bytes counted are the planner's: its lower bound in a few of the orders
    for o in orders[:: max(1, len(orders) // 6)] + [found.order]:
        plan = plan_memory(reorder(graph, o), **kw)
        plan.check()
        assert plan.lower_bound == order_peak(graph, o, **kw), (seed, o)
        assert order_peak(graph, o, **kw) == peaks[orders.index(tuple(o))], (seed, o)


def test_reorder_refuses_an_order_that_is_not_topological():
    graph, _, _ = _tiny_graph(1, 4)
    with pytest.raises(PlanError, match="before the node that produces"):
        reorder(graph, [3, 2, 1, 0])
    with pytest.raises(PlanError, match="not a permutation"):
        reorder(graph, [0, 0, 1, 2])


# -- large graphs: bounded work --------------------------------------------------------------
def _chain_with_branches(n: int) -> Graph:
    """``n`` nodes: a chain where every fourth node forks into two short branches (of sizes
    the exporter interleaved badly) that an Add joins."""
    x = Value("x", (256,), "float32")
    cur, nodes = x, []
    while len(nodes) < n - 4:
        k = len(nodes)
        a, b = Value(f"a{k}", (1024,), "float32"), Value(f"b{k}", (1024,), "float32")
        a2, b2 = Value(f"c{k}", (256,), "float32"), Value(f"d{k}", (256,), "float32")
        y = Value(f"y{k}", (256,), "float32")
        nodes += [Node("MatMul", f"ma{k}", [cur], [a]), Node("MatMul", f"mb{k}", [cur], [b]),
                  Node("MatMul", f"ra{k}", [a], [a2]), Node("MatMul", f"rb{k}", [b], [b2]),
                  Node("Add", f"j{k}", [a2, b2], [y])]
        cur = y
    return Graph("chain", [x], [cur], nodes)


def _two_chains(n: int) -> Graph:
    """Two chains of ``n // 2`` nodes from one input to one Add: no node splits them."""
    x = Value("x", (64,), "float32")
    nodes, ends = [], []
    for branch in "ab":
        cur = x
        for k in range(n // 2 - 1):
            big = 1024 if k % 7 == 3 else 64
            y = Value(f"{branch}{k}", (big,), "float32")
            nodes.append(Node("MatMul", f"m{branch}{k}", [cur], [y]))
            cur = y
        ends.append(cur)
    nodes = [n for pair in zip(nodes[:len(nodes) // 2], nodes[len(nodes) // 2:],
                               strict=True) for n in pair]  # interleaved, as exported
    y = Value("y", (64,), "float32")
    return Graph("two", [x], [y], [*nodes, Node("Add", "join", ends, [y])])


def test_a_2000_node_chain_with_branches_splits_into_small_parts():
    graph = _chain_with_branches(2000)
    found = search_order(graph)
    assert _is_topological(graph, found.order)
    assert found.exact and found.segments >= len(graph.nodes) // 5
    assert found.peak < found.file_peak
    assert found.states <= 20 * found.segments  # each part is a small diamond


def test_two_long_chains_fall_back_to_the_beam_with_bounded_states():
    graph = _two_chains(2000)
    found = search_order(graph)
    assert _is_topological(graph, found.order)
    assert found.peak <= found.file_peak
    assert not found.exact  # too many interleavings: the beam kept the best
    assert found.states <= STATE_BUDGET + 1 < len(graph.nodes) * BEAM  # a narrower beam
    small = search_order(graph, beam=4)
    assert small.states <= len(graph.nodes) * 4 + 1 and small.peak <= small.file_peak


def _independent_pairs(k: int) -> Graph:
    """``k`` independent Exp -> GlobalAveragePool pairs (each its own output), written
    interleaved: every pair's big intermediate is live at once in the file order."""
    firsts, seconds, xs, ys = [], [], [], []
    for i in range(k):
        x, a = Value(f"x{i}", (1, 16, 8, 8), "float32"), Value(f"a{i}", (1, 16, 8, 8), "float32")
        y = Value(f"y{i}", (1, 16, 1, 1), "float32")
        firsts.append(Node("Exp", f"e{i}", [x], [a]))
        seconds.append(Node("GlobalAveragePool", f"p{i}", [a], [y]))
        xs.append(x)
        ys.append(y)
    return Graph("pairs", xs, ys, [*firsts, *seconds])


def test_independent_components_are_searched_apart_and_run_one_after_another():
    """Parts that share nothing (node cases built as one bundle): each component alone,
    the optimum (one intermediate live), a few states instead of the product's beam."""
    graph = _independent_pairs(24)
    found = search_order(graph)
    assert _is_topological(graph, found.order)
    assert found.file_peak == 24 * 4096 and found.peak == 4096
    assert found.exact and found.segments == 48 and found.states <= 4 * 24
    assert [graph.nodes[i].name for i in found.order[:4]] == ["e0", "p0", "e1", "p1"]
    # in order already: unchanged
    ordered = reorder(graph, found.order)
    again = search_order(ordered)
    assert not again.changed and again.peak == 4096
