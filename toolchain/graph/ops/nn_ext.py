"""More NN ops: LRN, LpNormalization (OPAQUE: a reduction re-applied to its input, like
Softmax), LpPool (COMPLEX_OUT_FUSABLE, like the other pools), Einsum, GridSample,
AffineGrid and Col2Im (OPAQUE).

GroupNormalization, RMSNormalization and MeanVarianceNormalization are not here: the ONNX
frontend expands them into their ONNX function bodies (ops Kiln registers), which compile
into bundles like any graph (``tests/bundle/test_ops_ext.py``).

References compute in float64 (float32 for float16 LRN, as the other normalisations) and
round once:

* LRN: ``y = x / (bias + alpha / size · Σ x²)^beta``, the sum over the channels
  ``[c - ⌊(size-1)/2⌋, c + ⌈(size-1)/2⌉]`` clipped to the tensor;
* LpNormalization: ``x / ‖x‖_p`` along ``axis`` (p ∈ {1, 2}); a zero norm gives 0;
* LpPool: ``(Σ_window |x|^p)^(1/p)``, padding cells are zeros.

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ops import get_op
    >>> get_op("LpNormalization").reference([np.array([[3.0, 4.0]], np.float32)], {})
    [array([[0.6, 0.8]], dtype=float32)]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from toolchain.errors import ModelError
from toolchain.graph.ir import Node, TensorType
from toolchain.graph.ops.common import (
    FLOAT_TYPES,
    check_dtype,
    check_same_dtype,
    defop,
    input_value,
    normalize_axis,
)
from toolchain.graph.ops.nn import pool_geometry, pool_ref_geometry, window_attrs
from toolchain.graph.ops.nn_common import attrs_of, pad_spatial, prod, ref_attrs, windows
from toolchain.graph.ops.registry import Attr, OpDef, PatternKind, const_input


def _positive(v: int) -> str | None:
    return None if v >= 1 else "must be >= 1"


# -- LRN ------------------------------------------------------------------------------------

def lrn_window(size: int) -> tuple[int, int]:
    """Channels below and above ``c`` that LRN sums: ``(⌊(size-1)/2⌋, ⌈(size-1)/2⌉)``."""
    return (size - 1) // 2, -(-(size - 1) // 2)


def _lrn_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x = input_value(node, 0, "X")
    check_dtype(node, x, "input 0 (X)", FLOAT_TYPES)
    if x.rank < 3:
        raise ModelError(f"{node.describe()}: X {list(x.shape)} must have rank >= 3 (batch, "
                         "channels, spatial axes)")
    return [x.type]


def _lrn_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    xf = x.astype(np.float64)
    below, above = lrn_window(attrs["size"])
    sq = xf * xf
    c = x.shape[1]
    total = np.zeros_like(xf)
    for ch in range(c):
        total[:, ch] = sq[:, max(0, ch - below):min(c, ch + above + 1)].sum(axis=1)
    base = attrs["bias"] + attrs["alpha"] / attrs["size"] * total
    return [(xf / base ** attrs["beta"]).astype(x.dtype)]


def _lrn() -> OpDef:
    return defop(
        "LRN", ("X",), PatternKind.OPAQUE, infer=_lrn_infer, reference=_lrn_ref,
        attrs=(Attr("alpha", "float", 0.0001), Attr("beta", "float", 0.75),
               Attr("bias", "float", 1.0), Attr("size", "int", check=_positive)),
        flops=lambda node: (node.inputs[0].size * (2 * int(node.attrs.get("size") or 1) + 4)
                            if node.inputs and node.inputs[0] else 0),
        min_opset=1,
        doc="local response normalisation across channels: x / (bias + alpha/size · Σ x²)"
            "^beta over `size` neighbouring channels")


# -- LpNormalization -------------------------------------------------------------------------

def _lpnorm_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x = input_value(node, 0, "input")
    check_dtype(node, x, "input 0 (input)", FLOAT_TYPES)
    if x.rank == 0:
        raise ModelError(f"{node.describe()}: input must have rank >= 1")
    normalize_axis(node, attrs["axis"], x.rank, "attribute 'axis'")
    return [x.type]


def _lpnorm_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    xf = x.astype(np.float64)
    axis = attrs["axis"] % x.ndim
    if attrs["p"] == 1:
        norm = np.sum(np.abs(xf), axis=axis, keepdims=True)
    else:
        norm = np.sqrt(np.sum(xf * xf, axis=axis, keepdims=True))
    with np.errstate(all="ignore"):
        y = np.where(norm == 0, 0.0, xf / norm)
    return [y.astype(x.dtype)]


def _lpnorm() -> OpDef:
    return defop(
        "LpNormalization", ("input",), PatternKind.OPAQUE, infer=_lpnorm_infer,
        reference=_lpnorm_ref,
        attrs=(Attr("axis", "int", -1), Attr("p", "int", 2, (1, 2))),
        flops=lambda node: 3 * (node.inputs[0].size if node.inputs and node.inputs[0] else 0),
        min_opset=1, doc="x / ‖x‖_p along `axis`, p ∈ {1, 2}; a zero norm gives 0")


# -- LpPool ------------------------------------------------------------------------------------

def _lppool_infer(node: Node) -> list[TensorType]:
    a = attrs_of(node)
    x, geom = pool_geometry(node, a, FLOAT_TYPES)
    return [TensorType((x.shape[0], x.shape[1]) + geom.out, x.dtype)]


def _lppool_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    a = ref_attrs("LpPool", attrs)
    x = np.asarray(ins[0])
    kernel, strides, dil, geom = pool_ref_geometry(x, a)
    nsp = len(kernel)
    p = a["p"]
    xp = pad_spatial(np.abs(x.astype(np.float64)) ** p, geom.pads_begin, geom.pads_end, 0.0)
    win = windows(xp, kernel, strides, dil, geom.out)
    total = win.sum(axis=tuple(range(2 + nsp, 2 + 2 * nsp)))
    return [(total ** (1.0 / p)).astype(x.dtype)]


def _lppool() -> OpDef:
    return OpDef(
        "LpPool", inputs=("X",), pattern=PatternKind.COMPLEX_OUT_FUSABLE,
        attrs=window_attrs(kernel_required=True) + (
            Attr("ceil_mode", "int", 0, choices=(0, 1)), Attr("p", "int", 2, check=_positive)),
        infer=_lppool_infer, reference=_lppool_ref,
        flops=lambda node: node.outputs[0].size * prod(attrs_of(node)["kernel_shape"]) * 2,
        min_opset=11,
        doc="(Σ_window |x|^p)^(1/p) with strides, dilations, pads (zeros), auto_pad, "
            "ceil_mode")


# -- Einsum ----------------------------------------------------------------------------------

_EINSUM_TYPES = FLOAT_TYPES + ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                               "uint64")


@dataclass(frozen=True)
class EinsumPlan:
    """An Einsum equation resolved against operand shapes: the letters indexing each
    operand's axes (ellipsis axes get the letters ``0``, ``1`` … right-aligned), the output
    letters, and each letter's extent."""

    operands: tuple[tuple[str, ...], ...]
    output: tuple[str, ...]
    sizes: dict[str, int]

    @property
    def contracted(self) -> tuple[str, ...]:
        """Letters summed over (in first-use order)."""
        seen = dict.fromkeys(ch for op in self.operands for ch in op)
        return tuple(ch for ch in seen if ch not in self.output)


def einsum_plan(where: str, equation: str, shapes: list[tuple[int, ...]]) -> EinsumPlan:
    """Resolve ``equation`` for operands of ``shapes``; raises naming ``where``.

    >>> einsum_plan("e", "bij, bjk -> bik", [(5, 2, 3), (5, 3, 4)]).contracted
    ('j',)
    """
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ModelError(f"{where}: equation {equation!r} names {len(terms)} operands, but "
                         f"{len(shapes)} are given")
    nell = max((len(sh) - len(t.replace("...", "")) for t, sh in zip(terms, shapes,
                                                                     strict=True)
                if "..." in t), default=0)
    ell = tuple(str(d) for d in range(nell))
    operands, sizes = [], {}
    for t, sh in zip(terms, shapes, strict=True):
        if not all(ch.isalpha() for ch in t.replace("...", "")):
            raise ModelError(f"{where}: equation term {t!r} may hold only letters and '...'")
        head, dots, tail = t.partition("...")
        k = len(sh) - len(head) - len(tail)
        if (not dots and k != 0) or k < 0:
            raise ModelError(f"{where}: equation term {t!r} does not match an operand of "
                             f"shape {list(sh)}")
        letters = tuple(head) + ell[nell - k:] + tuple(tail)
        for ch, n in zip(letters, sh, strict=True):
            if ch.isdigit() and sizes.get(ch, 1) != n and n != 1 and sizes.get(ch, 1) != 1:
                raise ModelError(f"{where}: ellipsis axes {list(sh)} do not broadcast")
            if ch.isalpha() and sizes.setdefault(ch, n) != n:
                raise ModelError(f"{where}: subscript {ch!r} has extents {sizes[ch]} and {n}")
            if ch.isdigit():
                sizes[ch] = max(sizes.get(ch, 1), n)
        operands.append(letters)
    if arrow:
        head, dots, tail = rhs.partition("...")
        output = tuple(head) + (ell if dots else ()) + tuple(tail)
        bad = [ch for ch in output if ch.isalpha() and ch not in sizes]
        if bad or len(set(output)) != len(output):
            raise ModelError(f"{where}: output subscripts {rhs!r} must be distinct letters of "
                             "the inputs")
    else:
        counts = [ch for op in operands for ch in op if ch.isalpha()]
        output = ell + tuple(sorted(ch for ch in set(counts) if counts.count(ch) == 1))
    return EinsumPlan(tuple(operands), output, sizes)


def _einsum_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    ins = [input_value(node, i, f"Inputs_{i}") for i in range(len(node.inputs))]
    if not ins:
        raise ModelError(f"{node.describe()}: needs at least one input")
    dt = check_same_dtype(node, ins, [f"Inputs_{i}" for i in range(len(ins))])
    check_dtype(node, ins[0], "input 0 (Inputs_0)", _EINSUM_TYPES)
    plan = einsum_plan(node.describe(), attrs["equation"], [v.shape for v in ins])
    return [TensorType(tuple(plan.sizes[ch] for ch in plan.output), dt)]


def _einsum_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    arrays = [np.asarray(a) for a in ins]
    dt = arrays[0].dtype
    work = [a.astype(np.float64) if dt.kind == "f" else a for a in arrays]
    with np.errstate(all="ignore"):
        y = np.einsum(attrs["equation"].replace(" ", ""), *work)
    return [np.asarray(y).astype(dt)]


def _einsum_flops(node: Node) -> int:
    try:
        plan = einsum_plan(node.describe(), str(node.attrs.get("equation", "")),
                           [v.shape for v in node.inputs if v is not None])
    except ModelError:
        return 0
    n = 1
    for size in plan.sizes.values():
        n *= size
    return n * len(plan.operands)


def _einsum() -> OpDef:
    return defop(
        "Einsum", ("Inputs*",), PatternKind.OPAQUE, infer=_einsum_infer, reference=_einsum_ref,
        attrs=(Attr("equation", "string"),), flops=_einsum_flops, min_opset=12,
        doc="Einstein summation: ellipsis broadcasting, repeated subscripts (diagonals), "
            "implicit output (sorted letters used once); floats in float64 in the reference")


# -- GridSample ------------------------------------------------------------------------------

#: Keys' cubic convolution parameter of GridSample's "cubic" mode (PyTorch's, ONNX's)
CUBIC_A = -0.75


def grid_taps(mode: str) -> tuple[int, ...]:
    """Offsets from the base index that GridSample's ``mode`` reads along each axis."""
    return {"nearest": (0,), "linear": (0, 1), "cubic": (-1, 0, 1, 2)}[mode]


def pads_coordinate(mode: str) -> bool:
    """Whether ``border``/``reflection`` padding moves the sampling coordinate itself into
    the axis (nearest, linear) or only each tap index (cubic: the weights come from the
    unmoved coordinate, as PyTorch's ``grid_sample`` and onnxruntime compute them; the
    ONNX reference implementation clamps the coordinate first and differs by up to 0.3 near
    the edges)."""
    return mode != "cubic"


def grid_bounds(size: int, align_corners: bool) -> tuple[float, float]:
    """The coordinate range inside an axis of ``size`` (reflection mirrors at its ends)."""
    return (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)


def _reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    rng = hi - lo
    if rng <= 0:
        return np.full_like(x, lo)
    below, above = lo - x, x - hi
    d = np.where(x < lo, below, above)
    n = np.trunc(d / rng)
    r = d - n * rng
    even = np.fmod(n, 2) == 0
    low_side = np.where(even, lo + r, hi - r)
    high_side = np.where(even, hi - r, lo + r)
    return np.where(x < lo, low_side, np.where(x > hi, high_side, x))


def _tap_weights(mode: str, t: np.ndarray) -> list[np.ndarray]:
    if mode == "nearest":
        return [np.ones_like(t)]
    if mode == "linear":
        return [1.0 - t, t]
    a = CUBIC_A
    x1, x2 = t + 1.0, 1.0 - t
    return [((a * x1 - 5 * a) * x1 + 8 * a) * x1 - 4 * a,
            ((a + 2) * t - (a + 3)) * t * t + 1,
            ((a + 2) * x2 - (a + 3)) * x2 * x2 + 1,
            ((a * (x2 + 1) - 5 * a) * (x2 + 1) + 8 * a) * (x2 + 1) - 4 * a]


def _grid_sample_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    import itertools

    x, grid = np.asarray(ins[0]), np.asarray(ins[1]).astype(np.float64)
    dims, mode, pad = x.shape[2:], attrs["mode"], attrs["padding_mode"]
    align = bool(attrs["align_corners"])
    g = grid[..., ::-1]  # the grid's last axis runs innermost spatial axis first
    coords, bases, weights = [], [], []
    for i, d in enumerate(dims):
        c = (g[..., i] + 1) / 2 * (d - 1) if align else ((g[..., i] + 1) * d - 1) / 2
        if mode == "nearest":
            c = np.rint(c)
        lo, hi = grid_bounds(d, align)
        if pad == "border" and pads_coordinate(mode):
            c = np.where((c < lo) | (c > hi), np.clip(c, 0, d - 1), c)
        elif pad == "reflection" and pads_coordinate(mode):
            c = _reflect(c, lo, hi)
        base = np.trunc(c) if mode == "nearest" else np.floor(c)
        coords.append(c)
        bases.append(base.astype(np.int64))
        weights.append(_tap_weights(mode, c - base))
    n_idx = np.arange(x.shape[0]).reshape((-1,) + (1,) * (grid.ndim - 2))
    out = np.zeros(grid.shape[:-1] + (x.shape[1],), np.float64)
    for combo in itertools.product(*(range(len(grid_taps(mode))),) * len(dims)):
        w = np.ones(grid.shape[:-1])
        idx, valid = [], np.ones(grid.shape[:-1], bool)
        for i, (d, k) in enumerate(zip(dims, combo, strict=True)):
            j = bases[i] + grid_taps(mode)[k]
            w = w * weights[i][k]
            if pad == "zeros":
                valid &= (j >= 0) & (j < d)
            elif pad == "reflection":
                j = np.trunc(_reflect(j.astype(np.float64), *grid_bounds(d, align)))
            idx.append(np.clip(j, 0, d - 1).astype(np.int64))
        vals = x[(n_idx, slice(None), *idx)].astype(np.float64)  # (N, out..., C)
        out += (w * valid)[..., None] * vals
    return [np.moveaxis(out, -1, 1).astype(x.dtype)]


def _grid_sample_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x, grid = input_value(node, 0, "X"), input_value(node, 1, "grid")
    check_dtype(node, x, "input 0 (X)", FLOAT_TYPES)
    check_dtype(node, grid, "input 1 (grid)", FLOAT_TYPES)
    r = x.rank - 2
    if r < 1 or grid.rank != r + 2 or grid.shape[0] != x.shape[0] or grid.shape[-1] != r:
        raise ModelError(f"{node.describe()}: X {list(x.shape)} (N, C, r spatial axes) needs "
                         f"a grid of shape (N, r output axes..., r), got {list(grid.shape)}")
    if attrs["mode"] == "cubic" and r != 2:
        raise ModelError(f"{node.describe()}: mode 'cubic' is defined for 2-D inputs only, "
                         f"X has {r} spatial axes")
    return [TensorType(x.shape[:2] + grid.shape[1:-1], x.dtype)]


def _grid_sample() -> OpDef:
    return defop(
        "GridSample", ("X", "grid"), PatternKind.OPAQUE, infer=_grid_sample_infer,
        reference=_grid_sample_ref,
        attrs=(Attr("align_corners", "int", 0, (0, 1)),
               Attr("mode", "string", "linear", ("linear", "nearest", "cubic")),
               Attr("padding_mode", "string", "zeros", ("zeros", "border", "reflection"))),
        flops=lambda node: sum(o.size for o in node.outputs) * 4 ** max(
            node.inputs[0].rank - 2, 1) if node.inputs and node.inputs[0] else 0,
        min_opset=16,
        doc="sample X at the normalised positions of grid (PyTorch grid_sample): nearest "
            "(halves to even), N-linear or bicubic (Keys, A = -0.75); zeros, border or "
            "reflection padding; align_corners; any number of spatial axes")


# -- AffineGrid -------------------------------------------------------------------------------

def affine_base(n: int, i: float, align_corners: bool) -> float:
    """Normalised coordinate of index ``i`` on an axis of ``n`` points (AffineGrid)."""
    if align_corners:
        return -1.0 + 2.0 * i / (n - 1) if n > 1 else -1.0
    return -1.0 + (2.0 * i + 1.0) / n


def _affine_grid_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    theta = input_value(node, 0, "theta")
    check_dtype(node, theta, "input 0 (theta)", FLOAT_TYPES)
    check_dtype(node, input_value(node, 1, "size"), "input 1 (size)", ("int64",))
    size = const_input(node, 1, "size")
    assert size is not None
    r = size.size - 2
    if r not in (2, 3) or theta.shape != (int(size[0]), r, r + 1):
        raise ModelError(f"{node.describe()}: size {size.tolist()} (N, C, H, W or N, C, D, H, "
                         f"W) needs theta of shape [N, {r}, {r + 1}], got {list(theta.shape)}")
    return [TensorType((int(size[0]), *(int(v) for v in size[2:]), r), theta.dtype)]


def _affine_grid_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    theta = np.asarray(ins[0])
    spatial = [int(v) for v in np.asarray(ins[1])[2:]]
    align = bool(attrs["align_corners"])
    axes = [np.array([affine_base(n, i, align) for i in range(n)]) for n in spatial]
    mesh = np.meshgrid(*axes, indexing="ij")  # per spatial axis, outermost first
    base = np.stack([*mesh[::-1], np.ones(mesh[0].shape)], axis=-1)  # x, y, (z), 1
    grid = np.einsum("nkj,...j->n...k", theta.astype(np.float64), base)
    return [grid.astype(theta.dtype)]


def _affine_grid() -> OpDef:
    return defop(
        "AffineGrid", ("theta", "size"), PatternKind.OPAQUE, infer=_affine_grid_infer,
        reference=_affine_grid_ref, attrs=(Attr("align_corners", "int", 0, (0, 1)),),
        flops=lambda node: 2 * sum(o.size for o in node.outputs) * 4, min_opset=20,
        doc="the sampling grid of the affine maps theta ([N, 2, 3] or [N, 3, 4]) over the "
            "constant `size`: theta · (x, y, [z,] 1) at normalised pixel centres (corners "
            "with align_corners); the input GridSample expects")


# -- Col2Im ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Col2ImPlan:
    """Geometry of a Col2Im node: image and block shapes, strides, dilations, pads
    (begins then ends) and the number of block positions along each axis."""

    image: tuple[int, ...]
    block: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]
    positions: tuple[int, ...]


def col2im_plan(where: str, in_shape: tuple[int, ...], image: list[int], block: list[int],
                attrs: dict[str, Any]) -> Col2ImPlan:
    """Resolve a Col2Im node's geometry; raises naming ``where`` when inconsistent."""
    r = len(image)
    if len(block) != r or r == 0:
        raise ModelError(f"{where}: image_shape {image} and block_shape {block} must have "
                         "the same length >= 1")
    strides = tuple(attrs["strides"] or (1,) * r)
    dil = tuple(attrs["dilations"] or (1,) * r)
    pads = tuple(attrs["pads"] or (0,) * 2 * r)
    if len(strides) != r or len(dil) != r or len(pads) != 2 * r:
        raise ModelError(f"{where}: strides, dilations and pads need {r}, {r} and {2 * r} "
                         "values")
    pos = tuple((image[d] + pads[d] + pads[r + d] - (dil[d] * (block[d] - 1) + 1))
                // strides[d] + 1 for d in range(r))
    kk, ll = int(np.prod(block)), int(np.prod(pos))
    if len(in_shape) != 3 or in_shape[1] % kk or in_shape[2] != ll or min(pos) < 1:
        raise ModelError(f"{where}: input {list(in_shape)} must be [N, C·{kk}, {ll}] for "
                         f"image_shape {image}, block_shape {block} (block positions "
                         f"{list(pos)})")
    return Col2ImPlan(tuple(image), tuple(block), strides, dil, pads, pos)


def _col2im_node_plan(node: Node, attrs: dict[str, Any]) -> Col2ImPlan:
    x = input_value(node, 0, "input")
    image, block = const_input(node, 1, "image_shape"), const_input(node, 2, "block_shape")
    assert image is not None and block is not None
    return col2im_plan(node.describe(), x.shape, [int(v) for v in image],
                       [int(v) for v in block], attrs)


def _col2im_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x = input_value(node, 0, "input")
    check_dtype(node, x, "input 0 (input)", _EINSUM_TYPES)
    for i, what in ((1, "image_shape"), (2, "block_shape")):
        check_dtype(node, input_value(node, i, what), f"input {i} ({what})", ("int64",))
    plan = _col2im_node_plan(node, attrs)
    kk = int(np.prod(plan.block))
    return [TensorType((x.shape[0], x.shape[1] // kk) + plan.image, x.dtype)]


def _col2im_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    import itertools

    x = np.asarray(ins[0])
    plan = col2im_plan("Col2Im", x.shape, [int(v) for v in np.asarray(ins[1])],
                       [int(v) for v in np.asarray(ins[2])], attrs)
    r = len(plan.image)
    kk = int(np.prod(plan.block))
    c = x.shape[1] // kk
    acc = np.float64 if x.dtype.kind == "f" else x.dtype
    padded = np.zeros((x.shape[0], c) + tuple(plan.image[d] + plan.pads[d] + plan.pads[r + d]
                                             for d in range(r)), acc)
    cols = x.reshape((x.shape[0], c) + plan.block + plan.positions).astype(acc)
    for k in itertools.product(*(range(b) for b in plan.block)):
        for p in itertools.product(*(range(n) for n in plan.positions)):
            at = tuple(p[d] * plan.strides[d] + k[d] * plan.dilations[d] for d in range(r))
            padded[(slice(None), slice(None)) + at] += cols[(slice(None), slice(None)) + k + p]
    crop = tuple(slice(plan.pads[d], plan.pads[d] + plan.image[d]) for d in range(r))
    return [padded[(slice(None), slice(None)) + crop].astype(x.dtype)]


def _col2im() -> OpDef:
    return defop(
        "Col2Im", ("input", "image_shape", "block_shape"), PatternKind.OPAQUE,
        infer=_col2im_infer, reference=_col2im_ref,
        attrs=(Attr("dilations", "ints", ()), Attr("pads", "ints", ()),
               Attr("strides", "ints", ())),
        flops=lambda node: node.inputs[0].size if node.inputs and node.inputs[0] else 0,
        min_opset=18,
        doc="sum the columns [N, C·∏block, L] back into an image of the constant "
            "image_shape (the inverse of im2col; overlapping blocks add up)")


#: this family's ops (registered by the op table, ``registry.builtin_ops``)
OPS: tuple[OpDef, ...] = (_lrn(), _lpnorm(), _lppool(), _einsum(), _grid_sample(),
                          _affine_grid(), _col2im())
