"""What the LLVM backend asks of a lowered function before translating it: the symbolic
sizes that become trailing arguments, which loops are unit-stride, which local buffers
are register tiles, which expressions are the same pure computation.

>>> from toolchain.tir import ir
>>> n = ir.Var("n"); A, B = ir.Buffer("A", (n,)), ir.Buffer("B", (n,)); j = ir.Var("j")
>>> loop = ir.For(j, 0, n, "vectorized", B.store(A[j * 2], [j]))
>>> [v.name for v in free_scalars(ir.PrimFunc((A, B), loop))], unit_stride(loop)
(['n'], False)
"""

from __future__ import annotations

from toolchain.codegen.cstyle import free_scalars
from toolchain.tir import arith, ir
from toolchain.tir.functor import StmtExprVisitor, StmtVisitor, substitute


def unit_stride(s: ir.For) -> bool:
    """Whether every load and store in a loop's body moves by 0 or 1 element per
    iteration: the loop vectorizes into plain vector accesses. Only such ``vectorized``
    loops get forced (``llvm.loop.vectorize.enable``): forcing a strided one buys gathers
    and scatters that run slower than scalar code; LLVM's cost model decides for them, as
    gcc's does for the bundle's C (which has no ``#pragma omp simd``)."""
    v, ok = s.loop_var, [True]
    step = {v: ir.Add(v, ir.const(1, v.dtype))}

    class _Stride(StmtExprVisitor):
        def check(self, idx: tuple[ir.PrimExpr, ...]) -> None:
            if len(idx) != 1 or not ok[0]:
                return
            d = arith.simplify(substitute(idx[0], step) - idx[0])
            if not (ir.is_const_int(d, 0) or ir.is_const_int(d, 1)):
                ok[0] = False

        def visit_BufferLoad(self, e: ir.BufferLoad) -> None:
            self.check(e.indices)
            super().visit_BufferLoad(e)

        def visit_BufferStore(self, st: ir.BufferStore) -> None:
            self.check(st.indices)
            super().visit_BufferStore(st)

    _Stride().visit_stmt(s.body)
    return ok[0]


def is_register_tile(s: ir.Allocate) -> bool:
    """A local (not ``global``) buffer accessed only by whole contiguous vectors: a
    register tile (``cache_write(..., "local")`` of a vectorized nest). It stays an
    ``alloca``, whatever its size, so SROA keeps it in vector registers, as the C renderer
    declares such tiles as vector variables or arrays (never scratch or heap memory)."""
    if s.buffer.scope == "global":
        return False
    data, ok, seen = s.buffer.data, [True], [False]

    class _Access(StmtExprVisitor):
        def check(self, buf: ir.Buffer, idx: tuple[ir.PrimExpr, ...]) -> None:
            if buf.data is data:
                seen[0] = True
                r = idx[0] if len(idx) == 1 else None
                if not (isinstance(r, ir.Ramp) and ir.is_const_int(r.stride, 1)):
                    ok[0] = False

        def visit_BufferLoad(self, e: ir.BufferLoad) -> None:
            self.check(e.buffer, e.indices)
            super().visit_BufferLoad(e)

        def visit_BufferStore(self, st: ir.BufferStore) -> None:
            self.check(st.buffer, st.indices)
            super().visit_BufferStore(st)

        def visit_Call(self, e: ir.Call) -> None:
            if e.op == "tir.address_of":  # a pointer into it escapes: memory, not registers
                a = e.args[0]
                if isinstance(a, ir.BufferLoad) and a.buffer.data is data:
                    ok[0] = False
            super().visit_Call(e)

    _Access().visit_stmt(s.body)
    return ok[0] and seen[0]


def loop_elem_bits(s: ir.For) -> int:
    """The widest element a loop body stores (what its vector lanes would hold)."""
    widest = [8]

    class _Stores(StmtVisitor):
        def visit_BufferStore(self, st: ir.BufferStore) -> None:
            e = ir.element_of(st.buffer.dtype)
            widest[0] = max(widest[0], 8 if e == "bool" else ir.bits_of(e))
            super().visit_BufferStore(st)

    _Stores().visit_stmt(s.body)
    return widest[0]


#: expressions the LLVM backend never reuses (emitting them costs nothing)
LEAVES = frozenset({ir.IntImm, ir.FloatImm, ir.Var})


class PureShapes:
    """``shapes(e)``: a number equal for structurally equal pure expressions (the same
    variables, constants and operations), None for an expression that reads memory or
    calls (its value depends on more than the variables' bindings). Each node is numbered
    once (hash-consing), so equal index expressions built apart get one number.

    >>> i = ir.Var("i"); A = ir.Buffer("A", (8,)); shapes = PureShapes()
    >>> shapes(i * 2 + 1) == shapes(i * 2 + 1), shapes(i * 2) == shapes(i * 3)
    (True, False)
    >>> shapes(A[i] + 1) is None
    True
    """

    def __init__(self) -> None:
        self.shape: dict[ir.PrimExpr, int | None] = {}
        self.numbers: dict[tuple, int] = {}

    def __call__(self, e: ir.PrimExpr) -> int | None:
        n = self.shape.get(e, -1)
        if n != -1:
            return n
        t = type(e)
        if t is ir.IntImm or t is ir.FloatImm:
            key: tuple | None = (t, repr(e.value), e.dtype)  # repr: -0.0 is not 0.0
        elif isinstance(e, ir.Var):
            key = (ir.Var, e)
        elif isinstance(e, ir.BinaryOp):
            key = self._key(t, e.dtype, e.a, e.b)
        elif t is ir.Cast or t is ir.Broadcast:
            key = self._key(t, e.dtype, e.value)
        elif t is ir.Not:
            key = self._key(t, e.dtype, e.a)
        elif t is ir.Ramp:
            key = self._key(t, e.dtype, e.base, e.stride)
        elif t is ir.Select:
            key = self._key(t, e.dtype, e.condition, e.true_value, e.false_value)
        else:
            key = None
        n = None if key is None else self.numbers.setdefault(key, len(self.numbers))
        self.shape[e] = n
        return n

    def _key(self, t: type, dtype: str, *args: ir.PrimExpr) -> tuple | None:
        parts = [self(a) for a in args]
        return None if None in parts else (t, dtype, *parts)


__all__ = ["LEAVES", "PureShapes", "free_scalars", "is_register_tile", "loop_elem_bits",
           "unit_stride"]
