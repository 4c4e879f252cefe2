"""Small graph builder and comparison helpers for the pass tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import numpy as np

from toolchain.graph.ir import Graph, Node, Value
from toolchain.graph.ops.registry import get_op
from toolchain.graph.reference import run_graph

RTOL = 1e-4


class GraphBuilder:
    """Build a graph node by node; output types come from each op's ``infer``.

    >>> b = GraphBuilder(seed=0)
    >>> x = b.input("x", (1, 2))
    >>> y = b.op("Relu", [x])
    >>> b.graph([y]).nodes[0].op
    'Relu'
    """

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.inputs: list[Value] = []
        self.nodes: list[Node] = []

    def input(self, name: str, shape: Sequence[int], dtype: str = "float32") -> Value:
        v = Value(name, tuple(shape), dtype)
        self.inputs.append(v)
        return v

    def const(self, name: str, data: Any) -> Value:
        return Value.constant(name, np.asarray(data))

    def weight(self, name: str, shape: Sequence[int], lo: float = -1.0,
               hi: float = 1.0) -> Value:
        return Value.constant(name, self.rng.uniform(lo, hi, shape).astype(np.float32))

    def op(self, op: str, inputs: Sequence[Value | None], attrs: Mapping[str, Any] | None = None,
           name: str | None = None, n_out: int = 1) -> Any:
        name = name or f"{op.lower()}{len(self.nodes)}"
        placeholders = [Value(f"{name}_{i}", (1,), "float32") for i in range(n_out)]
        probe = Node(op, name, list(inputs), placeholders, dict(attrs or {}))
        types = get_op(op).infer(probe)[:n_out]
        outs = [Value(f"{name}_out{i}" if n_out > 1 else f"{name}_out", t.shape, t.dtype)
                for i, t in enumerate(types)]
        self.nodes.append(probe.replace(outputs=tuple(outs)))
        return outs[0] if n_out == 1 else outs

    def graph(self, outputs: Sequence[Value], name: str = "g") -> Graph:
        return Graph(name, self.inputs, outputs, self.nodes)


def sample_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for v in graph.inputs:
        if v.dtype.startswith("int"):
            out[v.name] = rng.integers(0, 4, v.shape).astype(v.dtype)
        else:
            out[v.name] = rng.standard_normal(v.shape).astype(v.dtype)
    return out


def assert_same_results(before: Graph, after: Graph, inputs: Mapping[str, np.ndarray] | None
                        = None, rtol: float = RTOL) -> None:
    """run_graph(before) == run_graph(after): same output names, dtypes, shapes; values to
    ``rtol`` relative to each output's scale (exact for non-float outputs)."""
    inputs = dict(inputs) if inputs is not None else sample_inputs(before)
    assert [v.name for v in after.inputs] == [v.name for v in before.inputs]
    assert [(v.name, v.type) for v in after.outputs] == [(v.name, v.type) for v in
                                                        before.outputs]
    ref, got = run_graph(before, inputs), run_graph(after, inputs)
    for name, expected in ref.items():
        actual = got[name]
        assert actual.dtype == expected.dtype and actual.shape == expected.shape, name
        if expected.dtype.kind == "f":
            scale = float(np.max(np.abs(expected))) if expected.size else 0.0
            np.testing.assert_allclose(actual, expected, rtol=rtol, atol=1e-5 * scale + 1e-30,
                                       err_msg=f"output {name!r}")
        else:
            np.testing.assert_array_equal(actual, expected, err_msg=f"output {name!r}")


def ops(graph: Graph) -> list[str]:
    return [n.op for n in graph.nodes]


@cache
def zoo_graph(name: str) -> tuple[Graph, dict[str, np.ndarray]]:
    """A zoo model imported by the frontend, with its sample inputs (cached per session)."""
    from toolchain.frontend.onnx import from_onnx
    from toolchain.zoo import ZOO

    spec = ZOO[name]
    model = spec.build()
    return from_onnx(model, input_shapes=spec.input_shapes), spec.inputs(model)
