"""Linear (de)quantization: QuantizeLinear and DequantizeLinear (pattern INJECTIVE).

Both are ``elementwise`` (fused onto a convolution's output, run in place) but not
``layout_agnostic``: a per-axis ``axis`` counts in the model's NCHW layout.

Newest ONNX form (opset 28).  Granularity follows from the scale's shape:

* per-tensor: a scalar scale (a one-element 1-D scale reads the same way, with a zero point
  of shape [] or [1]);
* per-axis: a 1-D scale of length ``x.shape[axis]``;
* blocked (``block_size > 0``): the scale has x's rank and ``ceil(D / block_size)``
  entries along ``axis``, each repeated ``block_size`` times.

The zero point, when given, has the scale's shape and fixes the quantized dtype (int8,
uint8, int16 or uint16 — Kiln has no 4-bit, 2-bit or float8 types).  Quantization is
``y = saturate(round_half_even(x / scale) + zero_point)`` with the division done in the
scale's dtype (or ``precision``); dequantization is ``y = (x - zero_point) * scale``
computed in the output dtype.

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ops import get_op
    >>> x = np.array([0.5, 1.5, 2.5, -300.0], np.float32)
    >>> get_op("QuantizeLinear").reference([x, np.float32(1.0), np.int8(0)], {})
    [array([   0,    2,    2, -128], dtype=int8)]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from toolchain.errors import ModelError
from toolchain.graph.ir import Node, TensorType, Value, np_dtype
from toolchain.graph.ops.common import (
    KILN_TO_ONNX,
    check_dtype,
    check_same_dtype,
    defop,
    input_value,
    normalize_axis,
    onnx_type_name,
    per_element_flops,
)
from toolchain.graph.ops.registry import Attr, OpDef, PatternKind

QUANT_TYPES: tuple[str, ...] = ("int8", "uint8", "int16", "uint16")
_SCALE_TYPES = ("float32", "float16")


def _code_check(allowed: Sequence[str], what: str):
    codes = {KILN_TO_ONNX[t]: t for t in allowed}

    def check(code: int) -> str | None:
        if code == 0 or code in codes:
            return None
        shown = ", ".join(f"{onnx_type_name(c)} ({c})" for c in codes)
        return f"{what} {onnx_type_name(code)} is not supported (use 0 or one of {shown})"

    return check


def _check_block_size(b: int) -> str | None:
    return "must be >= 0" if b < 0 else None


def _granularity(
    node: Node | None, x_shape: tuple[int, ...], scale_shape: tuple[int, ...],
    axis: int, block_size: int,
) -> tuple[str, int]:
    """``("tensor"|"axis"|"block", normalised axis)``; raises on inconsistent shapes."""
    where = node.describe() if node is not None else "quantization"
    rank = len(x_shape)
    size = int(np.prod(scale_shape, dtype=np.int64))
    if block_size == 0 and (len(scale_shape) == 0 or (len(scale_shape) == 1 and size == 1)):
        return "tensor", 0
    if rank == 0:
        raise ModelError(f"{where}: a scalar input needs a scalar scale, got {list(scale_shape)}")
    if node is not None:
        ax = normalize_axis(node, axis, rank, "attribute 'axis'")
    else:
        ax = axis % rank
    dim = x_shape[ax]
    if block_size == 0:
        if scale_shape != (dim,):
            raise ModelError(
                f"{where}: per-axis scale must have shape [{dim}] (input shape "
                f"{list(x_shape)}, axis {ax}), got {list(scale_shape)}; for blocked "
                "quantization set block_size"
            )
        return "axis", ax
    want = tuple(-(-dim // block_size) if i == ax else d for i, d in enumerate(x_shape))
    if scale_shape != want:
        raise ModelError(
            f"{where}: with block_size {block_size} on axis {ax} the scale must have shape "
            f"{list(want)} (input shape {list(x_shape)}), got {list(scale_shape)}"
        )
    return "block", ax


def _expand(param: np.ndarray, x_shape: tuple[int, ...], kind: str, axis: int,
            block_size: int) -> np.ndarray:
    """``param`` (scale or zero point) laid out to broadcast against x."""
    if kind == "tensor":
        return param.reshape(())
    if kind == "axis":
        shape = [1] * len(x_shape)
        shape[axis] = x_shape[axis]
        return param.reshape(shape)
    rep = np.repeat(param, block_size, axis=axis)
    return np.take(rep, np.arange(x_shape[axis]), axis=axis)


def _check_params(node: Node, x: Value, scale: Value, zp: Value | None,
                  attrs: dict[str, Any]) -> None:
    kind, _ = _granularity(node, x.shape, scale.shape, attrs["axis"], attrs["block_size"])
    # per-tensor: a scale of shape [] or [1] with a zero point of shape [] or [1] (onnxruntime
    # writes a [1] scale with a scalar zero point, e.g. for an unfolded BatchNormalization)
    one = kind == "tensor" and zp is not None and zp.shape in ((), (1,))
    if zp is not None and zp.shape != scale.shape and not one:
        raise ModelError(
            f"{node.describe()}: zero point shape {list(zp.shape)} must equal the scale "
            f"shape {list(scale.shape)}"
        )


# -- QuantizeLinear -------------------------------------------------------------------------

def _quant_out_dtype(zp_dtype: str | None, output_dtype: int, where: str) -> str:
    if output_dtype:
        wanted = {KILN_TO_ONNX[t]: t for t in QUANT_TYPES}[output_dtype]
        if zp_dtype is not None and zp_dtype != wanted:
            raise ModelError(
                f"{where}: attribute 'output_dtype' = {onnx_type_name(output_dtype)} does not "
                f"match the zero point's dtype {zp_dtype}"
            )
        return wanted
    return zp_dtype or "uint8"


def _quantize_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x, scale = input_value(node, 0, "x"), input_value(node, 1, "y_scale")
    zp = node.input(2)
    check_dtype(node, x, "input 0 (x)", ("float32", "float16", "int32"))
    check_dtype(node, scale, "input 1 (y_scale)", ("float32", "float16", "int32"))
    if zp is not None:
        check_dtype(node, zp, "input 2 (y_zero_point)", QUANT_TYPES)
    _check_params(node, x, scale, zp, attrs)
    out = _quant_out_dtype(zp.dtype if zp is not None else None, attrs["output_dtype"],
                           node.describe())
    return [TensorType(x.shape, out)]


def _quantize_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x, scale = np.asarray(ins[0]), np.asarray(ins[1])
    zp = None if ins[2] is None else np.asarray(ins[2])
    axis, block = attrs["axis"], attrs["block_size"]
    kind, ax = _granularity(None, x.shape, scale.shape, axis, block)
    out = np_dtype(_quant_out_dtype(None if zp is None else str(zp.dtype),
                                    attrs["output_dtype"], "QuantizeLinear"))
    if attrs["precision"]:
        prec = np_dtype({1: "float32", 10: "float16", 11: "float64"}[attrs["precision"]])
    else:
        prec = scale.dtype if scale.dtype.kind == "f" else np.dtype(np.float64)
    s = _expand(scale, x.shape, kind, ax, block).astype(prec)
    with np.errstate(all="ignore"):
        q = np.rint(x.astype(prec) / s).astype(np.float64)  # rint: half to even
        if zp is not None:
            q = q + _expand(zp, x.shape, kind, ax, block).astype(np.float64)
        info = np.iinfo(out)
        return [np.clip(q, info.min, info.max).astype(out)]


def _quantize_linear() -> OpDef:
    return defop(
        "QuantizeLinear", ("x", "y_scale", "y_zero_point?"), PatternKind.INJECTIVE,
        elementwise=True, layout_agnostic=False,  # ``axis`` names an NCHW axis
        attrs=(
            Attr("axis", "int", 1),
            Attr("block_size", "int", 0, check=_check_block_size),
            Attr("saturate", "int", 1, (0, 1)),
            Attr("output_dtype", "int", 0, check=_code_check(QUANT_TYPES, "output_dtype")),
            Attr("precision", "int", 0,
                 check=_code_check(("float32", "float16", "float64"), "precision")),
        ),
        infer=_quantize_infer, reference=_quantize_ref, flops=per_element_flops(3),
        min_opset=10,
        doc="saturate(round_half_even(x / y_scale) + y_zero_point); per-tensor, per-axis or "
            "blocked; output dtype from the zero point, else output_dtype, else uint8",
    )


# -- DequantizeLinear -----------------------------------------------------------------------

def _dequant_out_dtype(scale_dtype: str, output_dtype: int) -> str:
    return {1: "float32", 10: "float16"}.get(output_dtype, scale_dtype)


def _dequantize_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x, scale = input_value(node, 0, "x"), input_value(node, 1, "x_scale")
    zp = node.input(2)
    check_dtype(node, x, "input 0 (x)", QUANT_TYPES + ("int32",))
    check_dtype(node, scale, "input 1 (x_scale)", _SCALE_TYPES)
    if zp is not None:
        check_same_dtype(node, [x, zp], ["x", "x_zero_point"])
    _check_params(node, x, scale, zp, attrs)
    return [TensorType(x.shape, _dequant_out_dtype(scale.dtype, attrs["output_dtype"]))]


def _dequantize_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x, scale = np.asarray(ins[0]), np.asarray(ins[1])
    zp = None if ins[2] is None else np.asarray(ins[2])
    axis, block = attrs["axis"], attrs["block_size"]
    kind, ax = _granularity(None, x.shape, scale.shape, axis, block)
    out = np_dtype(_dequant_out_dtype(str(scale.dtype), attrs["output_dtype"]))
    d = x.astype(np.int64)
    if zp is not None:
        d = d - _expand(zp, x.shape, kind, ax, block).astype(np.int64)
    s = _expand(scale, x.shape, kind, ax, block).astype(out)
    with np.errstate(all="ignore"):
        return [(d.astype(out) * s).astype(out)]


def _dequantize_linear() -> OpDef:
    return defop(
        "DequantizeLinear", ("x", "x_scale", "x_zero_point?"), PatternKind.INJECTIVE,
        elementwise=True, layout_agnostic=False,  # ``axis`` names an NCHW axis
        attrs=(
            Attr("axis", "int", 1),
            Attr("block_size", "int", 0, check=_check_block_size),
            Attr("output_dtype", "int", 0,
                 check=_code_check(("float32", "float16"), "output_dtype")),
        ),
        infer=_dequantize_infer, reference=_dequantize_ref, flops=per_element_flops(2),
        min_opset=10,
        doc="(x - x_zero_point) * x_scale in the output dtype (output_dtype, else the "
            "scale's); per-tensor, per-axis or blocked",
    )


#: this family's ops (registered by the op table, ``registry.builtin_ops``)
OPS: tuple[OpDef, ...] = (_quantize_linear(), _dequantize_linear())
