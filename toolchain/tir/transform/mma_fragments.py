"""``lower_mma_fragments``: an ``mma.accumulator`` (or ``wgmma.accumulator``) tile as each
lane's own registers.

An ``mma.sync`` accumulator (``mma.accumulator`` scope: ``targets/cuda-sm80.yaml``) is a
warp's tile of C, ``R x C`` floats (``R`` a multiple of 16, ``C`` of 8) after buffer
compaction, but no lane holds the tile: lane ``l = 4 g + t`` holds, of each 16 x 8 tile
``(x, y)``, the four elements ``(g, 2t)``, ``(g, 2t + 1)``, ``(g + 8, 2t)``,
``(g + 8, 2t + 1)`` in its registers ``4 (x C / 8 + y) + 0..3`` (the PTX ISA's layout of
the m16n8k16 accumulator). This pass (phase 1, after buffer compaction) makes that
explicit: the buffer becomes the ``R C / 32`` registers of one lane, and an access to
element ``(i, j)`` becomes an access to register

    reg(i, j) = 4 (i / 16 * C / 8 + j / 8) + i % 16 / 8 * 2 + j % 2

of the lane making it, with the lane's own part of ``(i, j)`` -- the terms in
``threadIdx.x`` -- set to 0. So the schedule must bind ``threadIdx.x`` to exactly the lane
that owns each element it reads (``i % 8 = l / 4``, ``j % 8 / 2 = l % 4``); a schedule
that binds it otherwise reads another element's register. Nothing checks that here: on
a GPU the result would be wrong, and the SIMT emulation, which keeps the 32 lanes'
registers apart (:mod:`toolchain.tir.transform.simt`) and moves fragments between them
as the ISA does (the ``mma_*`` intrinsics' emulation bodies), gives the same wrong result,
which the comparison with the reference catches. A tensor intrinsic's operand
``&C[i0, j0]`` (the first element of a 16 x 8 tile) becomes the tile's first register.

Before (a warp's 32 x 16 tile, the epilogue's lanes ``tx``, after compaction)::

    C_frag = T.allocate((32, 16), "float32", scope="mma.accumulator")
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        for i_1, j_1, i_2, j_2 in T.grid(2, 2, 2, 2):
            D[..] = C_frag[i_1 * 16 + i_2 * 8 + tx // 4, j_1 * 8 + tx % 4 * 2 + j_2]

after (16 registers a lane; ``tx`` is gone from the index)::

    C_frag = T.allocate((16,), "float32", scope="mma.accumulator")
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        for i_1, j_1, i_2, j_2 in T.grid(2, 2, 2, 2):
            D[..] = C_frag[(i_1 * 2 + j_1) * 4 + i_2 * 2 + j_2]

A ``wgmma.accumulator`` (``targets/cuda-sm90.yaml``: a warpgroup's 64 x N tile, laid out
``[64][N / 8][8]`` by ``transform_layout``) is the same layout over 128 threads: thread
``t`` holds rows ``16 (t / 32) + (t % 32) / 4`` and ``+ 8`` of each 8-column slice, so
with its ``threadIdx.x`` terms set to 0 element ``(i, c, f)`` is register
``reg(i, 8 c + f)`` of ``N / 2``.

>>> from toolchain.tir import ir
>>> C = ir.Buffer("C_frag", (32, 16), "float32", scope="mma.accumulator")
>>> D = ir.Buffer("D", (32, 16), "float32")
>>> tx, i, j = ir.Var("tx"), ir.Var("i"), ir.Var("j")
>>> body = ir.For(tx, 0, 32, "thread_binding", ir.For(i, 0, 4, "serial", ir.For(
...     j, 0, 4, "serial", D.store(C[i // 2 * 16 + i % 2 * 8 + tx // 4,
...                                    j // 2 * 8 + tx % 4 * 2 + j % 2],
...                                  [i * 8 + tx // 4, j * 4 + tx % 4]))), "threadIdx.x")
>>> f = lower_mma_fragments(ir.PrimFunc((D,), ir.Allocate(C, body), "epilogue"))
>>> "C_frag = T.allocate((16,)" in str(f)
True
"""

from __future__ import annotations

from toolchain.errors import UnsupportedError
from toolchain.intrinsics import MMA_SCOPE, REGISTER_SCOPES, WGMMA_SCOPE
from toolchain.tir import arith, ir
from toolchain.tir.functor import StmtExprMutator, StmtVisitor, substitute

#: the register-accumulator scope this pass lays out (the ISA's m16n8 layout)
SCOPE = MMA_SCOPE


def register_of(i: ir.PrimExpr, j: ir.PrimExpr, cols: int) -> ir.PrimExpr:
    """The register (of the lane owning it) that holds element ``(i, j)`` of a warp's
    accumulator tile with ``cols`` columns (see the module docstring).

    >>> str(register_of(ir.IntImm(9), ir.IntImm(11), 16))  # tile (0, 1), row g + 8, odd
    '7'
    """
    return arith.simplify(((i // 16) * (cols // 8) + j // 8) * 4 + i % 16 // 8 * 2 + j % 2)


class _Registers(StmtExprMutator):
    def __init__(self, where: str) -> None:
        self.where = where
        self.lanes: list[ir.Var] = []  # threadIdx.x loop variables in scope
        self.new: dict[ir.Var, tuple[ir.Buffer, int]] = {}  # old data -> (registers, cols)

    def visit_For(self, s: ir.For) -> ir.Stmt:
        lane = s.kind == "thread_binding" and s.thread_tag == "threadIdx.x"
        if lane:
            self.lanes.append(s.loop_var)
        try:
            return super().visit_For(s)
        finally:
            if lane:
                self.lanes.pop()

    def visit_Allocate(self, s: ir.Allocate) -> ir.Stmt:
        b = s.buffer
        if b.scope not in REGISTER_SCOPES:
            return super().visit_Allocate(s)
        dims = [ir.const_int(d) for d in b.shape]
        lanes = REGISTER_SCOPES[b.scope]
        if b.scope == WGMMA_SCOPE:  # [64][N / 8][8]: a warpgroup's 64 x N tile
            if (len(dims) < 3 or None in dims or any(d != 1 for d in dims[:-3])
                    or dims[-3] != 64 or dims[-1] != 8):
                raise UnsupportedError(
                    f"{self.where}: {WGMMA_SCOPE} buffer {b.name} has shape {b.shape}; a "
                    "wgmma accumulator is one warpgroup's 64 x N tile laid out [64][N / 8][8] "
                    "(transform_layout): compute it under the warpgroup's loops, its 128 "
                    "threads on threadIdx.x")
            rows, cols = 64, dims[-2] * 8  # (a batch's leading extents of 1 before them)
        elif (len(dims) < 2 or None in dims or any(d != 1 for d in dims[:-2])
                or dims[-2] % 16 or dims[-1] % 8):
            raise UnsupportedError(
                f"{self.where}: {SCOPE} buffer {b.name} has shape {b.shape}; an mma.sync "
                "accumulator is one warp's tile of whole 16 x 8 tiles (rows, columns): "
                "compute it under the warp's loops (threadIdx.y/z), its lanes on threadIdx.x")
        else:
            rows, cols = dims[-2:]  # (a batch's leading extents of 1 before them)
        regs = ir.Buffer(b.name, (rows * cols // lanes,), b.dtype, b.scope, (), b.align)
        self.new[b.data] = (regs, cols)
        return ir.Allocate(regs, self.visit_stmt(s.body))

    def _index(self, data: ir.Var, idx: tuple[ir.PrimExpr, ...]) -> tuple[ir.PrimExpr, ...]:
        regs, cols = self.new[data]
        own = {v: ir.IntImm(0) for v in self.lanes}
        if regs.scope == WGMMA_SCOPE:  # (i, c, f): column 8 c + f
            i, c, f = (arith.simplify(substitute(self.visit_expr(x), own)) for x in idx[-3:])
            return (register_of(i, arith.simplify(c * 8 + f), cols),)
        i, j = (arith.simplify(substitute(self.visit_expr(x), own)) for x in idx[-2:])
        return (register_of(i, j, cols),)

    def visit_BufferLoad(self, e: ir.BufferLoad) -> ir.PrimExpr:
        if e.buffer.data not in self.new:
            return super().visit_BufferLoad(e)
        return ir.BufferLoad(self.new[e.buffer.data][0], self._index(e.buffer.data, e.indices))

    def visit_BufferStore(self, s: ir.BufferStore) -> ir.Stmt:
        if s.buffer.data not in self.new:
            return super().visit_BufferStore(s)
        return ir.BufferStore(self.new[s.buffer.data][0], self.visit_expr(s.value),
                              self._index(s.buffer.data, s.indices))


class _Scopes(StmtVisitor):
    """The memory scopes a statement allocates (statements only: an allocation is one)."""

    def __init__(self) -> None:
        self.scopes: set[str] = set()

    def visit_Allocate(self, s: ir.Allocate) -> None:
        self.scopes.add(s.buffer.scope)
        super().visit_Allocate(s)


def _allocates(body: ir.Stmt, scope: str) -> bool:
    walk = _Scopes()
    walk.visit_stmt(body)
    return scope in walk.scopes


def lower_mma_fragments(func: ir.PrimFunc) -> ir.PrimFunc:
    """Lowering pass (phase 1, after buffer compaction): each ``mma.accumulator`` and
    ``wgmma.accumulator`` buffer as one thread's registers (see the module docstring);
    other functions unchanged."""
    walk = _Scopes()
    walk.visit_stmt(func.body)
    if not walk.scopes & REGISTER_SCOPES.keys():
        return func
    return func.with_body(_Registers(f"kernel {func.name}").visit_stmt(func.body))


__all__ = ["SCOPE", "lower_mma_fragments", "register_of"]
