"""Loop primitives: split, fuse, reorder, tile, parallel, vectorize, unroll, bind, annotate.

Each function takes the :class:`~toolchain.tir.schedule.state.ScheduleState` first; call
them as ``sch.split(...)`` etc. on a :class:`~toolchain.tir.schedule.Schedule`. The
examples start from ``B[i, j] = A[i, j] * 2`` over ``T.grid(128, 128)`` (see
``docs/schedule.md`` for a full walk-through).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from toolchain.errors import ScheduleError
from toolchain.tir import arith, ir
from toolchain.tir.functor import free_vars, substitute
from toolchain.tir.schedule import state as st
from toolchain.tir.schedule.handles import LoopRV
from toolchain.tir.schedule.state import ScheduleState


def _rv(var: ir.Var) -> LoopRV:
    return LoopRV(var)


def _add_predicate(s: ir.Stmt, cond: ir.PrimExpr) -> ir.Stmt:
    """Conjoin ``cond`` to the predicate of every block directly under ``s``."""
    mapping: dict[int, ir.Stmt | None] = {}
    for r, _ in st.blocks_under(s):
        pred = cond if ir.is_const_int(r.predicate, 1) else ir.And(r.predicate, cond)
        mapping[id(r)] = ir.BlockRealize(r.iter_values, pred, r.block)
    return st.replace_in(s, mapping)


def _require_serial(f: ir.For, prim: str) -> None:
    if f.kind != "serial":
        how = f"bound to {f.thread_tag}" if f.thread_tag else f"{f.kind}"
        raise ScheduleError(
            f"{prim}: loop {f.loop_var.name} (extent {f.extent}) is already {how}; apply "
            f"{prim} before parallel/vectorize/unroll/bind")


def split(state: ScheduleState, loop: LoopRV, factors: list[Any]) -> list[LoopRV]:
    """Split a loop into nested loops of the given extents (one factor may be None).

    A non-divisible split adds a guard ``T.where(...)`` to the blocks; a divisible one
    needs none. The old loop handle is consumed.

    Before::

        for i, j in T.grid(128, 128):
            with T.block("B"):
                vi = T.axis.spatial(128, i)
                vj = T.axis.spatial(128, j)
                ...

    ``io, ii = sch.split(i, factors=[None, 32])``; after::

        for i_0, i_1, j in T.grid(4, 32, 128):
            with T.block("B"):
                vi = T.axis.spatial(128, i_0 * 32 + i_1)
                vj = T.axis.spatial(128, j)
                ...

    With ``factors=[None, 48]`` (not a divisor of 128): ``T.grid(3, 48, 128)`` and
    ``T.where(i_0 * 48 + i_1 < 128)`` in the block.
    """
    f, path = state.get_loop(loop)
    _require_serial(f, "split")
    factors = list(factors)
    if len(factors) < 2:
        raise ScheduleError(f"split: give at least two factors for loop {f.loop_var.name} "
                            f"(extent {f.extent}), e.g. factors=[None, 32]")
    nones = [k for k, x in enumerate(factors) if x is None]
    if len(nones) > 1:
        raise ScheduleError(f"split: only one factor may be None (inferred), got {factors} "
                            f"for loop {f.loop_var.name} (extent {f.extent})")
    for x in factors:
        if x is not None and (not isinstance(x, (int, ir.PrimExpr)) or
                              (isinstance(x, int) and x <= 0)):
            raise ScheduleError(f"split: factor {x!r} for loop {f.loop_var.name} must be a "
                                "positive integer or None")
    known = ir.convert(1)
    for x in factors:
        if x is not None:
            known = arith.simplify(known * x)
    ext = f.extent
    if nones:
        factors[nones[0]] = arith.simplify(ir.FloorDiv(ext + known - 1, known))
    exts = [ir.convert(x) for x in factors]
    total = ir.convert(1)
    for x in exts:
        total = arith.simplify(total * x)
    ranges = st.loop_ranges(path)
    if arith.prove(total < ext, ranges):
        raise ScheduleError(
            f"split: factors {[str(x) for x in exts]} multiply to {total} but loop "
            f"{f.loop_var.name} has extent {ext}; use None for one factor to infer it")
    name = f.loop_var.name
    new_vars = [ir.Var(f"{name}_{k}", f.loop_var.dtype) for k in range(len(exts))]
    value: ir.PrimExpr = ir.convert(0)
    for v, e in zip(new_vars, exts, strict=True):
        value = value * e + v
    value = arith.simplify(f.min + value)
    inner_ranges = dict(ranges)
    inner_ranges.update({v: ir.Range(0, e) for v, e in zip(new_vars, exts, strict=True)})
    body = substitute(f.body, {f.loop_var: value})
    if not arith.prove(value < f.min + ext, inner_ranges):
        body = _add_predicate(body, value < f.min + ext)
    body = st.simplify_bindings(body, inner_ranges)
    nest = st.make_loop_nest(list(zip(new_vars, exts, strict=True)), body)
    state.update({id(f): nest})
    state.consume_loop(f.loop_var)
    return [_rv(v) for v in new_vars]


def fuse(state: ScheduleState, *loops: LoopRV) -> LoopRV:
    """Fuse directly nested loops into one loop; the old handles are consumed.

    Before: ``for i, j in T.grid(128, 128)`` binding ``vi = i``, ``vj = j``.
    ``f = sch.fuse(i, j)``; after::

        for i_j_fused in range(16384):
            with T.block("B"):
                vi = T.axis.spatial(128, i_j_fused // 128)
                vj = T.axis.spatial(128, i_j_fused % 128)
                ...
    """
    if len(loops) == 1 and isinstance(loops[0], (list, tuple)):
        loops = tuple(loops[0])
    if len(loops) < 2:
        raise ScheduleError("fuse: give at least two loops")
    fors = [state.get_loop(lp) for lp in loops]
    for (outer, _), (inner, _) in zip(fors, fors[1:], strict=False):
        if outer.body is not inner:
            raise ScheduleError(
                f"fuse: loop {inner.loop_var.name} is not directly inside loop "
                f"{outer.loop_var.name} (other loops or statements are between them, or the "
                "order is wrong); fuse adjacent loops of a perfect nest, outermost first — "
                "reorder them first if needed")
    for f, _ in fors:
        _require_serial(f, "fuse")
        if not ir.is_const_int(f.min, 0):
            raise ScheduleError(f"fuse: loop {f.loop_var.name} starts at {f.min}, not 0")
    outer, path = fors[0]
    exts = [f.extent for f, _ in fors]
    total = ir.convert(1)
    for e in exts:
        total = arith.simplify(total * e)
    fused = ir.Var("_".join(f.loop_var.name for f, _ in fors) + "_fused")
    vmap: dict[ir.Var, ir.PrimExpr] = {}
    stride = ir.convert(1)
    for k in range(len(fors) - 1, -1, -1):
        f = fors[k][0]
        val: ir.PrimExpr = fused if k == len(fors) - 1 else ir.FloorDiv(fused, stride)
        if k > 0:
            val = ir.FloorMod(val, exts[k])
        vmap[f.loop_var] = val
        stride = arith.simplify(stride * exts[k])
    body = substitute(fors[-1][0].body, vmap)
    ranges = st.loop_ranges(path)
    ranges[fused] = ir.Range(0, total)
    body = st.simplify_bindings(body, ranges)
    new = ir.For(fused, 0, total, "serial", body)
    state.update({id(outer): new})
    for f, _ in fors:
        state.consume_loop(f.loop_var)
    return _rv(fused)


def _binding_kinds(blocks: list[ir.BlockRealize], var: ir.Var) -> dict[str, list[str]]:
    """For a loop var: the block vars (by kind) whose bindings use it."""
    out: dict[str, list[str]] = {}
    for r in blocks:
        for iv, val in zip(r.block.iter_vars, r.iter_values, strict=True):
            if var in free_vars(val):
                out.setdefault(str(iv.iter_type), []).append(
                    f"{iv.var.name} of block {r.block.name_hint!r}")
    return out


def _check_not_mixed(blocks: list[ir.BlockRealize], f: ir.For, prim: str) -> None:
    kinds = _binding_kinds(blocks, f.loop_var)
    if "opaque" in kinds:
        raise ScheduleError(f"{prim}: loop {f.loop_var.name} feeds opaque block var "
                            f"{kinds['opaque'][0]}; its iterations cannot be moved")
    if "spatial" in kinds and "reduce" in kinds:
        raise ScheduleError(
            f"{prim}: loop {f.loop_var.name} (extent {f.extent}) feeds both the spatial var "
            f"{kinds['spatial'][0]} and the reduce var {kinds['reduce'][0]} (it was fused "
            "from a spatial and a reduction loop), so it cannot be reordered; fuse only "
            "loops of the same kind, or split it back apart")


def reorder(state: ScheduleState, *loops: LoopRV) -> None:
    """Reorder loops of one perfect nest (reduction loops included).

    Loops not named keep their positions. A loop that feeds both a spatial and a reduce
    block var (fused across kinds) cannot be moved.

    Before: ``for i_0, i_1, j in T.grid(4, 32, 128)``.
    ``sch.reorder(i_0, j, i_1)``; after::

        for i_0, j, i_1 in T.grid(4, 128, 32):
            with T.block("B"):
                vi = T.axis.spatial(128, i_0 * 32 + i_1)
                vj = T.axis.spatial(128, j)
                ...
    """
    if len(loops) == 1 and isinstance(loops[0], (list, tuple)):
        loops = tuple(loops[0])
    fors = [state.get_loop(lp)[0] for lp in loops]
    if len({id(f) for f in fors}) != len(fors):
        raise ScheduleError("reorder: a loop is given twice: "
                            + ", ".join(f.loop_var.name for f in fors))
    if len(fors) < 2:
        return
    depth = {id(f): len(state.get_loop(lp)[1]) for f, lp in zip(fors, loops, strict=True)}
    by_depth = sorted(fors, key=lambda f: depth[id(f)])
    outer = by_depth[0]
    chain = [outer]
    want = {id(f) for f in fors}
    while len([c for c in chain if id(c) in want]) < len(fors):
        body = chain[-1].body
        if not isinstance(body, ir.For):
            missing = [f.loop_var.name for f in fors if all(f is not c for c in chain)]
            raise ScheduleError(
                f"reorder: loops {', '.join(missing)} are not in the perfect nest under loop "
                f"{outer.loop_var.name} (loop {chain[-1].loop_var.name} has "
                f"{type(body).__name__} in its body, not a single loop); reorder works on "
                "loops of one nest with nothing between them")
        chain.append(body)
    chain_vars = {c.loop_var for c in chain}
    for f in fors:
        if st.uses((f.min, f.extent), chain_vars):
            raise ScheduleError(f"reorder: the extent of loop {f.loop_var.name} ({f.extent}) "
                                "depends on another loop of the nest; it cannot be moved")
    blocks = [r for r, _ in st.blocks_under(chain[-1].body)]
    for f in fors:
        _check_not_mixed(blocks, f, "reorder")
    order = iter(fors)
    new_chain = [next(order) if id(c) in want else c for c in chain]
    body = chain[-1].body
    for c in reversed(new_chain):
        body = replace(c, body=body)
    state.update({id(outer): body})


def tile(state: ScheduleState, loops: list[LoopRV], factors: list[list[Any]]) -> list[LoopRV]:
    """Split each loop by its factors, then order all outer parts before inner parts.

    Before::

        for i, j in T.grid(128, 128):
            with T.block("B"):
                vi = T.axis.spatial(128, i)
                vj = T.axis.spatial(128, j)

    ``sch.tile([i, j], [[None, 32], [None, 32]])`` returns ``[i_0, j_0, i_1, j_1]``;
    after::

        for i_0, j_0, i_1, j_1 in T.grid(4, 4, 32, 32):
            with T.block("B"):
                vi = T.axis.spatial(128, i_0 * 32 + i_1)
                vj = T.axis.spatial(128, j_0 * 32 + j_1)
    """
    if len(loops) != len(factors):
        raise ScheduleError(f"tile: {len(loops)} loops but {len(factors)} factor lists")
    parts = [split(state, lp, fs) for lp, fs in zip(loops, factors, strict=True)]
    levels = max(len(p) for p in parts)
    order = [p[k] for k in range(levels) for p in parts if k < len(p)]
    reorder(state, *order)
    return order


def _cross_thread(blocks: list[ir.BlockRealize], f: ir.For, kind: str, tag: str | None,
                  target: Any) -> bool:
    """Whether binding ``f`` to ``tag`` makes cross-thread reductions: ``threadIdx.x``
    on a schedule whose target declares ``warp_size`` 32 (the lowering uses warp
    shuffles), and every block whose reduce variable ``f`` feeds is one the lowering turns
    into shuffles (:mod:`~toolchain.tir.transform.lower_thread_allreduce`); raises with
    the reason where a block is not."""
    if kind != "thread_binding" or tag != "threadIdx.x" \
            or getattr(target, "warp_size", None) != 32:
        return False
    from toolchain.tir.transform.lower_thread_allreduce import cross_thread_reduce_var

    for r in blocks:
        if any(iv.iter_type == ir.IterType.REDUCE and f.loop_var in free_vars(v)
               for iv, v in zip(r.block.iter_vars, r.iter_values, strict=True)):
            why = cross_thread_reduce_var(r, f.loop_var)
            if why is not None:
                raise ScheduleError(f"bind: loop {f.loop_var.name} to threadIdx.x as a "
                                    f"cross-thread reduction: {why}")
    return True


def _set_kind(state: ScheduleState, loop: LoopRV, kind: str, tag: str | None = None) -> ir.For:
    f, path = state.get_loop(loop)
    prim = {"parallel": "parallel", "vectorized": "vectorize", "unrolled": "unroll",
            "thread_binding": "bind"}[kind]
    if f.kind == kind and f.thread_tag == tag:
        return f
    _require_serial(f, prim)
    blocks = [r for r, _ in st.blocks_under(f.body)]
    if kind in ("parallel", "vectorized", "thread_binding"):
        kinds = _binding_kinds(blocks, f.loop_var)
        if "reduce" in kinds and not _cross_thread(blocks, f, kind, tag, state.target):
            raise ScheduleError(
                f"{prim}: loop {f.loop_var.name} (extent {f.extent}) feeds the reduce var "
                f"{kinds['reduce'][0]}: its iterations accumulate into the same element, so "
                f"they cannot run concurrently; {prim} a spatial loop, or rfactor the "
                "reduction first (or, on a target with warp_size 32, bind it to "
                "threadIdx.x: a cross-thread reduction)")
        if "opaque" in kinds:
            raise ScheduleError(f"{prim}: loop {f.loop_var.name} feeds opaque var "
                                f"{kinds['opaque'][0]}")
    if kind == "vectorized" and not isinstance(f.extent, ir.IntImm):
        raise ScheduleError(f"vectorize: loop {f.loop_var.name} has extent {f.extent}, not a "
                            "constant; split it by a constant factor and vectorize the "
                            "inner loop")
    new = replace(f, kind=kind, thread_tag=tag)
    state.update({id(f): new})
    return new


def parallel(state: ScheduleState, loop: LoopRV) -> None:
    """Run a spatial loop's iterations in parallel threads (OpenMP on CPUs).

    Before ``for i_0, i_1, j in T.grid(4, 32, 128)``; ``sch.parallel(i_0)``; after::

        for i_0 in T.parallel(4):
            for i_1, j in T.grid(32, 128):
                ...
    """
    _set_kind(state, loop, "parallel")


def vectorize(state: ScheduleState, loop: LoopRV) -> None:
    """Mark a constant-extent spatial loop for SIMD code.

    Before: ``for i_0, i_1, j in T.grid(4, 32, 128)``. ``sch.vectorize(i_1)``; after::

        for i_0 in range(4):
            for i_1 in T.vectorized(32):
                for j in range(128):
                    ...

    The lowering expands it into ``Ramp``/``Broadcast`` vector expressions. A loop that
    feeds a reduce var, or whose extent is not a constant, is refused.
    """
    _set_kind(state, loop, "vectorized")


def unroll(state: ScheduleState, loop: LoopRV) -> None:
    """Mark a loop to be fully unrolled (by the lowering).

    Before: ``for k_0, k_1 in T.grid(16, 4)``. ``sch.unroll(k_1)``; after::

        for k_0 in range(16):
            for k_1 in T.unroll(4):
                ...
    """
    _set_kind(state, loop, "unrolled")


def bind(state: ScheduleState, loop: LoopRV, thread: str) -> None:
    """Bind a spatial loop to a GPU thread axis (``blockIdx.x``, ``threadIdx.y``, ``vthread``).

    Every loop bound to the same axis in one kernel must have the same extent; with a
    target, the threads per block are checked against its limit.

    A loop feeding a reduce variable may be bound to ``threadIdx.x`` on a target with
    ``warp_size: 32`` when it makes a *cross-thread reduction* (the block a one-variable
    ``C[i] = C[i] + x`` / max / min, typically the second half of an ``rfactor``): the
    lowering sums it with warp shuffles
    (:mod:`~toolchain.tir.transform.lower_thread_allreduce`)::

        for t in T.thread_binding(128, thread="threadIdx.x"):
            with T.block("C"):
                vt = T.axis.reduce(128, t)
                C[0] = C[0] + C_rf[vt]

    Before ``for i_0, i_1, j in T.grid(4, 32, 128)``; ``sch.bind(i_0, "blockIdx.x")`` and
    ``sch.bind(i_1, "threadIdx.x")``; after::

        for i_0 in T.thread_binding(4, thread="blockIdx.x"):
            for i_1 in T.thread_binding(32, thread="threadIdx.x"):
                for j in range(128):
                    ...
    """
    if thread not in ir.THREAD_TAGS:
        raise ScheduleError(f"bind: unknown thread axis {thread!r}; use one of "
                            f"{', '.join(ir.THREAD_TAGS)}")
    f, path = state.get_loop(loop)
    kernel = path[_kernel_index(path)] if len(path) > _kernel_index(path) else f
    if not thread.startswith("vthread"):
        for node, _ in st.walk(kernel):
            if (isinstance(node, ir.For) and node.thread_tag == thread and node is not f
                    and not ir.structural_equal(node.extent, f.extent)):
                raise ScheduleError(
                    f"{thread} bound to extents {node.extent} and {f.extent}: bind loops of "
                    f"equal extent, or split first (loop {node.loop_var.name} has extent "
                    f"{node.extent}, loop {f.loop_var.name} has extent {f.extent})")
    _set_kind(state, loop, "thread_binding", thread)
    if state.target is not None:
        from toolchain.tir.schedule.gpu import check_gpu_limits

        check_gpu_limits(state.func, state.target)


def _kernel_index(path: tuple[ir.Stmt, ...]) -> int:
    """Index in ``path`` of the top-level statement under the root block (the kernel)."""
    for k, node in enumerate(path):
        if isinstance(node, ir.Block) and node.name_hint == "root":
            k2 = k + 1
            while k2 < len(path) and isinstance(path[k2], ir.SeqStmt):
                k2 += 1
            return k2
    return 0


def annotate(state: ScheduleState, target: Any, key: str, value: Any) -> None:
    """Attach ``key = value`` to a loop or block (read by lowering and code generation).

    Before: ``for i_0 in range(4):``. ``sch.annotate(i_0, "pragma_unroll_explicit", 1)``;
    after::

        for i_0 in T.serial(4, annotations={'pragma_unroll_explicit': 1}):

    On a block it shows as ``T.block_attr({...})``.
    """
    if isinstance(target, LoopRV):
        f, _ = state.get_loop(target)
        new: ir.Stmt = replace(f, annotations={**f.annotations, key: value})
        state.update({id(f): new})
    else:
        r, _ = state.get_block(target)
        blk = replace(r.block, annotations={**r.block.annotations, key: value})
        state.update({id(r.block): blk})


def unannotate(state: ScheduleState, target: Any, key: str) -> None:
    """Remove annotation ``key`` from a loop or block (no-op if absent)."""
    if isinstance(target, LoopRV):
        f, _ = state.get_loop(target)
        ann = {k: v for k, v in f.annotations.items() if k != key}
        state.update({id(f): replace(f, annotations=ann)})
    else:
        r, _ = state.get_block(target)
        ann = {k: v for k, v in r.block.annotations.items() if k != key}
        state.update({id(r.block): replace(r.block, annotations=ann)})


def pragma(state: ScheduleState, loop: LoopRV, key: str, value: Any = 1) -> None:
    """Annotate a loop with ``pragma_<key>``.

    Before: ``for k in range(64):``. ``sch.pragma(k, "unroll_max_step", 16)``; after::

        for k in T.serial(64, annotations={'pragma_unroll_max_step': 16}):
    """
    annotate(state, loop, f"pragma_{key}", value)
