"""int8 models through the bundle compiler: integer kernels in C, bit-exact with the
integer reference; arenas against the MLPerf Tiny microTVM anchors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

import toolchain
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.passes import pipeline
from toolchain.graph.passes.quantize_ops import quantize_ops
from toolchain.graph.reference import run_graph

#: microTVM + CMSIS-NN workspace bytes, MLPerf Tiny v0.5 (issue 6); AD's zoo model has
#: batch 8 and float I/O, so it has no comparable anchor
ANCHORS = {"ds_cnn": 16 * 1024, "resnet8": 66112, "mobilenet_v1": 64800}


def test_quantize_ops_runs_first_in_the_default_pipeline() -> None:
    # before constant_fold, which would fold the weights' DequantizeLinear back into float
    passes = pipeline.DEFAULT_PASSES
    assert passes.index("quantize_ops") < passes.index("constant_fold")


@pytest.fixture(scope="module")
def quantized_reference(int8_builds):
    """``get(name)`` -> (QDQ model, inputs, integer reference's outputs): the zoo model as
    Kiln quantizes it on its seeded calibration data (``int8_builds``: the model whose
    bundles the tests below read) and run by the reference on inputs drawn after those
    calibration samples, once per module."""
    from toolchain.zoo.quantized import CALIBRATION_SAMPLES, CALIBRATION_SEED

    done: dict[str, tuple[onnx.ModelProto, dict, dict]] = {}

    def get(name: str) -> tuple[onnx.ModelProto, dict, dict]:
        if name not in done:
            _, qdq, _ = int8_builds.model(name)
            g = from_onnx(qdq)
            rng = np.random.default_rng(CALIBRATION_SEED)
            for v in g.inputs:  # the calibration samples (kiln_qdq's), then the inputs
                rng.standard_normal((CALIBRATION_SAMPLES, *v.shape))
            inp = {v.name: rng.standard_normal(v.shape).astype(np.float32) for v in g.inputs}
            done[name] = qdq, inp, run_graph(quantize_ops(g), inp)
        return done[name]

    return get


@pytest.mark.parametrize("target", ["c-generic", "x86_64-avx512"])
@pytest.mark.parametrize("name", ["ds_cnn", "resnet8", "mobilenet_v1", "autoencoder"])
def test_int8_bundle_bit_exact(name: str, target: str, quantized_reference,
                               int8_builds) -> None:
    """c-generic's portable kernels and x86_64-avx512's (u8 x s8 quads through vpdpbusd,
    the depthwise bands, the lane-wise requantization) equal the integer reference (the
    bundle is the one the LLVM, depthwise and board tests read: ``int8_builds``)."""
    from toolchain.target import load_target, runs_here

    if not runs_here(load_target(target)):
        pytest.skip(f"this CPU lacks {target}'s features")

    _, inp, want = quantized_reference(name)
    pkg, _ = int8_builds.build(name, target)
    meta = json.loads((pkg.path / "metadata.json").read_text())
    src = (pkg.path / "src" / "kernels.c").read_text()
    assert "int8_t" in src
    got = toolchain.run(pkg, inp).outputs
    for k, w in want.items():
        if k in ("dense/Softmax:0", "probs", "anomaly_score"):  # float tails (exp, mean)
            np.testing.assert_allclose(got[k], w, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(got[k], w)
    if name in ANCHORS and target == "c-generic":
        assert meta["arena_bytes"] <= ANCHORS[name]


@pytest.mark.parametrize("target", ["c-generic", "x86_64-avx2", "x86_64-avx512"])
@pytest.mark.parametrize("name", ["ds_cnn", pytest.param("resnet8", marks=pytest.mark.slow)])
def test_int8_bundle_llvm_kernels_bit_exact_with_c(name: str, target: str,
                                                   int8_builds) -> None:
    """``--backend llvm``: the int8 kernels as LLVM objects (the requantization helpers'
    ``llvm_helpers``, the dot intrinsics' ``llvm_impl``: vpdpwssd, vpmaddwd) give the C
    bundle's outputs bit for bit, float tails included on the AVX targets. c-generic names
    no ``arch``: its C bundle is built here with ``-march=native`` (FMA contraction in the
    float Softmax tail), its LLVM kernels for the portable CPU (no FMA), so that tail
    agrees to rounding there."""
    from toolchain.target import load_target, runs_here

    if not runs_here(load_target(target)):
        pytest.skip(f"this CPU lacks {target}'s features")
    out = {}
    for backend in ("c", "llvm"):
        pkg, out[backend] = int8_builds.build(name, target, backend)
    assert pkg.metadata["kernel_objects"]
    for k, want in out["c"].items():
        if k in ("dense/Softmax:0", "probs") and load_target(target).arch is None:
            np.testing.assert_allclose(out["llvm"][k], want, rtol=1e-6, atol=1e-7)
        else:
            np.testing.assert_array_equal(out["llvm"][k], want, err_msg=k)


@pytest.mark.parametrize("backend", ["c", "llvm"])
def test_avx2_pair_weights_stored_as_int8_bit_exact(backend: str, tmp_path: Path) -> None:
    """x86_64-avx2's int8 convolutions and dense layers multiply int16 channel pairs
    (``dot_i16_*x2``, vpmaddwd) but keep their packed weights int8 in the bundle (one byte
    a weight, widened by the intrinsic as it loads them): LeNet-5's packed weights take
    about as many bytes as it has weights (2x with int16 packing), and the bundle (C
    intrinsics or their ``llvm_impl``) equals the integer reference bit for bit."""
    from toolchain.target import load_target, runs_here
    from toolchain.zoo import ZOO
    from toolchain.zoo.quantized import kiln_qdq

    if not runs_here(load_target("x86_64-avx2")):
        pytest.skip("this CPU lacks x86_64-avx2's features")
    spec = ZOO["lenet5"]
    model = spec.build()
    qdq = kiln_qdq(model)
    onnx.save(qdq, tmp_path / "q.onnx")
    pkg = toolchain.compile(tmp_path / "q.onnx", "x86_64-avx2", output=tmp_path / "b",
                            backend=backend)
    graph = quantize_ops(from_onnx(qdq))
    raw = sum(int(n.input(1).size) for n in graph.nodes if n.op in ("QConv", "QGemm"))
    packed = [w for w in pkg.metadata["weights"] if w["tensor"].endswith("_w_q_x86")]
    assert len(packed) == 5  # two convolutions, three dense layers: all int16 pairs
    for w in packed:
        assert w["dtype"] == "int8" and w["bytes"] == int(np.prod(w["shape"])), w
        assert w["shape"][-1] == 2  # the pair-interleaved layout [Mo, C/2, KH, KW, L, 2]
    assert raw <= sum(w["bytes"] for w in packed) < 1.1 * raw  # lane padding only
    if backend == "c":
        src = (tmp_path / "b" / "src" / "kernels.c").read_text()
        assert "kiln_avx2_dot_i16_16x2" in src and "_mm256_cvtepi8_epi16" in src
    inputs = spec.inputs(model)
    got = toolchain.run(pkg, inputs).outputs
    want = run_graph(graph, inputs)
    assert set(got) == set(want) == {"logits", "probs"}
    np.testing.assert_array_equal(got["logits"], want["logits"])  # int8 kernels' integers
    np.testing.assert_allclose(got["probs"], want["probs"], rtol=1e-5, atol=1e-6)  # float


@pytest.mark.parametrize("target", ["x86_64-avx2", "x86_64-avx512"])
@pytest.mark.parametrize("backend", ["c", "llvm"])
def test_x86_depthwise_weights_stored_as_int8_bit_exact(target: str, backend: str,
                                                        int8_builds) -> None:
    """The x86 depthwise kernels keep their packed weights int8 in the bundle, widened in
    the kernel: x86_64-avx2's int32 lanes ``[C/L, KH, KW, L]`` (``pack_dw_weights``, four
    bytes a weight before), x86_64-avx512's lane-wise u8 x s8 row quads
    ``[C/L, KW, ceil(KH/4), L, 4]`` (``pack_dw_quads``, ``dot_u8s8_lanes_Lx4``; the pairs
    ``[C/L, KH, ceil(KW/2), L, 2]`` before). DS-CNN's four depthwise layers take one byte a
    weight (plus the zero row of the quads), and the bundle (C or LLVM kernels) equals
    the integer reference."""
    from toolchain.target import load_target, runs_here

    if not runs_here(load_target(target)):
        pytest.skip(f"this CPU lacks {target}'s features")
    pkg, got = int8_builds.build("ds_cnn", target, backend)
    _, qdq, inputs = int8_builds.model("ds_cnn")
    graph = quantize_ops(from_onnx(qdq))
    dw = {f"{n.input(1).name}_x86": n.input(1) for n in graph.nodes
          if n.op == "QConv" and int(n.attrs.get("group", 1)) > 1}
    packed = [w for w in pkg.metadata["weights"] if w["tensor"] in dw]
    assert len(dw) == len(packed) == 4, [w["tensor"] for w in pkg.metadata["weights"]]
    quads = target == "x86_64-avx512"
    for w in packed:
        c, _, kh, kw = dw[w["tensor"]].shape
        rows = 4 * -(-kh // 4) if quads else kh  # the quads' zero row past KH
        assert w["dtype"] == "int8" and w["bytes"] == c * rows * kw, w
        assert len(w["shape"]) == (5 if quads else 4) and (not quads or w["shape"][-1] == 4)
    want = run_graph(graph, inputs)
    assert set(got) == set(want)
    for k, v in want.items():
        if v.dtype.kind == "f" and k in ("dense/Softmax:0", "probs"):  # float tail
            np.testing.assert_allclose(got[k], v, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(got[k], v, err_msg=k)
