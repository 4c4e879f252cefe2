"""Tuning tasks: the tunable kernels of a model, or single ops for benchmarks and tests.

A :class:`Task` is one node on one target, with the :class:`~toolchain.autotune.space.Space`
its default schedule declared. :func:`extract_tasks` runs a model through the graph passes
and takes each fused kernel as the bundle compiles it: the ``Fused`` node (the anchor — a
conv or dense, weights bound — and its element-wise tail: bias, ReLU/Clip, residual Add;
with ``generic`` also a group the rule-driven schedule takes — softmax, layer norm, an
element-wise chain, pooling: the ``cpu_ops`` space) scheduled once with its default point,
collecting the anchor's space
(:func:`~toolchain.autotune.apply.declared`). A point is measured on that whole kernel
(the tail's write-back costs what the point makes it cost: a depthwise ``rw=1`` point is
as fast as the default alone, 30x slower with its Clip), and its record applies by the
anchor's workload key. Kernels with the same workload are one task whose ``weight``
counts them; where their tails differ, the task measures the tail most of them have.
The single-op tasks (:func:`conv_task`, :func:`depthwise_task`, :func:`dense_task`)
measure the op alone.

>>> t = dense_task(1, 64, 32, "c-generic")
>>> t.space.kind, t.weight, t.flops
('gemm', 1, 4096)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from toolchain.autotune.space import Space
from toolchain.target import Target, resolve_target


@dataclass
class Task:
    """One tunable kernel: ``node`` on ``target``, its ``space``, how many of the model's
    kernels share it (``weight``) and its FLOPs."""

    name: str
    node: Any
    target: Target
    space: Space
    weight: int = 1
    flops: int = 0


def task_of(node: Any, target: Any, name: str | None = None) -> Task | None:
    """The task of one node (None when its default schedule declares no space)."""
    from toolchain.autotune.apply import declared
    from toolchain.errors import KilnError
    from toolchain.schedules.registry import schedule_for

    t = resolve_target(target)
    with declared() as seen:
        try:
            schedule_for(node, t)
        except KilnError:
            return None
    if not seen:
        return None
    return Task(name or node.name, node, t, seen[-1], 1, _flops(node))


def _flops(node: Any) -> int:
    from toolchain.errors import KilnError
    from toolchain.graph.ops.registry import get_op

    try:
        return int(get_op(node.op).flops_of(node))
    except KilnError:
        return 0


def conv_task(x_shape: tuple[int, ...], out_channels: int, kernel: int, stride: int,
              target: Any, name: str | None = None, seed: int = 0) -> Task:
    """A Conv (``kernel // 2`` padding, bias, seeded random weights) as a task."""
    from toolchain.schedules import make_node

    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((out_channels, x_shape[1], kernel, kernel)) * 0.1
         ).astype(np.float32)
    b = rng.standard_normal(out_channels).astype(np.float32)
    attrs = {"strides": [stride, stride], "pads": [kernel // 2] * 4,
             "kernel_shape": [kernel, kernel]}
    node = make_node("Conv", [x_shape, w, b], attrs, name=name or "conv")
    task = task_of(node, target, name)
    if task is None:
        raise ValueError(f"conv {x_shape} -> {out_channels} k{kernel} s{stride}: its default "
                         "schedule declares no search space")
    return task


def depthwise_task(x_shape: tuple[int, ...], kernel: int, stride: int, target: Any,
                   name: str | None = None, seed: int = 0) -> Task:
    """A depthwise Conv (``group = C``, ``kernel // 2`` padding, bias) as a task. Its
    blocked schedule runs where the target computes in ``NCHW{b}c`` (AVX targets)."""
    from toolchain.schedules import make_node

    rng = np.random.default_rng(seed)
    c = x_shape[1]
    w = (rng.standard_normal((c, 1, kernel, kernel)) * 0.1).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    attrs = {"strides": [stride, stride], "pads": [kernel // 2] * 4, "group": c,
             "kernel_shape": [kernel, kernel]}
    node = make_node("Conv", [x_shape, w, b], attrs, name=name or "dwconv")
    task = task_of(node, target, name)
    if task is None:
        raise ValueError(f"depthwise conv {x_shape} k{kernel} s{stride}: no search space on "
                         "this target")
    return task


def dense_task(m: int, k: int, n: int, target: Any, name: str | None = None,
               seed: int = 0) -> Task:
    """A MatMul ``[m, k] @ W[k, n]`` (constant W) as a task."""
    from toolchain.schedules import make_node

    w = (np.random.default_rng(seed).standard_normal((k, n)) * 0.1).astype(np.float32)
    node = make_node("MatMul", [(m, k), w], name=name or "dense")
    task = task_of(node, target, name)
    if task is None:
        raise ValueError(f"dense {m}x{k}x{n}: its default schedule declares no search space")
    return task


def extract_tasks(model: Any, target: Any,
                  input_shapes: Mapping[str, tuple[int, ...]] | None = None,
                  precision: str = "fp32", generic: bool = False) -> list[Task]:
    """The tunable kernels of ``model`` (a path or ModelProto) on ``target``, heaviest
    (FLOPs x weight) first (on an accelerator target: its layers,
    :func:`toolchain.autotune.vta.extract_vta_tasks`); ``precision="fp16"``: of the model
    as ``kiln compile --precision fp16`` builds it (float16 inside: the CUDA tensor-core
    kernels); ``generic`` (``kiln tune --generic``): also the groups without a complex
    anchor (the ``cpu_ops`` space of the rule-driven schedule)."""
    from toolchain.frontend.onnx import from_onnx
    from toolchain.graph.passes import run_pipeline
    from toolchain.graph.passes.layout import layout_for_target
    from toolchain.schedules.generic.fused import anchor_of

    t = resolve_target(target)
    if t.is_accelerator:  # the accelerator's layers and their tiling spaces
        from toolchain.autotune.vta import extract_vta_tasks

        return extract_vta_tasks(model, t, input_shapes)
    source = str(model) if isinstance(model, str | Path) else model
    graph = from_onnx(source, input_shapes=dict(input_shapes or {}) or None)
    if precision == "fp16":
        from toolchain.graph.passes.precision import to_fp16

        graph = to_fp16(graph)
    fused = run_pipeline(graph, layout_for_target(t))
    # workload -> tail -> the kernels with that anchor workload and tail, in graph order
    groups: dict[str, dict[tuple[str, ...], list[Task]]] = {}
    for node in fused.nodes:
        if node.op != "Fused":
            continue
        anchor = anchor_of(node)
        # the whole group, scheduled as the bundle does (the anchor's schedule, its
        # weights bound, declares the space; the tail is moved into its output tile)
        task = task_of(node, t, node.attrs.get("kernel", node.name))
        if task is None or (task.space.kind == "cpu_ops" and not generic):
            continue
        task.flops = _flops(anchor) if anchor is not None else \
            sum(_flops(n) for n in node.attrs["graph"].nodes)
        groups.setdefault(task.space.workload, {}).setdefault(tail_of(node), []).append(task)
    tasks = []
    for by_tail in groups.values():
        # one record serves every kernel of the workload: time the tail most of them run
        # (max keeps the first tail seen among equals: deterministic)
        same = max(by_tail.values(), key=len)
        same[0].weight = sum(len(v) for v in by_tail.values())
        tasks.append(same[0])
    return sorted(tasks, key=lambda x: -(x.flops * x.weight))


def tail_of(node: Any) -> tuple[str, ...]:
    """The ops of a ``Fused`` node's inner graph, in order (anchor included): kernels with
    the same anchor workload and the same tail time alike."""
    return tuple(n.op for n in node.attrs["graph"].nodes)
