"""Reduction primitives: decompose_reduction and rfactor."""

from __future__ import annotations

from dataclasses import replace

from toolchain.errors import ScheduleError
from toolchain.tir import arith, ir
from toolchain.tir.functor import free_vars, substitute
from toolchain.tir.schedule import state as st
from toolchain.tir.schedule.cache import check_no_reader_in_nest
from toolchain.tir.schedule.compute_location import refresh_regions
from toolchain.tir.schedule.handles import BlockRV, LoopRV
from toolchain.tir.schedule.state import ScheduleState


def _conjuncts(e: ir.PrimExpr) -> list[ir.PrimExpr]:
    if isinstance(e, ir.And):
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [] if ir.is_const_int(e, 1) else [e]


def _and(parts: list[ir.PrimExpr]) -> ir.PrimExpr:
    out: ir.PrimExpr = ir.IntImm(1, "bool")
    for p in parts:
        out = p if ir.is_const_int(out, 1) else ir.And(out, p)
    return out


def decompose_reduction(state: ScheduleState, block: BlockRV, loop: LoopRV) -> BlockRV:
    """Move a reduction block's ``init`` into its own block, placed before ``loop``.

    The init block gets copies of the loops between ``loop`` and the block that its
    spatial vars need. Before (matmul, ``init`` inside block ``C`` under ``i, j, k``)::

        for i, j, k in T.grid(64, 64, 64):
            with T.block("C"):
                ...
                with T.init():
                    C[vi, vj] = T.float32(0.0)
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]

    ``sch.decompose_reduction(C, k)``; after::

        for i, j in T.grid(64, 64):
            with T.block("C_init"):
                vi = T.axis.spatial(64, i)
                vj = T.axis.spatial(64, j)
                T.reads()
                T.writes(C[vi, vj])
                C[vi, vj] = T.float32(0.0)
            for k in range(64):
                with T.block("C"):
                    ... (no init)
                    C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
    """
    r, bpath = state.get_block(block)
    blk = r.block
    f, _ = state.get_loop(loop)
    if blk.init is None:
        raise ScheduleError(f"decompose_reduction: block {blk.name_hint!r} has no init "
                            "statement (it is not a reduction, or was already decomposed)")
    pos = next((k for k, n in enumerate(bpath) if n is f), None)
    if pos is None:
        raise ScheduleError(f"decompose_reduction: loop {f.loop_var.name} is not an ancestor "
                            f"of block {blk.name_hint!r} (its loops: "
                            f"{st.fmt_loops(st.loops_of(bpath))})")
    inner = [n for n in bpath[pos:] if isinstance(n, ir.For)]
    red_used = set()
    for iv, v in zip(blk.iter_vars, r.iter_values, strict=True):
        if iv.iter_type == "reduce":
            red_used.update(free_vars(v))
    above = [n for n in st.loops_of(bpath) if all(n is not x for x in inner)]
    for n in above:
        if n.loop_var in red_used:
            raise ScheduleError(
                f"decompose_reduction: loop {n.loop_var.name}, outside loop "
                f"{f.loop_var.name}, is a reduction loop of block {blk.name_hint!r}; the init "
                f"would run again at each of its iterations. Decompose at loop "
                f"{n.loop_var.name} or an outer loop")
    inner_vars = {n.loop_var for n in inner}
    outer_red = [v for v in red_used if v not in inner_vars]
    if outer_red:
        raise ScheduleError(
            f"decompose_reduction: the reduction of block {blk.name_hint!r} also runs over "
            f"{outer_red[0].name}, bound outside its enclosing block (blockize made it); the "
            "init would run again for each of its values. Decompose before blockize")
    spatial = [(iv, v) for iv, v in zip(blk.iter_vars, r.iter_values, strict=True)
               if iv.iter_type == "spatial"]
    used = set()
    for _, v in spatial:
        used.update(free_vars(v))
    needed = [n for n in inner if n.loop_var in used]
    lmap = {n.loop_var: ir.Var(f"{n.loop_var.name}_init") for n in needed}
    bvmap = {iv.var: ir.Var(iv.var.name) for iv, _ in spatial}
    inner_vars = {n.loop_var for n in inner}
    preds = [substitute(p, lmap) for p in _conjuncts(r.predicate)
             if not (set(free_vars(p)) & (inner_vars - set(lmap)))]
    ivs = tuple(ir.IterVar(bvmap[iv.var], iv.dom, "spatial") for iv, _ in spatial)
    vals = tuple(substitute(v, lmap) for _, v in spatial)
    init_body = substitute(blk.init, bvmap)
    name = state.fresh_block_name(f"{blk.name_hint}_init")
    init_blk = refresh_regions(ir.Block(name, ivs, (), (), init_body))
    init_nest: ir.Stmt = ir.BlockRealize(vals, _and(preds), init_blk)
    for n in reversed(needed):
        init_nest = ir.For(lmap[n.loop_var], n.min, n.extent, "serial", init_nest)
    upd = refresh_regions(replace(blk, init=None))  # the update now reads its output
    f2 = st.replace_in(f, {id(blk): upd})
    state.update({id(f): ir.seq(init_nest, f2)})
    return BlockRV(name)


_COMBINERS = (ir.Add, ir.Mul, ir.Max, ir.Min)


def _split_update(blk: ir.Block) -> tuple[type, ir.BufferStore, ir.PrimExpr]:
    body = blk.body
    if isinstance(body, ir.BufferStore) and type(body.value) in _COMBINERS:
        v = body.value
        for me, other in ((v.a, v.b), (v.b, v.a)):
            if (isinstance(me, ir.BufferLoad) and me.buffer is body.buffer
                    and ir.structural_equal(me.indices, body.indices)):
                return type(v), body, other
    raise ScheduleError(f"rfactor: block {blk.name_hint!r} is not a reduction of the form "
                        "C[...] = C[...] (+|*|max|min) expr")


def _writeback(blk: ir.Block, spatial: list[ir.IterVar], store: ir.BufferStore, comb: type,
               rf_buf: ir.Buffer, factor_axis: int, extent: ir.PrimExpr,
               rf_name: str) -> ir.Stmt:
    """The nest that reduces ``rf_buf`` over its factor axis into the original output."""
    out = store.buffer
    wb_sp = {iv.var: ir.Var(iv.var.name) for iv in spatial}
    vr = ir.Var(rf_name)
    wb_ivs = tuple(ir.IterVar(wb_sp[iv.var], iv.dom, "spatial") for iv in spatial) + (
        ir.IterVar(vr, ir.Range(0, extent), "reduce"),)
    out_idx = tuple(substitute(i, wb_sp) for i in store.indices)
    wb_rf_idx = list(out_idx)
    wb_rf_idx.insert(factor_axis, vr)
    wb_store = ir.BufferStore(out, comb(ir.BufferLoad(out, out_idx),
                                        ir.BufferLoad(rf_buf, tuple(wb_rf_idx))), out_idx)
    wb_blk = refresh_regions(ir.Block(blk.name_hint, wb_ivs, (), (), wb_store,
                                      substitute(blk.init, wb_sp)))
    loops = [(ir.Var(f"ax{k}"), iv.dom.extent) for k, iv in enumerate(wb_ivs)]
    values = tuple(lv if ir.is_const_int(iv.dom.min, 0) else lv + iv.dom.min
                   for (lv, _), iv in zip(loops, wb_ivs, strict=True))
    return st.make_loop_nest(loops, ir.BlockRealize(values, ir.IntImm(1, "bool"), wb_blk))


def _full_init(name: str, spatial: list[ir.IterVar], init: ir.BufferStore) -> ir.Stmt:
    """A nest storing ``init`` at every point of the spatial domain (no guard)."""
    vmap = {iv.var: ir.Var(iv.var.name) for iv in spatial}
    ivs = tuple(ir.IterVar(vmap[iv.var], iv.dom, "spatial") for iv in spatial)
    blk = refresh_regions(ir.Block(name, ivs, (), (), substitute(init, vmap)))
    loops = [(ir.Var(f"ax{k}"), iv.dom.extent) for k, iv in enumerate(ivs)]
    values = tuple(lv if ir.is_const_int(iv.dom.min, 0) else lv + iv.dom.min
                   for (lv, _), iv in zip(loops, ivs, strict=True))
    return st.make_loop_nest(loops, ir.BlockRealize(values, ir.IntImm(1, "bool"), blk))


def _check_rfactor_loops(f: ir.For, blk: ir.Block, spat: list, red: list,
                         bpath: tuple[ir.Stmt, ...]) -> list[ir.For]:
    """Validate the loop to factor; return the loops that feed reduce vars."""
    if any(f.loop_var in free_vars(v) for _, v in spat) or not any(
            f.loop_var in free_vars(v) for _, v in red):
        raise ScheduleError(f"rfactor: loop {f.loop_var.name} must feed only reduce vars of "
                            f"block {blk.name_hint!r}; split the reduction loop and rfactor "
                            "one of its parts")
    red_vars = set(free_vars([v for _, v in red]))
    scope_loops = st.loops_of(bpath)
    red_loops = [n for n in scope_loops if n.loop_var in red_vars]
    stray = red_vars - {n.loop_var for n in red_loops}
    if stray:
        raise ScheduleError(
            f"rfactor: the reduction of block {blk.name_hint!r} runs over "
            f"{sorted(v.name for v in stray)[0]}, which is not one of its loops (it is bound "
            "by an enclosing block made by blockize); rfactor before blockize")
    sp_vars = set(free_vars([v for _, v in spat]))
    for n in red_loops:
        if n.loop_var in sp_vars:
            raise ScheduleError(
                f"rfactor: loop {n.loop_var.name} of block {blk.name_hint!r} feeds both "
                "spatial and reduce vars (it was fused across kinds); rfactor needs each loop "
                "to be either spatial or reduction")
    return red_loops


def _first_step_runs(r: ir.BlockRealize, red_loops: list[ir.For], f: ir.For,
                     bpath: tuple[ir.Stmt, ...]) -> bool:
    """Whether ``r``'s predicate holds, for every value of the other loops, at the first
    step of the reduction loops but ``f`` (each partial of ``f`` sees that step)."""
    first = {n.loop_var: n.min for n in red_loops if n is not f}
    ranges = {n.loop_var: ir.Range(n.min, n.extent) for n in st.loops_of(bpath)
              if n.loop_var not in first}
    return arith.prove(substitute(r.predicate, first), ranges)


def rfactor(state: ScheduleState, loop: LoopRV, factor_axis: int = 0, *,
            init_in_block: bool = False) -> BlockRV:
    """Factor a reduction over ``loop`` into a partial-result buffer, then reduce it.

    Where a guard (a split that does not divide) might skip a partial's first step, the
    partials are initialised by a nest of their own (``<name>_rf_init``) before the
    reduction; ``init_in_block=True`` keeps the init in the ``rfactor`` block instead
    wherever the guard provably lets every partial's first step run (a length of at least
    ``loop``'s extent: then ``compute_at`` can move the block, its only writer).

    Makes the partial sums independent so ``loop`` can be parallelized/bound. Before
    (``B[vi] += A[vi, vk]``, ``k`` split into ``k_0, k_1``)::

        for i, k_0, k_1 in T.grid(8, 4, 16):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                vk = T.axis.reduce(64, k_0 * 16 + k_1)
                ...

    ``sch.rfactor(k_1, 0)``; after::

        # with T.block("root"):
        B_rf = T.alloc_buffer((16, 8), "float32")
        for i, k_0, k_1 in T.grid(8, 4, 16):
            with T.block("B_rf"):
                vi = T.axis.spatial(8, i)
                vk_0 = T.axis.reduce(4, k_0)
                vk_1 = T.axis.spatial(16, k_1)
                ...
                B_rf[vk_1, vi] = B_rf[vk_1, vi] + A[vi, vk_0 * 16 + vk_1]
        for ax0, ax1 in T.grid(8, 16):
            with T.block("B"):
                vi = T.axis.spatial(8, ax0)
                vk_1 = T.axis.reduce(16, ax1)
                ...
                B[vi] = B[vi] + B_rf[vk_1, vi]
    """
    f, _ = state.get_loop(loop)
    under = st.blocks_under(f)
    if len(under) != 1:
        raise ScheduleError(f"rfactor: loop {f.loop_var.name} must contain exactly one block, "
                            f"found {len(under)}")
    r = under[0][0]
    found = st.find_block(state.func, r.block.name_hint)
    assert found is not None
    _, bpath = found
    blk = r.block
    if blk.init is None:
        raise ScheduleError(f"rfactor: block {blk.name_hint!r} has no init (not a reduction, "
                            "or decompose_reduction was applied; rfactor before decomposing)")
    comb, store, src = _split_update(blk)
    red = [(iv, v) for iv, v in zip(blk.iter_vars, r.iter_values, strict=True)
           if iv.iter_type == "reduce"]
    spat = [(iv, v) for iv, v in zip(blk.iter_vars, r.iter_values, strict=True)
            if iv.iter_type == "spatial"]
    red_loops = _check_rfactor_loops(f, blk, spat, red, bpath)
    out = store.buffer
    if not 0 <= factor_axis <= out.ndim:
        raise ScheduleError(f"rfactor: factor_axis {factor_axis} out of range 0..{out.ndim}")
    new_bv = {n.loop_var: ir.Var(f"v{n.loop_var.name}") for n in red_loops}
    rf_ivs = [iv for iv, _ in spat] + [
        ir.IterVar(new_bv[n.loop_var], ir.Range(n.min, n.extent),
                   "spatial" if n is f else "reduce") for n in red_loops]
    rf_vals = [v for _, v in spat] + [n.loop_var for n in red_loops]
    red_sub = {iv.var: substitute(v, new_bv) for iv, v in red}
    vrf = new_bv[f.loop_var]
    rf_idx = list(store.indices)
    rf_idx.insert(factor_axis, vrf - f.min if not ir.is_const_int(f.min, 0) else vrf)
    shape = list(out.shape)
    shape.insert(factor_axis, f.extent)
    rf_buf = ir.Buffer(f"{out.name}_rf", tuple(shape), out.dtype)
    rf_load = ir.BufferLoad(rf_buf, tuple(rf_idx))
    rf_store = ir.BufferStore(rf_buf, comb(rf_load, substitute(src, red_sub)), tuple(rf_idx))
    init_val = blk.init.value if isinstance(blk.init, ir.BufferStore) else None
    if init_val is None:
        raise ScheduleError(f"rfactor: the init of block {blk.name_hint!r} is not a store")
    rf_name = state.fresh_block_name(f"{blk.name_hint}_rf")
    rf_init = ir.BufferStore(rf_buf, init_val, tuple(rf_idx))
    guarded = not ir.is_const_int(r.predicate, 1) and not (
        init_in_block and _first_step_runs(r, red_loops, f, bpath))
    # with a guard, some partial results may never see an iteration: initialise them all
    # up front instead of at the first (possibly skipped) reduction step
    rf_blk = refresh_regions(ir.Block(rf_name, tuple(rf_ivs), (), (), rf_store,
                                      None if guarded else rf_init))
    rf_realize = ir.BlockRealize(tuple(rf_vals), r.predicate, rf_blk)
    wb_nest = _writeback(blk, [iv for iv, _ in spat], store, comb, rf_buf, factor_axis,
                         f.extent, vrf.name)
    check_no_reader_in_nest(state.func, r, out, "rfactor")
    pos = st.root_index(state.func, r)
    func = st.replace_stmts(state.func, {id(r): rf_realize})
    func = st.insert_root(func, pos + 1, wb_nest, rf_buf)
    if guarded:
        init_nest = _full_init(state.fresh_block_name(f"{rf_name}_init"),
                               [iv for iv in rf_ivs if iv.iter_type == "spatial"], rf_init)
        func = st.insert_root(func, pos, init_nest, None)
    state.replace(func)
    return BlockRV(rf_name)
