"""More data-movement and indexing ops: DepthToSpace, SpaceToDepth, Trilu, Size, Range,
OneHot, CumSum, CumProd, GatherElements, GatherND, ScatterElements, ScatterND, EyeLike,
ReverseSequence, TensorScatter.

TensorScatter (opset 24, the KV-cache update): ``past_cache`` with ``update`` written along
``axis`` (the sequence axis, not the batch axis 0) from position ``write_indices[b]`` of each
batch entry (default 0); ``mode='circular'`` wraps positions modulo the cache length,
``'linear'`` writes only what fits.  INJECTIVE: each output element is one cache or one
update element.

Pattern kinds follow TVM: data movement and gathers are INJECTIVE; the scans and scatters
(CumSum, CumProd, ScatterElements, ScatterND: each output element combines a data-dependent or
growing set of inputs) are OPAQUE.  Operands that decide shapes are constant inputs read
at compile time: Range's ``start``/``limit``/``delta``, OneHot's ``depth``, CumSum's
``axis`` and Trilu's ``k`` (which decides nothing about shapes, but is a constant in every
model seen and keeps the compute simple).  Index operands (gathers, scatters) may be
run-time tensors; when they are constants, out-of-range indices are an error at compile
time.  At run time, out-of-range indices are undefined (ONNX) and the compiled kernels clamp
them into range, so they never read or write outside a buffer.

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ops import get_op
    >>> x = np.arange(8, dtype=np.float32).reshape(1, 8, 1, 1)
    >>> get_op("DepthToSpace").reference([x], {"blocksize": 2})[0][0, :, :, :].tolist()
    [[[0.0, 2.0], [4.0, 6.0]], [[1.0, 3.0], [5.0, 7.0]]]
    >>> get_op("CumSum").reference([np.array([1, 2, 3]), np.array(0)], {"exclusive": 1})
    [array([0, 1, 3])]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from toolchain.errors import ModelError
from toolchain.graph.ir import Node, TensorType, np_dtype
from toolchain.graph.ops.common import (
    ALL_TYPES,
    FLOAT_TYPES,
    NUMERIC_TYPES,
    check_dtype,
    check_onnx_dtype,
    defop,
    input_value,
    kiln_dtype,
    normalize_axis,
)
from toolchain.graph.ops.registry import Attr, OpDef, PatternKind, const_input

INJ, OPAQUE = PatternKind.INJECTIVE, PatternKind.OPAQUE
_INDEX = ("int32", "int64")
_WIDE = ("int32", "int64", "uint32", "uint64") + FLOAT_TYPES
_REDUCTIONS = ("none", "add", "mul", "max", "min")


def _positive(v: int) -> str | None:
    return None if v > 0 else "must be > 0"


def _moved(node: Node) -> int:
    return 0


def _scalar(node: Node, i: int, what: str) -> Any:
    """The single value of constant input ``i``."""
    data = const_input(node, i, what)
    assert data is not None
    if data.size != 1:
        raise ModelError(f"{node.describe()}: input {i} ({what}) must be a scalar (one "
                         f"element), but has shape {list(data.shape)}")
    return data.reshape(()).item()


# -- DepthToSpace, SpaceToDepth -------------------------------------------------------------

def _space_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x = input_value(node, 0, "input")
    check_dtype(node, x, "input 0 (input)", ALL_TYPES)
    if x.rank != 4:
        raise ModelError(f"{node.describe()}: input must be 4-D (N, C, H, W), got shape "
                         f"{list(x.shape)}")
    n, c, h, w = x.shape
    b = attrs["blocksize"]
    if node.op == "DepthToSpace":
        if c % (b * b):
            raise ModelError(f"{node.describe()}: channels {c} must be a multiple of "
                             f"blocksize² = {b * b}")
        return [TensorType((n, c // (b * b), h * b, w * b), x.dtype)]
    if h % b or w % b:
        raise ModelError(f"{node.describe()}: height {h} and width {w} must be multiples of "
                         f"blocksize {b}")
    return [TensorType((n, c * b * b, h // b, w // b), x.dtype)]


def _depth_to_space(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x, b = np.asarray(ins[0]), attrs["blocksize"]
    n, c, h, w = x.shape
    if attrs["mode"] == "DCR":
        t = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        t = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return [t.reshape(n, c // (b * b), h * b, w * b)]


def _space_to_depth(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x, b = np.asarray(ins[0]), attrs["blocksize"]
    n, c, h, w = x.shape
    t = x.reshape(n, c, h // b, b, w // b, b)
    perm = (0, 3, 5, 1, 2, 4) if attrs["mode"] == "DCR" else (0, 1, 3, 5, 2, 4)
    return [t.transpose(perm).reshape(n, c * b * b, h // b, w // b)]


def _space_ops() -> tuple[OpDef, ...]:
    attrs = (Attr("blocksize", "int", check=_positive),
             Attr("mode", "string", "DCR", ("DCR", "CRD")))
    return (
        defop("DepthToSpace", ("input",), INJ, attrs=attrs, infer=_space_infer,
              reference=_depth_to_space, flops=_moved, min_opset=1,
              doc="(N, C, H, W) -> (N, C/b², H·b, W·b); DCR: depth-column-row order, CRD: "
                  "column-row-depth"),
        defop("SpaceToDepth", ("input",), INJ, attrs=attrs, infer=_space_infer,
              reference=_space_to_depth, flops=_moved, min_opset=1,
              doc="(N, C, H, W) -> (N, C·b², H/b, W/b); the inverse of DepthToSpace (mode "
                  "since opset 28)"),
    )


# -- Trilu, Size, Range, OneHot -------------------------------------------------------------

def _trilu_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x = input_value(node, 0, "input")
    check_dtype(node, x, "input 0 (input)", ALL_TYPES)
    if x.rank < 2:
        raise ModelError(f"{node.describe()}: input must have rank >= 2, got shape "
                         f"{list(x.shape)}")
    if node.input(1) is not None:
        check_dtype(node, node.inputs[1], "input 1 (k)", ("int64",))
        _scalar(node, 1, "k")
    return [x.type]


def trilu_keep(rows: int, cols: int, k: int, upper: bool) -> np.ndarray:
    """The (rows, cols) mask Trilu keeps: ``j - i >= k`` (upper) or ``<= k`` (lower)."""
    d = np.arange(cols)[None, :] - np.arange(rows)[:, None]
    return d >= k if upper else d <= k


def _trilu_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    k = 0 if ins[1] is None else int(np.asarray(ins[1]).reshape(()))
    keep = trilu_keep(x.shape[-2], x.shape[-1], k, bool(attrs["upper"]))
    return [np.where(keep, x, np.zeros((), x.dtype)).astype(x.dtype)]


def _size_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    check_dtype(node, input_value(node, 0, "data"), "input 0 (data)", ALL_TYPES)
    return [TensorType((), "int64")]


_RANGE_TYPES = ("float32", "float64", "int16", "int32", "int64", "float16")


def range_length(start: float, limit: float, delta: float) -> int:
    """``max(ceil((limit - start) / delta), 0)``: Range's output length."""
    return max(int(math.ceil((limit - start) / delta)), 0)


def _range_values(node: Node) -> tuple[Any, Any, Any]:
    return (_scalar(node, 0, "start"), _scalar(node, 1, "limit"), _scalar(node, 2, "delta"))


def _range_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    vals = [input_value(node, i, n) for i, n in enumerate(("start", "limit", "delta"))]
    check_dtype(node, vals[0], "input 0 (start)", _RANGE_TYPES)
    for i, v in enumerate(vals[1:], 1):
        if v.dtype != vals[0].dtype:
            raise ModelError(f"{node.describe()}: inputs start ({vals[0].dtype}) and "
                             f"input {i} ({v.dtype}) must have the same dtype; insert a Cast")
    start, limit, delta = _range_values(node)
    if delta == 0:
        raise ModelError(f"{node.describe()}: delta must not be 0")
    return [TensorType((range_length(start, limit, delta),), vals[0].dtype)]


def _range_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    start, limit, delta = (np.asarray(v).reshape(()) for v in ins[:3])
    dt = start.dtype
    work = np.float32 if dt == np.float16 and attrs["stash_type"] == 1 else (
        np.float64 if dt == np.float16 else dt)
    n = range_length(start.item(), limit.item(), delta.item())
    s, d = start.astype(work), delta.astype(work)
    with np.errstate(all="ignore"):
        return [(s + np.arange(n).astype(work) * d).astype(dt)]


def _onehot_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    idx = input_value(node, 0, "indices")
    check_dtype(node, idx, "input 0 (indices)", NUMERIC_TYPES)
    check_dtype(node, input_value(node, 1, "depth"), "input 1 (depth)", NUMERIC_TYPES)
    values = input_value(node, 2, "values")
    check_dtype(node, values, "input 2 (values)", ALL_TYPES)
    if values.size != 2:
        raise ModelError(f"{node.describe()}: input 2 (values) must hold exactly 2 values "
                         f"[off_value, on_value], got shape {list(values.shape)}")
    depth = int(_scalar(node, 1, "depth"))
    if depth < 1:
        raise ModelError(f"{node.describe()}: depth must be >= 1, got {depth}")
    rank = idx.rank + 1
    if not -rank <= attrs["axis"] < rank:
        raise ModelError(f"{node.describe()}: attribute 'axis' {attrs['axis']} is out of range "
                         f"for a rank-{rank} output (allowed {-rank}..{rank - 1})")
    axis = attrs["axis"] % rank
    return [TensorType(idx.shape[:axis] + (depth,) + idx.shape[axis:], values.dtype)]


def _onehot_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    idx, values = np.asarray(ins[0]), np.asarray(ins[2]).reshape(-1)
    depth = int(np.asarray(ins[1]).reshape(()))
    axis = attrs["axis"] % (idx.ndim + 1)
    norm = np.where(idx < 0, idx + depth, idx)
    targets = np.arange(depth).reshape([-1 if d == axis else 1 for d in range(idx.ndim + 1)])
    hit = np.expand_dims(norm, axis) == targets
    return [np.where(hit, values[1], values[0]).astype(values.dtype)]


def _small_ops() -> tuple[OpDef, ...]:
    return (
        defop("Trilu", ("input", "k?"), INJ, attrs=(Attr("upper", "int", 1, (0, 1)),),
              infer=_trilu_infer, reference=_trilu_ref, flops=_moved, min_opset=14,
              doc="keep the upper (j - i >= k) or lower (j - i <= k) triangle of the last two "
                  "axes, zero the rest; `k` a constant int64 scalar (default 0)"),
        defop("Size", ("data",), INJ, infer=_size_infer, flops=_moved, min_opset=1,
              reference=lambda ins, a: [np.array(np.asarray(ins[0]).size, np.int64)],
              doc="int64 scalar: the number of elements of `data` (a compile-time constant)"),
        defop("Range", ("start", "limit", "delta"), INJ, infer=_range_infer,
              reference=_range_ref, attrs=(Attr("stash_type", "int", 1, (1, 11)),),
              flops=lambda node: sum(o.size for o in node.outputs), min_opset=11,
              doc="start + i·delta for i < max(ceil((limit - start) / delta), 0); the three "
                  "scalars must be constants; float16 computed in float32 (stash_type 1) or "
                  "float64 (11)"),
        defop("OneHot", ("indices", "depth", "values"), INJ, attrs=(Attr("axis", "int", -1),),
              infer=_onehot_infer, reference=_onehot_ref, flops=_moved, min_opset=9,
              doc="on_value where the (wrapped) index equals the position along the new axis "
                  "of length `depth` (a constant), off_value elsewhere; indices out of "
                  "[-depth, depth) match nothing"),
    )


# -- CumSum ---------------------------------------------------------------------------------

def _cumsum_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x = input_value(node, 0, "x")
    check_dtype(node, x, "input 0 (x)", _WIDE)
    check_dtype(node, input_value(node, 1, "axis"), "input 1 (axis)", _INDEX)
    if x.rank == 0:
        raise ModelError(f"{node.describe()}: input 0 (x) must have rank >= 1")
    normalize_axis(node, int(_scalar(node, 1, "axis")), x.rank, "axis")
    return [x.type]


def _cumulative_ref(ins: list[Any], attrs: dict[str, Any], op: str) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    axis = int(np.asarray(ins[1]).reshape(())) % x.ndim
    y = np.flip(x, axis) if attrs["reverse"] else x
    fn = np.cumsum if op == "CumSum" else np.cumprod
    with np.errstate(all="ignore"):
        s = fn(y, axis=axis, dtype=x.dtype)
    if attrs["exclusive"]:  # shift by one along the axis, the identity first
        first = np.full_like(np.take(s, [0], axis), 0 if op == "CumSum" else 1)
        s = np.concatenate([first, np.delete(s, -1, axis)], axis)
    return [(np.flip(s, axis) if attrs["reverse"] else s).astype(x.dtype)]


def _cumulative(op: str) -> OpDef:
    word = "sum" if op == "CumSum" else "product"
    return defop(
        op, ("x", "axis"), OPAQUE, infer=_cumsum_infer,
        reference=lambda ins, attrs: _cumulative_ref(ins, attrs, op),
        attrs=(Attr("exclusive", "int", 0, (0, 1)), Attr("reverse", "int", 0, (0, 1))),
        flops=lambda node: sum(o.size for o in node.outputs),
        min_opset=11 if op == "CumSum" else 26,
        doc=f"running {word} along the constant `axis`; exclusive leaves the element itself "
            f"out, reverse runs from the end; integers wrap")


# -- gathers --------------------------------------------------------------------------------

def _check_const_indices(node: Node, i: int, bounds: Any, what: str) -> None:
    """Constant indices (input ``i``) must lie in ``[-d, d)`` for ``d = bounds``
    (an int, or an array broadcast against the indices)."""
    v = node.input(i)
    if v is None or v.data is None or v.data.size == 0:
        return
    d = np.asarray(bounds)
    bad = (v.data < -d) | (v.data >= d)
    if np.any(bad):
        at = tuple(int(a[0]) for a in np.nonzero(bad))
        raise ModelError(f"{node.describe()}: {what} value {int(v.data[at])} at {list(at)} "
                         f"is out of range [-d, d) for the axis size d it indexes")


def _gather_elements_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x = input_value(node, 0, "data")
    idx = input_value(node, 1, "indices")
    check_dtype(node, x, "input 0 (data)", ALL_TYPES)
    check_dtype(node, idx, "input 1 (indices)", _INDEX)
    if x.rank == 0 or idx.rank != x.rank:
        raise ModelError(f"{node.describe()}: data {list(x.shape)} and indices "
                         f"{list(idx.shape)} must have the same rank >= 1")
    axis = normalize_axis(node, attrs["axis"], x.rank, "attribute 'axis'")
    for d, (a, b) in enumerate(zip(idx.shape, x.shape, strict=True)):
        if d != axis and a > b:
            raise ModelError(f"{node.describe()}: indices {list(idx.shape)} must not exceed "
                             f"data {list(x.shape)} on axis {d}")
    _check_const_indices(node, 1, x.shape[axis], "indices")
    return [TensorType(idx.shape, x.dtype)]


def _gather_elements_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x, idx = np.asarray(ins[0]), np.asarray(ins[1]).astype(np.int64)
    axis = attrs["axis"] % x.ndim
    idx = np.where(idx < 0, idx + x.shape[axis], idx)
    sub = x[tuple(slice(0, n) for n in idx.shape[:axis] + (x.shape[axis],)
                  + idx.shape[axis + 1:])]
    return [np.take_along_axis(sub, idx, axis)]


def gather_nd_shape(node: Node, data: tuple[int, ...], indices: tuple[int, ...],
                    batch_dims: int) -> tuple[int, ...]:
    """GatherND's output shape; raises naming the node for inconsistent operands."""
    if not indices or indices[-1] < 1 or indices[-1] > len(data) - batch_dims:
        raise ModelError(f"{node.describe()}: the last axis of indices {list(indices)} must "
                         f"be 1..rank(data) - batch_dims = {len(data) - batch_dims}")
    if batch_dims >= min(len(data), len(indices)) or batch_dims < 0:
        raise ModelError(f"{node.describe()}: batch_dims {batch_dims} must be < the ranks "
                         f"of data and indices")
    if data[:batch_dims] != indices[:batch_dims]:
        raise ModelError(f"{node.describe()}: the first {batch_dims} axes of data "
                         f"{list(data)} and indices {list(indices)} must agree")
    return indices[:-1] + data[batch_dims + indices[-1]:]


def _gather_nd_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x, idx = input_value(node, 0, "data"), input_value(node, 1, "indices")
    check_dtype(node, x, "input 0 (data)", ALL_TYPES)
    check_dtype(node, idx, "input 1 (indices)", ("int64",))
    shape = gather_nd_shape(node, x.shape, idx.shape, attrs["batch_dims"])
    b, k = attrs["batch_dims"], idx.shape[-1]
    _check_const_indices(node, 1, np.array(x.shape[b:b + k]), "indices")
    return [TensorType(shape, x.dtype)]


def _gather_nd_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x, idx = np.asarray(ins[0]), np.asarray(ins[1]).astype(np.int64)
    b, k = attrs["batch_dims"], idx.shape[-1]
    idx = np.where(idx < 0, idx + np.array(x.shape[b:b + k]), idx)
    batch = int(np.prod(x.shape[:b], dtype=np.int64))
    xs = x.reshape((batch,) + x.shape[b:])
    ix = idx.reshape(batch, -1, k)
    rows = [xs[(n, *ix[n, j])] for n in range(batch) for j in range(ix.shape[1])]
    out = idx.shape[:-1] + x.shape[b + k:]
    return [np.asarray(rows, dtype=x.dtype).reshape(out)]


def _gathers() -> tuple[OpDef, ...]:
    return (
        defop("GatherElements", ("data", "indices"), INJ, attrs=(Attr("axis", "int", 0),),
              infer=_gather_elements_infer, reference=_gather_elements_ref, flops=_moved,
              min_opset=11,
              doc="out[i] = data[i with axis replaced by indices[i]]; output has the indices' "
                  "shape; negative indices wrap"),
        defop("GatherND", ("data", "indices"), INJ, attrs=(Attr("batch_dims", "int", 0),),
              infer=_gather_nd_infer, reference=_gather_nd_ref, flops=_moved, min_opset=11,
              doc="slices of data addressed by the last axis of int64 indices, after "
                  "batch_dims shared leading axes; negative indices wrap"),
    )


# -- scatters -------------------------------------------------------------------------------

_REDUCE_NP = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter_dtypes(node: Node, x: Any, reduction: str) -> None:
    check_dtype(node, x, "input 0 (data)", ALL_TYPES if reduction == "none" else NUMERIC_TYPES)


def _scatter_elements_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x, idx = input_value(node, 0, "data"), input_value(node, 1, "indices")
    upd = input_value(node, 2, "updates")
    _scatter_dtypes(node, x, attrs["reduction"])
    check_dtype(node, idx, "input 1 (indices)", _INDEX)
    if upd.dtype != x.dtype:
        raise ModelError(f"{node.describe()}: updates ({upd.dtype}) must have data's dtype "
                         f"({x.dtype})")
    if idx.shape != upd.shape or idx.rank != x.rank or x.rank == 0:
        raise ModelError(f"{node.describe()}: indices {list(idx.shape)} and updates "
                         f"{list(upd.shape)} must have one shape, of data's rank {x.rank}")
    axis = normalize_axis(node, attrs["axis"], x.rank, "attribute 'axis'")
    if any(a > b for d, (a, b) in enumerate(zip(idx.shape, x.shape, strict=True))
           if d != axis):
        raise ModelError(f"{node.describe()}: indices {list(idx.shape)} must not exceed data "
                         f"{list(x.shape)} off axis {axis}")
    _check_const_indices(node, 1, x.shape[axis], "indices")
    return [x.type]


def _scatter_elements_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x, idx, upd = np.asarray(ins[0]), np.asarray(ins[1]).astype(np.int64), np.asarray(ins[2])
    axis = attrs["axis"] % x.ndim
    idx = np.where(idx < 0, idx + x.shape[axis], idx)
    y = x.copy()
    fn = _REDUCE_NP.get(attrs["reduction"])
    with np.errstate(all="ignore"):
        for pos in np.ndindex(*idx.shape):  # in order: with "none" the last write wins
            at = pos[:axis] + (int(idx[pos]),) + pos[axis + 1:]
            y[at] = upd[pos] if fn is None else fn(y[at], upd[pos])
    return [y]


def _scatter_nd_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x, idx = input_value(node, 0, "data"), input_value(node, 1, "indices")
    upd = input_value(node, 2, "updates")
    _scatter_dtypes(node, x, attrs["reduction"])
    check_dtype(node, idx, "input 1 (indices)", ("int64",))
    if upd.dtype != x.dtype:
        raise ModelError(f"{node.describe()}: updates ({upd.dtype}) must have data's dtype "
                         f"({x.dtype})")
    if idx.rank == 0 or not 1 <= idx.shape[-1] <= x.rank:
        raise ModelError(f"{node.describe()}: the last axis of indices {list(idx.shape)} must "
                         f"be 1..rank(data) = {x.rank}")
    want = idx.shape[:-1] + x.shape[idx.shape[-1]:]
    if upd.shape != want:
        raise ModelError(f"{node.describe()}: updates must have shape {list(want)} "
                         f"(indices.shape[:-1] + data.shape[k:]), got {list(upd.shape)}")
    _check_const_indices(node, 1, np.array(x.shape[:idx.shape[-1]]), "indices")
    return [x.type]


def _scatter_nd_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x, idx, upd = np.asarray(ins[0]), np.asarray(ins[1]).astype(np.int64), np.asarray(ins[2])
    k = idx.shape[-1]
    idx = np.where(idx < 0, idx + np.array(x.shape[:k]), idx)
    y = x.copy()
    fn = _REDUCE_NP.get(attrs["reduction"])
    with np.errstate(all="ignore"):
        for pos in np.ndindex(*idx.shape[:-1]):
            at = tuple(int(v) for v in idx[pos])
            y[at] = upd[pos] if fn is None else fn(y[at], upd[pos])
    return [y]


def _scatter_flops(node: Node) -> int:
    v = node.input(2)
    return v.size if v is not None else 0


def _scatters() -> tuple[OpDef, ...]:
    red = Attr("reduction", "string", "none", _REDUCTIONS)
    return (
        defop("ScatterElements", ("data", "indices", "updates"), OPAQUE,
              attrs=(Attr("axis", "int", 0), red), infer=_scatter_elements_infer,
              reference=_scatter_elements_ref, flops=_scatter_flops, min_opset=11,
              doc="copy of data with updates[p] written (or combined by `reduction`) at p "
                  "with axis replaced by indices[p]; duplicates under 'none': the last wins"),
        defop("ScatterND", ("data", "indices", "updates"), OPAQUE, attrs=(red,),
              infer=_scatter_nd_infer, reference=_scatter_nd_ref, flops=_scatter_flops,
              min_opset=11,
              doc="copy of data with the slices updates[u] written (or combined by "
                  "`reduction`) at the k-index indices[u]; duplicates under 'none': the last "
                  "wins"),
    )


# -- EyeLike, ReverseSequence ------------------------------------------------------------------

def _eye_like_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x = input_value(node, 0, "input")
    check_dtype(node, x, "input 0 (input)", ALL_TYPES)
    if x.rank != 2:
        raise ModelError(f"{node.describe()}: input must be 2-D, got shape {list(x.shape)}")
    dt = x.dtype
    if attrs["dtype"] is not None:
        dt = kiln_dtype(attrs["dtype"], f"{node.describe()}: attribute 'dtype'")
    return [TensorType(x.shape, dt)]


def _eye_like_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    dt = x.dtype if attrs["dtype"] is None else np_dtype(kiln_dtype(attrs["dtype"], "EyeLike"))
    return [np.eye(x.shape[0], x.shape[1], k=attrs["k"], dtype=dt)]


def _reverse_sequence_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x, lens = input_value(node, 0, "input"), input_value(node, 1, "sequence_lens")
    check_dtype(node, x, "input 0 (input)", ALL_TYPES)
    check_dtype(node, lens, "input 1 (sequence_lens)", ("int64",))
    if x.rank < 2:
        raise ModelError(f"{node.describe()}: input must have rank >= 2, got {list(x.shape)}")
    b = attrs["batch_axis"]
    if sorted((b, attrs["time_axis"])) != [0, 1]:
        raise ModelError(f"{node.describe()}: batch_axis and time_axis must be 0 and 1 (one "
                         f"each), got {b} and {attrs['time_axis']}")
    if lens.shape != (x.shape[b],):
        raise ModelError(f"{node.describe()}: sequence_lens must have shape [{x.shape[b]}] "
                         f"(the batch axis), got {list(lens.shape)}")
    _check_const_indices(node, 1, x.shape[attrs["time_axis"]] + 1, "sequence_lens")
    return [x.type]


def _reverse_sequence_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x, lens = np.asarray(ins[0]), np.asarray(ins[1]).astype(np.int64)
    b, t = attrs["batch_axis"], attrs["time_axis"]
    xs = np.moveaxis(x, (b, t), (0, 1))
    y = xs.copy()
    for i, n in enumerate(lens):
        n = int(min(max(n, 0), xs.shape[1]))
        y[i, :n] = xs[i, :n][::-1]
    return [np.moveaxis(y, (0, 1), (b, t))]


def _eye_reverse() -> tuple[OpDef, ...]:
    return (
        defop("EyeLike", ("input",), INJ, infer=_eye_like_infer, reference=_eye_like_ref,
              attrs=(Attr("dtype", "int", None, check=check_onnx_dtype), Attr("k", "int", 0)),
              flops=_moved, min_opset=9,
              doc="a 2-D tensor of input's shape with ones on diagonal k, in `dtype` (default "
                  "the input's)"),
        defop("ReverseSequence", ("input", "sequence_lens"), INJ,
              infer=_reverse_sequence_infer, reference=_reverse_sequence_ref,
              attrs=(Attr("batch_axis", "int", 1, (0, 1)), Attr("time_axis", "int", 0, (0, 1))),
              flops=_moved, min_opset=10,
              doc="for each batch entry b, the first sequence_lens[b] steps along time_axis "
                  "reversed, the rest copied"),
    )


def _tensor_scatter_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    cache, update = input_value(node, 0, "past_cache"), input_value(node, 1, "update")
    check_dtype(node, cache, "input 0 (past_cache)", ALL_TYPES)
    check_dtype(node, update, "input 1 (update)", (cache.dtype,))
    axis = normalize_axis(node, attrs["axis"], cache.rank)
    if axis == 0:
        raise ModelError(f"{node.describe()}: axis {attrs['axis']} is the batch axis; the "
                         "sequence axis must be another")
    if update.rank != cache.rank or any(
            u != c for d, (u, c) in enumerate(zip(update.shape, cache.shape, strict=True))
            if d != axis) or update.shape[axis] > cache.shape[axis]:
        raise ModelError(f"{node.describe()}: update {list(update.shape)} must have "
                         f"past_cache's shape {list(cache.shape)} except along axis {axis}, "
                         "where it may not be longer")
    idx = node.input(2)
    if idx is not None:
        check_dtype(node, idx, "input 2 (write_indices)", ("int64",))
        if idx.shape != (cache.shape[0],):
            raise ModelError(f"{node.describe()}: write_indices {list(idx.shape)} must be "
                             f"[{cache.shape[0]}] (one position per batch entry)")
    return [cache.type]


def _tensor_scatter_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    cache, update = np.asarray(ins[0]), np.asarray(ins[1])
    axis = attrs["axis"] % cache.ndim
    n, seq = cache.shape[axis], update.shape[axis]
    starts = np.zeros(cache.shape[0], np.int64) if ins[2] is None else np.asarray(ins[2])
    out = np.moveaxis(cache.copy(), axis, 1)
    upd = np.moveaxis(update, axis, 1)
    for b, start in enumerate(starts):
        pos = int(start) + np.arange(seq)
        if attrs["mode"] == "circular":
            pos %= n
        fits = (pos >= 0) & (pos < n)  # linear: ONNX leaves the rest undefined
        out[b, pos[fits]] = upd[b, fits]
    return [np.moveaxis(out, 1, axis)]


#: this family's ops (registered by the op table, ``registry.builtin_ops``)
OPS: tuple[OpDef, ...] = (*_space_ops(), *_small_ops(), _cumulative("CumSum"),
                          _cumulative("CumProd"), *_gathers(), *_scatters(), *_eye_reverse(),
                          defop("TensorScatter", ("past_cache", "update", "write_indices?"),
                                INJ, infer=_tensor_scatter_infer,
                                reference=_tensor_scatter_ref,
                                attrs=(Attr("axis", "int", -2),
                                       Attr("mode", "string", "linear",
                                            ("linear", "circular"))),
                                flops=_moved, min_opset=24,
                                doc="KV-cache update: update written into past_cache along "
                                    "axis from write_indices[b] (linear or circular)"))
