"""Every zoo model compiles into a bundle that builds with strict flags and matches
onnxruntime and the reference executor (max rel err <= 1e-4)."""

from __future__ import annotations

import json

import pytest

from tests.bundle.helpers import STRICT, assert_matches, compile_run, run_ort
from toolchain.bundle import load_bundle
from toolchain.zoo import ZOO

MODELS = ["lenet5", "mlp", "ds_cnn", "resnet8", "mobilenet_v1", "autoencoder", "mobilenet_v2",
          "transformer_encoder", "transformer_encoder_gelu", "fcn_opset11", "lstm_classifier",
          "vit_tiny"]
#: models with attention: one FusedAttention kernel per layer (the fuse_attention pass)
ATTENTION_LAYERS = {"transformer_encoder": 2, "transformer_encoder_gelu": 2, "vit_tiny": 2}
RECURRENT = {"lstm_classifier"}


def _check(name: str, tmp_path, zoo_c_bundle=None) -> dict:
    """The bundle (compiled into ``tmp_path``, or ``zoo_c_bundle``'s: the same compile,
    shared with the other files that compile the model for c-generic) built with the
    strict flags and run, against onnxruntime and the reference executor."""
    from toolchain.frontend.onnx import from_onnx
    from toolchain.graph.reference import run_graph

    spec = ZOO[name]
    if zoo_c_bundle is None:
        model = spec.build()
        inputs = spec.inputs(model)
        path, got = compile_run(model, tmp_path, inputs, input_shapes=spec.input_shapes,
                                name=name)
        ref = run_ort(model, inputs)
    else:
        b = zoo_c_bundle(name)
        path, model, inputs, ref = b.path, b.model, b.inputs, b.ref
        got = load_bundle(path, extra_flags=STRICT)(inputs)
    assert_matches(got, ref)
    assert_matches(got, run_graph(from_onnx(model, input_shapes=spec.input_shapes), inputs))
    meta = json.loads((path / "metadata.json").read_text())
    plan = meta["memory_plan"]
    assert plan["lower_bound"] <= meta["arena_bytes"] <= plan["naive_bytes"]
    return meta


@pytest.mark.parametrize("name", MODELS)
def test_zoo_model_bundle_matches_onnxruntime(name, tmp_path, zoo_c_bundle):
    meta = _check(name, tmp_path, zoo_c_bundle)
    if name not in RECURRENT:  # an LSTM node is unrolled into kernels per time step
        assert meta["kernel_count"] <= meta["nodes_before_fusion"]
    assert meta["weight_bytes"] > 0
    if name in ATTENTION_LAYERS:
        ops = [k["ops"] for k in meta["kernels"]]
        assert sum(o == ["FusedAttention"] for o in ops) == ATTENTION_LAYERS[name], ops
        assert not any("Softmax" in o for o in ops)


@pytest.mark.slow
def test_resnet18_bundle_matches_onnxruntime(tmp_path):
    meta = _check("resnet18", tmp_path)
    assert meta["weight_bytes"] > 11_000_000 * 4
