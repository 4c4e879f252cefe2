"""One ONNX ``NodeProto`` -> :class:`~toolchain.frontend.onnx_upgrade.RawNode`, and what
Kiln cannot do with it.

Shared by the model's top-level nodes (:mod:`toolchain.frontend.onnx`) and the nodes of
inlined ``If``/``Loop``/``Scan`` bodies (:mod:`toolchain.frontend.onnx_control`), so both
are parsed, upgraded and checked the same way.

Example::

    >>> from onnx import helper
    >>> node = helper.make_node("Unsqueeze", ["x"], ["y"], axes=[0])
    >>> consts = {}
    >>> raw = parse_node(node, "u", 0, 11, lambda hint, a: consts.setdefault(hint, a) is a
    ...                  and hint)
    >>> raw.inputs, node_problems(raw)
    (['x', 'u__axes'], [])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from toolchain.frontend.onnx_upgrade import RawNode, upgrade_node
from toolchain.graph.ops.common import ONNX_TO_KILN
from toolchain.graph.ops.registry import get_op, has_op, refusal_reason

#: ops the frontend resolves itself (their bodies are inlined or unrolled), never registered
CONTROL_FLOW_OPS = ("If", "Loop", "Scan")


class UnsupportedTensor:
    """A tensor attribute whose dtype Kiln lacks (reported by :func:`node_problems`)."""

    def __init__(self, dtype: str) -> None:
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"<{self.dtype} tensor>"


def attr_value(attr: onnx.AttributeProto) -> Any:
    """The Python value of an attribute: str, int, float, tuples, numpy arrays; a graph
    attribute stays a ``GraphProto``.

    >>> attr_value(onnx.helper.make_attribute("mode", "linear"))
    'linear'
    """
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, onnx.TensorProto):
        if value.data_type not in ONNX_TO_KILN:
            return UnsupportedTensor(onnx.TensorProto.DataType.Name(value.data_type))
        return numpy_helper.to_array(value)
    if isinstance(value, list):
        return tuple(v.decode("utf-8", errors="replace") if isinstance(v, bytes) else v
                     for v in value)
    return value


def parse_node(node: onnx.NodeProto, name: str, index: int, opset: int,
               new_const: Callable[[str, np.ndarray], str]) -> RawNode:
    """Parse and upgrade one node of the default domain's ``opset`` (other domains keep
    ``opset`` too: they are refused by :func:`node_problems`)."""
    outputs = list(node.output)
    while outputs and outputs[-1] == "":
        outputs.pop()
    inputs = list(node.input)
    while inputs and inputs[-1] == "":
        inputs.pop()
    raw = RawNode(node.op_type, name, inputs, outputs,
                  {a.name: attr_value(a) for a in node.attribute}, node.domain, opset, index)
    return upgrade_node(raw, new_const)


def node_problems(raw: RawNode) -> list[str]:
    """What Kiln cannot do with ``raw`` (empty when it is supported), for the one
    :class:`~toolchain.errors.UnsupportedError` that lists every problem of a model."""
    if raw.fold is not None:
        return []
    if raw.domain not in ("", "ai.onnx"):
        return [f"op domain {raw.domain!r} is not supported (Kiln supports the default "
                "ONNX domain only)"]
    if raw.op in CONTROL_FLOW_OPS:
        return []  # resolved when the graph is built (onnx_control), or refused there
    if not has_op(raw.op):
        return [refusal_reason(raw.op) or "op not supported by Kiln"]
    opdef = get_op(raw.op)
    problems = []
    if raw.opset < opdef.min_opset and not raw.upgraded:
        problems.append(f"Kiln supports {raw.op} from opset {opdef.min_opset}")
    for key, value in raw.attrs.items():
        if isinstance(value, UnsupportedTensor):
            problems.append(f"attribute {key!r} is a {value.dtype} tensor, a dtype Kiln "
                            "does not support")
    problems += opdef.attr_errors({k: v for k, v in raw.attrs.items()
                                   if not isinstance(v, UnsupportedTensor)})
    n_in = len(raw.inputs)
    if n_in < opdef.min_inputs or (opdef.max_inputs is not None and n_in > opdef.max_inputs):
        problems.append(f"{n_in} inputs given; {raw.op} takes "
                        f"{opdef.min_inputs}..{opdef.max_inputs or 'any'} "
                        f"({', '.join(opdef.inputs)})")
    hi = opdef.num_outputs if isinstance(opdef.num_outputs, int) else opdef.num_outputs[1]
    if hi is not None and len(raw.outputs) > hi:
        problems.append(f"{len(raw.outputs)} outputs given; Kiln's {raw.op} produces at "
                        f"most {hi}")
    return problems
