"""Double buffering of shared tiles: the next step's fetch overlaps this step's products.

The schedule primitive :func:`~toolchain.tir.schedule.double_buffer.double_buffer` marks a
shared buffer (the function attribute ``double_buffer``: buffer names); this lowering pass
(phase 3, before ``storage_rewrite`` and ``inject_barriers``) rewrites the serial loop
whose body allocates it. The loop body must start with the statements that fill the
marked buffers (the *fetch*: they write them and read none of them) followed by the ones
that use them (the *compute*). The buffers get two halves, the first fetch moves before
the loop, and each step fetches the next tile into one half while it computes on the
other::

    for k_0 in range(8):
        A_shared = T.allocate((256,), "float32", scope="shared")
        A_shared[t] = A[k_0 * 256 + t]                         # fetch
        C_local[0] = C_local[0] + A_shared[i] * ...            # compute

after::

    A_shared = T.allocate((512,), "float32", scope="shared")
    A_shared[t] = A[t]                                         # fetch of step 0
    for k_0 in range(8):
        if k_0 + 1 < 8:
            A_shared[(k_0 + 1) % 2 * 256 + t] = A[(k_0 + 1) * 256 + t]  # the next step's
        C_local[0] = C_local[0] + A_shared[k_0 % 2 * 256 + i] * ...

``inject_barriers`` then finds one barrier per step enough: after the fetch of step 0 and
at the end of each step (the next step's compute reads what this step fetched; the
fetch after it overwrites what this step read), none between a step's fetch and its
compute (different halves) -- one ``__syncthreads()`` a step instead of two, and the
global loads of the next tile in flight while the tensor or FMA units work.

A buffer marked with ``stages`` n > 2 (the function attribute ``buffer_stages``:
``double_buffer(.., stages=n)``) gets n copies: steps ``0 .. n - 2`` fetched before the
loop, step ``k`` fetching step ``k + n - 1`` into copy ``(k + n - 1) % n`` and computing on
copy ``k % n``; the loop is annotated ``pipeline_stages`` (n), which the CUDA renderer
reads to let the latest ``n - 2`` groups of asynchronous copies stay in flight at the
loop's barriers (:mod:`toolchain.codegen.cuda`). A buffer whose readers stay in flight
``g`` steps after their own (``buffer_in_flight``: ``double_buffer(.., in_flight=g)``,
asynchronous products) is fetched only ``a = n - 1 - g`` steps ahead (into copy
``(k + a) % n``, the one the products of step ``k - 1 - g`` read, retired by then), the
loop annotated as an ``a + 1``-stage pipeline where ``a`` > 1.

>>> from toolchain.tir import ir
>>> A = ir.Buffer("A", (16,)); S = ir.Buffer("S", (4,), scope="shared")
>>> C = ir.Buffer("C", (4,)); k = ir.Var("k"); t = ir.Var("t")
>>> body = ir.Allocate(S, ir.seq(
...     ir.For(t, 0, 4, "serial", ir.BufferStore(S, ir.BufferLoad(A, (k * 4 + t,)), (t,))),
...     ir.For(t, 0, 4, "serial", ir.BufferStore(C, ir.BufferLoad(C, (t,))
...                                 + ir.BufferLoad(S, (t,)), (t,)))))
>>> f = ir.PrimFunc((A, C), ir.For(k, 0, 4, "serial", body), "f", {"double_buffer": ("S",)})
>>> out = inject_double_buffer(f)
>>> print(out.body)  # doctest: +NORMALIZE_WHITESPACE
S = T.allocate((8,), "float32", scope="shared")
for t in range(4):
    S[t] = A[t]
for k in range(4):
    if k + 1 < 4:
        for t in range(4):
            S[(k + 1) % 2 * 4 + t] = A[k * 4 + t + 4]
    for t in range(4):
        C[t] = C[t] + S[k % 2 * 4 + t]
>>> three = ir.PrimFunc((A, C), ir.For(k, 0, 4, "serial", body), "f",
...                     {"double_buffer": ("S",), "buffer_stages": (("S", 3),)})
>>> print(inject_double_buffer(three).body)  # doctest: +NORMALIZE_WHITESPACE
S = T.allocate((12,), "float32", scope="shared")
for t in range(4):
    S[t] = A[t]
for t in range(4):
    S[t + 4] = A[t + 4]
for k in T.serial(4, annotations={'pipeline_stages': 3}):
    if k + 2 < 4:
        for t in range(4):
            S[(k + 2) % 3 * 4 + t] = A[k * 4 + t + 8]
    for t in range(4):
        C[t] = C[t] + S[k % 3 * 4 + t]
"""

from __future__ import annotations

from dataclasses import replace

from toolchain.tir import arith, ir
from toolchain.tir.functor import StmtExprMutator, StmtExprVisitor, StmtMutator, substitute

#: the function attribute that lists the double-buffered shared buffers (by name)
DOUBLE_BUFFER = "double_buffer"
#: the function attribute giving buffers more than two stages: ``((name, stages), ...)``
BUFFER_STAGES = "buffer_stages"
#: the annotation of a step loop pipelined over more than two stages (value: the stages)
PIPELINE_STAGES = "pipeline_stages"
#: the function attribute giving buffers whose readers stay in flight for steps after
#: their own (asynchronous products): ``((name, steps), ...)``
BUFFER_IN_FLIGHT = "buffer_in_flight"


class _Touches(StmtExprVisitor):
    def __init__(self, datas: set[ir.Var]) -> None:
        self.datas = datas
        self.reads: set[ir.Var] = set()
        self.writes: set[ir.Var] = set()

    def visit_BufferLoad(self, e: ir.BufferLoad) -> None:  # noqa: N802 - visitor hooks
        if e.buffer.data in self.datas:
            self.reads.add(e.buffer.data)
        super().visit_BufferLoad(e)

    def visit_BufferStore(self, s: ir.BufferStore) -> None:  # noqa: N802
        if s.buffer.data in self.datas:
            self.writes.add(s.buffer.data)
        super().visit_BufferStore(s)


def _touches(s: ir.Stmt, datas: set[ir.Var]) -> _Touches:
    t = _Touches(datas)
    t.visit_stmt(s)
    return t


class _Half(StmtExprMutator):
    """Accesses of the marked buffers moved to one half of their doubled buffers."""

    def __init__(self, halves: dict[ir.Var, tuple[ir.Buffer, int]], which: ir.PrimExpr) -> None:
        self.halves, self.which = halves, which

    def _index(self, buf: ir.Buffer, idx: tuple[ir.PrimExpr, ...]
               ) -> tuple[ir.Buffer, tuple[ir.PrimExpr, ...]]:
        new, n = self.halves[buf.data]
        i = idx[0]
        if isinstance(i, ir.Ramp):  # a vector access stays one Ramp (contiguous lanes)
            return new, (ir.Ramp(self.which * n + i.base, i.stride, i.lanes),)
        return new, (self.which * n + i,)

    def visit_BufferLoad(self, e: ir.BufferLoad) -> ir.PrimExpr:  # noqa: N802
        load = super().visit_BufferLoad(e)
        if e.buffer.data not in self.halves:
            return load
        buf, idx = self._index(e.buffer, load.indices)
        return ir.BufferLoad(buf, idx)

    def visit_BufferStore(self, s: ir.BufferStore) -> ir.Stmt:  # noqa: N802
        store = super().visit_BufferStore(s)
        if s.buffer.data not in self.halves:
            return store
        buf, idx = self._index(s.buffer, store.indices)
        return ir.BufferStore(buf, store.value, idx)


class _Inject(StmtMutator):
    def __init__(self, names: set[str], stages: dict[str, int],
                 flying: dict[str, int] | None = None) -> None:
        self.names = names
        self.stages = stages
        self.flying = flying or {}

    def visit_For(self, s: ir.For) -> ir.Stmt:  # noqa: N802
        s2 = super().visit_For(s)
        if not isinstance(s2, ir.For) or s2.kind not in ("serial", "unrolled"):
            return s2
        return self._double(s2) or s2

    def _double(self, s: ir.For) -> ir.Stmt | None:
        allocs, body = [], s.body
        while isinstance(body, ir.Allocate):
            allocs.append(body.buffer)
            body = body.body
        marked = [b for b in allocs if b.name in self.names and b.scope.startswith("shared")
                  and len(b.shape) == 1 and ir.const_int(b.shape[0]) is not None]
        ext = ir.const_int(s.extent)
        if not marked or ext is None or ext < 2:
            return None
        datas = {b.data for b in marked}
        stmts = list(body.seq) if isinstance(body, ir.SeqStmt) else [body]
        n_fetch = 0
        for x in stmts:
            t = _touches(x, datas)
            if not t.writes or t.reads:
                break
            n_fetch += 1
        if n_fetch == 0 or any(_touches(x, datas).writes for x in stmts[n_fetch:]):
            return None  # not "fetch, then compute": left single-buffered
        n = max(self.stages.get(b.name, 2) for b in marked)  # copies of each tile
        halves = {b.data: (ir.Buffer(b.name, (ir.const_int(b.shape[0]) * n,), b.dtype,
                                     b.scope, align=b.align), ir.const_int(b.shape[0]))
                  for b in marked}
        fetch, compute = ir.seq(*stmts[:n_fetch]), ir.seq(*stmts[n_fetch:])
        k, lo = s.loop_var, s.min
        step = arith.simplify(k - lo)
        # steps a fetch runs ahead of the products: n - 1, less the steps a copy's readers
        # stay in flight after their own (the copy a fetch overwrites is theirs)
        ahead = n - 1 - max(self.flying.get(b.name, 0) for b in marked)
        first = ir.seq(*(_Half(halves, ir.IntImm(j)).visit_stmt(substitute(fetch, {k: lo + j}))
                         for j in range(min(ahead, ext))))
        nxt = _Half(halves, (step + ahead) % n).visit_stmt(substitute(fetch, {k: k + ahead}))
        inner: ir.Stmt = ir.seq(ir.IfThenElse(k + ahead < lo + s.extent, nxt),
                                _Half(halves, step % n).visit_stmt(compute))
        for b in reversed(allocs):
            if b.data not in datas:
                inner = ir.Allocate(b, inner)
        loop = replace(s, body=inner)
        if ahead > 1:  # (the renderer's cp.async groups in flight: ahead - 1)
            loop = replace(loop, annotations={**loop.annotations, PIPELINE_STAGES: ahead + 1})
        out: ir.Stmt = ir.seq(first, loop)
        for new, _ in reversed(list(halves.values())):
            out = ir.Allocate(new, out)
        return out


def inject_double_buffer(func: ir.PrimFunc) -> ir.PrimFunc:
    """Lowering pass (see the module docstring): the loops that allocate the buffers the
    function's ``double_buffer`` attribute names, double-buffered; a function without the
    attribute is returned as it is (and so is a loop whose body is not "fetch, then
    compute"). The attribute is dropped, so running the pass again changes nothing."""
    names = func.attrs.get(DOUBLE_BUFFER)
    if not names:
        return func
    from toolchain.tir.transform.simplify import simplify

    body = _Inject(set(names), dict(func.attrs.get(BUFFER_STAGES, ())),
                   dict(func.attrs.get(BUFFER_IN_FLIGHT, ()))).visit_stmt(func.body)
    attrs = {k: v for k, v in func.attrs.items()
             if k not in (DOUBLE_BUFFER, BUFFER_STAGES, BUFFER_IN_FLIGHT)}
    out = ir.PrimFunc(func.params, body, func.name, attrs)
    return out if body is func.body else simplify(out)


__all__ = ["BUFFER_IN_FLIGHT", "BUFFER_STAGES", "DOUBLE_BUFFER", "PIPELINE_STAGES",
           "inject_double_buffer"]
