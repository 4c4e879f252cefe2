"""Memory primitives: cache_read, cache_write, set_scope, set_dtype, storage_align,
transform_layout.

Memory scopes: ``global``, ``shared``, ``local``, ``warp`` and any scope the schedule's
target declares (``memory_scopes`` in its YAML, e.g. an accelerator's ``acc_buffer``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from toolchain.errors import ScheduleError
from toolchain.tir import ir
from toolchain.tir.functor import StmtExprMutator
from toolchain.tir.schedule import state as st
from toolchain.tir.schedule.handles import BlockRV
from toolchain.tir.schedule.state import ScheduleState

BUILTIN_SCOPES = ("global", "shared", "shared.dyn", "local", "warp")


def _check_scope(state: ScheduleState, scope: str, prim: str) -> None:
    extra = tuple(state.target.memory_scopes) if state.target is not None else ()
    if scope not in BUILTIN_SCOPES + extra:
        where = f" and target {state.target.name!r} declares {list(extra)}" if extra else ""
        raise ScheduleError(
            f"{prim}: unknown memory scope {scope!r}; built-in scopes are "
            f"{', '.join(BUILTIN_SCOPES)}{where} (a target declares more under "
            "'memory_scopes' in its YAML; pass target=... to Schedule)")


def _pick(regions: tuple[ir.BufferRegion, ...], index: Any, blk: ir.Block, what: str,
          prim: str) -> ir.Buffer:
    names = [r.buffer.name for r in regions]
    if isinstance(index, str):
        for r in regions:
            if r.buffer.name == index:
                return r.buffer
        raise ScheduleError(f"{prim}: block {blk.name_hint!r} {what} no buffer {index!r}; it "
                            f"{what} {names}")
    if not isinstance(index, int) or not 0 <= index < len(regions):
        raise ScheduleError(f"{prim}: block {blk.name_hint!r} {what} {len(regions)} buffers "
                            f"{names}; index {index!r} is out of range")
    return regions[index].buffer


class _SwapBuffer(StmtExprMutator):
    def __init__(self, old: ir.Buffer, new: ir.Buffer) -> None:
        self.old, self.new = old, new

    def visit_buffer(self, b: ir.Buffer) -> ir.Buffer:
        return self.new if b is self.old else b


def _copy_block(name: str, src: ir.Buffer, dst: ir.Buffer) -> ir.Stmt:
    vs = [ir.Var(f"v{k}") for k in range(src.ndim)]
    loops = [ir.Var(f"ax{k}") for k in range(src.ndim)]
    ivs = tuple(ir.IterVar(v, ir.Range(0, s)) for v, s in zip(vs, src.shape, strict=True))
    point = tuple(ir.Range(v, 1) for v in vs)
    blk = ir.Block(name, ivs, (ir.BufferRegion(src, point),), (ir.BufferRegion(dst, point),),
                   ir.BufferStore(dst, ir.BufferLoad(src, tuple(vs)), tuple(vs)))
    realize = ir.BlockRealize(tuple(loops), ir.IntImm(1, "bool"), blk)
    return st.make_loop_nest(list(zip(loops, src.shape, strict=True)), realize)


def check_no_reader_in_nest(func: ir.PrimFunc, writer: ir.BlockRealize, buf: ir.Buffer,
                            prim: str) -> None:
    """Refuse when another block in the writer's top-level nest reads ``buf``."""
    pos = st.root_index(func, writer)
    for rr, _ in st.readers(func, buf, writer.block):
        if st.root_index(func, rr) == pos:
            raise ScheduleError(
                f"{prim}: block {rr.block.name_hint!r} reads {buf.name} inside the same loop "
                f"nest as block {writer.block.name_hint!r}; apply {prim} before moving them "
                "together (compute_at/reverse_compute_at)")


def _outermost_block(func: ir.PrimFunc, r: ir.BlockRealize) -> ir.Block:
    """The block itself, or the outermost non-root block around it (from blockize)."""
    found = st.find_block(func, r.block.name_hint)
    assert found is not None
    for node in found[1]:
        if isinstance(node, ir.Block) and node.name_hint != "root":
            return node
    return r.block


def _scoped_name(name: str, scope: str) -> str:
    return f"{name}_{scope.replace('.', '_')}"


def cache_read(state: ScheduleState, block: BlockRV, read_buffer_index: int | str,
               storage_scope: str, consumer_blocks: list[BlockRV] | None = None) -> BlockRV:
    """Read a buffer through a copy in ``storage_scope``; returns the copy block.

    All readers (or ``consumer_blocks``) read the copy. Move the copy with
    ``compute_at`` so that it holds only a tile.

    Before: ``C[vi, vj] = A[vi, vj] + T.float32(1.0)`` under ``T.grid(128, 128)``.
    ``sch.cache_read(C, 0, "shared")``; after::

        # with T.block("root"):
        A_shared = T.alloc_buffer((128, 128), "float32", scope="shared")
        for ax0, ax1 in T.grid(128, 128):
            with T.block("A_shared"):
                v0 = T.axis.spatial(128, ax0)
                v1 = T.axis.spatial(128, ax1)
                T.reads(A[v0, v1])
                T.writes(A_shared[v0, v1])
                A_shared[v0, v1] = A[v0, v1]
        for i, j in T.grid(128, 128):
            with T.block("C"):
                ...
                T.reads(A_shared[vi, vj])
                C[vi, vj] = A_shared[vi, vj] + T.float32(1.0)
    """
    _check_scope(state, storage_scope, "cache_read")
    r, _ = state.get_block(block)
    buf = _pick(r.block.reads, read_buffer_index, r.block, "reads", "cache_read")
    name = state.fresh_block_name(_scoped_name(buf.name, storage_scope))
    new = ir.Buffer(name, buf.shape, buf.dtype, storage_scope)
    if consumer_blocks is None:
        readers = [rr for rr, _ in st.readers(state.func, buf)
                   if all(w.buffer is not buf for w in rr.block.writes)]
    else:
        readers = [state.get_block(b)[0] for b in consumer_blocks]
        for rr in readers:
            if all(rd.buffer is not buf for rd in rr.block.reads):
                raise ScheduleError(f"cache_read: consumer block {rr.block.name_hint!r} does "
                                    f"not read {buf.name}")
    for rr in readers:
        if any(w.buffer is buf for w in rr.block.writes):
            raise ScheduleError(f"cache_read: block {rr.block.name_hint!r} both reads and "
                                f"writes {buf.name}; stage it with cache_write instead")
    if not readers:
        raise ScheduleError(f"cache_read: no block only reads {buf.name} (block "
                            f"{r.block.name_hint!r} also writes it); use cache_write")
    func = state.func
    order = st.program_order(func)
    first = min(readers, key=lambda x: order[id(x)])
    pos = st.root_index(func, first)
    writers = [w for w, _ in st.writers(func, buf)]
    if writers and max(st.root_index(func, w) for w in writers) >= pos:
        raise ScheduleError(
            f"cache_read: {buf.name} is written and read inside the same loop nest (block "
            f"{first.block.name_hint!r}); apply cache_read before compute_at/"
            "reverse_compute_at/decompose_reduction put them together")
    swap = _SwapBuffer(buf, new)
    tops = {id(t): t for t in (_outermost_block(func, rr) for rr in readers)}
    func = st.replace_stmts(func, {k: swap.visit_stmt(t) for k, t in tops.items()})
    state.replace(st.insert_root(func, pos, _copy_block(name, buf, new), new))
    _check_gpu(state)
    return BlockRV(name)


def cache_write(state: ScheduleState, block: BlockRV, write_buffer_index: int | str,
                storage_scope: str) -> BlockRV:
    """Compute into a buffer in ``storage_scope`` and copy it out after; returns the copy.

    Typical use: accumulate a tile in ``local``/``global`` scratch, then
    ``reverse_compute_at`` the copy under the tile loop.

    Before: matmul block ``C`` (reduction over ``k``). ``sch.cache_write(C, 0, "local")``;
    after::

        # with T.block("root"):
        C_local = T.alloc_buffer((64, 64), "float32", scope="local")
        for i, j, k in T.grid(64, 64, 64):
            with T.block("C"):
                ...
                T.writes(C_local[vi, vj])
                with T.init():
                    C_local[vi, vj] = T.float32(0.0)
                C_local[vi, vj] = C_local[vi, vj] + A[vi, vk] * B[vk, vj]
        for ax0, ax1 in T.grid(64, 64):
            with T.block("C_local"):
                ...
                C[v0, v1] = C_local[v0, v1]
    """
    _check_scope(state, storage_scope, "cache_write")
    r, _ = state.get_block(block)
    buf = _pick(r.block.writes, write_buffer_index, r.block, "writes", "cache_write")
    name = state.fresh_block_name(_scoped_name(buf.name, storage_scope))
    new = ir.Buffer(name, buf.shape, buf.dtype, storage_scope)
    func = state.func
    others = [w for w, _ in st.writers(func, buf, r.block)]
    if others:
        raise ScheduleError(
            f"cache_write: {buf.name} is also written by block {others[0].block.name_hint!r}; "
            "cache_write needs the only writer (apply it before decompose_reduction/rfactor)")
    pos = st.root_index(func, r) + 1
    check_no_reader_in_nest(func, r, buf, "cache_write")
    top = _outermost_block(func, r)
    func = st.replace_stmts(func, {id(top): _SwapBuffer(buf, new).visit_stmt(top)})
    state.replace(st.insert_root(func, pos, _copy_block(name, new, buf), new))
    _check_gpu(state)
    return BlockRV(name)


def set_scope(state: ScheduleState, block: BlockRV, buffer_index: int | str,
              storage_scope: str) -> None:
    """Change the memory scope of a buffer the block writes (an intermediate).

    Before::

        # with T.block("root"):
        B = T.alloc_buffer((128, 128), "float32")

    ``sch.set_scope(sch.get_block("B"), 0, "shared")``; after::

        # with T.block("root"):
        B = T.alloc_buffer((128, 128), "float32", scope="shared")
    """
    _check_scope(state, storage_scope, "set_scope")
    r, _ = state.get_block(block)
    buf = _pick(r.block.writes, buffer_index, r.block, "writes", "set_scope")
    if any(p is buf for p in state.func.params):
        raise ScheduleError(f"set_scope: {buf.name} is an argument of the function and must "
                            "stay in global memory; use cache_write to stage it instead")
    new = replace(buf, scope=storage_scope, data=None)
    swap = _SwapBuffer(buf, new)
    state.replace(state.func.with_body(swap.visit_stmt(state.func.body)))
    _check_gpu(state)


class _Widen(StmtExprMutator):
    """The writers of ``old`` compute in ``new.dtype``; its other readers see it rounded
    back to ``old.dtype`` (where they read it before)."""

    def __init__(self, old: ir.Buffer, new: ir.Buffer) -> None:
        self.old, self.new = old, new
        self.depth = 0  # > 0 inside the value of a store into the buffer

    def visit_buffer(self, b: ir.Buffer) -> ir.Buffer:
        return self.new if b is self.old else b

    def visit_BufferLoad(self, e: ir.BufferLoad) -> ir.PrimExpr:  # noqa: N802
        load = super().visit_BufferLoad(e)
        wide = self.new.dtype
        if self.depth:  # inside a writer: every float operand widened, the buffer as it is
            if e.buffer is self.old or not ir.is_float(load.dtype) or load.dtype == wide:
                return load
            return ir.Cast(wide, load)
        return ir.Cast(self.old.dtype, load) if e.buffer is self.old else load

    def visit_FloatImm(self, e: ir.FloatImm) -> ir.PrimExpr:  # noqa: N802
        return ir.FloatImm(e.value, self.new.dtype) if self.depth else e

    def visit_Cast(self, e: ir.Cast) -> ir.PrimExpr:  # noqa: N802
        v = self.visit_expr(e.value)
        if self.depth and ir.is_float(e.dtype) and ir.bits_of(e.dtype) < ir.bits_of(
                self.new.dtype):
            return v if v.dtype == self.new.dtype else ir.Cast(self.new.dtype, v)
        return ir.Cast(e.dtype, v)

    def visit_BufferStore(self, s: ir.BufferStore) -> ir.Stmt:  # noqa: N802
        if s.buffer is not self.old:
            return super().visit_BufferStore(s)
        self.depth += 1
        try:
            value = self.visit_expr(s.value)
        finally:
            self.depth -= 1
        if value.dtype != self.new.dtype:
            value = ir.Cast(self.new.dtype, value)
        return ir.BufferStore(self.new, value, tuple(self.visit_expr(i) for i in s.indices))


def set_dtype(state: ScheduleState, block: BlockRV, buffer_index: int | str,
              dtype: str) -> None:
    """Widen the float dtype of an intermediate the block writes (an accumulator): its
    writers compute in ``dtype`` (float16 loads and constants widened), its other readers
    read it rounded back to the old dtype, as before. A float16 GEMM then sums in float32
    (what tensor cores do), the rounding left where the result leaves the accumulator.

    Before (``C_local`` a ``cache_write`` of a float16 GEMM)::

        C_local = T.alloc_buffer((64, 64), "float16", scope="local")
        C_local[vi, vj] = C_local[vi, vj] + A[vi, vk] * B[vk, vj]
        ...
        C[v0, v1] = C_local[v0, v1]

    ``sch.set_dtype(sch.get_block("C"), 0, "float32")``; after::

        C_local = T.alloc_buffer((64, 64), "float32", scope="local")
        C_local[vi, vj] = C_local[vi, vj] + T.Cast("float32", A[vi, vk]) * T.Cast(
            "float32", B[vk, vj])
        ...
        C[v0, v1] = T.Cast("float16", C_local[v0, v1])
    """
    r, _ = state.get_block(block)
    buf = _pick(r.block.writes, buffer_index, r.block, "writes", "set_dtype")
    if any(p is buf for p in state.func.params):
        raise ScheduleError(f"set_dtype: {buf.name} is an argument of the function; its "
                            "dtype is the caller's. Stage it with cache_write first")
    if not (ir.is_float(buf.dtype) and ir.is_float(dtype)
            and ir.bits_of(dtype) >= ir.bits_of(buf.dtype)):
        raise ScheduleError(f"set_dtype: {buf.name} is {buf.dtype}; set_dtype widens a float "
                            f"buffer to a float type at least as wide, not to {dtype}")
    new = replace(buf, dtype=dtype, data=None)
    state.replace(state.func.with_body(_Widen(buf, new).visit_stmt(state.func.body)))


def storage_align(state: ScheduleState, block: BlockRV, buffer_index: int | str, axis: int,
                  factor: int, offset: int) -> None:
    """Pad a buffer's stride on ``axis`` so ``stride % factor == offset`` (bank conflicts).

    Recorded as the block annotation ``buffer_dim_align`` (a list of
    ``[buffer name, axis, factor, offset]``); the buffer-flattening pass applies it.
    Before: block ``A_shared`` writes ``A_shared[v0, v1]``.
    ``sch.storage_align(A_shared, 0, axis=0, factor=32, offset=1)``; after, the block has::

        T.block_attr({'buffer_dim_align': [['A_shared', 0, 32, 1]]})
    """
    r, _ = state.get_block(block)
    buf = _pick(r.block.writes, buffer_index, r.block, "writes", "storage_align")
    if not 0 <= axis < buf.ndim:
        raise ScheduleError(f"storage_align: axis {axis} is out of range for {buf.name} with "
                            f"{buf.ndim} dimensions")
    if factor <= 0 or not 0 <= offset < factor:
        raise ScheduleError(f"storage_align: need factor > 0 and 0 <= offset < factor, got "
                            f"factor={factor}, offset={offset}")
    old = list(r.block.annotations.get("buffer_dim_align", []))
    old = [x for x in old if not (x[0] == buf.name and x[1] == axis)]
    old.append([buf.name, axis, factor, offset])
    blk = replace(r.block, annotations={**r.block.annotations, "buffer_dim_align": old})
    state.update({id(r.block): blk})


def _layout_axes(shape: tuple[int, ...], factors: list[list[int | None]], name: str
                 ) -> list[list[int]]:
    """``factors`` checked against ``shape``: per dimension the extents it splits into
    (outer to inner, one ``None`` inferred), each dimension split exactly."""
    if not isinstance(factors, (list, tuple)) or len(factors) != len(shape):
        raise ScheduleError(f"transform_layout: {name} has {len(shape)} dimensions "
                            f"{list(shape)}; factors must give one list of extents each, "
                            f"got {factors!r}")
    out = []
    for d, (ext, fs) in enumerate(zip(shape, factors, strict=True)):
        fs = list(fs) if isinstance(fs, (list, tuple)) else [fs]
        known = [f for f in fs if f is not None]
        if (not fs or fs.count(None) > 1
                or any(not isinstance(f, int) or isinstance(f, bool) or f <= 0 for f in known)):
            raise ScheduleError(f"transform_layout: factors of dimension {d} of {name} must be "
                                f"positive integers with at most one None, got {fs!r}")
        prod = 1
        for f in known:
            prod *= f
        if None in fs:
            if ext % prod:
                raise ScheduleError(f"transform_layout: dimension {d} of {name} ({ext}) is not "
                                    f"a multiple of {prod} (factors {fs!r})")
            fs = [ext // prod if f is None else f for f in fs]
        elif prod != ext:
            raise ScheduleError(f"transform_layout: factors {fs!r} of dimension {d} of {name} "
                                f"multiply to {prod}, not its extent {ext}")
        out.append(fs)
    return out


class _Relayout(StmtExprMutator):
    """Accesses of ``old`` as accesses of ``new`` at ``index(old indices)``."""

    def __init__(self, old: ir.Buffer, new: ir.Buffer, axes: list[list[int]],
                 order: list[int]) -> None:
        self.old, self.new, self.axes, self.order = old, new, axes, order

    def index(self, idx: tuple[ir.PrimExpr, ...]) -> tuple[ir.PrimExpr, ...]:
        from toolchain.tir import arith

        parts: list[ir.PrimExpr] = []
        for x, fs in zip(idx, self.axes, strict=True):
            for t, f in enumerate(fs):
                stride = 1
                for g in fs[t + 1:]:
                    stride *= g
                e = x // stride if stride > 1 else x
                parts.append(arith.simplify(e % f if t else e))
        return tuple(parts[k] for k in self.order)

    def region(self, rg: tuple[ir.Range, ...]) -> tuple[ir.Range, ...]:
        from toolchain.tir import arith

        if all(ir.is_const_int(arith.simplify(r.extent), 1) for r in rg):
            return tuple(ir.Range(i, 1) for i in self.index(tuple(r.min for r in rg)))
        # a tile: its outermost part of each dimension as far as it reaches, the rest whole
        parts: list[ir.Range] = []
        for r, fs in zip(rg, self.axes, strict=True):
            stride = 1
            for g in fs[1:]:
                stride *= g
            lo = arith.simplify(r.min // stride)
            hi = arith.simplify((r.min + r.extent - 1) // stride)
            parts.append(ir.Range(lo, arith.simplify(hi - lo + 1)))
            parts += [ir.Range(0, f) for f in fs[1:]]
        return tuple(parts[k] for k in self.order)

    def visit_buffer(self, b: ir.Buffer) -> ir.Buffer:
        return self.new if b is self.old else b

    def visit_region(self, r: ir.BufferRegion) -> ir.BufferRegion:
        if r.buffer is not self.old:
            return super().visit_region(r)
        return ir.BufferRegion(self.new, self.region(tuple(self.visit_range(x)
                                                           for x in r.region)))

    def visit_BufferLoad(self, e: ir.BufferLoad) -> ir.PrimExpr:  # noqa: N802
        if e.buffer is not self.old:
            return super().visit_BufferLoad(e)
        return ir.BufferLoad(self.new, self.index(tuple(self.visit_expr(i) for i in e.indices)))

    def visit_BufferStore(self, s: ir.BufferStore) -> ir.Stmt:  # noqa: N802
        if s.buffer is not self.old:
            return super().visit_BufferStore(s)
        return ir.BufferStore(self.new, self.visit_expr(s.value),
                              self.index(tuple(self.visit_expr(i) for i in s.indices)))


def transform_layout(state: ScheduleState, block: BlockRV, buffer_index: int | str,
                     factors: list[list[int | None]], order: list[int],
                     swizzle: int = 0) -> None:
    """Lay out an intermediate buffer the block writes anew: split each dimension into
    ``factors`` (outer to inner, one ``None`` inferred; ``[None]`` keeps it whole) and
    store the split axes in ``order`` (a permutation of them). Element ``(x0, x1, ...)``
    becomes element ``order`` of ``(x0 // .., x0 % .., x1 // .., ...)``; every access and
    block region of the buffer follows. The layout of a tile is then independent of the
    loops that compute it: a tensor core that reads 8 x 8 "core matrices" each stored
    contiguously, say.

    Before (``A_shared``, a cache_read of a 64 x 32 float16 operand)::

        A_shared = T.alloc_buffer((64, 32), "float16", scope="shared")
        ...
                A_shared[v0, v1] = A[v0, v1]
        ...
                C[vi, vj] = C[vi, vj] + A_shared[vi, vk] * B[vk, vj]

    ``sch.transform_layout(sch.get_block("A_shared"), 0, factors=[[None], [None, 8]],
    order=[1, 0, 2])`` (``k`` split by 8, the 8-column slices outermost); after::

        A_shared = T.alloc_buffer((4, 64, 8), "float16", scope="shared")
        ...
                A_shared[v1 // 8, v0, v1 % 8] = A[v0, v1]
        ...
                C[vi, vj] = C[vi, vj] + A_shared[vk // 8, vi, vk % 8] * B[vk, vj]

    The buffer keeps its name, scope and dtype; its shape must be constant; a function
    argument (the caller's layout) and a buffer with a ``storage_align`` padding (an axis
    the new layout no longer has) are refused. A block region that covers more than one
    element keeps the whole extent of the inner split axes (a safe over-approximation).

    ``swizzle=128``: the new layout's last axis is one 128-byte row (64 halves) and the
    axis before it a multiple of 8 rows; the buffer is marked (``Buffer.swizzle``, printed
    ``swizzle=128``) and ``flatten_buffer`` stores 16-byte chunk ``c`` of row ``r`` at
    chunk ``c ^ (r % 8)`` (the 128-byte swizzle of wgmma's descriptors, layout type 1;
    :mod:`toolchain.schedules.gpu.wgmma_swizzle`). The indices stay logical until then,
    so every analysis before flattening sees an affine layout; the swizzle permutes
    elements within each 8-row group only, so accesses collide after it exactly when they
    did before. The buffer's ``align`` becomes 1024 bytes (one group: static ``__shared__``
    arrays honour it; the dynamic-shared offsets, 128-byte aligned, do not yet).
    Compaction shrinks such a buffer only to whole atoms (the last axis kept, a multiple
    of 8 rows).
    """
    r, _ = state.get_block(block)
    buf = _pick(r.block.writes, buffer_index, r.block, "writes", "transform_layout")
    if any(p is buf for p in state.func.params):
        raise ScheduleError(f"transform_layout: {buf.name} is an argument of the function; "
                            "its layout is the caller's. Stage it with cache_read/cache_write "
                            "first")
    shape = tuple(ir.const_int(d) for d in buf.shape)
    if None in shape:
        raise ScheduleError(f"transform_layout: {buf.name} has the symbolic shape "
                            f"{buf.shape}; the layout needs constant extents")
    axes = _layout_axes(shape, factors, buf.name)  # type: ignore[arg-type]
    flat = [f for fs in axes for f in fs]
    if not isinstance(order, (list, tuple)) or sorted(order) != list(range(len(flat))):
        raise ScheduleError(f"transform_layout: order must be a permutation of the "
                            f"{len(flat)} split axes 0 .. {len(flat) - 1}, got {order!r}")
    aligned: list[str] = []

    def grab(x: object) -> None:
        if isinstance(x, ir.Block) and any(
                a[0] == buf.name for a in x.annotations.get("buffer_dim_align", [])):
            aligned.append(x.name_hint)

    from toolchain.tir.functor import post_order_visit

    post_order_visit(state.func.body, grab)
    if aligned or buf.dim_align:
        raise ScheduleError(f"transform_layout: {buf.name} has a storage_align padding (block "
                            f"{(aligned or ['?'])[0]!r}); transform its layout first, then pad "
                            "an axis of the new layout")
    new = replace(buf, shape=tuple(ir.IntImm(flat[k]) for k in order), strides=(), data=None)
    if swizzle:
        from toolchain.tir.dtype import bits_of

        if swizzle != 128 or len(new.shape) < 2 \
                or flat[order[-1]] * bits_of(buf.dtype) != 128 * 8 or flat[order[-2]] % 8:
            raise ScheduleError(f"transform_layout: swizzle={swizzle!r} needs swizzle=128, a "
                                f"last axis of one 128-byte row and a multiple of 8 rows "
                                f"before it; the new shape of {buf.name} is "
                                f"{[flat[k] for k in order]} of {buf.dtype}")
        new = replace(new, swizzle=swizzle, align=max(buf.align, 1024))
    m = _Relayout(buf, new, axes, list(order))
    state.replace(state.func.with_body(m.visit_stmt(state.func.body)))
    _check_gpu(state)


def _check_gpu(state: ScheduleState) -> None:
    if state.target is not None:
        from toolchain.tir.schedule.gpu import check_gpu_limits

        check_gpu_limits(state.func, state.target)
