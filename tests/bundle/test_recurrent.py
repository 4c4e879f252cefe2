"""LSTM, GRU and RNN against onnxruntime: the numpy reference, the expanded graph and
compiled bundles, over directions, layouts, optional inputs and outputs, ``clip``,
``input_forget``, ``linear_before_reset``, activations and constant ``sequence_lens``.

onnxruntime refuses ``layout=1``; such a node is compared with its layout-0 twin wrapped
in Transposes (:func:`ort_twin`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.bundle.helpers import assert_matches, compile_run, run_ort
from toolchain.errors import ModelError, UnsupportedError
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.passes import run_pipeline
from toolchain.graph.reference import run_graph

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
SEQ, BATCH, INPUT, HIDDEN = 4, 3, 3, 5
#: optional inputs per case: bias, initial state(s), peepholes, sequence lengths
OPTIONS = {
    "plain": {},
    "full": {"B", "h0", "c0", "P"},
    "lens": {"B", "h0", "c0", "P", "lens"},
    "lens_only": {"lens"},
}
LENGTHS = [4, 2, 0]  # a full, a short and an empty sequence


def extra_attrs(op: str) -> dict:
    return {"LSTM": {"input_forget": 1}, "GRU": {"linear_before_reset": 1},
            "RNN": {"activations": ["Relu"]}}[op]


def recurrent_node(b: dict, op: str, tag: str, x: str, direction: str, layout: int,
                   options: set[str], attrs: dict, rng: np.random.Generator,
                   outputs: tuple[str, ...] = ("Y", "Y_h", "Y_c")) -> list[str]:
    """Add one recurrent node (weights as initializers) reading ``x`` to the model parts
    ``b``; returns its declared output names."""
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[op]

    def init(name: str, array: np.ndarray) -> str:
        b["inits"].append(numpy_helper.from_array(array, f"{tag}_{name}"))
        return f"{tag}_{name}"

    def normal(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    state = (BATCH, dirs, HIDDEN) if layout else (dirs, BATCH, HIDDEN)
    ins = [x, init("W", normal(dirs, g * HIDDEN, INPUT, scale=0.6)),
           init("R", normal(dirs, g * HIDDEN, HIDDEN, scale=0.6)),
           init("B", normal(dirs, 2 * g * HIDDEN)) if "B" in options else "",
           init("lens", np.array(LENGTHS, np.int32)) if "lens" in options else "",
           init("h0", normal(*state)) if "h0" in options else ""]
    if op == "LSTM":
        ins += [init("c0", normal(*state)) if "c0" in options else "",
                init("P", normal(dirs, 3 * HIDDEN)) if "P" in options else ""]
    while ins[-1] == "":
        ins.pop()
    if "activations" in attrs:
        attrs = {**attrs, "activations": list(attrs["activations"]) * dirs}
    n_out = 3 if op == "LSTM" else 2
    wanted = [o if o in outputs else "" for o in ("Y", "Y_h", "Y_c")[:n_out]]
    while wanted[-1] == "":
        wanted.pop()
    outs = [f"{tag}_{o}" if o else "" for o in wanted]
    b["nodes"].append(helper.make_node(op, ins, outs, name=tag, hidden_size=HIDDEN,
                                       direction=direction, layout=layout, **attrs))
    y = [BATCH, SEQ, dirs, HIDDEN] if layout else [SEQ, dirs, BATCH, HIDDEN]
    for o, name in zip(wanted, outs, strict=True):
        if o:
            b["outputs"].append(helper.make_tensor_value_info(
                name, TensorProto.FLOAT, y if o == "Y" else list(state)))
    return [o for o in outs if o]


def make_recurrent_model(cases: list[tuple], seed: int = 0) -> onnx.ModelProto:
    """A model of recurrent nodes ``(op, direction, layout, options, attrs[, outputs])``
    reading one input (``x``, or ``xb`` for layout 1)."""
    rng = np.random.default_rng(seed)
    b: dict = {"nodes": [], "inits": [], "outputs": []}
    for k, (op, direction, layout, options, attrs, *outputs) in enumerate(cases):
        recurrent_node(b, op, f"n{k}", "xb" if layout else "x", direction, layout,
                       OPTIONS[options], attrs, rng, *outputs)
    used = {i for n in b["nodes"] for i in n.input}
    inputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in
              (("x", [SEQ, BATCH, INPUT]), ("xb", [BATCH, SEQ, INPUT])) if name in used]
    graph = helper.make_graph(b["nodes"], "recurrent", inputs, b["outputs"], b["inits"])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def ort_twin(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every ``layout=1`` recurrent node replaced by Transposes around its
    ``layout=0`` form (onnxruntime implements only layout 0)."""
    twin = onnx.ModelProto()
    twin.CopyFrom(model)
    nodes = []
    for node in twin.graph.node:
        layout = next((a.i for a in node.attribute if a.name == "layout"), 0)
        if node.op_type not in GATES or not layout:
            nodes.append(node)
            continue
        ins = list(node.input)
        for i in (0, 5, 6):  # X, initial_h, initial_c: [batch, d0, d1] -> [d0, batch, d1]
            if i < len(ins) and ins[i]:
                t0 = f"{node.name}_{i}_{ins[i]}_t0"  # X may be initial_h too
                nodes.append(helper.make_node("Transpose", [ins[i]], [t0], perm=[1, 0, 2]))
                ins[i] = t0
        outs = [o + "_t0" if o else "" for o in node.output]
        attrs = [a for a in node.attribute if a.name != "layout"]
        inner = helper.make_node(node.op_type, ins, outs, name=node.name)
        inner.attribute.extend(attrs)
        nodes.append(inner)
        for k, o in enumerate(node.output):
            if o:
                nodes.append(helper.make_node("Transpose", [o + "_t0"], [o],
                                              perm=[2, 0, 1, 3] if k == 0 else [1, 0, 2]))
    del twin.graph.node[:]
    twin.graph.node.extend(nodes)
    return twin


def feeds_for(model: onnx.ModelProto, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((SEQ, BATCH, INPUT)).astype(np.float32)
    return {i.name: (x if i.name == "x" else x.transpose(1, 0, 2).copy())
            for i in model.graph.input}


# -- the reference executor and the expansion, every combination ---------------------------

MATRIX = list(itertools.product(("LSTM", "GRU", "RNN"), ("forward", "reverse", "bidirectional"),
                                (0, 1), tuple(OPTIONS)))


@pytest.mark.parametrize("op,direction,layout,options", MATRIX,
                         ids=["-".join(map(str, c)) for c in MATRIX])
def test_reference_and_expansion_match_onnxruntime(op, direction, layout, options) -> None:
    cases = [(op, direction, layout, options, {}),
             (op, direction, layout, options, {"clip": 0.7, **extra_attrs(op)})]
    model = make_recurrent_model(cases, seed=len(options))
    feeds = feeds_for(model)
    want = run_ort(ort_twin(model), feeds)
    graph = from_onnx(model)
    assert_matches(run_graph(graph, feeds), want, rtol=1e-5)
    expanded = run_pipeline(graph)
    assert {n.op for n in expanded.nodes} == {"Fused"}
    assert_matches(run_graph(expanded, feeds), want, rtol=1e-5)


ALL_ACTIVATIONS = ["Sigmoid", "Tanh", "Relu", "HardSigmoid", "Affine", "LeakyRelu",
                   "ThresholdedRelu", "ScaledTanh", "Elu", "Softsign", "Softplus"]


@pytest.mark.parametrize("act", ALL_ACTIVATIONS)
def test_every_activation_matches_onnxruntime(act: str) -> None:
    # GRU reads activation_alpha/beta in order: f takes the first values that fit, g the rest
    attrs = {"activations": [act, act], "activation_alpha": [0.3, 0.4, 0.5, 0.6],
             "activation_beta": [0.6, 0.2, 0.1, 0.3], "clip": 2.0}
    model = make_recurrent_model([("GRU", "bidirectional", 0, "full", attrs)])
    feeds = feeds_for(model)
    want = run_ort(model, feeds)
    graph = from_onnx(model)
    assert_matches(run_graph(graph, feeds), want, rtol=1e-5)
    assert_matches(run_graph(run_pipeline(graph), feeds), want, rtol=1e-5)


def test_default_alpha_beta_and_outputs_left_out() -> None:
    cases = [("LSTM", "forward", 0, "full",
              {"activations": ["HardSigmoid", "LeakyRelu", "Elu"]}, ("Y_c",)),
             ("RNN", "reverse", 0, "plain", {}, ("Y",)),
             ("GRU", "forward", 1, "lens", {}, ("Y_h",))]
    model = make_recurrent_model(cases)
    feeds = feeds_for(model)
    want = run_ort(ort_twin(model), feeds)
    graph = from_onnx(model)
    assert_matches(run_graph(run_pipeline(graph), feeds), want, rtol=1e-5)


# -- compiled bundles ---------------------------------------------------------------------------

BUNDLE_CASES = {
    "LSTM": [("LSTM", "forward", 0, "full", {"clip": 0.7}),
             ("LSTM", "reverse", 1, "lens", {"input_forget": 1}),
             ("LSTM", "bidirectional", 0, "lens_only",
              {"activations": ["HardSigmoid", "Softsign", "Elu"]})],
    "GRU": [("GRU", "forward", 1, "full", {"linear_before_reset": 1}),
            ("GRU", "reverse", 0, "lens", {"clip": 0.5}),
            ("GRU", "bidirectional", 0, "plain",
             {"activations": ["Sigmoid", "Softplus"]})],
    "RNN": [("RNN", "forward", 0, "lens", {"activations": ["Relu"]}),
            ("RNN", "reverse", 0, "full", {"clip": 0.6}),
            ("RNN", "bidirectional", 1, "full",
             {"activations": ["ThresholdedRelu"], "activation_alpha": [0.1, -0.2]})],
}


@pytest.fixture(scope="module")
def all_ops_bundle(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Any]:
    """``target ->`` one bundle of all nine recurrent nodes of :data:`BUNDLE_CASES`
    (disjoint but for the shared input), compiled and run once per target, as ``(model,
    the bundle's outputs, onnxruntime's)``, or the exception its compile or run raised.
    One bundle, not one per op: a bundle's fixed costs (the start of a compile, the C
    compiler's start-up, the runtime's link) are paid twice, not six times."""
    done: dict[str, Any] = {}

    def get(target: str) -> Any:
        if target not in done:
            model = make_recurrent_model([c for cs in BUNDLE_CASES.values() for c in cs],
                                         seed=3)
            feeds = feeds_for(model)
            try:
                _, got = compile_run(model, tmp_path_factory.mktemp(f"all_{target}"), feeds,
                                     target=target, progress=False)
                done[target] = (model, got, run_ort(ort_twin(model), feeds))
            except Exception as e:  # noqa: BLE001 - each op then builds alone (below)
                done[target] = e
        return done[target]
    return get


# the three ops' tests share one bundle per target: kept on one worker under xdist
@pytest.mark.xdist_group("recurrent-bundles")
@pytest.mark.parametrize("target", ["c-generic", "host"])
@pytest.mark.parametrize("op", list(BUNDLE_CASES))
def test_bundle_matches_onnxruntime(op: str, target: str, tmp_path: Path,
                                    all_ops_bundle: Callable[[str], Any]) -> None:
    """``op``'s three nodes in the bundle of all nine equal onnxruntime's on the model of
    all nine. Where that bundle did not compile or run, ``op``'s nodes are compiled alone
    (as one model), so the failure is ``op``'s own or the shared bundle's."""
    shared = all_ops_bundle(target)
    if isinstance(shared, Exception):
        model = make_recurrent_model(BUNDLE_CASES[op], seed=3)
        feeds = feeds_for(model)
        _, got = compile_run(model, tmp_path, feeds, target=target, progress=False)
        assert_matches(got, run_ort(ort_twin(model), feeds), rtol=1e-5)
        raise AssertionError(f"{op} alone passes, the bundle of all three ops failed: "
                             f"{shared!r}")
    model, got, ort = shared
    assert set(got) == set(ort)
    mine = {o for n in model.graph.node if n.op_type == op for o in n.output if o}
    assert len(mine) == len(BUNDLE_CASES[op]) * (3 if op == "LSTM" else 2)
    assert_matches({k: got[k] for k in mine}, {k: ort[k] for k in mine}, rtol=1e-5)


# -- what the import shows, and what it refuses ------------------------------------------------

def test_one_node_in_the_imported_graph_and_linear_unrolling() -> None:
    model = make_recurrent_model([("LSTM", "bidirectional", 0, "full", {})])
    graph = from_onnx(model)
    assert [n.op for n in graph.nodes] == ["LSTM"]
    assert graph.nodes[0].outputs[0].shape == (SEQ, 2, BATCH, HIDDEN)
    # 2 directions x 4 steps x (4 gates x 5 x (3 + 5) multiply-adds) dominate the count
    from toolchain.graph.ops import get_op
    assert get_op("LSTM").flops_of(graph.nodes[0]) >= 2 * SEQ * BATCH * 2 * 20 * 8
    kernels = len(run_pipeline(graph).nodes)
    assert kernels <= 2 * SEQ * 5 + 12  # a handful of kernels per step, not more


def _model_with_runtime_lengths() -> onnx.ModelProto:
    model = make_recurrent_model([("GRU", "forward", 0, "plain", {})])
    model.graph.node[0].input.extend(["", "lens_in"])  # X, W, R, (no B), sequence_lens
    model.graph.input.append(helper.make_tensor_value_info("lens_in", TensorProto.INT32,
                                                           [BATCH]))
    return model


def test_runtime_sequence_lens_is_refused_naming_the_node() -> None:
    with pytest.raises(UnsupportedError, match=r"node 'n0' \(GRU\): input 4 \(sequence_lens, "
                                               r"value 'lens_in'\) is computed at run time"):
        from_onnx(_model_with_runtime_lengths())
    # bound as a constant, it is fine
    graph = from_onnx(_model_with_runtime_lengths(),
                      bind={"lens_in": np.array([4, 1, 2], np.int32)})
    assert graph.nodes[0].op == "GRU"


@pytest.mark.parametrize("attrs,message", [
    ({"activations": ["Swish"]}, r"'activations'.*unknown activation\(s\) 'Swish'.*at node 'n0'"),
    ({"activations": ["Affine"]}, r"node 'n0' \(RNN\): attribute 'activations': Affine needs "
                                  r"its value\(s\) given in 'activation_alpha' and "
                                  r"'activation_beta'"),
    ({"activations": ["Tanh", "Tanh"]}, r"node 'n0' \(RNN\): attribute 'activations' has 2 "
                                        r"entries, but RNN with 1 direction\(s\) takes 1"),
])
def test_bad_activations_are_refused_naming_node_and_attribute(attrs, message) -> None:
    model = make_recurrent_model([("RNN", "forward", 0, "plain", attrs)])
    with pytest.raises((UnsupportedError, ModelError), match=message):
        from_onnx(model)


def test_sequence_lens_out_of_range_is_an_error() -> None:
    model = make_recurrent_model([("RNN", "forward", 0, "lens", {})])
    lens = next(t for t in model.graph.initializer if t.name == "n0_lens")
    lens.CopyFrom(numpy_helper.from_array(np.array([5, 1, 1], np.int32), "n0_lens"))
    with pytest.raises(ModelError, match=r"sequence_lens.*from 0 to the sequence length 4"):
        from_onnx(model)


def test_empty_sequences_give_constant_outputs_the_bundle_still_writes(tmp_path: Path) -> None:
    # every length 0: the outputs become constants (zeros) only in the pipeline's
    # constant_fold, after import; the bundle must copy them out all the same
    model = make_recurrent_model([("RNN", "bidirectional", 0, "lens", {})])
    lens = next(t for t in model.graph.initializer if t.name == "n0_lens")
    lens.CopyFrom(numpy_helper.from_array(np.zeros(BATCH, np.int32), "n0_lens"))
    feeds = feeds_for(model)
    want = run_ort(model, feeds)
    assert not any(a.any() for a in want.values())
    path, got = compile_run(model, tmp_path, feeds, progress=False)
    assert_matches(got, want)
    # fresh output buffers are often zero anyway: check that the copies are there
    assert (path / "src" / "recurrent.c").read_text().count("is a constant: copy it") == 2


def test_precision_fp16_bundle_of_the_three_ops(tmp_path: Path) -> None:
    """``--precision fp16`` refused every model with an LSTM, GRU or RNN (the ops take
    float32 only; the fuzzer's ``--recurrent`` on ``c-generic:fp16``, seeds 7001–7029):
    their expansion goes to float16 like every other op. Judged with the fuzzer's coarse
    float16 tolerance, after the reference executor on the same model."""
    model = make_recurrent_model([("LSTM", "bidirectional", 0, "lens", {"clip": 3.0}),
                                  ("GRU", "reverse", 0, "full", {"linear_before_reset": 1}),
                                  ("RNN", "forward", 0, "plain", {})], seed=5)
    feeds = feeds_for(model)
    want = run_ort(model, feeds)
    assert_matches(run_graph(from_onnx(model), feeds), want, rtol=1e-5)
    _, got = compile_run(model, tmp_path, feeds, target="c-generic", precision="fp16")
    assert_matches(got, want, rtol=5e-2)
