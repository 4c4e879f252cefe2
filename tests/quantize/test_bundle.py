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
from toolchain.quantize.ptq import quantize_model

#: microTVM + CMSIS-NN workspace bytes, MLPerf Tiny v0.5 (issue 6); AD's zoo model has
#: batch 8 and float I/O, so it has no comparable anchor
ANCHORS = {"ds_cnn": 16 * 1024, "resnet8": 66112, "mobilenet_v1": 64800}


def test_quantize_ops_runs_first_in_the_default_pipeline() -> None:
    # before constant_fold, which would fold the weights' DequantizeLinear back into float
    passes = pipeline.DEFAULT_PASSES
    assert passes.index("quantize_ops") < passes.index("constant_fold")


@pytest.mark.parametrize("name", ["ds_cnn", "resnet8", "mobilenet_v1", "autoencoder"])
def test_int8_bundle_bit_exact(name: str, tmp_path: Path) -> None:
    from toolchain.zoo import ZOO

    model = ZOO[name].build()
    g = from_onnx(model)
    rng = np.random.default_rng(11)
    cal = {v.name: rng.standard_normal((8, *v.shape)).astype(np.float32) for v in g.inputs}
    qdq, _ = quantize_model(model, cal)
    onnx.save(qdq, tmp_path / f"{name}_int8.onnx")
    pkg = toolchain.compile(tmp_path / f"{name}_int8.onnx", "c-generic",
                            output=tmp_path / "bundle")
    meta = json.loads((tmp_path / "bundle" / "metadata.json").read_text())
    src = (tmp_path / "bundle" / "src" / "kernels.c").read_text()
    assert "int8_t" in src
    inp = {v.name: rng.standard_normal(v.shape).astype(np.float32) for v in g.inputs}
    got = toolchain.run(pkg, inp).outputs
    want = run_graph(quantize_ops(from_onnx(qdq)), inp)
    for k, w in want.items():
        if k in ("dense/Softmax:0", "probs", "anomaly_score"):  # float tails (exp, mean)
            np.testing.assert_allclose(got[k], w, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(got[k], w)
    if name in ANCHORS:
        assert meta["arena_bytes"] <= ANCHORS[name]
