"""Property test: random small ONNX graphs give the same results through ``from_onnx`` +
``run_graph`` as through onnxruntime (broadcasting, folding and shape chains included)."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from tests.frontend.helpers import make_model, run_onnxruntime
from toolchain.frontend.onnx import from_onnx
from toolchain.graph.reference import run_graph

UNARY = ("Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Erf", "Softmax", "Identity")
BINARY = ("Add", "Sub", "Mul", "Max", "Min")


@st.composite
def graphs(draw):
    """A chain of ops on one float32 input, with constants, broadcasting and a shape
    round trip (Shape -> Reshape) that must fold."""
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    nodes, inits = [], {}
    cur, cur_shape = "x", shape
    for i in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(("unary", "binary", "const", "reshape", "reduce")))
        out = f"t{i}"
        if kind == "unary":
            nodes.append(helper.make_node(draw(st.sampled_from(UNARY)), [cur], [out]))
        elif kind in ("binary", "const"):
            # broadcast against a constant whose shape is a suffix with some dims set to 1
            k = draw(st.integers(0, len(cur_shape)))
            cshape = tuple(d if draw(st.booleans()) else 1 for d in cur_shape[k:])
            seed = draw(st.integers(0, 1000))
            inits[f"c{i}"] = np.random.default_rng(seed).standard_normal(cshape).astype(
                np.float32)
            op = draw(st.sampled_from(BINARY))
            args = [cur, f"c{i}"] if draw(st.booleans()) else [f"c{i}", cur]
            nodes.append(helper.make_node(op, args, [out]))
        elif kind == "reshape":
            nodes += [helper.make_node("Shape", [cur], [f"s{i}"]),
                      helper.make_node("Reshape", [cur, f"s{i}"], [f"r{i}"]),
                      helper.make_node("Flatten", [f"r{i}"], [out], axis=0)]
            cur_shape = (1, int(np.prod(cur_shape)))
        else:
            axis = draw(st.integers(-len(cur_shape), len(cur_shape) - 1))
            inits[f"a{i}"] = np.array([axis], np.int64)
            nodes.append(helper.make_node("ReduceSum", [cur, f"a{i}"], [out], keepdims=1))
            cur_shape = tuple(1 if j == axis % len(cur_shape) else d
                              for j, d in enumerate(cur_shape))
        cur = out
    nodes.append(helper.make_node("Identity", [cur], ["y"]))
    model = make_model(nodes, [("x", TensorProto.FLOAT, list(shape))],
                       [("y", TensorProto.FLOAT, list(cur_shape))], inits, opset=17)
    x = np.random.default_rng(draw(st.integers(0, 1000))).standard_normal(shape)
    return model, x.astype(np.float32)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_random_graph_matches_onnxruntime(case):
    model, x = case
    got = run_graph(from_onnx(model), {"x": x})["y"]
    want = run_onnxruntime(model, {"x": x})["y"]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
