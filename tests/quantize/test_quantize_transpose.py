"""The float input of an int8 model quantized and laid out NHWC -> NCHW in one kernel (the
first kernel of MobileNet's int8 bundles): the quantized value of each input row is staged
in input order and vectorized, the transpose converts it (``stage_quantized_transpose``,
toolchain/schedules/generic/ops.py). Through bundles, bit-exact with the reference
executor and onnxruntime: ties to even, saturation, infinities."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import toolchain
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.reference import run_graph
from toolchain.target import load_target, runs_here

SCALE = 0.0625


def _model(h: int, w: int, c: int, zp: int, dtype: int) -> onnx.ModelProto:
    npz = np.int8 if dtype == TensorProto.INT8 else np.uint8
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("Transpose", ["q"], ["y"], perm=[0, 3, 1, 2])]
    inits = [numpy_helper.from_array(np.array(SCALE, np.float32), "s"),
             numpy_helper.from_array(np.array(zp, npz), "z")]
    graph = helper.make_graph(
        nodes, "qt", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, h, w, c])],
        [helper.make_tensor_value_info("y", dtype, [1, c, h, w])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


def _input(h: int, w: int, c: int) -> np.ndarray:
    """Ties of both signs (k + 1/2 steps), values at and past saturation, infinities,
    huge and denormal values, then random ones."""
    special = np.array([0.03125, 0.09375, -0.03125, -0.09375, 7.96875, 8.0, -8.0, -8.03125,
                        1e20, -1e20, 3e38, -3e38, np.inf, -np.inf, 1e-40, -1e-40,
                        16777216.0, 16777217.0, -16777216.0, 0.0, 2.53125, -2.53125,
                        15.96875, -15.96875], np.float32)
    rest = np.random.default_rng(7).uniform(-20, 20, h * w * c - special.size)
    x = np.concatenate([special, rest.astype(np.float32)])
    return x.reshape(1, h, w, c)


@pytest.mark.parametrize(("target", "backend"), [
    ("c-generic", "c"), ("x86_64-avx512", "c"), ("x86_64-avx512", "llvm")])
@pytest.mark.parametrize(("h", "w", "c", "zp", "dtype", "staged"), [
    (5, 24, 3, -3, TensorProto.INT8, True),     # MobileNet's input, smaller
    (4, 17, 2, 131, TensorProto.UINT8, True),   # odd row (34 values), uint8
    (3, 16, 8, 0, TensorProto.INT8, False),     # 8 planes: the tiled transpose, inlined
])
def test_quantize_transpose_bundle_bit_exact(tmp_path: Path, target: str, backend: str,
                                             h: int, w: int, c: int, zp: int, dtype: int,
                                             staged: bool) -> None:
    import onnxruntime as ort

    if not runs_here(load_target(target)):
        pytest.skip(f"this CPU lacks {target}'s features")
    model = _model(h, w, c, zp, dtype)
    path = tmp_path / "qt.onnx"
    onnx.save(model, path)
    pkg = toolchain.compile(path, target, output=tmp_path / "b", backend=backend)
    if backend == "c":
        # the staged row: the quantized values in a row buffer, only the conversion
        # transposed (the LLVM bundle's kernels are objects, built from the same TIR)
        src = (tmp_path / "b" / "src" / "kernels.c").read_text()
        assert ("quantize_linear_value[" in src) == staged, src
    x = _input(h, w, c)
    got = toolchain.run(pkg, {"x": x}).outputs["y"]
    want = run_graph(from_onnx(model), {"x": x})["y"]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, ort.InferenceSession(str(path)).run(None, {"x": x})[0])


def test_quantize_transpose_rows_on_three_threads(tmp_path: Path) -> None:
    """Large enough to run in parallel (128 rows): each thread quantizes its rows into
    its own slice of the row buffer's scratch; still bit-exact."""
    from dataclasses import replace

    from toolchain.bundle import compile_model, load_bundle
    from toolchain.target import resolve_target

    h, w, c = 128, 96, 3
    model = _model(h, w, c, 5, TensorProto.INT8)
    out = compile_model(model, replace(resolve_target("c-generic"), cores=3), tmp_path / "b",
                        name="qt", progress=False)
    src = (out / "src" / "kernels.c").read_text()
    assert "quantize_linear_value[" in src and "(size_t)kiln_thread * 1152" in src, src
    bundle = load_bundle(out)
    bundle.set_threads(3)
    x = _input(h, w, c)
    for _ in range(3):
        np.testing.assert_array_equal(bundle({"x": x})["y"],
                                      run_graph(from_onnx(model), {"x": x})["y"])
