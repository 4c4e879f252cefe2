"""`kiln quantize --power-of-two-scales`: every scale a power of two, so every requantization
multiplier is one too (Q31 ``2**30``) and requantizing is a rounding shift — the form an
accelerator ALU without a high multiply can compute. Bundles stay bit-exact with the
integer reference, on the host and on the accelerator target."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import toolchain
from toolchain import cli
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.passes.quantize_ops import quantize_ops
from toolchain.graph.reference import run_graph
from toolchain.quantize.fixed_point import quantize_multiplier, requantize
from toolchain.quantize.ptq import quantize_model

from ..tools import why_missing


def residual_cnn(seed: int = 0) -> onnx.ModelProto:
    """conv -> relu -> conv -> add(skip) -> relu -> flatten -> gemm, 16 channels on 4x4."""
    rng = np.random.default_rng(seed)

    def const(name: str, a: np.ndarray) -> onnx.TensorProto:
        return numpy_helper.from_array(a.astype(np.float32), name)

    inits = [const("w1", rng.standard_normal((16, 3, 3, 3)) * 0.3),
             const("b1", rng.standard_normal(16) * 0.1),
             const("w2", rng.standard_normal((16, 16, 3, 3)) * 0.1),
             const("b2", rng.standard_normal(16) * 0.1),
             const("wf", rng.standard_normal((10, 256)) * 0.05),
             const("bf", rng.standard_normal(10) * 0.1)]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1] * 4),
             helper.make_node("Add", ["c2", "r1"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["r2"], name="relu2"),
             helper.make_node("Flatten", ["r2"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], name="fc", transB=1)]
    g = helper.make_graph(
        nodes, "residual_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _calibration() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(3).standard_normal((6, 1, 3, 4, 4)).astype(np.float32)}


def _is_pow2(a: np.ndarray) -> bool:
    a = np.asarray(a, np.float64).ravel()
    return bool(np.all((a > 0) & (np.frexp(a)[0] == 0.5)))


def _multipliers(q: onnx.ModelProto) -> list[int]:
    """Every requantization multiplier of the integer graph Kiln lowers ``q`` to."""
    out: list[int] = []
    for n in quantize_ops(from_onnx(q)).nodes:
        if n.op in ("QConv", "QGemm"):
            out += np.asarray(n.input(3).data).ravel().tolist()
        elif n.op == "QAdd":
            out += [n.attrs[f"{k}_multiplier"] for k in "aby"]
    return out


@pytest.fixture(scope="module")
def pow2_model() -> onnx.ModelProto:
    return quantize_model(residual_cnn(), _calibration(), power_of_two_scales=True)[0]


def test_every_scale_and_requantization_multiplier_is_a_power_of_two(
        pow2_model: onnx.ModelProto) -> None:
    inits = {i.name: numpy_helper.to_array(i) for i in pow2_model.graph.initializer}
    scales = [inits[n.input[1]] for n in pow2_model.graph.node
              if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    assert len(scales) > 10 and all(_is_pow2(s) for s in scales)
    ops = {n.op for n in quantize_ops(from_onnx(pow2_model)).nodes}
    assert {"QConv", "QGemm", "QAdd"} <= ops
    mults = _multipliers(pow2_model)
    assert len(mults) >= 16 + 16 + 10 + 3 and set(mults) == {1 << 30}
    # the default quantization's multipliers are not (the check can fail)
    plain = quantize_model(residual_cnn(), _calibration())[0]
    assert set(_multipliers(plain)) != {1 << 30}


@pytest.mark.parametrize("target", ["c-generic", "vta"])
def test_power_of_two_bundles_are_bit_exact_with_the_integer_reference(
        pow2_model: onnx.ModelProto, target: str, tmp_path: Path) -> None:
    onnx.save(pow2_model, tmp_path / "m.onnx")
    pkg = toolchain.compile(tmp_path / "m.onnx", target, output=tmp_path / "b")
    graph = quantize_ops(from_onnx(pow2_model))
    devices = ["fsim"]
    if target == "vta":  # the convolutions, the residual add and the classifier run on
        layers = pkg.metadata["accelerator"]["layers"]  # the accelerator, requantizing
        assert [x["op"] for x in layers] == ["VtaConv2d", "VtaConv2d", "VtaAdd", "VtaDense"]
        assert all(x["epilogue"] == "accelerator" for x in layers)
        if why_missing("verilator", "c++", "make", "perl") is None:
            devices.append("rtl")  # the Verilator objects are cached per RTL content
    for seed in range(3):
        x = {"x": np.random.default_rng(seed).standard_normal((1, 3, 4, 4)).astype(np.float32)}
        want = run_graph(graph, x)["y"]
        for device in devices:
            np.testing.assert_array_equal(toolchain.run(pkg, x, device=device).outputs["y"],
                                          want)


def test_requantizing_by_a_power_of_two_is_one_rounding_shift() -> None:
    """What an ALU with ADD, SHR (arithmetic) and a sign must compute to agree with the
    reference: for the multiplier ``2**-n`` (Q31 ``2**30``, shift ``1 - n``) the reference's
    two roundings (SRDHM, then round-half-away by ``2**(n-1)``) equal
    ``(x + 2**(n-1) + 1 - 2 [x < 0]) >> n`` for n >= 2 and ``(x + 1) >> 1`` for n = 1."""
    rng = np.random.default_rng(0)
    x = np.concatenate([np.arange(-5000, 5000), rng.integers(-(2**30), 2**30, 20000),
                        [-(2**30), 2**30 - 1]]).astype(np.int64)
    for n in range(1, 25):
        m, shift = quantize_multiplier(2.0**-n)
        assert (m, shift) == (1 << 30, 1 - n)
        want = requantize(x, m, shift)
        if n == 1:
            got = (x + 1) >> 1
        else:
            got = (x + (1 << (n - 1)) + 1 - 2 * (x < 0)) >> n
        np.testing.assert_array_equal(got, want)


def test_the_cli_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    onnx.save(residual_cnn(), tmp_path / "m.onnx")
    np.savez(tmp_path / "cal.npz", **_calibration())
    out = tmp_path / "q.onnx"
    assert cli.main(["quantize", str(tmp_path / "m.onnx"), "--calibration",
                     str(tmp_path / "cal.npz"), "-o", str(out), "--power-of-two-scales"]) == 0
    assert set(_multipliers(onnx.load(out))) == {1 << 30}
