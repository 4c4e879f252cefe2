"""Linear algebra: Det (OPAQUE).

ONNX's Det (opset 11; float16/32/64 in Kiln): the determinant of each square matrix in
the last two axes, ``[*, M, M] -> [*]``.  The reference is ``numpy.linalg.det`` in
float64, rounded once to the input dtype; the compute (:func:`toolchain.topi.linalg.det`)
is Gaussian elimination with partial pivoting in float64.

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ops import get_op
    >>> get_op("Det").reference([np.array([[2.0, 1.0], [4.0, 3.0]], np.float32)], {})
    [array(2., dtype=float32)]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from toolchain.errors import ModelError
from toolchain.graph.ir import Node, TensorType
from toolchain.graph.ops.common import FLOAT_TYPES, check_dtype, defop, input_value
from toolchain.graph.ops.registry import OpDef, PatternKind


def _det_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x = input_value(node, 0, "X")
    check_dtype(node, x, "input 0 (X)", FLOAT_TYPES)
    if x.rank < 2 or x.shape[-1] != x.shape[-2] or x.shape[-1] < 1:
        raise ModelError(f"{node.describe()}: input X {list(x.shape)} must end in a square "
                         "matrix [..., M, M] with M >= 1")
    return [TensorType(x.shape[:-2], x.dtype)]


def _det_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    return [np.asarray(np.linalg.det(x.astype(np.float64))).astype(x.dtype)]


#: this family's ops (registered by the op table, ``registry.builtin_ops``)
OPS: tuple[OpDef, ...] = (
    defop("Det", ("X",), PatternKind.OPAQUE, infer=_det_infer, reference=_det_ref,
          flops=lambda node: 2 * node.inputs[0].size * node.inputs[0].shape[-1] // 3
          if node.inputs and node.inputs[0] is not None and node.inputs[0].rank >= 2 else 0,
          min_opset=11,
          doc="determinant of each square matrix of the last two axes; Gaussian "
              "elimination with partial pivoting in float64"),
)
