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
