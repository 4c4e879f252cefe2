"""The 1x1 convolution's space: ``algorithm`` (the packed GEMM or the direct kernel, whose
strided pack copies only the pixels it reads, or nothing: ``direct_pack=none``) and
``b_pack`` (one strided copy the GEMM reads in place) — offered where they apply,
replaying old records as before, and run through compiled bundles within 1e-5 of
onnxruntime."""

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


def _pointwise(stride: int) -> onnx.ModelProto:
    """1x1 convolution 16 -> 24 channels on 11x11 (stride 2: 6x6 output, an odd number of
    pixels that fills no register tile), then Relu."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((24, 16, 1, 1)) * 0.3).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    out = (11 - 1) // stride + 1
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["h"], strides=[stride, stride],
                          kernel_shape=[1, 1]),
         helper.make_node("Relu", ["h"], ["y"])], "pointwise",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 11, 11])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 24, out, out])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_knobs_defaults_and_where_they_apply():
    s = conv_task((1, 256, 14, 14), 512, 1, 2, "x86_64-avx512").space
    assert s.kind == "gemm" and s.workload.startswith("gemm|conv1x1|")
    d = s.default()
    assert (d["algorithm"], d["b_pack"]) == ("gemm", "panels")
    direct = {**d, "algorithm": "direct", "rw": 7, "cb": 8, "unroll_cb": True}
    assert s.is_valid(direct)
    # GEMM knobs do not matter for a direct point, nor direct ones for a GEMM point
    assert s.canonical({**direct, "mr": 3})["mr"] == d["mr"]
    assert s.canonical({**d, "rw": 3})["rw"] == d["rw"]
    assert s.canonical({**direct, "b_pack": "rows"})["b_pack"] == "panels"
    # the direct kernel's pixels: copied (the default) or broadcast straight from X
    assert s.knob("direct_pack").choices == ("copy", "none") and d["direct_pack"] == "copy"
    assert s.canonical({**d, "direct_pack": "none"})["direct_pack"] == "copy"
    assert s.canonical({**direct, "direct_pack": "none"})["direct_pack"] == "none"
    with pytest.raises(InvalidPoint, match="fits 32 vector registers"):
        s.check({**direct, "rw": 7, "ob": 64})
    # an unstrided 1x1 convolution copies its pixels once (panels) or not at all
    s1 = conv_task((1, 64, 56, 56), 64, 1, 1, "x86_64-avx512").space
    assert s1.knob("b_pack").choices == ("panels", "in_place")
    assert "algorithm" in [k.name for k in s1.knobs]


def test_a_record_from_before_algorithm_existed_replays_the_gemm():
    s = conv_task((1, 128, 28, 28), 256, 1, 2, "x86_64-avx512").space
    old = Trace("gemm", (("mr", 16), ("nr", 16), ("mc_tiles", 16)))
    p = s.point_of(old)
    assert (p["algorithm"], p["b_pack"], p["mr"], p["nr"]) == ("gemm", "panels", 16, 16)


@pytest.mark.parametrize("stride, knobs", [
    (2, {"algorithm": "direct", "rw": 3, "ry": 2, "cb": 8, "unroll_cb": True}),
    (2, {"algorithm": "direct", "epilogue": "pixel_tiles"}),
    (2, {"b_pack": "rows", "nr": 8}),
    (1, {"algorithm": "direct", "rw": 4}),
    (2, {"algorithm": "direct", "rw": 4, "cb": 8, "direct_pack": "none"}),
    (1, {"algorithm": "direct", "rw": 4, "cb": 4, "direct_pack": "none"}),
])
def test_points_run_in_bundles_within_1e5(tmp_path: Path, stride: int, knobs):
    from toolchain.bundle import compile_model, load_bundle

    model = _pointwise(stride)
    task, = extract_tasks(model, "c-generic")
    s = task.space
    assert s.workload.startswith("gemm|conv1x1|")
    trace = s.trace(s.canonical({**s.default(), **knobs}))
    x = np.random.default_rng(1).standard_normal((1, 16, 11, 11)).astype(np.float32)
    ref = run_ort(model, {"x": x})["y"]
    default = compile_model(model, "c-generic", tmp_path / "default", progress=False)
    with applying({s.workload: trace}) as applied:
        tuned = compile_model(model, "c-generic", tmp_path / "tuned", progress=False)
    assert set(applied) == {s.workload}
    src = lambda p: (Path(p) / "src" / "kernels.c").read_text()  # noqa: E731
    assert src(tuned) != src(default)
    if knobs.get("direct_pack") == "none":
        assert "data_pack" not in src(tuned)
    for path in (default, tuned):
        got = load_bundle(path)({"x": x})["y"]
        assert max_rel(got, ref) <= 1e-5, path
