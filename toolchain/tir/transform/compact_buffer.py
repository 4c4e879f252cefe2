"""Place each allocation at its innermost legal loop and shrink it to the region used:
``compact_buffer_allocation`` (TVM's PlanAndUpdateBufferAllocationLocation +
CompactBufferAllocation, on lowered loops).

An accumulator tile made by ``cache_write(..., "local")`` + ``reverse_compute_at`` is
allocated full size at the root; this pass makes it a small per-tile array declared inside
the tile loop (so a C compiler keeps it in registers, and each parallel thread has its own).

A buffer whose address reaches a call stays whole (the callee may touch any element),
except for a call to a tensor intrinsic declared by a target
(:func:`toolchain.intrinsics.operand_tiles`): its operand counts as the tile the declaration
says it touches, first to last element. Before (``im2col`` read through the call)::

    im2col = T.allocate((125, 40), "int16")
    for y, x in T.grid(25, 5):
        for k in range(40):
            im2col[y * 5 + x, k] = ...
        for ko in range(5):
            kiln_m4_dot_q15q7_4x8(T.address_of(im2col[y * 5 + x, ko * 8]), ...)

After (one row per pixel; the row ``im2col[0, ko * 8 .. ko * 8 + 7]`` per call)::

    for y, x in T.grid(25, 5):
        im2col = T.allocate((1, 40), "int16")
        for k in range(40):
            im2col[0, k] = ...
        for ko in range(5):
            kiln_m4_dot_q15q7_4x8(T.address_of(im2col[0, ko * 8]), ...)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from toolchain.tir import arith, ir
from toolchain.tir.functor import (
    StmtExprMutator,
    StmtExprVisitor,
    StmtMutator,
    StmtVisitor,
    substitute,
)
from toolchain.tir.transform.lower_blocks import CARRIED, aligned_strides


@dataclass
class _Access:
    path: tuple[ir.Stmt, ...]
    indices: tuple[ir.PrimExpr, ...]
    write: bool = False

    def __post_init__(self) -> None:
        # a loop of extent 1 has one value: ``(b * 25 + y) * 5 + x`` under ``for b in
        # range(1)`` is the element ``y * 5 + x`` (so both forms compare as one pixel)
        unit = {s.loop_var: s.min for s in self.path
                if isinstance(s, ir.For) and ir.is_const_int(s.extent, 1)}
        if unit:
            self.indices = tuple(arith.simplify(substitute(i, unit)) for i in self.indices)


class _Accesses(StmtExprVisitor):
    def __init__(self, data: ir.Var, tiles: dict[int, tuple[ir.Call, Any]]) -> None:
        self.data = data
        self.tiles = tiles  # call id -> (call, its operand_tiles): shared by one pass run
        self.path: list[ir.Stmt] = []
        self.found: list[_Access] = []
        self.opaque = False
        #: ids of the statements around a registered intrinsic's call (its arguments are
        #: not all walked here, so :class:`_Rewrite` walks these whatever they hold)
        self.at_calls: set[int] = set()

    def visit_stmt(self, s: ir.Stmt) -> None:
        self.path.append(s)
        try:
            super().visit_stmt(s)
        finally:
            self.path.pop()

    def visit_Var(self, e: ir.Var) -> None:
        if e is self.data:  # the pointer escapes (e.g. passed to an extern)
            self.opaque = True

    def visit_BufferLoad(self, e: ir.BufferLoad) -> None:
        if e.buffer.data is self.data:
            self.found.append(_Access(tuple(self.path), e.indices))
        super().visit_BufferLoad(e)

    def visit_Call(self, e: ir.Call) -> None:
        from toolchain.intrinsics import operand_tiles

        hit = self.tiles.get(id(e))
        if hit is None or hit[0] is not e:  # each allocation's walk meets the same calls
            hit = self.tiles[id(e)] = (e, operand_tiles(e))
        tiles = hit[1]
        if tiles is not None:  # a registered intrinsic: it touches its operand tiles
            self.at_calls.update(map(id, self.path))
            for first, last, read, written in tiles:
                for i in first.indices:
                    self.visit_expr(i)
                if first.buffer.data is self.data:
                    path = tuple(self.path)
                    if read:  # read-modify-write: the reads come first
                        self.found += [_Access(path, first.indices), _Access(path, last.indices)]
                    if written:
                        self.found += [_Access(path, first.indices, True),
                                       _Access(path, last.indices, True)]
            return
        # a pointer handed to other code assumes the buffer's layout: keep it as is
        if e.op == "tir.address_of" and any(
                isinstance(a, ir.BufferLoad) and a.buffer.data is self.data for a in e.args):
            self.opaque = True
        super().visit_Call(e)

    def visit_BufferStore(self, s: ir.BufferStore) -> None:
        super().visit_BufferStore(s)  # the value's loads happen before the store
        if s.buffer.data is self.data:
            self.found.append(_Access(tuple(self.path), s.indices, True))


def _distinct(accesses: list[_Access]) -> list[_Access]:
    """``accesses`` without repeats: an access at the same statements (the same objects)
    with the same index objects as an earlier one (a read-modify-write's read and write,
    two loads of one element) gives the same bounds, so the regions and proofs below ask
    about the first only (the order of the others kept)."""
    seen: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
    out = []
    for a in accesses:
        key = (tuple(map(id, a.path)), tuple(map(id, a.indices)))
        if key not in seen:
            seen.add(key)
            out.append(a)
    return out


def _lca(accesses: list[_Access], buf: ir.Buffer) -> ir.For | None:
    """The innermost loop enclosing every access that the allocation may move into."""
    common = list(accesses[0].path)
    for a in accesses[1:]:
        n = 0
        while n < min(len(common), len(a.path)) and common[n] is a.path[n]:
            n += 1
        common = common[:n]
    best = None
    for s in common:
        if not isinstance(s, ir.For):
            continue
        if buf.name in s.annotations.get(CARRIED, ()) or s.kind in ("vectorized", "unrolled"):
            break
        if s.kind == "thread_binding" and s.thread_tag and s.thread_tag.startswith(
                "threadIdx") and buf.scope == "shared":
            break
        best = s
    return best


def _below(path: tuple[ir.Stmt, ...], loop: ir.For) -> tuple[ir.Stmt, ...]:
    return path[next(k for k, s in enumerate(path) if s is loop) + 1:]


def _enclosing_loop(path: tuple[ir.Stmt, ...], loop: ir.For) -> ir.For | None:
    outer = path[:next(k for k, s in enumerate(path) if s is loop)]
    return next((s for s in reversed(outer) if isinstance(s, ir.For)), None)


def _private_per_iteration(accesses: list[_Access], loop: ir.For) -> bool:
    """Whether each iteration of ``loop`` reads only what that same iteration wrote.

    Only then may the allocation move inside ``loop`` (a fresh, uninitialised array per
    iteration). Conservative: the first access must be a write; a write guarded by a
    condition on ``loop``'s or outer variables covers only reads under that same guard;
    every read's region (relaxed over the loops inside) must lie within the written hull.
    """
    from toolchain.tir.functor import free_vars

    if not accesses[0].write:
        return False
    writes = _distinct([a for a in accesses if a.write])
    reads = _distinct([a for a in accesses if not a.write])
    for w in writes:
        inner = {s.loop_var for s in _below(w.path, loop) if isinstance(s, ir.For)}
        for s in _below(w.path, loop):
            if isinstance(s, ir.IfThenElse) and set(free_vars(s.condition)) - inner and not all(
                    any(x is s for x in r.path) for r in reads):
                return False
    outer = _outer_ranges(accesses[0].path, loop)
    w_inner = [_inner_ranges(w.path, loop) for w in writes]
    r_inner = [_inner_ranges(r.path, loop) for r in reads]
    for d in range(len(accesses[0].indices)):
        wb = [arith.relax(w.indices[d], inner) for w, inner in zip(writes, w_inner, strict=True)]
        if any(b is None for b in wb):
            return False
        for r, inner in zip(reads, r_inner, strict=True):
            rb = arith.relax(r.indices[d], inner)
            if rb is None or not (any(arith.prove(b[0] <= rb[0], outer) for b in wb)
                                  and any(arith.prove(rb[1] <= b[1], outer) for b in wb)):
                return False
    return True


def _outer_ranges(path: tuple[ir.Stmt, ...], loop: ir.For) -> dict[ir.Var, ir.Range]:
    stop = next(k for k, s in enumerate(path) if s is loop)
    return {s.loop_var: ir.Range(s.min, s.extent) for s in path[:stop + 1]
            if isinstance(s, ir.For)}


def _inner_ranges(path: tuple[ir.Stmt, ...], lca: ir.For | None) -> dict[ir.Var, ir.Range]:
    ranges: dict[ir.Var, ir.Range] = {}
    inside = lca is None
    for s in path:
        if inside and isinstance(s, ir.For):
            ranges[s.loop_var] = ir.Range(s.min, s.extent)
        if s is lca:
            inside = True
    return ranges


def _size(region: list) -> float:
    """Elements of a region (infinite where an extent is not a constant)."""
    n = 1.0
    for _, e in region:
        if not isinstance(e, ir.IntImm):
            return float("inf")
        n *= e.value
    return n


def _block_floor(accesses: list[_Access], buf: ir.Buffer) -> ir.For | None:
    """The innermost ``blockIdx`` loop around every access of a ``shared`` or ``local``
    buffer: such a buffer never holds values from one GPU block to the next (each block
    has its own), so its allocation never has to leave that loop."""
    if buf.scope not in ("shared", "local") and not _fragment(buf):
        return None
    floor = None
    for s in accesses[0].path:
        if not all(any(x is s for x in a.path) for a in accesses[1:]):
            break
        if isinstance(s, ir.For) and (s.thread_tag or "").startswith("blockIdx"):
            floor = s
    return floor


def _fragment(buf: ir.Buffer) -> bool:
    """A tensor-core fragment (``wmma.*``, ``mma.*``, ``wgmma.*`` scopes): registers of a
    warp (warpgroup), private to it as a ``local`` buffer is to a thread (the warp's loops
    are its ``threadIdx`` loops; an ``mma.*`` tile is shared out among the warp's lanes,
    a ``wgmma.*`` one among the warpgroup's 128 threads, ``threadIdx.x``)."""
    return buf.scope.startswith(("wmma.", "mma.", "wgmma."))


def _thread_vars(accesses: list[_Access], lca: ir.For | None) -> dict[str, ir.Var]:
    """A canonical variable per ``threadIdx`` axis bound below ``lca`` on the paths of a
    ``local`` buffer's accesses: each thread keeps its own copy, so its region is the one
    of a single thread (the thread variables fixed, not relaxed)."""
    tags: dict[str, ir.Var] = {}
    for a in accesses:
        for s in _inner_loops(a.path, lca):
            tag = s.thread_tag or ""
            if tag.startswith("threadIdx") and tag not in tags:
                tags[tag] = ir.Var(tag.replace(".", "_"))
    return tags


def _inner_loops(path: tuple[ir.Stmt, ...], lca: ir.For | None) -> list[ir.For]:
    inside = lca is None
    out = []
    for s in path:
        if inside and isinstance(s, ir.For):
            out.append(s)
        if s is lca:
            inside = True
    return out


def _canonical(a: _Access, canon: dict[str, ir.Var]) -> _Access:
    """``a`` with its thread-bound loop variables replaced by the canonical ones (and
    those loops left off its path, so they are not relaxed)."""
    sub = {s.loop_var: canon[s.thread_tag] for s in a.path
           if isinstance(s, ir.For) and (s.thread_tag or "") in canon}
    if not sub:
        return a
    path = tuple(s for s in a.path if not (isinstance(s, ir.For)
                                           and (s.thread_tag or "") in canon))
    return _Access(path, tuple(substitute(i, sub) for i in a.indices), a.write)


def _offsets(bounds: list[ir.PrimExpr], lo: ir.PrimExpr) -> list[ir.PrimExpr]:
    """``simplify(x - lo)`` for each of ``bounds``: the memoised ``relax`` hands equal
    bounds back as one object, so each distinct object's offset is simplified once."""
    known: dict[int, ir.PrimExpr] = {}
    offs = []
    for x in bounds:
        o = known.get(id(x))
        if o is None:
            o = known[id(x)] = arith.simplify(x - lo)
        offs.append(o)
    return offs


def _region(accesses: list[_Access], buf: ir.Buffer, lca: ir.For | None) -> list | None:
    """Per dimension ``(lo, extent)`` of the region touched below ``lca``."""
    out = []
    accesses = _distinct(accesses)
    inner = [_inner_ranges(a.path, lca) for a in accesses]
    for d, dim in enumerate(buf.shape):
        los, his = [], []
        for a, r in zip(accesses, inner, strict=True):
            bounds = arith.relax(a.indices[d], r)
            if bounds is None:  # not expressible without the relaxed loop vars
                break
            los.append(bounds[0])
            his.append(bounds[1])
        if len(los) < len(accesses):
            out.append((ir.IntImm(0), dim))
            continue
        lo = los[0]
        offs = _offsets(los + his, lo)
        if not all(isinstance(o, ir.IntImm) for o in offs):
            out.append((ir.IntImm(0), dim))
            continue
        lo_off = min(o.value for o in offs[: len(los)])
        hi_off = max(o.value for o in offs[len(los):])
        extent = hi_off - lo_off + 1
        if isinstance(dim, ir.IntImm) and extent >= dim.value:
            out.append((ir.IntImm(0), dim))
            continue
        out.append((arith.simplify(lo + lo_off), ir.IntImm(extent)))
    return out


class _Rewrite(StmtExprMutator):
    """Index the new buffer: ``offsets`` subtracted (their canonical thread variables, if
    any, replaced by the loop variables bound to the same thread axes at each access)."""

    def __init__(self, old: ir.Buffer, new: ir.Buffer, offsets: list[ir.PrimExpr],
                 canon: dict[str, ir.Var] | None = None,
                 on_path: set[int] | None = None) -> None:
        self.old, self.new, self.offsets = old, new, offsets
        self.canon = canon or {}
        self.bound: dict[str, ir.Var] = {}
        #: ids of the statements around every access of ``old`` (:class:`_Accesses`'
        #: paths), or None: a statement not among them holds no access to rewrite, so it
        #: comes back as itself (what the walk would return) without being walked
        self.on_path = on_path

    def visit_stmt(self, s: ir.Stmt) -> ir.Stmt:
        if self.on_path is not None and id(s) not in self.on_path:
            return s
        return super().visit_stmt(s)

    def visit_For(self, s: ir.For) -> ir.Stmt:
        tag = s.thread_tag or ""
        if tag not in self.canon:
            return super().visit_For(s)
        outer = self.bound.get(tag)
        self.bound[tag] = s.loop_var
        try:
            return super().visit_For(s)
        finally:
            if outer is None:
                self.bound.pop(tag)
            else:
                self.bound[tag] = outer

    def _idx(self, idx: tuple[ir.PrimExpr, ...]) -> tuple[ir.PrimExpr, ...]:
        back = {v: self.bound[t] for t, v in self.canon.items() if t in self.bound}
        return tuple(i if ir.is_const_int(o, 0) else
                     arith.simplify(i - (substitute(o, back) if back else o))
                     for i, o in zip(idx, self.offsets, strict=True))

    def visit_BufferLoad(self, e: ir.BufferLoad) -> ir.PrimExpr:
        e2 = super().visit_BufferLoad(e)
        if isinstance(e2, ir.BufferLoad) and e2.buffer.data is self.old.data:
            return ir.BufferLoad(self.new, self._idx(e2.indices))
        return e2

    def visit_BufferStore(self, s: ir.BufferStore) -> ir.Stmt:
        s2 = super().visit_BufferStore(s)
        if isinstance(s2, ir.BufferStore) and s2.buffer.data is self.old.data:
            return ir.BufferStore(self.new, s2.value, self._idx(s2.indices))
        return s2


class _Place(StmtMutator):
    def __init__(self, loop: ir.For, buf: ir.Buffer) -> None:
        self.loop, self.buf = loop, buf

    def visit_For(self, s: ir.For) -> ir.Stmt:
        if s is self.loop:
            return replace(s, body=ir.Allocate(self.buf, s.body))
        return super().visit_For(s)


class _Compact(StmtMutator):
    def __init__(self) -> None:
        self.tiles: dict[int, tuple[ir.Call, Any]] = {}

    def visit_Allocate(self, s: ir.Allocate) -> ir.Stmt:
        body = self.visit_stmt(s.body)
        buf = s.buffer
        acc = _Accesses(buf.data, self.tiles)
        acc.visit_stmt(body)
        if acc.opaque or not acc.found or (buf.strides and not buf.dim_align):
            return s if body is s.body else ir.Allocate(buf, body)
        lca = _lca(acc.found, buf)
        floor = _block_floor(acc.found, buf)
        while (lca is not None and lca is not floor
               and not _private_per_iteration(acc.found, lca)):
            lca = _enclosing_loop(acc.found[0].path, lca)
        canon = _thread_vars(acc.found, lca) if buf.scope == "local" or _fragment(buf) else {}
        if buf.scope.startswith(("mma.", "wgmma.")):  # the lanes hold the tile between them
            canon.pop("threadIdx.x", None)
        found = [_canonical(a, canon) for a in acc.found] if canon else acc.found
        region = _region(found, buf, lca)
        if canon:
            whole = _region(acc.found, buf, lca)
            if not _size(region) < _size(whole):
                canon, region = {}, whole  # per thread no smaller: the block's region
        shape = tuple(ext for _, ext in region)
        if buf.swizzle and not _whole_atoms(shape, buf):
            shape = buf.shape  # a swizzled tile's rows stay whole 128-byte rows, 8 at least
        new = buf
        if any(a is not b for a, b in zip(shape, buf.shape, strict=True)):
            new = ir.Buffer(buf.name, shape, buf.dtype, buf.scope, (), buf.align)
            if buf.swizzle:
                new = replace(new, swizzle=buf.swizzle)
            if buf.dim_align:  # storage_align's padding, on the compacted shape
                new = replace(new, strides=aligned_strides(new, buf.dim_align),
                              dim_align=buf.dim_align)
            on_path = {id(x) for a in acc.found for x in a.path} | acc.at_calls
            body = _Rewrite(buf, new, [lo for lo, _ in region], canon,
                            on_path).visit_stmt(body)
            if lca is not None:  # the rewrite rebuilt the loop: find it again
                lca = _find_loop(body, lca.loop_var)
        if lca is None:
            return ir.Allocate(new, body)
        return _Place(lca, new).visit_stmt(body)


def _whole_atoms(shape: tuple[ir.PrimExpr, ...], buf: ir.Buffer) -> bool:
    """A compacted ``shape`` of the swizzled ``buf`` keeps its last axis (one 128-byte
    row) and a multiple of 8 rows before it."""
    rows = ir.const_int(shape[-2])
    return (ir.const_int(shape[-1]) == ir.const_int(buf.shape[-1]) and rows is not None
            and rows % 8 == 0)


def _find_loop(s: ir.Stmt, var: ir.Var) -> ir.For | None:
    finder = _FindLoop(var)
    finder.visit_stmt(s)
    return finder.found[0] if finder.found else None


class _FindLoop(StmtVisitor):
    # a module class, not one made per call (a class is a reference cycle)
    def __init__(self, var: ir.Var) -> None:
        self.var = var
        self.found: list[ir.For] = []

    def visit_For(self, f: ir.For) -> None:
        if f.loop_var is self.var:
            self.found.append(f)
        super().visit_For(f)


def compact_buffer_allocation(func: ir.PrimFunc) -> ir.PrimFunc:
    """Move allocations to the innermost loop enclosing all their accesses and shrink them.

    Never moves a buffer into a loop that carries its values (reduction loops, marked by
    :func:`~toolchain.tir.transform.lower_blocks.lower_blocks`), into vectorized/unrolled
    loops, or a ``shared`` buffer inside ``threadIdx`` loops.

    Before::

        C_local = T.allocate((64, 64), "float32", scope="local")
        for i_0, j_0 in T.grid(8, 4):
            for k, i_1, j_1 in T.grid(64, 8, 16):
                C_local[i_0 * 8 + i_1, j_0 * 16 + j_1] = ...
            for ax0, ax1 in T.grid(8, 16):
                C[i_0 * 8 + ax0, j_0 * 16 + ax1] = C_local[i_0 * 8 + ax0, j_0 * 16 + ax1]

    After::

        for i_0, j_0 in T.grid(8, 4):
            C_local = T.allocate((8, 16), "float32", scope="local")
            for k, i_1, j_1 in T.grid(64, 8, 16):
                C_local[i_1, j_1] = ...
            for ax0, ax1 in T.grid(8, 16):
                C[i_0 * 8 + ax0, j_0 * 16 + ax1] = C_local[ax0, ax1]

    On a GPU a ``local`` buffer is each thread's own: its accesses under ``threadIdx``
    loops are sized per thread (the loop variables bound to one thread axis taken as the
    same thread), and a ``shared`` or ``local`` buffer never leaves the innermost
    ``blockIdx`` loop. Before (the tiled GEMM's accumulator, 2 x 2 threads of 4 x 2)::

        for j_0 in T.thread_binding(2, thread="blockIdx.x"):
            C_local = T.allocate((8, 8), "float32", scope="local")
            ...
            for i_1 in T.thread_binding(2, thread="threadIdx.y"):
                for j_1 in T.thread_binding(2, thread="threadIdx.x"):
                    for k, i_2, j_2 in T.grid(64, 4, 2):
                        C_local[i_1 * 4 + i_2, j_1 * 2 + j_2] = ...
            for ax0_0 in T.thread_binding(2, thread="threadIdx.y"):
                for ax1_0 in T.thread_binding(2, thread="threadIdx.x"):
                    for ax0_1, ax1_1 in T.grid(4, 2):
                        C[..] = C_local[ax0_0 * 4 + ax0_1, ax1_0 * 2 + ax1_1]

    After: ``C_local = T.allocate((4, 2), "float32", scope="local")``, read and written as
    ``C_local[i_2, j_2]`` and ``C_local[ax0_1, ax1_1]``.
    """
    return _Compact().visit(func)
