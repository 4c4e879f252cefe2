"""Every sampled point of a space computes what the default computes (the knobs change
the schedule, never the result)."""

from __future__ import annotations

import random

import numpy as np

from toolchain.autotune.apply import forcing
from toolchain.autotune.tasks import conv_task, dense_task, task_of
from toolchain.graph.ops import get_op
from toolchain.schedules import compile_op


def _reference(node, x: np.ndarray) -> np.ndarray:
    """The op's numpy reference on ``x`` and the node's constants."""
    args = [x if i == 0 else v.data for i, v in enumerate(node.inputs)]
    return get_op(node.op).reference(args, node.attrs)[0]


def _check(task, n_points: int, seed: int) -> None:
    """``n_points`` sampled points each compute the op's reference. (Against the numpy
    reference, not a build of the default point: one compile less per test, and the
    default schedules have their own tests, ``tests/schedules``.)"""
    rng = random.Random(seed)
    x = np.random.default_rng(seed).standard_normal(task.node.inputs[0].shape).astype(
        np.float32)
    want = _reference(task.node, x)
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
    want = _reference(task.node, x)
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


def test_int8_conv_points_compute_the_same():
    """The int8 space (pixel tile; int16 pairs through the dot intrinsic or int32 lanes):
    every point gives the same integers as the reference."""
    from toolchain.graph.ir import Node, Value
    from toolchain.graph.ops import get_op
    from toolchain.graph.passes.quantize_ops import quantize_ops  # noqa: F401
    from toolchain.quantize.fixed_point import quantize_multipliers, shift_table

    rng = np.random.default_rng(8)
    m, sh = quantize_multipliers(rng.uniform(2e-4, 2e-2, 16))
    x = Value("x", (1, 8, 10, 10), "int8")
    node = Node("QConv", "conv", [
        x, Value.constant("w", rng.integers(-127, 128, (16, 8, 3, 3)).astype(np.int8)),
        Value.constant("b", rng.integers(-5000, 5000, 16).astype(np.int32)),
        Value.constant("m", m), Value.constant("s", shift_table(sh))],
        [Value("y", (1, 16, 10, 10), "int8")],
        {"x_zero_point": 3, "y_zero_point": -2, "out_min": -128, "out_max": 127,
         "out_dtype": "int8", "strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1],
         "group": 1})
    task = task_of(node, "x86_64-avx2")
    assert task is not None and task.space.kind == "int8_conv"
    assert task.space.default() == {"intrinsic": "dot_i16_pairs", "pixels": 10}
    xs = rng.integers(-128, 128, (1, 8, 10, 10)).astype(np.int8)
    want = get_op("QConv").reference([xs if v is x else v.data for v in node.inputs],
                                     node.attrs)[0]
    for p in ({"intrinsic": "int32", "pixels": 5}, {"intrinsic": "dot_i16_pairs",
                                                    "pixels": 2}):
        with forcing({task.space.workload: task.space.trace(p)}):
            op = compile_op(node, task.target)
        np.testing.assert_array_equal(op(xs)[0], want)
        assert op.op_schedule.info["schedule"] == (
            "int8 x86" if p["intrinsic"] == "int32" else "int8 x86 pairs")


def test_int8_conv_knob_picks_quads_pairs_or_int32() -> None:
    """On x86_64-avx512 the int8 convolution's ``intrinsic`` knob offers the u8 quads
    (default), the int16 pairs and the int32 lanes; each point computes the same integers."""
    from toolchain.graph.ir import Node, Value
    from toolchain.graph.ops import get_op
    from toolchain.graph.passes.quantize_ops import quantize_ops  # noqa: F401
    from toolchain.quantize.fixed_point import quantize_multipliers, shift_table

    rng = np.random.default_rng(9)
    m, sh = quantize_multipliers(rng.uniform(2e-4, 2e-2, 16))
    x = Value("x", (1, 6, 9, 9), "int8")
    node = Node("QConv", "conv", [
        x, Value.constant("w", rng.integers(-127, 128, (16, 6, 3, 3)).astype(np.int8)),
        Value.constant("b", rng.integers(-5000, 5000, 16).astype(np.int32)),
        Value.constant("m", m), Value.constant("s", shift_table(sh))],
        [Value("y", (1, 16, 9, 9), "int8")],
        {"x_zero_point": -128, "y_zero_point": 5, "out_min": -128, "out_max": 127,
         "out_dtype": "int8", "strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1],
         "group": 1})
    task = task_of(node, "x86_64-avx512")
    assert task is not None
    assert task.space.default() == {"intrinsic": "dot_u8s8_quads", "pixels": 9}
    xs = rng.integers(-128, 128, (1, 6, 9, 9)).astype(np.int8)
    want = get_op("QConv").reference([xs if v is x else v.data for v in node.inputs],
                                     node.attrs)[0]
    for kind, schedule in (("dot_u8s8_quads", "int8 x86 quads"),
                           ("dot_i16_pairs", "int8 x86 pairs"), ("int32", "int8 x86")):
        with forcing({task.space.workload: task.space.trace({"intrinsic": kind,
                                                             "pixels": 3})}):
            op = compile_op(node, task.target)
        np.testing.assert_array_equal(op(xs)[0], want)
        assert op.op_schedule.info["schedule"] == schedule
