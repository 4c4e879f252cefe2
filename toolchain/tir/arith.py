"""Integer arithmetic: constant folding, affine canonical form, div/mod rules, bounds.

The workhorse is the *linear form* (:mod:`toolchain.tir.linear`): an integer expression
is written as ``c0 + c1*t1 + c2*t2 + ...`` where each ``t`` is an atom (a Var, or a
non-linear subexpression such as ``x // 4``). Sums are collected, constants folded, and
``(x // c) * c + x % c`` recombined into ``x``. Bounds are computed on linear forms
too, symbolically: a Var with a known range is replaced by its end points, a free Var is
its own bound, so ``i - n`` with ``i`` in ``[0, n)`` is proven ``< 0``.

Public API (used by the schedule and the lowering passes):

* :func:`simplify` (``simplify(expr, ranges)``): an equal, simpler expression.
* :func:`prove` (``prove(cond, ranges)``): True only if ``cond`` holds for every value.
* :func:`const_bound` (``const_bound(expr, ranges)``): ``(lo, hi)`` inclusive ints, or
  ``None`` for an unbounded side.

``ranges`` maps Vars to ``Range(min, extent)`` (loop/block variable domains).

>>> from toolchain.tir.ir import Var, Range
>>> io, ii = Var("io"), Var("ii")
>>> r = {io: Range(0, 4), ii: Range(0, 32)}
>>> str(simplify((io * 32 + ii) // 32, r)), str(simplify((io * 32 + ii) % 32, r))
('io', 'ii')
>>> prove(io * 32 + ii < 128, r)
True
"""

from __future__ import annotations

from collections.abc import Mapping
from math import gcd
from typing import Any

from toolchain.tir import ir
from toolchain.tir.functor import ExprMutator
from toolchain.tir.linear import (
    INT_DTYPES,
    SIGNED_DTYPES,
    SMALL_CONST,
    Lin,
    appended,
    built_already,
    lin_of_pair,
    recombine_divmod,
    same_tree,
    small_lin,
    term_key,
    to_lin,
    var_times,
)
from toolchain.tir.memo import MEMO, memo_key, memoised, remember

Ranges = Mapping[ir.Var, ir.Range]
_IntImm = ir.IntImm
_FloatImm = ir.FloatImm


# ----------------------------------------------------------------------- constant folding

def _fdiv(a: int, b: int) -> int:
    return a // b


def _tdiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


_FOLD_INT = {
    ir.Add: lambda a, b: a + b, ir.Sub: lambda a, b: a - b, ir.Mul: lambda a, b: a * b,
    ir.FloorDiv: _fdiv, ir.FloorMod: lambda a, b: a % b, ir.Div: _tdiv,
    ir.Mod: lambda a, b: a - b * _tdiv(a, b), ir.Min: min, ir.Max: max,
}
_FOLD_CMP = {
    ir.EQ: lambda a, b: a == b, ir.NE: lambda a, b: a != b, ir.LT: lambda a, b: a < b,
    ir.LE: lambda a, b: a <= b, ir.GT: lambda a, b: a > b, ir.GE: lambda a, b: a >= b,
}
_FOLD_FLOAT = {
    ir.Add: lambda a, b: a + b, ir.Sub: lambda a, b: a - b, ir.Mul: lambda a, b: a * b,
    ir.Min: min, ir.Max: max,
}




def _is_int(dtype: str) -> bool:
    return dtype in INT_DTYPES


def _wrap(v: int, dtype: str) -> int:
    bits = ir.bits_of(dtype)
    if dtype.startswith("uint"):
        return v & ((1 << bits) - 1)
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >= 1 << (bits - 1) else v


# ----------------------------------------------------------------------- linear forms


# ----------------------------------------------------------------------- bounds

class _Bounds:
    """Symbolic interval bounds: (lo, hi) as linear forms."""

    def __init__(self, ranges: Ranges | None, depth: int = 6,
                 keep_free: bool = False) -> None:
        self.ranges = ranges or {}
        self.depth = depth
        # relaxing (regions): an atom without ranged vars stays exact instead of being
        # widened to e.g. [0, c - 1] for x % c
        self.keep_free = keep_free

    def of(self, e: ir.PrimExpr, depth: int | None = None) -> tuple[Lin, Lin] | None:
        depth = self.depth if depth is None else depth
        lin = to_lin(e)
        if lin is None:
            return None
        lo, hi = Lin(e.dtype, lin.const), Lin(e.dtype, lin.const)
        for atom, c in lin.terms.values():
            b = self.atom(atom, depth)
            # in place: lo and hi are this call's own (``add`` copied them every term)
            if c > 0:
                lo.add_into(b[0], c)
                hi.add_into(b[1], c)
            else:
                lo.add_into(b[1], c)
                hi.add_into(b[0], c)
        return lo, hi

    def _has_ranged(self, e: ir.PrimExpr) -> bool:
        if not self.ranges:
            return False
        from toolchain.tir.functor import free_vars

        return any(v in self.ranges for v in free_vars(e))

    def _self(self, atom: ir.PrimExpr) -> tuple[Lin, Lin]:
        lin = Lin(atom.dtype)
        lin.add_term(atom, 1)
        return lin, lin

    def atom(self, a: ir.PrimExpr, depth: int) -> tuple[Lin, Lin]:  # noqa: C901
        if depth <= 0:
            return self._self(a)
        if self.keep_free and not isinstance(a, ir.Var) and not self._has_ranged(a):
            return self._self(a)  # nothing to relax inside: the atom is its own bound
        if isinstance(a, ir.Var) and a in self.ranges:
            r = self.ranges[a]
            mn, ext = r.min, r.extent
            if (type(mn) is ir.IntImm and type(ext) is ir.IntImm and mn.dtype in INT_DTYPES
                    and ext.dtype in INT_DTYPES):
                # most loops: the bounds ``simplify(min + extent - 1)`` gives below, folded
                # as :meth:`_Simplifier.visit_BinaryOp` folds it (in the sum's dtype,
                # wrapped to it), without building the sum and asking the memo for it
                dt = mn.dtype if mn.dtype == ext.dtype else ir.binary_dtype(mn, ext)
                last = _wrap(_wrap(mn.value + ext.value, dt) - 1, dt)
                return Lin(mn.dtype, mn.value), Lin(dt, last)
            lo = self.of(mn, depth - 1)
            hi = self.of(simplify(mn + ext - 1), depth - 1)
            if lo is None or hi is None:
                return self._self(a)
            return lo[0], hi[1]
        if isinstance(a, (ir.FloorDiv, ir.FloorMod)) and isinstance(a.b, ir.IntImm):
            c = a.b.value
            b = self.of(a.a, depth - 1)
            if c > 0 and b is not None:
                lo, hi = b
                if isinstance(a, ir.FloorDiv):
                    if lo.is_const and hi.is_const:
                        return Lin(a.dtype, lo.const // c), Lin(a.dtype, hi.const // c)
                    # floordiv is monotonic: bound it by the bounds of its operand
                    return (_atom_lin(ir.FloorDiv(lo.to_expr(), a.b)),
                            _atom_lin(ir.FloorDiv(hi.to_expr(), a.b)))
                if lo.is_const and hi.is_const and lo.const // c == hi.const // c:
                    return Lin(a.dtype, lo.const % c), Lin(a.dtype, hi.const % c)
                return Lin(a.dtype, 0), Lin(a.dtype, c - 1)
            if c > 0 and isinstance(a, ir.FloorMod):
                return Lin(a.dtype, 0), Lin(a.dtype, c - 1)
        if isinstance(a, (ir.Min, ir.Max)):
            ba, bb = self.of(a.a, depth - 1), self.of(a.b, depth - 1)
            if ba and bb and all(x.is_const for x in (*ba, *bb)):
                f = min if isinstance(a, ir.Min) else max
                return (Lin(a.dtype, f(ba[0].const, bb[0].const)),
                        Lin(a.dtype, f(ba[1].const, bb[1].const)))
            if ba and bb and self.keep_free:  # min/max are monotonic in both operands
                op = type(a)
                return (_atom_lin(op(ba[0].to_expr(), bb[0].to_expr())),
                        _atom_lin(op(ba[1].to_expr(), bb[1].to_expr())))
        if isinstance(a, ir.Mul):
            ba, bb = self.of(a.a, depth - 1), self.of(a.b, depth - 1)
            if ba and bb and all(x.is_const for x in (*ba, *bb)):
                ps = [x.const * y.const for x in ba for y in bb]
                return Lin(a.dtype, min(ps)), Lin(a.dtype, max(ps))
        if isinstance(a, ir.Select):
            bt, bf = self.of(a.true_value, depth - 1), self.of(a.false_value, depth - 1)
            if bt and bf and all(x.is_const for x in (*bt, *bf)):
                return (Lin(a.dtype, min(bt[0].const, bf[0].const)),
                        Lin(a.dtype, max(bt[1].const, bf[1].const)))
        if isinstance(a, ir.Cast) and _is_int(a.value.dtype):
            b = self.of(a.value, depth - 1)
            if b and b[0].is_const and b[1].is_const:
                return Lin(a.dtype, b[0].const), Lin(a.dtype, b[1].const)
        return self._self(a)


def _atom_lin(e: ir.PrimExpr) -> Lin:
    lin = to_lin(e)
    assert lin is not None
    return lin


def const_bound(e: ir.PrimExpr, ranges: Ranges | None = None) -> tuple[int | None, int | None]:
    """Inclusive integer bounds ``(lo, hi)`` of ``e``; ``None`` where not constant.

    >>> from toolchain.tir.ir import Var, Range
    >>> i = Var("i")
    >>> const_bound(i * 4 + 3, {i: Range(0, 8)})
    (3, 31)
    """
    e = simplify(e, ranges)
    b = _Bounds(ranges).of(e)
    if b is None:
        return None, None
    lo, hi = b
    return (lo.const if lo.is_const else None, hi.const if hi.is_const else None)


def bound_exprs(e: ir.PrimExpr, ranges: Ranges | None = None) -> tuple[ir.PrimExpr,
                                                                         ir.PrimExpr]:
    """Symbolic inclusive bounds ``(lo, hi)`` of an integer expression as expressions."""
    return memoised("bound_exprs", e, ranges, lambda: _bound_exprs(e, ranges))[1]


def _bound_exprs(e: ir.PrimExpr, ranges: Ranges | None) -> tuple[ir.PrimExpr, ir.PrimExpr]:
    s = simplify(e, ranges)
    b = _Bounds(ranges, keep_free=True).of(s)
    return (s, s) if b is None else (simplify(b[0].to_expr()), simplify(b[1].to_expr()))


def relax(e: ir.PrimExpr, ranges: Ranges) -> tuple[ir.PrimExpr, ir.PrimExpr] | None:
    """Inclusive bounds of ``e`` free of every Var in ``ranges``, or None if not found.

    >>> from toolchain.tir.ir import Var, Range
    >>> i, j = Var("i"), Var("j")
    >>> lo, hi = relax((i * 4 + j) // 2, {j: Range(0, 4)})
    >>> str(lo), str(hi)
    ('i * 2', 'i * 2 + 1')
    """
    # memoised as a whole: whether a Var of the bounds is ranged is decided by the Vars
    # the memo key records (each Var of the bounds is reachable from ``e`` or from the
    # ranges of Vars it reaches, and the key says which of those are ranged); a hit then
    # skips walking the bounds again
    return memoised("relax", e, ranges, lambda: _relax(e, ranges))[1]


def _relax(e: ir.PrimExpr, ranges: Ranges) -> tuple[ir.PrimExpr, ir.PrimExpr] | None:
    from toolchain.tir.functor import free_vars

    lo, hi = bound_exprs(e, ranges)
    if set(free_vars([lo, hi])) & set(ranges):
        return None
    return lo, hi


# ----------------------------------------------------------------------- proving

def _diff_bound(a: ir.PrimExpr, b: ir.PrimExpr, ranges: Ranges | None,
                fast: bool = False) -> tuple[Lin, Lin] | None:
    if not (_is_int(a.dtype) and _is_int(b.dtype)):
        return None
    # ``fast``: a and b are already simplified (the simplifier's own queries); the linear
    # form of a - b is then canonical without simplifying both sides again, which would
    # make nested min/max chains exponential
    d = ir.Sub(a, b) if fast else simplify(ir.Sub(a, b), ranges)
    return _Bounds(ranges).of(d)


_NEG = {ir.LT: ir.GE, ir.LE: ir.GT, ir.GT: ir.LE, ir.GE: ir.LT, ir.EQ: ir.NE, ir.NE: ir.EQ}


def _prove(cond: ir.PrimExpr, ranges: Ranges | None, fast: bool) -> bool:  # noqa: C901
    if isinstance(cond, ir.IntImm):
        return bool(cond.value)
    if isinstance(cond, ir.And):
        return _prove(cond.a, ranges, fast) and _prove(cond.b, ranges, fast)
    if isinstance(cond, ir.Or):
        return _prove(cond.a, ranges, fast) or _prove(cond.b, ranges, fast)
    if isinstance(cond, ir.Not):
        return _disprove(cond.a, ranges, fast)
    if isinstance(cond, (ir.LT, ir.LE, ir.GT, ir.GE, ir.EQ, ir.NE)):
        b = _diff_bound(cond.a, cond.b, ranges, fast)
        if b is None:
            return False
        t = type(cond)
        if t not in _NEG:  # a subclass: the first of them it is an instance of
            t = next(c for c in _NEG if isinstance(cond, c))
        return _holds(t, b)
    return False


def _holds(t: type, b: tuple[Lin, Lin]) -> bool:
    """Whether ``t(x, y)`` (a comparison class) holds for every value, ``b`` being
    ``_diff_bound(x, y)`` (not None)."""
    lo, hi = b
    lo_c = lo.const if lo.is_const else None
    hi_c = hi.const if hi.is_const else None
    if t is ir.LT:
        return hi_c is not None and hi_c < 0
    if t is ir.LE:
        return hi_c is not None and hi_c <= 0
    if t is ir.GT:
        return lo_c is not None and lo_c > 0
    if t is ir.GE:
        return lo_c is not None and lo_c >= 0
    if t is ir.EQ:
        return lo_c == 0 and hi_c == 0
    return (hi_c is not None and hi_c < 0) or (lo_c is not None and lo_c > 0)


def _disprove(cond: ir.PrimExpr, ranges: Ranges | None, fast: bool) -> bool:
    if isinstance(cond, ir.IntImm):
        return not cond.value
    if type(cond) in _NEG:
        return _prove(_NEG[type(cond)](cond.a, cond.b), ranges, fast)
    if isinstance(cond, ir.And):
        return _disprove(cond.a, ranges, fast) or _disprove(cond.b, ranges, fast)
    if isinstance(cond, ir.Or):
        return _disprove(cond.a, ranges, fast) and _disprove(cond.b, ranges, fast)
    if isinstance(cond, ir.Not):
        return _prove(cond.a, ranges, fast)
    return False


def prove(cond: Any, ranges: Ranges | None = None) -> bool:
    """True if ``cond`` is provably true for all values of the ranged Vars.

    Memoised like :func:`simplify` (the schedule asks the same questions of every region
    it recomputes: ``min >= 0``, ``min + extent <= dim``).

    >>> from toolchain.tir.ir import Var, Range
    >>> i, n = Var("i"), Var("n")
    >>> prove(i < n, {i: Range(0, n)}), prove(i < 7, {i: Range(0, 8)})
    (True, False)
    """
    return _proved("prove", _prove, ir.convert(cond), ranges)


def disprove(cond: Any, ranges: Ranges | None = None) -> bool:
    """True if ``cond`` is provably false for all values of the ranged Vars."""
    return _proved("disprove", _disprove, ir.convert(cond), ranges)


def _proved(tag: str, decide: Any, cond: ir.PrimExpr, ranges: Ranges | None) -> bool:
    """``decide(cond, ranges)``, through the memo (the answer depends only on the
    structure of ``cond`` and the ranges of the Vars it reaches:
    :func:`~toolchain.tir.memo.memo_key`)."""
    if type(cond) is ir.IntImm:
        return decide(cond, ranges, False)
    return memoised(tag, cond, ranges, lambda: decide(cond, ranges, False))[1]


# ----------------------------------------------------------------------- simplifier

class _Simplifier(ExprMutator):
    def __init__(self, ranges: Ranges | None) -> None:
        self.ranges = ranges or {}
        #: ``(sum, its linear form, whether every coefficient is positive)`` for the sum
        #: :meth:`_int` last kept as it was: the linear form of the enclosing sum starts
        #: from it instead of from the sum's leaves (a chain ``t1 + t2 + ... + tn`` took n
        #: linear forms of its prefixes, n^2 / 2 terms). Taken (and cleared) by the parent
        #: right after the child's visit.
        self.kept: tuple[ir.PrimExpr, Lin, bool] | None = None

    def visit_BinaryOp(self, e: ir.BinaryOp) -> ir.PrimExpr:  # noqa: C901
        a, b = e.a, e.b  # dispatched inline (``ExprMutator.visit_expr``, one call less)
        table = self._table
        if type(a) is not _IntImm:  # a constant is its own result (``visit_IntImm``)
            a = (table.get(type(a)) or self._resolve(type(a)))(self, a)
        kept = self.kept
        if kept is None:
            lin_a = None
        else:
            self.kept = None
            if kept[0] is a:
                lin_a, kept_pos = kept[1], kept[2]
            else:
                lin_a = None
        if type(b) is not _IntImm:
            b = (table.get(type(b)) or self._resolve(type(b)))(self, b)
        kept = self.kept
        if kept is None:
            lin_b = None
        else:
            self.kept = None
            lin_b = kept[1] if kept[0] is b else None
        t = type(e)
        ta, tb = type(a), type(b)
        if ta is _IntImm and tb is _IntImm:
            if t in _FOLD_CMP:
                return ir.IntImm(int(_FOLD_CMP[t](a.value, b.value)), e.dtype)
            if t is ir.And or t is ir.Or:
                v = (a.value and b.value) if t is ir.And else (a.value or b.value)
                return ir.IntImm(int(bool(v)), e.dtype)
            if t in _FOLD_INT and not (t in (ir.FloorDiv, ir.FloorMod, ir.Div, ir.Mod)
                                       and b.value == 0):
                return ir.IntImm(_wrap(_FOLD_INT[t](a.value, b.value), e.dtype), e.dtype)
        elif ta is _FloatImm and tb is _FloatImm:
            if t in _FOLD_FLOAT:
                return ir.FloatImm(_FOLD_FLOAT[t](a.value, b.value), e.dtype)
            if t in _FOLD_CMP:
                return ir.IntImm(int(_FOLD_CMP[t](a.value, b.value)), e.dtype)
        if t is ir.Add or t is ir.Sub or t is ir.Mul:  # the commonest: first
            node = e if (a is e.a and b is e.b) else t(a, b)
            dt = e.dtype
            if dt not in INT_DTYPES:
                return self._float(node) if ir.is_float(dt) else node
            if t is ir.Mul:
                if ta is ir.Var and tb is _IntImm:
                    kept = var_times(node, a, b)
                    if kept is not None:
                        self.kept = kept
                        return node
            else:
                if lin_a is None and ta is ir.Var:  # ``to_lin(a)``, every coefficient positive
                    lin_a, kept_pos = Lin(a.dtype, 0, {("v", id(a)): [a, 1]}), True
                if lin_a is not None:
                    kept = appended(node, a, b, lin_a, kept_pos)
                    if kept is not None:
                        self.kept = kept
                        return node
            return self._sum(node, lin_of_pair(node, lin_a, lin_b))
        if t is ir.And or t is ir.Or:
            return self._logic(t, a, b, e)
        if t in _FOLD_CMP:
            return self._compare(t, a, b, e)
        node = e if (a is e.a and b is e.b) else t(a, b)
        if e.dtype in INT_DTYPES:
            return self._int(node, lin_a)
        if ir.is_float(e.dtype):
            return self._float(node)
        return node

    def _float(self, e: ir.BinaryOp) -> ir.PrimExpr:
        a, b = e.a, e.b
        if isinstance(e, ir.Add):
            if isinstance(b, ir.FloatImm) and b.value == 0:
                return a
            if isinstance(a, ir.FloatImm) and a.value == 0:
                return b
        if isinstance(e, ir.Mul):
            if isinstance(b, ir.FloatImm) and b.value == 1:
                return a
            if isinstance(a, ir.FloatImm) and a.value == 1:
                return b
        return e

    def _logic(self, t: type, a: ir.PrimExpr, b: ir.PrimExpr, e: ir.BinaryOp) -> ir.PrimExpr:
        for x, y in ((a, b), (b, a)):
            if isinstance(x, ir.IntImm):
                if t is ir.And:
                    return y if x.value else ir.IntImm(0, e.dtype)
                return ir.IntImm(1, e.dtype) if x.value else y
        return e if (a is e.a and b is e.b) else t(a, b)

    def _compare(self, t: type, a: ir.PrimExpr, b: ir.PrimExpr,
                 e: ir.BinaryOp) -> ir.PrimExpr:
        node = t(a, b)
        if a is e.a and b is e.b and node.dtype == e.dtype:
            node = e  # unchanged: keep it (the callers then keep theirs)
        if _is_int(a.dtype) and _is_int(b.dtype):
            # ``_prove(node)`` and then ``_disprove(node)`` (``_prove`` of the negation):
            # both decide on the same bounds of ``a - b``, taken once here
            bounds = _diff_bound(a, b, self.ranges, fast=True)
            if bounds is not None:
                if _holds(t, bounds):
                    return ir.IntImm(1, node.dtype)
                if _holds(_NEG[t], bounds):
                    return ir.IntImm(0, node.dtype)
        return node

    def _sum(self, e: ir.PrimExpr, lin: Lin | None) -> ir.PrimExpr:
        """An integer ``+``, ``-`` or ``*`` in canonical form; ``lin``: ``to_lin(e)``."""
        if lin is None:
            return e
        if recombine_divmod(lin):  # a new atom (x % 256): simplify it with the ranges
            return self.visit_expr(lin.to_expr())
        if not built_already(lin, e):
            out = lin.to_expr()
            if not same_tree(out, e):
                return out
        # already canonical (most sums are): keep ``e``, so that the callers see
        # "unchanged" and do not rebuild every enclosing node; ``lin`` is still
        # ``to_lin(e)`` (neither check changes it), for the enclosing sum's
        self.kept = (e, lin, lin.const == 0 and all(k > 0 for _, k in lin.terms.values()))
        return e

    def _int(self, e: ir.PrimExpr, lin_a: Lin | None = None) -> ir.PrimExpr:  # noqa: C901
        """An integer operation other than ``+``, ``-``, ``*`` simplified; ``lin_a``, where
        given, is ``to_lin(e.a)`` (the operand's form, kept by :meth:`_sum`)."""
        if isinstance(e, (ir.Add, ir.Sub, ir.Mul)):
            return self._sum(e, to_lin(e))
        if isinstance(e, (ir.FloorDiv, ir.FloorMod)) and isinstance(e.b, ir.IntImm):
            c = e.b.value
            if c == 1:
                return e.a if isinstance(e, ir.FloorDiv) else ir.IntImm(0, e.dtype)
            if c > 0:
                out = self._divmod(e, c, lin_a)
                return e if same_tree(out, e) else out  # as for sums, above
        if isinstance(e, (ir.Min, ir.Max)):
            a, b = e.a, e.b
            is_min = isinstance(e, ir.Min)
            # fast: a and b are simplified already (re-simplifying them at every level of
            # a nested min/max chain costs time exponential in its depth). ``a <= b`` and
            # then ``b <= a``: the bounds of ``b - a`` are those of ``a - b`` negated and
            # swapped (the same atoms, each bounded alike), so ``b <= a`` is ``a - b >= 0``
            # on the bounds taken once
            bounds = _diff_bound(a, b, self.ranges, fast=True)
            if bounds is not None:
                if _holds(ir.LE, bounds):
                    return a if is_min else b
                if _holds(ir.GE, bounds):
                    return b if is_min else a
        return e

    def _divmod(self, e: ir.BinaryOp, c: int, lin_x: Lin | None = None) -> ir.PrimExpr:
        """``e`` (``x // c`` or ``x % c``, ``c > 0``) simplified; ``lin_x``: ``to_lin(x)``
        where the caller has it (read, not changed)."""
        x = e.a
        if isinstance(e, ir.FloorDiv) and isinstance(x, ir.FloorDiv) and isinstance(
                x.b, ir.IntImm) and x.b.value > 0:
            return self._divmod(ir.FloorDiv(x.a, ir.IntImm(x.b.value * c, e.dtype)),
                                x.b.value * c)
        if isinstance(e, ir.FloorMod) and isinstance(x, ir.FloorMod) and isinstance(
                x.b, ir.IntImm) and x.b.value % c == 0:
            return self._divmod(ir.FloorMod(x.a, e.b), c)
        lin = to_lin(x) if lin_x is None else lin_x
        if lin is None:
            return e
        q = Lin(e.dtype, lin.const // c)
        r = Lin(e.dtype, lin.const % c)
        for atom, coeff in lin.terms.values():
            if coeff % c == 0:
                q.add_term(atom, coeff // c)
            else:
                r.add_term(atom, coeff)
        rexpr = r.to_expr()
        bounds = _Bounds(self.ranges).of(rexpr)
        if bounds and bounds[0].is_const and bounds[1].is_const:
            lo, hi = bounds[0].const, bounds[1].const
            if lo // c == hi // c:
                if isinstance(e, ir.FloorDiv):
                    q.const += lo // c
                    return q.to_expr()
                return simplify(ir.Sub(rexpr, ir.IntImm((lo // c) * c, e.dtype)), self.ranges)
        split = self._split_small(e, r, c)
        if split is not None:
            return split if isinstance(e, ir.FloorMod) else simplify(
                ir.Add(q.to_expr(), split), self.ranges)
        if isinstance(e, ir.FloorMod):
            return ir.FloorMod(rexpr, e.b) if not r.is_const else ir.IntImm(r.const % c,
                                                                               e.dtype)
        if q.is_const and q.const == 0:
            return ir.FloorDiv(rexpr, e.b) if rexpr is not x else e
        return ir.Add(q.to_expr(), ir.FloorDiv(rexpr, e.b)) if not r.is_const else q.to_expr()

    def _split_small(self, e: ir.BinaryOp, r: Lin, c: int) -> ir.PrimExpr | None:
        """``(g*y + s) // c -> y // (c/g)`` and ``% c -> y % (c/g) * g + s`` when ``g | c``
        and ``0 <= s < g`` (``s``: the terms whose coefficients ``g`` does not divide).

        ``(f * 8 + i) // 32`` with ``i`` in ``[0, 8)`` is ``f // 4``; ``% 32`` is
        ``f % 4 * 8 + i``: the indices of a fused loop split again.
        """
        if not r.terms:
            return None
        for g in sorted({gcd(k, c) for _, k in r.terms.values()} - {1, c}, reverse=True):
            big = Lin(e.dtype, r.const // g)
            small = Lin(e.dtype, r.const % g)
            for atom, coeff in r.terms.values():
                if coeff % g == 0:
                    big.add_term(atom, coeff // g)
                else:
                    small.add_term(atom, coeff)
            if big.is_const:
                continue
            b = _Bounds(self.ranges).of(small.to_expr())
            if not (b and b[0].is_const and b[1].is_const and 0 <= b[0].const
                    and b[1].const < g):
                continue
            n = ir.IntImm(c // g, e.dtype)
            if isinstance(e, ir.FloorDiv):
                return self.visit_expr(ir.FloorDiv(big.to_expr(), n))
            mod = ir.Mul(ir.FloorMod(big.to_expr(), n), ir.IntImm(g, e.dtype))
            return self.visit_expr(ir.Add(mod, small.to_expr()))
        return None

    def visit_BufferLoad(self, e: ir.BufferLoad) -> ir.PrimExpr:
        # through the memo: the same indices recur in every load of an unrolled tile
        ranges, indices = self.ranges, e.indices
        idx = [simplify(i, ranges) for i in indices]  # no generators: two calls a load less
        for x, y in zip(idx, indices, strict=True):
            if x is not y:
                return ir.BufferLoad(e.buffer, tuple(idx))
        return e

    def visit_Var(self, e: ir.Var) -> ir.PrimExpr:
        r = self.ranges.get(e)
        if r is not None and ir.is_const_int(r.extent, 1):
            return r.min  # a loop of one iteration: its var is its start
        return e

    def visit_Not(self, e: ir.Not) -> ir.PrimExpr:
        a = self.visit_expr(e.a)
        if isinstance(a, ir.IntImm):
            return ir.IntImm(int(not a.value), e.dtype)
        return e if a is e.a else ir.Not(a)

    def visit_Select(self, e: ir.Select) -> ir.PrimExpr:
        c = self.visit_expr(e.condition)
        if isinstance(c, ir.IntImm):
            return self.visit_expr(e.true_value if c.value else e.false_value)
        t, f = self.visit_expr(e.true_value), self.visit_expr(e.false_value)
        if c is e.condition and t is e.true_value and f is e.false_value:
            return e
        return ir.Select(c, t, f)

    def visit_Cast(self, e: ir.Cast) -> ir.PrimExpr:
        v = self.visit_expr(e.value)
        if v.dtype == e.dtype:
            return v
        if isinstance(v, (ir.IntImm, ir.FloatImm)) and ir.lanes_of(e.dtype) == 1:
            if ir.is_float(e.dtype):
                return ir.FloatImm(float(v.value), e.dtype)
            if _is_int(e.dtype):
                return ir.IntImm(_wrap(int(v.value), e.dtype), e.dtype)
        return e if v is e.value else ir.Cast(e.dtype, v)

    def visit_Call(self, e: ir.Call) -> ir.PrimExpr:
        if e.op == "tir.if_then_else":
            c = self.visit_expr(e.args[0])
            if isinstance(c, ir.IntImm):
                return self.visit_expr(e.args[1] if c.value else e.args[2])
        return super().visit_Call(e)


class _ValueSimplifier(_Simplifier):
    """The simplifier of a float (value) expression, which is not memoised as a whole: an
    integer or boolean subexpression it reaches through ``visit_expr`` (a select's or an
    ``if_then_else``'s condition, a cast's operand) goes through :func:`simplify` and its
    memo instead, as the indices of its loads do (the same padding conditions recur in
    every value of an unrolled tile and in each of the pipeline's simplify passes)."""

    def visit_expr(self, e: ir.PrimExpr) -> ir.PrimExpr:
        t = type(e)
        if t is not ir.Var and t is not _IntImm and not ir.is_float(e.dtype):
            return simplify(e, self.ranges)
        return (self._table.get(t) or self._resolve(t))(self, e)


def simplify(e: Any, ranges: Ranges | None = None) -> Any:
    """Simplify an expression, or every expression inside a statement.

    Folds constants, brings integer sums into canonical affine form, applies div/mod
    rules using the ``ranges`` of Vars, and decides comparisons it can prove. Results are
    memoised (:mod:`toolchain.tir.memo`): unrolled and flattened code asks for the same
    index expressions under the same loop ranges again and again.

    >>> from toolchain.tir.ir import Var
    >>> i, j = Var("i"), Var("j")
    >>> str(simplify(i * 2 + j - i + 3 - 3))
    'i + j'
    """
    if isinstance(e, ir.PrimExpr):
        t = type(e)
        if t is ir.IntImm or t is ir.FloatImm or t is ir.StringImm:
            return e
        if t is ir.Var:  # ``_Simplifier.visit_Var``
            r = ranges.get(e) if ranges else None
            return r.min if r is not None and ir.is_const_int(r.extent, 1) else e
        dt = e.dtype
        if dt not in INT_DTYPES and ir.is_float(dt):  # value expressions: large, rarely
            return _ValueSimplifier(ranges).visit_expr(e)  # repeated, not memoised
        # ``memoised``, written out (no closure per call: most calls are hits)
        key = memo_key("simplify", e, ranges)
        hit = MEMO.get(key)
        if hit is None:
            hit = remember(key, e, _Simplifier(ranges).visit_expr(e))
        return e if hit[1] is hit[0] else hit[1]  # unchanged: this very expression
    if isinstance(e, ir.Stmt):
        from toolchain.tir.functor import StmtExprMutator

        class _S(StmtExprMutator):
            def visit_expr(self, x: ir.PrimExpr) -> ir.PrimExpr:
                return simplify(x, ranges)

        return _S().visit_stmt(e)
    return e


# ------------------------------------------ what simplify returns, without simplifying
# The two functions below restate the simplifier's rules for two common cases so that the
# region analysis (``toolchain.tir.analysis.union_region``) can skip calling it; a change
# to the simplifier's canonical sums or to ``_divmod`` must keep them true
# (``tests/tir/test_analysis.py`` checks them against ``simplify`` on random expressions).


def simplified_sums(column: list[ir.PrimExpr]) -> list[tuple[ir.PrimExpr, Lin]] | None:
    """``(simplify(e), its linear form)`` for the distinct ``simplify(e)`` of ``column``
    (first-seen order), where each ``e`` is a sum of Vars times constants of one signed
    dtype (:func:`~toolchain.tir.linear.small_lin`) and either built as
    :meth:`~toolchain.tir.Lin.to_expr` builds it (``simplify`` keeps it), or of one
    Var at most (one term has no order), or with only positive Var coefficients in every
    subexpression (the simplifier's canonical subexpressions then list their terms in the
    order ``to_lin`` meets them): ``simplify`` builds it as ``to_expr`` does; else None.

    >>> i, j = ir.Var("i"), ir.Var("j")
    >>> [str(e) for e, _ in simplified_sums([i * 2 + j - 1, 0 + j, j, i * 1 + j * 1])]
    ['i * 2 + j - 1', 'j', 'i + j']
    >>> simplified_sums([3 - i + j]), simplified_sums([i * j]), simplified_sums([i // 2])
    (None, None, None)
    """
    dt = column[0].dtype
    if dt not in SIGNED_DTYPES:
        return None
    out: dict[Any, tuple[ir.PrimExpr, Lin]] = {}
    for e in column:
        lin = small_lin(e, dt)
        if lin is None:
            return None
        if not built_already(lin, e):
            if len(lin.terms) > 1 and small_lin(e, dt, positive=True) is None:
                return None  # the simplifier's term order may be its own: ask it
            e = lin.to_expr()
        out.setdefault(term_key(e), (e, lin))
    return list(out.values())


def kept_as_is(e: ir.PrimExpr) -> bool:
    """Whether ``e`` is ``x // c`` or ``x % c`` that :func:`~toolchain.tir.arith.simplify`
    (without ranges) returns as it is: ``x`` a canonical sum of Vars (:func:`simplified_sums`)
    with a constant in ``[0, c)``, no coefficient divisible by ``c``, and no divisor
    ``g`` of ``c`` (``1 < g < c``) dividing all of them (the simplifier would split the
    sum by ``g``), all of one signed dtype.

    >>> i, j = ir.Var("i"), ir.Var("j")
    >>> cases = ((i * 6 + j) // 15, i % 4, (i * 3 + 1) // 3, (i * 4 + j * 2) % 6)
    >>> [kept_as_is(e) for e in cases]
    [True, True, False, False]
    """
    t = type(e)
    if t is not ir.FloorDiv and t is not ir.FloorMod:
        return False
    dt, b = e.dtype, e.b
    if type(b) is not ir.IntImm or dt not in SIGNED_DTYPES or b.dtype != dt \
            or not 1 < b.value < SMALL_CONST:
        return False
    c = b.value
    lin = small_lin(e.a, dt)
    if lin is None or not lin.terms or not 0 <= lin.const < c \
            or not built_already(lin, e.a):
        return False
    coeffs = [k for _, k in lin.terms.values()]
    if any(k % c == 0 for k in coeffs):
        return False
    return all(any(k % g for k in coeffs) for g in {gcd(k, c) for k in coeffs} - {1, c})
