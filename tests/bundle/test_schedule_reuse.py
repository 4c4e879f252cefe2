"""Equal fused groups are scheduled once (``toolchain.bundle.reuse``), yet every kernel is
called with its own weights, packed by the same packing, and outputs stay exact; groups
that differ in a baked constant, or whose schedule may read weight values, are not shared.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import helper

import toolchain.bundle.compiler as compiler
from tests.bundle.helpers import (
    assert_matches,
    clip_softmax_clip,
    compile_run,
    make_model,
    random_inputs,
    run_ort,
)
from toolchain.bundle import compile_model
from toolchain.bundle.reuse import group_key
from toolchain.schedules import registry
from toolchain.schedules.generic import dense

F = np.float32


@pytest.fixture
def schedule_calls(monkeypatch):
    """The nodes ``_schedule`` was called for, in order."""
    seen: list[str] = []
    orig = compiler._schedule

    def counted(node, target, cache):
        seen.append(node.name)
        return orig(node, target, cache)

    monkeypatch.setattr(compiler, "_schedule", counted)
    return seen


def _blocks(n: int = 3, d: int = 16, conv: bool = True):
    """x -> n x (Conv+Relu) -> Flatten -> n x (MatMul+Add+Relu) -> y, every layer with its
    own random weights: n equal conv groups and n equal dense groups."""
    rng = np.random.default_rng(7)
    nodes, inits, prev = [], {}, "x"
    if conv:
        for i in range(n):
            inits[f"w{i}"] = (rng.standard_normal((4, 4, 3, 3)) * 0.3).astype(F)
            inits[f"b{i}"] = rng.standard_normal(4).astype(F)
            nodes += [helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"],
                                       pads=[1, 1, 1, 1]),
                      helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
            prev = f"r{i}"
    nodes.append(helper.make_node("Reshape", [prev, "shape"], ["flat"]))
    inits["shape"] = np.array([4, d], np.int64)
    prev = "flat"
    for i in range(n):
        inits[f"m{i}"] = (rng.standard_normal((d, d)) / 4).astype(F)
        inits[f"a{i}"] = rng.standard_normal(d).astype(F)
        nodes += [helper.make_node("MatMul", [prev, f"m{i}"], [f"mm{i}"]),
                  helper.make_node("Add", [f"mm{i}", f"a{i}"], [f"ad{i}"]),
                  helper.make_node("Relu", [f"ad{i}"], [f"d{i}"])]
        prev = f"d{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    return make_model(nodes, {"x": (F, [1, 4, 4, 4])}, {"y": (F, [4, d])}, inits)


@pytest.mark.parametrize("target", ["c-generic", "x86_64-avx512"])
def test_repeated_blocks_schedule_once_with_own_weights(tmp_path, target,
                                                        schedule_calls) -> None:
    model = _blocks()
    inputs = random_inputs(model, seed=3)
    bundle, got = compile_run(model, tmp_path, inputs, target=target)
    assert_matches(got, run_ort(model, inputs))
    meta = json.loads((bundle / "metadata.json").read_text())
    names = [k["name"] for k in meta["kernels"]]  # 3 conv, 3 dense, reshape, layout
    assert len(schedule_calls) == len(set(names)) == len(names) - 4
    kernels = [k for k in meta["kernels"] if not k["elided"]]
    for ops in ({"Conv", "LayoutConv"}, {"MatMul", "Gemm"}):
        group = [k for k in kernels if ops & set(k["ops"])]
        assert len(group) == 3 and len({k["name"] for k in group}) == 1
        # one function, three calls, each with its own (packed) weights
        assert len({tuple(k["inputs"]) for k in group}) == 3


def test_reused_schedule_gives_the_bundle_of_scheduling_every_group(
        tmp_path, monkeypatch) -> None:
    """Byte for byte: the reuse changes how long a compile takes, not what it writes."""
    model = _blocks()
    compile_model(model, "x86_64-avx512", tmp_path / "reuse", name="m")
    monkeypatch.setattr(compiler.ScheduleReuse, "find", lambda self, node: None)
    compile_model(model, "x86_64-avx512", tmp_path / "every", name="m")
    for f in sorted((tmp_path / "every").rglob("*")):
        if f.is_file():
            assert f.read_bytes() == (tmp_path / "reuse" / f.relative_to(
                tmp_path / "every")).read_bytes(), f.name


@pytest.mark.parametrize("hi2", [6.0, 4.0])
def test_groups_differing_in_a_baked_constant_are_scheduled_apart(tmp_path, hi2,
                                                                  schedule_calls) -> None:
    model, inputs = clip_softmax_clip(hi2)
    _, got = compile_run(model, tmp_path, inputs)
    assert_matches(got, run_ort(model, inputs))
    assert len(schedule_calls) == (2 if hi2 == 6.0 else 3)


def test_a_schedule_that_may_read_weights_is_not_shared_across_weights(
        tmp_path, schedule_calls) -> None:
    """A MatMul schedule not marked value-blind: groups with different weights are each
    scheduled (their weights are part of the match); the results stay exact."""

    def unmarked(node, target):
        return dense.schedule_dense(node, target)

    for op in ("MatMul", "Gemm"):
        registry.register_schedule(op, "x86")(unmarked)
    try:
        model = _blocks(conv=False)
        inputs = random_inputs(model, seed=3)
        _, got = compile_run(model, tmp_path, inputs, target="x86_64-avx512")
    finally:
        for op in ("MatMul", "Gemm"):
            registry.unregister_schedule(op, "x86")
    assert_matches(got, run_ort(model, inputs))
    assert len([n for n in schedule_calls if "dense" in n]) == 3


def test_group_key_sees_constness_and_shapes_not_names() -> None:
    from toolchain.graph.ir import Graph, Node, Value
    from toolchain.graph.passes.fused_op import fused_node

    def group(name: str, n: int, const: bool):
        x, w, y = (Value("x", (n,), "float32"), Value("w", (n,), "float32"),
                   Value("y", (n,), "float32"))
        inner = Graph(name, [x, w], [y], [Node("Mul", "m", [x, w], [y])])
        wo = Value.constant("wo", np.ones(n, F)) if const else Value("wo", (n,), "float32")
        return fused_node(inner, "injective", [Value("xo", (n,), "float32"), wo])

    assert group_key(group("a", 4, True)) == group_key(group("b", 4, True))
    assert group_key(group("a", 4, True)) != group_key(group("a", 4, False))
    assert group_key(group("a", 4, True)) != group_key(group("a", 8, True))
