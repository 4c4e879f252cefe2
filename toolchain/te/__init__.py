"""Tensor expressions: describe *what* to compute; :func:`create_prim_func` makes TIR.

>>> from toolchain import te
>>> n = 64
>>> A = te.placeholder((n, n), name="A"); B = te.placeholder((n, n), name="B")
>>> k = te.reduce_axis((0, n), name="k")
>>> C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
>>> func = te.create_prim_func([A, B, C])
"""

from toolchain.te.create import create_prim_func
from toolchain.te.math import (
    abs,
    acos,
    acosh,
    all,
    any,
    asin,
    asinh,
    atan,
    atanh,
    cast,
    ceil,
    cos,
    cosh,
    equal,
    erf,
    exp,
    exp2,
    expm1,
    floor,
    floordiv,
    floormod,
    fmod,
    if_then_else,
    isnan,
    log,
    log1p,
    log2,
    maximum,
    minimum,
    not_equal,
    power,
    round,
    rsqrt,
    select,
    sigmoid,
    sin,
    sinh,
    sqrt,
    tan,
    tanh,
    trunc,
    truncdiv,
    truncmod,
)
from toolchain.te.tensor import (
    AxisVar,
    CommReducer,
    ComputeOp,
    PlaceholderOp,
    Reduce,
    Tensor,
    comm_reducer,
    compute,
    const,
    max,
    max_value,
    min,
    min_value,
    placeholder,
    reduce_axis,
    sum,
    var,
)

__all__ = [
    "AxisVar", "CommReducer", "ComputeOp", "PlaceholderOp", "Reduce", "Tensor", "abs", "acos",
    "acosh", "all", "any", "asin", "asinh", "atan", "atanh", "cast", "ceil", "comm_reducer",
    "compute", "const", "cos", "cosh", "create_prim_func", "equal", "erf", "exp", "exp2",
    "expm1", "floor", "floordiv", "floormod", "fmod", "if_then_else", "isnan", "log",
    "log1p", "log2", "max", "max_value", "maximum", "min", "min_value", "minimum",
    "not_equal", "placeholder", "power", "reduce_axis", "round", "rsqrt", "select",
    "sigmoid", "sin", "sinh", "sqrt", "sum", "tan", "tanh", "trunc", "truncdiv",
    "truncmod", "var",
]
