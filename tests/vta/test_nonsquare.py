"""Convolutions that are not square — filters KH != KW, strides, or padding that differs per
side — run on the accelerator as im2col GEMMs: bit-exact with the integer reference on the
functional simulator and in a bundle (DS-CNN's 10x4 first layer among them)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import toolchain
from toolchain.cli import main
from toolchain.errors import ScheduleError
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.ops.qops import qconv_acc
from toolchain.graph.passes.quantize_ops import quantize_ops
from toolchain.graph.reference import run_graph
from toolchain.quantize.ptq import quantize_model
from toolchain.vta.compile import compile_conv2d, compile_conv2d_im2col, im2col
from toolchain.vta.fsim import run_fsim
from toolchain.vta.workloads import expected_conv

# (OC, IC, KH, KW), (H, W), strides, pads (top, left, bottom, right)
GEOMETRIES = [
    ((64, 1, 10, 4), (49, 10), (2, 2), (4, 1, 5, 1)),     # DS-CNN's first layer
    ((20, 6, 3, 5), (9, 11), (1, 2), (1, 2, 1, 2)),
    ((16, 3, 1, 3), (7, 8), (2, 1), (0, 1, 0, 1)),
    ((24, 5, 3, 3), (8, 8), (1, 1), (0, 0, 1, 1)),        # square filters, one-sided pads
    ((8, 4, 2, 2), (9, 7), (3, 2), (0, 0, 0, 0)),         # square filters, strides 3, 2
]


@pytest.mark.parametrize("geo", GEOMETRIES, ids=lambda g: "x".join(map(str, g[0][2:])))
def test_im2col_program_is_bit_exact_with_the_integer_reference(geo) -> None:
    (oc, ic, kh, kw), (h, w), strides, pads = geo
    rng = np.random.default_rng(kh * 10 + kw)
    wt = rng.integers(-128, 128, (oc, ic, kh, kw), dtype=np.int8)
    x = rng.integers(-128, 128, (ic, h, w), dtype=np.int8)
    attrs = {"pads": pads, "strides": strides, "dilations": (1, 1), "group": 1,
             "x_zero_point": 0}
    want = qconv_acc(x[None], wt, attrs)[0]                   # (OC, OH, OW) int64
    layer = compile_conv2d_im2col(wt, h, w, 0, stride=strides, pad=pads, output="int32",
                                  layer="ns")
    assert layer.conv is not None and layer.conv.out_hw == want.shape[1:]
    dram = run_fsim(layer.program, layer.image(im2col(x, layer.conv)), tokens=True).dram
    got = layer.read_output(dram).T.reshape(want.shape)
    np.testing.assert_array_equal(got, want)


def test_im2col_int8_program_equals_the_numpy_oracle() -> None:
    """The int8 (shift and clamp on the accelerator) program of DS-CNN's layer against
    ``expected_conv``, which benchmarks/vta_models.py checks the RTL runs with."""
    (oc, ic, kh, kw), (h, w), strides, pads = GEOMETRIES[0]
    rng = np.random.default_rng(3)
    wt = rng.integers(-128, 128, (oc, ic, kh, kw), dtype=np.int8)
    x = rng.integers(-128, 128, (ic, h, w), dtype=np.int8)
    layer = compile_conv2d_im2col(wt, h, w, 9, stride=strides, pad=pads, layer="ns")
    assert layer.conv is not None
    got = layer.read_output(run_fsim(layer.program, layer.image(im2col(x, layer.conv))).dram)
    want = expected_conv(x, wt, strides, pads, 9)
    assert 0 < np.count_nonzero(np.abs(want) < 127)                # not all clamped
    np.testing.assert_array_equal(got.T.reshape(want.shape), want)


def test_the_direct_schedule_still_refuses_non_square_filters() -> None:
    wt = np.ones((16, 16, 3, 1), np.int8)
    with pytest.raises(ScheduleError, match=r"layer 'c'.*\(OC, IC, K, K\)"):
        compile_conv2d(wt, 8, 8, 0, layer="c")


def test_im2col_says_which_geometry_gives_no_output() -> None:
    wt = np.ones((16, 1, 10, 4), np.int8)
    with pytest.raises(ScheduleError, match=r"layer 'c'.*10x4 filters"):
        compile_conv2d_im2col(wt, 8, 3, 0, stride=(2, 1), pad=(0, 0, 0, 0), layer="c")
    with pytest.raises(ScheduleError, match=r"layer 'c'.*pad \(1, 2\)"):
        compile_conv2d_im2col(wt, 49, 10, 0, pad=(1, 2), layer="c")  # type: ignore[arg-type]


def non_square_cnn(seed: int = 0) -> onnx.ModelProto:
    """conv 10x4 /2 'same' (DS-CNN's) -> relu -> conv 3x1 strides (1, 2) pads (1, 0, 1, 0)
    -> relu -> conv 2x2 pads (0, 0, 1, 1) on a 1x20x10 input."""
    rng = np.random.default_rng(seed)

    def const(name: str, a: np.ndarray) -> onnx.TensorProto:
        return numpy_helper.from_array(a.astype(np.float32), name)

    inits = [const("w1", rng.standard_normal((16, 1, 10, 4)) * 0.3),
             const("b1", rng.standard_normal(16) * 0.1),
             const("w2", rng.standard_normal((24, 16, 3, 1)) * 0.2),
             const("b2", rng.standard_normal(24) * 0.1),
             const("w3", rng.standard_normal((8, 24, 2, 2)) * 0.2),
             const("b3", rng.standard_normal(8) * 0.1)]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1",
                              strides=[2, 2], pads=[4, 1, 5, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2",
                              strides=[1, 2], pads=[1, 0, 1, 0]),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Conv", ["r2", "w3", "b3"], ["y"], name="conv3",
                              pads=[0, 0, 1, 1])]
    g = helper.make_graph(
        nodes, "non_square_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 20, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 10, 3])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("pow2", [False, True], ids=["host_requant", "accel_requant"])
def test_non_square_layers_run_on_the_accelerator_in_a_bundle_bit_exact(
        tmp_path: Path, pow2: bool, capsys: pytest.CaptureFixture[str]) -> None:
    model = non_square_cnn()
    rng = np.random.default_rng(1)
    cal = {"x": rng.standard_normal((8, 1, 20, 10)).astype(np.float32)}
    q = quantize_model(model, cal, power_of_two_scales=pow2)[0]
    onnx.save(q, tmp_path / "ns.onnx")
    pkg = toolchain.compile(tmp_path / "ns.onnx", "vta", output=tmp_path / "b")
    meta = json.loads((pkg.path / "metadata.json").read_text())
    where = {p["node"]: p for p in meta["accelerator"]["placements"] if p["op"] == "QConv"}
    assert {k: p["device"] for k, p in where.items()} == dict.fromkeys(
        ("conv1", "conv2", "conv3"), "accelerator")
    assert where["conv1"]["reason"].startswith("10x4 conv strides 2,2 pads 4,1,5,1")
    assert "im2col GEMM" in where["conv2"]["reason"]
    epilogue = {x["node"]: x["epilogue"] for x in meta["accelerator"]["layers"]}
    assert set(epilogue.values()) == {"accelerator" if pow2 else "host"}
    ref = quantize_ops(from_onnx(q))
    for seed in (5, 6):
        x = {"x": np.random.default_rng(seed).standard_normal((1, 1, 20, 10))
             .astype(np.float32)}
        np.testing.assert_array_equal(toolchain.run(pkg, x).outputs["y"],
                                      run_graph(ref, x)["y"])
    np.savez(tmp_path / "in.npz", **x)
    assert main(["run", str(pkg.path), "--inputs", str(tmp_path / "in.npz"), "--check"]) == 0
    assert "conv1_vta" in capsys.readouterr().out


def test_ds_cnn_runs_its_first_convolution_on_the_accelerator(tmp_path: Path) -> None:
    """DS-CNN (Kiln's PTQ): the 10x4 /2 first layer and the four pointwise layers on the
    accelerator (6 of 16 nodes with the dense layer; the first layer stayed on the host
    before), the int8-derived output bit-exact with the integer reference."""
    from toolchain.zoo import ZOO
    from toolchain.zoo.quantized import kiln_qdq

    q = kiln_qdq(ZOO["ds_cnn"].build())
    onnx.save(q, tmp_path / "ds.onnx")
    pkg = toolchain.compile(tmp_path / "ds.onnx", "vta", output=tmp_path / "b")
    placements = json.loads((pkg.path / "metadata.json").read_text())[
        "accelerator"]["placements"]
    on = [p for p in placements if p["device"] == "accelerator"]
    assert (len(on), len(placements)) == (6, 16)
    first = next(p for p in placements if p["node"] == "/conv_1/Conv")
    assert first["device"] == "accelerator" and "im2col GEMM 125x40 by 40x64" in first["reason"]
    ref = quantize_ops(from_onnx(q))
    x = {"input_1": np.random.default_rng(0).standard_normal((1, 49, 10, 1))
         .astype(np.float32)}
    got, want = toolchain.run(pkg, x).outputs, run_graph(ref, x)
    np.testing.assert_array_equal(got["dense/BiasAdd:0"], want["dense/BiasAdd:0"])
