"""Constants and plumbing: Constant, ConstantOfShape, Shape, Identity, Dropout.

Constant, ConstantOfShape and Shape are computable at compile time (Shape reads only its
input's static shape, see :func:`shape_result`), so constant folding normally removes
them; Identity and inference-mode Dropout are removed by simplification.  All are
INJECTIVE; Identity and Dropout are ``elementwise``, and Identity is a ``view`` too.

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ops import get_op
    >>> get_op("Shape").reference([np.zeros((2, 3, 4), np.float32)], {"start": -2})
    [array([3, 4])]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from toolchain.errors import ModelError, UnsupportedError
from toolchain.graph.ir import Node, TensorType, dtype_of
from toolchain.graph.ops.common import (
    ALL_TYPES,
    FLOAT_TYPES,
    check_dtype,
    check_tensor_attr,
    defop,
    input_value,
    tensor_attr,
)
from toolchain.graph.ops.registry import Attr, OpDef, PatternKind, const_input

INJ = PatternKind.INJECTIVE


def _no_strings(value: Any) -> str | None:
    return "string tensors are not supported by Kiln"


def _no_sparse(value: Any) -> str | None:
    return "sparse tensors are not supported by Kiln; store the constant densely"


# -- Constant -------------------------------------------------------------------------------

_CONSTANT_ATTRS = ("value", "value_float", "value_floats", "value_int", "value_ints")


def constant_value(attrs: dict[str, Any], where: str = "Constant") -> np.ndarray:
    """The array a Constant node with (normalised) ``attrs`` produces.

    >>> constant_value({"value_ints": (1, 2)})
    array([1, 2])
    """
    given = [k for k in (*_CONSTANT_ATTRS, "value_string", "value_strings", "sparse_value")
             if attrs.get(k) is not None]
    if len(given) != 1:
        found = ", ".join(given) if given else "none"
        raise ModelError(
            f"{where}: exactly one of the attributes {', '.join(_CONSTANT_ATTRS)} must be "
            f"given (found: {found})"
        )
    key = given[0]
    v = attrs[key]
    if key == "value":
        arr = tensor_attr(v)
        dtype_of(arr)  # raises for a dtype Kiln lacks
        return arr
    if key == "value_float":
        return np.array(v, dtype=np.float32)
    if key == "value_floats":
        return np.array(v, dtype=np.float32).reshape(len(v))
    if key == "value_int":
        return np.array(v, dtype=np.int64)
    if key == "value_ints":
        return np.array(v, dtype=np.int64).reshape(len(v))
    raise ModelError(f"{where}: attribute {key!r}: {_no_strings(v)}")  # pragma: no cover


def _constant() -> OpDef:
    def infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
        arr = constant_value(attrs, node.describe())
        return [TensorType(arr.shape, dtype_of(arr))]

    return defop(
        "Constant", (), INJ,
        attrs=(
            Attr("value", "tensor", None, check=check_tensor_attr),
            Attr("value_float", "float", None),
            Attr("value_floats", "floats", None),
            Attr("value_int", "int", None),
            Attr("value_ints", "ints", None),
            Attr("value_string", "string", None, check=_no_strings),
            Attr("value_strings", "strings", None, check=_no_strings),
            Attr("sparse_value", "tensor", None, check=_no_sparse),
        ),
        infer=infer, reference=lambda ins, attrs: [constant_value(attrs).copy()],
        flops=lambda node: 0, min_opset=1,
        doc="exactly one of value (tensor), value_float(s) (float32), value_int(s) (int64)",
    )


# -- ConstantOfShape ------------------------------------------------------------------------

def _fill_value(attrs: dict[str, Any], where: str) -> np.ndarray:
    v = attrs.get("value")
    if v is None:
        return np.zeros((), np.float32)
    arr = tensor_attr(v)
    if arr.size != 1:
        raise ModelError(
            f"{where}: attribute 'value' must hold exactly one element, got shape "
            f"{list(arr.shape)}"
        )
    return arr.reshape(())


def _target_shape(node: Node, data: np.ndarray) -> tuple[int, ...]:
    if data.ndim != 1 or data.dtype != np.int64:
        raise ModelError(
            f"{node.describe()}: input 0 (input) must be a 1-D int64 shape, got "
            f"{data.dtype}{list(data.shape)}"
        )
    if (data < 0).any():
        raise ModelError(f"{node.describe()}: shape {data.tolist()} has a negative dimension")
    return tuple(int(d) for d in data)


def _constant_of_shape() -> OpDef:
    def infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
        input_value(node, 0, "input")
        data = const_input(node, 0, "shape")
        assert data is not None  # required input, checked by defop
        fill = _fill_value(attrs, node.describe())
        return [TensorType(_target_shape(node, data), dtype_of(fill))]

    def ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
        fill = _fill_value(attrs, "ConstantOfShape")
        shape = tuple(int(d) for d in np.asarray(ins[0]).reshape(-1))
        return [np.full(shape, fill, dtype=fill.dtype)]

    return defop(
        "ConstantOfShape", ("input",), INJ,
        attrs=(Attr("value", "tensor", None, check=check_tensor_attr),),
        infer=infer, reference=ref, flops=lambda node: 0, min_opset=9, compile_time=(0,),
        doc="tensor of the constant shape `input` filled with the one-element `value` "
            "(default float32 0)",
    )


# -- Shape ----------------------------------------------------------------------------------

def _shape_slice(rank: int, start: int, end: int | None) -> slice:
    def clamp(i: int) -> int:
        return min(max(i + rank if i < 0 else i, 0), rank)

    return slice(clamp(start), clamp(rank if end is None else end))


def shape_result(node: Node) -> np.ndarray:
    """The int64 value a Shape node produces: known at compile time from static shapes.

    Constant folding may use this even when the Shape node's input is not a constant.
    """
    x = input_value(node, 0, "data")
    start = int(node.attrs.get("start", 0) or 0)
    end = node.attrs.get("end")
    return np.array(x.shape[_shape_slice(x.rank, start, None if end is None else int(end))],
                    dtype=np.int64)


def _shape() -> OpDef:
    def infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
        x = input_value(node, 0, "data")
        check_dtype(node, x, "input 0 (data)", ALL_TYPES)
        n = len(x.shape[_shape_slice(x.rank, attrs["start"], attrs.get("end"))])
        return [TensorType((n,), "int64")]

    def ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
        shape = np.shape(ins[0])
        sl = _shape_slice(len(shape), attrs["start"], attrs.get("end"))
        return [np.array(shape[sl], dtype=np.int64)]

    return defop(
        "Shape", ("data",), INJ,
        attrs=(Attr("start", "int", 0), Attr("end", "int", None)),
        infer=infer, reference=ref, flops=lambda node: 0, min_opset=1,
        doc="int64 shape of the input, dims [start, end) (negative counts from the back, "
            "clamped to [0, rank]); a compile-time constant",
    )


# -- Identity, Dropout ----------------------------------------------------------------------

def _identity() -> OpDef:
    def infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
        return [input_value(node, 0, "input").type]

    return defop(
        "Identity", ("input",), INJ, elementwise=True, view=True, infer=infer,
        reference=lambda ins, attrs: [np.array(ins[0], copy=True)],
        flops=lambda node: 0, min_opset=1, doc="copy of the input (removed by simplification)",
    )


def _check_inference_mode(node: Node) -> None:
    v = node.input(2)
    if v is None:
        return
    check_dtype(node, v, "input 2 (training_mode)", ("bool",))
    if v.data is None:
        raise ModelError(
            f"{node.describe()}: input 2 (training_mode, value {v.name!r}) must be a constant "
            "false for inference; Kiln compiles inference graphs only"
        )
    if v.data.size != 1 or bool(v.data.reshape(-1)[0]):
        # A feature Kiln lacks (not a malformed model): UnsupportedError.
        raise UnsupportedError(
            f"{node.describe()}: training_mode is true, but Kiln compiles inference graphs "
            "only; export the model in eval mode (model.eval() in PyTorch) or set "
            "training_mode to false"
        )


def _dropout() -> OpDef:
    def infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
        x = input_value(node, 0, "data")
        check_dtype(node, x, "input 0 (data)", FLOAT_TYPES)
        ratio = node.input(1)
        if ratio is not None:
            check_dtype(node, ratio, "input 1 (ratio)", FLOAT_TYPES)
        _check_inference_mode(node)
        types = [x.type, TensorType(x.shape, "bool")]
        return types[: max(1, min(len(node.outputs), 2))]

    def ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
        if ins[2] is not None and np.asarray(ins[2]).any():
            raise UnsupportedError("Dropout: training_mode is true; Kiln runs inference only")
        x = np.asarray(ins[0])
        return [x.copy(), np.ones(x.shape, dtype=np.bool_)]

    return defop(
        "Dropout", ("data", "ratio?", "training_mode?"), INJ, elementwise=True,
        attrs=(Attr("seed", "int", None),),
        infer=infer, reference=ref, num_outputs=(1, 2), flops=lambda node: 0, min_opset=1,
        doc="inference only: output = data, optional mask all true; training_mode must be "
            "absent or a constant false",
    )


#: this family's ops (registered by the op table, ``registry.builtin_ops``)
OPS: tuple[OpDef, ...] = (_constant(), _constant_of_shape(), _shape(), _identity(), _dropout())
