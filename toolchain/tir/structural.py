"""Structural equality of IR trees.

>>> from toolchain.tir import ir
>>> i = ir.Var("i")
>>> structural_equal(i + 1, i + 1), structural_equal(ir.Var("a") + 1, ir.Var("b") + 1)
(True, False)
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from toolchain.tir.ir import (
    BinaryOp,
    Broadcast,
    Buffer,
    BufferLoad,
    Call,
    Cast,
    FloatImm,
    IntImm,
    Node,
    Not,
    Ramp,
    Select,
    StringImm,
    Var,
)


def structural_equal(a: Any, b: Any, map_free_vars: bool = False) -> bool:
    """Structural equality of two IR trees (Vars and Buffers by identity).

    With ``map_free_vars`` Vars/Buffers are matched up consistently instead (so two
    independently built but identical functions compare equal).
    """
    return _StructEq(map_free_vars).eq(a, b)


class _StructEq:
    def __init__(self, map_free: bool) -> None:
        self.map_free = map_free
        self.vmap: dict[int, Any] = {}

    def eq(self, a: Any, b: Any) -> bool:
        if a is b:
            return True
        if isinstance(a, (Var, Buffer)) or isinstance(b, (Var, Buffer)):
            if not self.map_free or type(a) is not type(b):
                return False
            if id(a) in self.vmap:
                return self.vmap[id(a)] is b
            if isinstance(a, Var) and a.dtype != b.dtype:
                return False
            if isinstance(a, Buffer) and not (
                a.dtype == b.dtype and a.scope == b.scope and a.swizzle == b.swizzle
                and self.eq(a.shape, b.shape)
            ):
                return False
            self.vmap[id(a)] = b
            return True
        if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
            return len(a) == len(b) and all(self.eq(x, y) for x, y in zip(a, b, strict=False))
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(self.eq(a[k], b[k]) for k in a)
        if isinstance(a, Node):
            if type(a) is not type(b):
                return False
            return all(self.eq(getattr(a, f.name), getattr(b, f.name)) for f in fields(a))
        return bool(a == b)


# ----------------------------------------------------------------------- expression keys

def expr_key(e: Any, found: list[Var] | None = None) -> Any:
    """A hashable key equal for structurally equal expressions (Vars/Buffers by identity).

    The key holds the Vars and Buffers themselves (compared and hashed by identity), not
    their ``id()``, so a key stays valid while it is kept: a memo table keyed by it cannot
    confuse a dead Var with a new one that reuses its address. Every Var met is appended to
    ``found`` (with repeats) when a list is given. Float constants are keyed by ``repr`` so
    ``-0.0`` and ``0.0`` differ.

    >>> from toolchain.tir import ir
    >>> i = ir.Var("i")
    >>> expr_key(i * 2 + 1) == expr_key(i * 2 + 1), expr_key(i + 1) == expr_key(i + 2)
    (True, False)
    """
    t = type(e)
    if t is Var:
        if found is not None:
            found.append(e)
        return e
    if t is IntImm:
        return ("i", e.value, e.dtype)
    if isinstance(e, BinaryOp):
        # a leaf operand (about half of them) keyed here, without a call: what the two
        # cases above give it, its Vars met in the same order
        a, b = e.a, e.b
        ta, tb = type(a), type(b)
        if ta is Var:
            ka = a
            if found is not None:
                found.append(a)
        else:
            ka = ("i", a.value, a.dtype) if ta is IntImm else expr_key(a, found)
        if tb is Var:
            kb = b
            if found is not None:
                found.append(b)
        else:
            kb = ("i", b.value, b.dtype) if tb is IntImm else expr_key(b, found)
        return (t, ka, kb, e.dtype)
    if t is FloatImm:
        return ("f", repr(e.value), e.dtype)
    if t is BufferLoad:
        return ("ld", e.buffer, tuple(expr_key(i, found) for i in e.indices), e.dtype)
    if t is Cast:
        return ("cast", e.dtype, expr_key(e.value, found))
    if t is Call:
        return ("call", e.op, e.dtype, tuple(expr_key(a, found) for a in e.args))
    if t is Select:
        return ("sel", expr_key(e.condition, found), expr_key(e.true_value, found),
                expr_key(e.false_value, found), e.dtype)
    if t is Not:
        return ("not", expr_key(e.a, found), e.dtype)
    if t is Ramp:
        return ("ramp", expr_key(e.base, found), expr_key(e.stride, found), e.lanes, e.dtype)
    if t is Broadcast:
        return ("bc", expr_key(e.value, found), e.lanes, e.dtype)
    if t is StringImm:
        return ("s", e.value)
    if isinstance(e, Node):  # any other node: field by field
        return (t, *(expr_key(getattr(e, f.name), found) for f in fields(e)))
    if isinstance(e, (tuple, list)):
        return tuple(expr_key(x, found) for x in e)
    return e


# ----------------------------------------------------------------------- function keys

#: fields that only name things (C identifiers, printing): left out of structural_key
_NAME_FIELDS = {"name", "name_hint"}
#: attributes (``PrimFunc.attrs``) that only name things
_NAME_ATTRS = {"global_symbol"}


class _KeyBuilder:
    """Builds :func:`structural_key`: Vars and Buffers numbered by first appearance."""

    def __init__(self, names: list[Any] | None = None) -> None:
        self.index: dict[int, int] = {}
        self.keep: list[Any] = []  # ids stay unique while the objects live
        #: where given (:func:`keys`), the names the key leaves out, in order of appearance
        self.names = names

    def ref(self, obj: Any) -> tuple[bool, int]:
        k = id(obj)
        if k in self.index:
            return False, self.index[k]
        self.index[k] = len(self.keep)
        self.keep.append(obj)
        return True, self.index[k]

    def key(self, x: Any) -> Any:  # noqa: C901 - one branch per kind of value
        t = type(x)
        if t is Var:
            first, n = self.ref(x)
            if first and self.names is not None:
                self.names.append(x.name)
            return ("var", n, x.dtype)
        if t is IntImm:
            return ("i", x.value, x.dtype)
        if issubclass(t, BinaryOp):
            return (t, self.key(x.a), self.key(x.b), x.dtype)
        if t is BufferLoad:
            return ("ld", self.key(x.buffer), tuple(self.key(i) for i in x.indices), x.dtype)
        if t is FloatImm:
            return ("f", repr(x.value), x.dtype)
        if t is Buffer:
            first, n = self.ref(x)
            if not first:
                return ("buf", n)
            if self.names is not None:
                self.names.append(x.name)
            return ("buf", n, *(self.key(getattr(x, f)) for f in _fields(t)))
        if isinstance(x, Node):
            if self.names is not None:
                self.names.extend(getattr(x, f) for f in _name_fields(t))
            return (t, *(self.key(getattr(x, f)) for f in _fields(t)))
        if t is tuple or t is list:
            return (t, *(self.key(v) for v in x))
        if isinstance(x, dict) or hasattr(x, "items"):
            if self.names is not None:
                self.names.extend((k, str(x[k])) for k in sorted(_NAME_ATTRS) if k in x)
            return ("map", *sorted(((str(k), self.key(v)) for k, v in x.items()
                                    if k not in _NAME_ATTRS), key=lambda kv: kv[0]))
        if x is None or isinstance(x, (bool, int, str, bytes)):
            return (t, x)
        if isinstance(x, float):
            return ("float", repr(x))
        if isinstance(x, (tuple, list)):
            return (t, *(self.key(v) for v in x))
        if hasattr(x, "tobytes") and hasattr(x, "dtype"):  # numpy array or scalar
            return ("array", str(x.dtype), getattr(x, "shape", ()), x.tobytes())
        _, n = self.ref(x)  # anything else: equal only to itself
        return ("object", n, id(x))


_FIELDS: dict[type, tuple[str, ...]] = {}
_NAMES: dict[type, tuple[str, ...]] = {}


def _name_fields(t: type) -> tuple[str, ...]:
    """The dataclass fields of node class ``t`` that only name things (cached)."""
    out = _NAMES.get(t)
    if out is None:
        out = _NAMES[t] = tuple(f.name for f in fields(t) if f.name in _NAME_FIELDS)
    return out


def _fields(t: type) -> tuple[str, ...]:
    """The dataclass fields of node class ``t`` that are not names (cached)."""
    out = _FIELDS.get(t)
    if out is None:
        out = _FIELDS[t] = tuple(f.name for f in fields(t) if f.name not in _NAME_FIELDS)
    return out


def structural_key(node: Any) -> Any:
    """A hashable key of an IR tree (e.g. a ``PrimFunc``) equal for two trees that differ
    only in names and in the identity of their Vars and Buffers (matched by order of first
    appearance, as ``structural_equal(..., map_free_vars=True)`` does).

    Every constant, shape, dtype, loop kind, annotation and attribute is part of the key:
    two functions with equal keys lower to the same code up to names. An attribute value
    Kiln does not know how to compare makes the key unique to that function (by its
    ``id``: keep ``node`` alive as long as its key is in use).

    >>> from toolchain import te
    >>> def add_one(name):
    ...     A = te.placeholder((8,), name=name)
    ...     return te.create_prim_func([A, te.compute((8,), lambda i: A[i] + 1.0)])
    >>> structural_key(add_one("A")) == structural_key(add_one("X"))
    True
    """
    return _KeyBuilder().key(node)


def keys(node: Any) -> tuple[Any, Any]:
    """``(structural_key(node), exact)`` from one walk: ``exact`` adds every name (of Vars
    and Buffers at their first appearance, ``name`` fields, the ``global_symbol``
    attribute) in order, so two trees with equal exact keys print the same.

    >>> from toolchain import te
    >>> def add_one(name):
    ...     A = te.placeholder((8,), name=name)
    ...     return te.create_prim_func([A, te.compute((8,), lambda i: A[i] + 1.0)])
    >>> (a, ea), (x, ex), (_, ea2) = keys(add_one("A")), keys(add_one("X")), keys(add_one("A"))
    >>> a == x, ea == ex, ea == ea2
    (True, False, True)
    """
    b = _KeyBuilder(names=[])
    k = b.key(node)
    return k, (k, tuple(b.names))
