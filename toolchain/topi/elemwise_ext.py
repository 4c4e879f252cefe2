"""Compute definitions of the ops of :mod:`toolchain.graph.ops.elementwise_ext`: rounding,
trigonometric and hyperbolic math, Elu/Selu/Celu/ThresholdedRelu/Shrink, Softplus/Softsign/
Mish, IsNaN/IsInf, Mod, BitShift, BitwiseNot and the logical/comparison binaries.

Each is one ``te.compute`` (an injective block) built with :func:`.elemwise.unary` or
:func:`.elemwise.nary`; the math is TIR intrinsics (``expm1``, ``log1p``, ``asin`` …, see
:mod:`toolchain.codegen.math_intrinsics`), so every backend agrees with the numpy
references.  Integer edge cases that are undefined in C are kept out of the C code:
``Mod`` never divides by 0 or -1 (both give 0), ``BitShift`` never shifts by the bit width
or more, and signed left shifts are done in the unsigned type of the same size.

Example::

    >>> from toolchain import te
    >>> x = te.placeholder((4,), name="x")
    >>> str(softplus(x).op.body)
    'T.max(x[i0], T.float32(0.0)) + T.log1p(T.exp(T.float32(0.0) - T.fabs(x[i0])))'
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from toolchain import te
from toolchain.errors import OptionError
from toolchain.tir import ir
from toolchain.tir.dtype import bits_of
from toolchain.topi.elemwise import Operand, nary, unary
from toolchain.topi.utils import broadcast_index, broadcast_shape, const_shape, scalar

Expr = ir.PrimExpr

#: unary float math: op name -> intrinsic
UNARY_MATH: dict[str, Callable[[Expr], Expr]] = {
    "Ceil": te.ceil, "Floor": te.floor, "Round": te.round, "Sin": te.sin, "Cos": te.cos,
    "Tan": te.tan, "Asin": te.asin, "Acos": te.acos, "Atan": te.atan, "Sinh": te.sinh,
    "Cosh": te.cosh, "Asinh": te.asinh, "Acosh": te.acosh, "Atanh": te.atanh,
}


def math_unary(x: te.Tensor, op: str) -> te.Tensor:
    """``op(x)`` for an op of :data:`UNARY_MATH` (``math_unary(x, "Sin")``)."""
    return unary(x, UNARY_MATH[op], op.lower())


def _softplus(v: Expr) -> Expr:
    # max(x, 0) + log1p(exp(-|x|)): no overflow for large x, exact for very negative x
    zero = scalar(0, v.dtype)
    return te.maximum(v, zero) + te.log1p(te.exp(zero - te.abs(v)))


def softplus(x: te.Tensor) -> te.Tensor:
    """``log(1 + exp(x))``, overflow-free."""
    return unary(x, _softplus, "softplus")


def softsign(x: te.Tensor) -> te.Tensor:
    """``x / (1 + |x|)``."""
    return unary(x, lambda v: v / (scalar(1, v.dtype) + te.abs(v)), "softsign")


def mish(x: te.Tensor) -> te.Tensor:
    """``x * tanh(softplus(x))``."""
    return unary(x, lambda v: v * te.tanh(_softplus(v)), "mish")


def sign(x: te.Tensor) -> te.Tensor:
    """-1, 0 or 1 in x's dtype; NaN (neither < 0 nor > 0) stays NaN."""
    def f(v: Expr) -> Expr:
        one, zero = scalar(1, v.dtype), scalar(0, v.dtype)
        if v.dtype.startswith("uint"):
            return te.select(v > zero, one, zero)
        return te.select(v > zero, one, te.select(v < zero, scalar(-1, v.dtype), v))
    return unary(x, f, "sign")


def bitwise_not(x: te.Tensor) -> te.Tensor:
    """``~x``: ``-1 - x`` for signed types (no overflow), ``MAX - x`` for unsigned ones."""
    top = te.max_value(x.dtype) if x.dtype.startswith("uint") else scalar(-1, x.dtype)
    return unary(x, lambda v: top - v, "bitwise_not")


def elu(x: te.Tensor, alpha: float = 1.0) -> te.Tensor:
    """``x if x > 0 else alpha * (exp(x) - 1)``."""
    return unary(x, lambda v: te.select(v > scalar(0, v.dtype), v,
                                        scalar(alpha, v.dtype) * te.expm1(v)), "elu")


def selu(x: te.Tensor, alpha: float, gamma: float) -> te.Tensor:
    """``gamma * (x if x > 0 else alpha * (exp(x) - 1))``."""
    def f(v: Expr) -> Expr:
        dt = v.dtype
        return scalar(gamma, dt) * te.select(v > scalar(0, dt), v,
                                             scalar(alpha, dt) * te.expm1(v))
    return unary(x, f, "selu")


def celu(x: te.Tensor, alpha: float = 1.0) -> te.Tensor:
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``, written ``x > 0 ? x :
    alpha * expm1(x / alpha)`` (the same for alpha > 0 and alpha < 0) so NaN stays NaN."""
    if alpha == 0:
        raise OptionError("celu: alpha must not be 0")

    def f(v: Expr) -> Expr:
        dt = v.dtype
        neg = scalar(alpha, dt) * te.expm1(v / scalar(alpha, dt))
        return te.select(v > scalar(0, dt), v, neg)
    return unary(x, f, "celu")


def thresholded_relu(x: te.Tensor, alpha: float = 1.0) -> te.Tensor:
    """``x if x > alpha else 0``."""
    return unary(x, lambda v: te.select(v > scalar(alpha, v.dtype), v, scalar(0, v.dtype)),
                 "thresholded_relu")


def shrink(x: te.Tensor, bias: float = 0.0, lambd: float = 0.0) -> te.Tensor:
    """``x + bias`` below ``-lambd``, ``x - bias`` above ``lambd``, else 0; integers and
    float16 are computed in float64 and converted back (truncating)."""
    work = x.dtype if x.dtype in ("float32", "float64") else "float64"

    def f(v: Expr) -> Expr:
        w = te.cast(v, work) if work != v.dtype else v
        lo, b = scalar(-lambd, work), scalar(bias, work)
        y = te.select(w < lo, w + b, te.select(w > scalar(lambd, work), w - b,
                                                scalar(0, work)))
        return te.cast(y, v.dtype) if work != v.dtype else y
    return unary(x, f, "shrink")


def isnan(x: te.Tensor) -> te.Tensor:
    """``x`` is NaN → bool."""
    return unary(x, te.isnan, "isnan")


def isinf(x: te.Tensor, detect_positive: bool = True, detect_negative: bool = True
          ) -> te.Tensor:
    """``x`` is +inf / -inf → bool: ``x - x`` is NaN exactly for infinities and NaN.

    One ``&&`` chain (no ``||``): C compilers warn about ``a && b || c`` unparenthesised."""
    def f(v: Expr) -> Expr:
        if not (detect_positive or detect_negative):
            return ir.IntImm(0, "bool")
        zero = scalar(0, v.dtype)
        if detect_positive and detect_negative:
            return ir.And(te.isnan(v - v), ir.Not(te.isnan(v)))
        return ir.And(te.isnan(v - v), v > zero if detect_positive else v < zero)
    return unary(x, f, "isinf")


def mod(a: Operand, b: Operand, fmod: bool = False) -> te.Tensor:
    """ONNX ``Mod``: ``fmod`` takes the sign of ``a`` (C ``fmod``/``%``), otherwise the sign
    of ``b``; integer division by 0 gives 0 (as does ``% -1``, computed as ``% 1``)."""
    def f(x: Expr, y: Expr) -> Expr:
        dt = x.dtype
        zero = scalar(0, dt)
        if ir.is_float(dt):
            r = te.fmod(x, y)
            if fmod:
                return r
            fix = ir.And(te.not_equal(r, zero), te.not_equal(r < zero, y < zero))
            return te.select(fix, r + y, r)
        bad = te.equal(y, zero)
        if not dt.startswith("uint"):
            bad = ir.Or(bad, te.equal(y, scalar(-1, dt)))
        safe = te.select(bad, scalar(1, dt), y)
        # unsigned: the two agree, and C's % is exact for every unsigned width
        r = te.truncmod(x, safe) if fmod or dt.startswith("uint") else te.floormod(x, safe)
        return te.select(bad, zero, r)
    return nary([a, b], f, "mod")


def _pow2(s: Expr, udt: str) -> Expr:
    """``2 ** s`` in the unsigned type ``udt`` (exact: a power of two converts exactly)."""
    return te.cast(te.exp2(te.cast(s, "float64")), udt)


def bitshift(a: Operand, b: Operand, left: bool) -> te.Tensor:
    """ONNX ``BitShift`` (see :mod:`toolchain.graph.ops.elementwise_ext`): arithmetic
    right shift for signed types, wrapping left shift; a shift < 0 or >= the bit width
    gives the sign fill."""
    def f(x: Expr, s: Expr) -> Expr:
        dt = x.dtype
        signed = not dt.startswith("uint")
        udt = "u" + dt if signed else dt
        bits = bits_of(dt)
        zero = scalar(0, dt)
        ok = s < scalar(bits, dt)
        if signed:  # (an unsigned s >= 0 is always true, and C compilers say so)
            ok = ir.And(s >= zero, ok)
        p = _pow2(te.select(ok, s, zero), udt)
        if left:
            y = te.cast(te.cast(x, udt) * p, dt) if signed else x * p
            return te.select(ok, y, zero)
        if not signed:
            return te.select(ok, te.truncdiv(x, p), zero)
        minus1 = scalar(-1, dt)
        neg = x < zero
        mag = te.select(neg, minus1 - x, x)  # ~x for negative x: >= 0, no overflow
        q = te.cast(te.truncdiv(te.cast(mag, udt), p), dt)
        return te.select(ok, te.select(neg, minus1 - q, q), te.select(neg, minus1, zero))
    return nary([a, b], f, "bitshift")


_TRUE, _FALSE = ir.IntImm(1, "bool"), ir.IntImm(0, "bool")

def bitwise(a: Operand, b: Operand, op: str) -> te.Tensor:
    """``a & b``, ``a | b`` or ``a ^ b`` (``op`` "and", "or", "xor") on integers, with
    broadcasting.

    TIR has no bitwise operators (adding them means a new operator in every backend's
    renderer), so ``a & b`` is a reduction over the w bits of the unsigned type of the same
    width, ``Σ_k bit_k(a)·bit_k(b)·2^k`` with ``bit_k(x) = x / 2^k % 2``; then
    ``a | b = a + b - (a & b)`` and ``a ^ b = a + b - 2(a & b)`` (wrapping).  Exact on every
    backend, w steps per element.  A reduction, not one long expression: the schedule never
    inlines it, so chains of bitwise ops stay linear in size."""
    if op not in ("and", "or", "xor"):
        raise OptionError(f"bitwise: op {op!r} is not one of and, or, xor")
    operands = [a, b]
    dt = next(t.dtype for t in operands if isinstance(t, te.Tensor))
    udt = dt if dt.startswith("uint") else "u" + dt
    shape = broadcast_shape([tuple(const_shape(t)) if isinstance(t, te.Tensor) else ()
                             for t in operands], "bitwise") or (1,)
    k = te.reduce_axis((0, bits_of(dt)), name="bit")

    def load(t: Operand, i: tuple[Expr, ...]) -> Expr:
        v = t[broadcast_index(t, i)] if isinstance(t, te.Tensor) else ir.convert(t, dt)
        return te.cast(v, udt)

    def both(*i: Expr) -> Expr:
        p = _pow2(k, udt)
        two = scalar(2, udt)
        bx = te.truncmod(te.truncdiv(load(a, i), p), two)
        by = te.truncmod(te.truncdiv(load(b, i), p), two)
        return te.sum(bx * by * p, axis=k)

    common = te.compute(shape, both, name=f"bitwise_{op}_bits", tag="reduce")
    if op == "and":
        return te.compute(shape, lambda *i: te.cast(common[i], dt) if udt != dt
                          else common[i], name="bitwise_and", tag="elemwise")

    def combine(*i: Expr) -> Expr:
        s = load(a, i) + load(b, i)
        out = s - common[i] if op == "or" else s - scalar(2, udt) * common[i]
        return te.cast(out, dt) if udt != dt else out

    return te.compute(shape, combine, name=f"bitwise_{op}", tag="elemwise")


def sum_mean(xs: Sequence[Operand], mean: bool = False) -> te.Tensor:
    """Element-wise sum (``mean``: mean) of one or more operands, added in order, with
    broadcasting (ONNX Sum / Mean)."""
    n = len(xs)

    def f(*v: Expr) -> Expr:
        acc = v[0]
        for w in v[1:]:
            acc = acc + w
        return acc / scalar(n, acc.dtype) if mean else acc

    return nary(list(xs), f, "mean" if mean else "sum")


#: bool and comparison binaries: op name -> scalar function.  The logical ones are
#: selects (``x ? y : false``): fused chains of them then render as C that strict
#: compilers accept (``a && b || c`` and ``a != b >= c`` draw -Wparentheses).
BINARY_LOGIC: dict[str, Callable[[Expr, Expr], Expr]] = {
    "And": lambda x, y: te.select(x, y, _FALSE), "Or": lambda x, y: te.select(x, _TRUE, y),
    "Xor": lambda x, y: te.select(x, ir.Not(y), y), "LessOrEqual": lambda x, y: x <= y,
    "GreaterOrEqual": lambda x, y: x >= y,
}


def logic_binary(a: Operand, b: Operand, op: str) -> te.Tensor:
    """``op(a, b)`` → bool with broadcasting, for an op of :data:`BINARY_LOGIC`."""
    return nary([a, b], BINARY_LOGIC[op], op.lower())


def bitcast(x: te.Tensor, dtype: str) -> te.Tensor:
    """ONNX BitCast: the bits of each element of ``x`` read as ``dtype`` (same width).

    >>> x = te.placeholder((4,), name="x")
    >>> bitcast(x, "int32").dtype
    'int32'
    """
    if x.dtype == "bool" or dtype == "bool":  # one byte, 0 or 1: as uint8
        if x.dtype == dtype:
            return unary(x, lambda v: v, "bitcast")
        return unary(x, lambda v: te.not_equal(v, scalar(0, v.dtype)) if dtype == "bool"
                     else te.cast(v, dtype), "bitcast")
    return unary(x, lambda v: ir.Call(dtype, "reinterpret", (v,)), "bitcast")
