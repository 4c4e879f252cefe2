"""The ops of ``elementwise_ext.py``: references against onnxruntime (or onnx.reference
where onnxruntime has no kernel), accepted dtypes against the ONNX schema, attribute
errors, traits."""

from __future__ import annotations

import numpy as np
import pytest

from tests.graph.ops.util import check_vs_ort, data, infer, make_node
from toolchain.errors import ModelError
from toolchain.graph.ir import Value
from toolchain.graph.ops import PatternKind, get_op
from toolchain.graph.ops.common import ALL_TYPES
from toolchain.graph.ops.elementwise_ext import OPS

F = np.float32
UNARY = ["Ceil", "Floor", "Round", "Sign", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh",
         "Cosh", "Asinh", "Acosh", "Atanh", "Softplus", "Softsign", "Mish", "BitwiseNot",
         "Elu", "Selu", "Celu", "ThresholdedRelu", "Shrink", "IsNaN", "IsInf"]
BINARY = ["Mod", "BitShift", "And", "Or", "Xor", "LessOrEqual", "GreaterOrEqual",
          "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Sum", "Mean"]
_ATTRS = {"BitShift": {"direction": "LEFT"}}
SPECIAL = np.array([0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 1.0, -1.0, 0.3, 3.0, -3.0, 1e-20,
                    50.0, -50.0, 100.0, -100.0, np.inf, -np.inf, np.nan], F)


def _onnx_reference(op: str, inputs: list[np.ndarray], attrs: dict) -> np.ndarray:
    """ONNX's own reference implementation of a one-node ``op``."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    names = [f"in{i}" for i in range(len(inputs))]
    node = helper.make_node(op, names, ["y"], **attrs)
    return ReferenceEvaluator(node).run(None, dict(zip(names, inputs, strict=True)))[0]


def _accepts(op: str, dtype: str, n: int) -> bool:
    try:
        infer(op, [data(dtype)] * n, _ATTRS.get(op))
    except ModelError:
        return False
    return True


def test_every_op_is_listed_here_and_injective_elementwise():
    assert sorted(op.name for op in OPS) == sorted(UNARY + BINARY + ["BitCast"])
    for op in OPS:
        assert op.pattern is PatternKind.INJECTIVE and op.elementwise and op.in_place


def test_dtypes_accepted_agree_with_the_onnx_schema():
    import onnx.defs

    for op in UNARY + BINARY:
        schema = onnx.defs.get_schema(op, 28)
        tc = {t.type_param_str: set(t.allowed_type_strs) for t in schema.type_constraints}
        allowed = tc[schema.inputs[0].type_str]
        for dtype in ALL_TYPES:
            name = {"float32": "float", "float64": "double"}.get(dtype, dtype)
            n = 2 if op in BINARY else 1
            assert _accepts(op, dtype, n) == (f"tensor({name})" in allowed), (op, dtype)


@pytest.mark.parametrize("op", [u for u in UNARY if u not in ("BitwiseNot", "Sign")])
def test_float_unary_matches_onnxruntime_on_special_values(op):
    x = SPECIAL if op not in ("Sinh", "Cosh") else SPECIAL[np.abs(SPECIAL) < 60]
    # onnxruntime's Softplus overflows to inf above ~88 (log(exp(x) + 1)); ONNX's own
    # reference and Kiln give x there
    if op in ("Softplus", "Mish"):
        x = x[~(np.abs(x) > 60)]
    check_vs_ort(op, [x], rtol=1e-6, atol=1e-30, opset=22)
    x64 = data("float64", (3, 4))
    if op == "Shrink":  # onnxruntime's float64 Shrink rounds x - bias to float32
        np.testing.assert_array_equal(get_op(op).reference([x64], {})[0],
                                      _onnx_reference(op, [x64], {}))
    elif op != "Celu":  # float64 Celu is opset 28, beyond onnxruntime 1.32
        check_vs_ort(op, [x64], rtol=1e-12, atol=1e-300, opset=22)


def test_softplus_is_overflow_free():
    (y,) = get_op("Softplus").reference([np.array([100.0, 1000.0, -1000.0], F)], {})
    assert y.tolist() == [100.0, 1000.0, 0.0]


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "float16"])
def test_sign_and_bitwise_not_match_onnxruntime(dtype):
    check_vs_ort("Sign", [data(dtype, (4, 5))], opset=22)
    if dtype != "float16":
        check_vs_ort("BitwiseNot", [data(dtype, (4, 5))], opset=22)


@pytest.mark.parametrize("op, attrs", [
    ("Elu", {"alpha": 0.5}), ("Selu", {"alpha": 2.0, "gamma": 3.0}), ("Celu", {"alpha": 2.0}),
    ("Celu", {"alpha": -0.5}), ("ThresholdedRelu", {"alpha": 0.5}),
    ("Shrink", {"bias": 1.5, "lambd": 1.5}), ("IsInf", {"detect_negative": 0}),
    ("IsInf", {"detect_positive": 0}),
])
def test_attributes_match_onnxruntime(op, attrs):
    check_vs_ort(op, [SPECIAL], attrs, rtol=1e-6, atol=1e-30, opset=22)


@pytest.mark.parametrize("dtype", ["int8", "int32", "uint8"])
def test_shrink_of_integers_matches_onnxruntime(dtype):
    x = np.arange(-5 if dtype != "uint8" else 0, 6).astype(dtype)
    check_vs_ort("Shrink", [x], {"bias": 1.5, "lambd": 1.5})


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint32", "float32", "float64"])
@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_matches_onnxruntime(dtype, fmod):
    a = data(dtype, (3, 4), seed=1)
    b = data(dtype, (4,), nonzero=True, seed=2)
    if dtype.startswith("float") and fmod == 0:
        # onnxruntime refuses float Mod with fmod=0 (which newer ONNX specs define)
        want = _onnx_reference("Mod", [a, b], {"fmod": 0})
        np.testing.assert_allclose(get_op("Mod").reference([a, b], {})[0], want, rtol=1e-6)
        return
    check_vs_ort("Mod", [a, b], {"fmod": fmod}, rtol=1e-6, opset=22)


def test_mod_signs_and_zero_divisor():
    a, b = np.array([-7, 7, -7, 7, 5], np.int32), np.array([3, -3, -3, 3, 0], np.int32)
    assert get_op("Mod").reference([a, b], {})[0].tolist() == [2, -2, -1, 1, 0]
    assert get_op("Mod").reference([a, b], {"fmod": 1})[0].tolist() == [-1, 1, -1, 1, 0]
    af, bf = a.astype(F), np.array([3, -3, -3, 3, np.inf], F)
    assert get_op("Mod").reference([af, bf], {})[0].tolist() == [2, -2, -1, 1, 5]


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32", "uint64"])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift_matches_onnxruntime(dtype, direction):
    x = data(dtype, (3, 5), positive=True, seed=3)
    s = (np.arange(15).reshape(3, 5) % 9).astype(dtype)
    check_vs_ort("BitShift", [x, s], {"direction": direction})


def test_signed_bitshift_is_arithmetic_and_clamped():
    x = np.array([-8, -8, 8, 1, -1, 5], np.int8)
    s = np.array([1, 9, 9, 7, -1, 2], np.int8)
    ref = get_op("BitShift").reference
    assert ref([x, s], {"direction": "RIGHT"})[0].tolist() == [-4, -1, 0, 0, -1, 1]
    assert ref([x, s], {"direction": "LEFT"})[0].tolist() == [-16, 0, 0, -128, 0, 20]


@pytest.mark.parametrize("op", BINARY[2:-2])
def test_logic_and_comparisons_match_onnxruntime(op):
    dtypes = (["bool"] if op in ("And", "Or", "Xor") else
              ["int8", "int32", "uint8", "uint64"] if op.startswith("Bitwise") else
              ["float32", "int64", "uint8"])
    for dt in dtypes:
        check_vs_ort(op, [data(dt, (2, 3, 4), seed=4), data(dt, (3, 1), seed=5)])


@pytest.mark.parametrize("op, attrs, match", [
    ("Celu", {"alpha": 0.0}, "'alpha' = 0.0: must not be 0"),
    ("Shrink", {"lambd": -1.0}, "'lambd' = -1.0: must be >= 0"),
    ("BitShift", {}, "'direction' is required"),
    ("BitShift", {"direction": "UP"}, "'direction' = 'UP' is not one of 'LEFT', 'RIGHT'"),
    ("Mod", {"fmod": 2}, "'fmod' = 2 is not one of 0, 1"),
    ("IsInf", {"detect_negative": 3}, "'detect_negative' = 3"),
])
def test_attribute_errors_name_the_node(op, attrs, match):
    n = 2 if op in BINARY else 1
    dt = "uint8" if op == "BitShift" else "float32"
    node = make_node(op, [data(dt)] * n, attrs, name="bad")
    with pytest.raises(ModelError, match=rf"node 'bad' \({op}\): .*{match}"):
        get_op(op).infer(node)


def test_dtype_error_names_operand():
    node = make_node("Sin", [data("int32")], name="s")
    with pytest.raises(ModelError, match=r"node 's' \(Sin\): input 0 \(X\).*int32.*float16"):
        get_op("Sin").infer(node)


def test_flops_and_output_types():
    x = Value("x", (2, 8), "float32")
    node = make_node("Mish", [x]).replace(outputs=(Value("y", (2, 8), "float32"),))
    assert get_op("Mish").flops_of(node) == 5 * 16
    assert infer("IsNaN", [data("float16", (2, 3))])[0].dtype == "bool"
    assert infer("LessOrEqual", [data("int8", (2, 1)), data("int8", (3,))])[0].shape == (2, 3)


@pytest.mark.parametrize("op", ["Sum", "Mean"])
@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_sum_mean_match_onnxruntime(op, n, dtype):
    shapes = [(2, 3, 4), (3, 1), (4,)][:n]
    ins = [data(dtype, s, seed=k) for k, s in enumerate(shapes)]
    tol = {"rtol": 1e-3, "atol": 1e-3} if dtype == "float16" else {"rtol": 1e-6}
    check_vs_ort(op, ins, **tol)


@pytest.mark.parametrize("src, dst", [("float32", 6), ("int32", 1), ("float64", 7),
                                      ("uint16", 10), ("int8", 2), ("float16", 5)])
def test_bitcast_matches_onnxruntime(src, dst):
    x = data(src, (2, 5))
    if src == "float32":
        x[0, :3] = [np.inf, -0.0, np.nan]
    check_vs_ort("BitCast", [x], {"to": dst}, opset=26)


def test_bitcast_refuses_a_different_width():
    with pytest.raises(ModelError, match=r"node 'n' \(BitCast\): BitCast of float32 \(32 bits\) "
                                         r"to int64 \(64 bits\).*same bit width"):
        infer("BitCast", [data("float32", (3,))], {"to": 7})
