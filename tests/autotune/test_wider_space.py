"""The convolution space's wider knobs — the NCHW write-back order, Winograd GEMM tiles up
to the register file, F(4x4) only where it stays accurate — refused and offered where they
should be, and applied through compiled bundles within 1e-5 of onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.bundle.helpers import max_rel, run_ort
from toolchain.autotune.apply import applying
from toolchain.autotune.space import InvalidPoint, Trace
from toolchain.autotune.tasks import conv_task, extract_tasks
from toolchain.target import load_target, runs_here


def _two_convs() -> onnx.ModelProto:
    """3x3 stride 1 (32 -> 32 channels, 16x16: sixteen F(4x4) tiles) -> Relu -> 3x3
    stride 2 (32 -> 48)."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    for name, x, y, ci, co, s in (("c1", "x", "h", 32, 32, 1), ("c2", "hr", "y", 32, 48, 2)):
        w = (rng.standard_normal((co, ci, 3, 3)) * 0.2).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"{name}_w"),
                  numpy_helper.from_array(rng.standard_normal(co).astype(np.float32),
                                          f"{name}_b")]
        nodes.append(helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [y],
                                      pads=[1] * 4, strides=[s, s], kernel_shape=[3, 3]))
        if name == "c1":
            nodes.append(helper.make_node("Relu", ["h"], ["hr"]))
    g = helper.make_graph(nodes, "two_convs",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                         [1, 32, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                         [1, 48, 8, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_epilogue_knob_exists_for_nchw_outputs_only():
    s = conv_task((1, 64, 56, 56), 128, 3, 2, "x86_64-avx512").space
    assert s.knob("epilogue").default == "channel_rows"
    assert s.is_valid({**s.default(), "epilogue": "pixel_tiles"})
    blocked = next(t for t in extract_tasks(_two_convs(), "x86_64-avx512")
                   if "s2x2" in t.space.workload)
    assert "NCHW16c>NCHW16c" in blocked.space.workload
    assert "epilogue" not in [k.name for k in blocked.space.knobs]


def test_winograd_tiles_reach_the_register_file():
    """AVX-512 (32 registers): a 16 x 16 GEMM tile (16 accumulators) is a point, 28 rows of
    one vector too; 28 rows of two vectors (59 registers) are refused."""
    s = conv_task((1, 128, 14, 14), 128, 3, 1, "x86_64-avx512").space
    base = {**s.default(), "algorithm": "winograd4"}
    assert s.is_valid({**base, "wino_mr": 16, "wino_nr": 16})
    assert s.is_valid({**base, "wino_mr": 28, "wino_nr": 16})
    with pytest.raises(InvalidPoint, match="fits 32 vector registers"):
        s.check({**base, "wino_mr": 28, "wino_nr": 32})
    # AVX2 (16 registers): at most 14 rows
    s2 = conv_task((1, 64, 14, 14), 64, 3, 1, "x86_64-avx2").space
    assert max(s2.knob("wino_mr").choices) == 14


def test_winograd4_is_offered_up_to_128_input_channels():
    """F(4x4)'s error grows with the channels (1.0-1.4e-5 of the largest output at 256):
    the tuner is not offered it there, so a tuned kernel stays within 1e-5."""
    algs = lambda c: conv_task((1, c, 7, 7), 32, 3, 1, "x86_64-avx512").space.knob(  # noqa: E731
        "algorithm").choices
    assert "winograd4" in algs(128)
    assert "winograd4" not in algs(256)


def test_a_trace_from_before_a_knob_existed_replays_with_its_default():
    s = conv_task((1, 64, 56, 56), 128, 3, 2, "x86_64-avx512").space
    old = Trace(s.kind, tuple((k, v) for k, v in s.trace(s.default()).decisions
                              if k != "epilogue"))
    assert s.point_of(old) == s.default()
    with pytest.raises(InvalidPoint, match="'epilogue' has no value"):
        s.check(old.as_dict())  # a point (not a trace) must still be complete


@pytest.mark.parametrize("target, knobs", [
    # NCHW bundles: both convs write their output tile by tile
    ("c-generic", {"c1": {"algorithm": "direct", "epilogue": "pixel_tiles"},
                   "c2": {"epilogue": "pixel_tiles", "rw": 4}}),
    # blocked bundles: F(4x4) with a 16 x 16 GEMM tile (outside the space before)
    ("x86_64-avx512", {"c1": {"algorithm": "winograd4", "wino_mr": 16, "wino_nr": 16}}),
])
def test_wider_points_run_in_bundles_within_1e5(tmp_path: Path, target: str, knobs):
    from toolchain.bundle import compile_model, load_bundle

    if not runs_here(load_target(target)):
        pytest.skip(f"{target} code does not run on this machine")
    model = _two_convs()
    tasks = extract_tasks(model, target)
    traces = {}
    for t in tasks:
        name = "c1" if "s1x1" in t.space.workload else "c2"
        if name in knobs:
            s = t.space
            traces[s.workload] = s.trace(s.canonical({**s.default(), **knobs[name]}))
    assert len(traces) == len(knobs)
    x = np.random.default_rng(1).standard_normal((1, 32, 16, 16)).astype(np.float32)
    ref = run_ort(model, {"x": x})["y"]
    default = compile_model(model, target, tmp_path / "default", progress=False)
    with applying(traces) as applied:
        tuned = compile_model(model, target, tmp_path / "tuned", progress=False)
    assert set(applied) == set(traces)
    src = lambda p: (Path(p) / "src" / "kernels.c").read_text()  # noqa: E731
    assert src(tuned) != src(default)
    for path in (default, tuned):
        got = load_bundle(path)({"x": x})["y"]
        assert max_rel(got, ref) <= 1e-5, path
