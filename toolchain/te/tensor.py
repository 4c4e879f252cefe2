"""Tensor expressions: placeholders, computes, reductions and the math they use.

A :class:`Tensor` is backed by a TIR :class:`~toolchain.tir.ir.Buffer`; indexing it builds a
``BufferLoad``, so tensor expressions *are* TIR expressions. A reduction is a
:class:`Reduce` node that may only appear at the top of a compute body.

Example::

    >>> from toolchain import te
    >>> n = te.var("n")
    >>> A = te.placeholder((n, 8), name="A")
    >>> k = te.reduce_axis((0, 8), name="k")
    >>> B = te.compute((n,), lambda i: te.sum(A[i, k] * 2.0, axis=k), name="B")
    >>> B.shape[0] is n, B.dtype
    (True, 'float32')
"""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolchain.errors import OptionError
from toolchain.tir import ir


@dataclass(frozen=True, eq=False, repr=False)
class AxisVar(ir.Var):
    """A compute axis: a Var that also knows its domain and kind (``spatial``/``reduce``)."""

    dom: ir.Range = field(default_factory=lambda: ir.Range(0, 1))
    iter_type: str = "spatial"


def var(name: str = "n", dtype: str = "int32") -> ir.Var:
    """A symbolic scalar (e.g. a dynamic size): ``m = te.var("m")``."""
    return ir.Var(name, dtype)


def const(value: Any, dtype: str = "int32") -> ir.PrimExpr:
    """A typed constant: ``te.const(0, "int8")``."""
    return ir.const(value, dtype)


def reduce_axis(dom: Any, name: str = "k") -> AxisVar:
    """A reduction axis over ``dom`` = ``(min, max)`` (half-open) or an ``ir.Range``.

    >>> k = reduce_axis((0, 16), "k")
    >>> k.dom.extent.value
    16
    """
    if isinstance(dom, ir.Range):
        rng = dom
    else:
        lo, hi = dom
        lo_e, hi_e = ir.convert(lo), ir.convert(hi)
        if isinstance(lo_e, ir.IntImm) and isinstance(hi_e, ir.IntImm):
            rng = ir.Range(lo_e, hi_e.value - lo_e.value)
        else:
            rng = ir.Range(lo_e, hi_e - lo_e if not ir.is_const_int(lo_e, 0) else hi_e)
    return AxisVar(name, "int32", rng, "reduce")


# ------------------------------------------------------------------------------- ops


class Operation:
    """What produces a tensor (a placeholder or a compute)."""

    name: str


@dataclass(eq=False)
class PlaceholderOp(Operation):
    """An input tensor."""

    name: str


@dataclass(eq=False)
class ComputeOp(Operation):
    """``output[axis] = body`` where ``body`` may be a top-level :class:`Reduce`."""

    name: str
    axis: tuple[AxisVar, ...]
    body: ir.PrimExpr
    tag: str = ""
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def reduce_axis(self) -> tuple[AxisVar, ...]:
        """Reduction axes of the body (empty unless it is a :class:`Reduce`)."""
        return self.body.axis if isinstance(self.body, Reduce) else ()

    def input_tensors(self) -> list[Tensor]:
        """Tensors read by the body, in first-use order."""
        from toolchain.tir.functor import post_order_visit

        found: dict[ir.Buffer, None] = {}

        def f(x: Any) -> None:
            if isinstance(x, ir.BufferLoad):
                found.setdefault(x.buffer, None)

        body = self.body
        exprs = [body] if not isinstance(body, Reduce) else [body.source, body.condition]
        for e in exprs:
            post_order_visit(e, f)
        return [_TENSOR_OF[b] for b in found if b in _TENSOR_OF]


class Tensor:
    """A tensor of a TE program. ``T[i, j]`` is a load; ``T.op``, ``T.shape``, ``T.dtype``."""

    def __init__(self, buffer: ir.Buffer, op: Operation) -> None:
        self.buffer = buffer
        self.op = op
        _TENSOR_OF[buffer] = self

    @property
    def shape(self) -> tuple[ir.PrimExpr, ...]:
        return self.buffer.shape

    @property
    def dtype(self) -> str:
        return self.buffer.dtype

    @property
    def name(self) -> str:
        return self.buffer.name

    @property
    def ndim(self) -> int:
        return len(self.buffer.shape)

    def __getitem__(self, idx: Any) -> ir.BufferLoad:
        if not isinstance(idx, tuple):
            idx = (idx,)
        if len(idx) != self.ndim:
            raise OptionError(
                f"tensor {self.name!r} has {self.ndim} dimensions "
                f"(shape {_shape_str(self.shape)}) but was indexed with {len(idx)} indices"
            )
        return ir.BufferLoad(self.buffer, idx)

    def __repr__(self) -> str:
        return f"Tensor({self.name}, shape={_shape_str(self.shape)}, dtype={self.dtype})"


# buffer -> tensor (weak would be nicer; tensors are small and programs short-lived)
_TENSOR_OF: dict[ir.Buffer, Tensor] = {}


def _shape_str(shape: Sequence[ir.PrimExpr]) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ")"


#: the scalar dtypes a tensor's elements may have
DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64",
          "uint8", "uint16", "uint32", "uint64", "bool")


def placeholder(shape: Sequence[Any], dtype: str = "float32", name: str = "placeholder") -> Tensor:
    """An input tensor: ``A = te.placeholder((m, 64), name="A")``. A shape that is not
    integers or expressions, or an unknown dtype, is an :class:`OptionError`.

    >>> placeholder((4, "4"), name="A")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    toolchain.errors.OptionError: te.placeholder('A'): dimension 1 of the shape (4, '4') is ...
    """
    if isinstance(shape, (int, ir.PrimExpr)):
        shape = (shape,)
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise OptionError(f"te.placeholder({name!r}): the shape {shape!r} is not a sequence "
                          "of dimensions, e.g. (m, 64)")
    shape = tuple(shape)
    for i, d in enumerate(shape):
        integer = isinstance(d, numbers.Integral)
        if isinstance(d, bool) or not (integer or isinstance(d, ir.PrimExpr)):
            raise OptionError(f"te.placeholder({name!r}): dimension {i} of the shape "
                              f"{shape!r} is {d!r}, not an integer or an expression")
        if integer and int(d) < 0:
            raise OptionError(f"te.placeholder({name!r}): dimension {i} of the shape "
                              f"{shape!r} is negative")
    if not isinstance(dtype, str) or ir.element_of(dtype) not in DTYPES:
        raise OptionError(f"te.placeholder({name!r}): dtype {dtype!r} is not one of "
                          f"{', '.join(DTYPES)}")
    buf = ir.Buffer(name, tuple(int(d) if not isinstance(d, ir.PrimExpr) else d
                                for d in shape), dtype)
    return Tensor(buf, PlaceholderOp(name))


def compute(shape: Sequence[Any], fcompute: Callable[..., Any], name: str = "compute",
            tag: str = "", attrs: dict[str, Any] | None = None) -> Tensor:
    """``out[i, j, ...] = fcompute(i, j, ...)`` over ``shape``.

    The loop variables are named after ``fcompute``'s parameters. The body may be a
    reduction (``te.sum`` ...) at its top level.

    >>> A = placeholder((4,), name="A")
    >>> B = compute((4,), lambda i: A[i] + 1.0, name="B")
    >>> str(B.op.body)
    'A[i] + T.float32(1.0)'
    """
    if isinstance(shape, (int, ir.PrimExpr)):
        shape = (shape,)
    shape = tuple(ir.convert(s) for s in shape)
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        params = []
    if params and params[0].kind == inspect.Parameter.VAR_POSITIONAL:
        names = [f"i{d}" for d in range(len(shape))]
    else:
        names = [p.name for p in params if p.default is inspect.Parameter.empty]
        if len(names) != len(shape):
            raise OptionError(
                f"te.compute({name!r}): the function takes {len(names)} indices "
                f"({', '.join(names)}) but the shape {_shape_str(shape)} has {len(shape)} "
                "dimensions; give it one parameter per dimension"
            )
    axis = tuple(AxisVar(n, "int32", ir.Range(0, s), "spatial")
                 for n, s in zip(names, shape, strict=True))
    body = fcompute(*axis)
    body = ir.convert(body)
    _check_reduce_top_level(body, name)
    buf = ir.Buffer(name, shape, body.dtype)
    return Tensor(buf, ComputeOp(name, axis, body, tag, dict(attrs or {})))


def _check_reduce_top_level(body: ir.PrimExpr, name: str) -> None:
    from toolchain.tir.functor import post_order_visit

    inner = [body.source, body.condition] if isinstance(body, Reduce) else [body]
    for e in inner:
        def f(x: Any) -> None:
            if isinstance(x, Reduce):
                raise OptionError(
                    f"te.compute({name!r}): a reduction may only be the whole body "
                    "(e.g. lambda i: te.sum(A[i, k], axis=k)); compute the reduction in its "
                    "own te.compute and use that tensor here"
                )
        try:
            post_order_visit(e, f)
        except TypeError:
            raise OptionError(
                f"te.compute({name!r}): a reduction may only be the whole body"
            ) from None


# ------------------------------------------------------------------------- reductions


@dataclass(frozen=True, eq=False, repr=False)
class CommReducer:
    """A commutative, associative reduction: ``combine(x, y)`` with ``identity``.

    >>> prod = comm_reducer(lambda x, y: x * y, lambda dt: const(1, dt), name="prod")
    >>> A = placeholder((4, 4), name="A"); k = reduce_axis((0, 4))
    >>> P = compute((4,), lambda i: prod(A[i, k], axis=k), name="P")
    """

    combine: Callable[[ir.PrimExpr, ir.PrimExpr], ir.PrimExpr]
    identity: Callable[[str], ir.PrimExpr]
    name: str = "reduce"

    def __call__(self, expr: Any, axis: Any, where: Any = None,
                 init: Any = None) -> ir.PrimExpr:
        expr = ir.convert(expr)
        axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
        for a in axes:
            if not (isinstance(a, AxisVar) and a.iter_type == "reduce"):
                raise OptionError(
                    f"te.{self.name}: axis {a} is not a reduce axis; create it with "
                    "te.reduce_axis((0, n), name=...)"
                )
        cond = ir.convert(where) if where is not None else ir.IntImm(1, "bool")
        ident = ir.convert(init, expr.dtype) if init is not None else self.identity(expr.dtype)
        return Reduce(self, expr, axes, cond, ir.convert(ident, expr.dtype))


@dataclass(frozen=True, eq=False, repr=False)
class Reduce(ir.PrimExpr):
    """``combiner`` over ``axis`` of ``source`` where ``condition`` holds."""

    combiner: CommReducer
    source: ir.PrimExpr
    axis: tuple[AxisVar, ...]
    condition: ir.PrimExpr
    init: ir.PrimExpr
    dtype: str = ""

    def __post_init__(self) -> None:
        if not self.dtype:
            object.__setattr__(self, "dtype", self.source.dtype)

    def __str__(self) -> str:
        ax = ", ".join(a.name for a in self.axis)
        return f"{self.combiner.name}({self.source}, axis=[{ax}])"


def comm_reducer(fcombine: Callable[[ir.PrimExpr, ir.PrimExpr], ir.PrimExpr],
                 fidentity: Callable[[str], Any], name: str = "reduce") -> CommReducer:
    """A user-defined commutative reduction (see :class:`CommReducer`)."""

    def ident(dt: str) -> ir.PrimExpr:
        return ir.convert(fidentity(dt), dt)

    return CommReducer(fcombine, ident, name)


def min_value(dtype: str) -> ir.PrimExpr:
    """Smallest value of ``dtype`` (``-inf`` for floats)."""
    if ir.is_float(dtype):
        return ir.FloatImm(float("-inf"), dtype)
    bits = ir.bits_of(dtype)
    return ir.IntImm(0 if dtype.startswith("uint") else -(1 << (bits - 1)), dtype)


def max_value(dtype: str) -> ir.PrimExpr:
    """Largest value of ``dtype`` (``inf`` for floats)."""
    if ir.is_float(dtype):
        return ir.FloatImm(float("inf"), dtype)
    bits = ir.bits_of(dtype)
    top = (1 << bits) - 1 if dtype.startswith("uint") else (1 << (bits - 1)) - 1
    return ir.IntImm(top, dtype)


sum = CommReducer(lambda x, y: x + y, lambda dt: ir.const(0, dt), "sum")  # noqa: A001
_max_reducer = CommReducer(lambda x, y: ir.Max(x, y), min_value, "max")
_min_reducer = CommReducer(lambda x, y: ir.Min(x, y), max_value, "min")


def _is_axis_arg(axis: Any) -> bool:
    if isinstance(axis, (list, tuple)):
        return all(isinstance(a, AxisVar) and a.iter_type == "reduce" for a in axis)
    return isinstance(axis, AxisVar) and axis.iter_type == "reduce"


def max(expr: Any, axis: Any, where: Any = None, init: Any = None) -> ir.PrimExpr:  # noqa: A001
    """Max-reduction over ``axis``; with two expressions, the elementwise maximum."""
    if not _is_axis_arg(axis):
        return ir.Max(*ir.pair_of(expr, axis))
    return _max_reducer(expr, axis, where, init)


def min(expr: Any, axis: Any, where: Any = None, init: Any = None) -> ir.PrimExpr:  # noqa: A001
    """Min-reduction over ``axis``; with two expressions, the elementwise minimum."""
    if not _is_axis_arg(axis):
        return ir.Min(*ir.pair_of(expr, axis))
    return _min_reducer(expr, axis, where, init)
