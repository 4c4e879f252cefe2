"""Reductions: ReduceMean, ReduceSum, ReduceMax, ReduceMin (pattern REDUCTION) and ArgMax.

Newest ONNX form: ``axes`` is an optional int64 *input* that must be a compile-time
constant.  Absent or empty ``axes`` reduces every axis, unless ``noop_with_empty_axes=1``,
in which case the op is the identity (and its pattern kind is INJECTIVE).

Reductions over an empty set give the identity of the reduction: 0 for sums, -inf / the
dtype's minimum / False for max, +inf / the maximum / True for min (as ONNX's node tests
expect).  Float sums and means accumulate in float64 and round once; integer sums wrap in
the input dtype; an integer mean is the sum divided by the count truncated toward zero.

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ops import get_op
    >>> x = np.arange(6, dtype=np.float32).reshape(2, 3)
    >>> get_op("ReduceSum").reference([x, np.array([1])], {"keepdims": 0})
    [array([ 3., 12.], dtype=float32)]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from toolchain.errors import ModelError
from toolchain.graph.ir import Node, TensorType
from toolchain.graph.ops.common import (
    FLOAT_TYPES,
    NUMERIC_TYPES,
    check_dtype,
    defop,
    input_value,
    normalize_axis,
)
from toolchain.graph.ops.registry import Attr, OpDef, PatternKind, const_input

_BOOL01 = (0, 1)
_WIDE = ("int32", "int64", "uint32", "uint64") + FLOAT_TYPES
_REDUCE_DTYPES: dict[str, tuple[str, ...]] = {
    "ReduceMean": _WIDE,
    "ReduceSum": _WIDE,
    "ReduceMax": _WIDE + ("int8", "uint8", "bool"),
    "ReduceMin": _WIDE + ("int8", "uint8", "bool"),
}


def reduce_axes(node: Node, rank: int, noop_with_empty_axes: int) -> tuple[int, ...] | None:
    """The normalised, sorted axes a Reduce* node reduces; ``None`` when it is a no-op.

    Reads the constant ``axes`` input; raises naming the node for duplicates or
    out-of-range axes.
    """
    data = const_input(node, 1, "axes")
    if data is None or data.size == 0:
        return None if noop_with_empty_axes else tuple(range(rank))
    if data.ndim != 1 or data.dtype != np.int64:
        raise ModelError(
            f"{node.describe()}: input 1 (axes) must be a 1-D int64 tensor, got "
            f"{data.dtype}{list(data.shape)}"
        )
    axes = [normalize_axis(node, int(a), rank, "axes entry") for a in data]
    if len(set(axes)) != len(axes):
        raise ModelError(f"{node.describe()}: axes {data.tolist()} name an axis twice")
    return tuple(sorted(axes))


def _reduced_shape(shape: Sequence[int], axes: Sequence[int], keepdims: int) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _reduce_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x = input_value(node, 0, "data")
    check_dtype(node, x, "input 0 (data)", _REDUCE_DTYPES[node.op])
    axes = reduce_axes(node, x.rank, attrs["noop_with_empty_axes"])
    if axes is None:
        return [x.type]
    return [TensorType(_reduced_shape(x.shape, axes, attrs["keepdims"]), x.dtype)]


def _axes_of(ins: list[Any], rank: int, noop: int) -> tuple[int, ...] | None:
    axes = ins[1]
    if axes is None or np.asarray(axes).size == 0:
        return None if noop else tuple(range(rank))
    return tuple(sorted({int(a) % rank for a in np.asarray(axes).reshape(-1)}))


def _empty_identity(x: np.ndarray, op: str) -> Any:
    """The value a max/min reduction over an empty set yields."""
    big = op == "ReduceMin"
    if x.dtype == np.bool_:
        return big
    if x.dtype.kind == "f":
        return np.inf if big else -np.inf
    info = np.iinfo(x.dtype)
    return info.max if big else info.min


def _reduce_ref(op: str):
    def ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
        x = np.asarray(ins[0])
        axes = _axes_of(ins, x.ndim, attrs["noop_with_empty_axes"])
        if axes is None:
            return [x.copy()]
        keep = bool(attrs["keepdims"])
        with np.errstate(all="ignore"):
            if op in ("ReduceMax", "ReduceMin"):
                fn = np.max if op == "ReduceMax" else np.min
                y = fn(x, axis=axes, keepdims=keep, initial=_empty_identity(x, op))
            elif x.dtype.kind == "f":
                y = np.sum(x, axis=axes, keepdims=keep, dtype=np.float64)
                if op == "ReduceMean":
                    y = y / np.prod([x.shape[a] for a in axes])
            else:
                y = np.sum(x, axis=axes, keepdims=keep, dtype=x.dtype)
                if op == "ReduceMean":
                    count = int(np.prod([x.shape[a] for a in axes]))
                    y = _trunc_div(y, count) if count else y
        return [np.asarray(y).astype(x.dtype)]

    return ref


def _trunc_div(a: np.ndarray, n: int) -> np.ndarray:
    q = np.abs(a) // n
    return np.where(a < 0, -q, q).astype(a.dtype)


def _reduce_pattern(node: Node) -> PatternKind:
    axes = node.input(1)
    noop = int(node.attrs.get("noop_with_empty_axes", 0) or 0)
    if noop and (axes is None or (axes.data is not None and axes.data.size == 0)):
        return PatternKind.INJECTIVE
    return PatternKind.REDUCTION


def _reduce_flops(op: str):
    def flops(node: Node) -> int:
        x = node.inputs[0]
        n = x.size if x is not None else 0
        return n + (sum(o.size for o in node.outputs) if op == "ReduceMean" else 0)

    return flops


_REDUCE_DOCS = {
    "ReduceMean": "mean over `axes`; integer means truncate toward zero",
    "ReduceSum": "sum over `axes`; integers wrap",
    "ReduceMax": "max over `axes`; empty set gives -inf / dtype min / False",
    "ReduceMin": "min over `axes`; empty set gives +inf / dtype max / True",
}

def _reduce_ops() -> tuple[OpDef, ...]:
    return tuple(defop(
        op, ("data", "axes?"), _reduce_pattern,
        attrs=(Attr("keepdims", "int", 1, _BOOL01),
               Attr("noop_with_empty_axes", "int", 0, _BOOL01)),
        infer=_reduce_infer, reference=_reduce_ref(op), flops=_reduce_flops(op), min_opset=1,
        compile_time=(1,),
        doc=doc + "; `axes` input constant; empty axes reduce all unless noop_with_empty_axes",
    ) for op, doc in _REDUCE_DOCS.items())


# -- ArgMax ---------------------------------------------------------------------------------

def _argmax_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x = input_value(node, 0, "data")
    check_dtype(node, x, "input 0 (data)", NUMERIC_TYPES)
    if x.rank == 0:
        raise ModelError(f"{node.describe()}: input 0 (data) must have rank >= 1, not a scalar")
    axis = normalize_axis(node, attrs["axis"], x.rank, "attribute 'axis'")
    if x.shape[axis] == 0:
        raise ModelError(
            f"{node.describe()}: cannot take ArgMax over axis {axis} of length 0 "
            f"(input shape {list(x.shape)})"
        )
    return [TensorType(_reduced_shape(x.shape, (axis,), attrs["keepdims"]), "int64")]


def _argmax_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    axis = attrs["axis"] % x.ndim
    if attrs["select_last_index"]:
        flipped = np.flip(x, axis=axis)
        idx = x.shape[axis] - 1 - np.argmax(flipped, axis=axis)
    else:
        idx = np.argmax(x, axis=axis)
    if attrs["keepdims"]:
        idx = np.expand_dims(idx, axis)
    return [np.asarray(idx, dtype=np.int64)]


def _argmax() -> OpDef:
    return defop(
        "ArgMax", ("data",), PatternKind.REDUCTION,
        attrs=(
            Attr("axis", "int", 0),
            Attr("keepdims", "int", 1, _BOOL01),
            Attr("select_last_index", "int", 0, _BOOL01),
        ),
        infer=_argmax_infer, reference=_argmax_ref,
        flops=lambda node: node.inputs[0].size if node.inputs and node.inputs[0] else 0,
        min_opset=1,
        doc="int64 index of the maximum along `axis`; ties give the first index, or the last "
            "with select_last_index=1",
    )


#: this family's ops (registered by the op table, ``registry.builtin_ops``)
OPS: tuple[OpDef, ...] = (*_reduce_ops(), _argmax())
