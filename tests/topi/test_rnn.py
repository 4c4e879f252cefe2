"""LSTM compute vs the registry's reference: directions, layouts, bias, initial states,
peepholes, clip."""

from __future__ import annotations

import pytest

from tests.topi.util import check_node, rand


def _operands(s, b, n_in, h, dirs, layout, extras, seed=0):
    x = rand(*((b, s, n_in) if layout else (s, b, n_in)), seed=seed)
    ins = [x, rand(dirs, 4 * h, n_in, seed=seed + 1, lo=-1, hi=1),
           rand(dirs, 4 * h, h, seed=seed + 2, lo=-1, hi=1)]
    if extras:
        state = (b, dirs, h) if layout else (dirs, b, h)
        ins += [rand(dirs, 8 * h, seed=seed + 3, lo=-0.5, hi=0.5), None,
                rand(*state, seed=seed + 4, lo=-1, hi=1), rand(*state, seed=seed + 5, lo=-1, hi=1),
                rand(dirs, 3 * h, seed=seed + 6, lo=-0.5, hi=0.5)]
    return ins


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("extras", [False, True])
def test_lstm(direction, layout, extras):
    dirs = 2 if direction == "bidirectional" else 1
    ins = _operands(3, 2, 4, 3, dirs, layout, extras)
    check_node("LSTM", ins, {"direction": direction, "layout": layout, "hidden_size": 3},
               n_out=3, rtol=1e-5, atol=1e-6)


def test_lstm_clip_and_y_h_only():
    ins = _operands(4, 1, 2, 5, 1, 0, True, seed=9)
    ins[0] = ins[0] * 5
    check_node("LSTM", ins, {"clip": 0.7}, n_out=3, rtol=1e-5, atol=1e-6)
    check_node("LSTM", ins, {}, n_out=2, rtol=1e-5, atol=1e-6)



@pytest.mark.parametrize("op", ["GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("extras", [False, True])
def test_gru_rnn(op, direction, layout, extras):
    dirs = 2 if direction == "bidirectional" else 1
    g = 3 if op == "GRU" else 1
    s, b, n_in, h = 3, 2, 4, 3
    ins = [rand(*((b, s, n_in) if layout else (s, b, n_in))),
           rand(dirs, g * h, n_in, seed=1, lo=-1, hi=1), rand(dirs, g * h, h, seed=2, lo=-1, hi=1)]
    if extras:
        state = (b, dirs, h) if layout else (dirs, b, h)
        ins += [rand(dirs, 2 * g * h, seed=3, lo=-0.5, hi=0.5), None,
                rand(*state, seed=4, lo=-1, hi=1)]
    for lbr in ([0, 1] if op == "GRU" else [None]):
        attrs = {"direction": direction, "layout": layout, "hidden_size": h}
        if lbr is not None:
            attrs["linear_before_reset"] = lbr
        check_node(op, ins, attrs, n_out=2, rtol=1e-5, atol=1e-6)
    check_node(op, ins, {"clip": 0.3, "direction": direction, "layout": layout}, n_out=2,
               rtol=1e-5, atol=1e-6)
