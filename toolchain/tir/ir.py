"""The loop IR (TIR): expressions, statements, buffers, blocks and ``PrimFunc``.

Every node is an immutable (frozen) dataclass; passes build new nodes instead of editing
old ones (:mod:`toolchain.tir.functor` has visitors and mutators). Nodes compare by
**identity** (``eq=False``): two ``Var("i")`` are different variables. Structural
comparison is :func:`structural_equal`. ``==`` is therefore *not* overloaded on expressions;
write ``a.equal(b)`` / ``a.not_equal(b)`` (or ``te.equal``) to build an ``EQ``/``NE`` node.
``+ - * / // % < <= > >= & | ~`` and unary ``-`` build nodes; Python ints/floats are
converted to ``IntImm``/``FloatImm`` of the other operand's dtype.

Conventions shared by every layer (schedule, lowering passes, code generators):

* **dtypes** are strings: ``"float32"``, ``"int32"``, ``"bool"``, ``"handle"`` (a pointer);
  vectors append the lane count: ``"float32x8"``, ``"int32x8"``, ``"boolx8"``. Helpers:
  :func:`lanes_of`, :func:`element_of`, :func:`with_lanes`.
* **Buffers** are multi-dimensional until the flattening pass; ``Buffer.data`` is the
  ``handle`` Var of its pointer. ``Buffer.scope`` is ``"global"``, ``"shared"``, ``"local"``
  or a scope declared by a target. Empty ``strides`` means compact row-major.
* **Blocks** (TensorIR): ``BlockRealize(iter_values, predicate, Block(...))``. A block's
  ``iter_vars`` are ``IterVar(var, dom, iter_type)`` with ``iter_type`` ``"spatial"``,
  ``"reduce"`` or ``"opaque"``; ``iter_values`` bind each block var to an expression of the
  surrounding loop vars; the block runs only where ``predicate`` holds (split guards live
  there). ``init`` (reductions) runs when every reduce var is at its first value. ``reads``
  / ``writes`` are ``BufferRegion``s in terms of the block vars. ``alloc_buffers`` are
  buffers local to the block (the root block holds the intermediates). A block that was
  tensorized carries ``annotations["tensorized"] = "<intrinsic name>"`` and its body is the
  implementation's body with the intrinsic's buffers replaced by the real buffers at the
  matched offsets (plain loads/stores, or ``Call("tir.address_of", [BufferLoad])`` to pass a
  pointer to an extern function): nothing special is needed to lower it.
* **Loops**: ``For(loop_var, min, extent, kind, body, thread_tag, annotations)`` with
  ``kind`` one of ``ForKind`` (a ``str`` enum: ``"serial"``, ``"parallel"``,
  ``"vectorized"``, ``"unrolled"``, ``"thread_binding"``). A ``thread_binding`` loop has
  ``thread_tag`` ``"blockIdx.x|y|z"``, ``"threadIdx.x|y|z"`` or ``"vthread"``. Schedule
  annotations (``pragma_*``, ``storage_align`` ...) are in ``annotations`` (a dict; never
  mutate it, use ``dataclasses.replace``). A ``vectorized`` loop keeps scalar code in its
  body; the vectorize-lowering pass turns the loop var into ``Ramp(base, 1, lanes)`` and
  scalars into ``Broadcast(value, lanes)``, giving vector-dtype ``BufferLoad``/``Store``.
* **Intrinsic calls**: ``Call(dtype, op, args)`` where ``op`` is a string: math functions
  by their C name (``"exp"``, ``"log"``, ``"sqrt"``, ``"tanh"``, ``"erf"``, ``"fabs"``,
  ``"pow"``, ``"sigmoid"``, ...; ``"round"`` rounds halves to even — the table of their
  meanings is :mod:`toolchain.codegen.math_intrinsics`) and TIR builtins prefixed ``"tir."``
  (``"tir.address_of"``,
  ``"tir.storage_sync"`` with a ``StringImm`` scope, ...). ``"tir.if_then_else"`` (from
  ``te.if_then_else``) evaluates only the chosen side — padding loads rely on it — whereas
  both sides of a ``Select`` may be evaluated. Anything else is an extern C function call.
* **Float constants** may be ``inf``/``-inf``/``nan`` (identities of max/min reductions).
* **PrimFunc**: ``params`` are ``Buffer``s (array arguments) or scalar ``Var``s, in call
  order; ``buffer_map`` maps each buffer param's ``data`` Var to the Buffer. Symbolic shape
  Vars that appear in buffer shapes but are not params are bound from the arrays' shapes at
  call time. The body's outermost statement is the root ``BlockRealize`` until blocks are
  lowered.

Example::

    >>> from toolchain.tir import ir
    >>> i = ir.Var("i")
    >>> str(i * 2 + 1)
    'i * 2 + 1'
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolchain.tir.dtype import (  # noqa: F401 - re-exported as part of the IR API
    bits_of,
    element_of,
    is_bool,
    is_float,
    is_int,
    lanes_of,
    with_lanes,
)

# --------------------------------------------------------------------------------------
# expressions


class Node:
    """Base of every IR node; ``str(node)`` prints it as script."""

    __slots__ = ()

    def __str__(self) -> str:
        from toolchain.tir.printer import script

        return script(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {self}>"


def binary_dtype(a: PrimExpr, b: PrimExpr) -> str:
    if a.dtype == b.dtype:
        return a.dtype
    la, lb = lanes_of(a.dtype), lanes_of(b.dtype)
    lanes = max(la, lb)
    ea, eb = element_of(a.dtype), element_of(b.dtype)
    if is_float(ea) and not is_float(eb):
        return with_lanes(ea, lanes)
    if is_float(eb) and not is_float(ea):
        return with_lanes(eb, lanes)
    return with_lanes(ea if bits_of(ea) >= bits_of(eb) else eb, lanes)


def convert(value: Any, dtype: str | None = None) -> PrimExpr:
    """Turn a Python number (or an expression) into a ``PrimExpr``.

    ``dtype`` is the dtype wanted for Python numbers; by default ``int32`` for ints,
    ``bool`` for bools and ``float32`` for floats.
    """
    if isinstance(value, PrimExpr):
        return value
    if isinstance(value, bool):
        return IntImm(int(value), "bool")
    if isinstance(value, int):
        if dtype is not None and is_float(dtype):
            return FloatImm(float(value), element_of(dtype))
        return IntImm(value, element_of(dtype) if dtype else "int32")
    if isinstance(value, float):
        d = element_of(dtype) if dtype and is_float(dtype) else "float32"
        return FloatImm(value, d)
    if isinstance(value, str):
        return StringImm(value)
    if hasattr(value, "dtype") and hasattr(value, "item"):  # numpy scalar
        return convert(value.item(), str(value.dtype))
    raise TypeError(f"cannot convert {value!r} ({type(value).__name__}) to a TIR expression")


def pair_of(a: Any, b: Any) -> tuple[PrimExpr, PrimExpr]:
    """``a`` and ``b`` as expressions, a Python number taking the other's element dtype."""
    if isinstance(a, PrimExpr):
        if isinstance(b, PrimExpr):  # the operators' common case: nothing to convert
            return a, b
        return a, convert(b, element_of(a.dtype))
    if isinstance(b, PrimExpr):
        return convert(a, element_of(b.dtype)), b
    return convert(a), convert(b)


#: what the simplifier remembers on an expression (``toolchain.tir.arith``): never pickled
_REMEMBERED = frozenset({"_term_key", "_expr_key"})


class PrimExpr(Node):
    """Base of scalar/vector expressions; every subclass has a ``dtype`` field."""

    __slots__ = ()
    dtype: str

    def __getstate__(self) -> dict[str, Any]:
        # the simplifier's remembered keys (names children by id(): not valid elsewhere)
        return {k: v for k, v in self.__dict__.items() if k not in _REMEMBERED}

    def __add__(self, o: Any) -> PrimExpr:
        return Add(*pair_of(self, o))

    def __radd__(self, o: Any) -> PrimExpr:
        return Add(*pair_of(o, self))

    def __sub__(self, o: Any) -> PrimExpr:
        return Sub(*pair_of(self, o))

    def __rsub__(self, o: Any) -> PrimExpr:
        return Sub(*pair_of(o, self))

    def __mul__(self, o: Any) -> PrimExpr:
        return Mul(*pair_of(self, o))

    def __rmul__(self, o: Any) -> PrimExpr:
        return Mul(*pair_of(o, self))

    def __truediv__(self, o: Any) -> PrimExpr:
        return Div(*pair_of(self, o))

    def __rtruediv__(self, o: Any) -> PrimExpr:
        return Div(*pair_of(o, self))

    def __floordiv__(self, o: Any) -> PrimExpr:
        return FloorDiv(*pair_of(self, o))

    def __rfloordiv__(self, o: Any) -> PrimExpr:
        return FloorDiv(*pair_of(o, self))

    def __mod__(self, o: Any) -> PrimExpr:
        return FloorMod(*pair_of(self, o))

    def __rmod__(self, o: Any) -> PrimExpr:
        return FloorMod(*pair_of(o, self))

    def __neg__(self) -> PrimExpr:
        return Sub(convert(0, self.dtype), self)

    def __lt__(self, o: Any) -> PrimExpr:
        return LT(*pair_of(self, o))

    def __le__(self, o: Any) -> PrimExpr:
        return LE(*pair_of(self, o))

    def __gt__(self, o: Any) -> PrimExpr:
        return GT(*pair_of(self, o))

    def __ge__(self, o: Any) -> PrimExpr:
        return GE(*pair_of(self, o))

    def __and__(self, o: Any) -> PrimExpr:
        return And(*pair_of(self, o))

    def __or__(self, o: Any) -> PrimExpr:
        return Or(*pair_of(self, o))

    def __invert__(self) -> PrimExpr:
        return Not(self)

    def equal(self, o: Any) -> PrimExpr:
        """``self == o`` as an expression node."""
        return EQ(*pair_of(self, o))

    def not_equal(self, o: Any) -> PrimExpr:
        """``self != o`` as an expression node."""
        return NE(*pair_of(self, o))

    def astype(self, dtype: str) -> PrimExpr:
        """Cast to ``dtype`` (no-op if it already has it)."""
        return self if self.dtype == dtype else Cast(dtype, self)

    __hash__ = object.__hash__


@dataclass(frozen=True, eq=False, repr=False)
class IntImm(PrimExpr):
    """Integer (or bool) constant."""

    value: int
    dtype: str = "int32"

    def __init__(self, value: int, dtype: str = "int32") -> None:
        # written out instead of the dataclass's (one ``object.__setattr__`` call per
        # field): constants are made by the hundred thousand while lowering
        d = self.__dict__
        d["value"] = value
        d["dtype"] = dtype


@dataclass(frozen=True, eq=False, repr=False)
class FloatImm(PrimExpr):
    """Floating-point constant."""

    value: float
    dtype: str = "float32"


@dataclass(frozen=True, eq=False, repr=False)
class StringImm(PrimExpr):
    """String constant (argument of intrinsic calls)."""

    value: str
    dtype: str = "handle"


@dataclass(frozen=True, eq=False, repr=False)
class Var(PrimExpr):
    """A variable: loop variable, block variable, symbolic size, or a pointer (``handle``)."""

    name: str
    dtype: str = "int32"


@dataclass(frozen=True, eq=False, repr=False)
class BinaryOp(PrimExpr):
    a: PrimExpr
    b: PrimExpr
    dtype: str = ""

    def __init__(self, a: Any, b: Any, dtype: str = "") -> None:
        # written out instead of the dataclass's ``__init__`` + ``__post_init__`` (a third
        # of the cost): the simplifier and the mutators build these by the hundred thousand
        if not (isinstance(a, PrimExpr) and isinstance(b, PrimExpr)):  # Python numbers
            a, b = pair_of(a, b)
        d = self.__dict__
        d["a"] = a
        d["b"] = b
        if not dtype:
            da = a.dtype
            dtype = da if da == b.dtype and self._same_dtype else self._result_dtype(a, b)
        d["dtype"] = dtype

    #: the result has its operands' dtype when they agree (comparisons: ``bool``)
    _same_dtype = True

    @staticmethod
    def _result_dtype(a: PrimExpr, b: PrimExpr) -> str:
        return binary_dtype(a, b)


class Add(BinaryOp):
    """``a + b``."""


class Sub(BinaryOp):
    """``a - b``."""


class Mul(BinaryOp):
    """``a * b``."""


class Div(BinaryOp):
    """``a / b``: true division for floats, truncating division for integers (C ``/``)."""


class Mod(BinaryOp):
    """``a % b`` truncating (C ``%``)."""


class FloorDiv(BinaryOp):
    """``a // b`` rounding towards minus infinity."""


class FloorMod(BinaryOp):
    """``a % b`` with the sign of ``b`` (Python ``%``)."""


class Min(BinaryOp):
    """``min(a, b)``."""


class Max(BinaryOp):
    """``max(a, b)``."""


class _Compare(BinaryOp):
    _same_dtype = False

    @staticmethod
    def _result_dtype(a: PrimExpr, b: PrimExpr) -> str:
        return with_lanes("bool", max(lanes_of(a.dtype), lanes_of(b.dtype)))


class EQ(_Compare):
    """``a == b``."""


class NE(_Compare):
    """``a != b``."""


class LT(_Compare):
    """``a < b``."""


class LE(_Compare):
    """``a <= b``."""


class GT(_Compare):
    """``a > b``."""


class GE(_Compare):
    """``a >= b``."""


class And(_Compare):
    """Logical and."""


class Or(_Compare):
    """Logical or."""


@dataclass(frozen=True, eq=False, repr=False)
class Not(PrimExpr):
    """Logical not."""

    a: PrimExpr
    dtype: str = ""

    def __post_init__(self) -> None:
        if not self.dtype:
            object.__setattr__(self, "dtype", self.a.dtype)


@dataclass(frozen=True, eq=False, repr=False)
class Select(PrimExpr):
    """``true_value if condition else false_value`` (both sides may be evaluated)."""

    condition: PrimExpr
    true_value: PrimExpr
    false_value: PrimExpr
    dtype: str = ""

    def __post_init__(self) -> None:
        t, f = pair_of(self.true_value, self.false_value)
        object.__setattr__(self, "true_value", t)
        object.__setattr__(self, "false_value", f)
        object.__setattr__(self, "condition", convert(self.condition))
        if not self.dtype:
            object.__setattr__(self, "dtype", binary_dtype(t, f))


@dataclass(frozen=True, eq=False, repr=False)
class Cast(PrimExpr):
    """Convert ``value`` to ``dtype``."""

    dtype: str
    value: PrimExpr

    def __init__(self, dtype: str, value: PrimExpr) -> None:
        d = self.__dict__  # by hand, as IntImm's
        d["dtype"] = dtype
        d["value"] = value


@dataclass(frozen=True, eq=False, repr=False)
class Let(PrimExpr):
    """``body`` with ``var`` bound to ``value``."""

    var: Var
    value: PrimExpr
    body: PrimExpr
    dtype: str = ""

    def __post_init__(self) -> None:
        if not self.dtype:
            object.__setattr__(self, "dtype", self.body.dtype)


@dataclass(frozen=True, eq=False, repr=False)
class Call(PrimExpr):
    """Intrinsic or extern call ``op(*args)`` returning ``dtype`` (see module docstring)."""

    dtype: str
    op: str
    args: tuple[PrimExpr, ...] = ()

    def __init__(self, dtype: str, op: str, args: Sequence[Any] = ()) -> None:
        d = self.__dict__  # by hand, as IntImm's
        d["dtype"] = dtype
        d["op"] = op
        d["args"] = tuple([convert(a) for a in args])


@dataclass(frozen=True, eq=False, repr=False)
class Ramp(PrimExpr):
    """The vector ``[base, base + stride, ..., base + (lanes-1) * stride]``."""

    base: PrimExpr
    stride: PrimExpr
    lanes: int
    dtype: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "base", convert(self.base))
        object.__setattr__(self, "stride", convert(self.stride, self.base.dtype))
        if not self.dtype:
            object.__setattr__(self, "dtype", with_lanes(self.base.dtype, self.lanes))


@dataclass(frozen=True, eq=False, repr=False)
class Broadcast(PrimExpr):
    """``value`` repeated ``lanes`` times."""

    value: PrimExpr
    lanes: int
    dtype: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", convert(self.value))
        if not self.dtype:
            object.__setattr__(self, "dtype", with_lanes(self.value.dtype, self.lanes))


@dataclass(frozen=True, eq=False, repr=False)
class BufferLoad(PrimExpr):
    """``buffer[indices]``; a vector dtype when an index is a ``Ramp``."""

    buffer: Buffer
    indices: tuple[PrimExpr, ...]
    dtype: str = ""

    def __init__(self, buffer: Buffer, indices: Any, dtype: str = "") -> None:
        # written out, as ``BinaryOp``'s (the dataclass's frozen ``__setattr__`` per field
        # and ``__post_init__``): the mutators rebuild loads by the ten thousand
        idx = tuple(i if isinstance(i, PrimExpr) else convert(i) for i in indices)
        d = self.__dict__
        d["buffer"] = buffer
        d["indices"] = idx
        if not dtype:
            lanes = max([lanes_of(i.dtype) for i in idx] or [1])
            dtype = with_lanes(buffer.dtype, lanes)
        d["dtype"] = dtype


# --------------------------------------------------------------------------------------
# buffers, ranges, iteration variables


@dataclass(frozen=True, eq=False, repr=False)
class Buffer(Node):
    """A multi-dimensional array: ``name``, ``shape`` (exprs), ``dtype``, ``scope``.

    ``strides`` empty means compact row-major; ``align`` is the byte alignment the
    allocation must have; ``data`` is its pointer Var (created from the name if omitted).
    ``dim_align``: the ``(axis, factor, offset)`` padding rules ``storage_align`` asked
    for, kept so that buffer compaction can pad the compacted shape's strides again.
    ``swizzle``: 0, or 128 for a tile of 128-byte rows whose 16-byte chunks are stored
    XOR-permuted by the row within each group of 8 rows (``transform_layout(..,
    swizzle=128)``); the indices stay logical until ``flatten_buffer`` applies it.

    Example::

        >>> A = Buffer("A", (16, 16), "float32")
        >>> str(A[1, 2])
        'A[1, 2]'
    """

    name: str
    shape: tuple[PrimExpr, ...]
    dtype: str = "float32"
    scope: str = "global"
    strides: tuple[PrimExpr, ...] = ()
    align: int = 64
    elem_offset: PrimExpr | None = None
    data: Var | None = None
    dim_align: tuple[tuple[int, int, int], ...] = ()
    swizzle: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(convert(s) for s in self.shape))
        object.__setattr__(self, "strides", tuple(convert(s) for s in self.strides))
        if self.data is None:
            object.__setattr__(self, "data", Var(self.name, "handle"))

    def __getitem__(self, idx: Any) -> BufferLoad:
        if not isinstance(idx, tuple):
            idx = (idx,)
        return BufferLoad(self, idx)

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    def store(self, value: Any, indices: Sequence[Any]) -> BufferStore:
        """``BufferStore(self, value, indices)`` converting Python numbers."""
        return BufferStore(self, convert(value, self.dtype), tuple(indices))

    def full_region(self) -> BufferRegion:
        """The region covering the whole buffer."""
        return BufferRegion(self, tuple(Range(0, s) for s in self.shape))

    __hash__ = object.__hash__


@dataclass(frozen=True, eq=False, repr=False)
class Range(Node):
    """The half-open interval ``[min, min + extent)``."""

    min: PrimExpr
    extent: PrimExpr

    def __post_init__(self) -> None:
        object.__setattr__(self, "min", convert(self.min))
        object.__setattr__(self, "extent", convert(self.extent))

    @staticmethod
    def from_min_extent(min_: Any, extent: Any) -> Range:
        """Same as ``Range(min_, extent)``."""
        return Range(min_, extent)


@dataclass(frozen=True, eq=False, repr=False)
class BufferRegion(Node):
    """A rectangular region of a buffer: one ``Range`` per dimension."""

    buffer: Buffer
    region: tuple[Range, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "region", tuple(self.region))


class IterType(str, enum.Enum):
    """Kind of a block iteration variable."""

    SPATIAL = "spatial"
    REDUCE = "reduce"
    OPAQUE = "opaque"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, eq=False, repr=False)
class IterVar(Node):
    """A block iteration variable: ``var`` ranging over ``dom`` of kind ``iter_type``."""

    var: Var
    dom: Range
    iter_type: str = IterType.SPATIAL

    def __post_init__(self) -> None:
        object.__setattr__(self, "iter_type", IterType(self.iter_type))


# --------------------------------------------------------------------------------------
# statements


class Stmt(Node):
    """Base of statements."""

    __slots__ = ()
    __hash__ = object.__hash__


class ForKind(str, enum.Enum):
    """How a ``For`` loop runs."""

    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"
    THREAD_BINDING = "thread_binding"

    def __str__(self) -> str:
        return self.value


#: Thread tags accepted by ``For(kind="thread_binding")`` / ``Schedule.bind``.
THREAD_TAGS = (
    "blockIdx.x", "blockIdx.y", "blockIdx.z",
    "threadIdx.x", "threadIdx.y", "threadIdx.z",
    "vthread", "vthread.x", "vthread.y", "vthread.z",
)


@dataclass(frozen=True, eq=False, repr=False)
class BufferStore(Stmt):
    """``buffer[indices] = value``."""

    buffer: Buffer
    value: PrimExpr
    indices: tuple[PrimExpr, ...]

    def __init__(self, buffer: Buffer, value: Any, indices: Any) -> None:
        # written out, as ``BufferLoad``'s
        d = self.__dict__
        d["buffer"] = buffer
        d["value"] = value if isinstance(value, PrimExpr) else convert(value, buffer.dtype)
        d["indices"] = tuple(i if isinstance(i, PrimExpr) else convert(i) for i in indices)


@dataclass(frozen=True, eq=False, repr=False)
class For(Stmt):
    """``for loop_var in range(min, min + extent)`` of the given ``kind``."""

    loop_var: Var
    min: PrimExpr
    extent: PrimExpr
    kind: str
    body: Stmt
    thread_tag: str | None = None
    annotations: Mapping[str, Any] = field(default_factory=dict)

    def __init__(self, loop_var: Var, min: Any, extent: Any, kind: Any,  # noqa: A002
                 body: Stmt, thread_tag: str | None = None,
                 annotations: Mapping[str, Any] | None = None) -> None:
        # written out, as ``BinaryOp``'s: the dataclass's ``__init__`` (a frozen
        # ``__setattr__`` per field) + ``__post_init__`` and the enum call on a kind that
        # is a ``ForKind`` already cost more than the rest of a mutator's ``visit_For``
        d = self.__dict__
        d["loop_var"] = loop_var
        d["min"] = min if isinstance(min, PrimExpr) else convert(min)
        d["extent"] = extent if isinstance(extent, PrimExpr) else convert(extent)
        d["kind"] = kind if type(kind) is ForKind else ForKind(kind)
        d["body"] = body
        d["thread_tag"] = thread_tag
        d["annotations"] = {} if annotations is None else annotations


@dataclass(frozen=True, eq=False, repr=False)
class IfThenElse(Stmt):
    """``if condition: then_case else: else_case``."""

    condition: PrimExpr
    then_case: Stmt
    else_case: Stmt | None = None


@dataclass(frozen=True, eq=False, repr=False)
class LetStmt(Stmt):
    """Bind ``var`` to ``value`` in ``body``."""

    var: Var
    value: PrimExpr
    body: Stmt


@dataclass(frozen=True, eq=False, repr=False)
class AttrStmt(Stmt):
    """Attach an attribute ``key = value`` (about ``node``) to ``body``.

    Used by lowering (e.g. ``"thread_extent"`` with ``node`` the thread Var, ``"pragma_*"``).
    """

    node: Any
    key: str
    value: PrimExpr
    body: Stmt


@dataclass(frozen=True, eq=False, repr=False)
class Allocate(Stmt):
    """Allocate ``buffer`` (its shape, dtype and scope) for the duration of ``body``."""

    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, eq=False, repr=False)
class SeqStmt(Stmt):
    """Statements in order."""

    seq: tuple[Stmt, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "seq", tuple(self.seq))


@dataclass(frozen=True, eq=False, repr=False)
class Evaluate(Stmt):
    """Evaluate an expression for its side effect (typically a ``Call``)."""

    value: PrimExpr


@dataclass(frozen=True, eq=False, repr=False)
class Block(Stmt):
    """A TensorIR block: an isolated computation over its ``iter_vars`` (see module doc)."""

    name_hint: str
    iter_vars: tuple[IterVar, ...]
    reads: tuple[BufferRegion, ...]
    writes: tuple[BufferRegion, ...]
    body: Stmt
    init: Stmt | None = None
    alloc_buffers: tuple[Buffer, ...] = ()
    annotations: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("iter_vars", "reads", "writes", "alloc_buffers"):
            object.__setattr__(self, name, tuple(getattr(self, name)))


@dataclass(frozen=True, eq=False, repr=False)
class BlockRealize(Stmt):
    """Run ``block`` with its iter vars bound to ``iter_values`` where ``predicate`` holds."""

    iter_values: tuple[PrimExpr, ...]
    predicate: PrimExpr
    block: Block

    def __post_init__(self) -> None:
        object.__setattr__(self, "iter_values", tuple(convert(v) for v in self.iter_values))
        object.__setattr__(self, "predicate", convert(self.predicate))


def seq(*stmts: Stmt | None) -> Stmt:
    """Flatten nested ``SeqStmt`` and drop ``None``; a single statement is returned as is."""
    out: list[Stmt] = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, SeqStmt):
            out.extend(s.seq)
        else:
            out.append(s)
    if len(out) == 1:
        return out[0]
    return SeqStmt(tuple(out))


# --------------------------------------------------------------------------------------
# functions


Param = Var | Buffer


@dataclass(frozen=True, eq=False, repr=False)
class PrimFunc(Node):
    """A function over buffers: ``params`` (Buffers and scalar Vars), ``body``, ``attrs``.

    ``buffer_map`` maps each buffer param's ``data`` Var to the Buffer (TVM's convention).

    Example::

        >>> A = Buffer("A", (4,), "float32"); B = Buffer("B", (4,), "float32")
        >>> i = Var("i")
        >>> f = PrimFunc((A, B), For(i, 0, 4, "serial", B.store(A[i] + 1.0, [i])))
        >>> print(f)  # doctest: +NORMALIZE_WHITESPACE
        @T.prim_func
        def main(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
            for i in range(4):
                B[i] = A[i] + T.float32(1.0)
    """

    params: tuple[Param, ...]
    body: Stmt
    name: str = "main"
    attrs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", tuple(self.params))

    @property
    def buffer_map(self) -> dict[Var, Buffer]:
        """``{buffer.data: buffer}`` for every Buffer param."""
        return {p.data: p for p in self.params if isinstance(p, Buffer)}

    @property
    def buffers(self) -> tuple[Buffer, ...]:
        """The Buffer params in order."""
        return tuple(p for p in self.params if isinstance(p, Buffer))

    def with_body(self, body: Stmt) -> PrimFunc:
        """A copy with a new body."""
        return PrimFunc(self.params, body, self.name, self.attrs)

    def __getstate__(self) -> dict[str, Any]:
        # what the schedule's index remembers about this version (every statement's
        # ancestors): made again on demand, not worth pickling
        return {k: v for k, v in self.__dict__.items() if k != "_schedule_index"}

    def script(self) -> str:
        """The function as TVMScript-like text (same as ``str(func)``)."""
        return str(self)


# --------------------------------------------------------------------------------------
# helpers


def const(value: Any, dtype: str = "int32") -> PrimExpr:
    """A constant of ``dtype`` (``const(1.5, "float32")``)."""
    if is_float(dtype):
        return FloatImm(float(value), dtype)
    if is_bool(dtype):
        return IntImm(int(bool(value)), dtype)
    return IntImm(int(value), dtype)


def is_const_int(e: Any, value: int | None = None) -> bool:
    """True if ``e`` is an ``IntImm`` (equal to ``value`` if given)."""
    return isinstance(e, IntImm) and (value is None or e.value == value)


def const_int(e: PrimExpr) -> int | None:
    """The value of an integer constant, else ``None``."""
    return e.value if isinstance(e, IntImm) else None


from toolchain.tir.structural import structural_equal  # noqa: E402,F401 - re-exported

__all__ = [
    "Add", "Allocate", "And", "AttrStmt", "Block", "BlockRealize", "Broadcast", "Buffer",
    "BufferLoad", "BufferRegion", "BufferStore", "Call", "Cast", "Div", "EQ", "Evaluate",
    "FloatImm", "FloorDiv", "FloorMod", "For", "ForKind", "GE", "GT", "IfThenElse", "IntImm",
    "IterType", "IterVar", "LE", "LT", "Let", "LetStmt", "Max", "Min", "Mod", "Mul", "NE", "Node",
    "Not", "Or", "Param", "PrimExpr", "PrimFunc", "Ramp", "Range", "Select", "SeqStmt", "Stmt",
    "StringImm", "Sub", "THREAD_TAGS", "Var", "bits_of", "const", "const_int", "convert",
    "element_of", "is_bool", "is_const_int", "is_float", "is_int", "lanes_of", "seq",
    "structural_equal", "with_lanes",
]
