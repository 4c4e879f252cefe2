"""ONNX backend node tests (shipped in the onnx wheel) for the NN and data-movement ops.

Each single-node case whose op is defined in ``nn.py``/``transform.py`` is run through Kiln's
shape rule and numpy reference: every input is bound as a constant ``Value`` (Kiln needs
shape operands such as a Reshape's ``shape`` at compile time), the rule must give the
expected output types and the reference the expected values (the case's rtol/atol).

Cases that use a dtype Kiln does not carry (bfloat16, float8, int4, string …) are skipped
with the reason.  Older-opset forms are first upgraded the way the ONNX frontend does
(:func:`_upgrade`): Kiln's IR holds the newest form of every op.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper

from tests.onnx_cases import single_node_cases
from toolchain.errors import ModelError
from toolchain.graph.ir import DTYPES, Node, Value
from toolchain.graph.ops import get_op

NN_OPS = {
    "Conv", "ConvTranspose", "MatMul", "Gemm", "BatchNormalization", "LayerNormalization",
    "InstanceNormalization", "Softmax", "LogSoftmax", "MaxPool", "AveragePool",
    "GlobalAveragePool", "GlobalMaxPool", "Reshape", "Flatten", "Transpose", "Concat",
    "Split", "Slice", "Squeeze", "Unsqueeze", "Gather", "Pad", "Resize", "Expand", "Tile",
}


CASES = single_node_cases(NN_OPS)  # the onnx wheel's cases, made once (tests/onnx_cases.py)


#: cases Kiln refuses on purpose, with the error text it must give instead
UNSUPPORTED = {
    "test_batchnorm_epsilon_training_mode": "training_mode = 1 is not supported",
    "test_batchnorm_example_training_mode": "training_mode = 1 is not supported",
}


def _opset(model: Any) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def _upgrade(op: str, opset: int, attrs: dict[str, Any], n_out: int) -> dict[str, Any]:
    """What the frontend does to older forms of these ops (the parts the cases exercise)."""
    if op == "Split" and opset < 18 and "num_outputs" not in attrs:
        attrs["num_outputs"] = n_out  # opset < 18: no 'split' means equal parts
    return attrs


def _unsupported_dtype(arrays: list[np.ndarray]) -> str | None:
    for a in arrays:
        if a.dtype not in DTYPES.values():
            return f"dtype {a.dtype} is not a Kiln dtype"
    return None


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_case(case: Any) -> None:
    model = case.model
    onode = model.graph.node[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in onode.attribute}
    attrs = _upgrade(onode.op_type, _opset(model), attrs, len(onode.output))
    graph_inputs = [vi.name for vi in model.graph.input]
    for inputs, expected in case.data_sets:
        reason = _unsupported_dtype(list(inputs) + list(expected))
        if reason:
            pytest.skip(reason)
        by_name = dict(zip(graph_inputs, inputs, strict=True))
        arrays = [by_name[n] if n else None for n in onode.input]
        values = [None if a is None else Value.constant(n, a)
                  for n, a in zip(onode.input, arrays, strict=True)]
        outs = tuple(Value(n, (), "float32") for n in onode.output if n)
        node = Node(onode.op_type, onode.name or "node", values, outs, attrs)
        opdef = get_op(onode.op_type)
        if case.name in UNSUPPORTED:
            with pytest.raises(ModelError, match=UNSUPPORTED[case.name]) as err:
                opdef.infer(node)
            assert "node " in str(err.value)
            return
        types = opdef.infer(node)
        got = list(opdef.reference(arrays, attrs))
        assert len(got) >= len(expected)
        for t, g, e in zip(types, got, expected, strict=False):
            assert (tuple(t.shape), t.dtype) == (e.shape, str(e.dtype))
            assert g.shape == e.shape and g.dtype == e.dtype
            if e.dtype.kind == "f":
                np.testing.assert_allclose(g, e, rtol=case.rtol, atol=case.atol)
            else:
                np.testing.assert_array_equal(g, e)


def test_enough_cases_are_collected() -> None:
    # the onnx wheel ships ~240 single-node cases for these ops; a sudden drop means the
    # filter above broke
    assert len(CASES) > 200
    ops = {c.model.graph.node[0].op_type for c in CASES}
    assert {"Conv", "Resize", "MaxPool", "Slice", "Pad"} <= ops


def test_error_path_is_a_model_error() -> None:
    # a Kiln error from the reference is a ModelError, never an IndexError from numpy
    with pytest.raises(ModelError, match="index out of range"):
        get_op("Gather").reference([np.zeros(3, np.float32), np.array([3])], {})
