"""The op registry: what Kiln knows about each operator.

An :class:`OpDef` gives, for one op:

* its attributes (:class:`Attr`) with kinds, defaults and validation,
* its inputs (names; optional ones end in ``?``, a variadic tail in ``*``),
* its shape/dtype rule ``infer(node) -> list[TensorType]``,
* its **pattern kind** (:class:`PatternKind`, the four kinds of the TVM paper that
  operator fusion works by),
* a numpy reference ``reference(inputs, attrs) -> list[np.ndarray]`` with exact ONNX
  semantics,
* a FLOP count ``flops(node) -> int``,
* its **traits**: what the passes and the memory planner may assume about it (below).

Traits.  Declared on the ``OpDef``, read by every pass that cares, so a new op is fused,
laid out and planned by what its definition says (never by a list kept in a pass):

* ``elementwise`` — each output element is computed from the input elements at its own
  (broadcast) index only: Relu, Add, Where, Cast, QuantizeLinear …  Fusion puts such an
  op onto the output of a complex-out-fusable op (``conv -> add -> relu``: one kernel);
* ``view`` — the output is the data input's bytes, in the same order, under another
  shape: Reshape, Flatten, Squeeze, Unsqueeze, Identity.  The planner gives a view of a
  graph input no buffer of its own, and the bundle does not call a kernel made only of
  views whose output already lies where its input does;
* ``in_place`` — the kernel writes output element *k* only after reading input element
  *k* (same flat index), so the planner lets the output take over a dying input's buffer
  of the same shape (of the same size, for a view).  Defaults to ``elementwise or view``;
* ``layout_agnostic`` — computes the same in any data layout of its same-shape operands,
  so the layout pass runs it in the layout its inputs arrive in.  Defaults to
  ``elementwise``; QuantizeLinear and DequantizeLinear opt out (their ``axis`` attribute
  names an NCHW axis);
* ``compile_time`` — the inputs the op reads at compile time (a Reshape's ``shape``, a
  Resize's ``scales``, reduction ``axes``): they must be constants, and fusion compiles
  them into the kernel (whatever their size or dtype) instead of passing them as weights.

Canonical form.  Kiln's graph IR follows the *newest* ONNX form of each op: operands that
older opsets gave as attributes (``Split.split``, ``ReduceSum.axes``, ``Pad.pads``,
``Clip.min``/``max``, ``Squeeze.axes`` …) are inputs.  The ONNX frontend upgrades older
forms.  Inputs that determine output shapes (a Reshape's ``shape``, a Slice's ``starts``)
must be constants: ``infer`` reads their ``Value.data`` and raises a :class:`ModelError`
suggesting ``--input-shape`` when they are not.

The op table.  Kiln's own ops are the ``OPS`` tuples of the modules :func:`builtin_ops`
imports, one line per family; they are registered, in that order, the first time the
registry is asked anything.  Importing an op module registers nothing, so what is
registered never depends on what happened to be imported.  Adding an op to a family is
adding its ``OpDef`` to that module's ``OPS``; a new family is one more line in
:func:`builtin_ops`.

An op defined outside Kiln (a plug-in, a test) is registered at run time::

    >>> relu2 = OpDef(
    ...     "Relu2", inputs=("X",), pattern=PatternKind.INJECTIVE, elementwise=True,
    ...     infer=same_as_input(0),
    ...     reference=lambda ins, attrs: [np.maximum(ins[0], 0).astype(ins[0].dtype)],
    ...     flops=elementwise_flops)
    >>> register(relu2) is relu2
    True
    >>> get_op("Relu2").reference([np.array([-1.0, 2.0])], {})
    [array([0., 2.])]
    >>> get_op("Relu2").in_place, get_op("Relu2").layout_agnostic  # from elementwise
    (True, True)
    >>> unregister("Relu2") is relu2
    True
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from toolchain.errors import ModelError
from toolchain.graph.ir import Node, TensorType, Value


class PatternKind(enum.Enum):
    """How an op may fuse (TVM paper, section 3).

    * ``INJECTIVE``: one-to-one map (add, relu, reshape, transpose) — fuses freely.
    * ``REDUCTION``: reduces input dimensions (sum, max) — may take injective ops
      on its input side.
    * ``COMPLEX_OUT_FUSABLE``: complex op (conv2d, dense) whose output element-wise
      ops may be fused onto.
    * ``OPAQUE``: cannot be fused (sort, non-static data-dependent ops).
    """

    INJECTIVE = "injective"
    REDUCTION = "reduction"
    COMPLEX_OUT_FUSABLE = "complex-out-fusable"
    OPAQUE = "opaque"

    def __str__(self) -> str:
        return self.value


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


#: default of an attribute that must be given
REQUIRED: Any = _Required()

_ATTR_KINDS = ("int", "float", "string", "ints", "floats", "strings", "tensor", "graph")


@dataclass(frozen=True)
class Attr:
    """One attribute of an op.

    ``check`` returns an error text (what is wrong) or ``None``; ``choices`` restricts the
    value to a set.
    """

    name: str
    kind: str
    default: Any = REQUIRED
    choices: tuple[Any, ...] | None = None
    check: Callable[[Any], str | None] | None = None

    def __post_init__(self) -> None:
        if self.kind not in _ATTR_KINDS:
            raise ValueError(f"attribute kind {self.kind!r} is not one of {_ATTR_KINDS}")

    def coerce(self, value: Any) -> Any:
        """Convert a parsed value to this attribute's canonical Python type."""
        if self.kind == "int":
            return int(value)
        if self.kind == "float":
            return float(value)
        if self.kind == "string":
            return value.decode() if isinstance(value, bytes) else str(value)
        if self.kind == "ints":
            return tuple(int(v) for v in value)
        if self.kind == "floats":
            return tuple(float(v) for v in value)
        if self.kind == "strings":
            return tuple(v.decode() if isinstance(v, bytes) else str(v) for v in value)
        return value


InferFn = Callable[[Node], Sequence[TensorType]]
ReferenceFn = Callable[[list[Any], Mapping[str, Any]], Sequence[np.ndarray]]
FlopsFn = Callable[[Node], int]


@dataclass
class OpDef:
    """Everything Kiln knows about one operator (see the module docstring)."""

    name: str
    inputs: tuple[str, ...]
    infer: InferFn
    reference: ReferenceFn
    pattern: PatternKind | Callable[[Node], PatternKind]
    attrs: tuple[Attr, ...] = ()
    num_outputs: int | tuple[int, int] = 1
    flops: FlopsFn | None = None
    #: ONNX opset versions of this op whose semantics are handled (after frontend upgrade)
    min_opset: int = 1
    doc: str = ""
    # -- traits (see the module docstring) ----------------------------------------------
    #: each output element comes from the input elements at its (broadcast) index only
    elementwise: bool = False
    #: the output is the data input's bytes, in order, under another shape
    view: bool = False
    #: the output may take over a dying input's buffer; ``None``: ``elementwise or view``
    in_place: bool | None = None
    #: runs in any data layout of its same-shape operands; ``None``: ``elementwise``
    layout_agnostic: bool | None = None
    #: inputs read at compile time (shapes, scales, axes: ``const_input``): fusion bakes
    #: them into the kernel whatever their size or dtype, never passes them as weights
    compile_time: tuple[int, ...] = ()
    _attr_map: dict[str, Attr] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._attr_map = {a.name: a for a in self.attrs}
        if self.in_place is None:
            self.in_place = self.elementwise or self.view
        if self.layout_agnostic is None:
            self.layout_agnostic = self.elementwise
        if (self.elementwise or self.view) and self.pattern is not PatternKind.INJECTIVE:
            kind = "a node-dependent kind" if callable(self.pattern) else self.pattern
            raise ValueError(f"op {self.name!r} is declared elementwise or a view but has "
                             f"pattern kind {kind}; such ops are injective")

    # -- inputs --------------------------------------------------------------------------
    @property
    def min_inputs(self) -> int:
        return sum(1 for i in self.inputs if not i.endswith(("?", "*")))

    @property
    def max_inputs(self) -> int | None:
        return None if any(i.endswith("*") for i in self.inputs) else len(self.inputs)

    # -- attributes ----------------------------------------------------------------------
    def attr_errors(self, attrs: Mapping[str, Any]) -> list[str]:
        """Problems with ``attrs`` (unknown names, bad values), one text each.

        A value of ``None`` counts as absent, so normalised attributes (whose optional
        entries default to ``None``) can be checked again."""
        attrs = {k: v for k, v in attrs.items() if v is not None}
        errors = []
        for key in attrs:
            if key not in self._attr_map:
                known = ", ".join(self._attr_map) or "none"
                errors.append(f"attribute {key!r} is not supported (known: {known})")
        for a in self.attrs:
            if a.name not in attrs:
                if a.default is REQUIRED:
                    errors.append(f"attribute {a.name!r} is required")
                continue
            try:
                value = a.coerce(attrs[a.name])
            except (TypeError, ValueError):
                errors.append(f"attribute {a.name!r} = {attrs[a.name]!r} is not a {a.kind}")
                continue
            if a.choices is not None and value not in a.choices:
                errors.append(
                    f"attribute {a.name!r} = {value!r} is not one of "
                    + ", ".join(repr(c) for c in a.choices)
                )
            elif a.check is not None and (msg := a.check(value)):
                errors.append(f"attribute {a.name!r} = {value!r}: {msg}")
        return errors

    def normalize_attrs(self, attrs: Mapping[str, Any], where: str = "") -> dict[str, Any]:
        """Attributes with defaults filled in and values coerced; raises on any problem."""
        errors = self.attr_errors(attrs)
        if errors:
            prefix = f"{where}: " if where else f"{self.name}: "
            raise ModelError(prefix + "; ".join(errors))
        out = {}
        attrs = {k: v for k, v in attrs.items() if v is not None}
        for a in self.attrs:
            if a.name in attrs:
                out[a.name] = a.coerce(attrs[a.name])
            elif a.default is not REQUIRED:
                out[a.name] = a.default
        return out

    # -- queries -------------------------------------------------------------------------
    def pattern_of(self, node: Node) -> PatternKind:
        return self.pattern(node) if callable(self.pattern) else self.pattern

    def flops_of(self, node: Node) -> int:
        return int(self.flops(node)) if self.flops else 0


#: ONNX ops whose output *shape* depends on the values of their inputs.  Kiln compiles
#: static shapes, so these are refused by name (not merely "unsupported"): see
#: :func:`data_dependent_reason`.
DATA_DEPENDENT_SHAPE_OPS: dict[str, str] = {
    "NonZero": "the number of non-zero elements",
    "Unique": "the number of distinct values",
    "Compress": "the number of true entries of `condition`",
    "NonMaxSuppression": "the number of boxes kept",
}


def data_dependent_reason(op: str) -> str | None:
    """Why ``op`` cannot be compiled when its output shape depends on data, else ``None``.

    >>> data_dependent_reason("NonZero")[:57]
    "NonZero's output shape depends on the input data (the num"
    >>> data_dependent_reason("Relu") is None
    True
    """
    what = DATA_DEPENDENT_SHAPE_OPS.get(op)
    if what is None:
        return None
    return (f"{op}'s output shape depends on the input data ({what}), but Kiln compiles "
            "static shapes only; compute it outside the model, or replace it by a fixed-size "
            "form (e.g. a mask with Where instead of NonZero/Compress)")


#: ONNX ops that draw random numbers.  A bundle is deterministic (same inputs, same
#: outputs) and these ops are training-time noise, so they are refused by name, and never
#: folded into a constant (which would freeze one draw into the bundle): see
#: :func:`random_reason`.
RANDOM_OPS: tuple[str, ...] = (
    "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
    "Bernoulli",
)


def random_reason(op: str) -> str | None:
    """Why ``op`` cannot be compiled when it draws random numbers, else ``None``.

    >>> random_reason("RandomNormal")[:44]
    'RandomNormal draws random numbers, but a Kil'
    >>> random_reason("Relu") is None
    True
    """
    if op not in RANDOM_OPS:
        return None
    return (f"{op} draws random numbers, but a Kiln bundle is deterministic (the same "
            "inputs always give the same outputs) and random ops are training-time noise; "
            "remove the node for inference, or pass the noise in as a model input")


#: ONNX ops that make, read or consume a sequence (a list of tensors of any length), a
#: type Kiln's graphs do not have: see :func:`sequence_reason`.
SEQUENCE_OPS: tuple[str, ...] = (
    "SequenceEmpty", "SequenceConstruct", "SequenceInsert", "SequenceAt", "SequenceErase",
    "SequenceLength", "SequenceMap", "SplitToSequence", "ConcatFromSequence",
)


def sequence_reason(op: str) -> str | None:
    """Why ``op`` cannot be compiled when it works on ONNX sequences, else ``None``.

    >>> sequence_reason("ConcatFromSequence")[:52]
    'ConcatFromSequence works on an ONNX sequence (a list'
    >>> sequence_reason("Concat") is None
    True
    """
    if op not in SEQUENCE_OPS:
        return None
    return (f"{op} works on an ONNX sequence (a list of tensors), a type Kiln does not have: "
            "its graphs carry tensors only. PyTorch's dynamo exporter builds sequences for "
            "nn.EmbeddingBag (a Loop that inserts one bag per step); export such a model with "
            "torch.onnx.export(..., dynamo=False), or write the bags as Embedding and a "
            "reduction over a fixed-size index tensor")


def refusal_reason(op: str) -> str | None:
    """Why Kiln never compiles ``op`` (:func:`data_dependent_reason`,
    :func:`random_reason` or :func:`sequence_reason`), else ``None``."""
    return data_dependent_reason(op) or random_reason(op) or sequence_reason(op)


_REGISTRY: dict[str, OpDef] = {}
#: the op table's state: "unloaded", "loading" (its modules are being imported), "loaded"
_table = "unloaded"


def builtin_ops() -> tuple[OpDef, ...]:
    """The op table: every op Kiln defines, family by family (each module's ``OPS``).

    >>> [op.name for op in builtin_ops() if op.name.startswith("Layout")]
    ['LayoutTransform', 'LayoutConv', 'LayoutPool']
    """
    # Imported here, not at the top: every one of these modules imports this one.
    from toolchain.graph.ops import (
        accel,
        attention,
        deform,
        elementwise,
        elementwise_ext,
        linalg,
        misc,
        nn,
        nn_ext,
        pool_ext,
        qops,
        quant,
        quant_ext,
        reduce,
        rnn,
        roi,
        spectral,
        text,
        transform,
        transform_ext,
    )
    from toolchain.graph.passes import fused_op, layout_ops

    return (
        *elementwise.OPS,  # unary/binary math, activations, comparisons, logic, Where, Clip, Cast
        *elementwise_ext.OPS,  # rounding, trig, Elu/Selu/…, IsNaN/IsInf, Mod, BitShift, And/Or
        *reduce.OPS,       # ReduceMean/Sum/Max/Min, ArgMax
        *nn.OPS,           # Conv, ConvTranspose, MatMul, Gemm, pooling, normalisations, Softmax
        *nn_ext.OPS,       # LRN, LpNormalization, LpPool, Einsum, GridSample
        *spectral.OPS,     # DFT, STFT
        *linalg.OPS,       # Det
        *roi.OPS,          # RoiAlign, MaxRoiPool
        *pool_ext.OPS,     # GlobalLpPool, MaxUnpool
        *text.OPS,         # TfIdfVectorizer
        *deform.OPS,       # DeformConv
        *transform.OPS,    # Reshape, Flatten, Transpose, Concat, Split, Slice, Gather, Pad …
        *transform_ext.OPS,  # DepthToSpace, Trilu, Range, OneHot, CumSum, Gather/ScatterND …
        *misc.OPS,         # Constant, ConstantOfShape, Shape, Identity, Dropout
        *quant.OPS,        # QuantizeLinear, DequantizeLinear
        *quant_ext.OPS,    # MatMulInteger, QLinearMatMul
        *qops.OPS,         # integer-only QConv, QGemm, QAdd, QAvgPool (from QDQ models)
        *accel.OPS,        # VtaConv2d, VtaDense, QRequant (made by the accelerator partition)
        *rnn.OPS,          # LSTM, GRU, RNN (expanded by the expand_recurrent pass)
        *attention.OPS,    # Attention, FusedAttention (made by the fuse_attention pass)
        *fused_op.OPS,     # Fused: one kernel (made by the fusion pass)
        *layout_ops.OPS,   # LayoutTransform, LayoutConv, LayoutPool (made by the layout pass)
    )


def _load_table() -> None:
    """Register the op table once, on the registry's first use."""
    global _table
    if _table == "loaded":
        return
    if _table == "loading":
        raise RuntimeError(
            "the op registry was used while the op table's modules were being imported "
            "(get_op, has_op, all_ops or register called at import time of one of them); "
            "call it inside a function instead")
    _table = "loading"
    try:
        ops = builtin_ops()
    finally:
        _table = "unloaded"
    for opdef in ops:
        _add(opdef)
    _table = "loaded"


def _add(opdef: OpDef) -> None:
    if opdef.name in _REGISTRY:
        raise ValueError(f"op {opdef.name!r} registered twice")
    _REGISTRY[opdef.name] = opdef


def register(opdef: OpDef) -> OpDef:
    """Register an op defined outside the op table (see the module docstring); returns it.

    Raises ``ValueError`` when an op of that name is already registered."""
    _load_table()
    _add(opdef)
    return opdef


def unregister(name: str) -> OpDef:
    """Remove the op ``name`` from the registry and return its ``OpDef`` (for tests and
    plug-ins that register an op for a while)."""
    _load_table()
    try:
        return _REGISTRY.pop(name)
    except KeyError:
        raise ValueError(f"op {name!r} is not registered") from None


def get_op(name: str) -> OpDef:
    """The ``OpDef`` of ``name``; raises :class:`ModelError` naming the op if unknown."""
    _load_table()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ModelError(f"op {name!r} is not supported by Kiln") from None


def has_op(name: str) -> bool:
    """Whether an op called ``name`` is registered."""
    _load_table()
    return name in _REGISTRY


def all_ops() -> dict[str, OpDef]:
    """Every registered op, by name."""
    _load_table()
    return dict(sorted(_REGISTRY.items()))


# -- helpers shared by op definitions --------------------------------------------------------

def same_as_input(i: int = 0) -> InferFn:
    """Shape rule: the output has the type of input ``i``."""

    def infer(node: Node) -> list[TensorType]:
        v = node.inputs[i]
        assert v is not None
        return [v.type]

    return infer


def elementwise_flops(node: Node) -> int:
    """One operation per output element."""
    return sum(o.size for o in node.outputs)


def broadcast_shapes(node: Node, shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    """Numpy/ONNX multidirectional broadcasting; raises naming the node on mismatch."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        shown = " and ".join(str(list(s)) for s in shapes)
        raise ModelError(
            f"{node.describe()}: shapes {shown} cannot be broadcast together"
        ) from None


def const_input(node: Node, i: int, what: str) -> np.ndarray | None:
    """The data of constant input ``i`` (``None`` when the optional input is absent).

    Raises a :class:`ModelError` when the input is given but not constant, since Kiln needs
    it at compile time to know shapes.
    """
    v: Value | None = node.input(i)
    if v is None:
        return None
    if v.data is None:
        raise ModelError(
            f"{node.describe()}: input {i} ({what}, value {v.name!r}) must be known at compile "
            "time to give static shapes, but it is computed at run time; fix it with "
            "--input-shape NAME=D0,D1,... for the model inputs it depends on, or fold it"
        )
    return v.data
