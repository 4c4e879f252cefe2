"""More pooling ops: GlobalLpPool (COMPLEX_OUT_FUSABLE, like the other global pools) and
MaxUnpool (OPAQUE: a scatter).

* GlobalLpPool: ``(Σ_spatial |x|^p)^(1/p)`` per batch entry and channel, ``[N, C, 1, …]``;
  computed in float64 by the reference and rounded once.
* MaxUnpool: the partial inverse of MaxPool.  The output has the ``output_shape`` input
  (a constant: the shape of MaxPool's input, which pooling made ambiguous) or else the
  unpooled shape ``(in − 1)·stride − pad_begin − pad_end + kernel``; each element of ``X``
  is written at its flat index ``I`` into the output (as MaxPool's ``Indices`` output gives
  it, over the whole ``[N, C, *spatial]`` tensor), every other element is 0; duplicates:
  the last element in ``X``'s order wins.  This is the specification's and onnxruntime's
  reading; ONNX's reference (and its node test ``test_maxunpool_export_with_output_shape``)
  instead index into the unpooled shape and put it at the start of a larger output.

Example::

    >>> import numpy as np
    >>> from toolchain.graph.ops import get_op
    >>> x = np.array([[[[5.0]]]], np.float32); i = np.array([[[[3]]]])
    >>> get_op("MaxUnpool").reference([x, i], {"kernel_shape": (2, 2)})[0][0, 0].tolist()
    [[0.0, 0.0], [0.0, 5.0]]
    >>> get_op("MaxUnpool").reference([x, np.array([[[[4]]]]), np.array([1, 1, 3, 3])],
    ...                               {"kernel_shape": (2, 2)})[0][0, 0, 1].tolist()
    [0.0, 5.0, 0.0]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from toolchain.errors import ModelError
from toolchain.graph.ir import Node, TensorType
from toolchain.graph.ops.common import FLOAT_TYPES, NUMERIC_TYPES, check_dtype, defop, input_value
from toolchain.graph.ops.registry import REQUIRED, Attr, OpDef, PatternKind, const_input


def _positive(v: Any) -> str | None:
    return None if int(v) >= 1 else f"must be >= 1, got {v}"


def _ints_at_least(low: int) -> Any:
    def check(v: Any) -> str | None:
        bad = [int(x) for x in v if int(x) < low]
        return f"values must be >= {low}, got {list(v)}" if bad else None

    return check


# -- GlobalLpPool ------------------------------------------------------------------------------

def _global_lp_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x = input_value(node, 0, "X")
    check_dtype(node, x, "input 0 (X)", FLOAT_TYPES)
    if x.rank < 3:
        raise ModelError(f"{node.describe()}: X {list(x.shape)} must have rank >= 3 (batch, "
                         "channels, spatial axes)")
    return [TensorType(x.shape[:2] + (1,) * (x.rank - 2), x.dtype)]


def _global_lp_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x = np.asarray(ins[0])
    p = attrs["p"]
    total = (np.abs(x.astype(np.float64)) ** p).sum(axis=tuple(range(2, x.ndim)),
                                                     keepdims=True)
    return [(total ** (1.0 / p)).astype(x.dtype)]


# -- MaxUnpool ---------------------------------------------------------------------------------

def unpool_geometry(node: Node | str, x_shape: tuple[int, ...], attrs: dict[str, Any],
                    output_shape: np.ndarray | None) -> tuple[tuple[int, ...], tuple[int, ...],
                                                               tuple[int, ...]]:
    """``(output shape, strides, padding)`` of a MaxUnpool; raises naming ``node``.

    ``padding`` per spatial axis is how far a pooling window may start before the output's
    first element: the begin pad without ``output_shape``, else (pads are then ignored, as
    the specification says) at most ``kernel − 1`` (a window must reach the data)."""
    where = node.describe() if isinstance(node, Node) else node
    kernel = tuple(int(k) for k in attrs["kernel_shape"])
    nsp = len(kernel)
    if len(x_shape) != nsp + 2:
        raise ModelError(f"{where}: X {list(x_shape)} must have rank {nsp + 2} for a "
                         f"{nsp}-D kernel_shape {list(kernel)}")
    strides = tuple(int(s) for s in attrs["strides"] or (1,) * nsp)
    pads = tuple(int(p) for p in attrs["pads"] or (0,) * 2 * nsp)
    if len(strides) != nsp or len(pads) != 2 * nsp:
        raise ModelError(f"{where}: strides {list(strides)} and pads {list(pads)} must have "
                         f"{nsp} and {2 * nsp} values")
    reach = [(x_shape[2 + a] - 1) * strides[a] + kernel[a] for a in range(nsp)]
    if output_shape is None:
        out = x_shape[:2] + tuple(reach[a] - pads[a] - pads[nsp + a] for a in range(nsp))
        if min(out) < 1:
            raise ModelError(f"{where}: the unpooled shape {list(out)} is empty")
        return out, strides, pads[:nsp]
    out = tuple(int(d) for d in np.asarray(output_shape).reshape(-1))
    if len(out) != len(x_shape) or out[:2] != x_shape[:2] or min(out) < 1:
        raise ModelError(f"{where}: output_shape {list(out)} must have X's rank "
                         f"{len(x_shape)}, its N and C {list(x_shape[:2])}, and sizes >= 1")
    return out, strides, tuple(k - 1 for k in kernel)


def _unpool_infer(node: Node, attrs: dict[str, Any]) -> list[TensorType]:
    x, idx = input_value(node, 0, "X"), input_value(node, 1, "I")
    check_dtype(node, x, "input 0 (X)", NUMERIC_TYPES)
    check_dtype(node, idx, "input 1 (I)", ("int64",))
    if idx.shape != x.shape:
        raise ModelError(f"{node.describe()}: I {list(idx.shape)} must have X's shape "
                         f"{list(x.shape)}")
    shape = node.input(2)
    if shape is not None:
        check_dtype(node, shape, "input 2 (output_shape)", ("int64",))
    out, _, _ = unpool_geometry(node, x.shape, attrs, const_input(node, 2, "output_shape"))
    return [TensorType(out, x.dtype)]


def _unpool_ref(ins: list[Any], attrs: dict[str, Any]) -> list[np.ndarray]:
    x, idx = np.asarray(ins[0]), np.asarray(ins[1]).reshape(-1)
    out, _, _ = unpool_geometry("MaxUnpool", x.shape, attrs, ins[2])
    y = np.zeros(int(np.prod(out)), x.dtype)
    bad = (idx < 0) | (idx >= y.size)
    if bad.any():
        raise ModelError(f"MaxUnpool: index {int(idx[bad][0])} in I is outside the output "
                         f"{list(out)} (flat indices 0..{y.size - 1})")
    y[idx] = x.reshape(-1)  # numpy: the last of repeated indices wins
    return [y.reshape(out)]


#: this family's ops (registered by the op table, ``registry.builtin_ops``)
OPS: tuple[OpDef, ...] = (
    defop("GlobalLpPool", ("X",), PatternKind.COMPLEX_OUT_FUSABLE, infer=_global_lp_infer,
          reference=_global_lp_ref, attrs=(Attr("p", "int", 2, check=_positive),),
          flops=lambda node: 2 * (node.inputs[0].size if node.inputs and node.inputs[0]
                                  else 0),
          min_opset=2, doc="(Σ_spatial |x|^p)^(1/p): GlobalAveragePool's Lp cousin"),
    defop("MaxUnpool", ("X", "I", "output_shape?"), PatternKind.OPAQUE, infer=_unpool_infer,
          reference=_unpool_ref,
          attrs=(Attr("kernel_shape", "ints", REQUIRED, check=_ints_at_least(1)),
                 Attr("pads", "ints", (), check=_ints_at_least(0)),
                 Attr("strides", "ints", (), check=_ints_at_least(1))),
          flops=lambda node: sum(o.size for o in node.outputs), min_opset=9,
          compile_time=(2,),
          doc="each X element written at its MaxPool index I, zeros elsewhere; output_shape "
              "a constant"),
)
