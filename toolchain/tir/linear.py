"""Linear forms of integer expressions: the canonical form :mod:`toolchain.tir.arith`
simplifies, bounds and proves with.

An integer expression is written as ``c0 + c1*t1 + c2*t2 + ...`` (:class:`Lin`), each
``t`` an atom (a Var, or a non-linear subexpression such as ``x // 4``) keyed by its
structure (:func:`term_key`); :func:`to_lin` collects a sum's terms and folds its
constants, :meth:`Lin.to_expr` builds the canonical expression back, and
:func:`recombine_divmod` folds ``(x // c) * c + x % c`` into ``x``. :func:`same_tree` and
:func:`built_already` tell the simplifier that an expression is canonical already (so it
keeps the object), and :func:`lin_of_pair` builds a sum's form from its operands' forms.

>>> from toolchain.tir.ir import Var
>>> i, j = Var("i"), Var("j")
>>> str(to_lin(j * 2 + i + 3 + i).to_expr())
'j * 2 + i * 2 + 3'
"""

from __future__ import annotations

from typing import Any

from toolchain.tir import ir

#: the integer dtypes linear forms are made of
INT_DTYPES = frozenset(("int32", "int64", "int16", "int8", "uint8", "uint16", "uint32",
                        "uint64"))


def term_key(e: ir.PrimExpr) -> Any:
    """Structural hash key of an expression (Vars/Buffers by identity).

    A compound expression remembers its key: expressions are immutable, and the
    simplifier asks for the keys of the same subtrees again and again (a tenth of a
    small model's compile time went here)."""
    t = type(e)
    if t is ir.Var:
        return ("v", id(e))
    if t is ir.IntImm:
        return ("i", e.value, e.dtype)
    if t is ir.FloatImm:
        return ("f", e.value, e.dtype)
    known = e.__dict__.get("_term_key")
    if known is None:
        known = _compound_key(e)
        object.__setattr__(e, "_term_key", known)
    return known


def _compound_key(e: ir.PrimExpr) -> Any:
    if isinstance(e, ir.BinaryOp):
        return (type(e).__name__, term_key(e.a), term_key(e.b))
    if isinstance(e, ir.BufferLoad):
        return ("ld", id(e.buffer), tuple(term_key(i) for i in e.indices))
    if isinstance(e, ir.Cast):
        return ("cast", e.dtype, term_key(e.value))
    if isinstance(e, ir.Call):
        return ("call", e.op, tuple(term_key(a) for a in e.args))
    if isinstance(e, ir.Select):
        return ("sel", term_key(e.condition), term_key(e.true_value), term_key(e.false_value))
    return ("id", id(e))


class Lin:
    """``const + sum(coeff * atom)`` over an integer dtype; atoms keyed structurally."""

    __slots__ = ("terms", "const", "dtype")

    def __init__(self, dtype: str, const: int = 0,
                 terms: dict[Any, list[Any]] | None = None) -> None:
        self.dtype = dtype
        self.const = const
        self.terms: dict[Any, list[Any]] = terms if terms is not None else {}

    def copy(self) -> Lin:
        return Lin(self.dtype, self.const, {k: [a, c] for k, (a, c) in self.terms.items()})

    def add_term(self, atom: ir.PrimExpr, coeff: int) -> None:
        k = term_key(atom)
        terms = self.terms
        known = terms.get(k)
        if known is not None:
            known[1] += coeff
            if known[1] == 0:
                del terms[k]
        elif coeff:
            terms[k] = [atom, coeff]

    def add(self, other: Lin, scale: int = 1) -> Lin:
        out = self.copy()
        out.add_into(other, scale)
        return out

    def add_into(self, other: Lin, scale: int = 1) -> None:
        """``self += other * scale`` in place (what :meth:`add` returns, without the copy)."""
        self.const += other.const * scale
        for a, c in other.terms.values():
            self.add_term(a, c * scale)

    def scale(self, s: int) -> Lin:
        if s == 0:
            return Lin(self.dtype)
        return Lin(self.dtype, self.const * s,
                   {k: [a, c * s] for k, (a, c) in self.terms.items()})

    @property
    def is_const(self) -> bool:
        return not self.terms

    def to_expr(self) -> ir.PrimExpr:
        recombine_divmod(self)
        dt = self.dtype
        pos = [(a, c) for a, c in self.terms.values() if c > 0]
        neg = [(a, -c) for a, c in self.terms.values() if c < 0]
        out: ir.PrimExpr | None = None

        def term(a: ir.PrimExpr, c: int) -> ir.PrimExpr:
            return a if c == 1 else ir.Mul(a, ir.IntImm(c, dt))

        for a, c in pos:
            out = term(a, c) if out is None else ir.Add(out, term(a, c))
        const = self.const
        if out is None and neg and const > 0:
            out, const = ir.IntImm(const, dt), 0
        for a, c in neg:
            out = ir.Sub(ir.IntImm(0, dt), term(a, c)) if out is None else ir.Sub(out, term(a, c))
        if out is None:
            return ir.IntImm(self.const, dt)
        if const > 0:
            out = ir.Add(out, ir.IntImm(const, dt))
        elif const < 0:
            out = ir.Sub(out, ir.IntImm(-const, dt))
        return out


def built_already(lin: Lin, e: ir.PrimExpr) -> bool:
    """Whether ``lin.to_expr()`` would build a tree :func:`same_tree` as ``e`` (a form on
    which :func:`recombine_divmod` has nothing left to do), found without building it.

    The simplifier's canonical sums (most of those it meets) come back as themselves; this
    walks ``e`` down its left spine, as ``to_expr`` would have built it, instead of
    allocating a copy and comparing the two. ``False`` means "build and compare": it is
    also the answer wherever an atom's dtype is not ``lin``'s (the built nodes' dtypes
    would then need ``binary_dtype``).

    >>> from toolchain.tir.ir import Var
    >>> i, j = Var("i"), Var("j")
    >>> e = i * 4 + j - 3
    >>> built_already(to_lin(e), e), built_already(to_lin(j + i), j + i)
    (True, True)
    >>> built_already(to_lin(3 + i), 3 + i)  # built as i + 3
    False
    """
    dt = lin.dtype
    pos: list[tuple[ir.PrimExpr, Any]] = []
    neg: list[tuple[ir.PrimExpr, Any]] = []
    for a, c in lin.terms.values():
        if a.dtype != dt:
            return False
        if c > 0:
            pos.append((a, c))
        else:  # add_term drops zero coefficients
            neg.append((a, -c))
    const = lin.const
    if not pos and not neg:
        return _is_imm(e, const, dt)
    # outermost first: the constant, the negative terms, the positive ones, the first
    x = e
    if pos or const < 0:
        if const:  # ``+ const`` or ``- const`` (no positive terms: ``0 - t - const``)
            if type(x) is not (ir.Add if const > 0 else ir.Sub) or x.dtype != dt \
                    or not _is_imm(x.b, const if const > 0 else -const, dt):
                return False
            x = x.a
    for n in range(len(neg) - 1, 0 if not pos and const <= 0 else -1, -1):
        a, c = neg[n]
        if type(x) is not ir.Sub or x.dtype != dt or not _is_term(x.b, a, c, dt):
            return False
        x = x.a
    if pos:
        for n in range(len(pos) - 1, 0, -1):
            a, c = pos[n]
            if type(x) is not ir.Add or x.dtype != dt or not _is_term(x.b, a, c, dt):
                return False
            x = x.a
        a, c = pos[0]
        return _is_term(x, a, c, dt)
    if const > 0:  # ``const - t1 - t2 ...``
        return _is_imm(x, const, dt)
    a, c = neg[0]  # ``0 - t1 - t2 ...``
    return (type(x) is ir.Sub and x.dtype == dt and _is_imm(x.a, 0, dt)
            and _is_term(x.b, a, c, dt))


def _is_imm(y: ir.PrimExpr, v: Any, dt: str) -> bool:
    """``y`` is what ``ir.IntImm(v, dt)`` would be under :func:`same_tree`."""
    return (type(y) is ir.IntImm and y.dtype == dt and y.value == v
            and type(y.value) is type(v))


def _is_term(y: ir.PrimExpr, a: ir.PrimExpr, c: Any, dt: str) -> bool:
    """``y`` is what ``to_expr``'s term ``a * c`` would be under :func:`same_tree`."""
    if c == 1:
        return same_tree(a, y)
    return (type(y) is ir.Mul and y.dtype == dt and same_tree(a, y.a)
            and _is_imm(y.b, c, dt))


def same_tree(x: ir.PrimExpr, y: ir.PrimExpr) -> bool:
    """``x`` and ``y`` are the same arithmetic over the same atoms (objects): what a
    linear form rebuilt into an expression gives when the expression was canonical."""
    if x is y:
        return True
    t = type(x)
    if t is not type(y) or x.dtype != y.dtype:
        return False
    if t is ir.IntImm:
        return x.value == y.value and type(x.value) is type(y.value)
    if isinstance(x, ir.BinaryOp):
        return same_tree(x.a, y.a) and same_tree(x.b, y.b)
    return False


def _const_div(e: Any, cls: type) -> tuple[ir.PrimExpr, int] | None:
    """``(a, c)`` if ``e`` is ``cls(a, c)`` with a constant ``c > 0``."""
    if isinstance(e, cls) and isinstance(e.b, ir.IntImm) and e.b.value > 0:
        return e.a, e.b.value
    return None


def _merge_partner(lin: Lin, a: ir.PrimExpr, c: int,
                   coeff: int) -> tuple[Any, ir.PrimExpr] | None:
    """A term ``q * (coeff * c)`` of ``lin`` with ``q * c + a % c == w``: ``(key, w)``.

    Three forms of ``q`` (all exact for every integer ``a`` when ``c, m, n > 0``)::

        a // c                          ->  w = a
        (a % m) // c      with c | m    ->  w = a % m
        (a // c) % n                    ->  w = a % (c * n)
    """
    ka = term_key(a)
    for key, (atom, k) in lin.terms.items():
        if k != coeff * c:
            continue
        div = _const_div(atom, ir.FloorDiv)
        if div is not None and div[1] == c:
            if term_key(div[0]) == ka:
                return key, a
            inner = _const_div(div[0], ir.FloorMod)
            if inner is not None and inner[1] % c == 0 and term_key(inner[0]) == ka:
                return key, div[0]
        mod = _const_div(atom, ir.FloorMod)
        if mod is not None:
            inner = _const_div(mod[0], ir.FloorDiv)
            if inner is not None and inner[1] == c and term_key(inner[0]) == ka:
                return key, ir.FloorMod(a, ir.IntImm(c * mod[1], atom.dtype))
    return None


def recombine_divmod(lin: Lin) -> bool:
    """Rewrite ``q * (c*k) + (a % c) * k`` into ``w * k`` inside ``lin`` (see
    :func:`_merge_partner` for the forms of ``q``), repeatedly, so that the indices of
    fused-then-split loops (``x // 256 * 256 + x % 256 // 32 * 32 + x % 32``) become ``x``.
    Returns whether anything changed.
    """
    for atom, _ in lin.terms.values():
        if isinstance(atom, ir.FloorMod):
            break
    else:  # no ``a % c`` term: nothing to recombine (most forms)
        return False
    any_change = False
    changed = True
    while changed:
        changed = False
        for key, (atom, coeff) in list(lin.terms.items()):
            mod = _const_div(atom, ir.FloorMod)
            if mod is None:
                continue
            found = _merge_partner(lin, mod[0], mod[1], coeff)
            if found is None:
                continue
            del lin.terms[key]
            del lin.terms[found[0]]
            inner = to_lin(found[1])
            if inner is None:
                lin.add_term(found[1], coeff)
            else:
                merged = lin.add(inner, coeff)
                lin.terms, lin.const = merged.terms, merged.const
            changed = any_change = True
            break
    return any_change


def to_lin(e: ir.PrimExpr) -> Lin | None:
    """Linear form of an (already simplified) integer expression, or None if not integer."""
    dt = e.dtype
    if dt not in INT_DTYPES:
        return None
    t = type(e)
    if t is ir.Var:  # what ``add_term(e, 1)`` below makes of it
        return Lin(dt, 0, {("v", id(e)): [e, 1]})
    if t is ir.IntImm:
        return Lin(dt, e.value)
    if t is ir.Add or t is ir.Sub:
        a, b = to_lin(e.a), to_lin(e.b)
        if a is not None and b is not None:
            a.add_into(b, 1 if t is ir.Add else -1)  # a is this call's own: no copy
            return a
    elif t is ir.Mul:
        a, eb = to_lin(e.a), e.b
        if type(eb) is ir.IntImm and eb.dtype in INT_DTYPES:  # ``x * c``: to_lin(c) is c
            if a is not None:
                return a.scale(eb.value)
        else:
            b = to_lin(eb)
            if a is not None and b is not None:
                if not b.terms:
                    return a.scale(b.const)
                if not a.terms:
                    return b.scale(a.const)
    lin = Lin(dt)
    lin.add_term(e, 1)
    return lin


def lin_of_pair(e: ir.PrimExpr, lin_a: Lin | None, lin_b: Lin | None) -> Lin | None:
    """:func:`to_lin` of an integer ``+``, ``-`` or ``*`` whose operands' linear forms are
    ``lin_a`` and ``lin_b`` where given (each then owned by this call), the same form
    built the same way (terms in the same order, the same atom objects)."""
    a = lin_a if lin_a is not None else to_lin(e.a)
    b = lin_b if lin_b is not None else to_lin(e.b)
    if a is not None and b is not None:
        t = type(e)
        if t is not ir.Mul:
            a.add_into(b, 1 if t is ir.Add else -1)
            return a
        if not b.terms:
            return a.scale(b.const)
        if not a.terms:
            return b.scale(a.const)
    lin = Lin(e.dtype)
    lin.add_term(e, 1)
    return lin


#: constants this small fold the same with and without int32 wrapping (:func:`small_lin`)
SMALL_CONST = 1 << 30

#: the dtypes whose sums :func:`small_lin` and the region analysis read off directly
SIGNED_DTYPES = ("int32", "int64")


def small_lin(e: ir.PrimExpr, dt: str, positive: bool = False) -> Lin | None:
    """:func:`to_lin` of ``e`` where ``e`` is made of Vars,
    constants, ``+``, ``-`` and ``*`` by a constant, all of dtype ``dt``, and every
    subexpression's constants are small (so that the simplifier's folding of two
    constants, which wraps to the dtype, folds them exactly) and, with ``positive``, its
    Vars' coefficients positive; else None.

    >>> i = ir.Var("i")
    >>> str(small_lin((i + 2) * 3 - i, "int32").to_expr())
    'i * 2 + 6'
    >>> small_lin(i * i, "int32"), small_lin(i + (1 << 30), "int32")
    (None, None)
    """
    if e.dtype != dt:
        return None
    t = type(e)
    if t is ir.Var:
        lin = Lin(dt)
        lin.add_term(e, 1)
        return lin
    if t is ir.IntImm:
        return Lin(dt, e.value) if -SMALL_CONST < e.value < SMALL_CONST else None
    if t is not ir.Add and t is not ir.Sub and t is not ir.Mul:
        return None
    a, b = small_lin(e.a, dt, positive), small_lin(e.b, dt, positive)
    if a is None or b is None:
        return None
    if t is ir.Mul:  # as ``to_lin`` scales
        if not b.terms:
            a = a.scale(b.const)
        elif not a.terms:
            a = b.scale(a.const)
        else:
            return None
    else:
        a.add_into(b, 1 if t is ir.Add else -1)
    if not -SMALL_CONST < a.const < SMALL_CONST or any(
            not -SMALL_CONST < c < SMALL_CONST for _, c in a.terms.values()):
        return None
    if positive and any(c <= 0 for _, c in a.terms.values()):
        return None
    return a


# The two shortcuts below answer, for the commonest sums, what the simplifier's ``_sum``
# (:mod:`toolchain.tir.arith`) answers (``node`` kept, canonical, with ``lin_of_pair``'s
# form of it) without building the operands' forms and walking the sum again
# (``built_already``): a chain of index terms ``i * 32 + j * 4 + k`` is built one term at a
# time, and each level walked the whole chain below it. Each keeps its input exactly where
# ``_sum`` keeps it (``None``: ask it).


def var_times(node: ir.BinaryOp, v: ir.Var,
              c: ir.IntImm) -> tuple[ir.PrimExpr, Lin, bool] | None:
    """``node`` (``v * c``: ``c`` above 1, one dtype), its form and its positive-form
    flag, as the simplifier's ``_sum`` keeps it (``to_lin(v).scale(c)`` is ``{v: c}``,
    and ``to_expr`` builds ``v * c`` back)."""
    dt, k = node.dtype, c.value
    if type(k) is not int or k <= 1 or v.dtype != dt or c.dtype != dt:
        return None
    return node, Lin(dt, 0, {("v", id(v)): [v, k]}), True


def appended(node: ir.BinaryOp, a: ir.PrimExpr, b: ir.PrimExpr, lin_a: Lin,
              positive: bool) -> tuple[ir.PrimExpr, Lin, bool] | None:
    """``node`` (``a + b`` or ``a - b``, ``a`` a sum the simplifier kept with the form
    ``lin_a``, no constant in it; ``positive``: every coefficient of ``lin_a`` is) where
    ``b`` is what ``Lin.to_expr`` appends to ``a``'s chain: a constant above 0 (``+`` only
    after a positive term), or a Var or ``Var * c`` (``c`` above 1) whose Var ``lin_a``
    lacks (``+`` only after positive terms: negative ones come last). Then ``node`` is
    canonical (``to_expr`` of the sum's form builds ``a``'s chain, then ``b``) and
    ``recombine_divmod`` still finds nothing (no coefficient changed, no division added).
    The form is ``lin_a`` grown in place, as ``lin_of_pair`` grows it."""
    dt = node.dtype
    if a.dtype != dt or b.dtype != dt or lin_a.dtype != dt or lin_a.const != 0 \
            or not lin_a.terms:
        return None
    add = type(node) is ir.Add
    if add and not positive:
        return None
    tb = type(b)
    if tb is ir.IntImm:
        k = b.value
        if type(k) is not int or k <= 0:
            return None
        lin_a.const = k if add else -k
        return node, lin_a, False
    if tb is ir.Var:
        v, k = b, 1
    elif tb is ir.Mul:
        v, c = b.a, b.b
        if type(v) is not ir.Var or type(c) is not ir.IntImm or v.dtype != dt \
                or c.dtype != dt:
            return None
        k = c.value
        if type(k) is not int or k <= 1:
            return None
    else:
        return None
    key = ("v", id(v))
    terms = lin_a.terms
    if key in terms:
        return None
    terms[key] = [v, k if add else -k]
    return node, lin_a, add
