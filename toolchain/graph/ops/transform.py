"""Data-movement ops: Reshape, Flatten, Transpose, Concat, Split, Slice, Squeeze, Unsqueeze,
Gather, Pad, Resize, Expand, Tile.

All are injective (each output element reads a fixed set of input elements), as in TVM.
Reshape, Flatten, Squeeze and Unsqueeze are ``view`` s: the input's bytes under another shape.
Operands that decide the output shape (Reshape ``shape``, Slice ``starts`` …) are inputs in
Kiln's canonical (newest ONNX) form and must be constants: ``infer`` reads them with
:func:`~toolchain.graph.ops.registry.const_input`.  The references read the same operands
from their ``inputs`` list, so they also work on run-time values.

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ops import get_op
    >>> x = np.arange(6, dtype=np.float32).reshape(2, 3)
    >>> get_op("Reshape").reference([x, np.array([0, -1, 1])], {})[0].shape
    (2, 3, 1)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from toolchain.errors import ModelError
from toolchain.graph.ir import DTYPES, Node, TensorType
from toolchain.graph.ops.nn_common import (
    as_ints,
    attrs_of,
    cast_like,
    fail,
    in_type,
    norm_axis,
    prod,
    ref_attrs,
    resize_axis,
    resize_coord_dtype,
    shape_str,
)
from toolchain.graph.ops.registry import (
    REQUIRED,
    Attr,
    OpDef,
    PatternKind,
    const_input,
    elementwise_flops,
)

ALL_TYPES = tuple(DTYPES)
_INDEX_TYPES = ("int32", "int64")
#: upper bound for ops with any number of outputs (Split)
_MANY = 2**31 - 1


def _no_flops(node: Node) -> int:
    return 0


def _axes(where: str, axes: Sequence[int], rank: int, what: str = "axes") -> list[int]:
    """Normalise axes into ``[0, rank)``; raises on out-of-range or repeated axes."""
    out = []
    for a in axes:
        if not -rank <= a < rank:
            raise ModelError(f"{where}: {what} value {a} is out of range [{-rank}, {rank - 1}]"
                             f" for rank {rank}")
        out.append(a + rank if a < 0 else a)
    if len(set(out)) != len(out):
        raise ModelError(f"{where}: {what} {list(axes)} repeats an axis")
    return out


def _injective(name: str, inputs: tuple[str, ...], infer: Any, reference: Any,
               attrs: tuple[Attr, ...] = (), doc: str = "", **kw: Any) -> OpDef:
    return OpDef(name, inputs=inputs, pattern=PatternKind.INJECTIVE, attrs=attrs, infer=infer,
                 reference=reference, flops=kw.pop("flops", _no_flops), doc=doc, **kw)


# -- Reshape / Flatten / Transpose ----------------------------------------------------------

def reshape_shape(where: str, in_shape: Sequence[int], spec: Sequence[int],
                  allowzero: int) -> tuple[int, ...]:
    """Output shape of ONNX Reshape: ``0`` copies the input dim (unless ``allowzero``),
    one ``-1`` is inferred.

    >>> reshape_shape("r", (2, 3, 4), [0, -1], 0)
    (2, 12)
    """
    out = []
    for i, d in enumerate(spec):
        if d == 0 and not allowzero:
            if i >= len(in_shape):
                raise ModelError(f"{where}: shape {list(spec)} copies dimension {i} (a 0) but "
                                 f"the input {shape_str(in_shape)} has only {len(in_shape)}")
            out.append(int(in_shape[i]))
        elif d < -1:
            raise ModelError(f"{where}: shape {list(spec)} has an invalid value {d}")
        else:
            out.append(int(d))
    total = prod(in_shape)
    if out.count(-1) > 1:
        raise ModelError(f"{where}: shape {list(spec)} has more than one -1")
    if -1 in out:
        if allowzero and 0 in out:
            raise ModelError(f"{where}: shape {list(spec)} has both -1 and 0 with allowzero=1")
        known = prod([d for d in out if d != -1])
        if known == 0 or total % known:
            raise ModelError(f"{where}: cannot reshape {shape_str(in_shape)} ({total} elements) "
                             f"to {list(spec)}")
        out[out.index(-1)] = total // known
    if prod(out) != total:
        raise ModelError(f"{where}: cannot reshape {shape_str(in_shape)} ({total} elements) to "
                         f"{list(spec)} ({prod(out)} elements)")
    return tuple(out)


def _reshape_infer(node: Node) -> list[TensorType]:
    a = attrs_of(node)
    x = in_type(node, 0, "data")
    in_type(node, 1, "shape", ("int64",))
    spec = as_ints(const_input(node, 1, "shape"))
    return [TensorType(reshape_shape(node.describe(), x.shape, spec, a["allowzero"]), x.dtype)]


def _reshape_ref(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    a = ref_attrs("Reshape", attrs)
    shape = reshape_shape("Reshape", ins[0].shape, as_ints(ins[1]), a["allowzero"])
    return [ins[0].reshape(shape)]


_RESHAPE = _injective("Reshape", ("data", "shape"), _reshape_infer, _reshape_ref,
                      (Attr("allowzero", "int", 0, choices=(0, 1)),), view=True,
                      doc="0 copies a dim (unless allowzero), -1 is inferred",
                      compile_time=(1,))


def _flatten_infer(node: Node) -> list[TensorType]:
    a = attrs_of(node)
    x = in_type(node, 0, "input")
    rank = len(x.shape)
    if not -rank <= a["axis"] <= rank:
        raise fail(node, f"axis = {a['axis']} is out of range [{-rank}, {rank}] for input "
                   f"{shape_str(x.shape)}")
    axis = a["axis"] + rank if a["axis"] < 0 else a["axis"]
    return [TensorType((prod(x.shape[:axis]), prod(x.shape[axis:])), x.dtype)]


def _flatten_ref(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    x = ins[0]
    axis = ref_attrs("Flatten", attrs)["axis"]
    axis = axis + x.ndim if axis < 0 else axis
    return [x.reshape(prod(x.shape[:axis]), prod(x.shape[axis:]))]


_FLATTEN = _injective("Flatten", ("input",), _flatten_infer, _flatten_ref,
                      (Attr("axis", "int", 1),), view=True,
                      doc="to 2-D: dims before axis | dims from axis")


def _perm(where: str, perm: Sequence[int], rank: int) -> tuple[int, ...]:
    if not perm:
        return tuple(range(rank - 1, -1, -1))
    if sorted(perm) != list(range(rank)):
        raise ModelError(f"{where}: perm {list(perm)} is not a permutation of 0..{rank - 1}")
    return tuple(perm)


def _transpose_infer(node: Node) -> list[TensorType]:
    x = in_type(node, 0, "data")
    perm = _perm(node.describe(), attrs_of(node)["perm"], len(x.shape))
    return [TensorType(tuple(x.shape[p] for p in perm), x.dtype)]


def _transpose_ref(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    perm = _perm("Transpose", ref_attrs("Transpose", attrs)["perm"], ins[0].ndim)
    return [np.transpose(ins[0], perm)]


_TRANSPOSE = _injective("Transpose", ("data",), _transpose_infer, _transpose_ref,
                        (Attr("perm", "ints", ()),), doc="default perm reverses the axes")


# -- Concat / Split ----------------------------------------------------------------------------

def _concat_infer(node: Node) -> list[TensorType]:
    a = attrs_of(node)
    types = [in_type(node, i, f"inputs[{i}]") for i in range(len(node.inputs))]
    if not types:
        raise fail(node, "Concat needs at least one input")
    first = types[0]
    axis = norm_axis(node, a["axis"], len(first.shape))
    total = 0
    for i, t in enumerate(types):
        ok = (len(t.shape) == len(first.shape) and t.dtype == first.dtype
              and all(d == e for j, (d, e) in enumerate(zip(t.shape, first.shape, strict=True))
                      if j != axis))
        if not ok:
            raise fail(node, f"input {i} {t.dtype}{shape_str(t.shape)} does not match input 0 "
                       f"{first.dtype}{shape_str(first.shape)} outside axis {axis}")
        total += t.shape[axis]
    shape = list(first.shape)
    shape[axis] = total
    return [TensorType(tuple(shape), first.dtype)]


def _concat_ref(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    return [np.concatenate(ins, axis=ref_attrs("Concat", attrs)["axis"])]


_CONCAT = _injective("Concat", ("inputs*",), _concat_infer, _concat_ref,
                     (Attr("axis", "int", REQUIRED),), doc="join along axis")


def split_sizes(where: str, dim: int, split: Sequence[int] | None, num_outputs: int | None,
                n_out: int | None) -> list[int]:
    """Chunk sizes of ONNX Split: explicit ``split``, else ``num_outputs`` chunks of
    ``ceil(dim/n)`` (the last one smaller), else ``n_out`` equal chunks.

    >>> split_sizes("s", 7, None, 3, None)
    [3, 3, 1]
    """
    if split is not None:
        if any(s < 0 for s in split) or sum(split) != dim:
            raise ModelError(f"{where}: split {list(split)} must be non-negative and sum to "
                             f"the axis length {dim}")
        return list(split)
    n = num_outputs if num_outputs is not None else n_out
    if n is None:
        raise ModelError(f"{where}: without a 'split' input, the 'num_outputs' attribute is "
                         "needed to know the number of chunks")
    chunk = -(-dim // n)
    sizes = [chunk] * (n - 1) + [dim - chunk * (n - 1)]
    if num_outputs is None and dim % n:
        raise ModelError(f"{where}: axis length {dim} cannot be split evenly into {n} outputs;"
                         " give a 'split' input")
    if sizes[-1] < 0 or (sizes[-1] == 0 and dim > 0):
        raise ModelError(f"{where}: axis length {dim} is too short for {n} chunks of "
                         f"{chunk} (the last would have {sizes[-1]} elements)")
    return sizes


def _split_infer(node: Node) -> list[TensorType]:
    a = attrs_of(node)
    x = in_type(node, 0, "input")
    axis = norm_axis(node, a["axis"], len(x.shape))
    split = const_input(node, 1, "split")
    if split is not None and split.size == 0:
        split = None
    sizes = split_sizes(node.describe(), x.shape[axis], None if split is None else as_ints(split),
                        a["num_outputs"], len(node.outputs))
    if len(sizes) != len(node.outputs):
        raise fail(node, f"{len(sizes)} chunks {sizes} but the node has {len(node.outputs)} "
                   "outputs")
    out = []
    for s in sizes:
        shape = list(x.shape)
        shape[axis] = s
        out.append(TensorType(tuple(shape), x.dtype))
    return out


def _split_ref(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    a = ref_attrs("Split", attrs)
    x = ins[0]
    split = ins[1] if len(ins) > 1 and ins[1] is not None and ins[1].size else None
    axis = a["axis"] + x.ndim if a["axis"] < 0 else a["axis"]
    sizes = split_sizes("Split", x.shape[axis], None if split is None else as_ints(split),
                        a["num_outputs"], None)
    return np.split(x, np.cumsum(sizes)[:-1].tolist(), axis=axis)


_SPLIT = _injective(
    "Split", ("input", "split?"), _split_infer, _split_ref,
    (Attr("axis", "int", 0),
     Attr("num_outputs", "int", None, check=lambda v: None if v >= 1 else "must be >= 1")),
    num_outputs=(1, _MANY), doc="by 'split' sizes or into num_outputs chunks",
    compile_time=(1,))


# -- Slice -------------------------------------------------------------------------------------

def slice_spec(where: str, shape: Sequence[int], starts: Sequence[int], ends: Sequence[int],
               axes: Sequence[int] | None, steps: Sequence[int] | None
               ) -> tuple[tuple[slice, ...], tuple[int, ...]]:
    """Python slices and the output shape of ONNX Slice (clamping, negative steps).

    >>> slice_spec("s", (10,), [-1], [-2**63], None, [-3])[1]
    (4,)
    """
    rank = len(shape)
    axes = list(range(len(starts))) if axes is None else _axes(where, axes, rank)
    steps = [1] * len(starts) if steps is None else list(steps)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ModelError(f"{where}: starts {list(starts)}, ends {list(ends)}, axes {list(axes)} "
                         f"and steps {list(steps)} must have the same length")
    slices = [slice(None)] * rank
    out = list(shape)
    for s, e, ax, st in zip(starts, ends, axes, steps, strict=True):
        d = shape[ax]
        if st == 0:
            raise ModelError(f"{where}: steps must not be 0 (axis {ax})")
        s = s + d if s < 0 else s
        e = e + d if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), d), min(max(e, 0), d)
        else:
            s, e = min(max(s, 0), d - 1), min(max(e, -1), d - 1)
        slices[ax] = slice(s, e if e >= 0 else None, st)
        out[ax] = len(range(s, e, st))
    return tuple(slices), tuple(out)


def _slice_operands(get: Any) -> tuple[list[int], list[int], list[int] | None, list[int] | None]:
    starts, ends, axes, steps = (get(i, w) for i, w in
                                 ((1, "starts"), (2, "ends"), (3, "axes"), (4, "steps")))
    return (as_ints(starts), as_ints(ends), None if axes is None else as_ints(axes),
            None if steps is None else as_ints(steps))


def _slice_infer(node: Node) -> list[TensorType]:
    x = in_type(node, 0, "data")
    ops = _slice_operands(lambda i, w: const_input(node, i, w))
    return [TensorType(slice_spec(node.describe(), x.shape, *ops)[1], x.dtype)]


def _slice_ref(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    ops = _slice_operands(lambda i, w: ins[i] if i < len(ins) else None)
    slices, _ = slice_spec("Slice", ins[0].shape, *ops)
    return [ins[0][slices]]


_SLICE = _injective("Slice", ("data", "starts", "ends", "axes?", "steps?"),
                    _slice_infer, _slice_ref, doc="clamped, negative steps allowed",
                    compile_time=(1, 2, 3, 4))


# -- Squeeze / Unsqueeze -----------------------------------------------------------------------

def squeeze_shape(where: str, shape: Sequence[int], axes: Sequence[int] | None
                  ) -> tuple[int, ...]:
    if axes is None:
        return tuple(d for d in shape if d != 1)
    axes = _axes(where, axes, len(shape))
    for a in axes:
        if shape[a] != 1:
            raise ModelError(f"{where}: cannot squeeze axis {a} of shape {shape_str(shape)}: "
                             f"its size is {shape[a]}, not 1")
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def unsqueeze_shape(where: str, shape: Sequence[int], axes: Sequence[int]) -> tuple[int, ...]:
    rank = len(shape) + len(axes)
    axes = _axes(where, axes, rank)
    it = iter(shape)
    return tuple(1 if i in axes else next(it) for i in range(rank))


def _squeeze_infer(node: Node) -> list[TensorType]:
    x = in_type(node, 0, "data")
    axes = const_input(node, 1, "axes")
    return [TensorType(squeeze_shape(node.describe(), x.shape,
                                     None if axes is None else as_ints(axes)), x.dtype)]


def _squeeze_ref(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    axes = ins[1] if len(ins) > 1 else None
    shape = squeeze_shape("Squeeze", ins[0].shape, None if axes is None else as_ints(axes))
    return [ins[0].reshape(shape)]


def _unsqueeze_infer(node: Node) -> list[TensorType]:
    x = in_type(node, 0, "data")
    axes = as_ints(const_input(node, 1, "axes"))
    return [TensorType(unsqueeze_shape(node.describe(), x.shape, axes), x.dtype)]


def _unsqueeze_ref(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    return [ins[0].reshape(unsqueeze_shape("Unsqueeze", ins[0].shape, as_ints(ins[1])))]


_SQUEEZE = _injective("Squeeze", ("data", "axes?"), _squeeze_infer, _squeeze_ref, view=True,
                      doc="remove size-1 axes (all when axes is absent)",
                      compile_time=(1,))
_UNSQUEEZE = _injective("Unsqueeze", ("data", "axes"), _unsqueeze_infer, _unsqueeze_ref,
                        view=True, doc="insert size-1 axes (positions in the output)",
                        compile_time=(1,))


# -- Gather ------------------------------------------------------------------------------------

def _gather_infer(node: Node) -> list[TensorType]:
    a = attrs_of(node)
    x = in_type(node, 0, "data")
    idx = in_type(node, 1, "indices", _INDEX_TYPES)
    if not x.shape:
        raise fail(node, "data must have rank >= 1")
    axis = norm_axis(node, a["axis"], len(x.shape))
    v = node.input(1)
    if v is not None and v.data is not None and v.data.size:
        d = x.shape[axis]
        if v.data.min() < -d or v.data.max() >= d:
            raise fail(node, f"indices must lie in [{-d}, {d - 1}] (axis {axis} of data "
                       f"{shape_str(x.shape)}), got values {int(v.data.min())}.."
                       f"{int(v.data.max())}")
    return [TensorType(x.shape[:axis] + idx.shape + x.shape[axis + 1:], x.dtype)]


def _gather_ref(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    x, idx = ins[0], np.asarray(ins[1], dtype=np.int64)
    axis = ref_attrs("Gather", attrs)["axis"]
    axis = axis + x.ndim if axis < 0 else axis
    d = x.shape[axis]
    if idx.size and (idx.min() < -d or idx.max() >= d):
        raise ModelError(f"Gather: index out of range [{-d}, {d - 1}] for axis {axis} of data "
                         f"{shape_str(x.shape)}")
    return [np.take(x, np.where(idx < 0, idx + d, idx), axis=axis)]


_GATHER = _injective("Gather", ("data", "indices"), _gather_infer, _gather_ref,
                     (Attr("axis", "int", 0),), doc="np.take along axis; negative indices wrap")


# -- Pad ---------------------------------------------------------------------------------------

def pad_widths(where: str, shape: Sequence[int], pads: Sequence[int],
               axes: Sequence[int] | None) -> list[tuple[int, int]]:
    """Per-axis (begin, end) pads; negative values crop."""
    rank = len(shape)
    axes = list(range(rank)) if axes is None else _axes(where, axes, rank)
    if len(pads) != 2 * len(axes):
        raise ModelError(f"{where}: pads {list(pads)} must have 2 * {len(axes)} values "
                         f"(begin and end for each of axes {axes})")
    widths = [(0, 0)] * rank
    for i, ax in enumerate(axes):
        widths[ax] = (pads[i], pads[len(axes) + i])
        if shape[ax] + pads[i] + pads[len(axes) + i] < 0:
            raise ModelError(f"{where}: pads {list(pads)} crop axis {ax} of "
                             f"{shape_str(shape)} below zero")
    return widths


def _pad_infer(node: Node) -> list[TensorType]:
    a = attrs_of(node)
    x = in_type(node, 0, "data")
    in_type(node, 1, "pads", ("int64",))
    axes = const_input(node, 3, "axes")
    widths = pad_widths(node.describe(), x.shape, as_ints(const_input(node, 1, "pads")),
                        None if axes is None else as_ints(axes))
    if a["mode"] != "constant":
        for ax, (b, e) in enumerate(widths):
            if (b > 0 or e > 0) and x.shape[ax] == 0:
                raise fail(node, f"mode {a['mode']!r} cannot pad the empty axis {ax}")
            if a["mode"] == "reflect" and max(b, e) >= x.shape[ax]:
                raise fail(node, f"mode 'reflect' needs pads {b}, {e} smaller than axis {ax}'s "
                           f"size {x.shape[ax]}")
    return [TensorType(tuple(d + b + e for d, (b, e) in zip(x.shape, widths, strict=True)),
                       x.dtype)]


def _pad_ref(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    mode = ref_attrs("Pad", attrs)["mode"]
    x = ins[0]
    cval = ins[2] if len(ins) > 2 and ins[2] is not None and ins[2].size else None
    axes = ins[3] if len(ins) > 3 else None
    widths = pad_widths("Pad", x.shape, as_ints(ins[1]), None if axes is None else as_ints(axes))
    # negative pads crop first, then the rest pads
    crop = tuple(slice(max(-b, 0), x.shape[i] - max(-e, 0)) for i, (b, e) in enumerate(widths))
    x = x[crop]
    pos = [(max(b, 0), max(e, 0)) for b, e in widths]
    if mode == "constant":
        value = np.asarray(0 if cval is None else cval.reshape(-1)[0]).astype(x.dtype)
        return [np.pad(x, pos, mode="constant", constant_values=value)]
    return [np.pad(x, pos, mode=mode)]


_PAD = _injective("Pad", ("data", "pads", "constant_value?", "axes?"), _pad_infer, _pad_ref,
                  (Attr("mode", "string", "constant",
                        choices=("constant", "reflect", "edge", "wrap")),),
                  doc="negative pads crop",
                  compile_time=(1, 3))


# -- Expand / Tile -----------------------------------------------------------------------------

def _expand_infer(node: Node) -> list[TensorType]:
    x = in_type(node, 0, "input")
    in_type(node, 1, "shape", ("int64",))
    shape = tuple(as_ints(const_input(node, 1, "shape")))
    try:
        out = tuple(np.broadcast_shapes(x.shape, shape))
    except ValueError:
        raise fail(node, f"input {shape_str(x.shape)} cannot be broadcast with shape "
                   f"{shape_str(shape)}") from None
    return [TensorType(out, x.dtype)]


def _expand_ref(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    x = ins[0]
    out = np.broadcast_shapes(x.shape, tuple(as_ints(ins[1])))
    return [np.array(np.broadcast_to(x, out))]


_EXPAND = _injective("Expand", ("input", "shape"), _expand_infer, _expand_ref,
                     doc="bidirectional (numpy) broadcast to shape",
                     compile_time=(1,))


def _tile_infer(node: Node) -> list[TensorType]:
    x = in_type(node, 0, "input")
    in_type(node, 1, "repeats", ("int64",))
    reps = as_ints(const_input(node, 1, "repeats"))
    if len(reps) != len(x.shape) or any(r < 0 for r in reps):
        raise fail(node, f"repeats {reps} must have one non-negative value per axis of input "
                   f"{shape_str(x.shape)}")
    return [TensorType(tuple(d * r for d, r in zip(x.shape, reps, strict=True)), x.dtype)]


def _tile_ref(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    return [np.tile(ins[0], as_ints(ins[1]))]


_TILE = _injective("Tile", ("input", "repeats"), _tile_infer, _tile_ref,
                   doc="repeat the input along each axis",
                   compile_time=(1,))


# -- Resize ------------------------------------------------------------------------------------

_CTM = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
        "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize")


def resizes_axis(n: int, out: int, scale: float, roi: tuple[float, float], ctm: str) -> bool:
    """Whether Resize changes an axis of length ``n``: not when its output length is ``n``
    again (outside ``tf_crop_and_resize``), whatever the scale, as onnxruntime and PyTorch
    copy it: ``scale_factor=1.1`` on 7 pixels gives 7 pixels, the input's.

    >>> resizes_axis(7, 7, 1.1, (0.0, 1.0), "half_pixel"), resizes_axis(7, 8, 1.1, (0.0, 1.0),
    ...                                                                   "half_pixel")
    (False, True)
    """
    if ctm == "tf_crop_and_resize":
        return out != n or scale != 1.0 or roi != (0.0, 1.0)
    return out != n


def scaled_length(n: int, scale: float) -> int:
    """Resize's output length ``floor(n · scale)`` for a ``scales`` input, multiplied in
    float32 as onnxruntime does: ``F.interpolate(x, scale_factor=0.7)`` on 10 pixels gives
    7 in PyTorch (float64 of the Python 0.7) and onnxruntime (float32), but float64 of the
    exported float32 0.69999999 gives 6.99999988 and 6 (as ONNX's shape inference and
    reference implementation compute, and Kiln did: a 6 x 6 image where PyTorch has 7 x 7).

    >>> scaled_length(10, float(np.float32(0.7))), scaled_length(10, 0.5)
    (7, 5)
    """
    return int(np.floor(np.float32(n) * np.float32(scale)))


def resize_plan(where: str, shape: Sequence[int], roi: np.ndarray | None,
                scales: np.ndarray | None, sizes: np.ndarray | None, a: Mapping[str, Any]
                ) -> tuple[tuple[int, ...], dict[int, tuple[float, tuple[float, float]]]]:
    """Output shape and, per resized axis, its scale and ROI (start, end)."""
    rank = len(shape)
    axes = _axes(where, a["axes"], rank) if a["axes"] else list(range(rank))
    scales = None if scales is None or scales.size == 0 else [float(s) for s in scales]
    sizes = None if sizes is None or sizes.size == 0 else as_ints(sizes)
    if (scales is None) == (sizes is None):
        raise ModelError(f"{where}: exactly one of the 'scales' and 'sizes' inputs must be given")
    given = scales if scales is not None else sizes
    assert given is not None
    if len(given) != len(axes):
        raise ModelError(f"{where}: {'scales' if scales else 'sizes'} {list(given)} must have "
                         f"{len(axes)} values (one per resized axis {axes} of "
                         f"{shape_str(shape)})")
    out = list(shape)
    if scales is not None:
        if any(s <= 0 for s in scales):
            raise ModelError(f"{where}: scales {scales} must be positive")
        axis_scale = dict(zip(axes, scales, strict=True))
        for ax, s in axis_scale.items():
            out[ax] = scaled_length(shape[ax], s)
    else:
        assert sizes is not None
        if any(s < 0 for s in sizes) or any(shape[ax] == 0 for ax in axes):
            raise ModelError(f"{where}: sizes {sizes} must be non-negative and the resized axes "
                             f"of {shape_str(shape)} non-empty")
        ratios = [sz / shape[ax] for sz, ax in zip(sizes, axes, strict=True)]
        policy = a["keep_aspect_ratio_policy"]
        if policy == "stretch":
            axis_scale = dict(zip(axes, ratios, strict=True))
            for ax, sz in zip(axes, sizes, strict=True):
                out[ax] = sz
        else:
            common = min(ratios) if policy == "not_larger" else max(ratios)
            axis_scale = dict.fromkeys(axes, common)
            for ax in axes:
                out[ax] = int(common * shape[ax] + 0.5)
    plan = {}
    roi_vals = None if roi is None or roi.size == 0 else [float(r) for r in roi.reshape(-1)]
    if a["coordinate_transformation_mode"] == "tf_crop_and_resize":
        if roi_vals is None or len(roi_vals) != 2 * len(axes):
            raise ModelError(f"{where}: coordinate_transformation_mode 'tf_crop_and_resize' "
                             f"needs a roi input with 2 * {len(axes)} values")
    for i, ax in enumerate(axes):
        pair = (0.0, 1.0) if roi_vals is None or len(roi_vals) != 2 * len(axes) else \
            (roi_vals[i], roi_vals[len(axes) + i])
        plan[ax] = (axis_scale[ax], pair)
    return tuple(out), plan


def _resize_operands(get: Any) -> tuple[Any, Any, Any]:
    return get(1, "roi"), get(2, "scales"), get(3, "sizes")


def _resize_infer(node: Node) -> list[TensorType]:
    a = attrs_of(node)
    x = in_type(node, 0, "X")
    if a["mode"] != "nearest" and x.dtype == "bool":
        raise fail(node, f"mode {a['mode']!r} needs a numeric input, got bool; use 'nearest'")
    for i, what, dtypes in ((1, "roi", ("float16", "float32", "float64")),
                            (2, "scales", ("float32",)), (3, "sizes", ("int64",))):
        if node.input(i) is not None:
            in_type(node, i, what, dtypes)
    roi, scales, sizes = _resize_operands(lambda i, w: const_input(node, i, w))
    out, _ = resize_plan(node.describe(), x.shape, roi, scales, sizes, a)
    return [TensorType(out, x.dtype)]


def _resize_ref(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    a = ref_attrs("Resize", attrs)
    x = ins[0]
    roi, scales, sizes = _resize_operands(lambda i, w: ins[i] if i < len(ins) else None)
    out, plan = resize_plan("Resize", x.shape, roi, scales, sizes, a)
    y = x if a["mode"] == "nearest" else x.astype(np.float64)
    cdt = resize_coord_dtype(a["mode"], scales is not None and scales.size > 0)
    for ax, (scale, pair) in plan.items():
        if resizes_axis(y.shape[ax], out[ax], scale, pair, a["coordinate_transformation_mode"]):
            y = resize_axis(y, ax, out[ax], scale, pair, a, cdt)
    return [cast_like(y, x.dtype)]


def _resize_flops(node: Node) -> int:
    mode = attrs_of(node)["mode"]
    taps = {"nearest": 0, "linear": 2, "cubic": 4}[mode]
    return 2 * taps * elementwise_flops(node)


_RESIZE = _injective(
    "Resize", ("X", "roi?", "scales?", "sizes?"), _resize_infer, _resize_ref,
    (Attr("antialias", "int", 0, choices=(0, 1)),
     Attr("axes", "ints", ()),
     Attr("coordinate_transformation_mode", "string", "half_pixel", choices=_CTM),
     Attr("cubic_coeff_a", "float", -0.75),
     Attr("exclude_outside", "int", 0, choices=(0, 1)),
     Attr("extrapolation_value", "float", 0.0),
     Attr("keep_aspect_ratio_policy", "string", "stretch",
          choices=("stretch", "not_larger", "not_smaller")),
     Attr("mode", "string", "nearest", choices=("nearest", "linear", "cubic")),
     Attr("nearest_mode", "string", "round_prefer_floor",
          choices=("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"))),
    flops=_resize_flops, min_opset=11,
    doc="nearest/linear/cubic over any axes, separable per axis",
    compile_time=(1, 2, 3))


#: this family's ops (registered by the op table, ``registry.builtin_ops``)
OPS: tuple[OpDef, ...] = (
    _RESHAPE, _FLATTEN, _TRANSPOSE, _CONCAT, _SPLIT, _SLICE, _SQUEEZE, _UNSQUEEZE, _GATHER,
    _PAD, _EXPAND, _TILE, _RESIZE,
)
