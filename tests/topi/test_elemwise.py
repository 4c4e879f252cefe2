"""Elementwise computes vs the op registry's numpy references (through the topi registry)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.topi.util import check_node, rand
from toolchain import te
from toolchain.topi import elemwise
from toolchain.topi.registry import compute_for_node

UNARY = ["Relu", "Sigmoid", "HardSwish", "Tanh", "Erf", "Exp", "Log", "Sqrt", "Reciprocal",
         "Neg", "Abs"]


@pytest.mark.parametrize("op", UNARY)
@pytest.mark.parametrize("shape", [(7,), (2, 3, 5)])
def test_unary_float(op: str, shape: tuple[int, ...]) -> None:
    x = rand(*shape, lo=0.1 if op in ("Log", "Sqrt") else -3.0, hi=3.0)
    check_node(op, [x], rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("op,dtype", [("Relu", "int32"), ("Neg", "int8"), ("Abs", "int64"),
                                      ("Abs", "uint8")])
def test_unary_int(op: str, dtype: str) -> None:
    check_node(op, [rand(3, 5, dtype=dtype, lo=-50, hi=50 if dtype != "uint8" else 200)])


@pytest.mark.parametrize("op,attrs", [
    ("LeakyRelu", {}), ("LeakyRelu", {"alpha": 0.3}),
    ("HardSigmoid", {}), ("HardSigmoid", {"alpha": 0.5, "beta": 0.1}),
    ("Gelu", {}), ("Gelu", {"approximate": "tanh"}),
])
def test_activations_with_attrs(op: str, attrs: dict) -> None:
    check_node(op, [rand(4, 9, lo=-5, hi=5)], attrs, rtol=2e-6, atol=2e-6)


def test_not() -> None:
    check_node("Not", [rand(3, 4, dtype="bool")])


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Equal", "Less", "Greater"])
@pytest.mark.parametrize("sa,sb", [((3, 4), (3, 4)), ((2, 1, 5), (3, 1)), ((4,), (2, 3, 4)),
                                   ((1,), (5, 1))])
def test_binary_broadcast(op: str, sa: tuple, sb: tuple) -> None:
    a, b = rand(*sa, seed=1), rand(*sb, seed=2)
    if op == "Div":
        b = np.where(np.abs(b) < 0.1, 0.5, b).astype(np.float32)
    if op == "Equal":  # small integers so that some elements are equal
        a, b = np.round(a), np.round(b)
    check_node(op, [a, b])


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_div_truncates_and_arith_wraps(dtype: str) -> None:
    a = np.array([[-7, 7, -8, 9], [100, -100, 1, 0]], dtype)
    b = np.array([2, -2, 3, 5], dtype)
    check_node("Div", [a, b])
    big = np.array([np.iinfo(dtype).max, 5], dtype)
    check_node("Add", [big, np.array([1, 1], dtype)])


def test_pow_float_and_int() -> None:
    check_node("Pow", [rand(3, 4, lo=0.5, hi=3), rand(4, seed=3, lo=-2, hi=2)], rtol=2e-6)
    x = np.array([[2, -3, 5], [0, 7, -1]], np.int32)
    y = np.array([3, 2, 0], np.int64)
    check_node("Pow", [x, y])
    check_node("Pow", [x, np.array([2, -1, 1], np.int32)])
    check_node("Pow", [x, np.array([0.5, 2.0, 1.5], np.float32)])


def test_prelu_unidirectional() -> None:
    check_node("PRelu", [rand(2, 3, 4), rand(3, 1, seed=5)])
    check_node("PRelu", [rand(2, 3, 4), rand(4, seed=5)])


@pytest.mark.parametrize("sc,sx,sy", [((3, 4), (3, 4), (3, 4)), ((4,), (3, 1), (1,))])
def test_where(sc: tuple, sx: tuple, sy: tuple) -> None:
    check_node("Where", [rand(*sc, dtype="bool"), rand(*sx, seed=1), rand(*sy, seed=2)])


@pytest.mark.parametrize("op", ["Min", "Max"])
def test_variadic_minmax(op: str) -> None:
    check_node(op, [rand(3, 4), rand(4, seed=1), rand(3, 1, seed=2)])
    check_node(op, [rand(5, seed=3)])


@pytest.mark.parametrize("bounds", [(-0.5, 0.7), (None, 0.2), (-1.0, None), (1.0, -1.0)])
@pytest.mark.parametrize("const", [True, False])
def test_clip(bounds: tuple, const: bool) -> None:
    lo, hi = (None if b is None else np.array(b, np.float32) for b in bounds)
    check_node("Clip", [rand(4, 5), lo, hi], const=(1, 2) if const else ())


def test_clip_int() -> None:
    check_node("Clip", [rand(4, 5, dtype="int32", lo=-20, hi=20), np.array(-3, np.int32),
                        np.array(9, np.int32)], const=(1, 2))


@pytest.mark.parametrize("src,dst,code", [
    ("float32", "int32", 6), ("float32", "bool", 9), ("int32", "float32", 1),
    ("bool", "float32", 1), ("int32", "int8", 3), ("float32", "float64", 11),
    ("int64", "uint8", 2),
])
def test_cast(src: str, dst: str, code: int) -> None:
    x = rand(3, 5, lo=-300, hi=300, dtype=src) if src != "bool" else rand(3, 5, dtype="bool")
    if src == "float32":
        x[0, :3] = [0.0, -0.0, 2.5]
    (out,) = check_node("Cast", [x], {"to": code})
    assert out.dtype == np.dtype(dst)


@pytest.mark.parametrize("case", ["tensor", "axis", "block"])
@pytest.mark.parametrize("zp_dtype", ["uint8", "int8", None])
def test_quantize_linear(case: str, zp_dtype: str | None) -> None:
    x = rand(2, 4, 5, lo=-30, hi=30)
    x[0, 0, :4] = [0.5, 1.5, 2.5, -2.5]  # exact ties round to even
    if case == "tensor":
        scale, attrs = np.array(0.5, np.float32), {}
    elif case == "axis":
        scale, attrs = np.array([0.5, 0.25, 1.0, 0.125], np.float32), {"axis": 1}
    else:
        scale, attrs = np.array([[[0.5, 1.0, 0.25]]] * 2, np.float32).reshape(2, 1, 3), \
            {"axis": 2, "block_size": 2}
        scale = np.broadcast_to(scale, (2, 4, 3)).copy()
    zp = None
    if zp_dtype is not None:
        zp = np.full(scale.shape, 3, zp_dtype)
    check_node("QuantizeLinear", [x, scale, zp], attrs)


@pytest.mark.parametrize("case", ["tensor", "axis"])
def test_dequantize_linear(case: str) -> None:
    x = rand(3, 4, dtype="int8", lo=-128, hi=127)
    if case == "tensor":
        scale, zp, attrs = np.array(0.1, np.float32), np.array(-5, np.int8), {}
    else:
        scale = np.array([0.1, 0.5, 2.0, 0.25], np.float32)
        zp, attrs = np.array([1, -2, 0, 7], np.int8), {"axis": 1}
    check_node("DequantizeLinear", [x, scale, zp], attrs, rtol=1e-6)
    check_node("DequantizeLinear", [x, scale, None], attrs, rtol=1e-6)


def test_identity_and_dropout_copy() -> None:
    check_node("Identity", [rand(3, 2)])
    got = check_node("Dropout", [rand(3, 2)], n_out=2)
    assert got[1].dtype == np.bool_ and got[1].all()


def test_rank0_operands_are_one_element_buffers() -> None:
    check_node("Add", [np.array(1.5, np.float32), np.array(2.0, np.float32)])
    check_node("Mul", [rand(3), np.array(2.0, np.float32)])


def test_identity_compute_is_a_copy_stage() -> None:
    from tests.topi.util import make_node

    ins, outs = compute_for_node(make_node("Identity", [rand(4)]))
    assert outs[0] is not ins[0] and outs[0].op.input_tensors() == [ins[0]]


def test_round_is_half_even_on_every_backend() -> None:
    """``te.round`` (quantize_linear, integer Resize) takes halves to even, interpreted and
    compiled (C's nearbyint), like numpy."""
    from tests.topi.util import BUILD, run_te
    from toolchain.tir import interpreter

    x = te.placeholder((8,), name="x")
    y = te.compute((8,), lambda i: te.round(x[i]), name="y")
    v = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4, -2.6, 3.0], np.float32)
    (got,) = run_te([x], [y], [v])
    np.testing.assert_array_equal(got, np.rint(v))
    func = te.create_prim_func([x, y])
    out = np.zeros(8, np.float32)
    interpreter.run(func, v, out)
    np.testing.assert_array_equal(out, np.rint(v))
    if BUILD is not None:
        out = np.zeros(8, np.float32)
        BUILD(func, target="c")(v, out)
        np.testing.assert_array_equal(out, np.rint(v))


def test_large_elementwise_chain_compiled() -> None:
    """Big enough that run_te compiles it with the C backend when one is available."""
    from tests.topi.util import BUILD, run_te, use_c

    x = te.placeholder((64, 400), name="x")
    b = te.placeholder((400,), name="b")
    y = elemwise.gelu(elemwise.add(x, b), "tanh")
    assert use_c([y]) == (BUILD is not None)
    xv, bv = rand(64, 400), rand(400, seed=1)
    (got,) = run_te([x, b], [y], [xv, bv])
    v = (xv + bv).astype(np.float64)
    want = 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v**3)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["Relu", "Add", "Sigmoid", "Tanh"])
def test_float16(op: str) -> None:
    x = rand(3, 4).astype(np.float16)
    check_node(op, [x, x] if op == "Add" else [x], rtol=2e-3, atol=1e-3)


def test_relu_keeps_nan() -> None:
    check_node("Relu", [np.array([np.nan, -1.0, 2.0], np.float32)])


@pytest.mark.parametrize("op", ["Exp", "Log", "Tanh", "Erf", "Sqrt", "Sigmoid"])
def test_float64_math(op: str) -> None:
    check_node(op, [rand(3, 4, lo=0.1, hi=3.0).astype(np.float64)], rtol=1e-12, atol=1e-14)
