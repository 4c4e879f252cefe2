"""Quantized ResNet-8 (the zoo's MLPerf Tiny IC model through `kiln quantize`'s post-training
quantization) compiled for `--target vta`: every convolution on the accelerator (the 16-channel
layers and the RGB first layer with one block of input channels included), run through the C
driver on the C functional simulator, bit-exact with Kiln's integer reference; quantized with
power-of-two scales (the requantization on the accelerator), on the Verilog RTL too."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import onnx
import pytest

import toolchain
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.passes.quantize_ops import quantize_ops
from toolchain.graph.reference import run_graph
from toolchain.quantize.ptq import quantize_model
from toolchain.zoo import ZOO
from toolchain.zoo.quantized import calibration, kiln_qdq

from ..tools import needs


@pytest.fixture(scope="module")
def resnet8(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, onnx.ModelProto]:
    d = tmp_path_factory.mktemp("vta_resnet8")
    q = kiln_qdq(ZOO["resnet8"].build())
    onnx.save(q, d / "resnet8_int8.onnx")
    return toolchain.compile(d / "resnet8_int8.onnx", "vta", output=d / "bundle"), q


def test_every_convolution_and_the_gemm_of_resnet8_run_on_the_accelerator(
        resnet8: tuple[Any, onnx.ModelProto]) -> None:
    pkg, _ = resnet8
    acc = json.loads((pkg.path / "metadata.json").read_text())["accelerator"]
    where = {p["node"]: p for p in acc["placements"]}
    convs = [p for p in acc["placements"] if p["op"] == "QConv"]
    assert len(convs) == 9
    assert all(p["device"] == "accelerator" for p in convs), [
        (p["node"], p["reason"]) for p in convs if p["device"] != "accelerator"]
    assert "3->16 channels on 32x32" in where["/conv1/Conv"]["reason"]
    assert where["/stack1/Add"]["device"] == where["/AveragePool"]["device"] == "host"
    assert where["/fc/Gemm"]["device"] == "accelerator"
    assert len(acc["layers"]) == 10
    # the default quantization's multipliers are not powers of two: requantized on the host
    assert all(x["epilogue"] == "host" for x in acc["layers"])
    assert "on the host (multiplier" in where["/stack1/conv1/Conv"]["reason"]


def test_resnet8_on_the_fsim_is_bit_exact_with_the_integer_reference(
        resnet8: tuple[Any, onnx.ModelProto]) -> None:
    pkg, q = resnet8
    ref = quantize_ops(from_onnx(q))
    for seed in (0, 1):
        x = {"input": np.random.default_rng(seed).standard_normal((1, 3, 32, 32))
             .astype(np.float32)}
        run = toolchain.run(pkg, x)
        want = run_graph(ref, x)
        # the logits are dequantized int8: bit for bit; the softmax is float on the host
        np.testing.assert_array_equal(run.outputs["logits"], want["logits"])
        np.testing.assert_allclose(run.outputs["probs"], want["probs"], rtol=1e-5, atol=1e-7)
        # every accelerator layer ran and was counted: a 3x3 layer's GEMM steps are its
        # output pixels x taps x channel blocks
        steps = {c["layer"]: c["gemm_steps"] for c in run.accelerator}
        assert steps["/stack1/conv1/Conv_vta"] == 32 * 32 * 9
        assert steps["/stack3/conv2/Conv_vta"] == 8 * 8 * 9 * 4 * 4
        assert all(c["macs"] == 256 * c["gemm_steps"] > 0 for c in run.accelerator)


@pytest.fixture(scope="module")
def resnet8_pow2(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, onnx.ModelProto]:
    """ResNet-8 quantized with power-of-two scales: every layer requantizes on the
    accelerator (bias, rounding shifts, clamp as ALU work) and stores int8, and the
    residual adds run there too."""
    d = tmp_path_factory.mktemp("vta_resnet8_pow2")
    model = ZOO["resnet8"].build()
    q = quantize_model(model, calibration(model), power_of_two_scales=True)[0]
    onnx.save(q, d / "resnet8_pow2.onnx")
    return toolchain.compile(d / "resnet8_pow2.onnx", "vta", output=d / "bundle"), q


def test_resnet8_with_power_of_two_scales_requantizes_on_the_accelerator(
        resnet8_pow2: tuple[Any, onnx.ModelProto]) -> None:
    pkg, q = resnet8_pow2
    acc = json.loads((pkg.path / "metadata.json").read_text())["accelerator"]
    assert len(acc["layers"]) == 13              # 9 convolutions, 3 adds, the classifier
    assert all(x["epilogue"] == "accelerator" for x in acc["layers"])
    layers = [p for p in acc["placements"] if p["op"] in ("QConv", "QGemm", "QAdd")]
    assert all("clamp on the accelerator" in p["reason"] and "int8 out" in p["reason"]
               for p in layers)
    ops = {op for k in pkg.metadata["kernels"] for op in k["ops"]}
    assert "QRequant" not in ops and "QAdd" not in ops
    ref = quantize_ops(from_onnx(q))
    x = {"input": np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)}
    run = toolchain.run(pkg, x)
    want = run_graph(ref, x)
    np.testing.assert_array_equal(run.outputs["logits"], want["logits"])


@needs("verilator", "c++", "make", "perl")
def test_resnet8_with_power_of_two_scales_on_the_rtl_is_bit_exact(
        resnet8_pow2: tuple[Any, onnx.ModelProto]) -> None:
    """The one whole-model run on the RTL: every layer's GEMM, its requantization (ALU
    shifts, clamp) and the residual adds on the Verilog design. (The default
    quantization's path, GEMMs with the epilogue on the host, is the one
    ``test_bundle_rtl.py``'s CNN runs on the RTL; its ResNet-8 runs on the fsim above.)"""
    pkg, q = resnet8_pow2
    x = {"input": np.random.default_rng(4).standard_normal((1, 3, 32, 32)).astype(np.float32)}
    run = toolchain.run(pkg, x, device="rtl")
    want = run_graph(quantize_ops(from_onnx(q)), x)
    np.testing.assert_array_equal(run.outputs["logits"], want["logits"])
    assert len(run.accelerator) == 13
    assert all(c["cycles"] > c["gemm_cycles"] > 0 for c in run.accelerator)
