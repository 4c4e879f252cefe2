"""Execute fused zoo graphs *through the planned arena*: every intermediate tensor is stored
at its planned offset in one byte buffer and every kernel's scratch region is overwritten
with garbage at its step.  If the plan let two live tensors (or a live tensor and a
scratch buffer) share bytes, the results would differ from the reference executor."""

from __future__ import annotations

import numpy as np
import pytest

from tests.graph.passes.helpers import zoo_graph
from toolchain.graph.ir import Graph, Value, np_dtype
from toolchain.graph.memory import MemoryPlan, plan_memory
from toolchain.graph.passes import run_pipeline
from toolchain.graph.reference import run_graph, run_node
from toolchain.zoo import ZOO

FAST = [name for name, spec in ZOO.items() if not spec.slow]


def run_in_arena(graph: Graph, plan: MemoryPlan, inputs: dict[str, np.ndarray]
                 ) -> dict[str, np.ndarray]:
    arena = np.zeros(plan.arena_bytes, np.uint8)
    where = {t.name: t for t in plan.tensors}
    env: dict[str, np.ndarray] = {k: np.asarray(v) for k, v in inputs.items()}
    rng = np.random.default_rng(0)

    def read(v: Value) -> np.ndarray:
        if v.is_constant:
            return v.data
        if v.name in where:
            t = where[v.name]
            raw = arena[t.offset:t.offset + v.nbytes].copy()
            return raw.view(np_dtype(v.dtype)).reshape(v.shape)
        return env[v.name]

    for step, node in enumerate(graph.nodes):
        args = [None if v is None else read(v) for v in node.inputs]
        scratch = where.get(f"{node.name}:scratch")
        if scratch is not None:  # the kernel scribbles over its workspace
            arena[scratch.offset:scratch.offset + scratch.size] = rng.integers(
                0, 256, scratch.size, dtype=np.uint8)
        for out, array in zip(node.outputs, run_node(node, args), strict=True):
            if out.name in where:
                t = where[out.name]
                assert t.first == step
                arena[t.offset:t.offset + out.nbytes] = np.ascontiguousarray(array).view(
                    np.uint8).ravel()
            else:
                env[out.name] = array
    return {v.name: read(v) for v in graph.outputs}


@pytest.mark.parametrize("layout", ["nchw", "nchw8c"])
@pytest.mark.parametrize("model", FAST)
def test_zoo_model_runs_correctly_from_its_planned_arena(model, layout):
    graph, inputs = zoo_graph(model)
    fused = run_pipeline(graph, target_layout=layout)
    scratch = {n.name: 256 + 97 * i for i, n in enumerate(fused.nodes)}
    plan = plan_memory(fused, scratch=scratch, alignment=16)
    plan.check()
    expected = run_graph(fused, inputs)
    got = run_in_arena(fused, plan, inputs)
    for name, value in expected.items():
        # not bit-exact: BLAS sums in another order when the arena view is aligned
        # differently; a corrupted tensor (random bytes) would be off by far more
        scale = float(np.max(np.abs(value))) if value.dtype.kind == "f" else 0.0
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6 * scale,
                                   err_msg=f"{model}: output {name!r}")


def test_the_arena_run_notices_a_plan_that_overlaps_live_tensors():
    import dataclasses

    graph, inputs = zoo_graph("resnet8")
    fused = run_pipeline(graph)
    plan = plan_memory(fused, scratch={n.name: 512 for n in fused.nodes})
    broken = dataclasses.replace(plan, tensors=[dataclasses.replace(t, offset=0)
                                                for t in plan.tensors])
    expected = run_graph(fused, inputs)["logits"]
    got = run_in_arena(fused, broken, inputs)["logits"]
    assert not np.allclose(got, expected, rtol=1e-3)
