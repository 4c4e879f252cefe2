"""Fused-group kernels: every ``Fused`` node the graph pass pipeline makes from zoo models
(LeNet-5, ResNet-8, MobileNetV1, the transformer encoder) is built as one kernel with its
default schedule and compared with ``run_graph`` of its inner graph."""

from __future__ import annotations

import hashlib
from functools import cache

import numpy as np
import pytest

from toolchain import te
from toolchain.driver import build
from toolchain.errors import UnsupportedError
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.ir import Graph, Node, Value
from toolchain.graph.passes.fused_op import fused_node
from toolchain.graph.passes.pipeline import run_pipeline
from toolchain.graph.reference import run_graph
from toolchain.schedules.generic.fused import FusedKernel, anchor_of, schedule_fused
from toolchain.schedules.generic.ops import CpuConfig, schedule_cpu
from toolchain.te.rebind import rebind
from toolchain.topi.registry import node_compute
from toolchain.zoo import ZOO

#: two cores and a low threshold, so the parallel paths run too
CFG = CpuConfig(vector_bits=256, cores=2, parallel_min_work=64)


@cache
def fused_nodes(model: str) -> tuple[Node, ...]:
    graph = run_pipeline(from_onnx(ZOO[model].build()))
    return tuple(n for n in graph.nodes if n.op == "Fused")


def generic_anchor(anchor: Node, target: object) -> object:
    """Schedule an anchor (conv, dense, matmul) with the generic scheduler, so the
    anchor-plus-tail path is exercised whatever the registry holds."""
    nc = node_compute(anchor)
    return schedule_cpu(te.create_prim_func(list(nc.inputs) + list(nc.outputs)), target)


def run_kernel(node: Node, kernel: FusedKernel, seed: int = 0) -> float:
    """Build ``kernel``, run it on random inputs; max relative error vs ``run_graph``."""
    inner: Graph = node.attrs["graph"]
    rng = np.random.default_rng(seed)
    feeds = []
    for v in kernel.input_values:
        if v.data is not None:
            a = np.asarray(v.data)
        elif v.dtype.startswith("float"):
            a = rng.standard_normal(v.shape).astype(v.dtype)
        else:
            a = rng.integers(0, 3, v.shape).astype(v.dtype)
        feeds.append(np.ascontiguousarray(a).reshape(v.shape or (1,)))
    outs = [np.zeros(v.shape or (1,), v.dtype) for v in kernel.output_values]
    build(kernel.schedule, extra_flags=["-Wall", "-Wextra", "-Werror"])(*feeds, *outs)
    ref = run_graph(inner, {v.name: a.reshape(v.shape) for v, a in
                            zip(kernel.input_values, feeds, strict=True)
                            if any(v is w for w in inner.inputs)})
    worst = 0.0
    for v, o in zip(kernel.output_values, outs, strict=True):
        w = ref[v.name]
        o = o.reshape(w.shape)
        if o.dtype.kind == "f":
            worst = max(worst, float(np.abs(o - w).max() / max(1e-6, float(np.abs(w).max()))))
        else:
            worst = max(worst, float((o != w).sum()))
    return worst


def group_key(node: Node) -> str:
    """What a ``Fused`` node's kernel is made from, all but its names: the pattern, each
    inner node's op, attributes, input and output types, where each input comes from (a
    group input, an earlier node's output, a constant) and every constant's bytes (hashed). Two
    groups with the same key schedule to the same kernel but for its names, and
    :func:`run_kernel` feeds them the same data (same shapes, same seed)."""
    g: Graph = node.attrs["graph"]
    ids = {v.name: f"in{i}" for i, v in enumerate(g.inputs)}
    parts: list[object] = [node.attrs["pattern"]]
    for j, n in enumerate(g.nodes):
        ins = []
        for v in n.inputs:
            if v is None:
                ins.append(None)
                continue
            ids.setdefault(v.name, f"c{len(ids)}")
            data = None if v.data is None else hashlib.sha256(
                np.ascontiguousarray(v.data).tobytes()).hexdigest()
            ins.append((ids[v.name], v.shape, v.dtype, data))
        ids.update((o.name, f"n{j}.{k}") for k, o in enumerate(n.outputs))
        parts.append((n.op, repr(sorted(n.attrs.items())), ins,
                      [(o.shape, o.dtype) for o in n.outputs]))
    parts.append([ids.get(v.name) for v in g.outputs])
    return repr(parts)


def _check_model(model: str, anchor_scheduler: object = None) -> list[str]:
    """Build and check every distinct group of ``model`` (MobileNetV1's 32 groups hold 24
    distinct ones, the transformer's 29 hold 14: repeated layers with equal constants).
    With an ``anchor_scheduler``, only the groups that have an anchor: it schedules
    nothing else, so the others' kernels are those the default path's test of the same
    model builds (the transformer's 8 of its 14, two of LeNet-5's and of ResNet-8's)."""
    kinds = []
    seen: set[str] = set()
    for node in fused_nodes(model):
        key = group_key(node)
        if key in seen or (anchor_scheduler is not None and anchor_of(node) is None):
            continue
        seen.add(key)
        kernel = schedule_fused(node, "c-generic", anchor_scheduler=anchor_scheduler,
                                config=CFG)
        err = run_kernel(node, kernel)
        assert err <= 1e-4, (f"{model} {node.attrs['kernel']} "
                             f"({[n.op for n in node.attrs['graph'].nodes]}): max rel err {err}")
        kinds.append(node.attrs["pattern"])
    return kinds


@pytest.mark.parametrize("model", ["lenet5", "resnet8"])
def test_zoo_fused_kernels_match_reference(model: str) -> None:
    kinds = _check_model(model)
    assert {"complex-out-fusable", "injective", "opaque"} <= set(kinds)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["mobilenet_v1", "transformer_encoder"])
def test_zoo_fused_kernels_match_reference_large(model: str) -> None:
    _check_model(model)


@pytest.mark.parametrize("model", ["lenet5", "resnet8"])
def test_anchor_plus_tail_path(model: str) -> None:
    """conv/dense scheduled on their own, the elementwise tail appended and fused in."""
    assert "complex-out-fusable" in _check_model(model, anchor_scheduler=generic_anchor)


@pytest.mark.slow
def test_anchor_plus_tail_path_transformer() -> None:
    assert "complex-out-fusable" in _check_model("transformer_encoder",
                                                 anchor_scheduler=generic_anchor)


def test_conv_bias_relu_tail_is_inlined_into_the_anchor_output() -> None:
    node = next(n for n in fused_nodes("resnet8") if n.attrs["kernel"].endswith("add_relu_2"))
    kernel = schedule_fused(node, "c-generic", anchor_scheduler=generic_anchor, config=CFG)
    assert kernel.anchor is not None and kernel.anchor.op == "Conv"
    assert any("inlined into" in note for note in kernel.notes), kernel.notes
    assert not any(b.endswith("relu") for b in kernel.block_names())  # no separate pass
    assert run_kernel(node, kernel) <= 1e-4


def test_injective_chain_is_one_loop_nest() -> None:
    x, b = Value("x", (3, 40), "float32"), Value("b", (40,), "float32")
    y, z, w = (Value(n, (3, 40), "float32") for n in "yzw")
    inner = Graph("fused_add_relu_neg_0", [x, b], [w],
                  [Node("Add", "add", [x, b], [y]), Node("Relu", "relu", [y], [z]),
                   Node("Neg", "neg", [z], [w])])
    node = fused_node(inner, "injective", [x, b])
    kernel = schedule_fused(node, "c-generic")
    (block,) = kernel.block_names()  # add and relu inlined into the last stage
    assert block.endswith("negative")
    assert kernel.func.name == "fused_add_relu_neg_0"
    assert run_kernel(node, kernel) <= 1e-6


def test_group_output_that_is_an_input_is_copied() -> None:
    x = Value("x", (5,), "float32")
    y = Value("y", (5,), "float32")
    inner = Graph("fused_identity_0", [x], [y], [Node("Identity", "id", [x], [y])])
    node = fused_node(inner, "injective", [x])
    assert run_kernel(node, schedule_fused(node, "c-generic")) == 0.0


def test_rebind_replaces_placeholders_in_reductions() -> None:
    a = te.placeholder((4, 8), name="a")
    k = te.reduce_axis((0, 8), name="k")
    s = te.compute((4,), lambda i: te.sum(a[i, k], axis=k), name="s")
    c = te.compute((4, 8), lambda i, j: a[i, j] * 2.0, name="c")
    (s2,) = rebind([s], {id(a.buffer): c})
    assert "c[i, k]" in str(s2.op.body.source) and s2 is not s
    assert rebind([s], {})[0] is s  # nothing to replace: the same tensor


def test_not_a_fused_node_is_refused() -> None:
    x, y = Value("x", (2,), "float32"), Value("y", (2,), "float32")
    with pytest.raises(UnsupportedError, match="needs a 'Fused' node.*got op 'Relu'"):
        schedule_fused(Node("Relu", "r", [x], [y]), "c-generic")
