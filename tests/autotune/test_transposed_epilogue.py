"""The convolution's ``epilogue=transposed``: the NCHW write-back of the channel-blocked
product through the targets' ``unblock_*`` tensor intrinsics (16 x 16 / 8 x 8 blocks
transposed in registers, with or without a bias) — offered where the target declares them
and the output rows are whole vectors, and run through compiled bundles (C and LLVM
kernels) within 1e-5 of onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.autotune.conv_models import conv_model, nchw_variant
from tests.bundle.helpers import max_rel, run_ort
from toolchain.autotune.apply import applying
from toolchain.autotune.tasks import conv_task, extract_tasks
from toolchain.target import load_target, runs_here


def test_offered_where_the_intrinsics_and_whole_vector_rows_are():
    epilogues = lambda *a: conv_task(*a).space.knob("epilogue").choices  # noqa: E731
    assert "transposed" in epilogues((1, 3, 224, 224), 64, 7, 2, "x86_64-avx512")  # 112
    assert "transposed" in epilogues((1, 64, 56, 56), 64, 3, 1, "x86_64-avx2")  # 56 = 7 x 8
    # 28-pixel rows: blocks of 4 pixels; 7-pixel rows: none
    assert "transposed" in epilogues((1, 64, 56, 56), 128, 3, 2, "x86_64-avx512")
    assert "transposed" in epilogues((1, 64, 56, 56), 128, 3, 2, "x86_64-avx2")
    assert "transposed" not in epilogues((1, 256, 14, 14), 512, 3, 2, "x86_64-avx512")
    assert "transposed" not in epilogues((1, 3, 224, 224), 64, 7, 2, "c-generic")


@pytest.mark.parametrize("base, bias, stride", [
    ("x86_64-avx512", True, 1), ("x86_64-avx512", False, 2), ("x86_64-avx512", True, 4),
    ("x86_64-avx2", False, 1), ("x86_64-avx2", True, 4)])
def test_transposed_points_run_in_bundles_within_1e5(tmp_path: Path, base: str, bias: bool,
                                                     stride: int):
    """Blocks of 16/8/4 pixels on AVX-512, 8/4 on AVX2, with and without a bias."""
    import toolchain

    if not runs_here(load_target(base)):
        pytest.skip(f"{base} code does not run on this machine")
    target = str(nchw_variant(base, tmp_path))
    model = conv_model(stride, bias=bias)
    onnx.save(model, tmp_path / "m.onnx")
    task, = extract_tasks(model, target)
    s = task.space
    knobs = {"epilogue": "transposed", "rw": 2}
    if "algorithm" in s.default():
        knobs["algorithm"] = "direct"
    trace = s.trace(s.canonical({**s.default(), **knobs}))
    x = np.random.default_rng(1).standard_normal((1, 8, 16, 16)).astype(np.float32)
    ref = run_ort(model, {"x": x})["y"]
    for backend in ("c", "llvm"):
        with applying({s.workload: trace}) as applied:
            pkg = toolchain.compile(tmp_path / "m.onnx", target, output=tmp_path / backend,
                                    backend=backend)
        assert set(applied) == {s.workload}
        if backend == "c":
            src = (Path(pkg.path) / "src" / "kernels.c").read_text()
            lanes = 16 if base.endswith("512") else 8
            name = f"unblock{'_bias' if bias else ''}_f32_{min(lanes, 16 // stride)}x{lanes}"
            assert name in src
        got = toolchain.run(pkg, {"x": x}).outputs["y"]
        assert max_rel(got, ref) <= 1e-5, backend
