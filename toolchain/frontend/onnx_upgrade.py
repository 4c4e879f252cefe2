"""Upgrade older ONNX op forms to Kiln's canonical (newest-opset) form.

Kiln's graph IR follows the newest ONNX form of each op (see
:mod:`toolchain.graph.ops.registry`): operands that older opsets passed as attributes are
inputs.  The frontend parses every ONNX node into a :class:`RawNode` and passes it through
:func:`upgrade_node`, which rewrites the forms of opsets 11 .. 17 that differ from the
newest one.  Models older than opset 11 are first raised to opset 11 by
``onnx.version_converter`` (see :mod:`toolchain.frontend.onnx`).

Before / after (a ReduceSum of opset 11, whose axes are an attribute)::

    RawNode(op="ReduceSum", inputs=["x"], attrs={"axes": (1,), "keepdims": 0}, opset=11)
    -> RawNode(op="ReduceSum", inputs=["x", "r__axes"], attrs={"keepdims": 0}, opset=11)
       with a new int64 constant  r__axes = [1]

Rules (model opset ``v``):

* ``Split`` (v < 13): attribute ``split`` -> input 1; without it (v < 18) the equal split
  into the node's outputs is spelled ``num_outputs = len(outputs)``.
* ``Squeeze``, ``Unsqueeze``, ``ReduceSum`` (v < 13) and the other ``Reduce*`` ops
  (v < 18): attribute ``axes`` -> input 1.
* ``Dropout`` (v < 12): attribute ``ratio`` -> input 1 (inference ignores it anyway).
* ``DFT`` (v < 20): attribute ``axis`` (default 1) -> input 2.
* ``RoiAlign`` (v < 16): ``coordinate_transformation_mode`` defaults to
  ``output_half_pixel`` (opset 10's only behaviour; opset 16's default is ``half_pixel``).
* ``Softmax``, ``LogSoftmax``, ``Hardmax`` (v < 13): these normalised over the input
  *coerced to 2-D* at ``axis`` (default 1).  The node is marked ``legacy_2d`` and the
  frontend, which knows the input rank, emits ``Reshape -> op(axis=-1) -> Reshape`` (or
  just the op with ``axis=-1`` when ``axis`` is the last dimension).
* ``GridSample`` (v < 20): ``mode`` ``bilinear``/``bicubic`` (opset 16's names, which
  ``torch.onnx.export`` writes for ``F.grid_sample`` up to opset 19) -> ``linear``/``cubic``
  (opset 20's names for the same interpolation).
* ``Resize`` (any v): an empty constant ``roi``/``scales``/``sizes`` means "absent" in
  opset 11/12; :func:`drop_empty_operands` turns it into an absent input.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Reduce ops whose ``axes`` became an input in opset 18 (ReduceSum moved in opset 13).
REDUCE_OPS_18 = (
    "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
)

#: GridSample's opset-16 mode names and their opset-20 names (same interpolation).
GRID_SAMPLE_MODES_16 = {"bilinear": "linear", "bicubic": "cubic"}

#: Ops whose pre-13 semantics coerce the input to 2-D.
LEGACY_2D_OPS = ("Softmax", "LogSoftmax", "Hardmax")


@dataclass
class RawNode:
    """One ONNX node after attribute parsing, before it becomes a :class:`Node`.

    ``inputs``/``outputs`` are tensor names (``""`` for an absent optional input);
    ``attrs`` holds Python values (str, int, float, tuples, numpy arrays);
    ``opset`` is the model's version of the node's domain.
    """

    op: str
    name: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any]
    domain: str
    opset: int
    index: int
    legacy_2d: bool = False
    #: an older form was rewritten into the newest one (its semantics are now the newest)
    upgraded: bool = False
    notes: list[str] = field(default_factory=list)
    #: an op Kiln lacks whose inputs are all compile-time constants: its ONNX node, which
    #: the builder folds with ONNX's reference implementation (fold, then check)
    fold: Any = None

    def where(self) -> str:
        """``node 'n' (Op, opset 13)`` for messages."""
        return f"node {self.name!r} ({self.op}, opset {self.opset})"


#: ``new_const(hint, array) -> name`` registers a constant tensor and returns its name.
NewConst = Callable[[str, np.ndarray], str]


def _set_input(node: RawNode, index: int, name: str) -> None:
    while len(node.inputs) <= index:
        node.inputs.append("")
    node.inputs[index] = name


def _attr_to_input(node: RawNode, attr: str, index: int, dtype: Any,
                   new_const: NewConst) -> None:
    """Move attribute ``attr`` to input ``index`` as a 1-D constant of ``dtype``."""
    if attr not in node.attrs:
        return
    value = node.attrs.pop(attr)
    _set_input(node, index, new_const(f"{node.name}__{attr}", np.asarray(value, dtype=dtype)))
    node.notes.append(f"attribute {attr!r} moved to input {index}")


def upgrade_node(node: RawNode, new_const: NewConst) -> RawNode:
    """Rewrite ``node`` (in place, and return it) into Kiln's canonical op form.

    Example::

        >>> consts = {}
        >>> def new_const(hint, arr):
        ...     consts[hint] = arr
        ...     return hint
        >>> n = RawNode("Unsqueeze", "u", ["x"], ["y"], {"axes": (0,)}, "", 11, 0)
        >>> upgrade_node(n, new_const).inputs, consts["u__axes"]
        (['x', 'u__axes'], array([0]))
    """
    if node.domain not in ("", "ai.onnx"):
        return node
    v, op = node.opset, node.op
    if op == "Split" and v < 18:
        if v < 13:
            _attr_to_input(node, "split", 1, np.int64, new_const)
        has_split = len(node.inputs) > 1 and node.inputs[1] != ""
        if not has_split and "num_outputs" not in node.attrs:
            node.attrs["num_outputs"] = len(node.outputs)
    elif op in ("Squeeze", "Unsqueeze", "ReduceSum") and v < 13:
        _attr_to_input(node, "axes", 1, np.int64, new_const)
    elif op in REDUCE_OPS_18 and v < 18:
        _attr_to_input(node, "axes", 1, np.int64, new_const)
    elif op == "Dropout" and v < 12:
        _attr_to_input(node, "ratio", 1, np.float32, new_const)
    elif op == "DFT" and v < 20:
        node.attrs.setdefault("axis", 1)  # opset 17/19: an attribute, default 1
        _attr_to_input(node, "axis", 2, np.int64, new_const)
    elif op == "RoiAlign" and v < 16:
        # opset 10 knew only what opset 16 calls output_half_pixel
        node.attrs.setdefault("coordinate_transformation_mode", "output_half_pixel")
    elif op == "GridSample" and v < 20:
        mode = node.attrs.get("mode")
        if mode not in GRID_SAMPLE_MODES_16:
            return node
        node.attrs["mode"] = GRID_SAMPLE_MODES_16[mode]
    elif op in LEGACY_2D_OPS and v < 13:
        node.legacy_2d = True
        node.attrs.setdefault("axis", 1)
    else:
        return node
    node.upgraded = True
    return node


def drop_empty_operands(node: RawNode, constant: Callable[[str], np.ndarray | None]) -> None:
    """Resize of opset 11/12 spells an absent ``roi``/``scales``/``sizes`` as an empty
    tensor; make it an absent input instead (``constant(name)`` gives constant data)."""
    if node.op != "Resize" or node.domain not in ("", "ai.onnx"):
        return
    for i in (1, 2, 3):
        if i < len(node.inputs) and node.inputs[i]:
            data = constant(node.inputs[i])
            if data is not None and data.size == 0:
                node.inputs[i] = ""
    while node.inputs and node.inputs[-1] == "":
        node.inputs.pop()
