"""Graph op → compute for elementwise, reduction, data-movement, misc and quant ops.

Each function receives a :class:`~toolchain.topi.registry.Ctx` and returns the output
tensors; see :mod:`toolchain.topi.registry` for the conventions.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from toolchain import te
from toolchain.graph.ops.common import ONNX_TO_KILN, tensor_attr
from toolchain.graph.ops.deform import deform_geometry
from toolchain.graph.ops.nn_common import window_geometry
from toolchain.graph.ops.spectral import mel_args, mel_edges
from toolchain.graph.ops.text import ngram_pool
from toolchain.graph.ops.transform import (
    pad_widths,
    resize_coord_dtype,
    resize_plan,
    slice_spec,
    split_sizes,
)
from toolchain.tir import ir
from toolchain.topi import deform, linalg, roi, spectral, text
from toolchain.topi import elemwise as ew
from toolchain.topi import elemwise_ext as ewx
from toolchain.topi import quant_ext as qx
from toolchain.topi import reduction as red
from toolchain.topi import transform as tf
from toolchain.topi import transform_ext as tfx
from toolchain.topi.registry import ComputeFn, Ctx
from toolchain.topi.utils import scalar

_UNARY = {
    "Relu": ew.relu, "Sigmoid": ew.sigmoid, "HardSwish": ew.hard_swish, "Tanh": ew.tanh,
    "Erf": ew.erf, "Exp": ew.exp, "Log": ew.log, "Sqrt": ew.sqrt, "Reciprocal": ew.reciprocal,
    "Neg": ew.negative, "Abs": ew.abs, "Not": ew.logical_not,
}
_BINARY = {
    "Add": ew.add, "Sub": ew.subtract, "Mul": ew.multiply, "Div": ew.divide,
    "Pow": ew.power, "Equal": ew.equal, "Less": ew.less, "Greater": ew.greater,
}


def _unary(ctx: Ctx) -> list[te.Tensor]:
    return [_UNARY[ctx.node.op](ctx.tensor(0))]


def _binary(ctx: Ctx) -> list[te.Tensor]:
    return [_BINARY[ctx.node.op](ctx.tensor(0), ctx.tensor(1))]


def _leaky_relu(ctx: Ctx) -> list[te.Tensor]:
    return [ew.leaky_relu(ctx.tensor(0), ctx.attrs["alpha"])]


def _hard_sigmoid(ctx: Ctx) -> list[te.Tensor]:
    return [ew.hard_sigmoid(ctx.tensor(0), ctx.attrs["alpha"], ctx.attrs["beta"])]


def _gelu(ctx: Ctx) -> list[te.Tensor]:
    return [ew.gelu(ctx.tensor(0), ctx.attrs["approximate"])]


def _prelu(ctx: Ctx) -> list[te.Tensor]:
    return [ew.prelu(ctx.tensor(0), ctx.tensor(1))]


def _where(ctx: Ctx) -> list[te.Tensor]:
    return [ew.where(ctx.tensor(0), ctx.tensor(1), ctx.tensor(2))]


def _minmax(ctx: Ctx) -> list[te.Tensor]:
    xs = [ctx.tensor(i) for i in range(len(ctx.node.inputs))]
    fn = ew.minimum if ctx.node.op == "Min" else ew.maximum
    return [fn(*xs)]


def _clip(ctx: Ctx) -> list[te.Tensor]:
    return [ew.clip(ctx.tensor(0), ctx.scalar_or_tensor(1), ctx.scalar_or_tensor(2))]


def _cast(ctx: Ctx) -> list[te.Tensor]:
    return [ew.cast(ctx.tensor(0), ONNX_TO_KILN[int(ctx.attrs["to"])])]


def _bitcast(ctx: Ctx) -> list[te.Tensor]:
    return [ewx.bitcast(ctx.tensor(0), ONNX_TO_KILN[int(ctx.attrs["to"])])]


def _identity(ctx: Ctx) -> list[te.Tensor]:
    return [ctx.tensor(0)]


def _dropout(ctx: Ctx) -> list[te.Tensor]:
    x = ctx.tensor(0)
    outs = [x]
    if len(ctx.node.outputs) > 1:
        outs.append(te.compute(x.shape, lambda *i: ir.IntImm(1, "bool"), name="dropout_mask",
                               tag="injective"))
    return outs


def _math_unary(ctx: Ctx) -> list[te.Tensor]:
    return [ewx.math_unary(ctx.tensor(0), ctx.node.op)]


_UNARY_EXT = {
    "Sign": ewx.sign, "Softplus": ewx.softplus, "Softsign": ewx.softsign, "Mish": ewx.mish,
    "BitwiseNot": ewx.bitwise_not, "IsNaN": ewx.isnan,
}


def _unary_ext(ctx: Ctx) -> list[te.Tensor]:
    return [_UNARY_EXT[ctx.node.op](ctx.tensor(0))]


def _alpha_activation(ctx: Ctx) -> list[te.Tensor]:
    fn = {"Elu": ewx.elu, "Celu": ewx.celu, "ThresholdedRelu": ewx.thresholded_relu}
    return [fn[ctx.node.op](ctx.tensor(0), ctx.attrs["alpha"])]


def _selu(ctx: Ctx) -> list[te.Tensor]:
    return [ewx.selu(ctx.tensor(0), ctx.attrs["alpha"], ctx.attrs["gamma"])]


def _shrink(ctx: Ctx) -> list[te.Tensor]:
    return [ewx.shrink(ctx.tensor(0), ctx.attrs["bias"], ctx.attrs["lambd"])]


def _isinf(ctx: Ctx) -> list[te.Tensor]:
    a = ctx.attrs
    return [ewx.isinf(ctx.tensor(0), bool(a["detect_positive"]), bool(a["detect_negative"]))]


def _mod(ctx: Ctx) -> list[te.Tensor]:
    return [ewx.mod(ctx.tensor(0), ctx.tensor(1), bool(ctx.attrs["fmod"]))]


def _bitshift(ctx: Ctx) -> list[te.Tensor]:
    return [ewx.bitshift(ctx.tensor(0), ctx.tensor(1), ctx.attrs["direction"] == "LEFT")]


def _bitwise(ctx: Ctx) -> list[te.Tensor]:
    return [ewx.bitwise(ctx.tensor(0), ctx.tensor(1), ctx.node.op[len("Bitwise"):].lower())]


def _sum_mean(ctx: Ctx) -> list[te.Tensor]:
    xs = [ctx.tensor(i) for i in range(len(ctx.node.inputs))]
    return [ewx.sum_mean(xs, ctx.node.op == "Mean")]


def _logic_binary(ctx: Ctx) -> list[te.Tensor]:
    return [ewx.logic_binary(ctx.tensor(0), ctx.tensor(1), ctx.node.op)]


# -- reductions -----------------------------------------------------------------------------

_REDUCE_KIND = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max",
                "ReduceMin": "min"}


def _reduced(ctx: Ctx, reduce: Callable[..., te.Tensor], kind: str) -> list[te.Tensor]:
    """``reduce`` of ``kind`` over the node's ``axes`` input (none: every axis; under
    ``noop_with_empty_axes`` no axis: the input itself, or the element-wise step of a
    composite reduction, ``|x|`` for ``l1`` and ``l2``, ``x²``, ``log x``)."""
    x = ctx.tensor(0)
    axes = ctx.ints(1, "axes")
    if not axes:
        if ctx.attrs["noop_with_empty_axes"]:
            if kind in ("l1", "l2", "sum_square", "log_sum"):
                return [reduce(x, (), bool(ctx.attrs["keepdims"]), kind)]
            return [x]
        axes = None
    return [reduce(x, axes, bool(ctx.attrs["keepdims"]), kind)]


def _reduce(ctx: Ctx) -> list[te.Tensor]:
    return _reduced(ctx, red.reduce, _REDUCE_KIND[ctx.node.op])


_REDUCE_EXT = {op: kind for kind, op in red.EXT_KINDS.items()}


def _reduce_ext(ctx: Ctx) -> list[te.Tensor]:
    return _reduced(ctx, red.reduce_ext, _REDUCE_EXT[ctx.node.op])


def _argmax(ctx: Ctx) -> list[te.Tensor]:
    a = ctx.attrs
    fn = red.argmax if ctx.node.op == "ArgMax" else red.argmin
    return [fn(ctx.tensor(0), a["axis"], bool(a["keepdims"]), bool(a["select_last_index"]))]


def _topk(ctx: Ctx) -> list[te.Tensor]:
    k = ctx.const(1, "K")
    assert k is not None
    values, indices = red.topk(ctx.tensor(0), int(k.reshape(())), ctx.attrs["axis"],
                               bool(ctx.attrs["largest"]))
    return [values, indices][:len(ctx.node.outputs)]


def _hardmax(ctx: Ctx) -> list[te.Tensor]:
    return [red.hardmax(ctx.tensor(0), ctx.attrs["axis"])]


# -- data movement --------------------------------------------------------------------------

def _reshape(ctx: Ctx) -> list[te.Tensor]:
    # the output shape is already known from inference; the data order never changes
    out = ctx.node.outputs[0].shape
    return [tf.reshape(ctx.tensor(0), out, name=ctx.node.op.lower())]


def _transpose(ctx: Ctx) -> list[te.Tensor]:
    return [tf.transpose(ctx.tensor(0), ctx.attrs["perm"] or None)]


def _concat(ctx: Ctx) -> list[te.Tensor]:
    xs = [ctx.tensor(i) for i in range(len(ctx.node.inputs))]
    return [tf.concat(xs, ctx.attrs["axis"])]


def _split(ctx: Ctx) -> list[te.Tensor]:
    x = ctx.tensor(0)
    shape = ctx.shape(0)
    axis = ctx.attrs["axis"] % len(shape)
    split = ctx.ints(1, "split") or None
    sizes = split_sizes(ctx.node.describe(), shape[axis], split, ctx.attrs["num_outputs"],
                        len(ctx.node.outputs))
    return tf.split(x, sizes, axis)


def _slice(ctx: Ctx) -> list[te.Tensor]:
    shape = ctx.shape(0)
    starts, ends = ctx.ints(1, "starts"), ctx.ints(2, "ends")
    assert starts is not None and ends is not None
    slices, out = slice_spec(ctx.node.describe(), shape, starts, ends, ctx.ints(3, "axes"),
                             ctx.ints(4, "steps"))
    begin = [s.start if s.start is not None else 0 for s in slices]
    steps = [s.step if s.step is not None else 1 for s in slices]
    end = [b + n * st for b, n, st in zip(begin, out, steps, strict=True)]
    return [tf.strided_slice(ctx.tensor(0), begin, end, steps)]


def _gather(ctx: Ctx) -> list[te.Tensor]:
    return [tf.gather(ctx.tensor(0), ctx.tensor(1), ctx.attrs["axis"],
                      scalar_index=len(ctx.shape(1)) == 0)]


def _pad(ctx: Ctx) -> list[te.Tensor]:
    shape = ctx.shape(0)
    pads = ctx.ints(1, "pads")
    assert pads is not None
    widths = pad_widths(ctx.node.describe(), shape, pads, ctx.ints(3, "axes"))
    value = ctx.scalar_or_tensor(2)
    x = ctx.tensor(0)
    if isinstance(value, te.Tensor):
        value = value[(ir.IntImm(0),) * value.ndim]
    elif value is None:
        value = 0
    return [tf.pad(x, [b for b, _ in widths], [e for _, e in widths], ctx.attrs["mode"],
                   value)]


def _expand(ctx: Ctx) -> list[te.Tensor]:
    return [tf.expand(ctx.tensor(0), ctx.node.outputs[0].shape)]


def _tile(ctx: Ctx) -> list[te.Tensor]:
    reps = ctx.ints(1, "repeats")
    assert reps is not None
    return [tf.tile(ctx.tensor(0), reps)]


def _resize(ctx: Ctx) -> list[te.Tensor]:
    a = ctx.attrs
    shape = ctx.shape(0)
    given = ctx.const(2, "scales")
    out, plan = resize_plan(ctx.node.describe(), shape, ctx.const(1, "roi"),
                            given, ctx.const(3, "sizes"), a)
    scales = [plan[d][0] if d in plan else 1.0 for d in range(len(shape))]
    rois = [plan[d][1] if d in plan else (0.0, 1.0) for d in range(len(shape))]
    cdt = resize_coord_dtype(a["mode"], given is not None and given.size > 0)
    return [tf.resize(ctx.tensor(0), out, scales, a["mode"],
                      a["coordinate_transformation_mode"], a["nearest_mode"], rois,
                      a["cubic_coeff_a"], bool(a["exclude_outside"]),
                      a["extrapolation_value"], bool(a["antialias"]), cdt)]


def _depth_space(ctx: Ctx) -> list[te.Tensor]:
    fn = tfx.depth_to_space if ctx.node.op == "DepthToSpace" else tfx.space_to_depth
    return [fn(ctx.tensor(0), ctx.attrs["blocksize"], ctx.attrs["mode"])]


def _trilu(ctx: Ctx) -> list[te.Tensor]:
    k = ctx.const(1, "k")
    return [tfx.trilu(ctx.tensor(0), 0 if k is None else int(k.reshape(())),
                      bool(ctx.attrs["upper"]))]


def _size(ctx: Ctx) -> list[te.Tensor]:
    return [tfx.constant_fill((), ctx.node.inputs[0].size, "int64", "size")]


def _range(ctx: Ctx) -> list[te.Tensor]:
    start, _, delta = (ctx.const(i, n) for i, n in enumerate(("start", "limit", "delta")))
    assert start is not None and delta is not None
    out = ctx.node.outputs[0]
    work = tfx.range_work_dtype(out.dtype, ctx.attrs["stash_type"])
    return [tfx.arange(start.reshape(()).item(), delta.reshape(()).item(), out.shape[0],
                       out.dtype, work)]


def _one_hot(ctx: Ctx) -> list[te.Tensor]:
    depth = ctx.const(1, "depth")
    assert depth is not None
    return [tfx.one_hot(ctx.tensor(0), int(depth.reshape(())), ctx.tensor(2),
                        ctx.attrs["axis"])]


def _cumsum(ctx: Ctx) -> list[te.Tensor]:
    axis = ctx.const(1, "axis")
    assert axis is not None
    a = ctx.attrs
    return [tfx.cumsum(ctx.tensor(0), int(axis.reshape(())), bool(a["exclusive"]),
                       bool(a["reverse"]), "sum" if ctx.node.op == "CumSum" else "prod")]


def _gather_elements(ctx: Ctx) -> list[te.Tensor]:
    return [tfx.gather_elements(ctx.tensor(0), ctx.tensor(1), ctx.attrs["axis"])]


def _gather_nd(ctx: Ctx) -> list[te.Tensor]:
    return [tfx.gather_nd(ctx.tensor(0), ctx.tensor(1), ctx.attrs["batch_dims"])]


def _scatter_elements(ctx: Ctx) -> list[te.Tensor]:
    return [tfx.scatter_elements(ctx.tensor(0), ctx.tensor(1), ctx.tensor(2),
                                 ctx.attrs["axis"], ctx.attrs["reduction"])]


def _scatter_nd(ctx: Ctx) -> list[te.Tensor]:
    return [tfx.scatter_nd(ctx.tensor(0), ctx.tensor(1), ctx.tensor(2),
                           ctx.attrs["reduction"])]


def _tensor_scatter(ctx: Ctx) -> list[te.Tensor]:
    return [tfx.tensor_scatter(ctx.tensor(0), ctx.tensor(1), ctx.opt_tensor(2),
                               ctx.attrs["axis"], ctx.attrs["mode"] == "circular")]


def _eye_like(ctx: Ctx) -> list[te.Tensor]:
    out = ctx.node.outputs[0]
    return [tfx.eye_like(out.shape, ctx.attrs["k"], out.dtype)]


def _reverse_sequence(ctx: Ctx) -> list[te.Tensor]:
    return [tfx.reverse_sequence(ctx.tensor(0), ctx.tensor(1), ctx.attrs["batch_axis"],
                                 ctx.attrs["time_axis"])]


# -- misc, quant ----------------------------------------------------------------------------

def _constant_of_shape(ctx: Ctx) -> list[te.Tensor]:
    v = ctx.attrs.get("value")
    fill = np.zeros((), np.float32) if v is None else tensor_attr(v).reshape(())
    out = ctx.node.outputs[0]
    val = scalar(fill.item(), out.dtype)
    return [te.compute(out.shape or (1,), lambda *i: val, name="constant_of_shape",
                       tag="injective")]


def _shape(ctx: Ctx) -> list[te.Tensor]:
    from toolchain.graph.ops.misc import shape_result

    data = shape_result(ctx.node)

    def f(i: ir.PrimExpr) -> ir.PrimExpr:
        out: ir.PrimExpr = scalar(0, "int64")
        for k, d in enumerate(data.tolist()):
            out = te.select(te.equal(i, k), scalar(d, "int64"), out)
        return out

    return [te.compute((max(len(data), 1),) if len(data) else (0,), f, name="shape",
                       tag="injective")]


def _quantize(ctx: Ctx) -> list[te.Tensor]:
    a = ctx.attrs
    prec = {0: None, 1: "float32", 10: "float16", 11: "float64"}[int(a["precision"])]
    return [ew.quantize_linear(ctx.tensor(0), ctx.tensor(1), ctx.opt_tensor(2),
                               axis=a["axis"], block_size=a["block_size"],
                               out_dtype=ctx.node.outputs[0].dtype, precision=prec)]


def _dequantize(ctx: Ctx) -> list[te.Tensor]:
    a = ctx.attrs
    return [ew.dequantize_linear(ctx.tensor(0), ctx.tensor(1), ctx.opt_tensor(2),
                                 axis=a["axis"], block_size=a["block_size"],
                                 out_dtype=ctx.node.outputs[0].dtype)]


def _matmul_integer(ctx: Ctx) -> list[te.Tensor]:
    return [qx.int_matmul(ctx.tensor(0), ctx.tensor(1), ctx.opt_tensor(2), ctx.opt_tensor(3))]


def _qlinear_matmul(ctx: Ctx) -> list[te.Tensor]:
    t = ctx.opt_tensor
    return [qx.qlinear_matmul(ctx.tensor(0), ctx.tensor(1), t(2), ctx.tensor(3), ctx.tensor(4),
                              t(5), ctx.tensor(6), t(7), ctx.node.outputs[0].dtype)]


def _dynamic_quantize_linear(ctx: Ctx) -> list[te.Tensor]:
    return list(qx.dynamic_quantize_linear(ctx.tensor(0)))[:len(ctx.node.outputs)]


def _dft(ctx: Ctx) -> list[te.Tensor]:
    length, axis = ctx.const(1, "dft_length"), ctx.const(2, "axis")
    a = ctx.attrs
    return [spectral.dft(ctx.tensor(0), -2 if axis is None else int(axis.reshape(())),
                         None if length is None else int(length.reshape(())),
                         bool(a["inverse"]), bool(a["onesided"]))]


def _det(ctx: Ctx) -> list[te.Tensor]:
    return [linalg.det(ctx.tensor(0))]


def _roi_align(ctx: Ctx) -> list[te.Tensor]:
    a = ctx.attrs
    if a["sampling_ratio"] < 1:
        raise ctx.unsupported("sampling_ratio 0 (a sample grid that depends on each box) is "
                              "not supported in compiled code; give sampling_ratio >= 1")
    return [roi.roi_align(ctx.tensor(0), ctx.tensor(1), ctx.tensor(2), a["output_height"],
                          a["output_width"], a["sampling_ratio"], a["spatial_scale"],
                          a["mode"], a["coordinate_transformation_mode"] == "half_pixel")]


def _deform_conv(ctx: Ctx) -> list[te.Tensor]:
    g = deform_geometry(ctx.node.describe(), ctx.shape(0), ctx.shape(1), ctx.attrs)
    return [deform.deform_conv2d(ctx.tensor(0), ctx.tensor(1), ctx.tensor(2),
                                 ctx.opt_tensor(3), ctx.opt_tensor(4), g["strides"],
                                 g["pads"], g["dilations"], g["group"], g["offset_group"])]


def _window(ctx: Ctx) -> list[te.Tensor]:
    size = int(ctx.const(0, "size").reshape(()))
    return [spectral.window(ctx.node.op, size, bool(ctx.attrs["periodic"]),
                            ctx.node.outputs[0].dtype)]


def _mel_weight_matrix(ctx: Ctx) -> list[te.Tensor]:
    bins, length, rate, low, high = mel_args(ctx.node)
    edges = mel_edges(bins, length, rate, low, high)
    return [spectral.mel_weight_matrix([int(e) for e in edges], length,
                                       ctx.node.outputs[0].dtype)]


def _tfidf_vectorizer(ctx: Ctx) -> list[te.Tensor]:
    return [text.tfidf_vectorizer(ctx.tensor(0), ngram_pool(ctx.node.describe(), ctx.attrs))]


def _max_roi_pool(ctx: Ctx) -> list[te.Tensor]:
    ph, pw = (int(v) for v in ctx.attrs["pooled_shape"])
    return [roi.max_roi_pool(ctx.tensor(0), ctx.tensor(1), (ph, pw),
                             ctx.attrs["spatial_scale"])]


def _stft(ctx: Ctx) -> list[te.Tensor]:
    length = ctx.const(3, "frame_length")
    return [spectral.stft(ctx.tensor(0), int(ctx.const(1, "frame_step").reshape(())),
                          ctx.opt_tensor(2), None if length is None else int(length.reshape(())),
                          bool(ctx.attrs["onesided"]))]


def _conv_window(ctx: Ctx, w_index: int) -> tuple[list[int], list[int], list[int]]:
    """Strides, dilations and begin pads of an integer convolution node (auto_pad
    resolved)."""
    a = ctx.attrs
    xs, ws = ctx.shape(0), ctx.shape(w_index)
    nsp = len(xs) - 2
    strides = list(a["strides"] or [1] * nsp)
    dil = list(a["dilations"] or [1] * nsp)
    geom = window_geometry(xs[2:], ws[2:], strides=strides, dilations=dil,
                           pads=list(a["pads"] or [0] * 2 * nsp), auto_pad=a["auto_pad"])
    return strides, dil, list(geom.pads_begin)


def _conv_integer(ctx: Ctx) -> list[te.Tensor]:
    strides, dil, pb = _conv_window(ctx, 1)
    return [qx.int_conv(ctx.tensor(0), ctx.tensor(1), ctx.opt_tensor(2), ctx.opt_tensor(3),
                        ctx.node.outputs[0].shape, strides, dil, pb, ctx.attrs["group"])]


def _qlinear_conv(ctx: Ctx) -> list[te.Tensor]:
    strides, dil, pb = _conv_window(ctx, 3)
    t = ctx.opt_tensor
    acc = qx.int_conv(ctx.tensor(0), ctx.tensor(3), t(2), t(5), ctx.node.outputs[0].shape,
                      strides, dil, pb, ctx.attrs["group"])
    return [qx.qlinear_conv(acc, ctx.tensor(1), ctx.tensor(4), ctx.tensor(6), t(7), t(8),
                            ctx.node.outputs[0].dtype)]


#: graph op -> its compute: the table :func:`toolchain.topi.registry.computes` reads
COMPUTES: dict[str, ComputeFn] = {
    **dict.fromkeys(_UNARY, _unary),
    **dict.fromkeys(_BINARY, _binary),
    "LeakyRelu": _leaky_relu,
    "HardSigmoid": _hard_sigmoid,
    "Gelu": _gelu,
    "PRelu": _prelu,
    "Where": _where,
    "Min": _minmax,
    "Max": _minmax,
    "Clip": _clip,
    "Cast": _cast,
    "BitCast": _bitcast,
    "Identity": _identity,
    "Dropout": _dropout,
    **dict.fromkeys(ewx.UNARY_MATH, _math_unary),
    **dict.fromkeys(_UNARY_EXT, _unary_ext),
    "Elu": _alpha_activation,
    "Celu": _alpha_activation,
    "ThresholdedRelu": _alpha_activation,
    "Selu": _selu,
    "Shrink": _shrink,
    "IsInf": _isinf,
    "Mod": _mod,
    "BitShift": _bitshift,
    "BitwiseAnd": _bitwise,
    "BitwiseOr": _bitwise,
    "BitwiseXor": _bitwise,
    "Sum": _sum_mean,
    "Mean": _sum_mean,
    **dict.fromkeys(ewx.BINARY_LOGIC, _logic_binary),
    **dict.fromkeys(_REDUCE_KIND, _reduce),
    **dict.fromkeys(_REDUCE_EXT, _reduce_ext),
    "ArgMax": _argmax,
    "ArgMin": _argmax,
    "TopK": _topk,
    "Hardmax": _hardmax,
    "Reshape": _reshape,
    "Flatten": _reshape,
    "Squeeze": _reshape,
    "Unsqueeze": _reshape,
    "Transpose": _transpose,
    "Concat": _concat,
    "Split": _split,
    "Slice": _slice,
    "Gather": _gather,
    "Pad": _pad,
    "Expand": _expand,
    "Tile": _tile,
    "Resize": _resize,
    "DepthToSpace": _depth_space,
    "SpaceToDepth": _depth_space,
    "Trilu": _trilu,
    "Size": _size,
    "Range": _range,
    "OneHot": _one_hot,
    "CumSum": _cumsum,
    "CumProd": _cumsum,
    "GatherElements": _gather_elements,
    "GatherND": _gather_nd,
    "ScatterElements": _scatter_elements,
    "ScatterND": _scatter_nd,
    "TensorScatter": _tensor_scatter,
    "EyeLike": _eye_like,
    "ReverseSequence": _reverse_sequence,
    "ConstantOfShape": _constant_of_shape,
    "Shape": _shape,
    "QuantizeLinear": _quantize,
    "DequantizeLinear": _dequantize,
    "MatMulInteger": _matmul_integer,
    "QLinearMatMul": _qlinear_matmul,
    "DynamicQuantizeLinear": _dynamic_quantize_linear,
    "DFT": _dft,
    "Det": _det,
    "RoiAlign": _roi_align,
    "DeformConv": _deform_conv,
    "HannWindow": _window,
    "HammingWindow": _window,
    "BlackmanWindow": _window,
    "MelWeightMatrix": _mel_weight_matrix,
    "TfIdfVectorizer": _tfidf_vectorizer,
    "MaxRoiPool": _max_roi_pool,
    "STFT": _stft,
    "ConvInteger": _conv_integer,
    "QLinearConv": _qlinear_conv,
}
