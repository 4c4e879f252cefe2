"""``algorithm=winograd4h``: F(4x4, 3x3) with the interpolation points 0, ±1, 1/2, -2,
offered to the tuner up to 512 input channels (Lavin & Gray's points only up to 128) —
its matrices compute the correlation, and a bundle with 256 input channels stays within
1e-5 of onnxruntime where the old points do not reliably."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.bundle.helpers import max_rel, run_ort
from toolchain.autotune.apply import applying
from toolchain.autotune.tasks import conv_task, extract_tasks
from toolchain.target import load_target, runs_here
from toolchain.topi.nn.winograd import winograd_matrices


def test_matrices_compute_the_2d_correlation_exactly():
    at, g, bt = winograd_matrices(4, "half")
    rng = np.random.default_rng(0)
    d, w = rng.standard_normal((6, 6)), rng.standard_normal((3, 3))
    y = at @ ((g @ w @ g.T) * (bt @ d @ bt.T)) @ at.T
    ref = np.array([[np.sum(d[i:i + 3, j:j + 3] * w) for j in range(4)] for i in range(4)])
    np.testing.assert_allclose(y, ref, rtol=0, atol=1e-12)
    # a different algorithm from Lavin & Gray's, not a rescaling of it
    assert not np.allclose(bt, winograd_matrices(4)[2])


def test_offered_up_to_512_input_channels():
    algs = lambda c: conv_task((1, c, 7, 7), 32, 3, 1, "x86_64-avx512").space.knob(  # noqa: E731
        "algorithm").choices
    assert algs(128)[-2:] == ("winograd4", "winograd4h")
    assert "winograd4h" in algs(512) and "winograd4" not in algs(512)
    assert "winograd4h" not in algs(1024)


def _wide_conv() -> onnx.ModelProto:
    """3x3 convolution, 256 -> 8 channels on 4x4 (one F(4x4) tile), bias: the error
    grows with the input channels, the rest is kept small."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((8, 256, 3, 3)) * 0.1).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1] * 4, kernel_shape=[3, 3])],
        "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 4, 4])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("target", ["c-generic", "x86_64-avx512"])
def test_winograd4h_bundle_within_1e5_at_256_channels(tmp_path: Path, target: str):
    from toolchain.bundle import compile_model, load_bundle

    if not runs_here(load_target(target)):
        pytest.skip(f"{target} code does not run on this machine")
    model = _wide_conv()
    task, = extract_tasks(model, target)
    s = task.space
    trace = s.trace(s.canonical({**s.default(), "algorithm": "winograd4h"}))
    with applying({s.workload: trace}) as applied:
        path = compile_model(model, target, tmp_path / "b", progress=False)
    assert set(applied) == {s.workload}
    assert "_winograd4h" in (Path(path) / "metadata.json").read_text()  # its U weights
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((1, 256, 4, 4)).astype(np.float32)
        got = load_bundle(path)({"x": x})["y"]
        assert max_rel(got, run_ort(model, {"x": x})["y"]) <= 1e-5
