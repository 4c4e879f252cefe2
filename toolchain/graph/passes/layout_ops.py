"""Layouts and the ops the layout pass introduces: ``LayoutTransform``, ``LayoutConv``,
``LayoutPool``.

Data layouts of rank-4 activations (the model's own layout is always ``NCHW``):

* ``NCHW`` — ONNX's layout;
* ``NHWC`` — channels last (Cortex-M / CMSIS-NN);
* ``NCHW{b}c`` — channel-blocked, shape ``(N, C/b, H, W, b)``: element ``(n, c, h, w)`` is at
  ``[n, c // b, h, w, c % b]``; the inner ``b`` channels are one SIMD vector on AVX.

Kernel (convolution weight) layouts: ``OIHW`` (ONNX), ``OHWI`` (with ``NHWC``), and
``OIHW{i}i{o}o`` with shape ``(O/o, I/i, KH, KW, i, o)`` (with ``NCHW{b}c``).

The ops (``OPS``, in the op table of :mod:`toolchain.graph.ops.registry`):

* ``LayoutTransform(data, src_layout=, dst_layout=)`` — INJECTIVE; a pure data movement;
* ``LayoutConv(X, W, B?, <Conv attrs>, data_layout=, out_layout=, kernel_layout=)`` — a 2-D
  ``Conv`` whose input, output and weight are in the given layouts (COMPLEX_OUT_FUSABLE);
* ``LayoutPool(X, pool=, layout=, <pool attrs>)`` — a 2-D ``MaxPool``/``AveragePool``/
  ``GlobalAveragePool``/``GlobalMaxPool`` in ``layout`` (COMPLEX_OUT_FUSABLE).

Their references convert to ``NCHW``, run the registry's ``Conv``/pool reference and
convert back, so they mean exactly what the original op meant.

Example::

    >>> import numpy as np
    >>> x = np.arange(16, dtype=np.float32).reshape(1, 4, 2, 2)
    >>> blocked = to_layout(x, "NCHW2c")
    >>> blocked.shape, bool((from_layout(blocked, "NCHW2c") == x).all())
    ((1, 2, 2, 2, 2), True)
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from toolchain.errors import ModelError
from toolchain.graph.ir import Node, TensorType, Value, dtype_of
from toolchain.graph.ops.registry import Attr, OpDef, PatternKind, get_op

_BLOCKED = re.compile(r"NCHW(\d+)c")
_BLOCKED_KERNEL = re.compile(r"OIHW(\d+)i(\d+)o")


def block_of(layout: str) -> int | None:
    """The channel block of ``NCHW{b}c`` (``None`` for other layouts)."""
    m = _BLOCKED.fullmatch(layout)
    return int(m.group(1)) if m else None


def check_layout(layout: str, where: str = "") -> None:
    """Raise a :class:`ModelError` unless ``layout`` is a known data layout."""
    if layout not in ("NCHW", "NHWC") and block_of(layout) is None:
        raise ModelError(f"{where}layout {layout!r} is not one of NCHW, NHWC, NCHW<b>c")


def layout_shape(shape: Sequence[int], layout: str) -> tuple[int, ...]:
    """The shape of an ``NCHW`` tensor of ``shape`` when stored in ``layout``."""
    n, c, h, w = shape
    if layout == "NCHW":
        return (n, c, h, w)
    if layout == "NHWC":
        return (n, h, w, c)
    b = block_of(layout)
    if b is None or c % b:
        raise ModelError(f"layout {layout!r} cannot hold {c} channels (the block must divide "
                         "the channel count)")
    return (n, c // b, h, w, b)


def nchw_shape(shape: Sequence[int], layout: str) -> tuple[int, ...]:
    """The ``NCHW`` shape of a tensor of ``shape`` stored in ``layout``."""
    if layout == "NCHW":
        return tuple(shape)
    if layout == "NHWC":
        n, h, w, c = shape
        return (n, c, h, w)
    n, cb, h, w, b = shape
    return (n, cb * b, h, w)


def to_layout(x: np.ndarray, layout: str) -> np.ndarray:
    """An ``NCHW`` array stored in ``layout`` (a contiguous copy)."""
    if layout == "NCHW":
        return np.ascontiguousarray(x)
    if layout == "NHWC":
        return np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    n, c, h, w = x.shape
    b = layout_shape(x.shape, layout)[-1]
    return np.ascontiguousarray(x.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2))


def from_layout(x: np.ndarray, layout: str) -> np.ndarray:
    """An array stored in ``layout`` back in ``NCHW`` (a contiguous copy)."""
    if layout == "NCHW":
        return np.ascontiguousarray(x)
    if layout == "NHWC":
        return np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    n, cb, h, w, b = x.shape
    return np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3).reshape(n, cb * b, h, w))


def kernel_to_layout(w: np.ndarray, layout: str) -> np.ndarray:
    """An ``OIHW`` weight in ``layout`` (``OIHW``, ``OHWI``, ``OIHW{i}i{o}o``)."""
    if layout == "OIHW":
        return np.ascontiguousarray(w)
    if layout == "OHWI":
        return np.ascontiguousarray(w.transpose(0, 2, 3, 1))
    m = _BLOCKED_KERNEL.fullmatch(layout)
    if m is None:
        raise ModelError(f"kernel layout {layout!r} is not one of OIHW, OHWI, OIHW<i>i<o>o")
    ib, ob = int(m.group(1)), int(m.group(2))
    o, i, kh, kw = w.shape
    return np.ascontiguousarray(
        w.reshape(o // ob, ob, i // ib, ib, kh, kw).transpose(0, 2, 4, 5, 3, 1))


def kernel_from_layout(w: np.ndarray, layout: str) -> np.ndarray:
    """A weight stored in ``layout`` back in ``OIHW``."""
    if layout == "OIHW":
        return w
    if layout == "OHWI":
        return np.ascontiguousarray(w.transpose(0, 3, 1, 2))
    ob_, ib_, kh, kw, ib, ob = w.shape
    return np.ascontiguousarray(w.transpose(0, 5, 1, 4, 2, 3).reshape(ob_ * ob, ib_ * ib, kh, kw))


def _kernel_oihw_shape(shape: Sequence[int], layout: str) -> tuple[int, ...]:
    if layout == "OIHW":
        return tuple(shape)
    if layout == "OHWI":
        o, kh, kw, i = shape
        return (o, i, kh, kw)
    ob_, ib_, kh, kw, ib, ob = shape
    return (ob_ * ob, ib_ * ib, kh, kw)


# -- LayoutTransform --------------------------------------------------------------------------
def _transform_infer(node: Node) -> list[TensorType]:
    src, dst = node.attrs["src_layout"], node.attrs["dst_layout"]
    for lay in (src, dst):
        check_layout(lay, f"{node.describe()}: ")
    x = node.inputs[0]
    return [TensorType(layout_shape(nchw_shape(x.shape, src), dst), x.dtype)]


def _transform_ref(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    return [to_layout(from_layout(ins[0], attrs["src_layout"]), attrs["dst_layout"])]


_LAYOUT_TRANSFORM = OpDef(
    "LayoutTransform", inputs=("data",), pattern=PatternKind.INJECTIVE,
    infer=_transform_infer, reference=_transform_ref, flops=lambda node: 0,
    attrs=(Attr("src_layout", "string"), Attr("dst_layout", "string")),
    doc="moves a rank-4 tensor from src_layout to dst_layout (NCHW, NHWC, NCHW<b>c)",
)


# -- LayoutConv / LayoutPool --------------------------------------------------------------------
_CONV_ATTRS = ("auto_pad", "dilations", "kernel_shape", "pads", "strides", "group")
_POOL_ATTRS = (("auto_pad", "string"), ("dilations", "ints"), ("kernel_shape", "ints"),
               ("pads", "ints"), ("strides", "ints"), ("ceil_mode", "int"),
               ("count_include_pad", "int"), ("storage_order", "int"))
POOLS = ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool")


def nchw_node(node: Node) -> Node:
    """The plain ``Conv``/pool node a ``LayoutConv``/``LayoutPool`` stands for (``NCHW``
    values named like the originals; the output's type comes from the op's ``infer``)."""
    x = node.inputs[0]
    if node.op == "LayoutConv":
        w = node.inputs[1]
        ins: list[Value | None] = [
            Value(x.name, nchw_shape(x.shape, node.attrs["data_layout"]), x.dtype),
            Value(w.name, _kernel_oihw_shape(w.shape, node.attrs["kernel_layout"]), w.dtype),
            node.input(2)]
        op = "Conv"
        attrs = {k: node.attrs[k] for k in _CONV_ATTRS if k in node.attrs}
    else:
        ins = [Value(x.name, nchw_shape(x.shape, node.attrs["layout"]), x.dtype)]
        op = node.attrs["pool"]
        allowed = {a.name for a in get_op(op).attrs}
        attrs = {k: v for k, v in node.attrs.items() if k in allowed and v is not None}
    probe = Node(op, node.name, ins, [Value("out", (1,), x.dtype)], attrs)
    out_type = get_op(op).infer(probe)[0]
    return probe.replace(outputs=(Value(node.outputs[0].name if node.outputs else "out",
                                        out_type.shape, out_type.dtype),))


def _out_layout(node: Node) -> str:
    return node.attrs["out_layout"] if node.op == "LayoutConv" else node.attrs["layout"]


def _layout_infer(node: Node) -> list[TensorType]:
    inner = nchw_node(node)
    out = inner.outputs[0]
    return [TensorType(layout_shape(out.shape, _out_layout(node)), out.dtype)]


def _layout_flops(node: Node) -> int:
    inner = nchw_node(node)
    return get_op(inner.op).flops_of(inner)


def _conv_ref(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    from toolchain.graph.reference import run_node

    values = [None if a is None else Value(f"in{i}", a.shape, dtype_of(a))
              for i, a in enumerate(ins)]
    inner = nchw_node(Node("LayoutConv", "conv", values, [], attrs))
    x = from_layout(ins[0], attrs["data_layout"])
    w = kernel_from_layout(ins[1], attrs["kernel_layout"])
    bias = ins[2] if len(ins) > 2 else None
    return [to_layout(run_node(inner, [x, w, bias])[0], attrs["out_layout"])]


def _pool_ref(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    from toolchain.graph.reference import run_node

    x = from_layout(ins[0], attrs["layout"])
    node = Node("LayoutPool", "pool", [Value("x", ins[0].shape, dtype_of(ins[0]))], [], attrs)
    return [to_layout(run_node(nchw_node(node), [x])[0], attrs["layout"])]


_LAYOUT_CONV = OpDef(
    "LayoutConv", inputs=("X", "W", "B?"), pattern=PatternKind.COMPLEX_OUT_FUSABLE,
    infer=_layout_infer, reference=_conv_ref, flops=_layout_flops,
    attrs=(Attr("auto_pad", "string", "NOTSET"), Attr("dilations", "ints", ()),
           Attr("kernel_shape", "ints", ()), Attr("pads", "ints", ()),
           Attr("strides", "ints", ()), Attr("group", "int", 1),
           Attr("data_layout", "string"), Attr("out_layout", "string"),
           Attr("kernel_layout", "string")),
    doc="2-D Conv with input, output and weight in the given layouts",
)

_LAYOUT_POOL = OpDef(
    "LayoutPool", inputs=("X",), pattern=PatternKind.COMPLEX_OUT_FUSABLE,
    infer=_layout_infer, reference=_pool_ref, flops=_layout_flops,
    attrs=(Attr("pool", "string", choices=POOLS), Attr("layout", "string"))
    + tuple(Attr(name, kind, None) for name, kind in _POOL_ATTRS),
    doc="2-D pooling (pool=MaxPool|AveragePool|GlobalAveragePool|GlobalMaxPool) in a layout",
)

#: the layout pass's ops (registered by the op table, ``registry.builtin_ops``)
OPS: tuple[OpDef, ...] = (_LAYOUT_TRANSFORM, _LAYOUT_CONV, _LAYOUT_POOL)
