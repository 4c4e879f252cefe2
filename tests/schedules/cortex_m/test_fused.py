"""Fused groups on Cortex-M: a residual QAdd (the tail of a QConv or a group of its own) is
computed with the descriptor's C requantization helper, not int64 arithmetic."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from toolchain.bundle import compile_model
from toolchain.graph.ir import Node
from toolchain.quantize.ptq import quantize_model
from toolchain.schedules.generic.fused import compute_options
from toolchain.schedules.registry import resolve_target


def _residual_model() -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32),
                                "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32) * 0.1, "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "x"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    g = helper.make_graph(nodes, "residual",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6])],
                          [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_compute_options_pick_the_dsp_qadd_on_cortex_m_only() -> None:
    qadd = Node("QAdd", "add", [], [], {"left_shift": 20})
    assert compute_options(resolve_target("cuda-sm80")) is None  # x86: test_x86_int8.py
    for t in ("cortex-m4", "cortex-m7"):
        opts = compute_options(resolve_target(t))
        assert opts is not None and opts(qadd) == {"algorithm": "dsp", "lut": True}
        assert opts(Node("QAdd", "wide", [], [], {"left_shift": 24})) == {}  # int32 overflow
        assert opts(Node("Relu", "r", [], [])) == {}


def test_residual_qadd_in_a_cortex_m_bundle_uses_the_helper(tmp_path) -> None:
    rng = np.random.default_rng(0)
    qdq, _ = quantize_model(_residual_model(),
                            {"x": rng.standard_normal((4, 1, 8, 6, 6)).astype(np.float32)})
    onnx.save(qdq, tmp_path / "r.onnx")
    src = {}
    for t in ("c-generic", "cortex-m4"):
        out = compile_model(tmp_path / "r.onnx", t, tmp_path / t, name="r")
        src[t] = (out / "src" / "kernels.c").read_text()
    assert "kiln_cm_requantize(" not in src["c-generic"]   # generic: int64 requantization
    # the fused QAdd reads both sides from their compile-time tables (kernel inputs after
    # the group's, in the weights) and requantizes the sum by the shift helper, as the
    # QConv's epilogue does (small weights: |acc + bias| < 2**30, right shifts): the
    # other helpers are only defined (without the options the sides and the sum took three
    # calls of the bounded helper)
    kernel = src["cortex-m4"].split("int32_t r_fused_", 1)[1]
    assert "_side_a[" in kernel and "_side_b[" in kernel
    assert src["cortex-m4"].count("kiln_cm_requantize_s(") >= 3
    assert src["cortex-m4"].count("kiln_cm_requantize_b(") == 1   # its definition
    assert "kiln_cm_requantize(" not in kernel
