"""Elementwise ops: activations, unary math, broadcasting arithmetic, comparisons, logic,
``Where``, ``Clip`` and ``Cast`` — all of pattern kind INJECTIVE, all ``elementwise`` (each
output element from the input elements at its broadcast index: fusable onto a convolution's
output, run in any layout and in place; see :mod:`toolchain.graph.ops.registry`).

Semantics are the newest ONNX form (opset 28); ``Clip``'s bounds are inputs.  References
follow ONNX exactly, including the output dtype:

* transcendental float ops are evaluated in float64 and rounded once to the input dtype
  (so the reference is at least as accurate as any kernel it judges);
* integer arithmetic wraps around (two's complement) like C and onnxruntime;
* integer ``Div`` truncates toward zero (``-7 / 2 == -3``), as C and onnxruntime do;
* ``Pow`` keeps the base's dtype; an integer base with a float exponent is computed in
  float64 and truncated toward zero, an integer exponent of an integer base exactly.

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ops import get_op
    >>> get_op("Div").reference([np.array([-7, 7], np.int32), np.array([2, 2], np.int32)], {})
    [array([-3,  3], dtype=int32)]
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from toolchain.errors import ModelError
from toolchain.graph.ir import Node, TensorType, np_dtype
from toolchain.graph.ops.common import (
    ALL_TYPES,
    FLOAT_TYPES,
    NUMERIC_TYPES,
    SIGNED_INT_TYPES,
    check_dtype,
    check_onnx_dtype,
    check_same_dtype,
    defop,
    input_value,
    kiln_dtype,
    per_element_flops,
)
from toolchain.graph.ops.registry import Attr, OpDef, PatternKind, broadcast_shapes

INJ = PatternKind.INJECTIVE
_QUIET = {"all": "ignore"}  # overflow/NaN behaviour is ONNX's, not a numpy warning


# -- unary ops ------------------------------------------------------------------------------

def unary_infer(allowed: Sequence[str]) -> Callable[[Node, dict[str, Any]], list[TensorType]]:
    """Shape rule of a unary op: X's type, X's dtype one of ``allowed``."""
    def infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
        x = input_value(node, 0, "X")
        check_dtype(node, x, "input 0 (X)", allowed)
        return [x.type]

    return infer


def in_float64(fn: Callable[..., np.ndarray]) -> Callable[[list[Any], dict[str, Any]], list]:
    """Reference that evaluates ``fn(x64, attrs)`` in float64 and rounds to x's dtype."""

    def ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
        x = np.asarray(ins[0])
        with np.errstate(**_QUIET):
            y = fn(x.astype(np.float64), attrs)
            return [np.asarray(y).astype(x.dtype)]

    return ref


def in_own_dtype(fn: Callable[..., np.ndarray]) -> Callable[[list[Any], dict[str, Any]], list]:
    """Reference that evaluates ``fn(x, attrs)`` in x's own dtype."""

    def ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
        x = np.asarray(ins[0])
        with np.errstate(**_QUIET):
            return [np.asarray(fn(x, attrs)).astype(x.dtype)]

    return ref


_erf_scalar = np.frompyfunc(math.erf, 1, 1)


def _erf(x: np.ndarray) -> np.ndarray:
    """erf of a float64 array, correctly rounded per element (``math.erf``)."""
    return np.asarray(_erf_scalar(x), dtype=np.float64).reshape(x.shape)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # Two branches keep exp() from overflowing for large |x|.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _gelu(x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    if attrs["approximate"] == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)
        return 0.5 * x * (1.0 + np.tanh(inner))
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _hard_sigmoid(x: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    return np.clip(alpha * x + beta, 0.0, 1.0)


_UNARY: tuple[tuple[str, Sequence[str], Callable, int, int, str], ...] = (
    # name, dtypes, reference, flops per element, first opset, note
    ("Relu", FLOAT_TYPES + SIGNED_INT_TYPES, in_own_dtype(lambda x, a: np.maximum(x, 0)), 1, 1,
     "max(x, 0)"),
    ("Sigmoid", FLOAT_TYPES, in_float64(lambda x, a: _sigmoid(x)), 4, 1, "1 / (1 + exp(-x))"),
    ("HardSwish", FLOAT_TYPES, in_float64(lambda x, a: x * _hard_sigmoid(x, 1 / 6, 0.5)), 5, 14,
     "x * max(0, min(1, x/6 + 1/2))"),
    ("Tanh", FLOAT_TYPES, in_float64(lambda x, a: np.tanh(x)), 1, 1, "tanh(x)"),
    ("Erf", FLOAT_TYPES, in_float64(lambda x, a: _erf(x)), 1, 9, "Gauss error function"),
    ("Exp", FLOAT_TYPES, in_float64(lambda x, a: np.exp(x)), 1, 1, "exp(x)"),
    ("Log", FLOAT_TYPES, in_float64(lambda x, a: np.log(x)), 1, 1,
     "natural log; log(0) = -inf, log(x<0) = NaN"),
    ("Sqrt", FLOAT_TYPES, in_float64(lambda x, a: np.sqrt(x)), 1, 1, "sqrt(x); NaN for x < 0"),
    ("Reciprocal", FLOAT_TYPES, in_float64(lambda x, a: 1.0 / x), 1, 1, "1 / x"),
    ("Neg", FLOAT_TYPES + SIGNED_INT_TYPES, in_own_dtype(lambda x, a: np.negative(x)), 1, 1,
     "-x (integers wrap: -INT_MIN = INT_MIN)"),
    ("Abs", NUMERIC_TYPES, in_own_dtype(lambda x, a: np.abs(x)), 1, 1,
     "|x| (integers wrap: |INT_MIN| = INT_MIN)"),
)


def _unary_ops() -> tuple[OpDef, ...]:
    return tuple(
        defop(name, ("X",), INJ, infer=unary_infer(dtypes), reference=ref,
              flops=per_element_flops(cost), min_opset=since, doc=note, elementwise=True)
        for name, dtypes, ref, cost, since, note in _UNARY)


def _leaky_relu() -> OpDef:
    return defop(
        "LeakyRelu", ("X",), INJ, elementwise=True, attrs=(Attr("alpha", "float", 0.01),),
        infer=unary_infer(FLOAT_TYPES),
        reference=in_float64(lambda x, a: np.where(x >= 0, x, a["alpha"] * x)),
        flops=per_element_flops(2), doc="x if x >= 0 else alpha * x",
    )


def _hard_sigmoid_op() -> OpDef:
    return defop(
        "HardSigmoid", ("X",), INJ, elementwise=True,
        attrs=(Attr("alpha", "float", 0.2), Attr("beta", "float", 0.5)),
        infer=unary_infer(FLOAT_TYPES),
        reference=in_float64(lambda x, a: _hard_sigmoid(x, a["alpha"], a["beta"])),
        flops=per_element_flops(4), doc="max(0, min(1, alpha * x + beta))",
    )


def _gelu_op() -> OpDef:
    return defop(
        "Gelu", ("X",), INJ, elementwise=True,
        attrs=(Attr("approximate", "string", "none", ("none", "tanh")),),
        infer=unary_infer(FLOAT_TYPES), reference=in_float64(_gelu),
        flops=lambda node: (9 if node.attrs.get("approximate") in ("tanh", b"tanh") else 5)
        * sum(o.size for o in node.outputs),
        min_opset=20,
        doc="0.5 x (1 + erf(x / sqrt 2)); approximate='tanh': 0.5 x (1 + tanh(sqrt(2/pi) "
            "(x + 0.044715 x^3)))",
    )


def _not() -> OpDef:
    return defop(
        "Not", ("X",), INJ, elementwise=True, infer=unary_infer(("bool",)),
        reference=lambda ins, a: [np.logical_not(np.asarray(ins[0]))],
        flops=per_element_flops(1), doc="logical not",
    )


# -- broadcasting binary ops ------------------------------------------------------------------

def binary_infer(allowed: Sequence[str], out_dtype: str | None = None) -> Callable[
        [Node, dict[str, Any]], list[TensorType]]:
    """Shape rule of a broadcasting binary op: A and B of one dtype from ``allowed``; the
    output has their broadcast shape and ``out_dtype`` (default: theirs)."""
    def infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
        a, b = input_value(node, 0, "A"), input_value(node, 1, "B")
        dt = check_same_dtype(node, [a, b], ["A", "B"])
        check_dtype(node, a, "input 0 (A)", allowed)
        return [TensorType(broadcast_shapes(node, [a.shape, b.shape]), out_dtype or dt)]

    return infer


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f":
        return a / b
    if a.dtype.kind == "u":
        return np.floor_divide(a, b)
    # C semantics: truncate toward zero (numpy's // floors).
    q = np.floor_divide(a, b)
    fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
    return q + fix.astype(q.dtype)


def binary_reference(fn: Callable[[np.ndarray, np.ndarray], np.ndarray], keep_dtype: bool = True
                     ) -> Callable[[list[Any], dict[str, Any]], list[np.ndarray]]:
    """Reference ``fn(A, B)`` (numpy warnings off), cast to A's dtype when ``keep_dtype``."""
    def ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
        a, b = np.asarray(ins[0]), np.asarray(ins[1])
        with np.errstate(**_QUIET):
            y = np.asarray(fn(a, b))
        return [y.astype(a.dtype) if keep_dtype else y]

    return ref


_BINARY: tuple[tuple[str, Sequence[str], Callable, bool, int, str], ...] = (
    # name, dtypes of A and B, function, keeps dtype (else bool), first opset, note
    ("Add", NUMERIC_TYPES, np.add, True, 1, "A + B; integers wrap"),
    ("Sub", NUMERIC_TYPES, np.subtract, True, 1, "A - B; integers wrap"),
    ("Mul", NUMERIC_TYPES, np.multiply, True, 1, "A * B; integers wrap"),
    ("Div", NUMERIC_TYPES, _div, True, 1,
     "A / B; integers truncate toward zero (-7 / 2 = -3); integer division by 0 is undefined"),
    ("Equal", ALL_TYPES, np.equal, False, 1, "A == B -> bool"),
    ("Less", NUMERIC_TYPES, np.less, False, 1, "A < B -> bool"),
    ("Greater", NUMERIC_TYPES, np.greater, False, 1, "A > B -> bool"),
)


def _binary_ops() -> tuple[OpDef, ...]:
    return tuple(
        defop(name, ("A", "B"), INJ, infer=binary_infer(dtypes, None if keep else "bool"),
              reference=binary_reference(fn, keep), flops=per_element_flops(1), min_opset=since,
              doc=note + "; numpy broadcasting", elementwise=True)
        for name, dtypes, fn, keep, since, note in _BINARY)


def _pow_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x, y = input_value(node, 0, "X"), input_value(node, 1, "Y")
    check_dtype(node, x, "input 0 (X, the base)", ("int32", "int64") + FLOAT_TYPES)
    check_dtype(node, y, "input 1 (Y, the exponent)", NUMERIC_TYPES)
    return [TensorType(broadcast_shapes(node, [x.shape, y.shape]), x.dtype)]


def _pow_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x, y = np.asarray(ins[0]), np.asarray(ins[1])
    with np.errstate(**_QUIET):
        if x.dtype.kind in "iu" and y.dtype.kind in "iu":
            # Exact integer power for y >= 0; for y < 0 the real result truncated to zero.
            xi, yi = x.astype(np.int64), y.astype(np.int64)
            exact = np.power(xi, np.maximum(yi, 0))
            approx = np.trunc(np.power(xi.astype(np.float64), yi.astype(np.float64)))
            z = np.where(yi >= 0, exact, approx.astype(np.int64))
        else:
            z = np.power(x.astype(np.float64), y.astype(np.float64))
        return [np.asarray(z).astype(x.dtype)]


def _pow() -> OpDef:
    return defop(
        "Pow", ("X", "Y"), INJ, elementwise=True, infer=_pow_infer, reference=_pow_ref,
        flops=per_element_flops(1),
        doc="X ** Y with numpy broadcasting; output has X's dtype, Y may be any numeric type",
    )


def _prelu() -> OpDef:
    def infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
        x, slope = input_value(node, 0, "X"), input_value(node, 1, "slope")
        check_same_dtype(node, [x, slope], ["X", "slope"])
        check_dtype(node, x, "input 0 (X)",
                    FLOAT_TYPES + ("int32", "int64", "uint32", "uint64"))
        if broadcast_shapes(node, [x.shape, slope.shape]) != x.shape:
            raise ModelError(
                f"{node.describe()}: slope shape {list(slope.shape)} must broadcast to the "
                f"input shape {list(x.shape)} (unidirectional broadcasting)"
            )
        return [x.type]

    return defop(
        "PRelu", ("X", "slope"), INJ, elementwise=True, infer=infer,
        reference=binary_reference(lambda x, s: np.where(x < 0, x * s, x)),
        flops=per_element_flops(2),
        doc="x if x >= 0 else slope * x; slope broadcasts to X (unidirectional)",
    )


# -- variadic, ternary ----------------------------------------------------------------------

def _variadic_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    ins = [input_value(node, i, f"data_{i}") for i in range(len(node.inputs))]
    if not ins:
        raise ModelError(f"{node.describe()}: needs at least one input")
    dt = check_same_dtype(node, ins, [f"data_{i}" for i in range(len(ins))])
    check_dtype(node, ins[0], "input 0 (data_0)", NUMERIC_TYPES)
    return [TensorType(broadcast_shapes(node, [v.shape for v in ins]), dt)]


def _variadic_ref(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]):
    def ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
        arrays = [np.asarray(a) for a in ins]
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
        y = functools.reduce(fn, arrays)
        return [np.broadcast_to(y, shape).astype(arrays[0].dtype)]

    return ref


def _minmax_flops(node: Node) -> int:
    return max(len(node.inputs) - 1, 1) * sum(o.size for o in node.outputs)


def _minmax_ops() -> tuple[OpDef, ...]:
    return tuple(
        defop(name, ("data_0*",), INJ, infer=_variadic_infer, reference=_variadic_ref(fn),
              flops=_minmax_flops, elementwise=True,
              doc=f"element-wise {name.lower()} of 1+ inputs with numpy broadcasting; "
                  "NaN propagates")
        for name, fn in (("Min", np.minimum), ("Max", np.maximum)))


def _where() -> OpDef:
    def infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
        c = input_value(node, 0, "condition")
        x, y = input_value(node, 1, "X"), input_value(node, 2, "Y")
        check_dtype(node, c, "input 0 (condition)", ("bool",))
        dt = check_same_dtype(node, [x, y], ["X", "Y"])
        return [TensorType(broadcast_shapes(node, [c.shape, x.shape, y.shape]), dt)]

    def ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
        x = np.asarray(ins[1])
        return [np.where(np.asarray(ins[0]), x, np.asarray(ins[2])).astype(x.dtype)]

    return defop("Where", ("condition", "X", "Y"), INJ, elementwise=True, infer=infer,
                 reference=ref, flops=per_element_flops(1), min_opset=9,
                 doc="condition ? X : Y with numpy broadcasting of all three")


# -- Clip, Cast -------------------------------------------------------------------------------

def _clip_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x = input_value(node, 0, "input")
    check_dtype(node, x, "input 0 (input)", NUMERIC_TYPES)
    for i, what in ((1, "min"), (2, "max")):
        v = node.input(i)
        if v is None:
            continue
        check_same_dtype(node, [x, v], ["input", what])
        if v.size != 1:
            raise ModelError(
                f"{node.describe()}: input {i} ({what}) must be a scalar, but has shape "
                f"{list(v.shape)}"
            )
    return [x.type]


def _clip_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    y = x
    # max then min: when min > max every element becomes max, as ONNX specifies.
    if ins[1] is not None:
        y = np.maximum(y, np.asarray(ins[1]).reshape(()))
    if ins[2] is not None:
        y = np.minimum(y, np.asarray(ins[2]).reshape(()))
    return [np.asarray(y).astype(x.dtype)]


def _clip() -> OpDef:
    return defop(
        "Clip", ("input", "min?", "max?"), INJ, elementwise=True, infer=_clip_infer,
        reference=_clip_ref, flops=per_element_flops(2), min_opset=1,
        doc="min(max(x, min), max); absent bounds are the dtype's limits; min > max gives max",
    )


def _cast_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x = input_value(node, 0, "input")
    check_dtype(node, x, "input 0 (input)", ALL_TYPES)
    return [TensorType(x.shape, kiln_dtype(attrs["to"], f"{node.describe()}: attribute 'to'"))]


def _cast_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    out = np_dtype(kiln_dtype(attrs["to"], "Cast: attribute 'to'"))
    with np.errstate(**_QUIET):
        # numpy's astype is ONNX's rule for every Kiln dtype: float->int truncates toward
        # zero (out of range is undefined), int->int wraps, x->bool is x != 0.
        return [x.astype(out)]


def _cast() -> OpDef:
    return defop(
        "Cast", ("input",), INJ, elementwise=True, infer=_cast_infer, reference=_cast_ref,
        attrs=(
            Attr("to", "int", check=check_onnx_dtype),
            Attr("saturate", "int", 1, (0, 1)),
            Attr("round_mode", "string", "up", ("up", "down", "nearest")),
        ),
        flops=lambda node: 0,
        doc="convert to ONNX data type `to`; float->int truncates toward zero, int->int wraps, "
            "x->bool is x != 0; `saturate`/`round_mode` only affect float8 targets, which "
            "Kiln lacks",
    )


#: this family's ops (registered by the op table, ``registry.builtin_ops``)
OPS: tuple[OpDef, ...] = (
    *_unary_ops(), _leaky_relu(), _hard_sigmoid_op(), _gelu_op(), _not(), *_binary_ops(),
    _pow(), _prelu(), *_minmax_ops(), _where(), _clip(), _cast(),
)
