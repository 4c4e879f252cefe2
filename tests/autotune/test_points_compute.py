"""Every sampled point of a space computes what the default computes (the knobs change
the schedule, never the result)."""

from __future__ import annotations

import random

import numpy as np

from toolchain.autotune.apply import forcing
from toolchain.autotune.tasks import conv_task, dense_task, task_of
from toolchain.schedules import compile_op


def _check(task, n_points: int, seed: int) -> None:
    rng = random.Random(seed)
    x = np.random.default_rng(seed).standard_normal(task.node.inputs[0].shape).astype(
        np.float32)
    want = compile_op(task.node, task.target)(x)[0]
    for _ in range(n_points):
        p = task.space.sample(rng)
        with forcing({task.space.workload: task.space.trace(p)}):
            got = compile_op(task.node, task.target)(x)[0]
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4, err_msg=str(p))


def test_conv_points_compute_the_same():
    _check(conv_task((1, 8, 11, 9), 20, 3, 1, "x86_64-avx2"), 3, 1)


def test_gemm_points_compute_the_same():
    _check(dense_task(10, 24, 40, "x86_64-avx2"), 3, 2)


def test_layout_conv_points_compute_the_same():
    import toolchain.graph.passes  # noqa: F401 - registers LayoutConv
    from toolchain.graph.ir import Node, Value

    rng = np.random.default_rng(3)
    w = (rng.standard_normal((16, 8, 3, 3)) * 0.1).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    node = Node("LayoutConv", "lc", [Value("x", (1, 1, 9, 9, 8), "float32"),
                                     Value.constant("w", w), Value.constant("b", b)],
                [Value("y", (1, 2, 9, 9, 8), "float32")],
                {"pads": [1] * 4, "data_layout": "NCHW8c", "out_layout": "NCHW8c",
                 "kernel_layout": "OIHW"})
    task = task_of(node, "x86_64-avx2")
    assert task is not None and "NCHW8c>NCHW8c" in task.space.workload
    _check(task, 2, 4)


def test_algorithm_knob_winograd_and_direct_compute_the_same():
    task = conv_task((1, 32, 10, 10), 32, 3, 1, "x86_64-avx2")
    s = task.space
    assert s.default()["algorithm"] == "winograd2"  # the heuristic's choice is the default
    x = np.random.default_rng(5).standard_normal((1, 32, 10, 10)).astype(np.float32)
    want = compile_op(task.node, task.target)(x)[0]
    for alg, mr in [("direct", None), ("winograd4", 3)]:
        p = {**s.default(), "algorithm": alg} if mr is None else \
            {**s.default(), "algorithm": alg, "wino_mr": mr}
        with forcing({s.workload: s.trace(s.canonical(p))}):
            op = compile_op(task.node, task.target)
            got = op(x)[0]
        assert op.metadata["info"]["schedule"].startswith(
            "conv2d_nchwc" if alg == "direct" else "conv2d_winograd_f4")
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


def test_depthwise_points_compute_the_same():
    from toolchain.autotune.tasks import depthwise_task

    task = depthwise_task((1, 16, 12, 12), 3, 1, "x86_64-avx2")
    assert task.space.kind == "depthwise"
    _check(task, 3, 6)
