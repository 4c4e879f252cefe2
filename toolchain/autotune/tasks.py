"""Tuning tasks: the tunable kernels of a model, or single ops for benchmarks and tests.

A :class:`Task` is one anchor node (a conv or dense with its weights bound, as the bundle
compiler schedules it) on one target, with the :class:`~toolchain.autotune.space.Space`
its default schedule declared. :func:`extract_tasks` runs a model through the graph passes
and schedules each fused kernel's anchor once with its default point, collecting the
spaces (:func:`~toolchain.autotune.apply.declared`); kernels with the same workload are
one task whose ``weight`` counts them.

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
    from toolchain.graph.ops.registry import get_op
    from toolchain.schedules.registry import schedule_for

    t = resolve_target(target)
    with declared() as seen:
        try:
            schedule_for(node, t)
        except KilnError:
            return None
    if not seen:
        return None
    try:
        flops = int(get_op(node.op).flops_of(node))
    except KilnError:
        flops = 0
    return Task(name or node.name, node, t, seen[-1], 1, flops)


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
                  input_shapes: Mapping[str, tuple[int, ...]] | None = None) -> list[Task]:
    """The tunable kernels of ``model`` (a path or ModelProto) on ``target``, heaviest
    (FLOPs x weight) first."""
    from toolchain.frontend.onnx import from_onnx
    from toolchain.graph.passes import run_pipeline
    from toolchain.graph.passes.layout import layout_for_target
    from toolchain.schedules.generic.fused import anchor_of, bind_constants

    t = resolve_target(target)
    source = str(model) if isinstance(model, str | Path) else model
    graph = from_onnx(source, input_shapes=dict(input_shapes or {}) or None)
    fused = run_pipeline(graph, layout_for_target(t))
    tasks: dict[str, Task] = {}
    for node in fused.nodes:
        if node.op != "Fused":
            continue
        anchor = anchor_of(node)
        if anchor is None:
            continue
        bound, _ = bind_constants(node, anchor)
        task = task_of(bound, t, node.attrs.get("kernel", node.name))
        if task is None:
            continue
        key = task.space.workload
        if key in tasks:
            tasks[key].weight += 1
        else:
            tasks[key] = task
    return sorted(tasks.values(), key=lambda x: -(x.flops * x.weight))
