"""Reductions: ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
ReduceSumSquare, ReduceLogSum, ReduceLogSumExp (pattern REDUCTION), ArgMax, ArgMin,
Hardmax (OPAQUE: a reduction re-applied to its input, like Softmax) and TopK (OPAQUE).

Newest ONNX form: ``axes`` is an optional int64 *input* that must be a compile-time
constant.  Absent or empty ``axes`` reduces every axis, unless ``noop_with_empty_axes=1``,
in which case no axis is reduced (pattern kind INJECTIVE): the identity for ReduceSum,
Mean, Max, Min, Prod and LogSumExp, the element-wise step for the composite ones
(ReduceL1 |x|, ReduceL2 |x|, ReduceSumSquare x², ReduceLogSum log x), as ONNX's
specification and onnxruntime define it.

Reductions over an empty set give the identity of the reduction: 0 for sums, -inf / the
dtype's minimum / False for max, +inf / the maximum / True for min, 1 for products, -inf
for ReduceLogSum/ReduceLogSumExp (as ONNX's node tests expect).  The float forms of
ReduceProd/L1/L2/SumSquare/LogSum/LogSumExp are evaluated in float64 and rounded once
(LogSumExp max-shifted); their integer forms wrap in the input dtype (ReduceL2: the square
root of the wrapped sum of squares, truncated).  Float sums and means accumulate in
float64 and round once; integer sums wrap in the input dtype; an integer mean is the sum
divided by the count truncated toward zero.

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
_REDUCE_DTYPES: dict[str, tuple[str, ...]] = {  # (and the ops of _MORE_REDUCE, below)
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


# -- ReduceProd, ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceLogSumExp ----------

def _logsumexp(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    m = np.max(x, axis=axes, keepdims=True, initial=-np.inf)
    shift = np.where(np.isfinite(m), m, 0.0)
    y = np.log(np.sum(np.exp(x - shift), axis=axes, keepdims=True)) + shift
    return y if keep else np.squeeze(y, axis=axes)


def _float_reduce(op: str, x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    if op == "ReduceLogSumExp":
        return _logsumexp(x, axes, keep)
    if op == "ReduceProd":
        return np.prod(x, axis=axes, keepdims=keep)
    term = np.abs(x) if op == "ReduceL1" else x * x if op in ("ReduceL2",
                                                             "ReduceSumSquare") else x
    y = np.sum(term, axis=axes, keepdims=keep)
    return np.sqrt(y) if op == "ReduceL2" else np.log(y) if op == "ReduceLogSum" else y


def _int_reduce(op: str, x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    if op == "ReduceProd":
        return np.prod(x, axis=axes, keepdims=keep, dtype=x.dtype)
    term = np.abs(x) if op == "ReduceL1" else x * x if op != "ReduceLogSum" else x
    y = np.sum(term, axis=axes, keepdims=keep, dtype=x.dtype)
    return np.trunc(np.sqrt(y.astype(np.float64))) if op == "ReduceL2" else y


def _more_reduce_ref(op: str):
    def ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
        x = np.asarray(ins[0])
        axes = _axes_of(ins, x.ndim, attrs["noop_with_empty_axes"])
        # noop_with_empty_axes: a reduction over no axis, which still applies the op's
        # element-wise steps (|x|, x², log x; ONNX's definition, as onnxruntime)
        axes = () if axes is None else axes
        keep = bool(attrs["keepdims"])
        with np.errstate(all="ignore"):
            if x.dtype.kind == "f":
                y = _float_reduce(op, x.astype(np.float64), axes, keep)
            else:
                y = _int_reduce(op, x, axes, keep)
        return [np.asarray(y).astype(x.dtype)]

    return ref


_MORE_REDUCE: dict[str, tuple[tuple[str, ...], int, str]] = {
    # op: dtypes, FLOPs per input element, semantics
    "ReduceProd": (_WIDE, 1, "product over `axes`; empty set gives 1; integers wrap"),
    "ReduceL1": (_WIDE, 2, "sum of |x| over `axes`"),
    "ReduceL2": (_WIDE, 2, "sqrt of the sum of x^2 over `axes` (integers: truncated)"),
    "ReduceSumSquare": (_WIDE, 2, "sum of x^2 over `axes`"),
    "ReduceLogSum": (FLOAT_TYPES, 1, "log of the sum over `axes`; empty set gives -inf"),
    "ReduceLogSumExp": (FLOAT_TYPES, 3, "log(sum(exp(x))) over `axes`, max-shifted; empty "
                                        "set gives -inf"),
}
_REDUCE_DTYPES.update({op: dtypes for op, (dtypes, _, _) in _MORE_REDUCE.items()})


def _more_reduce_ops() -> tuple[OpDef, ...]:
    def flops(cost: int):
        def f(node: Node) -> int:
            x = node.inputs[0]
            return cost * (x.size if x is not None else 0)
        return f

    return tuple(defop(
        op, ("data", "axes?"), _reduce_pattern,
        attrs=(Attr("keepdims", "int", 1, _BOOL01),
               Attr("noop_with_empty_axes", "int", 0, _BOOL01)),
        infer=_reduce_infer, reference=_more_reduce_ref(op), flops=flops(cost), min_opset=1,
        compile_time=(1,),
        doc=doc + "; `axes` input constant; empty axes reduce all unless noop_with_empty_axes",
    ) for op, (_, cost, doc) in _MORE_REDUCE.items())


# -- ArgMax, ArgMin, Hardmax ---------------------------------------------------------------

def _argmax_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x = input_value(node, 0, "data")
    check_dtype(node, x, "input 0 (data)", NUMERIC_TYPES)
    if x.rank == 0:
        raise ModelError(f"{node.describe()}: input 0 (data) must have rank >= 1, not a scalar")
    axis = normalize_axis(node, attrs["axis"], x.rank, "attribute 'axis'")
    if x.shape[axis] == 0:
        raise ModelError(
            f"{node.describe()}: cannot take {node.op} over axis {axis} of length 0 "
            f"(input shape {list(x.shape)})"
        )
    return [TensorType(_reduced_shape(x.shape, (axis,), attrs["keepdims"]), "int64")]


def _arg_ref(fn: Any):
    def ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
        x = np.asarray(ins[0])
        axis = attrs["axis"] % x.ndim
        if attrs["select_last_index"]:
            flipped = np.flip(x, axis=axis)
            idx = x.shape[axis] - 1 - fn(flipped, axis=axis)
        else:
            idx = fn(x, axis=axis)
        if attrs["keepdims"]:
            idx = np.expand_dims(idx, axis)
        return [np.asarray(idx, dtype=np.int64)]

    return ref


def _argmax(name: str = "ArgMax") -> OpDef:
    word = "maximum" if name == "ArgMax" else "minimum"
    return defop(
        name, ("data",), PatternKind.REDUCTION,
        attrs=(
            Attr("axis", "int", 0),
            Attr("keepdims", "int", 1, _BOOL01),
            Attr("select_last_index", "int", 0, _BOOL01),
        ),
        infer=_argmax_infer, reference=_arg_ref(np.argmax if name == "ArgMax" else np.argmin),
        flops=lambda node: node.inputs[0].size if node.inputs and node.inputs[0] else 0,
        min_opset=1,
        doc=f"int64 index of the {word} along `axis`; ties give the first index, or the last "
            "with select_last_index=1",
    )


def _hardmax_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x = input_value(node, 0, "input")
    check_dtype(node, x, "input 0 (input)", FLOAT_TYPES)
    if x.rank == 0:
        raise ModelError(f"{node.describe()}: input 0 (input) must have rank >= 1, not a "
                         "scalar")
    normalize_axis(node, attrs["axis"], x.rank, "attribute 'axis'")
    return [x.type]


def _hardmax_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    axis = attrs["axis"] % x.ndim
    if x.shape[axis] == 0:
        return [x.copy()]
    idx = np.expand_dims(np.argmax(x, axis=axis), axis)
    pos = np.arange(x.shape[axis]).reshape([-1 if d == axis else 1 for d in range(x.ndim)])
    return [(pos == idx).astype(x.dtype)]


def _hardmax() -> OpDef:
    return defop(
        "Hardmax", ("input",), PatternKind.OPAQUE, attrs=(Attr("axis", "int", -1),),
        infer=_hardmax_infer, reference=_hardmax_ref,
        flops=lambda node: 2 * node.inputs[0].size if node.inputs and node.inputs[0] else 0,
        min_opset=13,
        doc="1 at the first maximum along `axis`, 0 elsewhere (opset-13 semantics: one "
            "axis; older models are rewritten by the frontend as for Softmax)",
    )


# -- TopK -----------------------------------------------------------------------------------

_TOPK_TYPES = FLOAT_TYPES + ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                             "uint64")


def _topk_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x = input_value(node, 0, "X")
    check_dtype(node, x, "input 0 (X)", _TOPK_TYPES)
    kv = input_value(node, 1, "K")
    check_dtype(node, kv, "input 1 (K)", ("int64",))
    if x.rank == 0:
        raise ModelError(f"{node.describe()}: input 0 (X) must have rank >= 1")
    axis = normalize_axis(node, attrs["axis"], x.rank, "attribute 'axis'")
    data = const_input(node, 1, "K")
    assert data is not None
    if data.size != 1:
        raise ModelError(f"{node.describe()}: input 1 (K) must hold one value, got shape "
                         f"{list(data.shape)}")
    k = int(data.reshape(()))
    if not 1 <= k <= x.shape[axis]:
        raise ModelError(f"{node.describe()}: K = {k} must be in [1, {x.shape[axis]}] (the "
                         f"length of axis {axis} of X {list(x.shape)})")
    shape = x.shape[:axis] + (k,) + x.shape[axis + 1:]
    return [TensorType(shape, x.dtype), TensorType(shape, "int64")]


def _topk_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    k = int(np.asarray(ins[1]).reshape(()))
    axis = attrs["axis"] % x.ndim
    n = x.shape[axis]
    if attrs["largest"]:
        # descending; equal values keep the lower index first: a stable ascending sort of
        # the reversed axis, read backwards
        order = np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
        order = n - 1 - order
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis).astype(np.int64)
    return [np.take_along_axis(x, idx, axis), idx]


def _topk() -> OpDef:
    return defop(
        "TopK", ("X", "K"), PatternKind.OPAQUE, num_outputs=(1, 2),
        attrs=(Attr("axis", "int", -1), Attr("largest", "int", 1, _BOOL01),
               Attr("sorted", "int", 1, _BOOL01)),
        infer=_topk_infer, reference=_topk_ref, compile_time=(1,),
        flops=lambda node: (node.inputs[0].size * node.inputs[0].shape[
            int(node.attrs.get("axis", -1) or -1) % max(node.inputs[0].rank, 1)]
            if node.inputs and node.inputs[0] and node.inputs[0].rank else 0),
        min_opset=10,
        doc="the K (a constant) largest (or smallest) values along `axis` and their int64 "
            "indices, sorted, equal values lower index first (also with sorted=0, whose "
            "order ONNX leaves open)")


#: this family's ops (registered by the op table, ``registry.builtin_ops``)
OPS: tuple[OpDef, ...] = (*_reduce_ops(), *_more_reduce_ops(), _argmax(), _argmax("ArgMin"),
                          _hardmax(), _topk())
