"""Integer ops of ONNX's quantized-operator format: MatMulInteger, QLinearMatMul,
ConvInteger, QLinearConv and DynamicQuantizeLinear (what onnxruntime's dynamic and static
quantizers emit besides QDQ pairs).

Both are OPAQUE (an integer product with zero points, and for QLinearMatMul a requantizing
epilogue).  Operands have rank >= 2 (batch axes broadcast as in MatMul); zero points and
scales are per tensor (one element), per row of A (``[M]``) or per column of B (``[N]``).
References follow ONNX's exactly:

* MatMulInteger: ``(A - a_zero_point) @ (B - b_zero_point)`` in int32;
* QLinearMatMul: that product ``P``, then ``saturate(round_half_even(P · m) + y_zero_point)``
  with the multiplier ``m = a_scale · b_scale / y_scale`` computed in the scales' dtype
  (float16 scales: in float32) and ``P · m`` in float64.

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ops import get_op
    >>> a = np.array([[1, 2]], np.uint8); b = np.array([[3], [4]], np.uint8)
    >>> get_op("MatMulInteger").reference([a, b, np.array(1, np.uint8), None], {})
    [array([[4]], dtype=int32)]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from toolchain.errors import ModelError
from toolchain.graph.ir import Node, TensorType, Value
from toolchain.graph.ops.common import check_dtype, defop, input_value
from toolchain.graph.ops.nn import window_attrs
from toolchain.graph.ops.registry import Attr, OpDef, PatternKind, broadcast_shapes, get_op

_Q = ("int8", "uint8")


def _param(node: Node, i: int, what: str, rows: int, dtypes: tuple[str, ...],
           dtype: str | None = None) -> Value | None:
    """Optional input ``i``: one element, or 1-D of ``rows`` entries, of ``dtype``."""
    v = node.input(i)
    if v is None:
        return None
    check_dtype(node, v, f"input {i} ({what})", dtypes)
    if dtype is not None and v.dtype != dtype:
        raise ModelError(f"{node.describe()}: input {i} ({what}) must have dtype {dtype}, "
                         f"got {v.dtype}")
    if v.size != 1 and v.shape != (rows,):
        raise ModelError(f"{node.describe()}: input {i} ({what}) must have one element or "
                         f"shape [{rows}], got {list(v.shape)}")
    return v


def product_shape(node: Node, a: Value, b: Value) -> tuple[int, ...]:
    """MatMul's output shape for operands of rank >= 2 (raises naming the node)."""
    if a.rank < 2 or b.rank < 2:
        raise ModelError(f"{node.describe()}: A {list(a.shape)} and B {list(b.shape)} must "
                         "have rank >= 2 (Unsqueeze a vector first)")
    if a.shape[-1] != b.shape[-2]:
        raise ModelError(f"{node.describe()}: A {list(a.shape)} and B {list(b.shape)} do not "
                         "agree on K (A's last axis, B's second to last)")
    batch = broadcast_shapes(node, [a.shape[:-2], b.shape[:-2]])
    return batch + (a.shape[-2], b.shape[-1])


def _rows(x: Any, ndim: int) -> np.ndarray | int:
    """A per-row parameter as a column (broadcasts over A's rows), or the scalar."""
    if x is None:
        return 0
    v = np.asarray(x)
    return v.reshape(-1, 1) if v.size != 1 else v.reshape(())


def _int_product(a: np.ndarray, b: np.ndarray, azp: Any, bzp: Any) -> np.ndarray:
    aa = a.astype(np.int32) - np.asarray(_rows(azp, a.ndim)).astype(np.int32)
    bb = b.astype(np.int32) - (np.asarray(bzp).astype(np.int32).reshape(-1)
                               if bzp is not None and np.asarray(bzp).size != 1
                               else np.asarray(0 if bzp is None else bzp).astype(np.int32))
    return np.matmul(aa, bb).astype(np.int32)


def _matmul_integer_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    a, b = input_value(node, 0, "A"), input_value(node, 1, "B")
    check_dtype(node, a, "input 0 (A)", _Q)
    check_dtype(node, b, "input 1 (B)", _Q)
    shape = product_shape(node, a, b)
    _param(node, 2, "a_zero_point", a.shape[-2], _Q, a.dtype)
    _param(node, 3, "b_zero_point", b.shape[-1], _Q, b.dtype)
    return [TensorType(shape, "int32")]


def _matmul_integer_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    return [_int_product(np.asarray(ins[0]), np.asarray(ins[1]), ins[2], ins[3])]


def _qlinear_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    a, b = input_value(node, 0, "a"), input_value(node, 3, "b")
    check_dtype(node, a, "input 0 (a)", _Q)
    check_dtype(node, b, "input 3 (b)", _Q)
    shape = product_shape(node, a, b)
    m, n = a.shape[-2], b.shape[-1]
    scales = ("float32", "float16")
    sa = _param(node, 1, "a_scale", m, scales)
    _param(node, 2, "a_zero_point", m, _Q, a.dtype)
    _param(node, 4, "b_scale", n, scales, sa.dtype if sa else None)
    _param(node, 5, "b_zero_point", n, _Q, b.dtype)
    _param(node, 6, "y_scale", 1, scales, sa.dtype if sa else None)
    yzp = _param(node, 7, "y_zero_point", 1, _Q)
    for i, what in ((1, "a_scale"), (4, "b_scale"), (6, "y_scale")):
        input_value(node, i, what)
    return [TensorType(shape, yzp.dtype if yzp is not None else a.dtype)]


def requant_multiplier(a_scale: np.ndarray, b_scale: np.ndarray, y_scale: np.ndarray
                       ) -> np.ndarray:
    """``a_scale · b_scale / y_scale`` as ONNX's reference computes it (per-row scales as a
    column, per-column ones as a row), float16 in float32."""
    dt = np.float32 if np.asarray(a_scale).dtype == np.float16 else np.asarray(a_scale).dtype
    sa = np.asarray(_rows(a_scale, 2)).astype(dt)
    sb = np.asarray(b_scale).astype(dt).reshape(-1 if np.asarray(b_scale).size != 1 else ())
    return sa * sb / np.asarray(y_scale).astype(dt).reshape(())


def _qlinear_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    a, b = np.asarray(ins[0]), np.asarray(ins[3])
    p = _int_product(a, b, ins[2], ins[5])
    yzp = ins[7]
    out = np.asarray(yzp).dtype if yzp is not None else a.dtype
    d = p.astype(np.float64) * requant_multiplier(ins[1], ins[4], ins[6]).astype(np.float64)
    if yzp is not None:
        d = d + float(np.asarray(yzp).reshape(()))
    info = np.iinfo(out)
    return [np.clip(np.rint(d), info.min, info.max).astype(out)]


def _flops(node: Node) -> int:
    a = node.inputs[0]
    return 2 * sum(o.size for o in node.outputs) * (a.shape[-1] if a is not None and a.rank
                                                      else 0)


def _dql_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x = input_value(node, 0, "x")
    check_dtype(node, x, "input 0 (x)", ("float32",))
    return [TensorType(x.shape, "uint8"), TensorType((), "float32"), TensorType((), "uint8")]


def _dql_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    hi = np.float32(max(0.0, float(x.max()))) if x.size else np.float32(0)
    lo = np.float32(min(0.0, float(x.min()))) if x.size else np.float32(0)
    scale = np.float32(1.0 if hi == lo else hi - lo) / np.float32(255)
    zp = np.rint(np.clip(np.float32(0) - lo / scale, 0, 255)).astype(np.float32)
    y = np.clip(np.rint(x / scale) + zp, 0, 255)
    return [y.astype(np.uint8), np.array(scale, np.float32), np.array(zp, np.uint8)]


# -- ConvInteger, QLinearConv -------------------------------------------------------------------

def conv_shape(node: Node, x: Value, w: Value, attrs: dict[str, Any]) -> tuple[int, ...]:
    """The output shape of an integer convolution, by Conv's own shape rule (the same
    window attributes, group and error messages, naming this node)."""
    shadow = Node("Conv", node.name, [Value(x.name, x.shape, "float64"),
                                      Value(w.name, w.shape, "float64")],
                  [Value("y", (), "float64")],
                  {k: v for k, v in attrs.items() if v is not None and v != ()})
    try:
        (out,) = get_op("Conv").infer(shadow)
    except ModelError as exc:
        raise ModelError(str(exc).replace("(Conv)", f"({node.op})", 1)) from None
    return out.shape


_CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


def _int_conv(x: np.ndarray, w: np.ndarray, xzp: Any, wzp: Any,
              attrs: dict[str, Any]) -> np.ndarray:
    xx = x.astype(np.float64) - (0.0 if xzp is None else float(np.asarray(xzp).reshape(-1)[0]))
    wz = 0.0 if wzp is None else np.asarray(wzp).astype(np.float64)
    if np.size(wz) > 1:
        wz = wz.reshape((-1,) + (1,) * (w.ndim - 1))
    ww = w.astype(np.float64) - wz
    conv = {k: attrs[k] for k in _CONV_ATTRS}
    # integer products summed in float64: exact below 2**53
    return get_op("Conv").reference([xx, ww, None], conv)[0].astype(np.int32)


def _conv_integer_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x, w = input_value(node, 0, "x"), input_value(node, 1, "w")
    check_dtype(node, x, "input 0 (x)", _Q)
    check_dtype(node, w, "input 1 (w)", _Q)
    shape = conv_shape(node, x, w, attrs)
    _param(node, 2, "x_zero_point", 1, _Q, x.dtype)
    _param(node, 3, "w_zero_point", w.shape[0], _Q, w.dtype)
    return [TensorType(shape, "int32")]


def _conv_integer_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    return [_int_conv(np.asarray(ins[0]), np.asarray(ins[1]), ins[2], ins[3], attrs)]


def _qlinear_conv_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x, w = input_value(node, 0, "x"), input_value(node, 3, "w")
    check_dtype(node, x, "input 0 (x)", _Q)
    check_dtype(node, w, "input 3 (w)", _Q)
    shape = conv_shape(node, x, w, attrs)
    scales = ("float32",)
    for i, what in ((1, "x_scale"), (4, "w_scale"), (6, "y_scale")):
        input_value(node, i, what)
    _param(node, 1, "x_scale", 1, scales)
    _param(node, 2, "x_zero_point", 1, _Q, x.dtype)
    _param(node, 4, "w_scale", w.shape[0], scales)
    _param(node, 5, "w_zero_point", w.shape[0], _Q, w.dtype)
    _param(node, 6, "y_scale", 1, scales)
    yzp = _param(node, 7, "y_zero_point", 1, _Q)
    _param(node, 8, "B", w.shape[0], ("int32",))
    return [TensorType(shape, yzp.dtype if yzp is not None else x.dtype)]


def _qlinear_conv_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x, w = np.asarray(ins[0]), np.asarray(ins[3])
    acc = _int_conv(x, w, ins[2], ins[5], attrs)
    channel = (1, -1) + (1,) * (acc.ndim - 2)
    if ins[8] is not None:
        acc = acc + np.asarray(ins[8]).astype(np.int32).reshape(channel)
    ws = np.asarray(ins[4]).astype(np.float32)
    mult = np.asarray(ins[1]).astype(np.float32).reshape(()) * ws / np.asarray(
        ins[6]).astype(np.float32).reshape(())
    r = acc.astype(np.float64) * (mult.reshape(channel) if mult.size > 1 else mult.reshape(
        ())).astype(np.float64)
    out = np.asarray(ins[7]).dtype if ins[7] is not None else x.dtype
    if ins[7] is not None:
        r = r + float(np.asarray(ins[7]).reshape(()))
    info = np.iinfo(out)
    return [np.rint(np.clip(r, info.min, info.max)).astype(out)]


def _conv_attrs() -> tuple[Attr, ...]:
    return window_attrs(kernel_required=False) + (Attr("group", "int", 1),)


def _conv_flops(node: Node) -> int:
    w = node.inputs[1 if node.op == "ConvInteger" else 3]
    if w is None:
        return 0
    return 2 * sum(o.size for o in node.outputs) * int(np.prod(w.shape[1:]))


#: this family's ops (registered by the op table, ``registry.builtin_ops``)
OPS: tuple[OpDef, ...] = (
    defop("MatMulInteger", ("A", "B", "a_zero_point?", "b_zero_point?"), PatternKind.OPAQUE,
          infer=_matmul_integer_infer, reference=_matmul_integer_ref, flops=_flops,
          min_opset=10,
          doc="int32 (A - a_zero_point) @ (B - b_zero_point); int8/uint8 operands, zero "
              "points per tensor, per row of A or per column of B"),
    defop("QLinearMatMul", ("a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point",
                            "y_scale", "y_zero_point"), PatternKind.OPAQUE,
          infer=_qlinear_infer, reference=_qlinear_ref, flops=_flops, min_opset=10,
          doc="the integer product requantized: saturate(round_half_even(P · a_scale · "
              "b_scale / y_scale) + y_zero_point); output dtype of y_zero_point"),
    defop("DynamicQuantizeLinear", ("x",), PatternKind.OPAQUE, num_outputs=(1, 3),
          infer=_dql_infer, reference=_dql_ref,
          flops=lambda node: 4 * (node.inputs[0].size if node.inputs and node.inputs[0]
                                  else 0),
          min_opset=11,
          doc="uint8 quantization with the range of x (and 0): scale = (max - min) / 255 "
              "(1/255 when max = min), zero point = round(clamp(-min / scale)), y = "
              "saturate(round(x / scale) + zero point); float32 arithmetic, halves to even"),
    defop("ConvInteger", ("x", "w", "x_zero_point?", "w_zero_point?"), PatternKind.OPAQUE,
          attrs=_conv_attrs(), infer=_conv_integer_infer, reference=_conv_integer_ref,
          flops=_conv_flops, min_opset=10,
          doc="int32 convolution of (x - x_zero_point) and (w - w_zero_point) (per output "
              "channel allowed); padding contributes 0; Conv's window attributes and group"),
    defop("QLinearConv", ("x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point",
                          "y_scale", "y_zero_point", "B?"), PatternKind.OPAQUE,
          attrs=_conv_attrs(), infer=_qlinear_conv_infer, reference=_qlinear_conv_ref,
          flops=_conv_flops, min_opset=10,
          doc="that integer convolution plus int32 B, requantized: saturate(round_half_even"
              "((acc + B) · x_scale · w_scale / y_scale) + y_zero_point); w_scale per tensor "
              "or per output channel"),
)
