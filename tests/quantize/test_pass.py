"""The QDQ -> integer rewrite on small hand-built graphs, calibration and QDQ insertion."""

from __future__ import annotations

import numpy as np
import pytest

from toolchain.errors import InputError
from toolchain.graph.ir import Graph, Node, Value
from toolchain.graph.passes.quantize_ops import quantize_ops, unconverted
from toolchain.graph.reference import run_graph
from toolchain.quantize.calibrate import collect_ranges, split_samples
from toolchain.quantize.qdq import activation_params, insert_qdq, quantize_weight

RNG = np.random.default_rng(5)


def _q(x: Value, scale: float, zp: int, name: str) -> tuple[Node, Value]:
    out = Value(f"{name}_q", x.shape, "int8")
    return Node("QuantizeLinear", f"{name}_Q", [x, Value.constant(f"{name}_s", np.float32(scale)),
                                                 Value.constant(f"{name}_z", np.int8(zp))],
                [out]), out


def _dq(x: Value, scale: float, zp: int, name: str) -> tuple[Node, Value]:
    out = Value(f"{name}_dq", x.shape, "float32")
    return Node("DequantizeLinear", f"{name}_DQ",
                [x, Value.constant(f"{name}_s", np.float32(scale)),
                 Value.constant(f"{name}_z", np.int8(zp))], [out]), out


def _conv_graph(act: str | None, w_zp: int = 0, pool: str = "MaxPool",
                pool_scale: float = 0.05) -> Graph:
    x = Value("x", (1, 3, 6, 6), "float32")
    nodes = []
    n, xq = _q(x, 0.02, 3, "x")
    nodes.append(n)
    n, xd = _dq(xq, 0.02, 3, "x")
    nodes.append(n)
    wq = Value.constant("wq", RNG.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8))
    wd = Value("wd", (4, 3, 3, 3), "float32")
    nodes.append(Node("DequantizeLinear", "w_DQ",
                      [wq, Value.constant("ws", np.linspace(0.01, 0.02, 4, dtype=np.float32)),
                       Value.constant("wz", np.full(4, w_zp, np.int8))], [wd], {"axis": 0}))
    c = Value("c", (1, 4, 6, 6), "float32")
    nodes.append(Node("Conv", "conv", [xd, wd, Value.constant("b", np.full(4, 0.1, np.float32))],
                      [c], {"pads": (1, 1, 1, 1)}))
    if act == "Relu":
        r = Value("r", c.shape, "float32")
        nodes.append(Node("Relu", "relu", [c], [r]))
        c = r
    elif act == "Clip":
        r = Value("r", c.shape, "float32")
        nodes.append(Node("Clip", "clip", [c, Value.constant("lo", np.float32(-0.5)),
                                           Value.constant("hi", np.float32(0.6))], [r]))
        c = r
    n, cq = _q(c, 0.05, -10, "c")
    nodes.append(n)
    n, cd = _dq(cq, 0.05, -10, "c")
    nodes.append(n)
    p = Value("p", (1, 4, 3, 3), "float32")
    nodes.append(Node(pool, "pool", [cd], [p], {"kernel_shape": (2, 2), "strides": (2, 2)}))
    n, pq = _q(p, pool_scale, -10, "p")
    nodes.append(n)
    n, pd = _dq(pq, pool_scale, -10, "p")
    nodes.append(n)
    return Graph("g", [x], [pd], nodes)


@pytest.mark.parametrize("act", [None, "Relu", "Clip"])
def test_conv_group_becomes_qconv_with_clamp(act: str | None) -> None:
    g = _conv_graph(act)
    q = quantize_ops(g)
    ops = [n.op for n in q.nodes]
    assert ops == ["QuantizeLinear", "QConv", "MaxPool", "DequantizeLinear"], ops
    conv = q.node("conv")
    lo = {None: -128, "Relu": -10, "Clip": -20}[act]
    hi = {None: 127, "Relu": 127, "Clip": 2}[act]
    assert (conv.attrs["out_min"], conv.attrs["out_max"]) == (lo, hi)
    assert conv.inputs[2].data.dtype == np.int32  # bias 0.1 / (0.02 * w_scale)
    w_scale = np.linspace(0.01, 0.02, 4, dtype=np.float32)
    np.testing.assert_array_equal(conv.inputs[2].data, np.rint(0.1 / (0.02 * w_scale)))
    x = {"x": RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)}
    want, got = run_graph(g, x)["p_dq"], run_graph(q, x)["p_dq"]
    assert np.abs(want - got).max() <= 0.05 + 1e-6  # within one output step


def test_not_converted_stays_float() -> None:
    # a weight zero point other than 0 and a MaxPool that changes scale stay float
    q = quantize_ops(_conv_graph(None, w_zp=1, pool_scale=0.07))
    ops = [n.op for n in q.nodes]
    assert "Conv" in ops and "MaxPool" in ops and "QConv" not in ops
    assert {n.op for n in unconverted(q)} == {"Conv", "MaxPool"}


def test_average_pool_becomes_qavgpool() -> None:
    g = _conv_graph("Relu", pool="AveragePool")
    q = quantize_ops(g)
    assert [n.op for n in q.nodes] == ["QuantizeLinear", "QConv", "QAvgPool", "DequantizeLinear"]
    x = {"x": RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)}
    assert np.abs(run_graph(g, x)["p_dq"] - run_graph(q, x)["p_dq"]).max() <= 0.05 + 1e-6


def test_split_samples_layouts_and_errors() -> None:
    x = Value("x", (1, 4), "float32")
    g = Graph("g", [x], [x], [])
    assert len(split_samples(g, {"x": np.zeros((5, 1, 4))})) == 5
    assert len(split_samples(g, {"x": np.zeros((5, 4))})) == 5
    assert len(split_samples(g, {"x": np.zeros((1, 4))})) == 1
    with pytest.raises(InputError, match=r"has shape \[5, 3\]"):
        split_samples(g, {"x": np.zeros((5, 3))})
    with pytest.raises(InputError, match="dtype"):
        split_samples(g, {"x": np.array(["a"])})


def test_ranges_and_params() -> None:
    x, y = Value("x", (1, 4), "float32"), Value("y", (1, 4), "float32")
    g = Graph("g", [x], [y], [Node("Relu", "r", [x], [y])])
    samples = split_samples(g, {"x": np.array([[-3.0, 1, 2, 4], [0, 0, 0, 8]], np.float32)})
    r = collect_ranges(g, samples)
    assert r == {"x": (-3.0, 8.0), "y": (0.0, 8.0)}
    assert collect_ranges(g, samples, percentile=100.0) == r
    s, z = activation_params(-3.0, 8.0)
    assert z == round(-128 + 3.0 / s) and abs(s - 11.0 / 255) < 1e-7
    s, z = activation_params(0.0, 0.0)
    assert (s, z) == (1.0, -128)


def test_weight_quantization_is_symmetric_per_channel() -> None:
    w = np.array([[1.0, -2.0], [0.5, 0.25], [0, 0]], np.float32)
    q, s = quantize_weight(w, 0, True)
    assert q.dtype == np.int8 and q.max() <= 127 and q.min() >= -127
    np.testing.assert_allclose(s, [2 / 127, 0.5 / 127, 1.0], rtol=1e-6)
    assert q[0, 1] == -127 and q[1, 0] == 127
    q, s = quantize_weight(w, 0, False)
    assert s.shape == (1,)


def test_insert_qdq_fuses_relu_and_keeps_float_ops() -> None:
    x = Value("x", (2, 4), "float32")
    w = Value.constant("w", RNG.standard_normal((4, 3)).astype(np.float32))
    h, r, y = (Value(n, (2, 3), "float32") for n in ("h", "r", "y"))
    g = Graph("g", [x], [y], [Node("MatMul", "mm", [x, w], [h]), Node("Relu", "relu", [h], [r]),
                              Node("Softmax", "sm", [r], [y], {"axis": -1})])
    samples = split_samples(g, {"x": RNG.standard_normal((4, 2, 4)).astype(np.float32)})
    res = insert_qdq(g, collect_ranges(g, samples))
    assert res.float_ops == ["Softmax"] and sorted(res.quantized) == ["mm", "relu"]
    quantized = [n.inputs[0].name for n in res.graph.nodes if n.op == "QuantizeLinear"]
    assert quantized == ["x", "r"]  # h (before the Relu) is not quantized: fused
    q = quantize_ops(res.graph)
    assert [n.op for n in q.nodes] == ["QuantizeLinear", "QGemm", "DequantizeLinear", "Softmax"]
    assert q.node("mm").attrs["out_min"] == q.node("mm").attrs["y_zero_point"]
    out = run_graph(q, samples[0])["y"]
    np.testing.assert_allclose(out, run_graph(g, samples[0])["y"], atol=0.05)
