"""The ONNX backend node tests of this family's ops, run through the registry directly.

For every single-node test case shipped in the ``onnx`` wheel whose op is one of ours:
infer the output types and compare them and the numpy reference's outputs with the
expected data (dtype exactly, values with the case's rtol/atol).  Cases that need a dtype
Kiln does not have (bfloat16, float8, 4/2-bit ints, strings, sequences) are skipped with
that reason; training-mode Dropout must be refused with a clear error.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import AttributeProto, helper, numpy_helper

from tests.onnx_cases import single_node_cases
from toolchain.errors import ModelError
from toolchain.graph.ir import Node, Value, dtype_of
from toolchain.graph.ops import get_op
from toolchain.graph.ops.common import check_onnx_dtype

OPS = frozenset(
    "Relu LeakyRelu PRelu Clip Sigmoid HardSigmoid HardSwish Tanh Erf Gelu Exp Log Sqrt "
    "Reciprocal Neg Abs Pow Add Sub Mul Div Min Max Where Equal Less Greater Not Cast "
    "ReduceMean ReduceSum ReduceMax ReduceMin ArgMax Constant ConstantOfShape Shape Identity "
    "Dropout QuantizeLinear DequantizeLinear "
    # elementwise_ext
    "Ceil Floor Round Sign Sin Cos Tan Asin Acos Atan Sinh Cosh Asinh Acosh Atanh Softplus "
    "Softsign Mish BitwiseNot Elu Selu Celu ThresholdedRelu Shrink IsNaN IsInf Mod BitShift "
    "And Or Xor LessOrEqual GreaterOrEqual "
    "ReduceProd ReduceL1 ReduceL2 ReduceSumSquare ReduceLogSum ReduceLogSumExp ArgMin "
    "Hardmax BitwiseAnd BitwiseOr BitwiseXor".split()
)
#: operands that a real model gives as initializers (Kiln needs them at compile time)
_CONST_OPERANDS = {
    "ReduceMean": {1}, "ReduceSum": {1}, "ReduceMax": {1}, "ReduceMin": {1},
    "ConstantOfShape": {0}, "Dropout": {1, 2}, "ReduceProd": {1}, "ReduceL1": {1},
    "ReduceL2": {1}, "ReduceSumSquare": {1}, "ReduceLogSum": {1}, "ReduceLogSumExp": {1},
}
#: ONNX attributes that hold data-type codes
_DTYPE_ATTRS = {("Cast", "to"), ("QuantizeLinear", "output_dtype"),
                ("DequantizeLinear", "output_dtype")}


CASES = single_node_cases(OPS)  # the onnx wheel's cases, made once (tests/onnx_cases.py)


class Unsupported(Exception):
    """The case needs something Kiln deliberately lacks (the message says what)."""


def _kiln_array(x: Any, what: str) -> np.ndarray:
    if isinstance(x, np.generic):
        x = np.asarray(x)
    elif hasattr(x, "data_type") and hasattr(x, "dims"):  # a TensorProto of an exotic dtype
        x = numpy_helper.to_array(x)
    if not isinstance(x, np.ndarray):
        raise Unsupported(f"{what} is a {type(x).__name__} (sequence/optional values)")
    try:
        dtype_of(x)
    except ModelError:
        raise Unsupported(f"{what} has dtype {x.dtype}, which Kiln does not support") from None
    return x


def _attrs(op: str, proto: Any) -> dict[str, Any]:
    attrs = {}
    for a in proto.attribute:
        value = helper.get_attribute_value(a)
        if a.type == AttributeProto.TENSOR:
            value = _kiln_array(numpy_helper.to_array(value), f"attribute {a.name!r}")
        elif a.type == AttributeProto.SPARSE_TENSOR:
            raise Unsupported("sparse tensor attribute")
        if (op, a.name) in _DTYPE_ATTRS and value and check_onnx_dtype(value):
            raise Unsupported(f"attribute {a.name!r}: {check_onnx_dtype(value)}")
        attrs[a.name] = value
    return attrs


def _build(case: Any, inputs: list[Any]) -> tuple[Node, list[np.ndarray | None]]:
    proto = case.model.graph.node[0]
    op = proto.op_type
    feeds = {vi.name: _kiln_array(arr, f"input {vi.name!r}")
             for vi, arr in zip(case.model.graph.input, inputs, strict=False)}
    attrs = _attrs(op, proto)
    arrays: list[np.ndarray | None] = [feeds[n] if n else None for n in proto.input]
    if op == "Dropout" and "ratio" in attrs:  # opset <= 11 form: ratio became an input
        ratio = np.array(attrs.pop("ratio"), dtype=np.float32)
        arrays = [arrays[0], ratio] + arrays[1:]
    const = _CONST_OPERANDS.get(op, set())
    values = [None if a is None else (Value.constant(f"in{i}", a) if i in const
                                      else Value(f"in{i}", a.shape, dtype_of(a)))
              for i, a in enumerate(arrays)]
    outs = [Value(f"out{k}", (), "float32") for k, name in enumerate(proto.output) if name]
    return Node(op, proto.name or "node", values, outs, attrs), arrays


def run_case(case: Any) -> None:
    """Check one node-test case; raises ``Unsupported`` or an assertion error."""
    for inputs, outputs in case.data_sets:
        node, arrays = _build(case, list(inputs))
        opdef = get_op(node.op)
        trains = node.op == "Dropout" and arrays[2:] and arrays[2] is not None and arrays[2].any()
        if trains:
            with pytest.raises(ModelError, match="training_mode is true"):
                opdef.infer(node)
            continue
        expected = [_kiln_array(o, "expected output") for o in outputs]
        types = opdef.infer(node)
        results = opdef.reference(arrays, node.attrs)
        assert len(types) == len(expected), (types, len(expected))
        for k, (t, got, want) in enumerate(zip(types, results, expected, strict=False)):
            assert (t.dtype, t.shape) == (dtype_of(want), want.shape), (k, t, want.shape)
            assert got.dtype == want.dtype and got.shape == want.shape, (k, got.dtype)
            if want.dtype.kind == "f":
                np.testing.assert_allclose(got, want, rtol=case.rtol, atol=case.atol,
                                           equal_nan=True, err_msg=f"output {k}")
            else:
                np.testing.assert_array_equal(got, want, err_msg=f"output {k}")


def test_cases_were_found():
    # Guards against a silently empty parametrisation (e.g. a renamed onnx module).
    assert len(CASES) > 300
    assert {c.model.graph.node[0].op_type for c in CASES} == OPS


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_case(case: Any) -> None:
    try:
        run_case(case)
    except Unsupported as exc:
        pytest.skip(f"Kiln lacks it: {exc}")
