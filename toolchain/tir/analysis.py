"""Analyses over TIR used by TE lowering and the schedule: access regions, block lookup.

>>> from toolchain.tir import ir
>>> A = ir.Buffer("A", (8,)); B = ir.Buffer("B", (8,)); i = ir.Var("vi")
>>> body = B.store(A[i] + A[i + 1], [i])
>>> reads, writes = access_regions(body, {i: ir.Range(0, 7)})
>>> str(reads[0]), str(writes[0])
('A[vi:vi + 2]', 'B[vi]')
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolchain.tir import arith, ir, linear
from toolchain.tir.functor import StmtExprVisitor


class _Collect(StmtExprVisitor):
    def __init__(self) -> None:
        self.loads: dict[ir.Buffer, list[tuple[ir.PrimExpr, ...]]] = {}
        self.stores: dict[ir.Buffer, list[tuple[ir.PrimExpr, ...]]] = {}
        self.loop_ranges: dict[ir.Var, ir.Range] = {}
        self.opaque: set[ir.Buffer] = set()

    def visit_BufferLoad(self, e: ir.BufferLoad) -> None:
        self.loads.setdefault(e.buffer, []).append(e.indices)
        super().visit_BufferLoad(e)

    def visit_BufferStore(self, s: ir.BufferStore) -> None:
        self.stores.setdefault(s.buffer, []).append(s.indices)
        super().visit_BufferStore(s)

    def visit_For(self, s: ir.For) -> None:
        self.loop_ranges[s.loop_var] = ir.Range(s.min, s.extent)
        super().visit_For(s)

    def visit_Block(self, s: ir.Block) -> None:
        # a nested block's regions are already summarised in its reads/writes
        for r in s.reads:
            self.loads.setdefault(r.buffer, []).extend(_region_corners(r))
        for r in s.writes:
            self.stores.setdefault(r.buffer, []).extend(_region_corners(r))
        self.opaque.update(s.alloc_buffers)

    def visit_BlockRealize(self, s: ir.BlockRealize) -> None:
        vmap = dict(zip((iv.var for iv in s.block.iter_vars), s.iter_values, strict=False))
        from toolchain.tir.functor import substitute

        inner = _Collect()
        inner.visit_Block(s.block)
        for src, dst in ((inner.loads, self.loads), (inner.stores, self.stores)):
            for buf, idx_list in src.items():
                if buf in inner.opaque:
                    continue
                dst.setdefault(buf, []).extend(
                    tuple(substitute(i, vmap) for i in idx) for idx in idx_list)
        for iv in s.block.iter_vars:
            self.loop_ranges[iv.var] = iv.dom


def _region_corners(r: ir.BufferRegion) -> list[tuple[ir.PrimExpr, ...]]:
    lo = tuple(x.min for x in r.region)
    hi = tuple(arith.simplify(x.min + x.extent - 1) for x in r.region)
    return [lo, hi]


def union_region(buf: ir.Buffer, idx_list: list[tuple[ir.PrimExpr, ...]],
                 ranges: Mapping[ir.Var, ir.Range]) -> ir.BufferRegion:
    """Smallest rectangular region covering every index tuple (over ``ranges``).

    >>> i, j = ir.Var("i"), ir.Var("j")
    >>> A = ir.Buffer("A", (8, 8))
    >>> str(union_region(A, [(i + 1, j), (i - 1, j * 2)], {i: ir.Range(1, 6)}))
    'A[i - 1:i + 2, T.min(j, j * 2):T.max(j, j * 2) + 1]'
    """
    unique: dict[Any, tuple[ir.PrimExpr, ...]] = {}
    for idx in idx_list:  # the same access written twice is analysed once
        unique.setdefault(tuple(linear.term_key(i) for i in idx), idx)
    idx_list = list(unique.values())
    region = []
    for d in range(buf.ndim):
        column = _unique([i[d] for i in idx_list])
        if len(column) == 1 and type(column[0]) is ir.Var:
            # one lone Var (a fresh block's ``A[vi, vj]``): the element it names, as the
            # steps below give it (``simplify(v + 0)`` is ``v``), without them
            region.append(ir.Range(column[0], 1))
            continue
        if len(column) == 1 and arith.kept_as_is(column[0]):
            # ``(vi * 6 + vj) // 15``, ``vc % 4``: simplified, ``e - e`` is 0 and ``e + 0``
            # is ``e`` again (the simplifier keeps such a division, ``arith.kept_as_is``)
            region.append(ir.Range(column[0], 1))
            continue
        sums = arith.simplified_sums(column)
        if sums is not None:
            # sums of Vars times constants (``vh + vkh``, ``vi * 2 - 1``, ``0 + vi``): what
            # simplifying them, their differences and ``first + lo`` gives, read off their
            # linear forms
            exprs = [e for e, _ in sums]
            rg = _offset_range(exprs[0], [lin for _, lin in sums])
            if rg is not None:
                region.append(rg)
                continue
        else:
            exprs = _unique([arith.simplify(e, None) for e in column])
            first = exprs[0]
            offs: list[int] | None = []
            for e in exprs:
                diff = arith.simplify(e - first)
                if not isinstance(diff, ir.IntImm):
                    offs = None  # not a constant offset: the bounds below, not the offsets
                    break
                offs.append(diff.value)
            if offs is not None:
                lo, hi = min(offs), max(offs)
                region.append(ir.Range(arith.simplify(first + lo), hi - lo + 1))
                continue
        los, his = [], []
        for e in exprs:
            lo_e, hi_e = arith.bound_exprs(e, ranges)
            los.append(lo_e)
            his.append(hi_e)
        lo_x = _fold(_unique(los), ir.Min)
        hi_x = _fold(_unique(his), ir.Max)
        region.append(ir.Range(lo_x, arith.simplify(hi_x - lo_x + 1)))
    return ir.BufferRegion(buf, tuple(region))


def _offset_range(first: ir.PrimExpr, lins: list[linear.Lin]) -> ir.Range | None:
    """The range covering the expressions of ``lins`` (the first: ``first``, simplified)
    where they differ by constants only (the offsets :func:`union_region` finds by
    simplifying ``e - first``), else None."""
    lin0 = lins[0]
    coeffs = {k: t[1] for k, t in lin0.terms.items()}
    offs = []
    for lin in lins:
        if len(lin.terms) != len(coeffs) or any(
                coeffs.get(k) != t[1] for k, t in lin.terms.items()):
            return None
        offs.append(lin.const - lin0.const)
    lo, hi = min(offs), max(offs)
    if lo == 0:
        start = first  # ``simplify(first + 0)``: ``first``, canonical already
    else:
        shifted = lin0.copy()
        shifted.const += lo
        start = shifted.to_expr()  # ``simplify(first + lo)``
    return ir.Range(start, hi - lo + 1)


def _unique(xs: list[ir.PrimExpr]) -> list[ir.PrimExpr]:
    """``xs`` without structural duplicates, in first-seen order (a block that loads one
    element many times, e.g. through a gathered index, is analysed once per index)."""
    seen: dict[Any, ir.PrimExpr] = {}
    for x in xs:
        seen.setdefault(linear.term_key(x), x)
    return list(seen.values())


def _fold(xs: list[ir.PrimExpr], op: type) -> ir.PrimExpr:
    out = xs[0]
    for x in xs[1:]:
        out = op(out, x)
    # one bottom-up pass gives what simplifying after every step gives, without
    # re-walking the growing chain n times
    return arith.simplify(out) if len(xs) > 1 else out


def access_regions(body: ir.Stmt, ranges: Mapping[ir.Var, ir.Range],
                   exclude_reads: Any = (), reads_of_writes: bool = True,
                   ) -> tuple[list[ir.BufferRegion], list[ir.BufferRegion]]:
    """The read and write regions of ``body`` in terms of the Vars in ``ranges``.

    Vars of loops inside ``body`` are relaxed over their ranges; accesses to buffers
    allocated by nested blocks are skipped; buffers in ``exclude_reads`` are not reads,
    nor (``reads_of_writes=False``: a reduction's update) the buffers ``body`` writes.
    """
    c = _Collect()
    c.visit_stmt(body)
    allr = dict(ranges)
    allr.update(c.loop_ranges)
    inner_vars = set(c.loop_ranges)

    def region(buf: ir.Buffer, idx_list: list[tuple[ir.PrimExpr, ...]]) -> ir.BufferRegion:
        from toolchain.tir.functor import free_vars

        if inner_vars and any(v in inner_vars for idx in idx_list for i in idx
                              for v in free_vars(i)):
            relaxed = []
            inner_r = {v: allr[v] for v in inner_vars}
            for idx in idx_list:
                lo, hi = [], []
                for dim, i in zip(buf.shape, idx, strict=True):
                    b = arith.relax(i, inner_r)
                    if b is None:  # not expressible: the whole dimension
                        b = (ir.convert(0), arith.simplify(dim - 1))
                    lo.append(b[0])
                    hi.append(b[1])
                relaxed.extend([tuple(lo), tuple(hi)])
            idx_list = relaxed
        return union_region(buf, idx_list, allr)

    reads = [clip_region(region(b, v), allr) for b, v in c.loads.items()
             if b not in c.opaque and b not in exclude_reads
             and (reads_of_writes or b not in c.stores)]
    writes = [clip_region(region(b, v), allr) for b, v in c.stores.items()
              if b not in c.opaque]
    return reads, writes


def clip_region(r: ir.BufferRegion, ranges: Mapping[ir.Var, ir.Range]) -> ir.BufferRegion:
    """Intersect a region with the buffer's shape (guarded padding reads may go outside).

    >>> i = ir.Var("i")
    >>> A = ir.Buffer("A", (8,))
    >>> str(clip_region(ir.BufferRegion(A, (ir.Range(i - 1, 3),)), {i: ir.Range(0, 8)}))
    'A[T.max(i - 1, 0):T.min(i + 2, 8)]'
    """
    out = []
    for rg, dim in zip(r.region, r.buffer.shape, strict=True):
        known = _linear_inside(rg, dim, ranges)
        if known:
            out.append(rg)
            continue
        end = rg.min + rg.extent
        if known is None and arith.prove(rg.min >= 0, ranges) and arith.prove(end <= dim,
                                                                               ranges):
            out.append(rg)
            continue
        lo = arith.simplify(ir.Max(rg.min, 0), ranges)
        hi = arith.simplify(ir.Min(end, dim), ranges)
        out.append(ir.Range(lo, arith.simplify(hi - lo, ranges)))
    return ir.BufferRegion(r.buffer, tuple(out))


def _linear_inside(rg: ir.Range, dim: ir.PrimExpr,
                   ranges: Mapping[ir.Var, ir.Range]) -> bool | None:
    """What ``prove(rg.min >= 0) and prove(rg.min + rg.extent <= dim)`` answers, where
    ``rg.min`` is a sum of Vars with constant ranges times constants (``vh + vkh - 1``)
    and the extent and ``dim`` are constants: the bounds of such a sum are exactly the
    bounds ``prove`` finds (each Var's range, scaled), so they decide it here without
    building and simplifying the two conditions. None: not such a region (ask ``prove``).

    >>> i, j = ir.Var("i"), ir.Var("j")
    >>> rs = {i: ir.Range(0, 4), j: ir.Range(0, 3)}
    >>> [_linear_inside(ir.Range(i * 2 + j - k, 1), ir.IntImm(9), rs) for k in (0, 1)]
    [True, False]
    >>> _linear_inside(ir.Range(i // 2, 1), ir.IntImm(9), rs) is None
    True
    """
    m, x = rg.min, rg.extent
    signed = linear.SIGNED_DTYPES
    if type(x) is not ir.IntImm or type(dim) is not ir.IntImm or m.dtype not in signed \
            or x.dtype not in signed or dim.dtype not in signed:
        return None
    lin = linear.small_lin(m, m.dtype)
    if lin is None:
        return None
    lo = hi = lin.const
    size = abs(lin.const) + abs(x.value) + abs(dim.value)
    for a, c in lin.terms.values():
        b = ranges.get(a)
        if b is None or type(b.min) is not ir.IntImm or type(b.extent) is not ir.IntImm \
                or b.extent.value < 1:
            return None
        v_lo = b.min.value
        v_hi = v_lo + b.extent.value - 1
        size += abs(c) * (abs(v_lo) + abs(v_hi)) + abs(b.extent.value)
        if c > 0:
            lo += c * v_lo
            hi += c * v_hi
        else:
            lo += c * v_hi
            hi += c * v_lo
    if size >= linear.SMALL_CONST:
        return None  # constants near the int32 limit: the simplifier wraps them
    return 0 <= lo and hi + x.value <= dim.value


class _WellFormed(StmtExprVisitor):
    def __init__(self, defined: set[ir.Var]) -> None:
        self.scope = [set(defined)]
        self.errors: list[str] = []
        self.where = "function body"

    def _defined(self, v: ir.Var) -> bool:
        return any(v in s for s in self.scope)

    def visit_Var(self, e: ir.Var) -> None:
        if not self._defined(e) and e.dtype != "handle":
            self.errors.append(f"variable {e.name} is used outside its scope (in {self.where})")

    def _with(self, vars_: list[ir.Var], fn: Any) -> None:
        self.scope.append(set(vars_))
        try:
            fn()
        finally:
            self.scope.pop()

    def visit_For(self, s: ir.For) -> None:
        self.visit_expr(s.min)
        self.visit_expr(s.extent)
        self._with([s.loop_var], lambda: self.visit_stmt(s.body))

    def visit_LetStmt(self, s: ir.LetStmt) -> None:
        self.visit_expr(s.value)
        self._with([s.var], lambda: self.visit_stmt(s.body))

    def visit_Let(self, e: ir.Let) -> None:
        self.visit_expr(e.value)
        self._with([e.var], lambda: self.visit_expr(e.body))

    def visit_BlockRealize(self, s: ir.BlockRealize) -> None:
        self.where = f"the bindings of block {s.block.name_hint!r}"
        for v in s.iter_values:
            self.visit_expr(v)
        self.visit_expr(s.predicate)
        self.where = f"block {s.block.name_hint!r}"
        self._with([iv.var for iv in s.block.iter_vars], lambda: self.visit_Block(s.block))

    def visit_Block(self, s: ir.Block) -> None:
        shape_vars = [v for b in s.alloc_buffers for x in b.shape for v in free_vars_of(x)]
        self.scope[-1].update(v for v in shape_vars if self._defined(v))
        super().visit_Block(s)


def free_vars_of(e: Any) -> list[ir.Var]:
    from toolchain.tir.functor import free_vars

    return free_vars(e)


def verify_well_formed(func: ir.PrimFunc) -> list[str]:
    """Problems with variable scoping in ``func`` (empty when it is well formed).

    Every Var must be a param, a symbolic size of a param buffer, or bound by an
    enclosing loop, block, or let.

    >>> from toolchain.tir import ir
    >>> A = ir.Buffer("A", (4,)); i = ir.Var("i")
    >>> verify_well_formed(ir.PrimFunc((A,), A.store(1.0, [i])))
    ['variable i is used outside its scope (in function body)']
    """
    defined: set[ir.Var] = set()
    for p in func.params:
        if isinstance(p, ir.Var):
            defined.add(p)
        else:
            for s in p.shape:
                defined.update(free_vars_of(s))
    w = _WellFormed(defined)
    w.visit_stmt(func.body)
    return sorted(set(w.errors))


class _Written(StmtExprVisitor):
    # a known tensor intrinsic's operands are read or written as declared; any other
    # pointer that escapes (address_of passed elsewhere, a bare handle) may be written
    def __init__(self) -> None:
        self.written: set[ir.Var] = set()

    def visit_BufferStore(self, s: ir.BufferStore) -> None:
        self.written.add(s.buffer.data)
        super().visit_BufferStore(s)

    def visit_Var(self, e: ir.Var) -> None:
        if e.dtype == "handle":
            self.written.add(e)

    def visit_Call(self, e: ir.Call) -> None:
        if e.op == "tir.address_of":
            load = e.args[0]
            if isinstance(load, ir.BufferLoad):
                self.written.add(load.buffer.data)
            super().visit_Call(e)
            return
        written = _operands_written(e)
        if written is None:
            super().visit_Call(e)
            return
        for arg, w in zip(e.args, written, strict=False):
            if w is not None and isinstance(arg, ir.Call) and arg.args:
                load = arg.args[0]
                assert isinstance(load, ir.BufferLoad)
                if w:
                    self.written.add(load.buffer.data)
                for i in load.indices:
                    self.visit_expr(i)
            else:
                self.visit_expr(arg)


def _operands_written(call: ir.Call) -> list[bool | None] | None:
    """Per argument of a tensor intrinsic call: whether it writes the operand (None: not
    an ``address_of`` operand); None for any other call."""
    from toolchain.intrinsics import operand_elements, operand_tiles

    if call.op.startswith("tir."):
        return None
    elements = operand_elements(call)
    if elements is not None:
        return [w for *_, w in elements]
    tiles = operand_tiles(call)
    if tiles is not None:
        return [w for *_, w in tiles] + [None] * (len(call.args) - len(tiles))
    return None


def written_buffers(body: ir.Stmt) -> set[ir.Var]:
    """The pointer Vars (buffer ``data``) that ``body`` may write through: every buffer it
    stores to, the output operand of each tensor intrinsic call, and any pointer that
    escapes otherwise (``address_of`` passed to another call, a bare handle): those may be
    written too. A buffer parameter outside this set is only read (``const`` in C).

    >>> from toolchain.tir import ir
    >>> A = ir.Buffer("A", (8,)); B = ir.Buffer("B", (8,)); i = ir.Var("i")
    >>> sorted(v.name for v in written_buffers(B.store(A[i] * 2.0, [i])))
    ['B']
    >>> call = ir.Call("int32", "opaque", [ir.Call("handle", "tir.address_of", [A[0]])])
    >>> sorted(v.name for v in written_buffers(ir.Evaluate(call)))
    ['A']
    """
    w = _Written()
    w.visit_stmt(body)
    return w.written
