"""Integer-only quantized ops: QConv, QGemm, QAdd, QAvgPool (int8/uint8 in and out).

They are what :func:`toolchain.graph.passes.quantize_ops.quantize_ops` makes of the
``DequantizeLinear -> op -> QuantizeLinear`` groups of a QDQ model. All scales were turned
into fixed-point ``(multiplier, shift)`` pairs at compile time
(:mod:`toolchain.quantize.fixed_point`); the references below are the bit-exact definition
of the arithmetic (int64 intermediates, no float):

* **QConv** ``(x, w, bias, multiplier, shift_pow)``: ``acc[n,m,p] = bias[m] + sum (x - x_zp) * w``
  over the window (padding reads ``x_zp``, i.e. contributes 0; weights are symmetric,
  zero point 0), ``y = clamp(requantize(acc, multiplier[m], shift[m]) + y_zp, out_min,
  out_max)``. ``group`` covers depthwise. ``shift_pow`` is the ``[M, 2]`` int32 table
  ``(2**max(shift, 0), 2**(30 - max(-shift, 0)))`` of each channel's shift
  (:func:`~toolchain.quantize.fixed_point.shift_table`). ``data_layout`` / ``out_layout``
  (default ``NCHW``): the layouts ``x`` and ``y`` are stored in, ``NCHW{b}c`` where the
  layout pass keeps an x86 int8 chain channel-blocked
  (:func:`toolchain.topi.int8_x86.blocked_layouts`), an ``NHWC`` input where it folds a
  model's own NHWC -> NCHW ``Transpose`` into the convolution on an ``nhwc`` target; the
  arithmetic is the same.
* **QGemm** ``(x, w, bias, multiplier, shift_pow)``: ``x`` is ``[..., K]``, ``w`` is ``[N, K]``
  (already transposed), same accumulation and requantization per output column.
* **QAdd** ``(a, b)``: as TFLite: each side ``(v - v_zp) * 2**left_shift`` is requantized
  to a common fine scale, the two are summed and requantized to the output.
* **QAvgPool** ``(x)``: ``requantize(sum over the window of (x - x_zp), multiplier, shift)``
  where the multiplier already holds ``x_scale / (y_scale * window size)``; ``x`` and
  ``y`` stored in ``data_layout`` (``NCHW{b}c`` after a channel-blocked QConv chain).

``out_min`` / ``out_max`` are in the quantized domain: the dtype's range, narrowed by a
folded Relu or Clip.

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ops import get_op
    >>> x = np.array([[10, -20]], np.int8); w = np.array([[1, 2]], np.int8)
    >>> attrs = {"x_zero_point": 0, "y_zero_point": 0, "out_min": -128, "out_max": 127}
    >>> m, s = np.array([1 << 30], np.int32), np.array([[1, 1 << 30]], np.int32)  # x 0.5
    >>> get_op("QGemm").reference([x, w, np.array([0], np.int32), m, s], attrs)
    [array([[-15]], dtype=int8)]
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from toolchain.errors import ModelError
from toolchain.graph.ir import Node, TensorType, Value, np_dtype
from toolchain.graph.ops.common import check_dtype, defop, input_value
from toolchain.graph.ops.registry import Attr, OpDef, PatternKind
from toolchain.quantize.fixed_point import requantize, requantize_pow

Q_TYPES = ("int8", "uint8")


def _zp_attrs(*names: str) -> tuple[Attr, ...]:
    return tuple(Attr(n, "int", 0) for n in names)


_OUT_ATTRS = (
    Attr("y_zero_point", "int", 0), Attr("out_min", "int", -128), Attr("out_max", "int", 127),
    Attr("out_dtype", "string", "int8", choices=Q_TYPES),
)


def finish(acc: Any, mult: Any, shift: Any, attrs: dict[str, Any],
           powers: tuple[Any, Any] | None = None) -> np.ndarray:
    """``clamp(requantize(acc) + y_zero_point, out_min, out_max)`` in the output dtype
    (the shift given as ``shift`` or as its ``powers``)."""
    if powers is not None:
        y = requantize_pow(acc, mult, *powers) + attrs["y_zero_point"]
    else:
        y = requantize(acc, mult, shift) + attrs["y_zero_point"]
    return np.clip(y, attrs["out_min"], attrs["out_max"]).astype(np_dtype(attrs["out_dtype"]))


def _check_requant(node: Node, first: int, channels: int) -> None:
    for i, what, shape in ((first - 1, "bias", (channels,)), (first, "multiplier", (channels,)),
                           (first + 1, "shift_pow", (channels, 2))):
        v = input_value(node, i, what)
        check_dtype(node, v, f"input {i} ({what})", ("int32",))
        if v.shape != shape:
            raise ModelError(f"{node.describe()}: {what} must have shape {list(shape)}, got "
                             f"{list(v.shape)}")


# -- QConv -----------------------------------------------------------------------------------

def conv_out_shape(x: tuple[int, ...], w: tuple[int, ...], attrs: dict[str, Any]
                   ) -> tuple[int, ...]:
    """Output shape of a QConv (explicit pads ``[top, left, bottom, right]``)."""
    pads, st, dil = attrs["pads"], attrs["strides"], attrs["dilations"]
    out = [x[0], w[0]]
    for i in range(2):
        span = x[2 + i] + pads[i] + pads[2 + i] - ((w[2 + i] - 1) * dil[i] + 1)
        out.append(span // st[i] + 1)
    return tuple(out)


def nchw_qconv(node: Node) -> Node:
    """QConv ``node`` as it reads and writes ``NCHW`` (the node itself when its
    ``data_layout`` and ``out_layout`` are ``NCHW``): for shape rules and predicates that
    are stated on ``NCHW`` shapes."""
    from toolchain.graph.passes.layout_ops import nchw_shape

    lays = (node.attrs.get("data_layout", "NCHW"), node.attrs.get("out_layout", "NCHW"))
    if lays == ("NCHW", "NCHW"):
        return node
    x, y = node.inputs[0], node.outputs[0]
    attrs = {k: v for k, v in node.attrs.items() if k not in ("data_layout", "out_layout")}
    return node.replace(
        inputs=(Value(x.name, nchw_shape(x.shape, lays[0]), x.dtype), *node.inputs[1:]),
        outputs=(Value(y.name, nchw_shape(y.shape, lays[1]), y.dtype),), attrs=attrs)


def _qconv_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    from toolchain.graph.passes.layout_ops import check_layout, layout_shape, nchw_shape

    for k in ("data_layout", "out_layout"):
        check_layout(attrs[k], f"{node.describe()}: {k}: ")
    x, w = input_value(node, 0, "x"), input_value(node, 1, "w")
    if attrs["data_layout"] != "NCHW" and x.rank == (4 if attrs["data_layout"] == "NHWC" else 5):
        x = Value(x.name, nchw_shape(x.shape, attrs["data_layout"]), x.dtype)
    check_dtype(node, x, "input 0 (x)", Q_TYPES)
    check_dtype(node, w, "input 1 (w)", ("int8",))
    if x.rank != 4 or w.rank != 4 or x.shape[1] != w.shape[1] * attrs["group"]:
        raise ModelError(f"{node.describe()}: x {list(x.shape)} and w {list(w.shape)} do not "
                         f"make a 2-D convolution with group {attrs['group']}")
    _check_requant(node, 3, w.shape[0])
    out = layout_shape(conv_out_shape(x.shape, w.shape, attrs), attrs["out_layout"])
    return [TensorType(out, attrs["out_dtype"])]


def qconv_acc(x: np.ndarray, w: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    """int64 accumulators ``sum (x - x_zp) * w`` of a QConv (bias not added)."""
    pads, st, dil, g = attrs["pads"], attrs["strides"], attrs["dilations"], attrs["group"]
    xs = np.asarray(x, np.int64) - attrs["x_zero_point"]
    xs = np.pad(xs, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    m, cg, kh, kw = w.shape
    win = sliding_window_view(xs, ((kh - 1) * dil[0] + 1, (kw - 1) * dil[1] + 1), axis=(2, 3))
    win = win[:, :, ::st[0], ::st[1], ::dil[0], ::dil[1]]
    n, _, oh, ow = win.shape[:4]
    win = win.reshape(n, g, cg, oh, ow, kh, kw)
    wg = np.asarray(w, np.int64).reshape(g, m // g, cg, kh, kw)
    acc = np.einsum("ngchwij,gmcij->ngmhw", win, wg, optimize=True)
    return acc.reshape(n, m, oh, ow)


def _qconv_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    from toolchain.graph.passes.layout_ops import from_layout, to_layout

    x, w, bias, mult, sp = (np.asarray(a) for a in ins[:5])
    x = from_layout(x, attrs.get("data_layout", "NCHW"))
    acc = qconv_acc(x, w, attrs) + bias.astype(np.int64).reshape(1, -1, 1, 1)
    col = (1, -1, 1, 1)
    y = finish(acc, mult.reshape(col), None, attrs,
               (sp[:, 0].reshape(col), sp[:, 1].reshape(col)))
    return [to_layout(y, attrs.get("out_layout", "NCHW"))]


def _qconv_flops(node: Node) -> int:
    w = node.inputs[1]
    assert w is not None
    return 2 * node.outputs[0].size * int(np.prod(w.shape[1:]))


def _qconv() -> OpDef:
    return defop(
        "QConv", ("x", "w", "bias", "multiplier", "shift_pow"), PatternKind.COMPLEX_OUT_FUSABLE,
        attrs=(Attr("strides", "ints", (1, 1)), Attr("pads", "ints", (0, 0, 0, 0)),
               Attr("dilations", "ints", (1, 1)), Attr("group", "int", 1),
               *_zp_attrs("x_zero_point"), *_OUT_ATTRS, Attr("data_layout", "string", "NCHW"),
               Attr("out_layout", "string", "NCHW")),
        infer=_qconv_infer, reference=_qconv_ref, flops=_qconv_flops,
        doc="integer 2-D convolution (int8 x int8 -> int32, per-channel fixed-point "
            "requantization, clamp)",
    )


# -- QGemm -----------------------------------------------------------------------------------

def _qgemm_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x, w = input_value(node, 0, "x"), input_value(node, 1, "w")
    check_dtype(node, x, "input 0 (x)", Q_TYPES)
    check_dtype(node, w, "input 1 (w)", ("int8",))
    if x.rank < 1 or w.rank != 2 or x.shape[-1] != w.shape[1]:
        raise ModelError(f"{node.describe()}: x {list(x.shape)} and w {list(w.shape)} (which "
                         "is [N, K]) do not multiply")
    _check_requant(node, 3, w.shape[0])
    return [TensorType(x.shape[:-1] + (w.shape[0],), attrs["out_dtype"])]


def _qgemm_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x, w, bias, mult, sp = (np.asarray(a) for a in ins[:5])
    xs = x.astype(np.int64) - attrs["x_zero_point"]
    acc = xs @ w.astype(np.int64).T + bias.astype(np.int64)
    return [finish(acc, mult, None, attrs, (sp[:, 0], sp[:, 1]))]


def _qgemm() -> OpDef:
    return defop(
        "QGemm", ("x", "w", "bias", "multiplier", "shift_pow"),
        PatternKind.COMPLEX_OUT_FUSABLE,
        attrs=(*_zp_attrs("x_zero_point"), *_OUT_ATTRS),
        infer=_qgemm_infer, reference=_qgemm_ref,
        flops=lambda n: 2 * n.outputs[0].size * (n.inputs[1].shape[1]),  # type: ignore[union-attr]
        doc="integer matrix product x[..., K] . w[N, K]^T with per-column requantization",
    )


# -- QAdd ------------------------------------------------------------------------------------

def _qadd_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    a, b = input_value(node, 0, "a"), input_value(node, 1, "b")
    check_dtype(node, a, "input 0 (a)", Q_TYPES)
    check_dtype(node, b, "input 1 (b)", Q_TYPES)
    if a.shape != b.shape:
        raise ModelError(f"{node.describe()}: QAdd needs equal shapes, got {list(a.shape)} "
                         f"and {list(b.shape)}")
    return [TensorType(a.shape, attrs["out_dtype"])]


def qadd_sum(a: Any, b: Any, attrs: dict[str, Any]) -> np.ndarray:
    """The int64 sum at the common fine scale (before the output requantization)."""
    ls = attrs["left_shift"]
    ra = requantize((np.asarray(a, np.int64) - attrs["a_zero_point"]) << ls,
                    attrs["a_multiplier"], attrs["a_shift"])
    rb = requantize((np.asarray(b, np.int64) - attrs["b_zero_point"]) << ls,
                    attrs["b_multiplier"], attrs["b_shift"])
    return ra + rb


def _qadd_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    return [finish(qadd_sum(ins[0], ins[1], attrs), attrs["y_multiplier"], attrs["y_shift"],
                   attrs)]


def _qadd() -> OpDef:
    return defop(
        "QAdd", ("a", "b"), PatternKind.INJECTIVE,
        attrs=(*_zp_attrs("a_zero_point", "b_zero_point"),
               *(Attr(n, "int") for n in ("a_multiplier", "a_shift", "b_multiplier",
                                          "b_shift", "y_multiplier", "y_shift")),
               Attr("left_shift", "int", 20), *_OUT_ATTRS),
        infer=_qadd_infer, reference=_qadd_ref, flops=lambda n: 8 * n.outputs[0].size,
        doc="integer addition of two quantized tensors (TFLite scheme, left shift 20)",
    )


# -- QAvgPool --------------------------------------------------------------------------------

def _qpool_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    from toolchain.graph.passes.layout_ops import check_layout, layout_shape, nchw_shape

    check_layout(attrs["data_layout"], f"{node.describe()}: data_layout: ")
    x = input_value(node, 0, "x")
    if attrs["data_layout"] != "NCHW" and x.rank == 5:
        x = Value(x.name, nchw_shape(x.shape, attrs["data_layout"]), x.dtype)
    check_dtype(node, x, "input 0 (x)", Q_TYPES)
    if x.rank != 4:
        raise ModelError(f"{node.describe()}: QAvgPool needs a 4-D NCHW input, got "
                         f"{list(x.shape)}")
    kh, kw = attrs["kernel_shape"]
    w_shape = (x.shape[1], 1, kh, kw)
    conv = {"pads": attrs["pads"], "strides": attrs["strides"], "dilations": (1, 1)}
    out = conv_out_shape(x.shape, w_shape, conv)
    return [TensorType(layout_shape(out, attrs["data_layout"]), attrs["out_dtype"])]


def qpool_sum(x: Any, attrs: dict[str, Any]) -> np.ndarray:
    """int64 window sums of ``x - x_zero_point`` (padding contributes 0)."""
    kh, kw = attrs["kernel_shape"]
    c = np.asarray(x).shape[1]
    conv = {"pads": attrs["pads"], "strides": attrs["strides"], "dilations": (1, 1),
            "group": c, "x_zero_point": attrs["x_zero_point"]}
    return qconv_acc(np.asarray(x), np.ones((c, 1, kh, kw), np.int64), conv)


def _qpool_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    from toolchain.graph.passes.layout_ops import from_layout, to_layout

    lay = attrs.get("data_layout", "NCHW")
    x = from_layout(np.asarray(ins[0]), lay)
    return [to_layout(finish(qpool_sum(x, attrs), attrs["multiplier"], attrs["shift"], attrs),
                      lay)]


def _qavgpool() -> OpDef:
    return defop(
        "QAvgPool", ("x",), PatternKind.REDUCTION,
        attrs=(Attr("kernel_shape", "ints"), Attr("strides", "ints", (1, 1)),
               Attr("pads", "ints", (0, 0, 0, 0)), *_zp_attrs("x_zero_point"),
               Attr("multiplier", "int"), Attr("shift", "int"), *_OUT_ATTRS,
               Attr("data_layout", "string", "NCHW")),
        infer=_qpool_infer, reference=_qpool_ref, flops=lambda n: n.inputs[0].size,  # type: ignore[union-attr]
        doc="integer average pool: window sum requantized by x_scale / (y_scale * count)",
    )


#: this family's ops (registered by the op table, ``registry.builtin_ops``)
OPS: tuple[OpDef, ...] = (_qconv(), _qgemm(), _qadd(), _qavgpool())
