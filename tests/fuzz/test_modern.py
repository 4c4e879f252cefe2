"""The opt-in fuzz modes of session 24 (``--opset18``, ``--recurrent``, ``--attention``,
``--control-flow``, ``--symbolic``, targets ``NAME:budget``): their generators draw what
they promise, stay valid, and the oracle's second opinion (ONNX's reference evaluator)
tells onnxruntime's disagreements from Kiln's. Campaigns: docs/testing.md."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.fuzz.modern import GROUPS, random_modern_model
from tests.fuzz.oracle import bound_shapes, check, run_ort

#: what each group must draw in its first 40 seeds (op types, or an attribute as op.attr)
DRAWS = {
    "opset18": ("Split.num_outputs", "Pad.mode", "GroupNormalization", "Gelu", "Mish",
                "ReduceL2", "ReduceLogSumExp", "Resize.keep_aspect_ratio_policy"),
    "recurrent": ("LSTM", "GRU", "RNN", "LSTM.clip", "GRU.linear_before_reset",
                  "RNN.activations", "LSTM.layout", "GRU.layout"),
    "attention": ("Softmax", "Attention", "Attention.is_causal", "Where"),
    "control": ("If", "Loop", "Scan", "Scan.scan_output_axes"),
}


@pytest.mark.parametrize("group", list(DRAWS))
def test_each_group_draws_its_ops_and_is_deterministic(group: str) -> None:
    models = [random_modern_model(s, groups=(group,))[0] for s in range(40)]
    assert models[7].SerializeToString() == \
        random_modern_model(7, groups=(group,))[0].SerializeToString()
    seen = {n.op_type for m in models for n in m.graph.node} | {
        f"{n.op_type}.{a.name}" for m in models for n in m.graph.node for a in n.attribute}
    assert not [d for d in DRAWS[group] if d not in seen]
    assert all(m.opset_import[0].version == 23 for m in models)


def test_symbolic_inputs_are_valid_and_bound_from_the_inputs() -> None:
    """``--symbolic``: the first dimension named ``N`` (sometimes another too); the oracle
    binds them to the arrays' shapes; onnxruntime runs every model."""
    found = 0
    for seed in range(12):
        model, inputs = random_modern_model(seed, groups=GROUPS[:4], symbolic=True)
        dims = model.graph.input[0].type.tensor_type.shape.dim
        assert dims[0].dim_param == "N"
        assert bound_shapes(model, inputs) == {k: v.shape for k, v in inputs.items()}
        run_ort(model, inputs)
        found += any(n.op_type == "Shape" for n in model.graph.node)
    assert found


def _resize_model(policy: str) -> tuple:
    """Seed 1030 of ``--opset18``, shrunk: Resize of [1, 3, 3, 7] to sizes [1, 5] over
    axes [2, 3], ``align_corners``, cubic."""
    g = helper.make_graph(
        [helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], axes=[2, 3],
                          mode="cubic", coordinate_transformation_mode="align_corners",
                          keep_aspect_ratio_policy=policy)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 3, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 1, 2])],
        [numpy_helper.from_array(np.array([1, 5], np.int64), "sizes")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])


def test_onnxruntimes_resize_by_kept_aspect_ratio_is_no_kiln_finding(monkeypatch) -> None:
    """onnxruntime 1.32's Resize by ``sizes`` with ``keep_aspect_ratio_policy`` (not
    ``stretch``) and ``align_corners`` differs from ONNX's reference evaluator, which
    agrees with Kiln: an ``onnxruntime`` finding. A Kiln result that agrees with neither
    stays ``wrong``."""
    x = np.random.default_rng(0).standard_normal((1, 3, 3, 7)).astype(np.float32)
    model = _resize_model("not_larger")
    assert [f.kind for f in check(model, {"x": x}, ())] == ["onnxruntime"]
    from toolchain.graph import reference

    real = reference.run_graph
    monkeypatch.setattr(reference, "run_graph", lambda *a, **k: {
        n: v + np.float32(1) for n, v in real(*a, **k).items()})
    assert [f.kind for f in check(model, {"x": x}, ())] == ["wrong"]


def test_a_conv_chain_under_a_ram_budget_runs_in_patches_and_matches() -> None:
    """``--conv-chain`` on ``c-generic:budget``: the plain bundle, then one under 60 % of
    its arena, whose first convolutions run tile by tile; it must still match
    onnxruntime, and the count says a patch stage was made."""
    from collections import Counter

    counts: Counter[str] = Counter()
    model, inputs = random_modern_model(9002, groups=("convchain",))
    assert [n.op_type for n in model.graph.node][:3] == ["Conv", "Clip", "Conv"]
    assert check(model, inputs, ("c-generic:budget",), counts) == []
    assert counts["c-generic:budget patched"] == 1


def test_a_cut_keeps_the_weights_a_scan_body_reads() -> None:
    """The shrinker's prefix of a model whose Scan body reads an outer initializer keeps
    that initializer (it dropped it: onnxruntime refused the cut, seed 20018 of
    ``--control-flow``)."""
    from tests.fuzz.oracle import _prefix_model as prefix  # noqa: PLC2701 - same package

    for seed in range(40):
        model, inputs = random_modern_model(seed, groups=("control",))
        scans = [n for n in model.graph.node if n.op_type == "Scan"]
        if scans:
            break
    cut = prefix(model, scans[0].output[1], inputs)
    run_ort(cut, {i.name: inputs[i.name] for i in cut.graph.input})


def test_a_float16_output_beyond_its_range_is_ambiguous() -> None:
    """A float32 result above 65504 is infinite in float16: no ``wrong`` finding on a
    ``NAME:fp16`` target (seed 22013 of ``--recurrent --symbolic``: an LSTM with Relu and
    Affine activations reaches 6e11)."""
    model, inputs = random_modern_model(22013, groups=("recurrent",), symbolic=True)
    assert max(float(np.abs(v).max()) for v in run_ort(model, inputs).values()) > 65504
    findings = check(model, inputs, ("c-generic:fp16",))
    assert [f.kind for f in findings] == ["ambiguous"], findings


def test_kiln_quantize_writes_an_attention_model_at_the_opset_that_has_it() -> None:
    """``kiln quantize`` wrote every model at opset 21, where ``Attention`` (opset 23) does
    not exist: the quantizer refused its own output (``--int8 --attention`` seed 26006).
    Quantized, compiled and run, the bundle equals the integer reference."""
    from tests.fuzz.oracle import check_int8, quantized_reference

    model, inputs = random_modern_model(26006, groups=("recurrent", "attention"))
    assert "Attention" in {n.op_type for n in model.graph.node}
    qdq, _, _ = quantized_reference(model, inputs)
    assert qdq.opset_import[0].version == 23
    assert check_int8(model, inputs, ("c-generic",)) == []
