"""Build a Kiln :class:`~toolchain.graph.ir.Graph` from validated, upgraded ONNX nodes.

This is the last step of :func:`toolchain.frontend.onnx.from_onnx`.  Nodes arrive as
:class:`~toolchain.frontend.onnx_upgrade.RawNode` in topological order; each one

1. gets its output types from its op's ``infer`` (so shapes are Kiln's own and static),
   cross-checked against ONNX shape inference where that gave a static answer — a
   mismatch is a Kiln bug and raised as :class:`~toolchain.errors.InternalError`;
2. is **folded** into constants when all its inputs are constants (or, for ``Shape`` and
   ``Size``, when its input merely has a static shape), by running the op's numpy
   reference.

Before / after folding (a PyTorch-style flatten; ``x: float32[2, 3, 4]``)::

    s = Shape(x); b = Gather(s, 0); c = Concat(Unsqueeze(b, [0]), [-1]); y = Reshape(x, c)
    -> y = Reshape(x, const int64[2] [2, -1])

Folding is skipped for ``QuantizeLinear``/``DequantizeLinear`` (quantized weights stay
quantized, so the quantization passes can see Q/DQ pairs), and for nodes that would turn
small constants into a large one (``ConstantOfShape``, ``Expand``, ``Tile`` … with more
than :data:`FOLD_GROWTH_LIMIT` output elements beyond their inputs' size).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from toolchain.errors import InternalError, KilnError, KilnWarning, ModelError, UnsupportedError
from toolchain.frontend.onnx_control import expand_control
from toolchain.frontend.onnx_nodes import CONTROL_FLOW_OPS, node_problems, parse_node
from toolchain.frontend.onnx_upgrade import RawNode, drop_empty_operands
from toolchain.graph.ir import Graph, Node, TensorType, Value, np_dtype
from toolchain.graph.ops.registry import RANDOM_OPS, get_op, has_op
from toolchain.graph.reference import run_node

#: ops that only read their input's (static) shape, never its values
SHAPE_ONLY_OPS = ("Shape", "Size")
#: ops never folded: quantization stays visible to the graph passes, and a random op
#: folded would freeze one draw into the bundle (it is refused instead)
NO_FOLD_OPS = ("QuantizeLinear", "DequantizeLinear", *RANDOM_OPS)
#: a fold may create at most this many elements more than its constant inputs hold
FOLD_GROWTH_LIMIT = 1 << 16

#: ONNX TensorProto data type -> Kiln dtype (same table as toolchain.frontend.onnx)
_ONNX_DTYPES = {1: "float32", 10: "float16", 11: "float64", 3: "int8", 2: "uint8",
                5: "int16", 4: "uint16", 6: "int32", 12: "uint32", 7: "int64",
                13: "uint64", 9: "bool"}


def ceil_mode_inference_bug(node: Node, onnx_shape: tuple[int, ...] | None,
                            t: TensorType) -> str | None:
    """Why ONNX shape inference's ``onnx_shape`` differs from Kiln's ``t`` when it is ONNX's
    known pooling bug, else None: with ``ceil_mode`` ONNX keeps a last window that starts
    in the end padding, which the specification (and onnxruntime) drop. Kiln keeps the
    specification's shape and the user's model, and warns.

    >>> n = Node("MaxPool", "p", [Value("x", (1, 1, 4, 4), "float32")],
    ...          [Value("y", (1, 1, 2, 2), "float32")],
    ...          {"kernel_shape": (2, 2), "strides": (2, 2), "pads": (0, 0, 1, 1),
    ...           "ceil_mode": 1})
    >>> ceil_mode_inference_bug(n, (1, 1, 3, 3), TensorType((1, 1, 2, 2), "float32"))[:39]
    'ONNX shape inference says [1, 1, 3, 3] '
    """
    if node.op not in ("MaxPool", "AveragePool", "LpPool") or onnx_shape is None:
        return None
    a = node.attrs
    x = node.inputs[0]
    if not a.get("ceil_mode") or x is None or len(onnx_shape) != len(t.shape):
        return None
    nsp = len(t.shape) - 2
    strides = tuple(a.get("strides") or (1,) * nsp)
    pads = tuple(a.get("pads") or (0,) * (2 * nsp))
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", "") or onnx_shape[:2] != t.shape[:2]:
        return None
    for i in range(nsp):
        ours, theirs = t.shape[2 + i], onnx_shape[2 + i]
        if theirs == ours:
            continue
        # ONNX's extra window starts at ours * stride (in padded coordinates): beyond the
        # input and its begin padding, i.e. wholly in the end padding
        if theirs != ours + 1 or ours * strides[i] < x.shape[2 + i] + pads[i]:
            return None
    return (f"ONNX shape inference says {list(onnx_shape)} (a known ONNX bug: with "
            "ceil_mode it keeps a last window that starts in the end padding, which the "
            "ONNX specification and onnxruntime drop); Kiln follows the specification")


def resize_length_difference(node: Node, onnx_shape: tuple[int, ...] | None,
                             t: TensorType) -> str | None:
    """Why ONNX shape inference's ``onnx_shape`` differs from Kiln's ``t`` for a Resize
    with ``scales``, else None: ONNX multiplies length and scale in float64 and floors
    10 x 0.69999999 (the float32 0.7) to 6; onnxruntime and PyTorch get 7, and so does Kiln
    (:func:`toolchain.graph.ops.transform.scaled_length`).

    >>> n = Node("Resize", "r", [Value("x", (1, 1, 10, 10), "float32")],
    ...          [Value("y", (1, 1, 7, 7), "float32")], {})
    >>> resize_length_difference(n, (1, 1, 6, 6), TensorType((1, 1, 7, 7), "float32"))[:39]
    'ONNX shape inference says [1, 1, 6, 6] '
    """
    if node.op != "Resize" or onnx_shape is None or len(onnx_shape) != len(t.shape):
        return None
    if any(theirs not in (ours, ours - 1) for ours, theirs in zip(t.shape, onnx_shape,
                                                                   strict=True)):
        return None
    return (f"ONNX shape inference says {list(onnx_shape)} (it floors length x scale in "
            "float64, where a float32 scale can fall just short of a whole number: 10 x "
            "0.7 is 6.99999988); Kiln computes in float32 as onnxruntime and PyTorch do")


def traced_sizes_hint(sized: Mapping[str, tuple[int, ...]], option: str) -> str:
    """Why a Reshape fails once symbolic input dimensions are given sizes: a tracing
    exporter stored sizes of the traced inputs as constants (TorchScript's ``torch.onnx``
    does so in ``nn.MultiheadAttention``'s head split).

    Example::

        >>> traced_sizes_hint({"x": (3, 9)}, "--input-shape")[:58]
        'The symbolic dimensions of x were set by --input-shape x=3'
    """
    given = ", ".join(sorted(sized))
    opts = " ".join(f"{option} {n}=" + ",".join(map(str, s)) for n, s in sorted(sized.items())) \
        if option == "--input-shape" else f"{option}"
    return (f"The symbolic dimensions of {given} were set by {opts}; the other shape is "
            "probably a constant of the model: an exporter that traces the model "
            "(torch.onnx.export(..., dynamo=False)) stores some sizes of the input it traced "
            "as constants, so the model runs only at those sizes. Compile at the sizes the "
            "model was exported with, or export it again for these sizes (or with "
            "dynamo=True, which keeps them symbolic)")


class _Builder:
    """Mutable state while building: values by name, emitted nodes, used names."""

    def __init__(self, label: str, onnx_types: Mapping[str, Any], used: Iterable[str],
                 opset: int = 0):
        self.label = label
        self.opset = opset
        self.onnx_types = onnx_types
        self.values: dict[str, Value] = {}
        self.nodes: list[Node] = []
        self.used: set[str] = set(used)
        self.graph_inputs: set[str] = set()
        #: values whose ONNX-inferred types follow a known ONNX inference bug upstream:
        #: not cross-checked (ONNX propagates its wrong shape to every consumer)
        self.untrusted: set[str] = set()

    def fresh(self, base: str) -> str:
        name = base
        while name in self.used or name in self.values:
            name += "_"
        self.used.add(name)
        return name

    def constant(self, base: str, array: np.ndarray) -> Value:
        v = Value.constant(self.fresh(base), np.asarray(array))
        self.values[v.name] = v
        return v

    # -- one ONNX node ----------------------------------------------------------------------
    def run(self, raw: RawNode) -> None:
        """Add ``raw``: folded with ONNX's reference, expanded (legacy 2-D Softmax,
        control flow) or added as it is."""
        drop_empty_operands(raw, lambda n: self.values[n].data if n in self.values else None)
        ins = [self.values[n] if n else None for n in raw.inputs]
        if raw.fold is not None:
            self.fold_onnx(raw, ins)
        elif raw.op in CONTROL_FLOW_OPS and raw.domain in ("", "ai.onnx"):
            expand_control(self, raw, ins)
        elif raw.legacy_2d:
            self.add_legacy_2d(raw, ins)
        else:
            self.add(raw.op, raw.name, ins, raw.outputs, raw.attrs)

    def run_proto(self, node: Any) -> None:
        """Parse, check and :meth:`run` a node of an inlined control-flow body (its names
        already made unique); an op Kiln lacks is folded when its inputs are constants."""
        raw = parse_node(node, node.name, -1, self.opset,
                         lambda hint, array: self.constant(hint, array).name)
        if (raw.domain in ("", "ai.onnx") and not has_op(raw.op)
                and raw.op not in CONTROL_FLOW_OPS and raw.op not in NO_FOLD_OPS
                and all(self.values[n].is_constant for n in raw.inputs if n)):
            raw.fold = node
        problems = node_problems(raw)
        if problems:
            raise UnsupportedError(f"{self.label}: {raw.where()}: " + "; ".join(problems))
        self.run(raw)

    # -- one node ---------------------------------------------------------------------------
    def add(self, op: str, name: str, inputs: list[Value | None], out_names: list[str],
            attrs: Mapping[str, Any]) -> list[Value]:
        """Infer, cross-check and add (or fold) one node; return its output values."""
        opdef = get_op(op)
        known = {a.name: a for a in opdef.attrs}
        attrs = {k: known[k].coerce(v) if k in known else v for k, v in attrs.items()}
        outs = [n or self.fresh(f"{name}__unused{i}") for i, n in enumerate(out_names)]
        node = Node(op, name, inputs, [Value(n, (), "float32") for n in outs], attrs)
        try:
            types = list(opdef.infer(node))
        except KilnError as exc:
            raise type(exc)(f"{self.label}: {exc}{self._input_hint(node, str(exc))}") \
                from None
        except Exception as exc:
            raise InternalError(f"{self.label}: {node.describe()}: the shape rule of {op} "
                                f"failed: {type(exc).__name__}: {exc}") from exc
        if len(types) < len(outs):
            raise InternalError(f"{self.label}: {node.describe()}: the shape rule of {op} "
                                f"gave {len(types)} types for {len(outs)} outputs")
        for out_name, t in zip(outs, types, strict=False):
            self._cross_check(node, out_name, t)
        node = node.replace(outputs=[Value(n, t.shape, t.dtype)
                                     for n, t in zip(outs, types, strict=False)])
        if self._foldable(node):
            args = [self._fold_arg(node, v) for v in node.inputs]
            try:
                arrays = run_node(node, args)
            except KilnError as exc:
                raise type(exc)(f"{self.label}: {exc}") from None
            # Own, writable, contiguous copies: a result may be a view of an input.
            results = [Value.constant(o.name, np.array(a, copy=True, order="C"))
                       for o, a in zip(node.outputs, arrays, strict=True)]
        else:
            self.nodes.append(node)
            results = list(node.outputs)
        for v in results:
            self.values[v.name] = v
        return results

    def _input_hint(self, node: Node, message: str) -> str:
        """When a compile-time operand is itself a model input, --input-shape cannot help:
        say how to make it a constant instead."""
        for v in node.inputs:
            if (v is not None and v.name in self.graph_inputs and f"'{v.name}'" in message
                    and "compile time" in message):
                return (f" (note: {v.name!r} is itself an input of the model; make it an "
                        f"initializer in the model, or from Python pass "
                        f"from_onnx(..., bind={{{v.name!r}: array}}))")
        return ""

    def _cross_check(self, node: Node, name: str, t: TensorType) -> None:
        if any(v is not None and v.name in self.untrusted for v in node.inputs):
            self.untrusted.add(name)
            return
        info = self.onnx_types.get(name)
        if info is None:
            return
        elem, dims = info
        onnx_dtype = _ONNX_DTYPES.get(elem)
        static = dims is not None and all(isinstance(d, int) for d in dims)
        if (onnx_dtype is not None and onnx_dtype != t.dtype) or (
                static and tuple(dims) != t.shape):
            onnx_shape = tuple(dims) if static else None
            known = (ceil_mode_inference_bug(node, onnx_shape, t)
                     or resize_length_difference(node, onnx_shape, t))
            if known:
                warnings.warn(KilnWarning(f"{self.label}: {node.describe()}: output {name!r} "
                                          f"is {t}; {known}"), stacklevel=2)
                self.untrusted.add(name)
                return
            shown = f"{onnx_dtype or elem}" + (f"[{', '.join(map(str, dims))}]"
                                               if dims is not None else "[unknown rank]")
            raise InternalError(
                f"{self.label}: {node.describe()}: output {name!r}: Kiln infers {t} but "
                f"ONNX shape inference gives {shown}. This is a bug in Kiln's shape rule for "
                f"{node.op} (or in ONNX shape inference); please report it with the model."
            )

    @staticmethod
    def _foldable(node: Node) -> bool:
        if node.op in NO_FOLD_OPS:
            return False
        if node.op in SHAPE_ONLY_OPS:
            return all(v is not None for v in node.inputs[:1])
        present = [v for v in node.inputs if v is not None]
        if not all(v.is_constant for v in present):
            return False
        if not present:
            return True  # Constant: its value is an attribute
        grown = sum(o.size for o in node.outputs) - sum(v.size for v in present)
        return grown <= FOLD_GROWTH_LIMIT

    @staticmethod
    def _fold_arg(node: Node, v: Value | None) -> np.ndarray | None:
        if v is None:
            return None
        if v.data is not None:
            view = v.data.view()
            view.flags.writeable = False  # a reference must not change a constant
            return view
        # Shape/Size read only the shape: a zero-strided array costs no memory.
        return np.broadcast_to(np.zeros((), np_dtype(v.dtype)), v.shape)

    # -- ops Kiln lacks, on constants ------------------------------------------------------
    def fold_onnx(self, raw: RawNode, inputs: list[Value | None]) -> None:
        """Fold ``raw`` (an op Kiln lacks, marked by ``mark_constant_folds``) with ONNX's
        reference implementation; its inputs must have turned out constant.

        Before: ``m = Mod(const int64[3] [5, 7, 9], const int64[3] [3, 3, 4])``
        After:  ``m = const int64[3] [2, 1, 1]``
        """
        from onnx import helper, numpy_helper
        from onnx.reference import ReferenceEvaluator

        where = f"{self.label}: {raw.where()}"
        live = [v.name for v in inputs if v is not None and v.data is None]
        if live:
            raise UnsupportedError(
                f"{where}: op not supported by Kiln, and it cannot be folded at compile "
                f"time because input(s) {', '.join(map(repr, live))} are computed at run time")
        inits = [numpy_helper.from_array(np.asarray(v.data), n)
                 for n, v in zip(raw.inputs, inputs, strict=True) if v is not None]
        graph = helper.make_graph([raw.fold], "fold", [],
                                  [helper.make_empty_tensor_value_info(n)
                                   for n in raw.outputs if n], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", raw.opset)])
        try:
            arrays = ReferenceEvaluator(model).run(None, {})
        except Exception as exc:  # noqa: BLE001 - any failure means: cannot fold
            raise UnsupportedError(
                f"{where}: op not supported by Kiln; its inputs are constants but ONNX's "
                f"reference implementation could not fold it ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
        for name, a in zip([n for n in raw.outputs if n], arrays, strict=True):
            self.values[name] = Value.constant(name, np.array(a, copy=True, order="C"))

    # -- legacy 2-D Softmax -------------------------------------------------------------------
    def add_legacy_2d(self, raw: RawNode, inputs: list[Value | None]) -> None:
        """Softmax/LogSoftmax/Hardmax of opset < 13: normalise over the input flattened to
        2-D at ``axis``; emitted as ``Reshape -> op(axis=-1) -> Reshape``.

        Before: ``y = Softmax(x: [2, 3, 4], axis=1)`` (opset 11)
        After:  ``t = Reshape(x, [2, 12]); u = Softmax(t, axis=-1); y = Reshape(u, [2, 3, 4])``
        """
        x = inputs[0]
        assert x is not None  # validated: Softmax's input is required
        attrs = dict(raw.attrs)
        axis = int(attrs.pop("axis", 1))
        rank = x.rank
        if not -rank <= axis < max(rank, 1):
            raise ModelError(
                f"{self.label}: node {raw.name!r} ({raw.op}): axis {axis} is out of range "
                f"for a rank-{rank} input")
        axis = axis % rank if rank else 0
        if axis >= rank - 1:
            self.add(raw.op, raw.name, [x], raw.outputs, {**attrs, "axis": -1})
            return
        rows = int(np.prod(x.shape[:axis], dtype=np.int64))
        flat = self.add("Reshape", self.fresh(f"{raw.name}__flatten"),
                        [x, self.constant(f"{raw.name}__shape2d",
                                          np.array([rows, -1], np.int64))],
                        [self.fresh(f"{x.name}__2d")], {})[0]
        out2d = self.add(raw.op, raw.name, [flat], [self.fresh(f"{raw.outputs[0]}__2d")],
                         {**attrs, "axis": -1})[0]
        self.add("Reshape", self.fresh(f"{raw.name}__unflatten"),
                 [out2d, self.constant(f"{raw.name}__shape", np.array(x.shape, np.int64))],
                 raw.outputs[:1], {})


def _check_declared_output(v: Value, declared: tuple[int, Any], label: str) -> None:
    elem, dims = declared
    want_dtype = _ONNX_DTYPES.get(elem)
    bad_dtype = elem != 0 and want_dtype != v.dtype
    bad_shape = dims is not None and (len(dims) != v.rank or any(
        isinstance(d, int) and d != s for d, s in zip(dims, v.shape, strict=False)))
    if bad_dtype or bad_shape:
        shown = "[" + ", ".join("?" if d is None else str(d) for d in dims or []) + "]" \
            if dims is not None else "[unknown rank]"
        raise ModelError(
            f"{label}: the model declares output {v.name!r} as {want_dtype or elem}{shown}, "
            f"but it computes {v.type}; fix the output's declaration in the model (if the "
            "declaration is right, this is a bug in a Kiln shape rule: please report it)"
        )


def build_graph(
    name: str,
    inputs: list[Value],
    constants: Mapping[str, np.ndarray],
    raw_nodes: list[RawNode],
    outputs: Mapping[str, Any],
    onnx_types: Mapping[str, Any],
    *,
    opset: int,
    label: str,
    metadata: Mapping[str, Any],
) -> Graph:
    """Build the graph (see the module docstring); raises ModelError naming the node.

    ``outputs`` maps each graph output name to its declared ``(elem_type, dims)``;
    ``onnx_types`` gives ONNX shape inference's types of intermediate tensors.

    Example::

        >>> from toolchain.graph.ir import Value
        >>> x = Value("x", (2, 3), "float32")
        >>> raw = RawNode("Shape", "s", ["x"], ["y"], {}, "", 17, 0)
        >>> g = build_graph("g", [x], {}, [raw], {"y": (7, [2])}, {}, opset=17, label="m",
        ...                 metadata={})
        >>> g.outputs[0].data
        array([2, 3])
    """
    used = {n for raw in raw_nodes for n in raw.inputs + raw.outputs}
    names = {raw.name for raw in raw_nodes}
    b = _Builder(label, onnx_types, used | names | set(constants) | {v.name for v in inputs},
                 opset)
    for v in inputs:
        b.values[v.name] = v
    b.graph_inputs = {v.name for v in inputs}
    for cname, array in constants.items():
        b.values[cname] = Value.constant(cname, array)
    for raw in raw_nodes:
        b.run(raw)
    for out_name, declared in outputs.items():
        _check_declared_output(b.values[out_name], declared, label)
    try:
        return Graph(name, inputs, [b.values[n] for n in outputs], b.nodes, opset=opset,
                     metadata=metadata)
    except ModelError as exc:
        raise ModelError(f"{label}: {exc}") from None
