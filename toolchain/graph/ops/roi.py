"""Region-of-interest ops: RoiAlign and MaxRoiPool (OPAQUE).

MaxRoiPool (Fast R-CNN's RoI pooling, as onnxruntime computes it; ONNX's reference has
none): each box ``(batch, x1, y1, x2, y2)`` of ``rois`` ``[R, 5]`` is scaled by
``spatial_scale`` and rounded (halves away from zero) to whole pixels, at least 1×1
(``end − start + 1``), and cut into ``pooled_shape`` bins of
``[⌊i·size/bins⌋, ⌈(i + 1)·size/bins⌉)`` pixels, clipped to the image; each output is the
maximum of its bin (0 for an empty bin).  Output ``[R, C, pooled_h, pooled_w]``.

ONNX's RoiAlign (opset 16 form; opset 10 models get ``coordinate_transformation_mode =
'output_half_pixel'``, their only behaviour, from the frontend): for each box ``n`` of
``rois`` ``[R, 4]`` (``x1, y1, x2, y2`` in input coordinates, scaled by ``spatial_scale``)
on image ``batch_indices[n]`` of ``X`` ``[N, C, H, W]``, the box is cut into
``output_height × output_width`` bins and each bin into a grid of
``sampling_ratio × sampling_ratio`` points (``0``: ``ceil(box size / bins)``, per box);
each point is interpolated bilinearly (points more than one pixel outside the image give
0, points in the border pixel clamp to the edge) and a bin is the mean of its points
(``mode='avg'``) or the maximum over its points of the largest of the four weighted
corner values (``mode='max'``, as onnxruntime and ONNX's reference define it).
``half_pixel`` shifts box coordinates by −0.5; ``output_half_pixel`` does not and makes
boxes at least 1×1.  Output ``[R, C, output_height, output_width]``.

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ops import get_op
    >>> x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    >>> get_op("RoiAlign").reference([x, np.array([[0, 0, 4, 4]], np.float32),
    ...                               np.array([0])], {"sampling_ratio": 1})[0].ravel()
    array([7.5], dtype=float32)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from toolchain.errors import ModelError
from toolchain.graph.ir import Node, TensorType
from toolchain.graph.ops.common import FLOAT_TYPES, check_dtype, defop, input_value
from toolchain.graph.ops.registry import REQUIRED, Attr, OpDef, PatternKind

MODES = ("avg", "max")
COORDINATE_MODES = ("half_pixel", "output_half_pixel")


def _positive(v: Any) -> str | None:
    return None if int(v) >= 1 else f"must be >= 1, got {v}"


def _non_negative(v: Any) -> str | None:
    return None if int(v) >= 0 else f"must be >= 0, got {v}"


def _roi_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x, rois, idx = (input_value(node, i, w) for i, w in
                    enumerate(("X", "rois", "batch_indices")))
    check_dtype(node, x, "input 0 (X)", FLOAT_TYPES)
    check_dtype(node, rois, "input 1 (rois)", (x.dtype,))
    check_dtype(node, idx, "input 2 (batch_indices)", ("int64",))
    if x.rank != 4:
        raise ModelError(f"{node.describe()}: input X {list(x.shape)} must be [N, C, H, W]")
    if rois.rank != 2 or rois.shape[1] != 4:
        raise ModelError(f"{node.describe()}: input rois {list(rois.shape)} must be "
                         "[num_rois, 4]")
    if idx.shape != (rois.shape[0],):
        raise ModelError(f"{node.describe()}: input batch_indices {list(idx.shape)} must be "
                         f"[{rois.shape[0]}] (one image index per box)")
    return [TensorType((rois.shape[0], x.shape[1], attrs["output_height"],
                        attrs["output_width"]), x.dtype)]


def roi_geometry(box: np.ndarray, attrs: dict[str, Any]) -> tuple[float, float, float, float]:
    """``(start_h, start_w, bin_h, bin_w)`` of one box ``(x1, y1, x2, y2)`` (float64)."""
    half = attrs["coordinate_transformation_mode"] == "half_pixel"
    off = 0.5 if half else 0.0
    s = float(attrs["spatial_scale"])
    x1, y1, x2, y2 = (float(v) * s - off for v in box)
    h, w = y2 - y1, x2 - x1
    if not half:
        h, w = max(h, 1.0), max(w, 1.0)
    return y1, x1, h / attrs["output_height"], w / attrs["output_width"]


def sampling_grid(box: np.ndarray, attrs: dict[str, Any]) -> tuple[int, int]:
    """Sample points per bin, ``(rows, columns)``, of one box."""
    if attrs["sampling_ratio"] > 0:
        return attrs["sampling_ratio"], attrs["sampling_ratio"]
    _, _, bh, bw = roi_geometry(box, attrs)
    return max(math.ceil(bh), 0), max(math.ceil(bw), 0)


def _bilinear_terms(img: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The four weighted corner values of each point: ``[4, C, *points]``."""
    hgt, wid = img.shape[1:]
    outside = (y < -1.0) | (y > hgt) | (x < -1.0) | (x > wid)
    y, x = np.maximum(y, 0.0), np.maximum(x, 0.0)
    corners = []
    for v, n in ((y, hgt), (x, wid)):
        low = np.floor(v).astype(np.int64)
        edge = low >= n - 1
        low = np.where(edge, n - 1, low)
        high = np.where(edge, n - 1, low + 1)
        frac = np.where(edge, 0.0, v - low)
        corners.append((low, high, frac))
    (yl, yh, ly), (xl, xh, lx) = corners
    keep = ~outside
    return np.stack([(1 - ly) * (1 - lx) * keep * img[:, yl, xl],
                     (1 - ly) * lx * keep * img[:, yl, xh],
                     ly * (1 - lx) * keep * img[:, yh, xl],
                     ly * lx * keep * img[:, yh, xh]])


def _roi_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x, rois, idx = (np.asarray(a) for a in ins[:3])
    oh, ow = attrs["output_height"], attrs["output_width"]
    out = np.zeros((rois.shape[0], x.shape[1], oh, ow), np.float64)
    for n in range(rois.shape[0]):
        img = x[int(idx[n])].astype(np.float64)
        y0, x0, bh, bw = roi_geometry(rois[n], attrs)
        gh, gw = sampling_grid(rois[n], attrs)
        if gh * gw == 0:
            continue
        ys = y0 + np.arange(oh)[:, None] * bh + (np.arange(gh)[None, :] + 0.5) * bh / gh
        xs = x0 + np.arange(ow)[:, None] * bw + (np.arange(gw)[None, :] + 0.5) * bw / gw
        yy = np.broadcast_to(ys[:, :, None, None], (oh, gh, ow, gw))
        xx = np.broadcast_to(xs[None, None], (oh, gh, ow, gw))
        terms = _bilinear_terms(img, yy, xx)  # [4, C, oh, gh, ow, gw]
        if attrs["mode"] == "avg":
            out[n] = terms.sum(axis=0).sum(axis=(2, 4)) / (gh * gw)
        else:
            out[n] = terms.max(axis=0).max(axis=(2, 4))
    return [out.astype(x.dtype)]


def _roi_flops(node: Node) -> int:
    s = max(int(node.attrs.get("sampling_ratio", 0) or 2), 1)
    return 12 * s * s * sum(o.size for o in node.outputs)


def _max_roi_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x, rois = input_value(node, 0, "X"), input_value(node, 1, "rois")
    check_dtype(node, x, "input 0 (X)", FLOAT_TYPES)
    check_dtype(node, rois, "input 1 (rois)", (x.dtype,))
    if x.rank != 4:
        raise ModelError(f"{node.describe()}: input X {list(x.shape)} must be [N, C, H, W]")
    if rois.rank != 2 or rois.shape[1] != 5:
        raise ModelError(f"{node.describe()}: input rois {list(rois.shape)} must be "
                         "[num_rois, 5] (batch index, x1, y1, x2, y2)")
    pooled = tuple(int(v) for v in attrs["pooled_shape"])
    if len(pooled) != 2:
        raise ModelError(f"{node.describe()}: pooled_shape {list(pooled)} must have 2 values "
                         "(height, width)")
    return [TensorType((rois.shape[0], x.shape[1]) + pooled, x.dtype)]


def round_half_away(v: np.ndarray) -> np.ndarray:
    """Round halves away from zero (C's ``round``), not to even as numpy does."""
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def roi_bins(start: int, end: int, bins: int, limit: int) -> list[tuple[int, int]]:
    """``[begin, end)`` pixels of each of ``bins`` bins of the box ``start..end`` (whole
    pixels, inclusive, at least one) on an axis of ``limit`` pixels."""
    size = max(end - start + 1, 1)
    return [(min(max(math.floor(i * size / bins) + start, 0), limit),
             min(max(math.ceil((i + 1) * size / bins) + start, 0), limit))
            for i in range(bins)]


def _max_roi_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x, rois = np.asarray(ins[0]), np.asarray(ins[1]).astype(np.float64)
    ph, pw = (int(v) for v in attrs["pooled_shape"])
    n_img, chans, hgt, wid = x.shape
    out = np.zeros((rois.shape[0], chans, ph, pw), x.dtype)
    for r, (b, *box) in enumerate(rois):
        x1, y1, x2, y2 = (int(v) for v in round_half_away(np.array(box)
                                                          * attrs["spatial_scale"]))
        img = x[min(max(int(b), 0), n_img - 1)]
        for i, (h0, h1) in enumerate(roi_bins(y1, y2, ph, hgt)):
            for j, (w0, w1) in enumerate(roi_bins(x1, x2, pw, wid)):
                if h1 > h0 and w1 > w0:
                    out[r, :, i, j] = img[:, h0:h1, w0:w1].max(axis=(1, 2))
    return [out]


#: this family's ops (registered by the op table, ``registry.builtin_ops``)
OPS: tuple[OpDef, ...] = (
    defop("RoiAlign", ("X", "rois", "batch_indices"), PatternKind.OPAQUE, infer=_roi_infer,
          reference=_roi_ref,
          attrs=(Attr("coordinate_transformation_mode", "string", "half_pixel",
                      COORDINATE_MODES),
                 Attr("mode", "string", "avg", MODES),
                 Attr("output_height", "int", 1, check=_positive),
                 Attr("output_width", "int", 1, check=_positive),
                 Attr("sampling_ratio", "int", 0, check=_non_negative),
                 Attr("spatial_scale", "float", 1.0)),
          flops=_roi_flops, min_opset=10,
          doc="bilinear region-of-interest pooling (avg or max) of boxes on images; in "
              "bundles sampling_ratio must be > 0 (the per-box grid of 0 depends on the "
              "boxes)"),
    defop("MaxRoiPool", ("X", "rois"), PatternKind.OPAQUE, infer=_max_roi_infer,
          reference=_max_roi_ref,
          attrs=(Attr("pooled_shape", "ints", REQUIRED,
                      check=lambda v: None if all(int(i) >= 1 for i in v)
                      else f"values must be >= 1, got {list(v)}"),
                 Attr("spatial_scale", "float", 1.0)),
          flops=lambda node: sum(o.size for o in node.outputs)
          * max(node.inputs[0].shape[2] * node.inputs[0].shape[3] if node.inputs
                and node.inputs[0] is not None and node.inputs[0].rank == 4 else 1, 1),
          min_opset=1,
          doc="max pooling of whole-pixel bins of boxes (Fast R-CNN RoI pooling)"),
)
