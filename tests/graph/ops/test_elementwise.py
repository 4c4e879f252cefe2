"""Elementwise ops: references against onnxruntime, shape/dtype inference, attribute and
dtype errors, broadcasting (including a hypothesis property test)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tests.graph.ops.util import check_vs_ort, data, infer, make_node, ref
from toolchain.errors import ModelError
from toolchain.graph.ir import TensorType, Value
from toolchain.graph.ops import PatternKind, get_op
from toolchain.graph.ops.common import ALL_TYPES, FLOAT_TYPES, KILN_TO_ONNX

UNARY = ["Relu", "Sigmoid", "HardSwish", "Tanh", "Erf", "Exp", "Log", "Sqrt", "Reciprocal",
         "Neg", "Abs", "LeakyRelu", "HardSigmoid", "Gelu", "Not"]
BINARY = ["Add", "Sub", "Mul", "Div", "Equal", "Less", "Greater"]


def _accepts(op: str, dtype: str, n_inputs: int = 1) -> bool:
    try:
        infer(op, [data(dtype)] * n_inputs)
    except ModelError:
        return False
    return True


def _op_dtypes(ops: list[str], n_inputs: int) -> list[tuple[str, str]]:
    """(op, dtype) pairs the op accepts (the accepted sets are checked against ONNX below)."""
    return [(op, dt) for op in ops for dt in ALL_TYPES if _accepts(op, dt, n_inputs)]


def _tol(dtype: str) -> dict:
    return {"rtol": 1e-3, "atol": 1e-3} if dtype == "float16" else {"rtol": 2e-6, "atol": 1e-7}


@pytest.mark.parametrize("op, dtype", _op_dtypes(UNARY, 1))
def test_unary_matches_onnxruntime(op, dtype):
    x = data(dtype, (2, 3, 5), positive=op in ("Log", "Sqrt"))
    check_vs_ort(op, [x], **_tol(dtype))


@pytest.mark.parametrize("op, attrs", [
    ("LeakyRelu", {"alpha": 0.3}),
    ("HardSigmoid", {"alpha": 0.4, "beta": 0.3}),
    ("Gelu", {"approximate": "tanh"}),
    ("Gelu", {"approximate": "none"}),
])
def test_unary_attributes_match_onnxruntime(op, attrs):
    # atol: onnxruntime's float32 tanh-Gelu cancels in 1 + tanh(..) for x < -3; Kiln's
    # float64 reference does not, so they differ by ~3e-7 absolute there.
    check_vs_ort(op, [data("float32", (4, 6))], attrs, rtol=2e-6, atol=1e-6)


def test_special_values_of_unary_float_ops():
    x = np.array([0.0, -1.0, np.inf, -np.inf, np.nan, 80.0, -80.0], np.float32)
    for op in ("Sigmoid", "Tanh", "Erf", "Exp", "Log", "Sqrt", "Reciprocal", "Relu"):
        check_vs_ort(op, [x], rtol=2e-6, atol=1e-30)


@pytest.mark.parametrize("op, dtype", _op_dtypes(BINARY, 2))
def test_binary_broadcast_matches_onnxruntime(op, dtype):
    a = data(dtype, (2, 3, 4), nonzero=op == "Div")
    b = data(dtype, (3, 1), nonzero=op == "Div")
    check_vs_ort(op, [a, b], **_tol(dtype))
    check_vs_ort(op, [b, a], **_tol(dtype))


def test_integer_division_truncates_toward_zero():
    a = np.array([-7, 7, -7, 7, -6, 0, -1], np.int32)
    b = np.array([2, -2, -2, 2, 3, 5, 4], np.int32)
    (y,) = check_vs_ort("Div", [a, b])
    assert y.tolist() == [-3, -3, 3, 3, -2, 0, 0]


def test_integer_arithmetic_wraps_like_onnxruntime():
    a = np.array([120, -120, 100], np.int8)
    b = np.array([10, -10, 3], np.int8)
    for op in ("Add", "Sub", "Mul"):
        check_vs_ort(op, [a, b])
    u = np.array([250, 3], np.uint8)
    check_vs_ort("Sub", [np.array([3, 250], np.uint8), u])


@pytest.mark.parametrize("xt, yt", [
    ("float32", "float32"), ("float32", "int64"), ("float32", "int32"), ("int64", "float32"),
    ("int32", "float32"), ("int64", "int64"), ("int32", "int32"), ("float32", "uint32"),
    ("float64", "float64"), ("float16", "float16"),
])
def test_pow_mixed_dtypes_match_onnxruntime(xt, yt):
    x = np.array([[1, 2, 3, -2], [4, 0, 2, 5]], xt)
    y = np.array([3, 2, 0, 2], yt)
    (z,) = check_vs_ort("Pow", [x, y], **_tol(xt))
    assert z.dtype == np.dtype(xt)
    check_vs_ort("Pow", [np.abs(data("float32", (3, 2))) + 0.5,
                         np.array(0.5, np.float32)], rtol=2e-6)


def test_pow_integer_base_negative_and_fractional_exponents():
    x = np.array([2, -2, 1, -1, 3, 0], np.int32)
    (z,) = check_vs_ort("Pow", [x, np.array([-1, -1, -2, -3, -2, 2], np.int32)])
    assert z.tolist() == [0, 0, 1, -1, 0, 0]
    x64 = np.array([2, 9, 1, 7, 3, 5], np.int64)
    (w,) = check_vs_ort("Pow", [x64, np.array([0.5, 0.5, -2, 0.3, -2, 1.5], np.float32)])
    assert w.tolist() == [1, 3, 1, 1, 0, 11]


def test_pow_of_integers_is_exact_beyond_float_precision():
    x = np.array([3, -3], np.int64)
    y = np.array([39, 39], np.int64)
    (z,) = ref("Pow", [x, y])
    assert z.tolist() == [3**39, (-3) ** 39]


@pytest.mark.parametrize("op", ["Min", "Max"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "uint8", "int64"])
def test_variadic_min_max_broadcast(op, dtype):
    ins = [data(dtype, (2, 1, 4)), data(dtype, (3, 1)), data(dtype, (4,))]
    (y,) = check_vs_ort(op, ins, **_tol(dtype))
    assert y.shape == (2, 3, 4)
    check_vs_ort(op, ins[:1])  # a single input is a copy


def test_where_broadcasts_all_three_operands():
    c = data("bool", (2, 1, 4))
    for dtype in ("float32", "int64", "bool", "uint8"):
        x, y = data(dtype, (3, 1)), data(dtype, (4,))
        (out,) = check_vs_ort("Where", [c, x, y])
        assert out.shape == (2, 3, 4)


def test_comparisons_give_bool():
    a, b = data("float32", (3, 4)), data("float32", (4,))
    for op in ("Equal", "Less", "Greater"):
        assert infer(op, [a, b]) == [TensorType((3, 4), "bool")]
    check_vs_ort("Not", [data("bool", (2, 2, 3))])


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8", "int32", "int64", "uint8",
                                   "float64", "uint32"])
@pytest.mark.parametrize("bounds", ["both", "min", "max", "none", "inverted"])
def test_clip_bounds_match_onnxruntime(dtype, bounds):
    x = data(dtype, (3, 5))
    lo = np.array(2 if dtype.startswith("uint") else -2, dtype)
    hi = np.array(3, dtype)
    ins = {"both": [x, lo, hi], "min": [x, lo], "max": [x, None, hi], "none": [x],
           "inverted": [x, hi, lo]}[bounds]
    (y,) = check_vs_ort("Clip", ins)
    if bounds == "inverted":  # ONNX: min > max sets everything to max
        assert (y == lo).all()


@pytest.mark.parametrize("src", ALL_TYPES)
def test_cast_between_every_kiln_dtype_matches_onnxruntime(src):
    if src == "bool":
        x = data("bool", (4, 5))
    elif src.startswith("float"):
        x = np.array([[0.0, -0.0, 1.5, -1.5, 2.7], [-2.7, 100.25, 7.0, 0.49, 63.9]], src)
        if src != "float16":
            x = np.concatenate([x, [[1e5, -1e5, 3.3e4, -3.3e4, 1.0]]]).astype(src)
    else:
        x = data(src, (4, 5))
    for dst in ALL_TYPES:
        xs = x
        if src.startswith("float") and not dst.startswith("float") and dst != "bool":
            info = np.iinfo(dst)  # float -> int is undefined out of range: stay inside
            xs = x[(x >= info.min).all(axis=1) & (x <= info.max).all(axis=1)]
        (y,) = check_vs_ort("Cast", [xs], {"to": KILN_TO_ONNX[dst]}, rtol=0)
        assert y.dtype == np.dtype(dst)


def test_cast_wraps_integers_and_truncates_floats():
    (y,) = ref("Cast", [np.array([200, -129, 256], np.int32)], {"to": KILN_TO_ONNX["int8"]})
    assert y.tolist() == [-56, 127, 0]
    (z,) = ref("Cast", [np.array([-2.9, 2.9, -0.5], np.float32)], {"to": 6})
    assert z.tolist() == [-2, 2, 0]
    (b,) = ref("Cast", [np.array([0.0, -0.0, 0.1, np.nan], np.float32)], {"to": 9})
    assert b.tolist() == [False, False, True, True]


def test_cast_accepts_saturate_and_round_mode():
    # Both only affect float8 targets (ONNX); onnxruntime refuses them elsewhere, Kiln
    # accepts and ignores them as the spec says.
    x = data("float32", (2, 3))
    (plain,) = check_vs_ort("Cast", [x], {"to": 10}, rtol=0)
    (y,) = ref("Cast", [x], {"to": 10, "saturate": 0, "round_mode": "nearest"})
    assert infer("Cast", [x], {"to": 10, "saturate": 0}) == [TensorType((2, 3), "float16")]
    np.testing.assert_array_equal(y, plain)


# -- inference and errors -------------------------------------------------------------------

def test_binary_shape_inference_broadcasts():
    a = Value("a", (8, 1, 6, 1), "float32")
    b = Value("b", (7, 1, 5), "float32")
    assert infer("Add", [a, b]) == [TensorType((8, 7, 6, 5), "float32")]
    assert infer("Less", [a, b]) == [TensorType((8, 7, 6, 5), "bool")]
    assert infer("Add", [Value("s", (), "int8"), Value("t", (), "int8")]) == [
        TensorType((), "int8")]


def test_incompatible_broadcast_names_the_node():
    node = make_node("Mul", [data("float32", (2, 3)), data("float32", (4,))], name="scale1")
    with pytest.raises(ModelError, match=r"node 'scale1' \(Mul\).*\[2, 3\] and \[4\]"):
        get_op("Mul").infer(node)


def test_dtype_mismatch_names_node_and_inputs():
    node = make_node("Add", [data("float32"), data("int64")], name="add7")
    with pytest.raises(ModelError, match=r"node 'add7' \(Add\): inputs A .*float32.* and B "
                                         r".*int64.* must have the same dtype; insert a Cast"):
        get_op("Add").infer(node)


def test_unsupported_dtype_names_node_and_choices():
    node = make_node("Sigmoid", [data("int32")], name="sig")
    with pytest.raises(ModelError, match=r"node 'sig' \(Sigmoid\): input 0 \(X\).*int32.*"
                                         r"float16, float32, float64"):
        get_op("Sigmoid").infer(node)
    node = make_node("Relu", [data("uint8")], name="r")
    with pytest.raises(ModelError, match="uint8"):
        get_op("Relu").infer(node)


def test_bad_attributes_name_node_and_attribute():
    node = make_node("Gelu", [data("float32")], {"approximate": "erf"}, name="g1")
    with pytest.raises(ModelError, match=r"node 'g1' \(Gelu\): attribute 'approximate' = "
                                         r"'erf' is not one of 'none', 'tanh'"):
        get_op("Gelu").infer(node)
    node = make_node("LeakyRelu", [data("float32")], {"alpha": "big"}, name="lr")
    with pytest.raises(ModelError, match=r"node 'lr' \(LeakyRelu\): attribute 'alpha'"):
        get_op("LeakyRelu").infer(node)
    node = make_node("Relu", [data("float32")], {"beta": 1.0}, name="r")
    with pytest.raises(ModelError, match=r"attribute 'beta' is not supported \(known: none\)"):
        get_op("Relu").infer(node)


def test_cast_to_unsupported_type_is_refused_with_its_name():
    node = make_node("Cast", [data("float32")], {"to": 16}, name="c")
    with pytest.raises(ModelError, match=r"node 'c' \(Cast\): attribute 'to' = 16: ONNX data "
                                         r"type BFLOAT16 is not supported by Kiln"):
        get_op("Cast").infer(node)
    node = make_node("Cast", [data("float32")], {}, name="c2")
    with pytest.raises(ModelError, match=r"node 'c2' \(Cast\): attribute 'to' is required"):
        get_op("Cast").infer(node)
    node = make_node("Cast", [data("float32")], {"to": 1, "round_mode": "odd"}, name="c3")
    with pytest.raises(ModelError, match="round_mode"):
        get_op("Cast").infer(node)


def test_prelu_slope_must_broadcast_to_input():
    assert infer("PRelu", [data("float32", (2, 3, 4)), data("float32", (3, 1))]) == [
        TensorType((2, 3, 4), "float32")]
    check_vs_ort("PRelu", [data("float32", (2, 3, 4)), data("float32", (3, 1))])
    node = make_node("PRelu", [data("float32", (3, 1)), data("float32", (2, 3, 4))], name="p")
    with pytest.raises(ModelError, match=r"node 'p' \(PRelu\): slope shape \[2, 3, 4\] must "
                                         r"broadcast to the input shape \[3, 1\]"):
        get_op("PRelu").infer(node)


def test_clip_bounds_must_be_scalars_of_the_input_dtype():
    node = make_node("Clip", [data("float32"), data("float32", (2,))], name="cl")
    with pytest.raises(ModelError, match=r"node 'cl' \(Clip\): input 1 \(min\) must be a "
                                         "scalar"):
        get_op("Clip").infer(node)
    node = make_node("Clip", [data("float32"), np.array(0, np.int32)], name="cl")
    with pytest.raises(ModelError, match="same dtype"):
        get_op("Clip").infer(node)


def test_missing_required_input_and_too_many_inputs():
    node = make_node("Where", [data("bool"), None, data("float32")], name="w")
    with pytest.raises(ModelError, match=r"node 'w' \(Where\): required input 1 \(X\) is "
                                         "missing"):
        get_op("Where").infer(node)
    node = make_node("Neg", [data("float32"), data("float32")], name="n")
    with pytest.raises(ModelError, match="takes at most 1"):
        get_op("Neg").infer(node)
    node = make_node("Where", [data("float32"), data("float32"), data("float32")], name="w")
    with pytest.raises(ModelError, match=r"condition.*bool"):
        get_op("Where").infer(node)


def test_dtypes_accepted_agree_with_the_onnx_schema():
    import onnx.defs

    ops = UNARY + BINARY + ["Pow", "PRelu", "Min", "Max", "Clip", "Cast", "Where"]
    for op in ops:
        schema = onnx.defs.get_schema(op, 28)
        tc = {t.type_param_str: set(t.allowed_type_strs) for t in schema.type_constraints}
        first = tc[schema.inputs[1 if op == "Where" else 0].type_str]
        for dtype in ALL_TYPES:
            onnx_name = {"float32": "float", "float64": "double"}.get(dtype, dtype)
            expected = f"tensor({onnx_name})" in first
            n = {"Where": 3}.get(op, 2 if op in BINARY + ["Pow", "PRelu"] else 1)
            ins = [data(dtype)] * n
            if op == "Where":
                ins[0] = data("bool")
            assert _accepts_ins(op, ins) == expected, (op, dtype)


def _accepts_ins(op, ins):
    try:
        infer(op, ins, {"to": 1} if op == "Cast" else None)
    except ModelError:
        return False
    return True


def test_pattern_kinds_and_flops():
    for op in UNARY + BINARY + ["Pow", "PRelu", "Min", "Max", "Clip", "Cast", "Where"]:
        assert get_op(op).pattern is PatternKind.INJECTIVE
    x = Value("x", (2, 8), "float32")
    node = make_node("Add", [x, x])
    node = node.replace(outputs=(Value("y", (2, 8), "float32"),))
    assert get_op("Add").flops_of(node) == 16
    three = make_node("Max", [x, x, x]).replace(outputs=(Value("y", (2, 8), "float32"),))
    assert get_op("Max").flops_of(three) == 32
    cast = make_node("Cast", [x], {"to": 6}).replace(outputs=(Value("y", (2, 8), "int32"),))
    assert get_op("Cast").flops_of(cast) == 0


# -- property: broadcasting binary ops --------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(
    shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=4, max_side=4),
    op=st.sampled_from(["Add", "Sub", "Mul", "Div", "Less", "Equal", "Max"]),
    dtype=st.sampled_from(["float32", "int32", "uint8"]),
    seed=st.integers(0, 2**16),
)
def test_broadcasting_binary_ops_property(shapes, op, dtype, seed):
    a = data(dtype, shapes.input_shapes[0], seed=seed)
    b = data(dtype, shapes.input_shapes[1], nonzero=True, seed=seed + 1)
    (t,) = infer(op, [a, b])
    assert t.shape == shapes.result_shape
    (y,) = ref(op, [a, b])
    assert y.shape == shapes.result_shape and y.dtype == np.dtype(t.dtype)
    check_vs_ort(op, [a, b])


@settings(max_examples=25, deadline=None)
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3))
def test_incompatible_shapes_always_raise(shapes):
    a_shape = shapes.input_shapes[0]
    bad = tuple(a_shape[:-1]) + (a_shape[-1] + 1,) if a_shape and a_shape[-1] > 1 else None
    if bad is None:
        return
    with pytest.raises(ModelError, match="cannot be broadcast"):
        infer("Add", [np.zeros(a_shape, np.float32), np.zeros(bad, np.float32)])


def test_float_ops_keep_float16_and_float64():
    for dtype in FLOAT_TYPES:
        for op in ("Exp", "Sigmoid", "Erf", "Gelu"):
            (y,) = ref(op, [data(dtype)])
            assert y.dtype == np.dtype(dtype)
