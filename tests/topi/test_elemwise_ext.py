"""Computes of the ops of ``graph/ops/elementwise_ext.py`` vs the registry's references,
including the edge values (NaN, ±inf, ±0, halves, integer extremes) where C and numpy
could disagree.  ``KILN_TOPI_EXECUTOR=c`` runs them all as compiled C."""

from __future__ import annotations

import numpy as np
import pytest

from tests.topi.util import check_node, rand

F = np.float32
SPECIAL = np.array([0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 1.0, -1.0, 0.999, -0.999, 3.0, -3.0,
                    1e-20, -1e-20, 50.0, -50.0, 100.0, -100.0, np.inf, -np.inf, np.nan], F)

MATH = ["Ceil", "Floor", "Round", "Sign", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh",
        "Cosh", "Asinh", "Acosh", "Atanh", "Softplus", "Softsign", "Mish"]


@pytest.mark.parametrize("op", MATH)
def test_unary_math_on_special_values(op: str) -> None:
    x = SPECIAL if op not in ("Sinh", "Cosh") else SPECIAL[np.abs(SPECIAL) < 60]
    check_node(op, [x], rtol=2e-6, atol=1e-30)


@pytest.mark.parametrize("op", ["Sin", "Round", "Mish", "Softplus", "Atanh"])
@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_unary_math_other_float_types(op: str, dtype: str) -> None:
    x = rand(3, 7, lo=-0.99, hi=0.99, dtype=dtype) * (1 if op == "Atanh" else 4)
    check_node(op, [x.astype(dtype)], rtol=2e-3 if dtype == "float16" else 1e-12, atol=1e-3
               if dtype == "float16" else 1e-14)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "uint32"])
def test_sign_and_bitwise_not_of_integers(dtype: str) -> None:
    info = np.iinfo(dtype)
    x = np.array([info.min, info.min + 1, -3, -1, 0, 1, 7, info.max], np.int64)
    x = x[(x >= info.min) & (x <= info.max)].astype(dtype)
    check_node("Sign", [x])
    check_node("BitwiseNot", [x])


@pytest.mark.parametrize("op, attrs", [
    ("Elu", {}), ("Elu", {"alpha": 0.5}), ("Selu", {}), ("Selu", {"alpha": 2.0, "gamma": 3.0}),
    ("Celu", {}), ("Celu", {"alpha": 2.0}), ("ThresholdedRelu", {}),
    ("ThresholdedRelu", {"alpha": 0.5}), ("Shrink", {}),
    ("Shrink", {"bias": 1.5, "lambd": 1.5}), ("Shrink", {"lambd": 0.0}),
])
def test_activations_with_attributes(op: str, attrs: dict) -> None:
    check_node(op, [SPECIAL], attrs, rtol=2e-6, atol=1e-30)
    check_node(op, [rand(4, 9, lo=-5, hi=5)], attrs, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", ["int8", "int32", "uint8"])
def test_shrink_of_integers_truncates(dtype: str) -> None:
    x = np.arange(-5 if dtype != "uint8" else 0, 6).astype(dtype)
    check_node("Shrink", [x], {"bias": 1.5, "lambd": 1.5})


def test_isnan_isinf() -> None:
    check_node("IsNaN", [SPECIAL])
    for pos in (0, 1):
        for neg in (0, 1):
            check_node("IsInf", [SPECIAL], {"detect_positive": pos, "detect_negative": neg})


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint16", "uint64"])
@pytest.mark.parametrize("fmod", [0, 1])
def test_integer_mod_signs_zero_and_minus_one(dtype: str, fmod: int) -> None:
    info = np.iinfo(dtype)
    pairs = [(-7, 3), (7, -3), (-7, -3), (7, 3), (0, 4), (5, 0), (9, 1), (int(info.min), -1),
             (int(info.max), 7), (3, -1), (int(info.max), int(info.max) - 1)]
    pairs = [(x, y) for x, y in pairs if x >= info.min and y >= info.min]
    a = np.array([p[0] for p in pairs], dtype)
    b = np.array([p[1] for p in pairs], dtype)
    check_node("Mod", [a, b], {"fmod": fmod})
    check_node("Mod", [a.reshape(-1, 1), b], {"fmod": fmod})  # broadcasting


@pytest.mark.parametrize("fmod", [0, 1])
def test_float_mod(fmod: int) -> None:
    a = np.array([-4.3, 7.2, 5.0, -5.0, 0.0, 3.0, np.inf, 2.0, -2.0, np.nan], F)
    b = np.array([2.1, -3.4, 2.5, 2.5, -3.0, 0.0, 2.0, np.inf, np.inf, 1.0], F)
    check_node("Mod", [a, b], {"fmod": fmod}, atol=1e-30)


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint64", "int8", "int32", "int64"])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift_wraps_sign_extends_and_clamps(dtype: str, direction: str) -> None:
    info = np.iinfo(dtype)
    bits = info.bits
    pairs = [(1, 1), (3, bits - 1), (int(info.max), 3), (int(info.min), 1), (-1, 2),
             (-100, 3), (100, 0), (5, bits), (6, bits + 3), (7, -1)]
    pairs = [(x, s) for x, s in pairs if x >= info.min and s >= info.min]
    x = np.array([p[0] for p in pairs], dtype)
    s = np.array([p[1] for p in pairs], dtype)
    check_node("BitShift", [x, s], {"direction": direction})


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logical_binaries_broadcast(op: str) -> None:
    check_node(op, [rand(2, 3, 4, dtype="bool"), rand(3, 1, dtype="bool", seed=1)])


@pytest.mark.parametrize("op", ["LessOrEqual", "GreaterOrEqual"])
@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_ordered_comparisons(op: str, dtype: str) -> None:
    a = np.round(rand(2, 3, 4, lo=-2, hi=2)).astype(dtype)
    b = np.round(rand(4, lo=-2, hi=2, seed=1)).astype(dtype)
    check_node(op, [a, b])


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "int64", "uint64"])
def test_bitwise_binaries(op: str, dtype: str) -> None:
    info = np.iinfo(dtype)
    vals = [0, 1, 5, 6, -1, -128, 127, int(info.min), int(info.max), 0x55, -0x56]
    vals = [v for v in vals if info.min <= v <= info.max]
    a = np.array(vals, dtype)
    check_node(op, [a.reshape(-1, 1), a], {})


@pytest.mark.parametrize("op", ["Sum", "Mean"])
def test_sum_mean_broadcast(op: str) -> None:
    ins = [rand(2, 3, 4), rand(3, 1, seed=1), rand(4, seed=2)]
    check_node(op, ins, {}, rtol=1e-6)
    check_node(op, ins[:1], {}, rtol=1e-6)
