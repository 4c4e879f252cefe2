"""Helpers shared by op definitions (elementwise, reduce, misc, quant; nn/transform may use them).

The central piece is :func:`defop`: it builds an :class:`OpDef` whose ``infer`` checks that
required inputs are present and hands the op's rule the *normalised* attributes (defaults
filled in, values validated, errors naming the node), and whose ``reference`` does the same
for the numpy reference.  Op rules are therefore written against clean attributes::

    >>> import numpy as np
    >>> from toolchain.graph.ir import Node, Value
    >>> def infer(node, attrs):
    ...     return [node.inputs[0].type]
    >>> def reference(ins, attrs):
    ...     x = ins[0]
    ...     return [np.where(x >= 0, x, x * np.float32(attrs["alpha"])).astype(x.dtype)]
    >>> op = defop("MyLeakyRelu", ("X",), PatternKind.INJECTIVE, infer=infer,
    ...            reference=reference, attrs=(Attr("alpha", "float", 0.01),),
    ...            elementwise=True)
    >>> op.reference([np.array([-1.0, 2.0], np.float32)], {})  # alpha defaulted
    [array([-0.01,  2.  ], dtype=float32)]
    >>> x, y = Value("x", (2,), "float32"), Value("y", (2,), "float32")
    >>> op.infer(Node("MyLeakyRelu", "lr", [x], [y], {"alpha": "big"}))
    Traceback (most recent call last):
    ...
    toolchain.errors.ModelError: node 'lr' (MyLeakyRelu): attribute 'alpha' = 'big' is not a float

(Listing ``op`` in its module's ``OPS`` adds it to the op table; ``register(op)`` adds an op
defined outside Kiln at run time.)

Also here: dtype groups, the ONNX ``TensorProto`` data-type enum mapped to Kiln dtypes,
dtype checks with user-facing messages, and axis normalisation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from toolchain.errors import ModelError
from toolchain.graph.ir import Node, TensorType, Value, dtype_of
from toolchain.graph.ops.registry import Attr, OpDef, PatternKind

# -- dtype groups ---------------------------------------------------------------------------

FLOAT_TYPES: tuple[str, ...] = ("float16", "float32", "float64")
SIGNED_INT_TYPES: tuple[str, ...] = ("int8", "int16", "int32", "int64")
UNSIGNED_INT_TYPES: tuple[str, ...] = ("uint8", "uint16", "uint32", "uint64")
INT_TYPES: tuple[str, ...] = SIGNED_INT_TYPES + UNSIGNED_INT_TYPES
NUMERIC_TYPES: tuple[str, ...] = FLOAT_TYPES + INT_TYPES
ALL_TYPES: tuple[str, ...] = NUMERIC_TYPES + ("bool",)

#: ONNX ``TensorProto.DataType`` code -> Kiln dtype, for the types Kiln supports.
ONNX_TO_KILN: dict[int, str] = {
    1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
    9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64",
}
#: Kiln dtype -> ONNX ``TensorProto.DataType`` code.
KILN_TO_ONNX: dict[str, int] = {v: k for k, v in ONNX_TO_KILN.items()}

#: Names of every ONNX data-type code (for messages about the ones Kiln lacks).
ONNX_TYPE_NAMES: dict[int, str] = {
    0: "UNDEFINED", 1: "FLOAT", 2: "UINT8", 3: "INT8", 4: "UINT16", 5: "INT16", 6: "INT32",
    7: "INT64", 8: "STRING", 9: "BOOL", 10: "FLOAT16", 11: "DOUBLE", 12: "UINT32",
    13: "UINT64", 14: "COMPLEX64", 15: "COMPLEX128", 16: "BFLOAT16", 17: "FLOAT8E4M3FN",
    18: "FLOAT8E4M3FNUZ", 19: "FLOAT8E5M2", 20: "FLOAT8E5M2FNUZ", 21: "UINT4", 22: "INT4",
    23: "FLOAT4E2M1", 24: "FLOAT8E8M0", 25: "UINT2", 26: "INT2", 27: "FLOAT6E2M3",
    28: "FLOAT6E3M2",
}


def onnx_type_name(code: int) -> str:
    """``1 -> 'FLOAT'``; unknown codes read ``'<code 99>'``."""
    return ONNX_TYPE_NAMES.get(int(code), f"<code {code}>")


def check_onnx_dtype(code: int) -> str | None:
    """Attribute check: ``code`` must be an ONNX data type Kiln supports (else a message)."""
    if int(code) in ONNX_TO_KILN:
        return None
    supported = ", ".join(f"{onnx_type_name(c)} ({c})" for c in sorted(ONNX_TO_KILN))
    return (f"ONNX data type {onnx_type_name(code)} is not supported by Kiln "
            f"(supported: {supported})")


def kiln_dtype(code: int, where: str) -> str:
    """Kiln dtype of ONNX data-type ``code``; raises naming ``where`` when unsupported."""
    msg = check_onnx_dtype(code)
    if msg:
        raise ModelError(f"{where}: {msg}")
    return ONNX_TO_KILN[int(code)]


def tensor_attr(value: Any) -> np.ndarray:
    """A tensor attribute as a numpy array (accepts arrays and ONNX ``TensorProto``)."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "data_type") and hasattr(value, "dims"):
        from onnx import numpy_helper  # lazy: only needed for raw protobuf attributes

        return numpy_helper.to_array(value)
    return np.asarray(value)


def check_tensor_attr(value: Any) -> str | None:
    """Attribute check: a tensor whose dtype Kiln supports."""
    code = getattr(value, "data_type", None)
    if code is not None and int(code) not in ONNX_TO_KILN:
        return f"a tensor of ONNX data type {onnx_type_name(code)}, which Kiln does not support"
    try:
        arr = tensor_attr(value)
        dtype_of(arr)
    except (ModelError, ValueError, TypeError) as exc:
        return f"tensor of unsupported type ({exc})"
    return None


# -- inputs and dtypes ------------------------------------------------------------------------

def input_value(node: Node, i: int, name: str) -> Value:
    """Required input ``i`` of ``node``; raises naming the node when it is missing."""
    v = node.input(i)
    if v is None:
        raise ModelError(f"{node.describe()}: required input {i} ({name}) is missing")
    return v


def check_dtype(node: Node, v: Value, what: str, allowed: Iterable[str]) -> str:
    """Return ``v.dtype`` if it is one of ``allowed``; else raise naming node and operand."""
    allowed = tuple(allowed)
    if v.dtype not in allowed:
        raise ModelError(
            f"{node.describe()}: {what} (value {v.name!r}) has dtype {v.dtype}, but "
            f"{node.op} accepts only {', '.join(allowed)}; insert a Cast before it"
        )
    return v.dtype


def check_same_dtype(node: Node, values: Sequence[Value], names: Sequence[str]) -> str:
    """All ``values`` must share one dtype (ONNX type variable ``T``); return it."""
    first = values[0]
    for v, n in zip(values[1:], names[1:], strict=True):
        if v.dtype != first.dtype:
            raise ModelError(
                f"{node.describe()}: inputs {names[0]} ({first.name!r}: {first.dtype}) and "
                f"{n} ({v.name!r}: {v.dtype}) must have the same dtype; insert a Cast"
            )
    return first.dtype


def normalize_axis(node: Node, axis: int, rank: int, what: str = "axis") -> int:
    """``axis`` in ``[-rank, rank)`` mapped to ``[0, rank)``; raises naming the node."""
    if not -rank <= axis < rank:
        raise ModelError(
            f"{node.describe()}: {what} {axis} is out of range for a rank-{rank} input "
            f"(allowed {-rank}..{rank - 1})"
        )
    return axis % rank if rank else 0


# -- defining ops ---------------------------------------------------------------------------

RuleFn = Callable[[Node, dict[str, Any]], Sequence[TensorType]]
RefFn = Callable[[list[Any], dict[str, Any]], Sequence[np.ndarray]]


def _strip_none(attrs: Mapping[str, Any]) -> dict[str, Any]:
    # Normalised attrs carry ``None`` for optional attributes without a default; feeding
    # them back through validation must not read as "given as None".
    return {k: v for k, v in attrs.items() if v is not None}


def defop(
    name: str,
    inputs: tuple[str, ...],
    pattern: PatternKind | Callable[[Node], PatternKind],
    *,
    infer: RuleFn,
    reference: RefFn,
    attrs: tuple[Attr, ...] = (),
    flops: Callable[[Node], int] | None = None,
    num_outputs: int | tuple[int, int] = 1,
    min_opset: int = 1,
    doc: str = "",
    elementwise: bool = False,
    view: bool = False,
    in_place: bool | None = None,
    layout_agnostic: bool | None = None,
    compile_time: tuple[int, ...] = (),
) -> OpDef:
    """Build an :class:`OpDef` whose rules receive normalised attributes.

    ``infer(node, attrs)`` and ``reference(inputs, attrs)`` get the attributes with
    defaults filled in; ``reference`` gets its inputs padded with ``None`` up to the
    number of declared (non-variadic) inputs.  The traits (``elementwise``, ``compile_time``
    …) are the ``OpDef``'s (see :mod:`toolchain.graph.ops.registry`).
    """
    opdef: OpDef

    def infer_fn(node: Node) -> Sequence[TensorType]:
        for i, in_name in enumerate(inputs):
            if not in_name.endswith(("?", "*")) and node.input(i) is None:
                raise ModelError(
                    f"{node.describe()}: required input {i} ({in_name}) is missing"
                )
        if opdef.max_inputs is not None and len(node.inputs) > opdef.max_inputs:
            raise ModelError(
                f"{node.describe()}: got {len(node.inputs)} inputs, but {name} takes at most "
                f"{opdef.max_inputs} ({', '.join(inputs)})"
            )
        norm = opdef.normalize_attrs(_strip_none(node.attrs), node.describe())
        return list(rule(node, norm))

    def reference_fn(ins: list[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
        args = list(ins)
        if opdef.max_inputs is not None:
            args += [None] * (opdef.max_inputs - len(args))
        norm = opdef.normalize_attrs(_strip_none(attrs))
        return list(ref(args, norm))

    rule, ref = infer, reference
    opdef = OpDef(
        name, inputs=inputs, infer=infer_fn, reference=reference_fn, pattern=pattern,
        attrs=attrs, num_outputs=num_outputs, flops=flops, min_opset=min_opset, doc=doc,
        elementwise=elementwise, view=view, in_place=in_place, layout_agnostic=layout_agnostic,
        compile_time=compile_time,
    )
    return opdef


def per_element_flops(cost: int) -> Callable[[Node], int]:
    """FLOP rule: ``cost`` operations per output element."""

    def flops(node: Node) -> int:
        return cost * sum(o.size for o in node.outputs)

    return flops
