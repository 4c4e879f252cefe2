"""Elementwise math for tensor expressions (TIR intrinsic calls, casts, conditionals).

>>> from toolchain import te
>>> x = te.var("x", "float32")
>>> str(te.exp(x) + te.sigmoid(x))
'T.exp(x) + T.sigmoid(x)'
"""

from __future__ import annotations

from typing import Any

from toolchain.tir import ir


def _unary(op: str):  # noqa: ANN202 - returns a function
    def f(x: Any) -> ir.PrimExpr:
        x = ir.convert(x, "float32")
        return ir.Call(x.dtype, op, (x,))

    f.__name__ = op
    f.__doc__ = f"``{op}(x)`` elementwise (a TIR intrinsic call)."
    return f


exp = _unary("exp")
log = _unary("log")
sqrt = _unary("sqrt")
rsqrt = _unary("rsqrt")
tanh = _unary("tanh")
erf = _unary("erf")
sigmoid = _unary("sigmoid")
floor = _unary("floor")
ceil = _unary("ceil")
round = _unary("round")  # noqa: A001
round.__doc__ = "``round(x)``: nearest integer, halves to even (ONNX Round, numpy.round)."
sin = _unary("sin")
cos = _unary("cos")
exp2 = _unary("exp2")
log2 = _unary("log2")
trunc = _unary("trunc")
tan = _unary("tan")
asin = _unary("asin")
acos = _unary("acos")
atan = _unary("atan")
sinh = _unary("sinh")
cosh = _unary("cosh")
asinh = _unary("asinh")
acosh = _unary("acosh")
atanh = _unary("atanh")
expm1 = _unary("expm1")
expm1.__doc__ = "``exp(x) - 1`` without cancellation near 0 (C99 ``expm1``)."
log1p = _unary("log1p")
log1p.__doc__ = "``log(1 + x)`` without cancellation near 0 (C99 ``log1p``)."


def isnan(x: Any) -> ir.PrimExpr:
    """``x`` is NaN, a bool (the ``isnan`` intrinsic)."""
    return ir.Call("bool", "isnan", (ir.convert(x, "float32"),))


def fmod(x: Any, y: Any) -> ir.PrimExpr:
    """C's ``fmod``: the remainder of ``x / y`` truncated, with the sign of ``x`` (floats)."""
    a, b = ir.pair_of(x, y)
    return ir.Call(a.dtype, "fmod", (a, b))


def abs(x: Any) -> ir.PrimExpr:  # noqa: A001
    """``|x|``: ``fabs`` for floats, ``Select`` for integers."""
    x = ir.convert(x)
    if ir.is_float(x.dtype):
        return ir.Call(x.dtype, "fabs", (x,))
    return ir.Select(x < 0, -x, x)


def power(x: Any, y: Any) -> ir.PrimExpr:
    """``x ** y`` for floats."""
    a, b = ir.pair_of(x, y)
    return ir.Call(a.dtype, "pow", (a, b))


def cast(x: Any, dtype: str) -> ir.PrimExpr:
    """Convert ``x`` to ``dtype``: ``te.cast(A[i], "int32")``."""
    return ir.convert(x).astype(dtype)


def if_then_else(cond: Any, t: Any, f: Any) -> ir.PrimExpr:
    """``t if cond else f`` evaluating only the chosen side (safe for padding loads).

    It is the intrinsic ``Call(dtype, "tir.if_then_else", [cond, t, f])``.
    """
    a, b = ir.pair_of(t, f)
    if a.dtype != b.dtype:
        dt = ir.binary_dtype(a, b)
        a, b = a.astype(dt), b.astype(dt)
    return ir.Call(a.dtype, "tir.if_then_else", (ir.convert(cond), a, b))


def select(cond: Any, t: Any, f: Any) -> ir.PrimExpr:
    """``t if cond else f`` where both sides may be evaluated (vectorizes well)."""
    return ir.Select(ir.convert(cond), t, f)


def equal(a: Any, b: Any) -> ir.PrimExpr:
    """``a == b`` as an expression."""
    return ir.EQ(*ir.pair_of(a, b))


def not_equal(a: Any, b: Any) -> ir.PrimExpr:
    """``a != b`` as an expression."""
    return ir.NE(*ir.pair_of(a, b))


def all(*conds: Any) -> ir.PrimExpr:  # noqa: A001
    """Logical and of all conditions."""
    out = ir.convert(conds[0])
    for c in conds[1:]:
        out = ir.And(out, ir.convert(c))
    return out


def any(*conds: Any) -> ir.PrimExpr:  # noqa: A001
    """Logical or of all conditions."""
    out = ir.convert(conds[0])
    for c in conds[1:]:
        out = ir.Or(out, ir.convert(c))
    return out


def maximum(a: Any, b: Any) -> ir.PrimExpr:
    """Elementwise ``max(a, b)``."""
    return ir.Max(*ir.pair_of(a, b))


def minimum(a: Any, b: Any) -> ir.PrimExpr:
    """Elementwise ``min(a, b)``."""
    return ir.Min(*ir.pair_of(a, b))


def floordiv(a: Any, b: Any) -> ir.PrimExpr:
    """``a // b`` (rounds towards minus infinity)."""
    return ir.FloorDiv(*ir.pair_of(a, b))


def floormod(a: Any, b: Any) -> ir.PrimExpr:
    """``a % b`` with the sign of ``b``."""
    return ir.FloorMod(*ir.pair_of(a, b))


def truncdiv(a: Any, b: Any) -> ir.PrimExpr:
    """C-style ``a / b`` on integers."""
    return ir.Div(*ir.pair_of(a, b))


def truncmod(a: Any, b: Any) -> ir.PrimExpr:
    """C-style ``a % b`` on integers."""
    return ir.Mod(*ir.pair_of(a, b))
