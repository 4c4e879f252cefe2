"""Elementwise compute definitions: activations, unary math, broadcasting arithmetic,
comparisons, ``where``, ``clip``, ``cast`` and linear (de)quantization.

Every function takes :class:`~toolchain.te.Tensor` operands and returns one new tensor
(one ``te.compute``, i.e. one injective block; ``quantize_linear`` is two: the saturated
value, then its conversion). Binary and variadic ops broadcast their
operands with numpy/ONNX multidirectional broadcasting (:func:`broadcast_to`'s rules).

Semantics follow the op registry's numpy references (``docs/ops.md``): integer ``divide``
truncates toward zero, integer arithmetic wraps, ``cast`` to bool is ``x != 0``,
``quantize_linear`` rounds half to even and saturates.

Example::

    >>> from toolchain import te
    >>> from toolchain.topi import elemwise
    >>> x = te.placeholder((2, 3), name="x"); b = te.placeholder((3,), name="b")
    >>> y = elemwise.relu(elemwise.add(x, b))
    >>> [int(d) for d in (y.shape[0].value, y.shape[1].value)], y.dtype
    ([2, 3], 'float32')
    >>> f = te.create_prim_func([x, b, y])
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

from toolchain import te
from toolchain.errors import OptionError
from toolchain.tir import ir
from toolchain.topi.utils import broadcast_index, broadcast_shape, const_shape, scalar

Expr = ir.PrimExpr
Operand = Any  # a te.Tensor or a Python / TIR scalar


# -- building blocks ------------------------------------------------------------------------

def stage_name(op: str) -> str:
    """``T_<op>``: the name of an elementwise stage (its buffer, and the kernel parameter a
    bundle shows). The C renderer renames any buffer that collides with a C library
    function, so the prefix is a naming convention, not a requirement."""
    return f"T_{op}"


def unary(x: te.Tensor, fn: Callable[[Expr], Expr], name: str, tag: str = "elemwise"
          ) -> te.Tensor:
    """``out[i] = fn(x[i])`` over x's shape.

    >>> x = te.placeholder((4,), name="x")
    >>> str(unary(x, lambda v: v * 2.0, "twice").op.body)
    'x[i0] * T.float32(2.0)'
    """
    return te.compute(x.shape, lambda *i: fn(x[i]), name=stage_name(name), tag=tag)


def _load(t: Operand, idx: Sequence[Expr]) -> Expr:
    if isinstance(t, te.Tensor):
        return t[broadcast_index(t, idx)]
    return ir.convert(t)


def _shape_of(t: Operand) -> tuple[int, ...]:
    return const_shape(t) if isinstance(t, te.Tensor) else ()


def nary(operands: Sequence[Operand], fn: Callable[..., Expr], name: str,
         tag: str = "broadcast") -> te.Tensor:
    """``out[i] = fn(*(op[broadcast(i)] for op in operands))`` with numpy broadcasting.

    Operands may be tensors or scalars (Python numbers or TIR expressions).
    """
    shape = broadcast_shape([_shape_of(t) for t in operands], name)
    if not shape:
        shape = (1,)  # rank-0 results are (1,)-shaped buffers

    def body(*i: Expr) -> Expr:
        return fn(*(_load(t, i) for t in operands))

    return te.compute(shape, body, name=stage_name(name), tag=tag)


def broadcast_to(x: te.Tensor, shape: Sequence[int], name: str = "broadcast_to") -> te.Tensor:
    """``x`` broadcast to ``shape`` (numpy rules; the result has exactly ``shape``)."""
    out = broadcast_shape([const_shape(x), tuple(shape)], name)
    if out != tuple(shape):
        raise OptionError(f"{name}: {list(const_shape(x))} does not broadcast to {list(shape)}")
    return te.compute(tuple(shape) or (1,), lambda *i: x[broadcast_index(x, i)], name=name,
                      tag="broadcast")


# -- activations and unary math ---------------------------------------------------------------

def relu(x: te.Tensor) -> te.Tensor:
    """``max(x, 0)``, written ``x < 0 ? 0 : x`` so NaN stays NaN (as numpy's maximum)."""
    return unary(x, lambda v: te.select(v < scalar(0, v.dtype), scalar(0, v.dtype), v), "relu")


def leaky_relu(x: te.Tensor, alpha: float = 0.01) -> te.Tensor:
    """``x if x >= 0 else alpha * x``."""
    return unary(x, lambda v: te.select(v >= scalar(0, v.dtype), v, v * scalar(alpha, v.dtype)),
                 "leaky_relu")


def prelu(x: te.Tensor, slope: te.Tensor) -> te.Tensor:
    """``x if x >= 0 else slope * x``; ``slope`` broadcasts (unidirectionally) to ``x``."""
    if broadcast_shape([const_shape(slope), const_shape(x)], "prelu") != const_shape(x):
        raise OptionError(f"prelu: slope {list(const_shape(slope))} must broadcast to x "
                          f"{list(const_shape(x))}")

    def f(*i: Expr) -> Expr:
        v = x[i]
        return te.select(v < scalar(0, v.dtype), v * slope[broadcast_index(slope, i)], v)

    return te.compute(x.shape, f, name="prelu", tag="broadcast")


def sigmoid(x: te.Tensor) -> te.Tensor:
    """``1 / (1 + exp(-x))`` (the ``sigmoid`` intrinsic)."""
    return unary(x, te.sigmoid, "sigmoid")


def hard_sigmoid(x: te.Tensor, alpha: float = 0.2, beta: float = 0.5) -> te.Tensor:
    """``max(0, min(1, alpha * x + beta))``."""
    def f(v: Expr) -> Expr:
        dt = v.dtype
        return te.maximum(scalar(0, dt), te.minimum(scalar(1, dt),
                                                    v * scalar(alpha, dt) + scalar(beta, dt)))
    return unary(x, f, "hard_sigmoid")


def hard_swish(x: te.Tensor) -> te.Tensor:
    """``x * max(0, min(1, x / 6 + 1/2))``."""
    def f(v: Expr) -> Expr:
        dt = v.dtype
        hs = te.maximum(scalar(0, dt), te.minimum(scalar(1, dt),
                                                  v * scalar(1.0 / 6.0, dt) + scalar(0.5, dt)))
        return v * hs
    return unary(x, f, "hard_swish")


def gelu(x: te.Tensor, approximate: str = "none") -> te.Tensor:
    """``0.5 x (1 + erf(x / sqrt 2))``; ``approximate="tanh"`` uses
    ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``."""
    if approximate not in ("none", "tanh"):
        raise OptionError(f"gelu: approximate = {approximate!r} must be 'none' or 'tanh'")

    def f(v: Expr) -> Expr:
        dt = v.dtype
        half, one = scalar(0.5, dt), scalar(1.0, dt)
        if approximate == "tanh":
            inner = scalar(math.sqrt(2.0 / math.pi), dt) * (
                v + scalar(0.044715, dt) * v * v * v)
            return half * v * (one + te.tanh(inner))
        return half * v * (one + te.erf(v * scalar(1.0 / math.sqrt(2.0), dt)))

    return unary(x, f, "gelu")


def tanh(x: te.Tensor) -> te.Tensor:
    """``tanh(x)``."""
    return unary(x, te.tanh, "tanh")


def erf(x: te.Tensor) -> te.Tensor:
    """``erf(x)``."""
    return unary(x, te.erf, "erf")


def exp(x: te.Tensor) -> te.Tensor:
    """``exp(x)``."""
    return unary(x, te.exp, "exp")


def log(x: te.Tensor) -> te.Tensor:
    """``log(x)``."""
    return unary(x, te.log, "log")


def sqrt(x: te.Tensor) -> te.Tensor:
    """``sqrt(x)``."""
    return unary(x, te.sqrt, "sqrt")


def reciprocal(x: te.Tensor) -> te.Tensor:
    """``1 / x``."""
    return unary(x, lambda v: scalar(1, v.dtype) / v, "reciprocal")


def negative(x: te.Tensor) -> te.Tensor:
    """``-x``."""
    return unary(x, lambda v: scalar(0, v.dtype) - v, "negative")


def abs(x: te.Tensor) -> te.Tensor:  # noqa: A001 - the op's name
    """``|x|`` (identity on unsigned integers)."""
    if x.dtype.startswith("uint"):
        return unary(x, lambda v: v, "abs")
    return unary(x, te.abs, "abs")


def logical_not(x: te.Tensor) -> te.Tensor:
    """Logical not of a bool tensor."""
    return unary(x, lambda v: ir.Not(v), "logical_not")


def clip(x: te.Tensor, lo: Operand = None, hi: Operand = None) -> te.Tensor:
    """``min(max(x, lo), hi)``; a bound is a scalar, a one-element tensor or ``None``.

    Applying max then min gives ``hi`` everywhere when ``lo > hi`` (ONNX's rule).
    """
    def bound(b: Operand) -> Expr:
        if isinstance(b, te.Tensor):
            return b[(ir.IntImm(0),) * b.ndim]
        return scalar(b, x.dtype) if not isinstance(b, ir.PrimExpr) else b

    def f(v: Expr) -> Expr:
        if lo is not None:
            v = te.maximum(v, bound(lo))
        if hi is not None:
            v = te.minimum(v, bound(hi))
        return v

    return unary(x, f, "clip")


def cast(x: te.Tensor, dtype: str) -> te.Tensor:
    """Convert to ``dtype``: float→int truncates, ``x → bool`` is ``x != 0``."""
    if dtype == "bool" and x.dtype != "bool":
        return unary(x, lambda v: te.not_equal(v, scalar(0, v.dtype)), "cast")
    return unary(x, lambda v: te.cast(v, dtype), "cast")


# -- binary and variadic ----------------------------------------------------------------------

def add(a: Operand, b: Operand) -> te.Tensor:
    """``a + b`` with broadcasting."""
    return nary([a, b], lambda x, y: x + y, "add")


def subtract(a: Operand, b: Operand) -> te.Tensor:
    """``a - b`` with broadcasting."""
    return nary([a, b], lambda x, y: x - y, "subtract")


def multiply(a: Operand, b: Operand) -> te.Tensor:
    """``a * b`` with broadcasting."""
    return nary([a, b], lambda x, y: x * y, "multiply")


def divide(a: Operand, b: Operand) -> te.Tensor:
    """``a / b`` with broadcasting; integers truncate toward zero (C, onnxruntime)."""
    return nary([a, b], lambda x, y: ir.Div(x, y), "divide")


def power(a: te.Tensor, b: Operand) -> te.Tensor:
    """``a ** b`` in a's dtype.

    Float bases use the ``pow`` intrinsic (the exponent is cast to the base's dtype);
    integer bases are computed in float64 and truncated toward zero, which is exact while
    the result fits in 53 bits (beyond that ONNX calls the result undefined anyway).
    """
    out_dt = a.dtype

    def f(x: Expr, y: Expr) -> Expr:
        if ir.is_float(out_dt):
            return te.power(x, te.cast(y, out_dt))
        return te.cast(te.trunc(te.power(te.cast(x, "float64"), te.cast(y, "float64"))),
                       out_dt)

    return nary([a, b], f, "power")


def equal(a: Operand, b: Operand) -> te.Tensor:
    """``a == b`` → bool."""
    return nary([a, b], te.equal, "equal")


def less(a: Operand, b: Operand) -> te.Tensor:
    """``a < b`` → bool."""
    return nary([a, b], lambda x, y: x < y, "less")


def greater(a: Operand, b: Operand) -> te.Tensor:
    """``a > b`` → bool."""
    return nary([a, b], lambda x, y: x > y, "greater")


def where(cond: te.Tensor, a: Operand, b: Operand) -> te.Tensor:
    """``a if cond else b`` with all three broadcast."""
    return nary([cond, a, b], lambda c, x, y: te.select(c, x, y), "where")


def maximum(*xs: Operand) -> te.Tensor:
    """Elementwise maximum of one or more operands (broadcasting)."""
    return nary(list(xs), lambda *v: functools.reduce(te.maximum, v), "maximum")


def minimum(*xs: Operand) -> te.Tensor:
    """Elementwise minimum of one or more operands (broadcasting)."""
    return nary(list(xs), lambda *v: functools.reduce(te.minimum, v), "minimum")


# -- quantization -----------------------------------------------------------------------------

def _param_index(param: te.Tensor, idx: Sequence[Expr], axis: int, block_size: int
                 ) -> tuple[Expr, ...]:
    """Index of a scale / zero point: per-tensor, per-axis (1-D) or blocked (x's rank)."""
    shape = const_shape(param)
    size = int(math.prod(shape))
    if size == 1:
        return (ir.IntImm(0),) * param.ndim
    if param.ndim == 1 and block_size <= 0:
        return (idx[axis],)
    return tuple(te.floordiv(i, block_size) if k == axis else i for k, i in enumerate(idx))


def quantize_linear(x: te.Tensor, scale: te.Tensor, zero_point: te.Tensor | None = None, *,
                    axis: int = 1, block_size: int = 0, out_dtype: str = "uint8",
                    precision: str | None = None) -> te.Tensor:
    """``saturate(round(x / scale) + zero_point)`` in ``out_dtype`` (``te.round``: halves
    to even on every backend; C renders it as ``nearbyint``).

    The division is done in ``precision`` (default: the scale's dtype when it is a float,
    else float64); ``scale``/``zero_point`` are per-tensor (one element), per-axis (1-D of
    length ``x.shape[axis]``) or blocked (x's rank, ``ceil(D / block_size)`` on ``axis``).
    """
    prec = precision or (scale.dtype if ir.is_float(scale.dtype) else "float64")
    ax = axis % x.ndim
    lo, hi = te.min_value(out_dtype).value, te.max_value(out_dtype).value
    # The zero point is added and the clamp done in ``prec`` too, not in float64: the rounded
    # quotient is an integer, exact in float32 up to 2**24, and beyond that any rounding of
    # ``q + zero_point`` stays far outside [lo, hi] and saturates to the same bound, so the
    # result equals the float64 one -- and Cortex-M4/M7 FPUs have no double precision.
    ext = prec if te.max_value(out_dtype).value < 2 ** 24 else "float64"

    def f(*i: Expr) -> Expr:
        s = te.cast(scale[_param_index(scale, i, ax, block_size)], prec)
        q = te.cast(te.round(te.cast(x[i], prec) / s), ext)
        if zero_point is not None:
            q = q + te.cast(zero_point[_param_index(zero_point, i, ax, block_size)], ext)
        return te.minimum(te.maximum(q, scalar(lo, ext)), scalar(hi, ext))

    # Two stages: the saturated, rounded value (an integer held in ``ext``) and its
    # conversion. Inlined, they are the one expression ``cast(min(max(...)))``; kept apart,
    # the value can be computed in the input's order and vectorized while the conversion
    # goes with a layout change (``stage_quantized_transpose``, schedules/generic/ops.py).
    v = te.compute(x.shape, f, name="quantize_linear_value", tag="elemwise")
    return te.compute(x.shape, lambda *i: te.cast(v[i], out_dtype), name="quantize_linear",
                      tag="elemwise")


def dequantize_linear(x: te.Tensor, scale: te.Tensor, zero_point: te.Tensor | None = None, *,
                      axis: int = 1, block_size: int = 0, out_dtype: str | None = None
                      ) -> te.Tensor:
    """``(x - zero_point) * scale`` computed in ``out_dtype`` (default: the scale's)."""
    odt = out_dtype or scale.dtype
    ax = axis % x.ndim

    def f(*i: Expr) -> Expr:
        d = te.cast(x[i], "int64")
        if zero_point is not None:
            d = d - te.cast(zero_point[_param_index(zero_point, i, ax, block_size)], "int64")
        return te.cast(d, odt) * te.cast(scale[_param_index(scale, i, ax, block_size)], odt)

    return te.compute(x.shape, f, name="dequantize_linear", tag="elemwise")
