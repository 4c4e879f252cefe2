"""Default CPU schedules for every op except conv2d / dense / matmul (those live in
:mod:`toolchain.schedules.generic.conv2d` and :mod:`toolchain.schedules.generic.dense`).

One rule-driven scheduler, :func:`schedule_cpu`, covers elementwise and broadcast ops,
reductions (incl. argmax), pooling, softmax / log-softmax, layer / instance / batch norm
and data movement: it reads each block's access pattern (which loop walks which buffer
with stride 1) and applies, in order:

1. **inline** — cheap injective stages (padding, casts, reshapes, ``mean = sum / n``) are
   inlined into their readers; expensive ones (``exp``, ``sqrt``) only when read once;
   except the float value of a quantization read by a few-planes transpose (the float
   NHWC input of an int8 model): it is computed a row at a time, in the input's order and
   vectorized, into a row buffer the transpose converts from
   (:func:`stage_quantized_transpose`);
2. **rfactor** — a reduction whose innermost loop walks its input contiguously (softmax /
   layer-norm rows, ``ReduceSum`` over the last axis) is split by the vector width and
   rfactored, so the partial sums are one SIMD register;
3. **attach** — every remaining intermediate (row statistics, ``exp`` of softmax, the sum
   of an average pool) is ``compute_at`` the outermost loops of its reader that it is
   indexed by (the row): the passes over a row stay in cache;
4. **loops** — per block: a short contiguous innermost loop is fused with the next one,
   the innermost output-contiguous loop is split by the vector lanes and vectorized (a
   guard handles the tail); a reduction that is not contiguous in its input
   (``ReduceSum`` over axis 0, a pooling window) runs its reduce loops *outside* a
   vectorized output loop, small windows unrolled; a transpose is tiled so both sides
   touch whole cache lines, except one whose contiguous read loop has at most
   ``SMALL_READ_LOOP`` iterations (NHWC -> NCHW of 1-4 channels), which is read in input
   order with that loop innermost and unrolled;
5. **parallel** — the outermost spatial loops of each nest are fused and run in parallel
   when the target has more than one core and the nest is big enough.

Every step is a schedule primitive; a step a primitive refuses is skipped, so the result
is always a correct (if less optimised) schedule. ``sch.trace`` shows what was done.

Example::

    >>> from toolchain import te
    >>> from toolchain.topi.nn import softmax
    >>> x = te.placeholder((4, 64), name="x")
    >>> sch = schedule_cpu(te.create_prim_func([x, softmax.softmax(x)]), "c-generic")
    >>> print(sch.mod)  # doctest: +ELLIPSIS
    @T.prim_func
    def main(x: T.Buffer((4, 64), "float32"), softmax: T.Buffer((4, 64), "float32")):
    ...
        for i0 in range(4):
    ...
                for ax3 in T.vectorized(4):
    ...
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from toolchain.codegen.names import sanitize
from toolchain.errors import KilnError
from toolchain.graph.ir import Node
from toolchain.schedules.generic.access import (
    Access,
    access_strides,
    block_access,
    exclusive_loops,
    feeds_reduce,
    find_block,
    is_reduce,
    loads_of,
    loop_extent,
)
from toolchain.tir import ir
from toolchain.tir.dtype import bits_of
from toolchain.tir.functor import post_order_visit, substitute, uses_var
from toolchain.tir.schedule import Schedule
from toolchain.tir.schedule import state as st
from toolchain.tir.schedule.schedule import BlockRV, LoopRV

#: calls that cost about as much as an add (inlined even when read many times)
_CHEAP_CALLS = frozenset({"tir.if_then_else", "fabs", "floor", "ceil", "trunc", "round"})
#: the tag of a lookup-table stage (Resize's source indices and tap weights per output
#: coordinate, ``toolchain/topi/resize.py``): its consumer reads several entries an element
#: (one per tap), so inlined, each read recomputes an entry
TABLE_TAG = "resize_table"
#: a table stage whose body has more IR nodes than this is stored, not inlined, however
#: cheap each operation: cubic Resize's weight tables (500 to 2,700 nodes in the ONNX node
#: cases) were copied into each of the four taps of each axis (and the first axis's
#: stage, so grown, four times into the second's), megabytes of C; stored once per output
#: coordinate, the outputs are the same bit for bit (float64 entries; docs/testing.md,
#: "The node bundles' and the fuzzer's share, session 16")
INLINE_NODE_LIMIT = 512


@dataclass(frozen=True)
class CpuConfig:
    """What the CPU schedules need from a target (see :func:`cpu_config`)."""

    vector_bits: int = 128
    cores: int = 1
    #: a nest runs in parallel only above this many loop iterations
    parallel_min_work: int = 1 << 15
    #: reduction windows of at most this many cells are unrolled (pooling)
    unroll_window: int = 16
    #: transpose tile edge
    tile: int = 16
    #: steps 2 (rfactor) and 3 (attach) on: tuning knobs (:mod:`.ops_space`)
    rfactor: bool = True
    attach: bool = True

    def lanes(self, dtype: str) -> int:
        """SIMD lanes of ``dtype`` (at least 1)."""
        return max(1, self.vector_bits // max(8, bits_of(dtype)))


def cpu_config(target: Any = None) -> CpuConfig:
    """Vector width and core count of ``target`` (a name, a Target, or None for c-generic).

    >>> cpu_config("c-generic").lanes("float32")
    4
    """
    if target is None:
        return CpuConfig()
    if isinstance(target, str):
        from toolchain.target import resolve_target

        target = resolve_target(target)
    bits = getattr(target, "vector_width_bits", None) or 128
    cores = getattr(target, "cores", None) or getattr(target, "num_cores", None) or 1
    return CpuConfig(vector_bits=int(bits), cores=int(cores))


def _expensive(blk: ir.Block) -> bool:
    found: list[bool] = []

    def f(x: Any) -> None:
        # a Let is the fast exp of fast_math: dozens of operations
        if isinstance(x, ir.Let) or (isinstance(x, ir.Call) and x.op not in _CHEAP_CALLS):
            found.append(True)

    post_order_visit(blk.body, f)
    return bool(found)


def _large_table(blk: ir.Block) -> bool:
    """A table stage (:data:`TABLE_TAG`) of more than :data:`INLINE_NODE_LIMIT` nodes."""
    if blk.annotations.get("tag") != TABLE_TAG:
        return False
    nodes = 0

    def f(_: Any) -> None:
        nonlocal nodes
        nodes += 1

    post_order_visit(blk.body, f)
    return nodes > INLINE_NODE_LIMIT


def try_primitive(fn: Any, *args: Any) -> Any:
    """Apply one primitive; a refusal (ScheduleError) leaves the schedule as it was."""
    try:
        out = fn(*args)
    except KilnError:
        return None
    return True if out is None else out


# ------------------------------------------------------------------------------- steps

def _params(sch: Schedule) -> set[int]:
    return {id(p) for p in sch.mod.params if isinstance(p, ir.Buffer)}


def _spatial_size(realize: ir.BlockRealize) -> int | None:
    n = 1
    for iv in realize.block.iter_vars:
        if iv.iter_type != "spatial":
            continue
        if not isinstance(iv.dom.extent, ir.IntImm):
            return None
        n *= int(iv.dom.extent.value)
    return n


def _worth_inlining(sch: Schedule, realize: ir.BlockRealize) -> bool:
    # (padding stays inlined into pooling windows: materialized per output row it costs
    # more, because the padded copy itself is a guarded, conditional, scalar loop)
    blk = realize.block
    if _large_table(blk):  # read once per tap: its size says nothing of its reads
        return False
    if not _expensive(blk):
        return True
    consumers = sch.get_consumers(BlockRV(blk.name_hint))
    if len(consumers) != 1:
        return False
    reader, _ = find_block(sch, consumers[0].name)
    if is_reduce(reader.block):
        return False
    mine, theirs = _spatial_size(realize), _spatial_size(reader)
    return mine is not None and mine == theirs


def inline_stages(sch: Schedule, names: set[str] | None = None,
                  skip: set[str] = frozenset()) -> None:
    """Step 1: ``compute_inline`` every intermediate injective block worth inlining
    (only blocks in ``names`` when given, none in ``skip``)."""
    params = _params(sch)
    changed = True
    while changed:
        changed = False
        for realize in st.all_blocks(sch.mod):
            blk = realize.block
            if (names is not None and blk.name_hint not in names) or blk.name_hint in skip:
                continue
            if (blk.name_hint == "root" or blk.init is not None or is_reduce(blk)
                    or len(blk.writes) != 1 or id(blk.writes[0].buffer) in params
                    or any(iv.iter_type == "opaque" for iv in blk.iter_vars)
                    or not _worth_inlining(sch, realize)):
                continue
            if try_primitive(sch.compute_inline, BlockRV(blk.name_hint)) is not None:
                changed = True
                break


def _rfactor_factor(extent: int | None, lanes: int) -> int:
    """Largest power of two <= lanes that divides ``extent`` (0 when < 4 or too short)."""
    if extent is None:
        return 0
    f = lanes
    while f >= 4:
        if extent % f == 0 and extent >= 2 * f:
            return f
        f //= 2
    return 0


def _reduce_plan(realize: ir.BlockRealize, loops: Sequence[ir.For], cfg: CpuConfig) -> str:
    """How to run a reduction block: ``vector_out`` (vectorize an output-contiguous loop
    with the reduce loops outside it), ``rfactor`` (contiguous inner reduction) or
    ``scalar``."""
    acc = block_access(realize, loops)
    spatial = [f for f in loops if not feeds_reduce(realize, f.loop_var)]
    reduce = [f for f in loops if feeds_reduce(realize, f.loop_var)]
    window = reduce and all(loop_extent(f) for f in reduce) and math.prod(
        loop_extent(f) or 0 for f in reduce) <= cfg.unroll_window
    vec = [f for f in spatial if acc.write.get(f.loop_var) == 1 and (loop_extent(f) or 0) >= 2]
    inner = reduce[-1] if reduce else None
    contiguous_red = inner is not None and acc.read.get(inner.loop_var) == 1
    if vec and (loop_extent(vec[-1]) or 0) >= 4 and (window or not contiguous_red
                                                 or acc.read.get(vec[-1].loop_var) == 1):
        return "vector_out"
    lanes = cfg.lanes(realize.block.writes[0].buffer.dtype)
    if contiguous_red and not window and inner is loops[-1] and _rfactor_factor(
            loop_extent(inner), lanes):
        return "rfactor"
    return "scalar"


def rfactor_rows(sch: Schedule, cfg: CpuConfig) -> None:
    """Step 2: split + rfactor contiguous inner reductions by the vector lanes."""
    for realize in st.all_blocks(sch.mod):
        blk = realize.block
        if blk.name_hint == "root" or not is_reduce(blk) or blk.init is None:
            continue
        _, path = find_block(sch, blk.name_hint)
        loops = st.loops_of(path)
        if _reduce_plan(realize, loops, cfg) != "rfactor":
            continue
        lanes = cfg.lanes(blk.writes[0].buffer.dtype)
        f = _rfactor_factor(loop_extent(loops[-1]), lanes)
        # an exact split never fails; if rfactor refuses, the split alone is harmless
        _, ki = sch.split(LoopRV(loops[-1].loop_var), [None, f])
        if try_primitive(sch.rfactor, ki, len(blk.writes[0].buffer.shape)) is not None:
            _tree_tail(sch, blk.name_hint, f)


#: width of the second reduction level (see :func:`_tree_tail`)
_TREE = 4


def _tree_tail(sch: Schedule, name: str, lanes: int) -> None:
    """Fold the ``lanes`` partial results of an rfactored reduction ``name`` in two levels:
    ``_TREE``-wide vector steps, then ``_TREE`` scalar ones (C compilers may not reorder
    a float reduction, so a 16-lane tail is 16 dependent scalar steps: most of the time of
    a softmax over rows of 32).

    Before (``rf`` holds 16 partial maxima)::

        for k in range(16): m = max(m, rf[k])

    after::

        for a in range(4): for b in T.vectorized(4): rf2[b] = max(rf2[b], rf[a * 4 + b])
        for b in range(4): m = max(m, rf2[b])
    """
    if lanes <= _TREE or lanes % _TREE:
        return
    _, path = find_block(sch, name)
    loops = st.loops_of(path)
    if not loops or loop_extent(loops[-1]) != lanes:
        return
    _, inner = sch.split(LoopRV(loops[-1].loop_var), [None, _TREE])
    realize, _ = find_block(sch, name)
    try_primitive(sch.rfactor, inner, len(realize.block.writes[0].buffer.shape))


def _attach_loop(sch: Schedule, realize: ir.BlockRealize, cfg: CpuConfig) -> LoopRV | None:
    """The loop to ``compute_at`` an intermediate block: the deepest loop shared by all
    its readers such that it and every loop above it index the block's output (so nothing
    is computed twice), stopping before a reader's reduce loop or vector loop."""
    blk = realize.block
    buf = blk.writes[0].buffer
    readers = [find_block(sch, c.name) for c in sch.get_consumers(BlockRV(blk.name_hint))]
    if not readers:
        return None
    paths = [st.loops_of(p) for _, p in readers]
    common: list[ir.For] = []
    for level in zip(*paths, strict=False):
        if all(f is level[0] for f in level):
            common.append(level[0])
        else:
            break
    chosen = None
    for f in common:
        ok = True
        for rd, path in readers:
            if feeds_reduce(rd, f.loop_var):
                ok = False
                break
            vmap = {iv.var: v for iv, v in zip(rd.block.iter_vars, rd.iter_values, strict=True)}
            used = any(uses_var(substitute(ld, vmap), f.loop_var)
                       for ld in loads_of(rd.block.body, buf))
            if not used and loop_extent(f) != 1:
                ok = False
                break
            loops = st.loops_of(path)
            spatial = [g for g in loops if not feeds_reduce(rd, g.loop_var)]
            if spatial and f is spatial[-1] and len(st.blocks_under(f)) == 1:
                acc = block_access(rd, loops)
                if acc.write.get(f.loop_var) == 1 and (loop_extent(f) or 0) >= 4:
                    ok = False  # the reader's vector loop: keep it whole
                    break
        if not ok:
            break
        chosen = f
    return LoopRV(chosen.loop_var) if chosen is not None else None


def attach_stages(sch: Schedule, cfg: CpuConfig) -> None:
    """Step 3: ``compute_at`` every remaining intermediate under its readers' row loop."""
    params = _params(sch)
    for realize in reversed(st.all_blocks(sch.mod)):
        blk = realize.block
        if (blk.name_hint == "root" or len(blk.writes) != 1
                or id(blk.writes[0].buffer) in params):
            continue
        cur, path = find_block(sch, blk.name_hint)
        if st.loops_of(path) and len(st.blocks_under(st.loops_of(path)[0])) > 1:
            continue  # already placed inside another nest
        if not ir.is_const_int(cur.predicate, 1):
            continue  # compute_at would drop the guard of a non-divisible split
        loop = _attach_loop(sch, cur, cfg)
        if loop is not None:
            try_primitive(sch.compute_at, BlockRV(blk.name_hint), loop)


def _width(extent: int, lanes: int) -> int:
    """Vector width for a loop of ``extent``: a guard (``if i < n``) stops C compilers from
    vectorizing, so prefer a narrower vector that divides the extent (1000 floats: 8 lanes
    rather than 16), down to 4 lanes; else the full width with a guarded tail."""
    width = lanes
    while width > 4 and extent % width:
        width //= 2
    return width if extent % width == 0 else lanes


def _vectorize_inner(sch: Schedule, loop: LoopRV, extent: int | None, lanes: int
                     ) -> tuple[LoopRV | None, LoopRV | None]:
    """Split ``loop`` by ``lanes`` and vectorize the inner part: (outer, inner)."""
    if extent is None or lanes < 2 or extent < 2:
        return loop, None
    if extent <= lanes:
        if extent & (extent - 1) == 0 and extent >= 4:
            try_primitive(sch.vectorize, loop)
            return None, loop
        return loop, None
    outer, inner = sch.split(loop, [None, _width(extent, lanes)])
    try_primitive(sch.vectorize, inner)
    return outer, inner


def _fusable(a: dict[ir.Var, int | None], outer: ir.For, inner_stride: int | None,
             inner_extent: int) -> bool:
    s = a.get(outer.loop_var)
    if s is None or inner_stride is None:
        return False
    return (s == 0 and inner_stride == 0) or (inner_stride != 0 and s == inner_stride *
                                                inner_extent)


def _schedule_spatial(sch: Schedule, name: str, cfg: CpuConfig) -> None:
    realize, _ = find_block(sch, name)
    loops = exclusive_loops(sch, name)
    if not loops:
        return
    acc = block_access(realize, loops)
    lanes = cfg.lanes(realize.block.writes[0].buffer.dtype)
    last = loops[-1]
    if _schedule_transpose(sch, loops, acc, cfg, lanes):
        return
    if acc.write.get(last.loop_var) != 1:
        return
    # fuse trailing loops that every access walks contiguously (or not at all)
    group = [last]
    strides = [acc.write] + acc.reads
    inner_str = {id(a): a.get(last.loop_var) for a in strides}
    extent = loop_extent(last) or 0
    # at most two loops: the index of three fused loops does not simplify back to affine
    # form (``x // 256 * 256 + x % 256 // 32 * 32 + x % 32``), which would stop the vectors
    if len(loops) > 1 and extent < 4 * lanes and all(
            _fusable(a, loops[-2], inner_str[id(a)], extent) for a in strides):
        group.insert(0, loops[-2])
        extent *= loop_extent(loops[-2]) or 0
    loop = LoopRV(group[0].loop_var)
    if len(group) > 1:
        fused = try_primitive(sch.fuse, *[LoopRV(f.loop_var) for f in group])
        if not isinstance(fused, LoopRV):
            loop, extent = LoopRV(last.loop_var), loop_extent(last) or 0
        else:
            loop = fused
    _vectorize_inner(sch, loop, extent or None, lanes)


#: a transpose whose contiguous read loop is this short is read in input order, that loop
#: innermost and unrolled, instead of tiled (see :func:`_schedule_transpose`)
SMALL_READ_LOOP = 4


def _schedule_transpose(sch: Schedule, loops: Sequence[ir.For], acc: Access,
                        cfg: CpuConfig, lanes: int) -> bool:
    """Tile a transpose-like block: the loop reading contiguously and the loop writing
    contiguously become a tile x tile block, so each side touches whole cache lines."""
    w = [f for f in loops if acc.write.get(f.loop_var) == 1]
    r = [f for f in loops if acc.read.get(f.loop_var) == 1]
    if not w or not r or w[0] is r[0] or w[0] is not loops[-1]:
        return False
    wf, rf = w[0], r[0]
    t = cfg.tile
    if (loop_extent(rf) or t) <= SMALL_READ_LOOP and (loop_extent(wf) or 0) >= t:
        # a few interleaved planes (NHWC -> NCHW of 1-4 channels): read in input order,
        # the planes unrolled innermost, so each input element is read once and in order
        # (MobileNet's int8 input QuantizeLinear + transpose, 96 x 96 x 3: 13.5 -> ~4 us)
        try_primitive(sch.reorder, *[f for f in (LoopRV(x.loop_var) for x in loops)
                                     if f.var is not rf.loop_var], LoopRV(rf.loop_var))
        try_primitive(sch.unroll, LoopRV(rf.loop_var))
        return True
    if (loop_extent(wf) or 0) < t or (loop_extent(rf) or 0) < t or \
            acc.read.get(wf.loop_var) in (0, 1):
        return False
    ro, ri = sch.split(LoopRV(rf.loop_var), [None, t])
    wo, wi = sch.split(LoopRV(wf.loop_var), [None, t])
    try_primitive(sch.reorder, ro, wo, ri, wi)
    _vectorize_inner(sch, wi, t, min(lanes, t))
    return True


def _schedule_reduce(sch: Schedule, name: str, cfg: CpuConfig) -> None:
    realize, _ = find_block(sch, name)
    loops = exclusive_loops(sch, name)
    if not loops:
        return
    plan = _reduce_plan(realize, loops, cfg)
    reduce = [f for f in loops if feeds_reduce(realize, f.loop_var)]
    spatial = [f for f in loops if not feeds_reduce(realize, f.loop_var)]
    window = all(loop_extent(f) for f in reduce) and math.prod(
        loop_extent(f) or 0 for f in reduce) <= cfg.unroll_window
    lanes = cfg.lanes(realize.block.writes[0].buffer.dtype)
    if plan == "vector_out":
        acc = block_access(realize, loops)
        v = [f for f in spatial
             if acc.write.get(f.loop_var) == 1 and (loop_extent(f) or 0) >= 2][-1]
        rest = [LoopRV(f.loop_var) for f in spatial if f is not v]
        ext = loop_extent(v) or 0
        if ext > lanes:
            lanes = _width(ext, lanes)
            vo, vi = sch.split(LoopRV(v.loop_var), [None, lanes])
            rest.append(vo)
        else:
            vi = LoopRV(v.loop_var)
        red = [LoopRV(f.loop_var) for f in reduce]
        if try_primitive(sch.reorder, *rest, *red, vi) is None and rest + red:
            try_primitive(sch.reorder, *red, vi)
        if red:
            init = try_primitive(sch.decompose_reduction, BlockRV(name), red[0])
            if init is not None:
                il = sch.get_loops(init)
                if il:
                    try_primitive(sch.vectorize, il[-1])
        if min(ext, lanes) >= 2 and min(ext, lanes) & (min(ext, lanes) - 1) == 0:
            try_primitive(sch.vectorize, vi)
        if window:
            for f in red:
                try_primitive(sch.unroll, f)
        return
    if window:
        for f in reduce:
            try_primitive(sch.unroll, LoopRV(f.loop_var))


def schedule_loops(sch: Schedule, cfg: CpuConfig, names: set[str] | None = None) -> None:
    """Step 4: per block, vectorize / reorder / unroll its own (unshared) loops (only the
    blocks in ``names`` when given)."""
    for realize in st.all_blocks(sch.mod):
        blk = realize.block
        if names is not None and blk.name_hint not in names:
            continue
        if blk.name_hint == "root" or "tensorized" in blk.annotations:
            continue
        if st.find_block(sch.mod, blk.name_hint) is None:
            continue
        if is_reduce(blk):
            _schedule_reduce(sch, blk.name_hint, cfg)
        else:
            _schedule_spatial(sch, blk.name_hint, cfg)


def _work(s: ir.Stmt) -> int:
    """Loop iterations under ``s`` (symbolic extents count as large)."""
    if isinstance(s, ir.For):
        return (loop_extent(s) or 1 << 20) * _work(s.body)
    if isinstance(s, ir.SeqStmt):
        return sum(_work(x) for x in s.seq)
    if isinstance(s, ir.BlockRealize):
        return 1 if s.block.name_hint != "root" else _work(s.block.body)
    return 1


def _spatial_for_all(f: ir.For) -> bool:
    return all(not feeds_reduce(r, f.loop_var) for r, _ in st.blocks_under(f))


def parallelize(sch: Schedule, cfg: CpuConfig, names: set[str] | None = None) -> None:
    """Step 5: fuse the outer spatial loops of each nest and run them in parallel (only
    nests whose blocks are all in ``names`` when given)."""
    if cfg.cores <= 1:
        return
    body = st.root_block(sch.mod).body
    for top in list(body.seq) if isinstance(body, ir.SeqStmt) else [body]:
        if not isinstance(top, ir.For) or _work(top) < cfg.parallel_min_work:
            continue
        if names is not None and any(r.block.name_hint not in names
                                     for r, _ in st.blocks_under(top)):
            continue
        if any(isinstance(n, ir.For) and n.kind == "parallel" for n, _ in st.walk(top)):
            continue
        chain: list[ir.For] = []
        f: ir.Stmt = top
        size = 1
        while (isinstance(f, ir.For) and f.kind == "serial" and loop_extent(f)
               and _spatial_for_all(f) and size < 4 * cfg.cores):
            chain.append(f)
            size *= loop_extent(f) or 1
            f = f.body
        if not chain or size < 2:
            continue
        loop = LoopRV(chain[0].loop_var)
        if len(chain) > 1:
            fused = try_primitive(sch.fuse, *[LoopRV(c.loop_var) for c in chain])
            loop = fused if isinstance(fused, LoopRV) else loop
        try_primitive(sch.parallel, loop)


#: the largest row buffer :func:`stage_quantized_transpose` allocates (bytes, from the arena)
STAGE_ROW_BYTES = 8192


def _converted_values(sch: Schedule) -> list[str]:
    """Intermediate float blocks whose only reader converts them to an integer type and
    does nothing else (``q[i] = cast(int8, v[i])``): quantized values before their cast."""
    params = _params(sch)
    out = []
    for realize in st.all_blocks(sch.mod):
        blk = realize.block
        if (blk.name_hint == "root" or len(blk.writes) != 1 or is_reduce(blk)
                or id(blk.writes[0].buffer) in params
                or not ir.is_float(blk.writes[0].buffer.dtype)):
            continue
        readers = sch.get_consumers(BlockRV(blk.name_hint))
        if len(readers) != 1:
            continue
        rd, _ = find_block(sch, readers[0].name)
        body = rd.block.body
        if (isinstance(body, ir.BufferStore) and isinstance(body.value, ir.Cast)
                and not ir.is_float(body.value.dtype)
                and isinstance(body.value.value, ir.BufferLoad)
                and body.value.value.buffer is blk.writes[0].buffer):
            out.append(blk.name_hint)
    return out


def stage_quantized_transpose(sch: Schedule, cfg: CpuConfig) -> list[str]:
    """Step 1 for a quantizing few-planes transpose (the float NHWC input of an int8 model
    quantized and laid out NCHW in one kernel): the float value of each input row is
    computed in the input's order into a row buffer, vectorized, and only its conversion
    to the integer type goes with the transpose (inline every other stage first).
    Returns the staged blocks.

    Before (everything inlined: the division, rounding and clamp per output element,
    reading 3 floats apart once ``schedule_loops`` has put the planes innermost)::

        for i0, i1, i2, i3 in T.grid(1, 3, 96, 96):
            t[i0, i1, i2, i3] = T.Cast("int8", T.min(T.max(T.round(x[i0, i2, i3, i1]
                / s[0]) + T.Cast("float32", zp[0]), T.float32(-128.0)), T.float32(127.0)))

    after (block bodies only; ``schedule_loops`` then fuses and vectorizes ``ax2, ax3``)::

        for i0, i2 in T.grid(1, 96):
            for ax2, ax3 in T.grid(96, 3):
                v[vi0, vi1, vi2, vi3] = T.min(T.max(T.round(x[vi0, vi1, vi2, vi3] / s[0])
                    + T.Cast("float32", zp[0]), T.float32(-128.0)), T.float32(127.0))
            for i3, i1 in T.grid(96, 3):
                t[vi0, vi1, vi2, vi3] = T.Cast("int8", v[vi0, vi2, vi3, vi1])
    """
    values = _converted_values(sch)
    inline_stages(sch, skip=set(values))
    staged = []
    for name in values:
        readers = sch.get_consumers(BlockRV(name))
        loop = (_few_planes_row(sch, readers[0].name, name, cfg) if len(readers) == 1
                else None)
        if loop is not None and try_primitive(sch.compute_at, BlockRV(name), loop):
            staged.append(name)
    rest = set(values) - set(staged)
    if rest:
        inline_stages(sch, names=rest)
    return staged


def _few_planes_row(sch: Schedule, reader: str, value: str, cfg: CpuConfig
                    ) -> LoopRV | None:
    """The row loop of ``reader`` if it is a few-planes transpose of block ``value``'s
    output (see :func:`_schedule_transpose`), its loops put in the reading order."""
    realize, _ = find_block(sch, reader)
    loops = exclusive_loops(sch, reader)
    vbuf = find_block(sch, value)[0].block.writes[0].buffer
    if not loops or not any(r.buffer is vbuf for r in realize.block.reads):
        return None
    acc = block_access(realize, loops)
    loads = loads_of(realize.block.body, vbuf)
    vmap = {iv.var: v for iv, v in zip(realize.block.iter_vars, realize.iter_values,
                                       strict=True)}
    read = access_strides(loads[0].indices, vbuf, vmap, [f.loop_var for f in loops])
    w = [f for f in loops if acc.write.get(f.loop_var) == 1]
    r = [f for f in loops if read.get(f.loop_var) == 1]
    if (not w or not r or w[0] is r[0] or w[0] is not loops[-1]
            or (loop_extent(r[0]) or SMALL_READ_LOOP + 1) > SMALL_READ_LOOP
            or (loop_extent(w[0]) or 0) < cfg.tile):
        return None
    rest = [f for f in loops if f is not r[0]]
    # the row: the loop outside the write-contiguous one, everything below it one row
    row = [f for f in rest if f is not w[0] and read.get(f.loop_var) != 0]
    if not row:
        return None
    inside = rest[rest.index(row[-1]) + 1:] + [r[0]]
    cells = math.prod(loop_extent(f) or 1 << 30 for f in inside if read.get(f.loop_var) != 0)
    if cells * bits_of(vbuf.dtype) // 8 > STAGE_ROW_BYTES:
        return None
    try_primitive(sch.reorder, *[LoopRV(f.loop_var) for f in rest], LoopRV(r[0].loop_var))
    return LoopRV(row[-1].loop_var)


def schedule_cpu(func: ir.PrimFunc, target: Any = None) -> Schedule:
    """The default CPU schedule of any non-GEMM compute (see the module docstring).

    ``func`` comes from ``te.create_prim_func``; ``target`` is a name, a Target or None
    (c-generic), or a :class:`CpuConfig` (a tuned point of
    :mod:`~toolchain.schedules.generic.ops_space` may turn steps 2 and 3 off, or change
    the vector width, window unrolling and transpose tile). Returns the Schedule
    (``sch.mod`` is the scheduled PrimFunc)."""
    cfg = target if isinstance(target, CpuConfig) else cpu_config(target)
    sch = Schedule(func)
    stage_quantized_transpose(sch, cfg)
    if cfg.rfactor:
        rfactor_rows(sch, cfg)
    if cfg.attach:
        attach_stages(sch, cfg)
    schedule_loops(sch, cfg)
    parallelize(sch, cfg)
    return sch


# ------------------------------------------------------------------------ registration

#: the ops this module is the default CPU schedule of (``*`` covers any other op that has
#: a compute and no schedule of its own, e.g. ConvTranspose)
OPS = (
    "Relu", "Sigmoid", "HardSwish", "Tanh", "Erf", "Exp", "Log", "Sqrt", "Reciprocal", "Neg",
    "Abs", "Not", "Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater", "LeakyRelu",
    "HardSigmoid", "Gelu", "PRelu", "Where", "Min", "Max", "Clip", "Cast", "Identity",
    "Dropout", "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ArgMax", "Reshape",
    "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split", "Slice", "Gather", "Pad",
    "Expand", "Tile", "Resize", "ConstantOfShape", "Shape", "QuantizeLinear",
    "DequantizeLinear", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
    "BatchNormalization", "LayerNormalization", "InstanceNormalization", "Softmax",
    "LogSoftmax", "LayoutTransform", "LayoutPool",
    # elementwise_ext
    "Ceil", "Floor", "Round", "Sign", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh",
    "Cosh", "Asinh", "Acosh", "Atanh", "Softplus", "Softsign", "Mish", "BitwiseNot", "Elu",
    "Selu", "Celu", "ThresholdedRelu", "Shrink", "IsNaN", "IsInf", "Mod", "BitShift", "And",
    "Or", "Xor", "LessOrEqual", "GreaterOrEqual", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
    "Sum", "Mean", "BitCast",
    # more reductions
    "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp",
    "ArgMin", "Hardmax", "TopK",
    # transform_ext
    "DepthToSpace", "SpaceToDepth", "Trilu", "Size", "Range", "OneHot", "CumSum", "CumProd",
    "GatherElements", "GatherND", "ScatterElements", "ScatterND", "EyeLike", "ReverseSequence",
    "TensorScatter",
    # nn_ext
    "LRN", "LpNormalization", "LpPool", "Einsum", "GridSample", "AffineGrid", "MatMulInteger",
    "QLinearMatMul", "DynamicQuantizeLinear", "Col2Im",
    "DFT", "STFT", "HannWindow", "HammingWindow", "BlackmanWindow", "MelWeightMatrix",
    "Det", "RoiAlign", "DeformConv", "GlobalLpPool", "MaxUnpool", "MaxRoiPool",
    "TfIdfVectorizer", "ConvInteger", "QLinearConv",
)


def default_schedule(node: Node, target: Any) -> Schedule:
    """Registry entry: the compute of ``node`` scheduled by :func:`schedule_cpu`.

    >>> from toolchain.graph.ir import Value
    >>> x = Value("x", (2, 64), "float32"); y = Value("y", (2, 64), "float32")
    >>> sch = default_schedule(Node("Softmax", "sm", [x], [y], {"axis": -1}), "c-generic")
    >>> sch.mod.name
    'sm'
    """
    from toolchain import te
    from toolchain.topi.registry import node_compute

    nc = node_compute(node)
    func = te.create_prim_func(list(nc.inputs) + list(nc.outputs),
                               name=_kernel_name(node.name or node.op))
    return schedule_cpu(func, target)


def _kernel_name(name: str) -> str:
    s = sanitize(name, unicode=True, lead="k_", empty="k_", reserved=False)
    # kiln_<name> must not collide with the helpers of templates/c/kernel.c.j2
    if s in ("sigmoid", "sigmoidf", "alloc") or s.startswith(("min_", "max_", "floordiv_",
                                                              "floormod_")):
        s += "_kernel"
    return s

