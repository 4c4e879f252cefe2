"""Overlap pairs through compiled bundles, with the arena poisoned.

A small int8 CNN (pointwise, 3 x 3, stride-2, depthwise and pointwise convolutions, every
activation in the arena) is compiled for ``cortex-m4``, whose DSP convolutions declare
their access order (``OpSchedule.overlap``), so the planner starts outputs inside their
inputs.  Its kernels are built for this host from the same C (the DSP helpers' portable
branches, ``__ARM_FEATURE_DSP`` undefined) and run with every arena byte poisoned before
each run: an output written over an input byte that a later step still reads changes the
result, which must equal the integer reference bit for bit.  The control moves one declared
lead 64 B short of legal and sees the outputs change: the check can fail.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import toolchain
from tests.bundle.helpers import STRICT
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.overlap import AccessOrder
from toolchain.graph.passes.quantize_ops import quantize_ops
from toolchain.graph.reference import run_graph
from toolchain.quantize.ptq import quantize_model
from toolchain.zoo.quantized import arena_report, calibration


def _cnn(name: str, x_shape: list[int], layers: list[tuple], seed: int,
         nodes: list | None = None, src: str = "x") -> onnx.ModelProto:
    """Convolutions ``layers`` = (out channels, kernel, stride, group, pads), each with a
    Relu, on ``src`` (3 channels), then a 4-way classifier (pool, flatten, Gemm)."""
    rng = np.random.default_rng(seed)
    inits, nodes, c = [], list(nodes or []), 3
    for i, (m, k, s, g, pads) in enumerate(layers):
        w = (rng.standard_normal((m, c // g, k, k)) / np.sqrt(c // g * k * k)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"),
                  numpy_helper.from_array(rng.standard_normal(m).astype(np.float32) * .1,
                                          f"b{i}")]
        nodes += [helper.make_node("Conv", [src, f"w{i}", f"b{i}"], [f"c{i}"],
                                   kernel_shape=[k, k], strides=[s, s], group=g, pads=pads),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        src, c = f"r{i}", m
    inits.append(numpy_helper.from_array(
        (rng.standard_normal((4, c)) / np.sqrt(c)).astype(np.float32), "wf"))
    nodes += [helper.make_node("GlobalAveragePool", [src], ["gap"]),
              helper.make_node("Flatten", ["gap"], ["flat"]),
              helper.make_node("Gemm", ["flat", "wf"], ["y"], transB=1)]
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _float_model() -> onnx.ModelProto:
    layers = [  # (out channels, kernel, stride, group): 16x16 -> 8x8 -> 4x4
        (8, 1, 1, 1), (8, 3, 1, 1), (16, 3, 2, 1), (16, 3, 1, 16), (32, 1, 1, 1),
        (32, 3, 2, 32)]
    return _cnn("overlap_cnn", [1, 3, 16, 16], [(*x, [x[1] // 2] * 4) for x in layers], 5)


@pytest.fixture(scope="module")
def qmodel(tmp_path_factory) -> Path:
    model = _float_model()
    path = tmp_path_factory.mktemp("overlap") / "cnn_int8.onnx"
    onnx.save(quantize_model(model, calibration(model), integer_io=True)[0], path)
    return path


def _host_copy(bundle: Path, where: Path):
    """The cortex-m4 bundle built for this host (same C; the helpers' portable branches)."""
    from toolchain.bundle.host import BundleModule

    shutil.copytree(bundle, where)
    meta = json.loads((where / "metadata.json").read_text())
    meta["target"].update(compiler="gcc", cflags=[])
    (where / "metadata.json").write_text(json.dumps(meta))
    return BundleModule(where, extra_flags=STRICT)


def _poisoned_runs(module, qmodel: Path, tails: tuple[str, ...] = ()) -> list[bool]:
    """Per run (three inputs, three poison bytes): whether every output is bit-exact
    (``tails``: float outputs after the last DequantizeLinear, within 1e-5)."""
    want_graph = quantize_ops(from_onnx(onnx.load(qmodel)))
    rng = np.random.default_rng(1)
    exact = []
    for poison in (0x5A, 0xA5, 0x00):
        inp = {t["name"]: rng.integers(-128, 128, t["shape"]).astype(np.int8)
               for t in module.inputs}
        module.arena.fill(poison)
        got = module(inp)
        want = run_graph(want_graph, inp)
        exact.append(all(np.allclose(got[k], w, rtol=1e-5, atol=1e-6) if k in tails
                         else np.array_equal(got[k], w) for k, w in want.items()))
    return exact


def test_overlapped_arena_is_bit_exact_when_poisoned(qmodel: Path, tmp_path: Path) -> None:
    pkg = toolchain.compile(qmodel, "cortex-m4", output=tmp_path / "m4")
    plan = pkg.metadata["memory_plan"]
    by_name = {t["name"]: t for t in plan["tensors"]}
    laps = [t for t in plan["tensors"] if t["inplace_of"]
            and (t.get("lead", 0) or t["size"] != by_name[t["inplace_of"]]["size"])]
    # the 3x3 convolution's output starts 7 planes and a row before its input; the
    # stride-2 depthwise one's inside its input
    assert any(t.get("lead", 0) > 0 for t in laps), laps
    assert any(t["size"] < by_name[t["inplace_of"]]["size"] for t in laps), laps
    for t in laps:
        assert t["offset"] == by_name[t["inplace_of"]]["offset"] - t.get("lead", 0)
    report = arena_report(tmp_path / "m4")
    assert report["arena"] < report["no_overlap"], report
    assert all(_poisoned_runs(_host_copy(tmp_path / "m4", tmp_path / "host"), qmodel))


@pytest.mark.slow
def test_vww_overlapped_arena_is_bit_exact_when_poisoned(tmp_path: Path) -> None:
    """MobileNetV1 VWW (the issue's model): its first convolution reads the caller's NHWC
    image (no transposed copy in the arena), its 8 -> 16 pointwise one grows out of its
    input; the stride-2 depthwise convolution after it (its input and its scratch) is the
    peak."""
    from toolchain.zoo.quantized import anchor_model

    onnx.save(anchor_model("mobilenet_v1"), tmp_path / "vww.onnx")
    pkg = toolchain.compile(tmp_path / "vww.onnx", "cortex-m4", output=tmp_path / "m4")
    plan = pkg.metadata["memory_plan"]
    by_name = {t["name"]: t for t in plan["tensors"]}
    assert any(t["inplace_of"] and t["size"] > by_name[t["inplace_of"]]["size"]
               for t in plan["tensors"])
    report = arena_report(tmp_path / "m4")
    assert (report["no_overlap"], report["arena"]) == (55_296, 41_792)
    assert not any("Transpose" in k["ops"] for k in pkg.metadata["kernels"])
    assert all(_poisoned_runs(_host_copy(tmp_path / "m4", tmp_path / "host"),
                              tmp_path / "vww.onnx", tails=("probs",)))


def test_a_lead_64_bytes_short_is_caught(qmodel: Path, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: the 3 x 3 convolution's lead one alignment step short overwrites
    input bytes before their last read (``clobbered``), and the poisoned run sees it."""
    legal = AccessOrder.lead
    shortened = []

    def short(self: AccessOrder, alignment: int) -> int | None:
        lead = legal(self, alignment)
        if lead and self.clobbered(lead - alignment):
            shortened.append(lead)
            return lead - alignment
        return lead

    monkeypatch.setattr(AccessOrder, "lead", short)
    toolchain.compile(qmodel, "cortex-m4", output=tmp_path / "bad")
    assert shortened
    assert not any(_poisoned_runs(_host_copy(tmp_path / "bad", tmp_path / "host"), qmodel))


def _nhwc_model() -> onnx.ModelProto:
    """A TensorFlow-style export: an NHWC image transposed to NCHW by the model itself,
    then a 3 x 3 stride-2 convolution (TF "SAME" pads), a depthwise and a pointwise one."""
    return _cnn("nhwc_cnn", [1, 12, 12, 3], [(8, 3, 2, 1, [0, 0, 1, 1]),
                                             (8, 3, 1, 8, [1, 1, 1, 1]),
                                             (16, 1, 1, 1, [0, 0, 0, 0])], 7,
                nodes=[helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2])],
                src="t")


@pytest.mark.parametrize("integer_io", [True, False], ids=["int8-io", "float-io"])
def test_first_convolution_reads_the_nhwc_input(integer_io: bool, tmp_path: Path) -> None:
    """The model's own NHWC -> NCHW transpose is folded into the first convolution on
    ``cortex-m4`` (it gathers its im2col rows channels-last): no transpose kernel, the
    convolution reads the caller's image (int8 I/O) or the quantized image, and the
    outputs are bit-exact with the integer reference with the arena poisoned."""
    model = _nhwc_model()
    path = tmp_path / "nhwc.onnx"
    onnx.save(quantize_model(model, calibration(model), integer_io=integer_io)[0], path)
    pkg = toolchain.compile(path, "cortex-m4", output=tmp_path / "m4")
    kernels = pkg.metadata["kernels"]
    assert not any("Transpose" in k["ops"] or "LayoutTransform" in k["ops"] for k in kernels)
    first = next(k for k in kernels if k["ops"] == ["QConv"])
    want_input = "x" if integer_io else kernels[0]["outputs"][0]
    assert first["inputs"][0] == want_input, first
    module = _host_copy(tmp_path / "m4", tmp_path / "host")
    want_graph = quantize_ops(from_onnx(onnx.load(path)))
    rng = np.random.default_rng(3)
    for poison in (0x5A, 0xA5):
        x = rng.integers(-128, 128, (1, 12, 12, 3)).astype(np.int8) if integer_io else \
            rng.standard_normal((1, 12, 12, 3)).astype(np.float32)
        module.arena.fill(poison)
        got, want = module({"x": x}), run_graph(want_graph, {"x": x})
        for k, w in want.items():
            if integer_io:
                assert np.array_equal(got[k], w), k
            else:
                np.testing.assert_allclose(got[k], w, rtol=1e-5, atol=1e-6)
