"""Periods of index expressions in a loop variable: :func:`mod_period`.

A double buffer's halves are ``k % 2`` and ``(k + 1) % 2`` of its step loop ``k``: the
accesses of any two steps that agree modulo 2 are the same, so a question about every
value of ``k`` (``inject_barriers``: do two statements touch the same element?) is
answered by the values of one period.
"""

from __future__ import annotations

import math

from toolchain.tir import ir
from toolchain.tir.functor import uses_var


def _polynomial_in(e: ir.PrimExpr, v: ir.Var) -> bool:
    """Whether ``e`` depends on ``v`` through sums and products only (an integer
    polynomial in ``v``: ``e % m`` then repeats with period ``m`` in ``v``)."""
    if e is v or not uses_var(e, v):
        return True
    if isinstance(e, (ir.Add, ir.Sub, ir.Mul)):
        return _polynomial_in(e.a, v) and _polynomial_in(e.b, v)
    return False


def mod_period(exprs: tuple[ir.PrimExpr, ...], v: ir.Var) -> int | None:
    """A period in ``v`` of every expression of ``exprs``: the lcm of the ``m`` of each
    ``x % m`` (``m`` a constant, ``x`` a polynomial in ``v``) that ``v`` occurs in, when it
    occurs nowhere else -- a double buffer's ``k % 2`` and ``(k + 1) % 2`` halves repeat
    every 2 steps, so two values of ``k`` say what all of them would; else None.

    >>> k = ir.Var("k")
    >>> mod_period(((k + 1) % 2 * 64 + 3, k % 2 * 64), k)
    2
    >>> mod_period(((k // 2) % 2,), k) is None  # period 4, not 2
    True
    """
    mods: list[int] = []

    def walk(e: ir.PrimExpr) -> bool:
        if e is v:
            return False  # v outside a modulo
        if isinstance(e, ir.FloorMod) and isinstance(e.b, ir.IntImm) and e.b.value > 0 \
                and uses_var(e.a, v):
            if not _polynomial_in(e.a, v):
                return False
            mods.append(e.b.value)
            return True
        if isinstance(e, (ir.Add, ir.Sub, ir.Mul, ir.FloorDiv, ir.FloorMod)):
            return walk(e.a) and walk(e.b)
        return not uses_var(e, v)

    if not all(walk(e) for e in exprs) or not mods:
        return None
    return math.lcm(*mods)


__all__ = ["mod_period"]
