"""Compute-location primitives: compute_at, reverse_compute_at, compute_inline,
reverse_compute_inline.

``compute_at`` moves a producer block under a loop of its consumer and shrinks it to the
region the consumer needs per iteration of that loop (computed by relaxing the consumer's
read region over the loops inside); ``reverse_compute_at`` does the same for a consumer
under a loop of its producer.
"""

from __future__ import annotations

from dataclasses import replace

from toolchain.errors import ScheduleError
from toolchain.tir import arith, ir
from toolchain.tir.analysis import access_regions
from toolchain.tir.functor import StmtExprMutator, free_vars, substitute
from toolchain.tir.schedule import state as st
from toolchain.tir.schedule.handles import BlockRV, LoopRV
from toolchain.tir.schedule.state import ScheduleState
from toolchain.tir.structural import structural_equal


def _only_writer(func: ir.PrimFunc, buf: ir.Buffer, blk: ir.Block, prim: str) -> None:
    others = st.writers(func, buf, blk)
    if others:
        raise ScheduleError(
            f"{prim}: {buf.name} is written by block {blk.name_hint!r} and also by block "
            f"{others[0][0].block.name_hint!r}; {prim} needs the only producer (apply it "
            "before decompose_reduction/rfactor, or move the whole nest)")


def _loops_str(path: tuple[ir.Stmt, ...]) -> str:
    return st.fmt_loops(st.loops_of(path))


def _relaxed_region(realize: ir.BlockRealize, rel_path: tuple[ir.Stmt, ...],
                    regions: list[ir.BufferRegion]) -> list[tuple[ir.PrimExpr, ir.PrimExpr]]:
    """(lo, hi) per dim of ``regions`` in outer loop vars, relaxing loops in ``rel_path``."""
    vmap = {iv.var: v for iv, v in zip(realize.block.iter_vars, realize.iter_values,
                                       strict=True)}
    inner = {n.loop_var: ir.Range(n.min, n.extent) for n in rel_path[1:]
             if isinstance(n, ir.For)}
    out: list[tuple[ir.PrimExpr, ir.PrimExpr]] | None = None
    for reg in regions:
        cur = []
        for dim, rg in zip(reg.buffer.shape, reg.region, strict=True):
            lo = arith.relax(substitute(rg.min, vmap), inner)
            # one element (most regions): its last is its first, relaxed once
            hi = lo if ir.is_const_int(rg.extent, 1) else arith.relax(
                substitute(rg.min + rg.extent - 1, vmap), inner)
            if lo is None or hi is None:  # not expressible: take the whole dimension
                cur.append((ir.convert(0), arith.simplify(dim - 1)))
            else:
                cur.append((lo[0], hi[1]))
        out = _union(out, cur)
    assert out is not None
    return out


def _check_exact(realize: ir.BlockRealize, rel_path: tuple[ir.Stmt, ...],
                 regions: list[ir.BufferRegion], blk: ir.Block, loop: ir.For) -> None:
    """Refuse reverse_compute_at when a producer's region per iteration is not a box.

    The consumer moved under ``loop`` reads the bounding box of what one iteration wrote;
    that is only safe when the box holds nothing else (else it reads elements a later
    iteration produces). Exact: per dim, the index is ``base`` plus relaxed loop vars in
    mixed radix (``x_0 * 4 + x_1`` with ``x_1`` in ``[0, 4)``), each var in one dim, and
    extents free of relaxed vars.
    """
    from toolchain.tir.functor import free_vars

    vmap = {iv.var: v for iv, v in zip(realize.block.iter_vars, realize.iter_values,
                                       strict=True)}
    inner = {n.loop_var: ir.Range(n.min, n.extent) for n in rel_path[1:]
             if isinstance(n, ir.For)}
    for reg in regions:
        used: set[ir.Var] = set()
        for d, rg in enumerate(reg.region):
            idx = arith.simplify(substitute(rg.min, vmap), inner)
            lin = arith.to_lin(idx)
            ext = substitute(rg.extent, vmap)
            bad = lin is None or bool(set(free_vars(ext)) & set(inner))
            mine: list[tuple[int, ir.Var]] = []
            for atom, coeff in ([] if lin is None else lin.terms.values()):
                if isinstance(atom, ir.Var) and atom in inner:
                    mine.append((coeff, atom))
                elif set(free_vars(atom)) & set(inner):
                    bad = True
            # mixed radix (x_0 * 4 + x_1, x_1 < 4): the vars cover one contiguous range
            step = 1
            for coeff, v in sorted(mine, key=lambda t: abs(t[0])):
                ext = inner[v].extent
                if abs(coeff) != step or not isinstance(ext, ir.IntImm) or (
                        coeff * mine[0][0] < 0):
                    bad = True
                    break
                step *= ext.value
            vars_ = {v for _, v in mine}
            if bad or used & vars_:
                raise ScheduleError(
                    f"reverse_compute_at: block {realize.block.name_hint!r} writes "
                    f"{reg.buffer.name} at index {d} as {idx} under loop "
                    f"{loop.loop_var.name}; one iteration does not produce a box of "
                    f"{reg.buffer.name}, so block {blk.name_hint!r} would read elements "
                    "not produced yet (split fused loops by a divisor of the inner "
                    "extent, or pick an outer loop)")
            used |= vars_


def _union(a: list[tuple[ir.PrimExpr, ir.PrimExpr]] | None,
           b: list[tuple[ir.PrimExpr, ir.PrimExpr]]) -> list[tuple[ir.PrimExpr, ir.PrimExpr]]:
    if a is None:
        return b
    return [(arith.simplify(ir.Min(x[0], y[0])), arith.simplify(ir.Max(x[1], y[1])))
            for x, y in zip(a, b, strict=True)]


def _dim_vars(blk: ir.Block, region: ir.BufferRegion, prim: str,
              role: str) -> dict[ir.Var, int]:
    """Map block var -> buffer dim for a region indexed by distinct spatial block vars."""
    spatial = {iv.var: iv for iv in blk.iter_vars}
    out: dict[ir.Var, int] = {}
    for d, rg in enumerate(region.region):
        v = rg.min
        if not (isinstance(v, ir.Var) and v in spatial and ir.is_const_int(rg.extent, 1)
                and spatial[v].iter_type == "spatial" and v not in out):
            raise ScheduleError(
                f"{prim}: block {blk.name_hint!r} {role} {region.buffer.name} at index "
                f"{d} with {rg.min}; {prim} needs each index to be a distinct spatial block "
                "var (like B[vi, vj]); inline or restructure the block first")
        out[v] = d
    return out


def _conjuncts(e: ir.PrimExpr) -> list[ir.PrimExpr]:
    return _conjuncts(e.a) + _conjuncts(e.b) if isinstance(e, ir.And) else [e]


def _domain_bound(realize: ir.BlockRealize, cond: ir.PrimExpr) -> bool:
    """Whether ``cond`` only bounds one block variable's binding by its domain
    (``binding < min + extent`` or ``binding >= min``, as a split that does not divide
    writes it): the moved block's new loops and bounds check keep each variable in its
    domain, so such a guard holds by construction."""
    if not isinstance(cond, (ir.LT, ir.GE)):
        return False
    for value, iv in zip(realize.iter_values, realize.block.iter_vars, strict=True):
        if structural_equal(cond.a, value):
            bound = iv.dom.min + iv.dom.extent if isinstance(cond, ir.LT) else iv.dom.min
            if arith.prove(ir.EQ(cond.b, bound), {}):
                return True
    return False


def _carried_guard(realize: ir.BlockRealize, values: list[ir.PrimExpr], ranges: dict,
                   prim: str) -> list[ir.PrimExpr]:
    """``realize``'s own predicate (a guard from a split that does not divide) over the
    block's new bindings ``values``, conjunct by conjunct: one whose loops were each bound
    to one block variable alone is rewritten over the new loops (and kept unless they
    already imply it); one that bounds a block variable by its domain holds by
    construction; any other would be lost, so it is refused.

    Before (``B`` split by 4, not dividing 10, then moved under ``C``'s loop ``i``)::

        for j_0, j_1 in T.grid(3, 4):
            with T.block("B"):
                T.where(j_0 * 4 + j_1 < 10)
                vi = T.axis.spatial(8, i); vj = T.axis.spatial(10, j_0 * 4 + j_1)

    After: the new nest runs ``vj`` over its domain, so the guard holds by construction::

        for ax1 in range(10):
            with T.block("B"):
                vi = T.axis.spatial(8, i); vj = T.axis.spatial(10, ax1)
    """
    if ir.is_const_int(realize.predicate, 1):
        return []
    inv = {v: new for v, new in zip(realize.iter_values, values, strict=True)
           if isinstance(v, ir.Var)}
    kept = []
    for cond in _conjuncts(realize.predicate):
        if all(v in inv for v in free_vars(cond)):
            guard = arith.simplify(substitute(cond, inv), ranges)
            if not arith.prove(guard, ranges):
                kept.append(guard)
        elif not _domain_bound(realize, cond):
            raise ScheduleError(
                f"{prim}: block {realize.block.name_hint!r} is guarded by {cond}, over "
                "loops that are not each bound to one block variable; moving the block "
                "would drop that guard (it would compute outside it). Apply "
                f"{prim} before splitting or fusing the block's own loops, or split by a "
                "divisor of the extent")
    return kept


def _regenerate(realize: ir.BlockRealize, dims: dict[ir.Var, int],
                region: list[tuple[ir.PrimExpr, ir.PrimExpr]], outer_ranges: dict,
                preserve_unit_loops: bool, prim: str) -> ir.Stmt:
    """A new loop nest running ``realize``'s block over ``region`` (other vars: full)."""
    blk = realize.block
    loops: list[tuple[ir.Var, ir.PrimExpr]] = []
    values: list[ir.PrimExpr] = []
    preds: list[ir.PrimExpr] = []
    ranges = dict(outer_ranges)
    for k, iv in enumerate(blk.iter_vars):
        if iv.var in dims:
            lo, hi = region[dims[iv.var]]
            ext = arith.simplify(hi - lo + 1, outer_ranges)
            start = lo
        else:
            start, ext = iv.dom.min, iv.dom.extent
        if ir.is_const_int(ext, 1) and not preserve_unit_loops:
            val = start
        else:
            ax = ir.Var(f"ax{k}")
            loops.append((ax, ext))
            ranges[ax] = ir.Range(0, ext)
            val = arith.simplify(start + ax, ranges)
        values.append(val)
        if iv.var in dims:
            lo_ok = arith.prove(val >= iv.dom.min, ranges)
            hi_ok = arith.prove(val < iv.dom.min + iv.dom.extent, ranges)
            if not lo_ok:
                preds.append(val >= iv.dom.min)
            if not hi_ok:
                preds.append(val < iv.dom.min + iv.dom.extent)
    preds += _carried_guard(realize, values, ranges, prim)
    pred: ir.PrimExpr = ir.IntImm(1, "bool")
    for p in preds:
        pred = p if ir.is_const_int(pred, 1) else ir.And(pred, p)
    new_realize = ir.BlockRealize(tuple(values), arith.simplify(pred, ranges), blk)
    return st.make_loop_nest(loops, new_realize)


def _move(state: ScheduleState, block: BlockRV, loop: LoopRV, preserve_unit_loops: bool,
          reverse: bool) -> None:
    prim = "reverse_compute_at" if reverse else "compute_at"
    r, bpath = state.get_block(block)
    f, lpath = state.get_loop(loop)
    blk = r.block
    if any(n is f for n in bpath):
        raise ScheduleError(f"{prim}: block {blk.name_hint!r} is already under loop "
                            f"{f.loop_var.name}")
    if st.enclosing_block(bpath) is not st.enclosing_block(lpath):
        raise ScheduleError(f"{prim}: block {blk.name_hint!r} and loop {f.loop_var.name} are "
                            "in different blocks; move blocks within one block scope")
    func = state.func
    top = st.exclusive_nest_top(r, bpath)
    if any(n is top for n in lpath):
        raise ScheduleError(f"{prim}: loop {f.loop_var.name} is inside the loops of block "
                            f"{blk.name_hint!r} itself")
    order = st.program_order(func)
    under = st.blocks_under(f)
    if not reverse:
        if len(blk.writes) != 1:
            raise ScheduleError(f"{prim}: block {blk.name_hint!r} writes {len(blk.writes)} "
                                "buffers; compute_at needs a block with one output")
        buf = blk.writes[0].buffer
        _only_writer(func, buf, blk, prim)
        partners = st.readers(func, buf, blk)
        role = "consumer"
    else:
        bufs = {rd.buffer for rd in blk.reads}
        partners = [(w, p) for b in bufs for (w, p) in st.writers(func, b, blk)]
        role = "producer"
    def _is_under(path: tuple[ir.Stmt, ...]) -> bool:
        return any(n is f for n in path)

    inside = [(p, pp) for p, pp in partners if _is_under(pp)]
    if not inside:
        listing = "; ".join(f"{p.block.name_hint!r} under loops {_loops_str(pp)}"
                            for p, pp in partners) or "none"
        raise ScheduleError(
            f"{prim}: loop {f.loop_var.name} is not an ancestor of any {role} of block "
            f"{blk.name_hint!r} (its {role}s: {listing}); pick a loop from "
            f"sch.get_loops(<{role} block>)")
    outside = [p for p, pp in partners if not _is_under(pp)]
    if outside and not reverse:
        raise ScheduleError(
            f"{prim}: block {blk.name_hint!r} output {buf.name} is also read by block "
            f"{outside[0].block.name_hint!r} outside loop {f.loop_var.name}; after compute_at "
            "it would no longer be fully computed for that reader (use cache_read to give "
            "that reader its own copy, or compute_at the other reader too)")
    if not reverse and order[id(top)] > order[id(f)]:
        raise ScheduleError(f"{prim}: block {blk.name_hint!r} runs after loop "
                            f"{f.loop_var.name}; a producer must come before the loop (use "
                            "reverse_compute_at to move a consumer)")
    if reverse and order[id(top)] < order[id(f)]:
        raise ScheduleError(f"{prim}: block {blk.name_hint!r} runs before loop "
                            f"{f.loop_var.name}; a consumer must come after the loop (use "
                            "compute_at to move a producer)")
    if reverse:
        buf = next(w.buffer for p, _ in inside for w in p.block.writes
                   if any(rd.buffer is w.buffer for rd in blk.reads))
        outside_w = [p for p, pp in st.writers(func, buf, blk) if not _is_under(pp)]
        if outside_w:
            raise ScheduleError(f"{prim}: {buf.name} is also written by block "
                                f"{outside_w[0].block.name_hint!r} outside loop "
                                f"{f.loop_var.name}")
    region = None
    for p, pp in under:  # outermost blocks under the loop: their regions cover nested ones
        regs = [x for x in (p.block.reads if not reverse else p.block.writes)
                if x.buffer is buf]
        if regs:
            if reverse:
                _check_exact(p, pp, regs, blk, f)
            region = _union(region, _relaxed_region(p, pp, regs))
    own = next(x for x in (blk.writes if not reverse else blk.reads) if x.buffer is buf)
    dims = _dim_vars(blk, own, prim, "writes" if not reverse else "reads")
    outer = st.loop_ranges(lpath + (f,))
    nest = _regenerate(r, dims, region, outer, preserve_unit_loops, prim)
    body = ir.seq(f.body, nest) if reverse else ir.seq(nest, f.body)
    state.update({id(top): None, id(f): replace(f, body=body)})


def compute_at(state: ScheduleState, block: BlockRV, loop: LoopRV,
               preserve_unit_loops: bool = False) -> None:
    """Move a producer block under a loop of its consumer, computing only what it needs.

    Before (B feeds C)::

        for i, j in T.grid(128, 128):
            with T.block("B"): ... B[vi, vj] = A[vi, vj] * T.float32(2.0)
        for i, j in T.grid(128, 128):
            with T.block("C"): ... C[vi, vj] = B[vi, vj] + T.float32(1.0)

    ``sch.compute_at(sch.get_block("B"), i)`` (``i`` = C's outer loop); after::

        for i in range(128):
            for ax1 in range(128):
                with T.block("B"):
                    vi = T.axis.spatial(128, i)
                    vj = T.axis.spatial(128, ax1)
                    ...
            for j in range(128):
                with T.block("C"): ...

    Errors name the loop and the consumers when the loop is not an ancestor of one.
    """
    _move(state, block, loop, preserve_unit_loops, reverse=False)


def reverse_compute_at(state: ScheduleState, block: BlockRV, loop: LoopRV,
                       preserve_unit_loops: bool = False) -> None:
    """Move a consumer block under a loop of its producer (after the producer).

    Before (B feeds C)::

        for i, j in T.grid(128, 128):
            with T.block("B"): ... B[vi, vj] = A[vi, vj] * T.float32(2.0)
        for i, j in T.grid(128, 128):
            with T.block("C"): ... C[vi, vj] = B[vi, vj] + T.float32(1.0)

    ``sch.reverse_compute_at(sch.get_block("C"), i)`` (``i`` = B's outer loop); after::

        for i in range(128):
            for j in range(128):
                with T.block("B"): ...
            for ax1 in range(128):
                with T.block("C"):
                    vi = T.axis.spatial(128, i)
                    vj = T.axis.spatial(128, ax1)
                    ...
    """
    _move(state, block, loop, preserve_unit_loops, reverse=True)


class _ReplaceLoad(StmtExprMutator):
    def __init__(self, buf: ir.Buffer, vars_: list[ir.Var], value: ir.PrimExpr) -> None:
        self.buf, self.vars, self.value = buf, vars_, value

    def visit_BufferLoad(self, e: ir.BufferLoad) -> ir.PrimExpr:
        e2 = super().visit_BufferLoad(e)
        if isinstance(e2, ir.BufferLoad) and e2.buffer is self.buf:
            return substitute(self.value, dict(zip(self.vars, e2.indices, strict=True)))
        return e2


def refresh_regions(blk: ir.Block) -> ir.Block:
    """Recompute a block's reads/writes from its body."""
    ranges = {iv.var: iv.dom for iv in blk.iter_vars}
    stmt = blk.body
    # a reduction's update reads its output too: not a read of the block (its init and
    # update are one), so not analysed as one
    reads, writes = access_regions(stmt, ranges, reads_of_writes=blk.init is None)
    return replace(blk, reads=tuple(reads), writes=tuple(writes))


def _single_store(blk: ir.Block, prim: str) -> ir.BufferStore:
    if blk.init is not None or any(iv.iter_type != "spatial" for iv in blk.iter_vars):
        raise ScheduleError(f"{prim}: block {blk.name_hint!r} is a reduction; only "
                            "elementwise (all-spatial) blocks can be inlined")
    if not isinstance(blk.body, ir.BufferStore):
        raise ScheduleError(f"{prim}: block {blk.name_hint!r} body is not a single store "
                            f"({type(blk.body).__name__})")
    return blk.body


def _check_top_level(func: ir.PrimFunc, blocks: list[ir.Block], prim: str) -> None:
    """Refuse blocks nested inside another (non-root) block, e.g. made by blockize."""
    for b in blocks:
        found = st.find_block(func, b.name_hint)
        outer = st.enclosing_block(found[1]) if found else None
        if outer is not None and outer.name_hint != "root":
            raise ScheduleError(
                f"{prim}: block {b.name_hint!r} is nested in block {outer.name_hint!r} (made "
                f"by blockize or tensorize); apply {prim} before blockize")


def _check_intermediate(func: ir.PrimFunc, buf: ir.Buffer, blk: ir.Block, prim: str) -> None:
    if any(p is buf for p in func.params):
        raise ScheduleError(f"{prim}: block {blk.name_hint!r} writes {buf.name}, an "
                            "argument of the function; inlining would drop that output")


def compute_inline(state: ScheduleState, block: BlockRV) -> None:
    """Inline an elementwise block into every reader of its output; the block disappears.

    Before: ``B[vi, vj] = A[vi, vj] * T.float32(2.0)`` and
    ``C[vi, vj] = B[vi, vj] + T.float32(1.0)``. ``sch.compute_inline(B)``; after::

        for i, j in T.grid(128, 128):
            with T.block("C"):
                ...
                T.reads(A[vi, vj])
                C[vi, vj] = A[vi, vj] * T.float32(2.0) + T.float32(1.0)
    """
    r, path = state.get_block(block)
    blk = r.block
    store = _single_store(blk, "compute_inline")
    buf = store.buffer
    _check_intermediate(state.func, buf, blk, "compute_inline")
    _only_writer(state.func, buf, blk, "compute_inline")
    vars_ = []
    for d, i in enumerate(store.indices):
        if not (isinstance(i, ir.Var) and any(iv.var is i for iv in blk.iter_vars)
                and i not in vars_):
            raise ScheduleError(f"compute_inline: block {blk.name_hint!r} stores "
                                f"{buf.name} at index {d} with {i}; it needs distinct block "
                                "vars as indices (like B[vi, vj])")
        vars_.append(i)
    if any(rd.buffer is buf for rd in blk.reads):
        raise ScheduleError(f"compute_inline: block {blk.name_hint!r} reads its own output")
    readers = [x.block for x, _ in st.readers(state.func, buf, blk)]
    _check_top_level(state.func, [blk] + readers, "compute_inline")
    mapping: dict[int, ir.Stmt | None] = {id(st.exclusive_nest_top(r, path)): None}
    mut = _ReplaceLoad(buf, vars_, store.value)
    for rr, _ in st.readers(state.func, buf, blk):
        nb = rr.block
        init = mut.visit_stmt(nb.init) if nb.init is not None else None
        nb = refresh_regions(replace(nb, body=mut.visit_stmt(nb.body), init=init))
        mapping[id(rr.block)] = nb
    state.update(mapping)
    state.replace(st.with_root_allocs(state.func, remove=(buf,)))
    state.remove_block(blk.name_hint)


def _radix_inverse(blk: ir.Block, buf: ir.Buffer, index: tuple[ir.PrimExpr, ...],
                   at: tuple[ir.PrimExpr, ...], prefix: list[ir.PrimExpr] | None = None
                   ) -> dict[ir.Var, ir.PrimExpr] | None:
    """The consumer's block vars in terms of the producer's store indices ``at`` when the
    consumer reads ``buf`` at ``index``: each index a mixed-radix number of distinct block
    vars (``vy * 56 + vx`` with ``vx`` in ``[0, 56)``) spanning ``buf``'s dimension
    exactly, and every block var used once; else None. ``vy * 56 + vx`` read at ``j``
    gives ``vy = j // 56``, ``vx = j % 56``: a bijection, so inlining stays exact.
    ``prefix`` (a list, filled): an index may also span only the first elements of its
    dimension; the condition ``j < span`` for each such ``j`` is appended (the producer
    then stores only where they hold)."""
    dom = {iv.var: iv.dom for iv in blk.iter_vars if iv.iter_type == "spatial"}
    out: dict[ir.Var, ir.PrimExpr] = {}
    for idx, size, p in zip(index, buf.shape, at, strict=True):
        lin = arith.to_lin(idx)
        if lin is None or lin.const != 0:
            return None
        digits = sorted(((c, a) for a, c in lin.terms.values()), key=lambda t: t[0])
        step = 1
        for k, (coeff, v) in enumerate(digits):
            if not (isinstance(v, ir.Var) and v in dom and v not in out and coeff == step
                    and ir.is_const_int(dom[v].min, 0) and isinstance(dom[v].extent,
                                                                      ir.IntImm)):
                return None
            ext = dom[v].extent.value
            q = p if step == 1 else ir.FloorDiv(p, ir.convert(step))
            out[v] = q if k == len(digits) - 1 else ir.FloorMod(q, ir.convert(ext))
            step *= ext
        if not digits:
            return None
        if not ir.is_const_int(size, step):
            if prefix is None or not isinstance(size, ir.IntImm) or step > size.value:
                return None
            prefix.append(ir.LT(p, ir.convert(step)))
    return out if set(out) == set(dom) and len(dom) == len(blk.iter_vars) else None


def reverse_compute_inline(state: ScheduleState, block: BlockRV, prefix: bool = False
                           ) -> None:
    """Inline an elementwise consumer into its producer; the consumer disappears.

    Before: ``B[vi, vj] = A[vi, vj] * T.float32(2.0)`` then
    ``C[vi, vj] = B[vi, vj] + T.float32(1.0)``. ``sch.reverse_compute_inline(C)``; after::

        for i, j in T.grid(128, 128):
            with T.block("B"):
                ...
                T.writes(C[vi, vj])
                C[vi, vj] = A[vi, vj] * T.float32(2.0) + T.float32(1.0)

    The consumer may also read a flattened index that covers the producer's dimension
    exactly (a 1x1 convolution's product over flat pixels, read back as rows): with
    ``B[vi, vp]`` over 12 pixels and ``C[vi, vy, vx] = B[vi, vy * 4 + vx] + 1.0``
    (``vx`` in ``[0, 4)``), the producer then stores ``C[vi, vp // 4, vp % 4]``. A read
    that leaves elements of B out (B of 13 pixels) is refused, unless ``prefix``: a read
    covering the first elements of B's dimension (12 of B's 16 pixels: the tensor-core
    convolution's output pixels padded to a multiple of 16) inlines with the producer's
    block predicated on them (``T.where(vp < 12)``: the padding pixels are computed and
    never stored).
    """
    r, path = state.get_block(block)
    blk = r.block
    store = _single_store(blk, "reverse_compute_inline")
    func = state.func
    cands = [rd.buffer for rd in blk.reads if st.writers(func, rd.buffer, blk)
             and all(rd.buffer is not p for p in func.params)]
    if len(cands) != 1:
        raise ScheduleError(f"reverse_compute_inline: block {blk.name_hint!r} must read "
                            f"exactly one intermediate produced by another block, found "
                            f"{len(cands)} ({', '.join(b.name for b in cands) or 'none'})")
    buf = cands[0]
    writers = st.writers(func, buf, blk)
    if len(writers) != 1:
        raise ScheduleError(f"reverse_compute_inline: {buf.name} has {len(writers)} writers")
    pr, _ = writers[0]
    _check_top_level(func, [blk, pr.block], "reverse_compute_inline")
    pstore = _single_store(pr.block, "reverse_compute_inline")
    loads: list[tuple[ir.PrimExpr, ...]] = []

    def grab(x: object) -> None:
        if isinstance(x, ir.BufferLoad) and x.buffer is buf:
            loads.append(x.indices)

    from toolchain.tir.functor import post_order_visit

    post_order_visit(store.value, grab)
    if not loads:
        raise ScheduleError(
            f"reverse_compute_inline: block {blk.name_hint!r} lists {buf.name} among its "
            f"reads but its stored value never loads {buf.name} (it may be read only in "
            "an index or a nested block); nothing to inline into the producer "
            f"{pr.block.name_hint!r} - use compute_inline on the producer instead")
    first = loads[0]
    ok = all(isinstance(i, ir.Var) for i in first) and len(set(first)) == len(first)
    ok = ok and all(ir.structural_equal(x, first) for x in loads)
    cvars = {iv.var for iv in blk.iter_vars}
    vmap: dict[ir.Var, ir.PrimExpr] | None = None
    if ok and set(first) == cvars:
        vmap = dict(zip(first, pstore.indices, strict=True))
    guards: list[ir.PrimExpr] = []
    if vmap is None and all(ir.structural_equal(x, first) for x in loads):
        vmap = _radix_inverse(blk, buf, first, pstore.indices, guards if prefix else None)
    if vmap is None:
        raise ScheduleError(
            f"reverse_compute_inline: block {blk.name_hint!r} must read {buf.name} at "
            "one index tuple made of all its block vars (like B[vi, vj], or B[vi * 8 + vj] "
            "covering B's dimension exactly), found "
            + ", ".join("[" + ", ".join(str(i) for i in idx) + "]" for idx in loads))
    holes = [ir.Var(f"_{d}") for d in range(len(first))]
    value = substitute(_ReplaceLoad(buf, holes, pstore.value).visit_expr(store.value), vmap)
    new_store = ir.BufferStore(store.buffer, value,
                               tuple(substitute(i, vmap) for i in store.indices))
    pblk = refresh_regions(replace(pr.block, body=new_store))
    mapping: dict[int, ir.Stmt | None] = {id(st.exclusive_nest_top(r, path)): None,
                                          id(pr.block): pblk}
    if guards:  # the producer's realize stores only the elements the consumer read
        bind = {iv.var: v for iv, v in zip(pr.block.iter_vars, pr.iter_values, strict=True)}
        cond = pr.predicate
        for g in guards:
            g = substitute(g, bind)
            cond = g if ir.is_const_int(cond, 1) else ir.And(cond, g)
        mapping = {id(st.exclusive_nest_top(r, path)): None,
                   id(pr): replace(pr, predicate=cond, block=pblk)}
    state.update(mapping)
    state.replace(st.with_root_allocs(state.func, remove=(buf,)))
    state.remove_block(blk.name_hint)
