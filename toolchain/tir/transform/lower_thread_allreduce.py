"""Cross-thread reductions as warp shuffles: ``lower_thread_allreduce``.

A reduction block whose one reduce variable is bound to the loop over ``threadIdx.x``
(``sch.bind`` allows that for such a block: TVM's cross-thread reduction, typically the
second half of an ``rfactor``) sums one value per thread. Every thread of the block ends
with the total (an *allreduce*):

1. each thread puts its contribution in a register (``red``, ``local``);
2. a butterfly of ``__shfl_xor_sync`` steps (``T.shfl_xor_sync(mask, value, offset,
   width)``, offsets 16, 8, 4, 2, 1) combines the 32 lanes of each warp, every lane
   ending with its warp's total;
3. with more than one warp (``T`` threads, a multiple of 32): lane 0 of each warp writes
   its total to a ``shared`` array of ``T / 32`` partials, a barrier (placed by
   :mod:`~toolchain.tir.transform.inject_barriers`), then every warp reads the partials
   (lanes past ``T / 32`` the identity) and does a second butterfly;
4. the block's output is written from the register: by every thread where it is
   ``local`` (each thread's copy), else by thread 0.

A block of ``T`` < 32 threads (a power of two) shuffles within ``width = T`` lanes, the
mask naming only those lanes. It runs first in phase 1 (before ``lower_init_block``):
it needs the block's reducer and init. The SIMT emulation
(:mod:`~toolchain.tir.transform.simt`) runs the shuffles with warp semantics.

Before (the second half of an ``rfactor``, ``T`` = 64)::

    for t in T.thread_binding(64, thread="threadIdx.x"):
        with T.block("C"):
            vt = T.axis.reduce(64, t)
            with T.init():
                C[0] = T.float32(0.0)
            C[0] = C[0] + C_rf[vt]

after::

    for t in T.thread_binding(64, thread="threadIdx.x"):
        C_red = T.allocate((1,), "float32", scope="local")
        C_red[0] = C_rf[t]
        C_red[0] = C_red[0] + T.shfl_xor_sync(T.uint32(4294967295), C_red[0], 16, 32)
        ...                                   # offsets 8, 4, 2, 1
        C_warps = T.allocate((2,), "float32", scope="shared")
        if t % 32 == 0:
            C_warps[t // 32] = C_red[0]
        C_red[0] = C_warps[t % 2]             # a barrier before it (inject_barriers)
        C_red[0] = C_red[0] + T.shfl_xor_sync(T.uint32(4294967295), C_red[0], 1, 32)
        if t == 0:
            C[0] = C_red[0]

A guard on the thread (``T.where(t < 31)``: a row shorter than the block) makes the
threads it leaves out contribute the identity (``if t < 31: C_red[0] = x[t] else:
C_red[0] = 0``); the block's other guards decide whether the output is written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from toolchain.errors import ScheduleError
from toolchain.tir import ir
from toolchain.tir.functor import (
    StmtMutator,
    free_vars,
    post_order_visit,
    substitute,
)

#: lanes of a warp (every CUDA GPU so far)
WARP = 32

#: the shuffle intrinsics: ``op(mask, value, offset, width)``
SHFL_XOR = "tir.shfl_xor_sync"
SHFL_DOWN = "tir.shfl_down_sync"
SHUFFLES = (SHFL_XOR, SHFL_DOWN)


def lane_mask(lanes: int) -> ir.IntImm:
    """The ``__shfl_*_sync`` mask naming lanes ``0 .. lanes - 1`` (a ``uint32``)."""
    return ir.IntImm((1 << lanes) - 1, "uint32")


def shfl_xor(value: ir.PrimExpr, offset: int, width: int = WARP,
             mask: ir.PrimExpr | None = None) -> ir.Call:
    """``T.shfl_xor_sync(mask, value, offset, width)``: ``value`` of lane ``lane ^ offset``."""
    return ir.Call(value.dtype, SHFL_XOR, [mask if mask is not None else lane_mask(width),
                                           value, ir.IntImm(offset), ir.IntImm(width)])


def is_shuffle(e: ir.Node) -> bool:
    """True if ``e`` is a warp-shuffle call."""
    return isinstance(e, ir.Call) and e.op in SHUFFLES


@dataclass(frozen=True)
class Reducer:
    """A reduction block's combiner (``combine(acc, x)``), its identity and the value
    each iteration contributes (in the block's variables)."""

    combine: Callable[[ir.PrimExpr, ir.PrimExpr], ir.PrimExpr]
    identity: ir.PrimExpr
    value: ir.PrimExpr
    store: ir.BufferStore


def _is_identity(kind: type, c: ir.PrimExpr) -> bool:
    v = c.value if isinstance(c, (ir.IntImm, ir.FloatImm)) else None
    if v is None:
        return False
    if kind is ir.Add:
        return v == 0
    big = 3.0e38 if isinstance(c, ir.FloatImm) else 2 ** 31 - 1
    return v <= -big if kind is ir.Max else v >= big


def reducer_of(block: ir.Block) -> Reducer | None:
    """The :class:`Reducer` of ``block`` when it is ``C[i] = C[i] op value`` (``op`` one of
    ``+``, ``max``, ``min``; either operand order) with an init storing the identity to
    the same element; else None."""
    s, init = block.body, block.init
    if not isinstance(s, ir.BufferStore) or not isinstance(init, ir.BufferStore) \
            or init.buffer is not s.buffer or type(s.value) not in (ir.Add, ir.Max, ir.Min):
        return None
    kind = type(s.value)

    def same(e: ir.PrimExpr) -> bool:
        return isinstance(e, ir.BufferLoad) and e.buffer is s.buffer and all(
            ir.structural_equal(a, b) for a, b in zip(e.indices, s.indices, strict=True))

    a, b = s.value.a, s.value.b
    value = b if same(a) else a if same(b) else None
    reads: list[bool] = []
    if value is not None:  # the value must not read the accumulator itself
        post_order_visit(value, lambda x: reads.append(True) if isinstance(x, ir.BufferLoad)
                         and x.buffer is s.buffer else None)
    if value is None or reads \
            or not all(ir.structural_equal(x, y)
                       for x, y in zip(init.indices, s.indices, strict=True)) \
            or not _is_identity(kind, init.value):
        return None
    return Reducer(lambda x, y: kind(x, y), init.value, value, s)


def cross_thread_reduce_var(r: ir.BlockRealize, var: ir.Var) -> str | None:
    """Why loop variable ``var`` (bound to ``threadIdx.x``) cannot feed the reduce
    variable of ``r`` as a cross-thread reduction; None when it can: ``r``'s one reduce
    variable is bound to ``var`` itself and the block is a :func:`reducer_of` form (a
    predicate on ``var``: the threads it leaves out contribute the identity)."""
    block = r.block
    red = [(iv, v) for iv, v in zip(block.iter_vars, r.iter_values, strict=True)
           if iv.iter_type == ir.IterType.REDUCE]
    if len(red) != 1 or red[0][1] is not var:
        return (f"block {block.name_hint!r} must have one reduce variable bound to loop "
                f"{var.name} alone (rfactor the rest out first)")
    if reducer_of(block) is None:
        return (f"block {block.name_hint!r} is not `C[i] = C[i] + x` (or max/min) with the "
                "identity as its init")
    return None


def _conjuncts(e: ir.PrimExpr) -> list[ir.PrimExpr]:
    if isinstance(e, ir.And):
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [] if ir.is_const_int(e, 1) else [e]


def _all(conds: list[ir.PrimExpr]) -> ir.PrimExpr | None:
    out = None
    for c in conds:
        out = c if out is None else ir.And(out, c)
    return out


class _Lower(StmtMutator):
    def __init__(self) -> None:
        self.threads: dict[ir.Var, int] = {}  # threadIdx.x loop var -> extent
        self.uses: dict[str, int] = {}

    def visit_For(self, s: ir.For) -> ir.Stmt:
        if s.kind == "thread_binding" and s.thread_tag == "threadIdx.x":
            n = ir.const_int(s.extent)
            if n is not None and ir.is_const_int(s.min, 0):
                self.threads[s.loop_var] = n
                try:
                    return super().visit_For(s)
                finally:
                    del self.threads[s.loop_var]
        return super().visit_For(s)

    def visit_BlockRealize(self, s: ir.BlockRealize) -> ir.Stmt:
        block = s.block
        for iv, v in zip(block.iter_vars, s.iter_values, strict=True):
            if iv.iter_type == ir.IterType.REDUCE and isinstance(v, ir.Var) \
                    and v in self.threads:
                why = cross_thread_reduce_var(s, v)
                if why is not None:
                    raise ScheduleError(
                        f"lower_thread_allreduce: its reduce variable is bound to threadIdx.x "
                        f"loop {v.name}, but {why}; apply decompose_reduction and the like "
                        "before binding, or bind a loop of the rfactor block instead")
                return self._allreduce(s, v, self.threads[v])
        return super().visit_BlockRealize(s)

    def _name(self, base: str) -> str:
        n = self.uses.get(base, 0)
        self.uses[base] = n + 1
        return base if n == 0 else f"{base}_{n}"

    def _allreduce(self, r: ir.BlockRealize, t: ir.Var, threads: int) -> ir.Stmt:
        block = r.block
        red = reducer_of(block)
        assert red is not None
        if threads & (threads - 1) or threads > WARP * WARP:
            raise ScheduleError(
                f"lower_thread_allreduce: block {block.name_hint!r} reduces over {threads} "
                f"threads: use a power of two up to {WARP * WARP}")
        vmap = {iv.var: v for iv, v in zip(block.iter_vars, r.iter_values, strict=True)}
        dtype = red.store.buffer.dtype
        buf = ir.Buffer(self._name(f"{red.store.buffer.name}_red"), (1,), dtype, "local")
        acc = ir.BufferLoad(buf, (ir.IntImm(0),))

        def butterfly(lanes: int, width: int) -> list[ir.Stmt]:
            """Offsets lanes / 2 .. 1 over segments of ``width`` lanes, every lane of the
            block's part of the warp in the mask."""
            mask = lane_mask(min(threads, WARP))
            return [buf.store(red.combine(acc, shfl_xor(acc, 1 << k, width, mask)), [0])
                    for k in reversed(range(lanes.bit_length() - 1))]

        # a guard on the thread (a row shorter than the block): the threads it leaves out
        # contribute the identity; the other guards decide whether the output is written
        conds = _conjuncts(r.predicate)
        mine = _all([c for c in conds if t in free_vars(c)])
        rest = _all([c for c in conds if t not in free_vars(c)])
        first: ir.Stmt = buf.store(substitute(red.value, vmap), [0])
        if mine is not None:
            first = ir.IfThenElse(mine, first, buf.store(red.identity, [0]))
        body = [first, *butterfly(min(threads, WARP), min(threads, WARP))]
        out_idx = [substitute(i, vmap) for i in red.store.indices]
        write: ir.Stmt = ir.BufferStore(red.store.buffer, acc, tuple(out_idx))
        if red.store.buffer.scope != "local":
            write = ir.IfThenElse(ir.EQ(t, ir.IntImm(0)), write)
        if rest is not None:
            write = ir.IfThenElse(rest, write)
        if threads > WARP:
            warps = threads // WARP
            part = ir.Buffer(self._name(f"{red.store.buffer.name}_warps"), (warps,), dtype,
                             "shared")
            lane = ir.FloorMod(t, WARP)
            # every segment of `warps` lanes reads all the partials: each lane then ends
            # with the total (a broadcast for free)
            cross = ir.seq(
                ir.IfThenElse(ir.EQ(lane, 0), part.store(acc, [ir.FloorDiv(t, WARP)])),
                buf.store(part[ir.FloorMod(t, warps)], [0]), *butterfly(warps, WARP), write)
            return ir.Allocate(buf, ir.seq(*body, ir.Allocate(part, cross)))
        return ir.Allocate(buf, ir.seq(*body, write))


def lower_thread_allreduce(func: ir.PrimFunc) -> ir.PrimFunc:
    """Lower each cross-thread reduction block (its reduce variable bound to
    ``threadIdx.x``) to warp shuffles and one shared exchange (see the module docstring).
    A function without one is returned as it is."""
    return _Lower().visit(func)


__all__ = ["SHFL_DOWN", "SHFL_XOR", "SHUFFLES", "WARP", "Reducer", "cross_thread_reduce_var",
           "is_shuffle", "lane_mask", "lower_thread_allreduce", "reducer_of", "shfl_xor"]
