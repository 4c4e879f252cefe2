"""More elementwise ops: rounding, trigonometric and hyperbolic math, the activations with
attributes (Elu, Selu, Celu, ThresholdedRelu, Shrink), Softplus/Softsign/Mish, IsNaN/IsInf,
Mod, BitShift, BitwiseNot/And/Or/Xor, the logical And/Or/Xor, LessOrEqual/GreaterOrEqual and
the variadic Sum and Mean, and BitCast (the input's bits as another type of the same width).

All are INJECTIVE and ``elementwise`` (fusable onto a convolution's output, layout-agnostic,
in place), exactly like the ops of :mod:`toolchain.graph.ops.elementwise`, whose rules they
reuse.  References follow ONNX (opset 28):

* transcendental float ops are evaluated in float64 and rounded once to the input dtype;
* ``Round`` rounds halves to even; ``Sign`` keeps NaN and the dtype;
* ``Mod`` with ``fmod=0`` takes the sign of the divisor (numpy ``mod``), with ``fmod=1`` the
  sign of the dividend (C ``fmod``/``%``); an integer zero divisor gives 0;
* ``BitShift``'s right shift is arithmetic for signed types; shifts < 0 or of the bit width
  or more give the sign fill (0, or -1 shifting a negative X right).

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ops import get_op
    >>> get_op("Mod").reference([np.array([-7, 7], np.int32), np.array([3, -3], np.int32)], {})
    [array([ 2, -2], dtype=int32)]
    >>> get_op("Round").reference([np.array([0.5, 1.5, -2.5], np.float32)], {})
    [array([ 0.,  2., -2.], dtype=float32)]
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from toolchain.errors import ModelError
from toolchain.graph.ir import Node, TensorType, np_dtype
from toolchain.graph.ops.common import (
    ALL_TYPES,
    FLOAT_TYPES,
    INT_TYPES,
    NUMERIC_TYPES,
    check_dtype,
    check_onnx_dtype,
    check_same_dtype,
    defop,
    input_value,
    kiln_dtype,
    per_element_flops,
)
from toolchain.graph.ops.elementwise import (
    binary_infer,
    binary_reference,
    in_float64,
    in_own_dtype,
    unary_infer,
)
from toolchain.graph.ops.registry import Attr, OpDef, PatternKind, broadcast_shapes

INJ = PatternKind.INJECTIVE
_QUIET = {"all": "ignore"}

#: Selu's defaults (the float32 values of ONNX's schema)
SELU_ALPHA = 1.67326319217681884765625
SELU_GAMMA = 1.05070102214813232421875


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


def _sign(x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    return np.sign(x) if x.dtype.kind != "u" else (x != 0).astype(x.dtype)


def _bitwise_not(x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    return np.invert(x)


_UNARY: tuple[tuple[str, Sequence[str], Callable, int, int, str], ...] = (
    # name, dtypes, reference, flops per element, first opset, note
    ("Ceil", FLOAT_TYPES, in_own_dtype(lambda x, a: np.ceil(x)), 1, 1, "smallest integer >= x"),
    ("Floor", FLOAT_TYPES, in_own_dtype(lambda x, a: np.floor(x)), 1, 1, "largest integer <= x"),
    ("Round", FLOAT_TYPES, in_own_dtype(lambda x, a: np.round(x)), 1, 11,
     "nearest integer, halves to even"),
    ("Sign", NUMERIC_TYPES, in_own_dtype(_sign), 1, 9, "-1, 0 or 1 (NaN stays NaN)"),
    ("Sin", FLOAT_TYPES, in_float64(lambda x, a: np.sin(x)), 1, 7, "sin(x)"),
    ("Cos", FLOAT_TYPES, in_float64(lambda x, a: np.cos(x)), 1, 7, "cos(x)"),
    ("Tan", FLOAT_TYPES, in_float64(lambda x, a: np.tan(x)), 1, 7, "tan(x)"),
    ("Asin", FLOAT_TYPES, in_float64(lambda x, a: np.arcsin(x)), 1, 7,
     "arcsin(x); NaN out of [-1, 1]"),
    ("Acos", FLOAT_TYPES, in_float64(lambda x, a: np.arccos(x)), 1, 7,
     "arccos(x); NaN out of [-1, 1]"),
    ("Atan", FLOAT_TYPES, in_float64(lambda x, a: np.arctan(x)), 1, 7, "arctan(x)"),
    ("Sinh", FLOAT_TYPES, in_float64(lambda x, a: np.sinh(x)), 1, 9, "sinh(x)"),
    ("Cosh", FLOAT_TYPES, in_float64(lambda x, a: np.cosh(x)), 1, 9, "cosh(x)"),
    ("Asinh", FLOAT_TYPES, in_float64(lambda x, a: np.arcsinh(x)), 1, 9, "arcsinh(x)"),
    ("Acosh", FLOAT_TYPES, in_float64(lambda x, a: np.arccosh(x)), 1, 9,
     "arccosh(x); NaN for x < 1"),
    ("Atanh", FLOAT_TYPES, in_float64(lambda x, a: np.arctanh(x)), 1, 9,
     "arctanh(x); ±inf at ±1, NaN beyond"),
    ("Softplus", FLOAT_TYPES, in_float64(lambda x, a: _softplus(x)), 3, 1,
     "log(1 + exp(x)), overflow-free (= x for large x)"),
    ("Softsign", FLOAT_TYPES, in_float64(lambda x, a: x / (1.0 + np.abs(x))), 3, 1,
     "x / (1 + |x|)"),
    ("Mish", FLOAT_TYPES, in_float64(lambda x, a: x * np.tanh(_softplus(x))), 5, 18,
     "x * tanh(softplus(x))"),
    ("BitwiseNot", INT_TYPES, in_own_dtype(_bitwise_not), 1, 18, "~x"),
)


def _unary_ops() -> tuple[OpDef, ...]:
    return tuple(
        defop(name, ("X",), INJ, infer=unary_infer(dtypes), reference=ref,
              flops=per_element_flops(cost), min_opset=since, doc=note, elementwise=True)
        for name, dtypes, ref, cost, since, note in _UNARY)


def _nonzero(v: float) -> str | None:
    return "must not be 0 (it divides x)" if v == 0 else None


def _non_negative(v: float) -> str | None:
    return "must be >= 0" if v < 0 else None


def _elu(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    return np.where(x > 0, x, a["alpha"] * np.expm1(x))


def _selu(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    return a["gamma"] * np.where(x > 0, x, a["alpha"] * np.expm1(x))


def _celu(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    alpha = a["alpha"]
    return np.maximum(x, 0.0) + np.minimum(0.0, alpha * np.expm1(x / alpha))


def _shrink(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    xf, lambd, bias = x.astype(np.float64), a["lambd"], a["bias"]
    y = np.where(xf < -lambd, xf + bias, np.where(xf > lambd, xf - bias, 0.0))
    with np.errstate(**_QUIET):
        return [y.astype(x.dtype)]


def _activations() -> tuple[OpDef, ...]:
    return (
        defop("Elu", ("X",), INJ, elementwise=True, attrs=(Attr("alpha", "float", 1.0),),
              infer=unary_infer(FLOAT_TYPES), reference=in_float64(_elu),
              flops=per_element_flops(3), min_opset=6,
              doc="x if x > 0 else alpha * (exp(x) - 1)"),
        defop("Selu", ("X",), INJ, elementwise=True,
              attrs=(Attr("alpha", "float", SELU_ALPHA), Attr("gamma", "float", SELU_GAMMA)),
              infer=unary_infer(FLOAT_TYPES), reference=in_float64(_selu),
              flops=per_element_flops(4), min_opset=6,
              doc="gamma * (x if x > 0 else alpha * (exp(x) - 1))"),
        defop("Celu", ("X",), INJ, elementwise=True,
              attrs=(Attr("alpha", "float", 1.0, check=_nonzero),),
              infer=unary_infer(FLOAT_TYPES), reference=in_float64(_celu),
              flops=per_element_flops(5), min_opset=12,
              doc="max(0, x) + min(0, alpha * (exp(x / alpha) - 1)); float16/float64 since "
                  "opset 28"),
        defop("ThresholdedRelu", ("X",), INJ, elementwise=True,
              attrs=(Attr("alpha", "float", 1.0),), infer=unary_infer(FLOAT_TYPES),
              reference=in_float64(lambda x, a: np.where(x > a["alpha"], x, 0.0)),
              flops=per_element_flops(1), min_opset=10, doc="x if x > alpha else 0"),
        defop("Shrink", ("input",), INJ, elementwise=True,
              attrs=(Attr("bias", "float", 0.0), Attr("lambd", "float", 0.5, check=_non_negative)),
              infer=unary_infer(NUMERIC_TYPES), reference=_shrink,
              flops=per_element_flops(2), min_opset=9,
              doc="x + bias if x < -lambd, x - bias if x > lambd, else 0; integers "
                  "computed in float64 and truncated toward zero"),
    )


# -- IsNaN, IsInf -------------------------------------------------------------------------------

def _float_to_bool(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x = input_value(node, 0, "X")
    check_dtype(node, x, "input 0 (X)", FLOAT_TYPES)
    return [TensorType(x.shape, "bool")]


def _isinf(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    pos = np.isposinf(x) if a["detect_positive"] else np.zeros(x.shape, bool)
    neg = np.isneginf(x) if a["detect_negative"] else np.zeros(x.shape, bool)
    return [pos | neg]


def _tests() -> tuple[OpDef, ...]:
    return (
        defop("IsNaN", ("X",), INJ, elementwise=True, infer=_float_to_bool,
              reference=lambda ins, a: [np.isnan(np.asarray(ins[0]))],
              flops=per_element_flops(1), min_opset=9, doc="x is NaN -> bool"),
        defop("IsInf", ("X",), INJ, elementwise=True, infer=_float_to_bool, reference=_isinf,
              attrs=(Attr("detect_negative", "int", 1, (0, 1)),
                     Attr("detect_positive", "int", 1, (0, 1))),
              flops=per_element_flops(1), min_opset=10,
              doc="x is +inf (detect_positive) or -inf (detect_negative) -> bool"),
    )


# -- binary ---------------------------------------------------------------------------------------

def _mod(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x, y = np.asarray(ins[0]), np.asarray(ins[1])
    with np.errstate(**_QUIET):
        if x.dtype.kind == "f":
            return [(np.fmod(x, y) if a["fmod"] else np.mod(x, y)).astype(x.dtype)]
        safe = np.where(y == 0, np.ones_like(y), y)  # a zero divisor gives 0
        r = np.fmod(x, safe) if a["fmod"] else np.mod(x, safe)
        return [np.where(y == 0, 0, r).astype(x.dtype)]


def _bitshift(ins: list[Any], a: dict[str, Any]) -> list[np.ndarray]:
    x, s = np.broadcast_arrays(np.asarray(ins[0]), np.asarray(ins[1]))
    bits = x.dtype.itemsize * 8
    ok = (s >= 0) & (s < bits)
    unsigned = np.dtype(f"u{x.dtype.itemsize}")
    s_ok = np.where(ok, s, 0).astype(unsigned)
    if a["direction"] == "LEFT":
        y = np.left_shift(x.view(unsigned), s_ok).view(x.dtype)
        return [np.where(ok, y, 0).astype(x.dtype)]
    y = np.right_shift(x, s_ok.astype(x.dtype))  # arithmetic for signed types
    fill = np.where(x < 0, -1, 0) if x.dtype.kind == "i" else 0
    return [np.where(ok, y, fill).astype(x.dtype)]


_BOOL = ("bool",)


def _binary() -> tuple[OpDef, ...]:
    logic = [
        ("And", _BOOL, np.logical_and, False, 7, "logical and"),
        ("Or", _BOOL, np.logical_or, False, 7, "logical or"),
        ("Xor", _BOOL, np.logical_xor, False, 7, "logical xor"),
        ("LessOrEqual", NUMERIC_TYPES, np.less_equal, False, 12, "A <= B -> bool"),
        ("GreaterOrEqual", NUMERIC_TYPES, np.greater_equal, False, 12, "A >= B -> bool"),
    ]
    bitwise = [("BitwiseAnd", np.bitwise_and, "A & B"), ("BitwiseOr", np.bitwise_or, "A | B"),
               ("BitwiseXor", np.bitwise_xor, "A ^ B")]
    ops = [defop(name, ("A", "B"), INJ, infer=binary_infer(dtypes, "bool"),
                 reference=binary_reference(fn, keep), flops=per_element_flops(1),
                 min_opset=since, doc=note + "; numpy broadcasting", elementwise=True)
           for name, dtypes, fn, keep, since, note in logic]
    ops += [defop(name, ("A", "B"), INJ, infer=binary_infer(INT_TYPES),
                  reference=binary_reference(fn), flops=per_element_flops(1), min_opset=18,
                  doc=note + " on the two's-complement bits; numpy broadcasting",
                  elementwise=True)
            for name, fn, note in bitwise]
    ops.append(defop(
        "Mod", ("A", "B"), INJ, elementwise=True, infer=binary_infer(NUMERIC_TYPES), reference=_mod,
        attrs=(Attr("fmod", "int", 0, (0, 1)),), flops=per_element_flops(1), min_opset=10,
        doc="remainder; fmod=0: A - floor(A / B) * B (sign of B); fmod=1: A - trunc(A / B) "
            "* B (sign of A, C fmod); integer B = 0 gives 0, float B = 0 NaN"))
    ops.append(defop(
        "BitShift", ("X", "Y"), INJ, elementwise=True,
        infer=binary_infer(INT_TYPES), reference=_bitshift,
        attrs=(Attr("direction", "string", choices=("LEFT", "RIGHT")),),
        flops=per_element_flops(1), min_opset=11,
        doc="X << Y (wraps) or X >> Y (arithmetic for signed types); a shift < 0 or of "
            "the bit width or more gives 0, or -1 for a right shift of a negative X"))
    return tuple(ops)


# -- Sum, Mean -------------------------------------------------------------------------------

def _float_variadic_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    ins = [input_value(node, i, f"data_{i}") for i in range(len(node.inputs))]
    if not ins:
        raise ModelError(f"{node.describe()}: needs at least one input")
    dt = check_same_dtype(node, ins, [f"data_{i}" for i in range(len(ins))])
    check_dtype(node, ins[0], "input 0 (data_0)", FLOAT_TYPES)
    return [TensorType(broadcast_shapes(node, [v.shape for v in ins]), dt)]


def _sum_mean_ref(op: str):
    def ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
        arrays = [np.asarray(a) for a in ins]
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
        dt = arrays[0].dtype
        with np.errstate(**_QUIET):
            y = functools.reduce(np.add, arrays)  # in order, in the inputs' dtype
            if op == "Mean":
                y = y / dt.type(len(arrays))
        return [np.broadcast_to(np.asarray(y, dt), shape).astype(dt)]

    return ref


def _sum_mean() -> tuple[OpDef, ...]:
    return tuple(
        defop(op, ("data_0*",), INJ, infer=_float_variadic_infer, reference=_sum_mean_ref(op),
              flops=lambda node, op=op: (len(node.inputs) - (op == "Sum")) *
              sum(o.size for o in node.outputs),
              min_opset=8, elementwise=True,
              doc=f"element-wise {'sum' if op == 'Sum' else 'mean'} of 1+ float inputs, added "
                  "in order in their dtype, numpy broadcasting")
        for op in ("Sum", "Mean"))


# -- BitCast ---------------------------------------------------------------------------------

def _bitcast_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x = input_value(node, 0, "input")
    check_dtype(node, x, "input 0 (input)", ALL_TYPES)
    to = kiln_dtype(attrs["to"], f"{node.describe()}: attribute 'to'")
    if np_dtype(to).itemsize != np_dtype(x.dtype).itemsize:
        raise ModelError(
            f"{node.describe()}: BitCast of {x.dtype} ({8 * np_dtype(x.dtype).itemsize} bits) "
            f"to {to} ({8 * np_dtype(to).itemsize} bits): the two types must have the same "
            "bit width; use Cast to convert values")
    return [TensorType(x.shape, to)]


def _bitcast_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0]).copy(order="C")  # (ascontiguousarray makes a scalar 1-D)
    to = np_dtype(kiln_dtype(attrs["to"], "BitCast: attribute 'to'"))
    # little endian, as ONNX specifies (numpy's native order on every host Kiln runs on)
    return [x.view(to).reshape(x.shape)]


def _bitcast() -> OpDef:
    return defop(
        "BitCast", ("input",), INJ, elementwise=True, infer=_bitcast_infer,
        reference=_bitcast_ref, attrs=(Attr("to", "int", check=check_onnx_dtype),),
        flops=lambda node: 0, min_opset=26,
        doc="the input's bits read as data type `to` (same bit width, same shape)")


#: this family's ops (registered by the op table, ``registry.builtin_ops``)
OPS: tuple[OpDef, ...] = (*_unary_ops(), *_activations(), *_tests(), *_binary(), *_sum_mean(),
                          _bitcast())
