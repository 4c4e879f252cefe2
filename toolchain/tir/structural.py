"""Structural equality of IR trees.

>>> from toolchain.tir import ir
>>> i = ir.Var("i")
>>> structural_equal(i + 1, i + 1), structural_equal(ir.Var("a") + 1, ir.Var("b") + 1)
(True, False)
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from toolchain.tir.ir import Buffer, Node, Var


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
                a.dtype == b.dtype and a.scope == b.scope and self.eq(a.shape, b.shape)
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
