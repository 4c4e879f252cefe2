"""Helpers shared by the compute definitions: static shapes, broadcasting, constants.

Compute definitions in :mod:`toolchain.topi` work on tensors with static (integer) shapes
wherever the index arithmetic depends on the sizes (padding, windows, reshapes);
:func:`const_shape` turns a tensor's shape into Python ints and raises an
:class:`~toolchain.errors.UnsupportedError` naming the operator when a dimension is
symbolic.

Example::

    >>> from toolchain import te
    >>> A = te.placeholder((3, 1), name="A")
    >>> out_shape = broadcast_shape([(3, 1), (4,)], "add")
    >>> out_shape
    (3, 4)
    >>> str(A[broadcast_index(A, (te.var("i"), te.var("j")))])
    'A[i, 0]'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from toolchain import te
from toolchain.errors import OptionError, UnsupportedError
from toolchain.tir import ir


def const_int(e: Any, what: str = "dimension") -> int:
    """The Python int of a constant ``IntImm`` (or int); raise when it is symbolic."""
    if isinstance(e, (int, np.integer)):
        return int(e)
    if isinstance(e, ir.IntImm):
        return int(e.value)
    raise UnsupportedError(
        f"{what} {e} is symbolic; this compute definition needs static sizes "
        "(give the model a static shape, e.g. with --input-shape)")


def const_shape(t: te.Tensor, op: str = "") -> tuple[int, ...]:
    """Static shape of ``t`` as ints (raises naming ``op`` when a dimension is symbolic)."""
    where = f"{op}: " if op else ""
    return tuple(const_int(s, f"{where}dimension of {t.name!r}") for s in t.shape)


def broadcast_shape(shapes: Sequence[Sequence[int]], op: str) -> tuple[int, ...]:
    """Numpy (multidirectional) broadcast of static shapes; raises OptionError naming ``op``."""
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        shown = " and ".join(str(list(s)) for s in shapes)
        raise OptionError(f"{op}: shapes {shown} cannot be broadcast together") from None


def broadcast_index(t: te.Tensor, out_idx: Sequence[ir.PrimExpr]) -> tuple[ir.PrimExpr, ...]:
    """Index of ``t`` for output index ``out_idx`` under right-aligned numpy broadcasting.

    Leading output axes that ``t`` lacks are dropped; axes where ``t`` has size 1 read 0.
    """
    shape = const_shape(t)
    lead = len(out_idx) - len(shape)
    if lead < 0:
        raise OptionError(f"tensor {t.name!r} of rank {len(shape)} cannot broadcast to rank "
                          f"{len(out_idx)}")
    return tuple(ir.IntImm(0) if d == 1 else out_idx[lead + k] for k, d in enumerate(shape))


def scalar(value: Any, dtype: str) -> ir.PrimExpr:
    """A constant of ``dtype`` (floats keep ``inf``/``nan``; bools become 0/1)."""
    if ir.is_float(dtype):
        return ir.FloatImm(float(value), dtype)
    if dtype == "bool":
        return ir.IntImm(int(bool(value)), "bool")
    return ir.IntImm(int(value), dtype)


def lowest(dtype: str) -> ir.PrimExpr:
    """The identity of max: ``-inf`` for floats, the minimum integer, ``False`` for bool."""
    if dtype == "bool":
        return ir.IntImm(0, "bool")
    return te.min_value(dtype)


def highest(dtype: str) -> ir.PrimExpr:
    """The identity of min: ``+inf`` for floats, the maximum integer, ``True`` for bool."""
    if dtype == "bool":
        return ir.IntImm(1, "bool")
    return te.max_value(dtype)


def ravel(idx: Sequence[ir.PrimExpr], shape: Sequence[int]) -> ir.PrimExpr:
    """Row-major linear index of ``idx`` in ``shape``."""
    flat: ir.PrimExpr = ir.IntImm(0)
    for i, d in zip(idx, shape, strict=True):
        flat = flat * d + i if not ir.is_const_int(flat, 0) else i
    return flat


def unravel(flat: ir.PrimExpr, shape: Sequence[int]) -> tuple[ir.PrimExpr, ...]:
    """Row-major multi-index of linear index ``flat`` in ``shape``."""
    out: list[ir.PrimExpr] = []
    stride = int(np.prod(shape, dtype=np.int64)) if shape else 1
    for k, d in enumerate(shape):
        stride //= max(d, 1)
        if d == 1:
            out.append(ir.IntImm(0))
            continue
        q = te.floordiv(flat, stride) if stride != 1 else flat
        out.append(te.floormod(q, d) if k > 0 else q)
    return tuple(out)


def window_index(o: ir.PrimExpr, stride: int, r: ir.PrimExpr, dilation: int) -> ir.PrimExpr:
    """``o * stride + r * dilation`` without the factors that are 1 (cleaner printed IR)."""
    a = o * stride if stride != 1 else o
    b = r * dilation if dilation != 1 else r
    return a + b


def const_matrix(values: np.ndarray, name: str, dtype: str = "float32") -> te.Tensor:
    """A constant 2-D tensor as a compute (a select chain; schedules unroll and fold it).

    >>> m = const_matrix(np.array([[1.0, 2.0], [0.0, 3.0]]), "M")
    >>> m.shape[0].value, m.dtype
    (2, 'float32')
    """
    values = np.asarray(values, dtype=np.float64)
    rows, cols = values.shape

    def f(i: ir.PrimExpr, j: ir.PrimExpr) -> ir.PrimExpr:
        out: ir.PrimExpr = scalar(0.0, dtype)
        for r in range(rows):
            for c in range(cols):
                v = float(values[r, c])
                if v != 0.0:
                    cond = te.all(te.equal(i, r), te.equal(j, c))
                    out = te.select(cond, scalar(v, dtype), out)
        return out

    return te.compute((rows, cols), f, name=name, tag="const_matrix")


def as_tuple(v: int | Sequence[int], n: int, what: str) -> tuple[int, ...]:
    """``v`` repeated ``n`` times when it is an int, else checked to have ``n`` values."""
    if isinstance(v, (int, np.integer)):
        return (int(v),) * n
    t = tuple(int(x) for x in v)
    if len(t) != n:
        raise OptionError(f"{what} = {list(t)} must have {n} values")
    return t
