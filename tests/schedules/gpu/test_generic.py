"""The generic GPU schedule: every stage with more than one output element runs on many
threads, reductions accumulate in registers with their element-wise tail folded in, and
the launch shape respects the target's limits."""

from __future__ import annotations

import math

import pytest

from toolchain.frontend.onnx import from_onnx
from toolchain.graph.passes import run_pipeline
from toolchain.graph.passes.layout import layout_for_target
from toolchain.schedules.gpu.generic import THREADS, fused_schedule, threads_for
from toolchain.target import load_target
from toolchain.tir import ir
from toolchain.tir.schedule import state as st
from toolchain.zoo import ZOO

MODELS = [n for n, s in ZOO.items() if not s.slow]


def _blocks_and_their_loops(func: ir.PrimFunc):
    for node, path in st.walk(func.body):
        if isinstance(node, ir.BlockRealize) and node.block.name_hint != "root":
            yield node.block, [s for s in path if isinstance(s, ir.For)]


@pytest.mark.parametrize("name", MODELS)
def test_every_stage_with_many_outputs_runs_on_many_threads(name: str) -> None:
    t = load_target("cuda-sm90")
    spec = ZOO[name]
    fused = run_pipeline(from_onnx(spec.build(), input_shapes=spec.input_shapes),
                         layout_for_target(t))
    for node in fused.nodes:
        func = fused_schedule(node, t).schedule.mod
        for block, loops in _blocks_and_their_loops(func):
            spatial = math.prod(int(iv.dom.extent.value) for iv in block.iter_vars
                                if iv.iter_type == ir.IterType.SPATIAL)
            bound = [f for f in loops if f.kind == "thread_binding"]
            if spatial > 1:
                assert bound, f"{node.name}: block {block.name_hint} ({spatial} outputs) " \
                              "runs on one thread"
            threads = math.prod(int(f.extent.value) for f in bound
                                if f.thread_tag.startswith("threadIdx"))
            assert threads <= THREADS


def test_a_dense_layer_is_one_kernel_with_a_register_accumulator() -> None:
    t = load_target("cuda-sm80")
    fused = run_pipeline(from_onnx(ZOO["lenet5"].build()), layout_for_target(t))
    node = next(n for n in fused.nodes if "dense_relu" in n.attrs["kernel"])
    func = fused_schedule(node, t).schedule.mod
    text = str(func)
    assert 'scope="local"' in text  # the accumulator
    roots = st.root_block(func).body
    assert not isinstance(roots, ir.SeqStmt)  # one loop nest: one launch, relu included


def test_threads_divide_the_outputs_where_they_can() -> None:
    assert threads_for(4704, 256) == (224, True)
    assert threads_for(12288, 256) == (256, True)
    assert threads_for(4099, 256) == (256, False)  # a prime: the last block is guarded
