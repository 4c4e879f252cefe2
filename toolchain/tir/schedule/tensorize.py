"""blockize, tensorize and the registry of tensor intrinsics.

A tensor intrinsic is a pair of PrimFuncs with the same buffer parameters:

* ``desc`` — the *behaviour*: a loop nest over one block, e.g. a 16x16x16 multiply-add
  ``C[i, j] = C[i, j] + A[i, k] * B[k, j]`` (``te.create_prim_func`` of a small compute).
* ``impl`` — the *implementation*: any statements over the same buffers (loads/stores, or
  an extern call taking ``T.address_of(A[0, 0])``).

``tensorize(loop, name)`` matches the nest under ``loop`` with ``desc`` (loop count and
extents, the expression tree, dtypes, and every buffer index up to a constant offset per
buffer dimension; an index that only folds given the loops' ranges, such as
``(o_0 * 32 + o_1_0 * 16 + o_1_1) // 32`` with ``o_1_0 < 2``, ``o_1_1 < 16``, is folded with
them) and replaces it by ``impl`` with each intrinsic buffer rebased at the matched offset.
A mismatch says which loop, index, or dtype differs. A schedule buffer may
have more (leading) dimensions than the intrinsic's — a packed layout ``(M/16, K/16, 1, 16)``
against a ``(1, 16)`` tile — if its leading indices stay fixed over the tile. A free
variable of ``desc`` (a *scalar operand*, e.g. an ALU immediate) matches any value that is
fixed over the tile and is substituted into ``impl``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from toolchain.errors import ScheduleError
from toolchain.tir import arith, ir
from toolchain.tir.analysis import access_regions
from toolchain.tir.functor import StmtExprMutator, free_vars, substitute
from toolchain.tir.schedule import state as st
from toolchain.tir.schedule.handles import BlockRV, LoopRV
from toolchain.tir.schedule.state import ScheduleState


@dataclass(frozen=True)
class TensorIntrin:
    """A registered tensor intrinsic (behaviour ``desc`` + implementation ``impl``)."""

    name: str
    desc: ir.PrimFunc
    impl: ir.PrimFunc
    _registry: ClassVar[dict[str, TensorIntrin]] = {}

    @staticmethod
    def register(name: str, desc: ir.PrimFunc, impl: ir.PrimFunc,
                 override: bool = False) -> TensorIntrin:
        """Register ``name``; ``desc`` and ``impl`` must take matching buffers.

        Registering the same ``desc`` and ``impl`` objects again (``override=True``, as
        :func:`toolchain.intrinsics.load_intrinsics` does for every schedule) keeps the
        intrinsic registered, unchecked again: they were checked the first time.

        >>> from toolchain import te
        >>> A = te.placeholder((4,), name="A")
        >>> f = te.create_prim_func([A, te.compute((4,), lambda i: A[i] + 1.0, name="B")])
        >>> first = TensorIntrin.register("doc.add_one", f, f, override=True)
        >>> TensorIntrin.register("doc.add_one", f, f, override=True) is first
        True
        >>> TensorIntrin.register("doc.add_one", f, f)
        Traceback (most recent call last):
        ...
        toolchain.errors.ScheduleError: tensor intrinsic 'doc.add_one' is already registered
        (pass override=True to replace it)
        >>> del TensorIntrin._registry["doc.add_one"]
        """
        known = TensorIntrin._registry.get(name)
        if known is not None and not override:
            raise ScheduleError(f"tensor intrinsic {name!r} is already registered "
                                "(pass override=True to replace it)")
        if known is not None and known.desc is desc and known.impl is impl:
            return known
        db, ib = desc.buffers, impl.buffers
        if len(db) != len(ib) or any(
                a.dtype != b.dtype or not ir.structural_equal(a.shape, b.shape)
                for a, b in zip(db, ib, strict=False)):
            raise ScheduleError(
                f"tensor intrinsic {name!r}: desc buffers "
                f"{[(b.name, str(b.shape), b.dtype) for b in db]} and impl buffers "
                f"{[(b.name, str(b.shape), b.dtype) for b in ib]} must match in order")
        _desc_nest(desc, name)
        intrin = TensorIntrin(name, desc, impl)
        TensorIntrin._registry[name] = intrin
        return intrin

    @staticmethod
    def get(name: str) -> TensorIntrin:
        """The intrinsic registered as ``name``."""
        if name not in TensorIntrin._registry:
            raise ScheduleError(f"no tensor intrinsic {name!r}; registered: "
                                f"{', '.join(sorted(TensorIntrin._registry)) or 'none'}")
        return TensorIntrin._registry[name]


def _strip_root(func: ir.PrimFunc) -> ir.Stmt:
    body = func.body
    if isinstance(body, ir.BlockRealize) and body.block.name_hint == "root":
        return body.block.body
    return body


def _nest(s: ir.Stmt) -> tuple[list[ir.For], ir.BlockRealize | None]:
    loops = []
    while isinstance(s, ir.For):
        loops.append(s)
        s = s.body
    return loops, s if isinstance(s, ir.BlockRealize) else None


def _desc_nest(desc: ir.PrimFunc, name: str) -> tuple[list[ir.For], ir.BlockRealize]:
    loops, r = _nest(_strip_root(desc))
    if r is None:
        raise ScheduleError(f"tensor intrinsic {name!r}: desc must be a loop nest over one "
                            "block (as te.create_prim_func makes it)")
    return loops, r


class _Matcher:
    def __init__(self, intrin: str, svars: dict[ir.Var, ir.Var], inner: set[ir.Var],
                 dvars: set[ir.Var], ranges: dict[ir.Var, ir.Range] | None = None) -> None:
        self.intrin = intrin
        #: the extents of the enclosing loops and of the intrinsic's own (desc) loops: an
        #: index that only folds with them (``(o_0 * 32 + o_1_0 * 16 + j) // 32`` with
        #: ``o_1_0 < 2``, ``j < 16``) is retried with them where the plain fold fails
        self.ranges = ranges or {}
        self.svars = svars  # schedule loop var -> desc loop var
        self.inner = inner
        self.dvars = dvars
        self.bufmap: dict[ir.Buffer, ir.Buffer] = {}  # desc buffer -> schedule buffer
        self.offsets: dict[ir.Buffer, list[ir.PrimExpr]] = {}
        #: scalar operand of the intrinsic (a free desc variable) -> the schedule's value
        self.scalars: dict[ir.Var, ir.PrimExpr] = {}

    def fail(self, msg: str) -> None:
        raise ScheduleError(f"tensorize with {self.intrin!r}: {msg}")

    def buffer(self, sb: ir.Buffer, sidx: tuple, db: ir.Buffer, didx: tuple) -> None:
        if db in self.bufmap and self.bufmap[db] is not sb:
            self.fail(f"intrinsic buffer {db.name} matches both {self.bufmap[db].name} and "
                      f"{sb.name} in the schedule")
        if sb.dtype != db.dtype:
            self.fail(f"buffer {sb.name} has dtype {sb.dtype} but the intrinsic's {db.name} "
                      f"is {db.dtype}")
        if len(sidx) < len(didx):
            self.fail(f"buffer {sb.name} has {len(sidx)} dimensions, intrinsic {db.name} "
                      f"has {len(didx)}")
        self.bufmap[db] = sb
        # extra leading dimensions (a packed layout's tile indices) must not move inside
        # the intrinsic's tile: they become offsets
        lead = len(sidx) - len(didx)
        offs = []
        for d, si in enumerate(sidx[:lead]):
            mapped = arith.simplify(substitute(si, self.svars))
            if set(free_vars(mapped)) & self.dvars:
                mapped = arith.simplify(mapped, self.ranges)
            if set(free_vars(mapped)) & self.dvars:
                self.fail(f"index {d} of {sb.name} ({si}) depends on the loops the intrinsic "
                          f"covers, but the intrinsic's {db.name} has only {len(didx)} "
                          "dimensions; reorder so the tile's loops index its trailing "
                          "dimensions")
            offs.append(mapped)
        for d, (si, di) in enumerate(zip(sidx[lead:], didx, strict=True), start=lead):
            mapped = substitute(si, self.svars)
            off = arith.simplify(mapped - di)
            if set(free_vars(off)) & self.dvars:
                off = arith.simplify(mapped - di, self.ranges)
            if set(free_vars(off)) & self.dvars:
                self.fail(f"index {d} of {sb.name} differs: the schedule has {si} where the "
                          f"intrinsic has {di} for {db.name} (loop variables in nest order: "
                          f"{', '.join(v.name for v in self.svars)}); reorder or re-tile the "
                          "loops so the access patterns agree")
            offs.append(off)
        if db in self.offsets:
            for d, (a, b) in enumerate(zip(self.offsets[db], offs, strict=True)):
                if not ir.is_const_int(arith.simplify(a - b), 0):
                    self.fail(f"buffer {sb.name} is accessed at two different offsets in "
                              f"dimension {d} ({a} and {b})")
        else:
            self.offsets[db] = offs

    def expr(self, s: ir.PrimExpr, d: ir.PrimExpr) -> None:
        if isinstance(d, ir.Var) and d not in self.dvars:  # a scalar operand (immediate)
            if set(free_vars(s)) & self.inner:
                self.fail(f"the intrinsic's scalar operand {d} matches {s}, which changes "
                          "inside the tile; it must be the same for the whole tile")
            if d in self.scalars and not ir.structural_equal(self.scalars[d], s):
                self.fail(f"scalar operand {d} matches both {self.scalars[d]} and {s}")
            if s.dtype != d.dtype:
                self.fail(f"dtype of {s} is {s.dtype}, the intrinsic's scalar {d} is "
                          f"{d.dtype}")
            self.scalars[d] = s
            return
        if type(s) is not type(d):
            self.fail(f"the schedule computes {s} where the intrinsic computes {d} "
                      f"({type(s).__name__} vs {type(d).__name__})")
        if s.dtype != d.dtype:
            self.fail(f"dtype of {s} is {s.dtype}, the intrinsic's {d} is {d.dtype}")
        if isinstance(s, ir.BufferLoad):
            self.buffer(s.buffer, s.indices, d.buffer, d.indices)
        elif isinstance(s, (ir.IntImm, ir.FloatImm)):
            if s.value != d.value:
                self.fail(f"constant {s} differs from the intrinsic's {d}")
        elif isinstance(s, ir.BinaryOp):
            self.expr(s.a, d.a)
            self.expr(s.b, d.b)
        elif isinstance(s, ir.Cast):
            self.expr(s.value, d.value)
        elif isinstance(s, ir.Call):
            if s.op != d.op or len(s.args) != len(d.args):
                self.fail(f"call {s.op} differs from the intrinsic's {d.op}")
            for a, b in zip(s.args, d.args, strict=True):
                self.expr(a, b)
        elif isinstance(s, ir.Select):
            for a, b in ((s.condition, d.condition), (s.true_value, d.true_value),
                         (s.false_value, d.false_value)):
                self.expr(a, b)
        elif isinstance(s, ir.Var):
            if self.svars.get(s, s) is not d:
                self.fail(f"variable {s} differs from the intrinsic's {d}")

    def store(self, s: ir.Stmt, d: ir.Stmt) -> None:
        if not (isinstance(s, ir.BufferStore) and isinstance(d, ir.BufferStore)):
            self.fail(f"the block body is a {type(s).__name__}, the intrinsic's a "
                      f"{type(d).__name__}; both must be a single store")
        self.buffer(s.buffer, s.indices, d.buffer, d.indices)
        self.expr(s.value, d.value)


class _Rebase(StmtExprMutator):
    def __init__(self, bmap: dict[ir.Buffer, ir.Buffer],
                 offsets: dict[ir.Buffer, list[ir.PrimExpr]]) -> None:
        self.bmap, self.offsets = bmap, offsets

    def _idx(self, b: ir.Buffer, idx: tuple) -> tuple:
        offs = self.offsets[b]
        lead = len(offs) - len(idx)  # the schedule buffer's extra leading dimensions
        return (*offs[:lead], *(arith.simplify(o + i)
                                for o, i in zip(offs[lead:], idx, strict=True)))

    def visit_BufferLoad(self, e: ir.BufferLoad) -> ir.PrimExpr:
        e = super().visit_BufferLoad(e)
        if isinstance(e, ir.BufferLoad) and e.buffer in self.bmap:
            return ir.BufferLoad(self.bmap[e.buffer], self._idx(e.buffer, e.indices))
        return e

    def visit_BufferStore(self, s: ir.BufferStore) -> ir.Stmt:
        s = super().visit_BufferStore(s)
        if isinstance(s, ir.BufferStore) and s.buffer in self.bmap:
            return ir.BufferStore(self.bmap[s.buffer], s.value, self._idx(s.buffer, s.indices))
        return s


def _regions(desc_block: ir.Block, m: _Matcher) -> tuple[list[ir.BufferRegion],
                                                          list[ir.BufferRegion]]:
    """The intrinsic's read/write buffers, at their matched offsets, whole shape each."""

    def region(db: ir.Buffer) -> ir.BufferRegion:
        offs = m.offsets[db]
        shape = (1,) * (len(offs) - len(db.shape)) + tuple(db.shape)
        return ir.BufferRegion(m.bufmap[db], tuple(
            ir.Range(o, s) for o, s in zip(offs, shape, strict=True)))

    writes = [w.buffer for w in desc_block.writes]
    loaded: list[ir.Buffer] = []

    def grab(x: object) -> None:
        if isinstance(x, ir.BufferLoad) and x.buffer not in loaded:
            loaded.append(x.buffer)

    from toolchain.tir.functor import post_order_visit

    post_order_visit(desc_block.body, grab)
    return [region(b) for b in loaded if b in m.bufmap], [region(b) for b in writes
                                                          if b in m.bufmap]


def _bound_body(r: ir.BlockRealize, stmt: ir.Stmt) -> ir.Stmt:
    vmap = {iv.var: v for iv, v in zip(r.block.iter_vars, r.iter_values, strict=True)}
    return substitute(stmt, vmap)


def tensorize(state: ScheduleState, loop: LoopRV | BlockRV, intrin: str) -> None:
    """Replace the loop nest under ``loop`` by a registered tensor intrinsic.

    Before (a 16x16x16 tile of a matmul after ``tile`` and ``decompose_reduction``)::

        for i_1, j_1, k_1 in T.grid(16, 16, 16):
            with T.block("C"):
                vi = T.axis.spatial(64, i_0 * 16 + i_1)
                ...
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]

    ``sch.tensorize(i_1, "mma16")`` with ``mma16`` implemented by an extern call; after::

        with T.block("C"):
            T.reads(C[i_0 * 16:i_0 * 16 + 16, ...], A[...], B[...])
            T.writes(C[i_0 * 16:i_0 * 16 + 16, j_0 * 16:j_0 * 16 + 16])
            T.block_attr({'tensorized': 'mma16'})
            T.call_extern("int32", "mma16", T.address_of(A[i_0 * 16, k_0 * 16]), ...)

    A mismatch names the loop, index or dtype that differs.
    """
    it = TensorIntrin.get(intrin)
    dloops, dr = _desc_nest(it.desc, intrin)
    if isinstance(loop, LoopRV):
        f, path = state.get_loop(loop)
        sloops, sr = _nest(f)
        top: ir.Stmt = f
        if sr is None:
            raise ScheduleError(f"tensorize: the body of loop {f.loop_var.name} is not a "
                                "perfect loop nest over one block; tensorize the loop just "
                                "above the block's inner tile")
    else:
        sr, path = state.get_block(loop)
        sloops, top = [], sr
    sb = sr.block
    if not ir.is_const_int(arith.simplify(sr.predicate), 1):
        raise ScheduleError(
            f"tensorize with {intrin!r}: block {sb.name_hint!r} has the guard "
            f"T.where({sr.predicate}) from a non-divisible split; the intrinsic computes whole "
            "tiles: pad the tensor or split by a divisor of the extent")
    if len(sloops) != len(dloops):
        raise ScheduleError(
            f"tensorize with {intrin!r}: the nest under the loop has {len(sloops)} loops "
            f"({st.fmt_loops(sloops)}) but the intrinsic has {len(dloops)} "
            f"({st.fmt_loops(dloops)}); split/reorder so the inner nest matches")
    for k, (a, b) in enumerate(zip(sloops, dloops, strict=True)):
        if not ir.structural_equal(arith.simplify(a.extent), arith.simplify(b.extent)):
            raise ScheduleError(
                f"tensorize with {intrin!r}: loop {k} ({a.loop_var.name}) has extent "
                f"{a.extent}, the intrinsic's loop {b.loop_var.name} has {b.extent}; split "
                f"{a.loop_var.name} by {b.extent}")
    if (sb.init is None) != (dr.block.init is None):
        fix = ("call decompose_reduction first so the intrinsic only accumulates"
               if sb.init is not None else "the intrinsic initialises its output itself")
        raise ScheduleError(f"tensorize with {intrin!r}: block {sb.name_hint!r} "
                            f"{'has' if sb.init is not None else 'has no'} init statement, the "
                            f"intrinsic {'has none' if sb.init is not None else 'has one'}; "
                            f"{fix}")
    svars = {a.loop_var: b.loop_var for a, b in zip(sloops, dloops, strict=True)}
    ranges = {lp.loop_var: ir.Range(lp.min, lp.extent)
              for lp in (*st.loops_of(path), *dloops)}
    m = _Matcher(intrin, svars, set(svars), {b.loop_var for b in dloops}, ranges)
    m.store(_bound_body(sr, sb.body), _bound_body(dr, dr.block.body))
    if sb.init is not None:
        m.store(_bound_body(sr, sb.init), _bound_body(dr, dr.block.init))
    impl_map = dict(zip(it.impl.buffers, it.desc.buffers, strict=True))
    bmap, offsets = {}, {}
    for ib, db in impl_map.items():
        if db in m.bufmap:
            bmap[ib] = m.bufmap[db]
            offsets[ib] = m.offsets[db]
    body = _Rebase(bmap, offsets).visit_stmt(_strip_root(it.impl))
    if m.scalars:
        body = substitute(body, dict(m.scalars))
    reads, writes = _regions(dr.block, m)
    blk = ir.Block(sb.name_hint, (), tuple(reads), tuple(writes), body,
                   annotations={**sb.annotations, "tensorized": intrin})
    new = ir.BlockRealize((), ir.IntImm(1, "bool"), blk)
    state.update({id(top): new})
    for lp in sloops:
        state.consume_loop(lp.loop_var)


def blockize(state: ScheduleState, loop: LoopRV) -> BlockRV:
    """Wrap the subtree under ``loop`` into a new outer block ``<block>_o``.

    The outer block gets one iteration var per enclosing loop the subtree uses (reduce if
    it feeds a reduce var inside). Before: ``for i_0, i_1 in T.grid(8, 16)`` over block
    ``B``; ``sch.blockize(i_1)``; after::

        for i_0 in range(8):
            with T.block("B_o"):
                vi_0 = T.axis.spatial(8, i_0)
                T.reads(A[vi_0 * 16:vi_0 * 16 + 16])
                T.writes(B[vi_0 * 16:vi_0 * 16 + 16])
                for i_1 in range(16):
                    with T.block("B"):
                        vi = T.axis.spatial(128, vi_0 * 16 + i_1)
                        ...
    """
    f, path = state.get_loop(loop)
    under = st.blocks_under(f)
    if not under:
        raise ScheduleError(f"blockize: loop {f.loop_var.name} contains no block")
    outer_loops = st.loops_of(path)
    used = set(free_vars(f))
    red_used: set[ir.Var] = set()
    for r, _ in under:
        for iv, v in zip(r.block.iter_vars, r.iter_values, strict=True):
            if iv.iter_type == "reduce":
                red_used.update(free_vars(v))
    vmap, ivs, vals = {}, [], []
    for lp in outer_loops:
        if lp.loop_var in used:
            bv = ir.Var(f"v{lp.loop_var.name}")
            vmap[lp.loop_var] = bv
            kind = "reduce" if lp.loop_var in red_used else "spatial"
            ivs.append(ir.IterVar(bv, ir.Range(lp.min, lp.extent), kind))
            vals.append(lp.loop_var)
    body = substitute(f, vmap)
    reads, writes = access_regions(body, {iv.var: iv.dom for iv in ivs})
    name = state.fresh_block_name(f"{under[0][0].block.name_hint}_o")
    blk = ir.Block(name, tuple(ivs), tuple(reads), tuple(writes), body)
    state.update({id(f): ir.BlockRealize(tuple(vals), ir.IntImm(1, "bool"), blk)})
    return BlockRV(name)


def intrin_buffers(intrin: str) -> list[Any]:
    """The buffer params of a registered intrinsic's description (for inspection)."""
    return list(TensorIntrin.get(intrin).desc.buffers)
