"""The small convolution models and NCHW target variants the tuner's schedule-knob tests
compile (``test_band_and_pack.py``, ``test_transposed_epilogue.py``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def conv_model(stride: int = 1, kernel: int = 3, bias: bool = True) -> onnx.ModelProto:
    """8 -> 32 channels on 16x16 (``kernel`` x ``kernel``, padded to keep 16 / ``stride``
    pixels a row), with or without a bias; stride 2 and 4 give 8- and 4-pixel rows."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(
        (rng.standard_normal((32, 8, kernel, kernel)) * 0.3).astype(np.float32), "w")]
    ins = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b"))
        ins.append("b")
    out = 16 // stride
    g = helper.make_graph(
        [helper.make_node("Conv", ins, ["y"], pads=[kernel // 2] * 4, strides=[stride, stride],
                          kernel_shape=[kernel, kernel])], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, out, out])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def nchw_variant(base: str, tmp_path: Path) -> Path:
    """A descriptor file: ``base`` computing in NCHW (its convolutions write NCHW outputs
    themselves)."""
    p = tmp_path / f"{base}-nchw.yaml"
    p.write_text(f"name: {base}-nchw\nextends: {base}\nlayout: nchw\n"
                 f"description: {base} with NCHW activations (test)\n")
    return p


def _compile_at_point(model: onnx.ModelProto, target: str, tmp_path: Path, knobs: dict):
    """``model`` compiled for ``target`` with its one task's default point changed by
    ``knobs``: the bundle and its kernels' C source."""
    import toolchain
    from toolchain.autotune.apply import applying
    from toolchain.autotune.tasks import extract_tasks

    onnx.save(model, tmp_path / "m.onnx")
    task, = extract_tasks(model, target)
    s = task.space
    p = s.canonical({**s.default(), **knobs})
    with applying({s.workload: s.trace(p)}) as applied:
        pkg = toolchain.compile(tmp_path / "m.onnx", target, output=tmp_path / "b")
    assert set(applied) == {s.workload}
    return pkg, (Path(pkg.path) / "src" / "kernels.c").read_text()


def kernels_at_point(model: onnx.ModelProto, target: str, tmp_path: Path,
                     knobs: dict) -> str:
    """The kernels' C source of :func:`bundle_at_point`'s bundle, neither built nor run:
    for a test that only compares the C of two points (the other point runs)."""
    return _compile_at_point(model, target, tmp_path, knobs)[1]


def bundle_at_point(model: onnx.ModelProto, target: str, tmp_path: Path, knobs: dict,
                    seed: int) -> tuple[str, float]:
    """Compile ``model`` (one convolution, input ``x`` of 1 x 8 x 16 x 16) for ``target``
    with its task's default point changed by ``knobs``, run the bundle and onnxruntime on
    one random input: the kernels' C source and the largest relative error."""
    import toolchain
    from tests.bundle.helpers import max_rel, run_ort

    x = np.random.default_rng(seed).standard_normal((1, 8, 16, 16)).astype(np.float32)
    ref = run_ort(model, {"x": x})["y"]
    pkg, src = _compile_at_point(model, target, tmp_path, knobs)
    return src, max_rel(toolchain.run(pkg, {"x": x}).outputs["y"], ref)
