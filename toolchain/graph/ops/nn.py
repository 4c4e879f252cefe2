"""NN ops: convolution, matrix products, pooling, normalisation, softmax.

Every op follows the newest ONNX form (see :mod:`.registry`).  Pattern kinds follow TVM
(``docs/ops.md`` explains each choice): Conv/ConvTranspose/MatMul/Gemm and the pooling ops
are complex-out-fusable, Softmax/LogSoftmax/LayerNormalization/InstanceNormalization are
opaque (a reduction whose result feeds element-wise work on the same input), inference-mode
BatchNormalization is injective (a per-channel affine map).

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ops import get_op
    >>> x = np.ones((1, 1, 4, 4), np.float32); w = np.ones((2, 1, 3, 3), np.float32)
    >>> get_op("Conv").reference([x, w], {"pads": (1, 1, 1, 1)})[0][0, 0, 0].tolist()
    [4.0, 6.0, 6.0, 4.0]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from toolchain.errors import UnsupportedError
from toolchain.graph.ir import Node, TensorType
from toolchain.graph.ops.nn_common import (
    AUTO_PAD,
    FLOAT_TYPES,
    WindowGeometry,
    attrs_of,
    broadcasts_to,
    check_nonempty,
    conv_nd,
    conv_transpose_nd,
    fail,
    in_type,
    norm_axis,
    pad_spatial,
    pool_counts,
    prod,
    ref_attrs,
    same_dtype,
    shape_str,
    spatial_attrs,
    window_geometry,
    windows,
)
from toolchain.graph.ops.registry import (
    REQUIRED,
    Attr,
    OpDef,
    PatternKind,
    broadcast_shapes,
    elementwise_flops,
)


def _positive(v: int) -> str | None:
    return None if v >= 1 else "must be >= 1"


def _ints_at_least(lo: int) -> Any:
    def check(v: tuple[int, ...]) -> str | None:
        return None if all(x >= lo for x in v) else f"every value must be >= {lo}"
    return check


def window_attrs(*, kernel_required: bool) -> tuple[Attr, ...]:
    """The window attributes of convolution and pooling ops (auto_pad … strides)."""
    return (
        Attr("auto_pad", "string", "NOTSET", choices=AUTO_PAD),
        Attr("dilations", "ints", (), check=_ints_at_least(1)),
        Attr("kernel_shape", "ints", REQUIRED if kernel_required else (),
             check=_ints_at_least(1)),
        Attr("pads", "ints", (), check=_ints_at_least(0)),
        Attr("strides", "ints", (), check=_ints_at_least(1)),
    )


# -- Conv --------------------------------------------------------------------------------------

def _conv_operands(node: Node) -> tuple[dict[str, Any], TensorType, TensorType]:
    """Attributes, X and W of a Conv or ConvTranspose: floats of one dtype, both of rank
    N+2 (N >= 1 spatial axes)."""
    a = attrs_of(node)
    x = in_type(node, 0, "X", FLOAT_TYPES)
    w = in_type(node, 1, "W", FLOAT_TYPES)
    same_dtype(node, ("X", x), ("W", w))
    if len(x.shape) < 3 or len(w.shape) != len(x.shape):
        raise fail(node, f"X {shape_str(x.shape)} and W {shape_str(w.shape)} must both have "
                   "rank N+2 (batch, channels, N spatial axes), N >= 1")
    return a, x, w


def _conv_geometry(node: Node):
    a, x, w = _conv_operands(node)
    g = a["group"]
    c, m = x.shape[1], w.shape[0]
    if c % g or m % g:
        raise fail(node, f"group = {g} must divide the input channels ({c}) and the output "
                   f"channels ({m})")
    if w.shape[1] * g != c:
        raise fail(node, f"W {shape_str(w.shape)} expects {w.shape[1] * g} input channels "
                   f"(W.shape[1] * group = {w.shape[1]} * {g}) but X {shape_str(x.shape)} has {c}")
    kernel = tuple(w.shape[2:])
    if a["kernel_shape"] and tuple(a["kernel_shape"]) != kernel:
        raise fail(node, f"kernel_shape {list(a['kernel_shape'])} does not match the weight "
                   f"shape {shape_str(w.shape)} (spatial part {shape_str(kernel)})")
    strides, dil, pads = spatial_attrs(node, a, len(kernel), kernel)
    geom = window_geometry(x.shape[2:], kernel, strides=strides, dilations=dil, pads=pads,
                           auto_pad=a["auto_pad"])
    check_nonempty(node, geom, x.shape)
    bias = node.input(2)
    if bias is not None and (tuple(bias.shape) != (m,) or bias.dtype != x.dtype):
        raise fail(node, f"bias B {bias.dtype}{shape_str(bias.shape)} must be {x.dtype}[{m}]")
    return a, x, w, geom


def _conv_infer(node: Node) -> list[TensorType]:
    _, x, w, geom = _conv_geometry(node)
    return [TensorType((x.shape[0], w.shape[0]) + geom.out, x.dtype)]


def _conv_ref(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    a = ref_attrs("Conv", attrs)
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    kernel = w.shape[2:]
    nsp = len(kernel)
    strides = a["strides"] or (1,) * nsp
    dil = a["dilations"] or (1,) * nsp
    geom = window_geometry(x.shape[2:], kernel, strides=strides, dilations=dil,
                           pads=a["pads"] or (0,) * 2 * nsp, auto_pad=a["auto_pad"])
    return [conv_nd(x, w, b, group=a["group"], strides=strides, dilations=dil, geom=geom)]


def _conv_flops(node: Node) -> int:
    w = node.inputs[1]
    assert w is not None
    # each output element: C/group * prod(K) multiply-adds
    return 2 * node.outputs[0].size * prod(w.shape[1:])


def _conv() -> OpDef:
    return OpDef(
        "Conv", inputs=("X", "W", "B?"), pattern=PatternKind.COMPLEX_OUT_FUSABLE,
        attrs=window_attrs(kernel_required=False) + (Attr("group", "int", 1, check=_positive),),
        infer=_conv_infer, reference=_conv_ref, flops=_conv_flops,
        doc="N-D grouped convolution (cross-correlation), NC* layout",
    )


# -- ConvTranspose -----------------------------------------------------------------------------

def _convt_geometry(a: Mapping[str, Any], node: Node | None, xs: Sequence[int],
                    ws: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...], tuple, tuple]:
    """(output spatial, pads_begin, strides, dilations) of a ConvTranspose."""
    kernel = tuple(ws[2:])
    nsp = len(kernel)
    spatial = tuple(xs[2:])
    strides = tuple(a["strides"] or (1,) * nsp)
    dil = tuple(a["dilations"] or (1,) * nsp)
    pads = tuple(a["pads"] or (0,) * 2 * nsp)
    opad = tuple(a["output_padding"] or (0,) * nsp)
    if node is not None:
        spatial_attrs(node, a, nsp, kernel)
        if len(opad) != nsp:
            raise fail(node, f"attribute output_padding = {list(opad)} must have {nsp} values")
        if any(p >= max(s, d) for p, s, d in zip(opad, strides, dil, strict=True)):
            raise fail(node, f"output_padding {list(opad)} must be smaller than the stride "
                       f"{list(strides)} or the dilation {list(dil)} on each axis")
    full = [st * (s - 1) + op + (k - 1) * d + 1
            for st, s, op, k, d in zip(strides, spatial, opad, kernel, dil, strict=True)]
    oshape = tuple(a["output_shape"])
    if len(oshape) == nsp + 2:
        oshape = oshape[2:]
    if oshape:
        if node is not None and len(oshape) != nsp:
            raise fail(node, f"attribute output_shape = {list(a['output_shape'])} must have "
                       f"{nsp} values (the spatial output shape)")
        out = oshape
        totals = [f - o for f, o in zip(full, out, strict=True)]
        if a["auto_pad"] == "SAME_UPPER":
            pb = tuple(t // 2 for t in totals)
        else:
            pb = tuple(t - t // 2 for t in totals)
    elif a["auto_pad"] in ("SAME_UPPER", "SAME_LOWER"):
        out = tuple(s * st for s, st in zip(spatial, strides, strict=True))
        totals = [f - o for f, o in zip(full, out, strict=True)]
        if a["auto_pad"] == "SAME_UPPER":
            pb = tuple(t // 2 for t in totals)
        else:
            pb = tuple(t - t // 2 for t in totals)
    elif a["auto_pad"] == "VALID":
        out, pb = tuple(full), (0,) * nsp
    else:
        out = tuple(f - pads[i] - pads[nsp + i] for i, f in enumerate(full))
        pb = pads[:nsp]
    return out, pb, strides, dil


def _convt_infer(node: Node) -> list[TensorType]:
    a, x, w = _conv_operands(node)
    g = a["group"]
    if x.shape[1] % g or x.shape[1] != w.shape[0]:
        raise fail(node, f"W {shape_str(w.shape)} must have X's {x.shape[1]} input channels "
                   f"first, and group = {g} must divide them")
    if a["kernel_shape"] and tuple(a["kernel_shape"]) != tuple(w.shape[2:]):
        raise fail(node, f"kernel_shape {list(a['kernel_shape'])} does not match the weight "
                   f"shape {shape_str(w.shape)}")
    out, _, _, _ = _convt_geometry(a, node, x.shape, w.shape)
    if any(o <= 0 for o in out):
        raise fail(node, f"output spatial shape {shape_str(out)} is empty; check pads "
                   f"{list(a['pads'])} against X {shape_str(x.shape)}")
    m = w.shape[1] * g
    bias = node.input(2)
    if bias is not None and (tuple(bias.shape) != (m,) or bias.dtype != x.dtype):
        raise fail(node, f"bias B {bias.dtype}{shape_str(bias.shape)} must be {x.dtype}[{m}]")
    return [TensorType((x.shape[0], m) + tuple(out), x.dtype)]


def _convt_ref(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    a = ref_attrs("ConvTranspose", attrs)
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    out, pb, strides, dil = _convt_geometry(a, None, x.shape, w.shape)
    return [conv_transpose_nd(x, w, b, group=a["group"], strides=strides, dilations=dil,
                              pads_begin=pb, out=out)]


def _convt_flops(node: Node) -> int:
    x, w = node.inputs[0], node.inputs[1]
    assert x is not None and w is not None
    return 2 * x.size * prod(w.shape[1:])


def _conv_transpose() -> OpDef:
    return OpDef(
        "ConvTranspose", inputs=("X", "W", "B?"), pattern=PatternKind.COMPLEX_OUT_FUSABLE,
        attrs=window_attrs(kernel_required=False) + (
            Attr("group", "int", 1, check=_positive),
            Attr("output_padding", "ints", (), check=_ints_at_least(0)),
            Attr("output_shape", "ints", (), check=_ints_at_least(1)),
        ),
        infer=_convt_infer, reference=_convt_ref, flops=_convt_flops,
        doc="N-D grouped transposed convolution",
    )


# -- MatMul / Gemm -----------------------------------------------------------------------------

_MATMUL_TYPES = FLOAT_TYPES + ("int32", "int64", "uint32", "uint64")


def _matmul_infer(node: Node) -> list[TensorType]:
    a = in_type(node, 0, "A", _MATMUL_TYPES)
    b = in_type(node, 1, "B", _MATMUL_TYPES)
    same_dtype(node, ("A", a), ("B", b))
    sa, sb = list(a.shape), list(b.shape)
    if not sa or not sb:
        raise fail(node, f"MatMul needs inputs of rank >= 1, got A {shape_str(sa)} and "
                   f"B {shape_str(sb)}")
    a2 = [1] + sa if len(sa) == 1 else sa
    b2 = sb + [1] if len(sb) == 1 else sb
    if a2[-1] != b2[-2]:
        raise fail(node, f"A {shape_str(sa)} has {a2[-1]} columns but B {shape_str(sb)} has "
                   f"{b2[-2]} rows; the inner dimensions must match")
    batch = broadcast_shapes(node, [tuple(a2[:-2]), tuple(b2[:-2])])
    out = list(batch) + ([a2[-2]] if len(sa) > 1 else []) + ([b2[-1]] if len(sb) > 1 else [])
    return [TensorType(tuple(out), a.dtype)]


def _matmul_ref(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    a, b = ins[0], ins[1]
    if a.dtype == np.float16:
        return [np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(np.float16)]
    return [np.asarray(np.matmul(a, b), dtype=a.dtype)]


def _matmul_flops(node: Node) -> int:
    a = node.inputs[0]
    assert a is not None
    return 2 * node.outputs[0].size * a.shape[-1]


def _matmul() -> OpDef:
    return OpDef(
        "MatMul", inputs=("A", "B"), pattern=PatternKind.COMPLEX_OUT_FUSABLE,
        infer=_matmul_infer, reference=_matmul_ref, flops=_matmul_flops,
        doc="numpy.matmul semantics (1-D operands, batch broadcasting)",
    )


def _gemm_infer(node: Node) -> list[TensorType]:
    at = attrs_of(node)
    a = in_type(node, 0, "A", _MATMUL_TYPES)
    b = in_type(node, 1, "B", _MATMUL_TYPES)
    same_dtype(node, ("A", a), ("B", b))
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise fail(node, f"A {shape_str(a.shape)} and B {shape_str(b.shape)} must be 2-D")
    m, ka = a.shape[::-1] if at["transA"] else a.shape
    kb, n = b.shape[::-1] if at["transB"] else b.shape
    if ka != kb:
        raise fail(node, f"inner dimensions differ: A {shape_str(a.shape)} (transA="
                   f"{at['transA']}) gives K={ka}, B {shape_str(b.shape)} (transB="
                   f"{at['transB']}) gives K={kb}")
    c = node.input(2)
    if c is not None:
        if c.dtype != a.dtype:
            raise fail(node, f"C has dtype {c.dtype} but A has {a.dtype}")
        cs = tuple(c.shape)
        if len(cs) > 2 or not broadcasts_to(cs, (m, n)):
            raise fail(node, f"C {shape_str(cs)} cannot be broadcast to the output [{m}, {n}]")
    return [TensorType((m, n), a.dtype)]


def _gemm_ref(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    at = ref_attrs("Gemm", attrs)
    a, b = ins[0], ins[1]
    c = ins[2] if len(ins) > 2 else None
    dt = a.dtype
    acc = np.float32 if dt == np.float16 else dt
    a = a.T if at["transA"] else a
    b = b.T if at["transB"] else b
    y = np.matmul(a.astype(acc), b.astype(acc))
    if at["alpha"] != 1.0:
        y = at["alpha"] * y
    if c is not None and at["beta"] != 0.0:
        y = y + (at["beta"] * c.astype(acc) if at["beta"] != 1.0 else c.astype(acc))
    return [np.asarray(y).astype(dt)]


def _gemm_flops(node: Node) -> int:
    a = node.inputs[0]
    assert a is not None
    k = a.shape[0] if attrs_of(node)["transA"] else a.shape[1]
    return 2 * node.outputs[0].size * k


def _gemm() -> OpDef:
    return OpDef(
        "Gemm", inputs=("A", "B", "C?"), pattern=PatternKind.COMPLEX_OUT_FUSABLE,
        attrs=(Attr("alpha", "float", 1.0), Attr("beta", "float", 1.0),
               Attr("transA", "int", 0, choices=(0, 1)), Attr("transB", "int", 0, choices=(0, 1))),
        infer=_gemm_infer, reference=_gemm_ref, flops=_gemm_flops,
        doc="alpha * A' @ B' + beta * C, C broadcast to [M, N]",
    )


# -- pooling -----------------------------------------------------------------------------------

_POOL_TYPES = FLOAT_TYPES + ("int8", "uint8")


def pool_geometry(node: Node, a: Mapping[str, Any], dtypes: Sequence[str]
                  ) -> tuple[TensorType, WindowGeometry]:
    """X's type and the window geometry of a pooling node (``a``: its attributes, with
    ``ceil_mode``); raises naming the node for a bad rank, pads or an empty output."""
    x = in_type(node, 0, "X", dtypes)
    kernel = tuple(a["kernel_shape"])
    if len(x.shape) != len(kernel) + 2:
        raise fail(node, f"X {shape_str(x.shape)} must have rank {len(kernel) + 2} for "
                   f"kernel_shape {list(kernel)} (batch, channels, spatial axes)")
    strides, dil, pads = spatial_attrs(node, a, len(kernel), kernel)
    if a["auto_pad"] == "NOTSET" and any(
            p >= (k - 1) * d + 1 for p, k, d in zip(pads, kernel * 2, dil * 2, strict=True)):
        raise fail(node, f"pads {list(pads)} must be smaller than the window "
                   f"(kernel_shape {list(kernel)}, dilations {list(dil)})")
    geom = window_geometry(x.shape[2:], kernel, strides=strides, dilations=dil, pads=pads,
                           auto_pad=a["auto_pad"], ceil_mode=bool(a["ceil_mode"]))
    check_nonempty(node, geom, x.shape)
    return x, geom


def pool_ref_geometry(x: np.ndarray, a: Mapping[str, Any]
                      ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...],
                                 WindowGeometry]:
    """(kernel, strides, dilations, geometry) of a pooling reference's attributes ``a``."""
    kernel = tuple(a["kernel_shape"])
    nsp = len(kernel)
    strides = tuple(a["strides"] or (1,) * nsp)
    dil = tuple(a["dilations"] or (1,) * nsp)
    geom = window_geometry(x.shape[2:], kernel, strides=strides, dilations=dil,
                           pads=a["pads"] or (0,) * 2 * nsp, auto_pad=a["auto_pad"],
                           ceil_mode=bool(a["ceil_mode"]))
    return kernel, strides, dil, geom


def _maxpool_infer(node: Node) -> list[TensorType]:
    a = attrs_of(node)
    x, geom = pool_geometry(node, a, _POOL_TYPES)
    out = (x.shape[0], x.shape[1]) + geom.out
    return [TensorType(out, x.dtype), TensorType(out, "int64")][: max(1, len(node.outputs))]


def _lowest(dtype: np.dtype) -> Any:
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _maxpool_ref(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """Returns ``[Y, Indices]``; Indices index the flattened input (row- or column-major
    over the spatial axes, per ``storage_order``), first maximum in window order."""
    a = ref_attrs("MaxPool", attrs)
    x = ins[0]
    kernel, strides, dil, geom = pool_ref_geometry(x, a)
    nsp = len(kernel)
    xp = pad_spatial(x, geom.pads_begin, geom.pads_end, _lowest(x.dtype))
    win = windows(xp, kernel, strides, dil, geom.out)
    flat = win.reshape(win.shape[: 2 + nsp] + (-1,))
    arg = np.argmax(flat, axis=-1)
    y = np.take_along_axis(flat, arg[..., None], axis=-1)[..., 0]
    # spatial coordinate of the chosen cell, per axis
    taps = np.unravel_index(arg, kernel)
    spatial = x.shape[2:]
    strides_elem = _spatial_strides(spatial, a["storage_order"])
    idx = np.zeros(arg.shape, np.int64)
    for i in range(nsp):
        shape = [1] * (2 + nsp)
        shape[2 + i] = geom.out[i]
        start = (np.arange(geom.out[i]) * strides[i] - geom.pads_begin[i]).reshape(shape)
        idx += (start + taps[i] * dil[i]) * strides_elem[i]
    nc = np.arange(x.shape[0] * x.shape[1], dtype=np.int64).reshape(
        (x.shape[0], x.shape[1]) + (1,) * nsp)
    idx += nc * prod(spatial)
    return [np.ascontiguousarray(y), idx]


def _spatial_strides(spatial: Sequence[int], storage_order: int) -> list[int]:
    n = len(spatial)
    order = range(n - 1, -1, -1) if storage_order == 0 else range(n)
    strides, acc = [0] * n, 1
    for i in order:
        strides[i] = acc
        acc *= spatial[i]
    return strides


def _pool_flops(node: Node) -> int:
    return node.outputs[0].size * prod(attrs_of(node)["kernel_shape"])


def _maxpool() -> OpDef:
    return OpDef(
        "MaxPool", inputs=("X",), num_outputs=(1, 2), pattern=PatternKind.COMPLEX_OUT_FUSABLE,
        attrs=window_attrs(kernel_required=True) + (
            Attr("ceil_mode", "int", 0, choices=(0, 1)),
            Attr("storage_order", "int", 0, choices=(0, 1)),
        ),
        infer=_maxpool_infer, reference=_maxpool_ref, flops=_pool_flops,
        doc="max pooling; optional Indices output (int64, flattened input index)",
    )


def _avgpool_infer(node: Node) -> list[TensorType]:
    a = attrs_of(node)
    x, geom = pool_geometry(node, a, FLOAT_TYPES)
    return [TensorType((x.shape[0], x.shape[1]) + geom.out, x.dtype)]


def _avgpool_ref(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    a = ref_attrs("AveragePool", attrs)
    x = ins[0]
    kernel, strides, dil, geom = pool_ref_geometry(x, a)
    nsp = len(kernel)
    acc = np.float64 if x.dtype == np.float64 else np.float32
    xp = pad_spatial(x.astype(acc), geom.pads_begin, geom.pads_end, 0)
    win = windows(xp, kernel, strides, dil, geom.out)
    total = win.sum(axis=tuple(range(2 + nsp, 2 + 2 * nsp)))
    counts = pool_counts(x.shape[2:], kernel, geom, strides, dil,
                         include_pad=bool(a["count_include_pad"]))
    return [(total / np.maximum(counts, 1)).astype(x.dtype)]


def _avgpool() -> OpDef:
    return OpDef(
        "AveragePool", inputs=("X",), pattern=PatternKind.COMPLEX_OUT_FUSABLE,
        attrs=window_attrs(kernel_required=True) + (
            Attr("ceil_mode", "int", 0, choices=(0, 1)),
            Attr("count_include_pad", "int", 0, choices=(0, 1)),
        ),
        infer=_avgpool_infer, reference=_avgpool_ref, flops=_pool_flops,
        doc="average pooling; padding cells count only with count_include_pad",
    )


def _global_pool(name: str, fn: Any, dtypes: Sequence[str]) -> OpDef:
    def infer(node: Node) -> list[TensorType]:
        x = in_type(node, 0, "X", dtypes)
        if len(x.shape) < 3:
            raise fail(node, f"X {shape_str(x.shape)} must have rank >= 3 "
                       "(batch, channels, spatial axes)")
        return [TensorType(x.shape[:2] + (1,) * (len(x.shape) - 2), x.dtype)]

    def reference(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x = ins[0]
        axes = tuple(range(2, x.ndim))
        acc = x.astype(np.float32) if x.dtype == np.float16 else x
        return [np.asarray(fn(acc, axis=axes, keepdims=True)).astype(x.dtype)]

    def flops(node: Node) -> int:
        x = node.inputs[0]
        assert x is not None
        return x.size

    return OpDef(name, inputs=("X",), pattern=PatternKind.COMPLEX_OUT_FUSABLE, infer=infer,
                 reference=reference, flops=flops, doc=f"{name}: reduce every spatial axis")


# -- normalisation -----------------------------------------------------------------------------

def _param(node: Node, i: int, what: str, shape: tuple[int, ...], dtypes: Sequence[str]) -> None:
    t = in_type(node, i, what, dtypes)
    if tuple(t.shape) != shape:
        raise fail(node, f"input {i} ({what}) has shape {shape_str(t.shape)}, expected "
                   f"{shape_str(shape)}")


def _bn_infer(node: Node) -> list[TensorType]:
    a = attrs_of(node)
    if a["training_mode"]:
        raise UnsupportedError(f"{node.describe()}: training_mode = 1 is not supported: Kiln "
                               "compiles inference graphs; export the model in eval mode "
                               "(training_mode = 0)")
    x = in_type(node, 0, "X", FLOAT_TYPES)
    if len(x.shape) < 2:
        raise fail(node, f"X {shape_str(x.shape)} must have rank >= 2 (batch, channels, ...)")
    c = (x.shape[1],)
    for i, what in ((1, "scale"), (2, "B"), (3, "input_mean"), (4, "input_var")):
        _param(node, i, what, c, FLOAT_TYPES)
    if len(node.outputs) > 1:
        raise fail(node, f"{len(node.outputs)} outputs given; running_mean/running_var exist "
                   "only in training mode, which Kiln does not support")
    return [x]


def _bn_ref(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    a = ref_attrs("BatchNormalization", attrs)
    if a["training_mode"]:
        raise UnsupportedError("BatchNormalization: training_mode = 1 is not supported; export "
                         "the model in eval mode")
    x, scale, bias, mean, var = ins[:5]
    acc = np.float64 if x.dtype == np.float64 else np.float32
    shape = (1, -1) + (1,) * (x.ndim - 2)
    inv = scale.astype(acc) / np.sqrt(var.astype(acc) + acc(a["epsilon"]))
    y = (x.astype(acc) - mean.astype(acc).reshape(shape)) * inv.reshape(shape)
    return [(y + bias.astype(acc).reshape(shape)).astype(x.dtype)]


def _batchnorm() -> OpDef:
    return OpDef(
        "BatchNormalization", inputs=("X", "scale", "B", "input_mean", "input_var"),
        pattern=PatternKind.INJECTIVE,
        attrs=(Attr("epsilon", "float", 1e-5), Attr("momentum", "float", 0.9),
               Attr("training_mode", "int", 0, choices=(0, 1))),
        infer=_bn_infer, reference=_bn_ref, flops=lambda n: 2 * n.outputs[0].size,
        doc="inference mode: (X - mean) / sqrt(var + eps) * scale + B per channel",
    )


_STASH = {1: np.float32, 10: np.float16, 11: np.float64}
_STASH_NAME = {1: "float32", 10: "float16", 11: "float64"}


def _ln_infer(node: Node) -> list[TensorType]:
    a = attrs_of(node)
    x = in_type(node, 0, "X", FLOAT_TYPES)
    axis = norm_axis(node, a["axis"], len(x.shape))
    norm_shape = x.shape[axis:]
    for i, what in ((1, "Scale"), (2, "B")):
        v = node.input(i)
        if v is None:
            continue
        t = in_type(node, i, what, FLOAT_TYPES)
        if not broadcasts_to(t.shape, x.shape):
            raise fail(node, f"{what} {shape_str(t.shape)} cannot be broadcast to X "
                       f"{shape_str(x.shape)} (normalised shape {shape_str(norm_shape)})")
    stat = TensorType(x.shape[:axis] + (1,) * (len(x.shape) - axis), _STASH_NAME[a["stash_type"]])
    return [x, stat, stat][: max(1, len(node.outputs))]


def _ln_ref(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """Returns ``[Y, Mean, InvStdDev]`` (statistics in ``stash_type`` precision)."""
    a = ref_attrs("LayerNormalization", attrs)
    x, scale = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    st = _STASH[a["stash_type"]]
    axis = a["axis"] + x.ndim if a["axis"] < 0 else a["axis"]
    axes = tuple(range(axis, x.ndim))
    xs = x.astype(st)
    mean = xs.mean(axis=axes, keepdims=True)
    d = xs - mean
    inv = (1.0 / np.sqrt((d * d).mean(axis=axes, keepdims=True) + st(a["epsilon"]))).astype(st)
    y = (d * inv).astype(x.dtype) * scale
    if bias is not None:
        y = y + bias
    return [y.astype(x.dtype), mean.astype(st), inv]


def _layernorm() -> OpDef:
    return OpDef(
        "LayerNormalization", inputs=("X", "Scale", "B?"), num_outputs=(1, 3),
        pattern=PatternKind.OPAQUE,
        attrs=(Attr("axis", "int", -1), Attr("epsilon", "float", 1e-5),
               Attr("stash_type", "int", 1, choices=tuple(_STASH))),
        infer=_ln_infer, reference=_ln_ref, flops=lambda n: 5 * n.outputs[0].size,
        doc="normalise over axes [axis, rank); optional Mean and InvStdDev outputs",
    )


def _in_infer(node: Node) -> list[TensorType]:
    attrs_of(node)
    x = in_type(node, 0, "input", FLOAT_TYPES)
    if len(x.shape) < 3:
        raise fail(node, f"input {shape_str(x.shape)} must have rank >= 3 "
                   "(batch, channels, spatial axes)")
    _param(node, 1, "scale", (x.shape[1],), FLOAT_TYPES)
    _param(node, 2, "B", (x.shape[1],), FLOAT_TYPES)
    return [x]


def _in_ref(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    a = ref_attrs("InstanceNormalization", attrs)
    x, scale, bias = ins[:3]
    acc = np.float64 if x.dtype == np.float64 else np.float32
    axes = tuple(range(2, x.ndim))
    xs = x.astype(acc)
    mean = xs.mean(axis=axes, keepdims=True)
    var = ((xs - mean) ** 2).mean(axis=axes, keepdims=True)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = (xs - mean) / np.sqrt(var + acc(a["epsilon"]))
    y = y * scale.astype(acc).reshape(shape) + bias.astype(acc).reshape(shape)
    return [y.astype(x.dtype)]


def _instancenorm() -> OpDef:
    return OpDef(
        "InstanceNormalization", inputs=("input", "scale", "B"), pattern=PatternKind.OPAQUE,
        attrs=(Attr("epsilon", "float", 1e-5),),
        infer=_in_infer, reference=_in_ref, flops=lambda n: 5 * n.outputs[0].size,
        doc="normalise each (batch, channel) over the spatial axes",
    )


# -- softmax -----------------------------------------------------------------------------------

def _softmax_op(name: str, log: bool) -> OpDef:
    def infer(node: Node) -> list[TensorType]:
        a = attrs_of(node)
        x = in_type(node, 0, "input", FLOAT_TYPES)
        if not x.shape:
            raise fail(node, "input must have rank >= 1")
        norm_axis(node, a["axis"], len(x.shape))
        return [x]

    def reference(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
        a = ref_attrs(name, attrs)
        x = ins[0]
        xs = x.astype(np.float32) if x.dtype == np.float16 else x
        shifted = xs - xs.max(axis=a["axis"], keepdims=True)
        if log:
            y = shifted - np.log(np.exp(shifted).sum(axis=a["axis"], keepdims=True))
        else:
            e = np.exp(shifted)
            y = e / e.sum(axis=a["axis"], keepdims=True)
        return [y.astype(x.dtype)]

    return OpDef(
        name, inputs=("input",), pattern=PatternKind.OPAQUE, attrs=(Attr("axis", "int", -1),),
        infer=infer, reference=reference, flops=lambda n: 4 * elementwise_flops(n),
        # opset < 13 (input coerced to 2-D at axis) is rewritten by the frontend into
        # Reshape -> op(axis=-1) -> Reshape, so every opset is handled
        min_opset=1,
        doc=f"{name} over one axis (opset-13 semantics; the frontend rewrites older opsets)",
    )


#: this family's ops (registered by the op table, ``registry.builtin_ops``)
OPS: tuple[OpDef, ...] = (
    _conv(), _conv_transpose(), _matmul(), _gemm(), _maxpool(), _avgpool(),
    _global_pool("GlobalAveragePool", np.mean, FLOAT_TYPES),
    _global_pool("GlobalMaxPool", np.max, FLOAT_TYPES),
    _batchnorm(), _layernorm(), _instancenorm(),
    _softmax_op("Softmax", log=False), _softmax_op("LogSoftmax", log=True),
)
