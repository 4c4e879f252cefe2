"""Helpers shared by the NN and data-movement ops (:mod:`.nn`, :mod:`.transform`).

Three groups:

* attribute/operand access for ``infer`` rules (:func:`attrs_of`, :func:`in_type`,
  :func:`fail`) so that every error names the node;
* window geometry of convolution and pooling (:func:`window_geometry`), following the ONNX
  rules for ``auto_pad``, explicit ``pads``, ``dilations`` and ``ceil_mode``;
* numpy kernels: padded sliding windows (:func:`windows`), im2col convolution
  (:func:`conv_nd`), col2im transposed convolution (:func:`conv_transpose_nd`).

Example::

    >>> g = window_geometry((5,), (3,), strides=(2,), dilations=(1,), pads=(1, 1))
    >>> g.out, g.pads_begin, g.pads_end
    ((3,), (1,), (1,))
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from toolchain.errors import ModelError
from toolchain.graph.ir import Node, TensorType

FLOAT_TYPES = ("float16", "float32", "float64")
INT_TYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")
AUTO_PAD = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


# -- access helpers for infer rules -----------------------------------------------------------

def attrs_of(node: Node) -> dict[str, Any]:
    """The node's attributes, validated and with defaults filled in (raises naming the node)."""
    from toolchain.graph.ops.registry import get_op

    return get_op(node.op).normalize_attrs(node.attrs, node.describe())


def ref_attrs(op: str, attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Attributes as a reference function sees them: defaults filled in, values coerced."""
    from toolchain.graph.ops.registry import get_op

    return get_op(op).normalize_attrs(attrs)


def fail(node: Node, msg: str) -> ModelError:
    """A :class:`ModelError` whose text starts with the node's description."""
    return ModelError(f"{node.describe()}: {msg}")


def in_type(node: Node, i: int, what: str, dtypes: Sequence[str] | None = None) -> TensorType:
    """Type of input ``i``; raises when it is missing or its dtype is not in ``dtypes``."""
    v = node.input(i)
    if v is None:
        raise fail(node, f"input {i} ({what}) is required but missing")
    if dtypes is not None and v.dtype not in dtypes:
        raise fail(node, f"input {i} ({what}) has dtype {v.dtype}; supported: "
                   + ", ".join(dtypes))
    return v.type


def same_dtype(node: Node, *types: tuple[str, TensorType]) -> None:
    """Raise when the named input types do not share one dtype."""
    first_name, first = types[0]
    for name, t in types[1:]:
        if t.dtype != first.dtype:
            raise fail(node, f"{name} has dtype {t.dtype} but {first_name} has {first.dtype};"
                       " they must match")


def norm_axis(node: Node, axis: int, rank: int, what: str = "axis") -> int:
    """``axis`` in ``[-rank, rank)`` made non-negative; raises naming the node otherwise."""
    if not -rank <= axis < rank:
        raise fail(node, f"{what} = {axis} is out of range [{-rank}, {rank - 1}] for rank {rank}")
    return axis + rank if axis < 0 else axis


def broadcasts_to(src: Sequence[int], dst: Sequence[int]) -> bool:
    """Whether ``src`` broadcasts (unidirectionally) to ``dst``."""
    try:
        return tuple(np.broadcast_shapes(tuple(src), tuple(dst))) == tuple(dst)
    except ValueError:
        return False


def shape_str(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(int(d)) for d in shape) + "]"


def as_ints(data: np.ndarray) -> list[int]:
    return [int(v) for v in np.asarray(data).reshape(-1)]


# -- convolution / pooling geometry -----------------------------------------------------------

@dataclass(frozen=True)
class WindowGeometry:
    """Output extent and the padding actually applied on each side of each spatial axis.

    ``pads_end`` may exceed the model's pads under ``ceil_mode``: the extra cells are never
    counted as padding by AveragePool (see :func:`pool_counts`).
    """

    out: tuple[int, ...]
    pads_begin: tuple[int, ...]
    pads_end: tuple[int, ...]
    #: the model's end pads (before the ceil-mode extension)
    model_pads_end: tuple[int, ...]


def same_pads(in_size: int, k_eff: int, stride: int, auto_pad: str) -> tuple[int, int]:
    """``SAME_*`` padding: output ``ceil(in/stride)``, odd total goes to the end (UPPER) or
    the beginning (LOWER)."""
    out = -(-in_size // stride)
    total = max(0, (out - 1) * stride + k_eff - in_size)
    small = total // 2
    return (small, total - small) if auto_pad == "SAME_UPPER" else (total - small, small)


def window_geometry(
    spatial: Sequence[int],
    kernel: Sequence[int],
    *,
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int],
    auto_pad: str = "NOTSET",
    ceil_mode: bool = False,
) -> WindowGeometry:
    """Output spatial shape and effective pads of a conv/pool window (ONNX rules).

    With ``ceil_mode`` the last window may hang over the end; it is kept only when it starts
    inside the input or the begin padding (as onnxruntime and the ONNX reference do).

    >>> window_geometry((4, 4), (3, 3), strides=(2, 2), dilations=(1, 1), pads=(0,) * 4,
    ...                 ceil_mode=True).out
    (2, 2)
    """
    r = len(spatial)
    out, pb, pe, mpe = [], [], [], []
    for i in range(r):
        k_eff = (kernel[i] - 1) * dilations[i] + 1
        s = strides[i]
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            b, e = same_pads(spatial[i], k_eff, s, auto_pad)
        elif auto_pad == "VALID":
            b, e = 0, 0
        else:
            b, e = pads[i], pads[r + i]
        span = spatial[i] + b + e - k_eff
        if ceil_mode and auto_pad == "NOTSET":
            n = -(-span // s) + 1 if span >= 0 else 0
            if n > 0 and (n - 1) * s >= spatial[i] + b:
                n -= 1
        else:
            n = span // s + 1 if span >= 0 else 0
        extra = max(0, (n - 1) * s + k_eff - (spatial[i] + b + e)) if n > 0 else 0
        out.append(n)
        pb.append(b)
        pe.append(e + extra)
        mpe.append(e)
    return WindowGeometry(tuple(out), tuple(pb), tuple(pe), tuple(mpe))


def spatial_attrs(node: Node, attrs: Mapping[str, Any], nsp: int, kernel: Sequence[int]
                  ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """``strides``, ``dilations``, ``pads`` with defaults, checked against ``nsp`` axes."""
    strides = tuple(attrs.get("strides") or (1,) * nsp)
    dilations = tuple(attrs.get("dilations") or (1,) * nsp)
    pads = tuple(attrs.get("pads") or (0,) * (2 * nsp))
    for name, val, n in (("strides", strides, nsp), ("dilations", dilations, nsp),
                         ("pads", pads, 2 * nsp), ("kernel_shape", tuple(kernel), nsp)):
        if len(val) != n:
            raise fail(node, f"attribute {name} = {list(val)} must have {n} values "
                       f"({nsp} spatial axes)")
    if any(s < 1 for s in strides) or any(d < 1 for d in dilations):
        raise fail(node, f"strides {list(strides)} and dilations {list(dilations)} must be >= 1")
    if any(p < 0 for p in pads):
        raise fail(node, f"pads {list(pads)} must be >= 0")
    if any(k < 1 for k in kernel):
        raise fail(node, f"kernel_shape {list(kernel)} must be >= 1")
    return strides, dilations, pads


def check_nonempty(node: Node, geom: WindowGeometry, in_shape: Sequence[int]) -> None:
    """Raise when a window is larger than the padded input (an empty output)."""
    if any(o <= 0 for o in geom.out):
        raise fail(node, f"the window does not fit the padded input {shape_str(in_shape)} "
                   f"(output spatial shape would be {shape_str(geom.out)}); reduce the kernel, "
                   "dilations or strides, or add padding")


# -- numpy kernels ---------------------------------------------------------------------------

def pad_spatial(x: np.ndarray, pb: Sequence[int], pe: Sequence[int], value: Any) -> np.ndarray:
    """Pad the trailing ``len(pb)`` axes of ``x`` with ``value``."""
    lead = x.ndim - len(pb)
    width = [(0, 0)] * lead + list(zip(pb, pe, strict=True))
    if not any(b or e for b, e in width):
        return x
    return np.pad(x, width, mode="constant", constant_values=value)


def windows(xp: np.ndarray, kernel: Sequence[int], strides: Sequence[int],
            dilations: Sequence[int], out: Sequence[int]) -> np.ndarray:
    """View of the windows of padded ``xp`` (trailing ``len(kernel)`` axes are spatial).

    Result shape: ``xp.shape[:lead] + out + kernel`` (no copy).
    """
    nsp = len(kernel)
    lead = xp.ndim - nsp
    k_eff = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    v = sliding_window_view(xp, k_eff, axis=tuple(range(lead, xp.ndim)))
    idx: list[slice] = [slice(None)] * lead
    idx += [slice(0, (o - 1) * s + 1, s) for o, s in zip(out, strides, strict=True)]
    idx += [slice(None, None, d) for d in dilations]
    return v[tuple(idx)]


def pool_counts(spatial: Sequence[int], kernel: Sequence[int], geom: WindowGeometry,
                strides: Sequence[int], dilations: Sequence[int],
                include_pad: bool) -> np.ndarray:
    """Number of window cells that count for AveragePool at each output position.

    Cells in the input always count; cells in the model's pads count when
    ``include_pad``; cells in the ceil-mode extension never count.
    """
    lo = [-b if include_pad else 0 for b in geom.pads_begin]
    hi = [n + (e if include_pad else 0) for n, e in zip(spatial, geom.model_pads_end,
                                                           strict=True)]
    counts = np.ones((), np.int64)
    for i in range(len(spatial)):
        starts = np.arange(geom.out[i]) * strides[i] - geom.pads_begin[i]
        cells = starts[:, None] + np.arange(kernel[i])[None, :] * dilations[i]
        axis_count = ((cells >= lo[i]) & (cells < hi[i])).sum(axis=1)
        counts = np.multiply.outer(counts, axis_count)
    return counts


def _acc_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float32) if dtype == np.float16 else np.dtype(dtype)


def conv_nd(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, *, group: int,
            strides: Sequence[int], dilations: Sequence[int], geom: WindowGeometry
            ) -> np.ndarray:
    """Grouped N-D convolution (cross-correlation) by im2col + matmul.

    ``x``: ``(N, C, *S)``, ``w``: ``(M, C/group, *K)``; float16 accumulates in float32.
    """
    acc = _acc_dtype(x.dtype)
    n, c = x.shape[:2]
    m, cg = w.shape[:2]
    kernel = w.shape[2:]
    nsp = len(kernel)
    xp = pad_spatial(x.astype(acc, copy=False), geom.pads_begin, geom.pads_end, 0)
    win = windows(xp, kernel, strides, dilations, geom.out)  # N, C, *out, *K
    p = int(np.prod(geom.out, dtype=np.int64))
    k = int(np.prod(kernel, dtype=np.int64))
    win = win.reshape((n, group, cg) + tuple(geom.out) + tuple(kernel))
    # -> N, G, *out, Cg, *K  then (N, G, P, Cg*K): the im2col matrix
    perm = (0, 1) + tuple(range(3, 3 + nsp)) + (2,) + tuple(range(3 + nsp, 3 + 2 * nsp))
    cols = win.transpose(perm).reshape(n, group, p, cg * k)
    wm = w.astype(acc, copy=False).reshape(group, m // group, cg * k).transpose(0, 2, 1)
    y = np.matmul(cols, wm)  # N, G, P, M/G
    y = y.transpose(0, 1, 3, 2).reshape((n, m) + tuple(geom.out))
    if b is not None:
        y = y + b.astype(acc, copy=False).reshape((1, m) + (1,) * nsp)
    return y.astype(x.dtype, copy=False)


def conv_transpose_nd(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, *, group: int,
                      strides: Sequence[int], dilations: Sequence[int],
                      pads_begin: Sequence[int], out: Sequence[int]) -> np.ndarray:
    """Grouped N-D transposed convolution by matmul + col2im (scatter-add per kernel tap).

    Input cell ``i`` and kernel tap ``t`` land on full-output cell ``i*stride + t*dilation``;
    output cell ``o`` is full cell ``o + pads_begin`` (pads may be negative, which extends).
    """
    acc = _acc_dtype(x.dtype)
    n, c = x.shape[:2]
    kernel = w.shape[2:]
    mg = w.shape[1]
    nsp = len(kernel)
    spatial = x.shape[2:]
    p = int(np.prod(spatial, dtype=np.int64))
    k = int(np.prod(kernel, dtype=np.int64))
    xm = x.astype(acc, copy=False).reshape(n, group, c // group, p).transpose(0, 1, 3, 2)
    wm = w.astype(acc, copy=False).reshape(group, c // group, mg * k)
    cols = np.matmul(xm, wm).reshape((n, group, *spatial, mg, *kernel))
    # full buffer covering both every contribution and every output cell
    lo = [min(0, pb) for pb in pads_begin]
    hi = [max((s - 1) * st + (kk - 1) * d + 1, pb + o) for s, st, kk, d, pb, o in
          zip(spatial, strides, kernel, dilations, pads_begin, out, strict=True)]
    full = np.zeros((n, group, mg) + tuple(h - l for h, l in zip(hi, lo, strict=True)), acc)
    # cols: N, G, *S, Mg, *K -> N, G, Mg, *S, *K
    cols = np.moveaxis(cols, 2 + nsp, 2)
    for tap in np.ndindex(*kernel):
        sl = tuple(
            slice(t * d - l, t * d - l + (s - 1) * st + 1, st)
            for t, d, l, s, st in zip(tap, dilations, lo, spatial, strides, strict=True)
        )
        full[(slice(None),) * 3 + sl] += cols[(Ellipsis,) + tap]
    crop = tuple(slice(pb - l, pb - l + o) for pb, l, o in zip(pads_begin, lo, out, strict=True))
    y = full[(slice(None),) * 3 + crop].reshape((n, group * mg) + tuple(out))
    if b is not None:
        y = y + b.astype(acc, copy=False).reshape((1, group * mg) + (1,) * nsp)
    return y.astype(x.dtype, copy=False)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def prod(values: Sequence[int]) -> int:
    return int(math.prod(int(v) for v in values))


# -- Resize ----------------------------------------------------------------------------------

def resize_coord_dtype(mode: str, from_scales: bool) -> str:
    """The dtype Resize computes its source coordinates in: float32 for ``nearest`` with a
    ``scales`` input, float64 otherwise.

    A nearest cell jumps at whole (or half) numbers, so there the last bit decides.
    ``F.interpolate(x, scale_factor=0.6, mode="nearest")`` exports the scale as the float32
    0.6000000238, and output cell 3 maps to 3 / 0.6000000238 = 4.9999998 in float64 (cell 4)
    but to 5.0 in float32 (cell 5), the cell onnxruntime and PyTorch read: they compute in
    float32. With ``sizes`` the scale is the exact ratio of two lengths and float64 agrees
    with onnxruntime; linear and cubic weights are continuous in the coordinate.

    >>> resize_coord_dtype("nearest", True), resize_coord_dtype("nearest", False)
    ('float32', 'float64')
    """
    return "float32" if mode == "nearest" and from_scales else "float64"


def resize_coords(ctm: str, out_len: int, in_len: int, scale: float,
                  roi: tuple[float, float], dtype: str = "float64"
                  ) -> tuple[np.ndarray, np.ndarray | None]:
    """Source coordinate of each output cell along one axis (ONNX
    ``coordinate_transformation_mode``), computed in ``dtype``, and, for
    ``tf_crop_and_resize``, the mask of cells that fall outside the input (they get
    ``extrapolation_value``).

    >>> scale = float(np.float32(0.6))
    >>> np.floor(resize_coords("asymmetric", 5, 9, scale, (0.0, 1.0))[0]).tolist()
    [0.0, 1.0, 3.0, 4.0, 6.0]
    >>> np.floor(resize_coords("asymmetric", 5, 9, scale, (0.0, 1.0), "float32")[0]).tolist()
    [0.0, 1.0, 3.0, 5.0, 6.0]
    """
    y = np.arange(out_len, dtype=dtype)
    scale = np.dtype(dtype).type(scale)
    out_w = scale * in_len  # the real-valued output length the modes are defined with
    mask = None
    if ctm == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif ctm == "pytorch_half_pixel":
        x = (y + 0.5) / scale - 0.5 if out_w > 1 else np.full(out_len, -0.5)
    elif ctm == "half_pixel_symmetric":
        offset = in_len / 2 * (1 - out_len / out_w)
        x = offset + (y + 0.5) / scale - 0.5
    elif ctm == "align_corners":
        x = y * (in_len - 1) / (out_w - 1) if out_w != 1 else np.zeros(out_len)
    elif ctm == "asymmetric":
        x = y / scale
    elif ctm == "tf_half_pixel_for_nn":
        x = (y + 0.5) / scale
    else:  # tf_crop_and_resize
        start, end = roi
        if out_w != 1:
            x = y * (end - start) * (in_len - 1) / (out_w - 1)
        else:
            x = np.full(out_len, (end - start) * (in_len - 1) / 2)
        x = x + start * (in_len - 1)
        mask = (x < 0) | (x > in_len - 1)
    return x, mask


def resize_taps(x: np.ndarray, in_len: int, mode: str, nearest_mode: str, cubic_a: float,
                exclude_outside: bool, antialias_scale: float | None = None
                ) -> tuple[np.ndarray, np.ndarray | None]:
    """Input indices ``(out, taps)`` and their weights (``None`` for nearest) along one axis.

    Indices outside the input are clamped to the edge; with ``exclude_outside`` their weight
    is set to zero and the remaining weights renormalised. ``antialias_scale`` (a scale
    below 1, linear or cubic): the kernel is stretched by its inverse (``K(d * scale)``) over
    as many taps as its support covers, the weights normalised to sum 1.
    """
    if antialias_scale is not None and mode != "nearest" and antialias_scale < 1.0:
        reach = 1 if mode == "linear" else 2
        start = int(np.floor(-reach / antialias_scale) + 1)
        offsets = np.arange(start, 2 - start)
        f = np.floor(x)
        d = np.abs(offsets[None, :] - (x - f)[:, None]) * antialias_scale
        if mode == "linear":
            w = np.clip(1 - d, 0, 1)
        else:
            a = cubic_a
            w = np.where(d <= 1, ((a + 2) * d - (a + 3)) * d * d + 1,
                         np.where(d < 2, ((a * d - 5 * a) * d + 8 * a) * d - 4 * a, 0.0))
        idx = f.astype(np.int64)[:, None] + offsets[None, :]
        if exclude_outside:
            w = np.where((idx < 0) | (idx >= in_len), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        return np.clip(idx, 0, in_len - 1), w / np.where(total == 0, 1.0, total)
    if mode == "nearest":
        rounders = {"round_prefer_floor": lambda v: np.ceil(v - 0.5),
                    "round_prefer_ceil": lambda v: np.floor(v + 0.5),
                    "floor": np.floor, "ceil": np.ceil}
        idx = rounders[nearest_mode](x).astype(np.int64)[:, None]
        return np.clip(idx, 0, in_len - 1), None
    f = np.floor(x)
    r = (x - f)[:, None]
    if mode == "linear":
        offsets = np.arange(2)
        w = np.concatenate([1 - r, r], axis=1)
    else:  # cubic, Keys kernel with coefficient a
        a = cubic_a
        offsets = np.arange(-1, 3)
        d = np.abs(offsets[None, :] - r)  # distance of each tap
        near = ((a + 2) * d - (a + 3)) * d * d + 1
        far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
        w = np.where(d <= 1, near, np.where(d < 2, far, 0.0))
    idx = f.astype(np.int64)[:, None] + offsets[None, :]
    if exclude_outside:
        w = np.where((idx < 0) | (idx >= in_len), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    return np.clip(idx, 0, in_len - 1), w


def resize_axis(data: np.ndarray, axis: int, out_len: int, scale: float, roi: tuple[float, float],
                a: Mapping[str, Any], coord_dtype: str = "float64") -> np.ndarray:
    """Resize ``data`` along one axis (Resize is separable, so N-D resize is a sequence);
    source coordinates in ``coord_dtype`` (:func:`resize_coord_dtype`)."""
    in_len = data.shape[axis]
    x, mask = resize_coords(a["coordinate_transformation_mode"], out_len, in_len, scale, roi,
                            coord_dtype)
    idx, w = resize_taps(x, in_len, a["mode"], a["nearest_mode"], a["cubic_coeff_a"],
                         bool(a["exclude_outside"]),
                         scale if a.get("antialias") else None)
    gathered = np.take(data, idx, axis=axis)  # ..., out, taps, ...
    if w is None:
        result = np.take(gathered, 0, axis=axis + 1)
    else:
        wshape = (1,) * axis + w.shape + (1,) * (data.ndim - axis - 1)
        result = (gathered * w.reshape(wshape)).sum(axis=axis + 1)
    if mask is not None and mask.any():
        mshape = (1,) * axis + (out_len,) + (1,) * (data.ndim - axis - 1)
        fill = np.asarray(a["extrapolation_value"]).astype(result.dtype)
        result = np.where(mask.reshape(mshape), fill, result)
    return result


def cast_like(y: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Cast a float result to ``dtype``; integers are rounded to nearest and saturated."""
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.clip(np.rint(y), info.min, info.max).astype(dtype)
    return y.astype(dtype)
