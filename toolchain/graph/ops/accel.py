"""Ops of a graph partitioned for an accelerator: VtaConv2d, VtaDense, VtaAdd, QRequant.

The partition pass (:func:`toolchain.vta.partition.partition`) splits each integer layer
it sends to the accelerator in two:

* **VtaConv2d** ``(x, w)`` / **VtaDense** ``(x, w)``: the int32 accumulators
  ``sum x * w`` of an int8 input (no zero point: padding reads 0), computed by the
  accelerator — the layer's program is compiled at partition time and the bundle calls it
  through the C driver. ``w`` is ``[OC, IC, K, K]`` / ``[N, K]``. Opaque: nothing fuses
  into them (their kernel is an instruction stream, not a loop nest).
  With the optional inputs ``bias``, ``multiplier`` and ``shift_pow`` (and QConv's output
  attributes) the accelerator also requantizes: the output is QRequant's (int8), computed
  by the layer's program (power-of-two scales: :mod:`toolchain.vta.requant`).
* **VtaAdd** ``(a, b)``: a QAdd (same attributes, same result) that the accelerator
  computes (power-of-two scales: both inputs through the GEMM, the requantization on the
  ALU; :func:`toolchain.vta.requant.plan_qadd`).
* **QRequant** ``(acc, bias, multiplier, shift_pow)``: the host's epilogue,
  ``clamp(requantize(acc + bias) + y_zero_point, out_min, out_max)`` with per-channel
  (``axis``) multipliers as QConv's; ``bias`` is ``[C]``, or ``[C, *spatial]`` when the
  input zero point's correction depends on the position (padding). Injective: it fuses
  with what follows (a QAdd, a pool's input side).

So ``QRequant(VtaConv2d(x, w), bias')`` equals ``QConv(x, w, bias)`` bit for bit, with
``bias'`` = ``bias - x_zero_point * (sum of w over the taps inside the image)``.

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ops import get_op
    >>> acc = np.array([[40, -40]], np.int32)
    >>> attrs = {"axis": 1, "y_zero_point": 0, "out_min": -128, "out_max": 127,
    ...          "out_dtype": "int8"}
    >>> m, s = np.array([1 << 30] * 2, np.int32), np.array([[1, 1 << 30]] * 2, np.int32)
    >>> get_op("QRequant").reference([acc, np.array([2, 0], np.int32), m, s], attrs)
    [array([[ 21, -20]], dtype=int8)]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from toolchain.errors import ModelError
from toolchain.graph.ir import Node, TensorType, Value
from toolchain.graph.ops.common import check_dtype, defop, input_value
from toolchain.graph.ops.qops import Q_TYPES, conv_out_shape, finish, qconv_acc
from toolchain.graph.ops.registry import Attr, OpDef, PatternKind

#: the output attributes of the integer ops (as QConv's)
OUT_ATTRS = (
    Attr("y_zero_point", "int", 0), Attr("out_min", "int", -128), Attr("out_max", "int", 127),
    Attr("out_dtype", "string", "int8", choices=Q_TYPES),
)


def _epilogue(node: Node, acc: TensorType, attrs: dict[str, Any]) -> TensorType:
    """The output of an accelerator layer: ``acc``, or QRequant's of it when the node has
    the requantization inputs."""
    given = [node.input(i) is not None for i in (2, 3, 4)]
    if not any(given):
        return acc
    if not all(given):
        raise ModelError(f"{node.describe()}: bias, multiplier and shift_pow go together")
    probe = Node("QRequant", node.name, [Value("acc", acc.shape, "int32"), *node.inputs[2:5]],
                 [], {**{k: attrs[k] for k in ("y_zero_point", "out_min", "out_max",
                                                "out_dtype")}, "axis": 1})
    return _requant_infer(probe, {**probe.attrs})[0]


def _with_epilogue(acc: np.ndarray, ins: list[Any], attrs: dict[str, Any]) -> np.ndarray:
    if ins[2] is None:
        return acc
    return _requant_ref([acc, *ins[2:5]], {**attrs, "axis": 1})[0]


def _vta_conv_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x, w = input_value(node, 0, "x"), input_value(node, 1, "w")
    check_dtype(node, x, "input 0 (x)", ("int8",))
    check_dtype(node, w, "input 1 (w)", ("int8",))
    if x.rank != 4 or w.rank != 4 or x.shape[1] != w.shape[1]:
        raise ModelError(f"{node.describe()}: x {list(x.shape)} and w {list(w.shape)} do not "
                         "make a 2-D convolution")
    full = {**attrs, "dilations": (1, 1)}
    return [_epilogue(node, TensorType(conv_out_shape(x.shape, w.shape, full), "int32"), attrs)]


def _vta_conv_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    full = {**attrs, "dilations": (1, 1), "group": 1, "x_zero_point": 0}
    acc = qconv_acc(np.asarray(ins[0]), np.asarray(ins[1]), full).astype(np.int32)
    return [_with_epilogue(acc, ins, attrs)]


def _vta_dense_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x, w = input_value(node, 0, "x"), input_value(node, 1, "w")
    check_dtype(node, x, "input 0 (x)", ("int8",))
    check_dtype(node, w, "input 1 (w)", ("int8",))
    if x.rank != 2 or w.rank != 2 or x.shape[1] != w.shape[1]:
        raise ModelError(f"{node.describe()}: x {list(x.shape)} and w {list(w.shape)} (which "
                         "is [N, K]) do not multiply")
    return [_epilogue(node, TensorType((x.shape[0], w.shape[0]), "int32"), attrs)]


def _vta_dense_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x, w = (np.asarray(a, np.int64) for a in ins[:2])
    return [_with_epilogue((x @ w.T).astype(np.int32), ins, attrs)]


def _requant_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    acc = input_value(node, 0, "acc")
    check_dtype(node, acc, "input 0 (acc)", ("int32",))
    ax = int(attrs["axis"])
    if not 0 <= ax < acc.rank:
        raise ModelError(f"{node.describe()}: axis {ax} is outside the rank-{acc.rank} input")
    c = acc.shape[ax]
    bias = input_value(node, 1, "bias")
    if bias.shape not in ((c,), tuple(acc.shape[ax:])):
        raise ModelError(f"{node.describe()}: bias must have shape [{c}] or "
                         f"{list(acc.shape[ax:])}, got {list(bias.shape)}")
    for i, what, shape in ((2, "multiplier", (c,)), (3, "shift_pow", (c, 2))):
        v = input_value(node, i, what)
        check_dtype(node, v, f"input {i} ({what})", ("int32",))
        if v.shape != shape:
            raise ModelError(f"{node.describe()}: {what} must have shape {list(shape)}, got "
                             f"{list(v.shape)}")
    return [TensorType(acc.shape, attrs["out_dtype"])]


def _requant_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    acc, bias, mult, sp = (np.asarray(a) for a in ins[:4])
    ax = int(attrs["axis"])
    col = (-1,) + (1,) * (acc.ndim - ax - 1)
    b = bias.reshape(bias.shape + (1,) * (acc.ndim - ax - bias.ndim))
    total = acc.astype(np.int64) + b.astype(np.int64)
    return [finish(total, mult.reshape(col), None, attrs,
                   (sp[:, 0].reshape(col), sp[:, 1].reshape(col)))]


#: VtaAdd's attributes: QAdd's
ADD_ATTRS = (
    *(Attr(n, "int", 0) for n in ("a_zero_point", "b_zero_point")),
    *(Attr(n, "int") for n in ("a_multiplier", "a_shift", "b_multiplier", "b_shift",
                               "y_multiplier", "y_shift")),
    Attr("left_shift", "int", 20), *OUT_ATTRS,
)


def _vta_add_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    from toolchain.graph.ops.registry import get_op

    return list(get_op("QAdd").infer(node))


def _vta_add_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    from toolchain.graph.ops.registry import get_op

    return list(get_op("QAdd").reference(ins, attrs))


OPS: tuple[OpDef, ...] = (
    defop("VtaConv2d", ("x", "w", "bias?", "multiplier?", "shift_pow?"), PatternKind.OPAQUE,
          attrs=(Attr("strides", "ints", (1, 1)), Attr("pads", "ints", (0, 0, 0, 0)),
                 *OUT_ATTRS),
          infer=_vta_conv_infer, reference=_vta_conv_ref,
          flops=lambda n: 2 * n.outputs[0].size * int(np.prod(n.inputs[1].shape[1:])),  # type: ignore[union-attr]
          doc="int32 accumulators of an int8 convolution (with bias, multiplier and "
              "shift_pow: requantized), computed by the accelerator"),
    defop("VtaDense", ("x", "w", "bias?", "multiplier?", "shift_pow?"), PatternKind.OPAQUE,
          attrs=OUT_ATTRS, infer=_vta_dense_infer, reference=_vta_dense_ref,
          flops=lambda n: 2 * n.outputs[0].size * int(n.inputs[1].shape[1]),  # type: ignore[union-attr]
          doc="int32 accumulators of an int8 matrix product (with bias, multiplier and "
              "shift_pow: requantized), computed by the accelerator"),
    defop("VtaAdd", ("a", "b"), PatternKind.OPAQUE, attrs=ADD_ATTRS,
          infer=_vta_add_infer, reference=_vta_add_ref,
          flops=lambda n: 8 * n.outputs[0].size,
          doc="a QAdd computed by the accelerator (power-of-two scales)"),
    defop("QRequant", ("acc", "bias", "multiplier", "shift_pow"), PatternKind.INJECTIVE,
          attrs=(Attr("axis", "int", 1), *OUT_ATTRS),
          infer=_requant_infer, reference=_requant_ref, elementwise=False,
          doc="per-channel bias add, fixed-point requantization and clamp of int32 "
              "accumulators (the host's half of an accelerator layer)"),
)
