"""LSTM: reference against onnxruntime (directions, layouts, bias, initial states,
peepholes, clip), refusals and shape errors naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from tests.graph.ops.util import check_vs_ort, data, infer
from toolchain.errors import ModelError, UnsupportedError
from toolchain.graph.ops import get_op


def _ins(s, b, n_in, h, dirs, layout, extras):
    x = data("float32", (b, s, n_in) if layout else (s, b, n_in), seed=1)
    ins = [x, data("float32", (dirs, 4 * h, n_in), seed=2) / 3,
           data("float32", (dirs, 4 * h, h), seed=3) / 3]
    if extras:
        state = (b, dirs, h) if layout else (dirs, b, h)
        ins += [data("float32", (dirs, 8 * h), seed=4) / 3, None,
                data("float32", state, seed=5) / 3, data("float32", state, seed=6) / 3,
                data("float32", (dirs, 3 * h), seed=7) / 3]
    return ins


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("extras", [False, True])
def test_lstm_matches_onnxruntime(direction, layout, extras):
    dirs = 2 if direction == "bidirectional" else 1
    ins = _ins(3, 2, 4, 5, dirs, layout, extras)
    attrs = {"direction": direction, "layout": layout, "hidden_size": 5}
    if layout == 0:
        check_vs_ort("LSTM", ins, attrs, n_outputs=3, rtol=1e-5, atol=1e-6)
        return
    # onnxruntime has no batch-major LSTM: ONNX's reference judges layout 1
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    names = [f"in{i}" if v is not None else "" for i, v in enumerate(ins)]
    node = helper.make_node("LSTM", names, ["y", "yh", "yc"], **attrs)
    feeds = {n: v for n, v in zip(names, ins, strict=True) if n}
    want = ReferenceEvaluator(node).run(None, feeds)
    got = get_op("LSTM").reference(ins, attrs)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_lstm_clip_matches_onnxruntime():
    ins = _ins(4, 2, 3, 4, 1, 0, True)
    ins[0] = ins[0] * 4
    check_vs_ort("LSTM", ins, {"clip": 0.5, "hidden_size": 4}, n_outputs=3, rtol=1e-5,
                 atol=1e-6)


def test_lstm_refusals_and_errors():
    ins = _ins(3, 2, 4, 5, 1, 0, False)
    with pytest.raises(UnsupportedError, match=r"node 'n' \(LSTM\): activations \['Relu', "
                                               r"'Tanh', 'Tanh'\] are not supported"):
        infer("LSTM", ins, {"activations": ["Relu", "Tanh", "Tanh"]})
    lens = np.array([3, 2], np.int32)
    with pytest.raises(UnsupportedError, match=r"node 'n' \(LSTM\): sequence_lens must equal "
                                               "the sequence length 3"):
        infer("LSTM", ins + [None, lens], const=[4])
    with pytest.raises(ModelError, match=r"node 'n' \(LSTM\): W \[1, 20, 4\] and R \[1, 20, 5\] "
                                         r"must be \[2, 20, 4\]"):
        infer("LSTM", ins, {"direction": "bidirectional"})


@pytest.mark.parametrize("op", ["GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("extras", [False, True])
def test_gru_rnn_match_onnxruntime(op, direction, extras):
    dirs = 2 if direction == "bidirectional" else 1
    g = 3 if op == "GRU" else 1
    s, b, n_in, h = 3, 2, 4, 5
    ins = [data("float32", (s, b, n_in), seed=1), data("float32", (dirs, g * h, n_in), seed=2) / 3,
           data("float32", (dirs, g * h, h), seed=3) / 3]
    if extras:
        ins += [data("float32", (dirs, 2 * g * h), seed=4) / 3, None,
                data("float32", (dirs, b, h), seed=5) / 3]
    for lbr in ([0, 1] if op == "GRU" else [None]):
        attrs = {"direction": direction, "hidden_size": h}
        if lbr is not None:
            attrs["linear_before_reset"] = lbr
        check_vs_ort(op, ins, attrs, n_outputs=2, rtol=1e-5, atol=1e-6)
    check_vs_ort(op, ins, {"direction": direction, "hidden_size": h, "clip": 0.4}, n_outputs=2,
                 rtol=1e-5, atol=1e-6)
