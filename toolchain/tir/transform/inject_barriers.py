"""Place block barriers from the shared-memory read/write sets: ``inject_barriers``.

The threads of a CUDA block see each other's ``shared`` writes only across a barrier
(``__syncthreads()``). This pass puts an explicit barrier statement,
``T.storage_sync('shared')`` (:func:`barrier`), between two statements of a kernel when
the later one touches shared memory that *another thread* of the block touched in the
earlier one and one of the two accesses is a write: read after write, write after read,
write after write. A loop whose next iteration would conflict with the end of the current
one (the tiled GEMM's k loop: the next tile is loaded over the one just read) gets a
barrier at the end of its body. Renderers emit the statement as their dialect's barrier;
the SIMT emulation splits the kernel there (:mod:`toolchain.tir.transform.simt`).

*Which accesses conflict.* Every shared access is summarised by its flattened index with
each ``threadIdx`` loop variable replaced by its thread axis, and the loops between the
access and the two statements being compared. Two accesses conflict when some element is
touched by two different threads: found by enumerating the index over the block's threads
and those loops (they are small and static in a kernel); an index that cannot be
enumerated (a loop of unknown extent, a data-dependent index, a pointer passed to a call)
conflicts with every access of the buffer that is not read-read. So a thread reading back
its own element needs no barrier, and cooperative loads of disjoint elements none between
them. Kernels are the top-level statements (as the CUDA backend splits them); nothing
crosses from one kernel to the next (a launch boundary). A function without a ``shared``
allocation is returned unchanged (the very same object).

A barrier must be reached by every thread of the block: one needed under a condition (or
inside a loop whose bounds) depend on the thread is an error naming the statement.

Before (``cache_read(.., "shared")`` of both operands at the k loop, lowered)::

    for i_0 in T.thread_binding(4, thread="blockIdx.y"):
        for j_0 in T.thread_binding(4, thread="blockIdx.x"):
            for k_0 in range(4):
                A_shared = T.allocate((256,), "float32", scope="shared")
                B_shared = T.allocate((256,), "float32", scope="shared")
                for ax0 in T.thread_binding(16, thread="threadIdx.y"):
                    for ax1 in T.thread_binding(16, thread="threadIdx.x"):
                        B_shared[ax0 * 16 + ax1] = B[k_0 * 1024 + ax0 * 64 + j_0 * 16 + ax1]
                for ax0_1 in T.thread_binding(16, thread="threadIdx.y"):
                    for ax1_1 in T.thread_binding(16, thread="threadIdx.x"):
                        A_shared[ax0_1 * 16 + ax1_1] = A[i_0 * 1024 + ax0_1 * 64 + ..]
                for i_1 in T.thread_binding(16, thread="threadIdx.y"):
                    for j_1 in T.thread_binding(16, thread="threadIdx.x"):
                        for k_1 in range(16):
                            C[..] = C[..] + A_shared[i_1 * 16 + k_1] * B_shared[k_1 * 16 + j_1]

After: the two loads write different buffers (no barrier between them); the product reads
what other threads loaded (a barrier before it); the next iteration's loads overwrite what
other threads are reading (a barrier at the end of the body)::

            for k_0 in range(4):
                A_shared = T.allocate((256,), "float32", scope="shared")
                B_shared = T.allocate((256,), "float32", scope="shared")
                for ax0 in T.thread_binding(16, thread="threadIdx.y"):
                    ...B_shared[ax0 * 16 + ax1] = ..
                for ax0_1 in T.thread_binding(16, thread="threadIdx.y"):
                    ...A_shared[ax0_1 * 16 + ax1_1] = ..
                T.storage_sync('shared')
                for i_1 in T.thread_binding(16, thread="threadIdx.y"):
                    ...C[..] = C[..] + A_shared[i_1 * 16 + k_1] * B_shared[k_1 * 16 + j_1]
                T.storage_sync('shared')

>>> from toolchain.tir import ir
>>> S = ir.Buffer("S", (64,), "float32", scope="shared")
>>> A = ir.Buffer("A", (64,), "float32"); B = ir.Buffer("B", (64,), "float32")
>>> t0, t1 = ir.Var("t0"), ir.Var("t1")
>>> body = ir.Allocate(S, ir.seq(
...     ir.For(t0, 0, 64, "thread_binding", S.store(A[t0], [t0]), "threadIdx.x"),
...     ir.For(t1, 0, 64, "thread_binding", B.store(S[63 - t1], [t1]), "threadIdx.x")))
>>> print(inject_barriers(ir.PrimFunc((A, B), body, "reverse")))
@T.prim_func
def reverse(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    S = T.allocate((64,), "float32", scope="shared")
    for t0 in T.thread_binding(64, thread="threadIdx.x"):
        S[t0] = A[t0]
    T.storage_sync('shared')
    for t1 in T.thread_binding(64, thread="threadIdx.x"):
        B[t1] = S[63 - t1]
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace

import numpy as np

from toolchain.errors import UnsupportedError
from toolchain.tir import arith, ir
from toolchain.tir.functor import (
    ExprVisitor,
    StmtExprVisitor,
    StmtVisitor,
    free_vars,
    post_order_visit,
    substitute,
)
from toolchain.tir.period import mod_period

#: the builtin of a barrier statement (its argument: the memory scope it orders)
SYNC_OP = "tir.storage_sync"

#: most (thread, loop) points enumerated per access; beyond, the access conflicts
MAX_POINTS = 1 << 20


def barrier() -> ir.Evaluate:
    """The barrier statement ``T.storage_sync('shared')`` (``__syncthreads()`` in CUDA)."""
    return ir.Evaluate(ir.Call("int32", SYNC_OP, [ir.StringImm("shared")]))


def is_barrier(s: ir.Stmt) -> bool:
    """True for a barrier statement (:func:`barrier`)."""
    return isinstance(s, ir.Evaluate) and isinstance(s.value, ir.Call) and \
        s.value.op == SYNC_OP


def is_shared(buf: ir.Buffer) -> bool:
    """True for a buffer in a block's shared memory (``shared``, ``shared.dyn``)."""
    return buf.scope.startswith("shared")


class _SharedFound(Exception):
    """Raised by :class:`_FindShared` at the first shared buffer it meets."""


class _FindShared(StmtExprVisitor):
    """Walks what :func:`post_order_visit` walks, checking only the nodes that name a
    buffer (allocations, stores, loads), and stops at the first shared one: no callback
    per node, the expressions dispatched as the plain visitor dispatches them."""

    def visit_Allocate(self, s: ir.Allocate) -> None:
        if is_shared(s.buffer):
            raise _SharedFound
        self.visit_stmt(s.body)

    def visit_BufferStore(self, s: ir.BufferStore) -> None:
        if is_shared(s.buffer):
            raise _SharedFound
        super().visit_BufferStore(s)

    def visit_BufferLoad(self, e: ir.BufferLoad) -> None:
        if is_shared(e.buffer):
            raise _SharedFound
        super().visit_BufferLoad(e)


def has_shared(node: ir.Node) -> bool:
    """True if ``node`` allocates or touches a shared buffer.

    >>> S = ir.Buffer("S", (4,), "float32", scope="shared")
    >>> A = ir.Buffer("A", (4,), "float32")
    >>> i = ir.Var("i")
    >>> has_shared(ir.For(i, 0, 4, "serial", A.store(A[i] + 1.0, [i])))
    False
    >>> has_shared(ir.For(i, 0, 4, "serial", A.store(S[i] + 1.0, [i])))
    True
    """
    try:
        _FindShared().visit(node)
    except _SharedFound:
        return True
    return False


def thread_extents(kernel: ir.Stmt) -> dict[str, ir.PrimExpr]:
    """Thread tag -> extent of the first loop bound to it in ``kernel`` (its launch shape,
    as the CUDA backend reads it)."""
    launch = _Launch()
    launch.visit_stmt(kernel)
    return launch.out


class _Launch(StmtVisitor):
    """:func:`thread_extents`' walk (a module class, not one made per call)."""

    def __init__(self) -> None:
        self.out: dict[str, ir.PrimExpr] = {}

    def visit_For(self, s: ir.For) -> None:
        if s.kind == "thread_binding" and s.thread_tag:
            self.out.setdefault(s.thread_tag, s.extent)
        super().visit_For(s)


def kernels_of(body: ir.Stmt) -> tuple[list[ir.Allocate], list[ir.Stmt]]:
    """(the allocations around the kernels, the kernels): the top-level statements of a
    lowered function below its outermost ``global`` allocations (the buffers kernels hand
    each other), one kernel each, as the CUDA backend splits them."""
    allocs = []
    while isinstance(body, ir.Allocate) and body.buffer.scope in ("", "global"):
        allocs.append(body)
        body = body.body
    return allocs, list(body.seq) if isinstance(body, ir.SeqStmt) else [body]


def with_kernels(allocs: list[ir.Allocate], kernels: list[ir.Stmt]) -> ir.Stmt:
    """The inverse of :func:`kernels_of`."""
    body = ir.seq(*kernels)
    for a in reversed(allocs):
        body = ir.Allocate(a.buffer, body)
    return body


# ----------------------------------------------------------------------------- accesses


@dataclass(frozen=True, eq=False)
class _Access:
    """One shared access: its buffer, read or write, its scalar element index (thread
    loop variables replaced by thread axes; None: unknown) and the loops between the
    access and the level it is compared at (each varies independently)."""

    buffer: ir.Buffer
    write: bool
    index: ir.PrimExpr | None
    inner: tuple[tuple[ir.Var, ir.Range], ...] = ()
    stmt: ir.Stmt | None = None

    def under(self, var: ir.Var, rng: ir.Range) -> _Access:
        return replace(self, inner=(*self.inner, (var, rng)))


@dataclass
class _Summary:
    """A statement's shared accesses: those that may run before its first barrier
    (``head``), after its last (``tail``), all of them, and whether every path through
    it passes a barrier. Without one, head == tail == all."""

    head: list[_Access] = field(default_factory=list)
    tail: list[_Access] = field(default_factory=list)
    all: list[_Access] = field(default_factory=list)
    synced: bool = False

    @staticmethod
    def plain(accesses: list[_Access]) -> _Summary:
        return _Summary(accesses, accesses, accesses, False)

    def after(self, first: list[_Access]) -> _Summary:
        """This summary preceded by accesses ``first`` (a condition, a let value)."""
        return _Summary(first + self.head, self.tail if self.synced else first + self.tail,
                        first + self.all, self.synced)


class _Unknown(Exception):
    pass


def _np_eval(e: ir.PrimExpr, env: dict[ir.Var, np.ndarray]) -> np.ndarray:  # noqa: C901
    """An integer index expression over numpy grids (raises _Unknown where it cannot)."""
    if isinstance(e, ir.IntImm):
        return np.int64(e.value)
    if isinstance(e, ir.Var):
        if e not in env:
            raise _Unknown
        return env[e]
    if isinstance(e, ir.Broadcast):
        return _np_eval(e.value, env)
    if isinstance(e, ir.Cast) and ir.is_int(e.dtype):
        return _np_eval(e.value, env)
    if isinstance(e, ir.Select):
        return np.where(_np_eval(e.condition, env), _np_eval(e.true_value, env),
                        _np_eval(e.false_value, env))
    if isinstance(e, ir.Not):
        return np.logical_not(_np_eval(e.a, env))
    if not isinstance(e, ir.BinaryOp):
        raise _Unknown
    a, b = _np_eval(e.a, env), _np_eval(e.b, env)
    if isinstance(e, (ir.FloorDiv, ir.FloorMod, ir.Div, ir.Mod)) and np.any(b == 0):
        raise _Unknown
    if isinstance(e, (ir.Div, ir.Mod)):
        q = np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))
        return q if isinstance(e, ir.Div) else a - b * q
    ops = {ir.Add: np.add, ir.Sub: np.subtract, ir.Mul: np.multiply,
           ir.FloorDiv: np.floor_divide, ir.FloorMod: np.mod, ir.Min: np.minimum,
           ir.Max: np.maximum, ir.EQ: np.equal, ir.NE: np.not_equal, ir.LT: np.less,
           ir.LE: np.less_equal, ir.GT: np.greater, ir.GE: np.greater_equal,
           ir.And: np.logical_and, ir.Or: np.logical_or}
    if type(e) not in ops:
        raise _Unknown
    return ops[type(e)](a, b)


#: most combinations of enclosing loop values compared one by one (``_Overlap._jointly``)
MAX_JOINT = 64


def _two_threads_meet(ea: np.ndarray, ta: np.ndarray, eb: np.ndarray, tb: np.ndarray
                      ) -> bool:
    """Whether some element that both accesses touch (``ea``, ``eb``: the elements, ``ta``,
    ``tb``: the thread of each) is touched by two different threads of either.

    Over the elements' span (a shared buffer's: a few times the points at most) without a
    sort: each common element's slot takes one of its points' threads (numpy keeps the
    last of repeated indices), and two threads meet where a point's thread is not its
    slot's. A span wider than that is sorted instead.

    >>> e = np.array([0, 1, 2]); t = np.array([0, 1, 2])
    >>> _two_threads_meet(e, t, e + 3, t), _two_threads_meet(e, t, e, t)
    (False, False)
    >>> _two_threads_meet(e, t, e[::-1], t)  # element 0: threads 0 and 2
    True
    """
    if not ea.size or not eb.size:
        return False
    lo = min(int(ea.min()), int(eb.min()))
    span = max(int(ea.max()), int(eb.max())) - lo + 1
    if span > 4 * (ea.size + eb.size) + 4096:
        common = np.intersect1d(ea, eb)
        if not common.size:
            return False
        ma, mb = np.isin(ea, common), np.isin(eb, common)
        e = np.concatenate([ea[ma], eb[mb]])
        t = np.concatenate([ta[ma], tb[mb]])
        order = np.argsort(e, kind="stable")
        e, t = e[order], t[order]
        starts = np.flatnonzero(np.r_[True, e[1:] != e[:-1]])
        return bool(np.any(np.minimum.reduceat(t, starts) != np.maximum.reduceat(t, starts)))
    ia, ib = ea - lo, eb - lo
    in_a = np.zeros(span, np.bool_)
    in_a[ia] = True
    in_b = np.zeros(span, np.bool_)
    in_b[ib] = True
    common = in_a & in_b
    if not common.any():
        return False
    ma, mb = common[ia], common[ib]
    e = np.concatenate([ia[ma], ib[mb]])
    t = np.concatenate([ta[ma], tb[mb]])
    slot = np.empty(span, np.int64)
    slot[e] = t
    return bool(np.any(slot[e] != t))


class _Overlap:
    """Do two accesses touch one element from two different threads? (See the module
    docstring: enumeration over the block's threads and the accesses' loops.)"""

    def __init__(self, threads: dict[ir.Var, int] | None) -> None:
        self.threads = threads
        self.memo: dict[tuple[int, int], bool] = {}
        #: each access's points at its own index (most comparisons of a kernel's accesses
        #: take them there), by the access's id, with the access kept alive
        self.own_points: dict[int, tuple[_Access, tuple[np.ndarray, np.ndarray] | None]] = {}
        #: the serial loops around the statements being compared (the planner keeps it):
        #: both accesses see the same value of each
        self.outer: dict[ir.Var, ir.Range] = {}

    def conflict(self, a: _Access, b: _Access) -> bool:
        if a.buffer.data is not b.buffer.data or not (a.write or b.write):
            return False
        key = (id(a), id(b))
        if key not in self.memo:
            self.memo[key] = self._conflict(a, b)
        return self.memo[key]

    def _conflict(self, a: _Access, b: _Access) -> bool:
        if a.index is None or b.index is None or self.threads is None:
            return True
        split = self._common_offset(a, b)
        if split is None:
            return self._jointly(a, b)
        return self._overlap(a, b, split)

    def _jointly(self, a: _Access, b: _Access) -> bool:
        """The accesses compared for each value of the enclosing serial loops their
        indices share (a double-buffered tile's ``k % 2`` and ``(k + 1) % 2`` halves),
        where those loops are few and short; else a conflict."""
        assert a.index is not None and b.index is not None and self.threads is not None
        own = set(self.threads) | {v for v, _ in a.inner} | {v for v, _ in b.inner}
        outer = [v for v in free_vars([a.index, b.index]) if v not in own]
        ranges = []
        for v in outer:
            r = self.outer.get(v)
            lo = ir.const_int(arith.simplify(r.min)) if r is not None else None
            ext = ir.const_int(arith.simplify(r.extent)) if r is not None else None
            if lo is None or ext is None:
                return True
            period = mod_period((a.index, b.index), v)
            ranges.append(range(lo, lo + (ext if period is None else min(ext, period))))
        if math.prod(len(r) for r in ranges) > MAX_JOINT:
            return True
        for values in itertools.product(*ranges):
            env = {v: ir.IntImm(x, v.dtype) for v, x in zip(outer, values, strict=True)}
            split = (arith.simplify(substitute(a.index, env)),
                     arith.simplify(substitute(b.index, env)))
            if self._overlap(a, b, split):
                return True
        return False

    def _overlap(self, a: _Access, b: _Access, split: tuple[ir.PrimExpr, ir.PrimExpr]
                 ) -> bool:
        pa, pb = self._points_at(a, split[0]), self._points_at(b, split[1])
        if pa is None or pb is None:
            return True
        return _two_threads_meet(*pa, *pb)

    def _common_offset(self, a: _Access, b: _Access) -> tuple[ir.PrimExpr, ir.PrimExpr] | None:
        """Both indices with the variables that are the same for both accesses (block
        indices, enclosing loops) set to 0 — valid when both depend on them by one common
        additive offset; None otherwise."""
        assert a.index is not None and b.index is not None and self.threads is not None
        own = set(self.threads) | {v for v, _ in a.inner} | {v for v, _ in b.inner}
        outer = [v for v in free_vars([a.index, b.index]) if v not in own]
        if not outer:
            return a.index, b.index
        zero = {v: ir.IntImm(0, v.dtype) for v in outer}
        a0, b0 = substitute(a.index, zero), substitute(b.index, zero)
        da, db = arith.simplify(a.index - a0), arith.simplify(b.index - b0)
        if not ir.structural_equal(da, db) or any(v in own for v in free_vars(da)):
            return None
        return a0, b0

    def _points_at(self, acc: _Access, index: ir.PrimExpr
                   ) -> tuple[np.ndarray, np.ndarray] | None:
        """:meth:`_points`, remembered where ``index`` is the access's own."""
        if index is not acc.index:
            return self._points(acc, index)
        hit = self.own_points.get(id(acc))
        if hit is None:
            hit = self.own_points[id(acc)] = (acc, self._points(acc, index))
        return hit[1]

    def _points(self, acc: _Access, index: ir.PrimExpr) -> tuple[np.ndarray, np.ndarray] | None:
        """(element, thread id) for every thread and loop value of ``acc``."""
        assert self.threads is not None
        axes: list[tuple[ir.Var, int, int]] = [(v, 0, n) for v, n in self.threads.items()]
        for v, r in acc.inner:
            lo, ext = ir.const_int(arith.simplify(r.min)), ir.const_int(arith.simplify(r.extent))
            if lo is None or ext is None:
                return None
            axes.append((v, lo, max(ext, 0)))
        shape = [ext for _, _, ext in axes]
        if math.prod(shape) > MAX_POINTS:
            return None
        env: dict[ir.Var, np.ndarray] = {}
        for k, (v, lo, ext) in enumerate(axes):
            env[v] = (np.arange(ext, dtype=np.int64) + lo).reshape(
                [1] * k + [ext] + [1] * (len(axes) - k - 1))
        try:
            with np.errstate(all="ignore"):
                elems = _np_eval(index, env)
        except _Unknown:
            return None
        tid = np.int64(0)
        for v, n in self.threads.items():
            tid = tid * n + env[v]
        return (np.broadcast_to(elems, shape).ravel(),
                np.broadcast_to(tid, shape).ravel())


# ----------------------------------------------------------------------------- planner


class _Loads(ExprVisitor):
    """The shared accesses of an expression of ``stmt``, appended to ``out`` (what
    :meth:`_Planner.loads` returns; a module class, not one made per call)."""

    def __init__(self, planner: _Planner, stmt: ir.Stmt, out: list[_Access]) -> None:
        self.planner, self.stmt, self.out = planner, stmt, out

    def visit_BufferLoad(self, x: ir.BufferLoad) -> None:
        planner, stmt, out = self.planner, self.stmt, self.out
        super().visit_BufferLoad(x)
        if is_shared(x.buffer):
            out.extend(planner.access(x.buffer, x.indices, False, stmt))

    def visit_Call(self, x: ir.Call) -> None:
        planner, stmt, out = self.planner, self.stmt, self.out
        tiles = planner.intrinsic_tiles(x, stmt)
        if tiles is not None:  # a specialised intrinsic: the elements of its tiles
            out.extend(tiles)
            for a in x.args:
                ptr = a.args[0] if isinstance(a, ir.Call) and a.args else a
                for i in (ptr.indices if isinstance(ptr, ir.BufferLoad) else (a,)):
                    self.visit_expr(i)
            return
        written = planner.intrinsic_writes(x)
        if written is not None:  # a declared intrinsic: its output alone is written
            for k, a in enumerate(x.args):
                ptr = a.args[0] if isinstance(a, ir.Call) and \
                    a.op == "tir.address_of" and a.args else None
                if isinstance(ptr, ir.BufferLoad) and is_shared(ptr.buffer):
                    out.append(_Access(ptr.buffer, False, None, stmt=stmt))
                    if k == written:
                        out.append(_Access(ptr.buffer, True, None, stmt=stmt))
                for i in (ptr.indices if isinstance(ptr, ir.BufferLoad) else (a,)):
                    self.visit_expr(i)
            return
        arg = x.args[0] if x.op == "tir.address_of" and x.args else None
        if isinstance(arg, ir.BufferLoad) and is_shared(arg.buffer):
            # a pointer handed to a call: it may read or write anything
            out.append(_Access(arg.buffer, False, None, stmt=stmt))
            out.append(_Access(arg.buffer, True, None, stmt=stmt))
            for i in arg.indices:
                self.visit_expr(i)
            return
        super().visit_Call(x)


def _short(s: ir.Node) -> str:
    text = " ".join(str(s).split())
    return text if len(text) <= 90 else text[:87] + "..."


class _Planner:
    """Walk one kernel, insert barriers, return its summary (see the module docstring)."""

    def __init__(self, func_name: str, kernel: ir.Stmt) -> None:
        self.func_name = func_name
        self.subst: dict[ir.Var, ir.PrimExpr] = {}
        self.axes: dict[str, ir.Var] = {}
        self.dims: dict[str, int | None] = {}
        for tag, ext in thread_extents(kernel).items():
            if tag.startswith("threadIdx"):
                self.axes[tag] = ir.Var(tag.replace(".", "_"))
                self.dims[tag] = ir.const_int(arith.simplify(ext))
        threads = None if None in self.dims.values() else \
            {self.axes[t]: n for t, n in self.dims.items() if n is not None}
        self.overlap = _Overlap(threads)
        #: variables whose value may differ between the threads of a block
        self.varying: set[ir.Var] = set(self.axes.values())
        #: thread-dependent control flow around the current statement
        self.divergent: list[str] = []

    # -- helpers
    def varies(self, e: ir.PrimExpr) -> bool:
        found: list[bool] = []

        def f(x: object) -> None:
            if isinstance(x, ir.Var) and x in self.varying:
                found.append(True)
            elif isinstance(x, ir.BufferLoad) and x.buffer.scope == "local":
                found.append(True)

        post_order_visit(e, f)
        return bool(found)

    def loads(self, e: ir.PrimExpr, stmt: ir.Stmt) -> list[_Access]:
        out: list[_Access] = []
        _Loads(self, stmt, out).visit_expr(e)
        return out

    def intrinsic_tiles(self, call: ir.Call, stmt: ir.Stmt) -> list[_Access] | None:
        """The shared elements a specialised intrinsic call reads and writes (its
        operands' tiles: :func:`~toolchain.intrinsics.operand_elements`), or None."""
        from toolchain.intrinsics import operand_elements

        ops = operand_elements(call)
        if ops is None:
            return None
        out: list[_Access] = []
        for buf, first, dims, written in ops:
            if not is_shared(buf):
                continue
            tvars = [ir.Var(f"tile{d}") for d in range(len(dims))]
            idx: ir.PrimExpr = first
            for v, (_, stride) in zip(tvars, dims, strict=True):
                idx = idx + v * stride
            for write in (False, True) if written else (False,):
                acc = self.access(buf, (idx,), write, stmt)
                for v, (ext, _) in zip(tvars, dims, strict=True):
                    acc = [a.under(v, ir.Range(0, ext)) for a in acc]
                out.extend(acc)
        return out

    @staticmethod
    def intrinsic_writes(call: ir.Call) -> int | None:
        """For a call to a declared tensor intrinsic, the position of the operand it
        writes (its last buffer operand; the others it only reads); else None."""
        from toolchain.intrinsics import intrinsic_of_function

        spec = intrinsic_of_function(call.op)
        if spec is None or spec.instruction or len(call.args) != len(spec.operands):
            return None
        return len(spec.operands) - 1

    def access(self, buf: ir.Buffer, indices: tuple[ir.PrimExpr, ...], write: bool,
               stmt: ir.Stmt) -> list[_Access]:
        if len(indices) != 1:
            return [_Access(buf, write, None, stmt=stmt)]
        idx = substitute(indices[0], self.subst)
        inner: tuple[tuple[ir.Var, ir.Range], ...] = ()
        if isinstance(idx, ir.Ramp):
            lane = ir.Var("lane")
            inner = ((lane, ir.Range(0, idx.lanes)),)
            idx = idx.base + idx.stride * lane
        elif isinstance(idx, ir.Broadcast):
            idx = idx.value
        return [_Access(buf, write, idx, inner, stmt)]

    def first_conflict(self, earlier: list[_Access], later: list[_Access]
                       ) -> tuple[_Access, _Access] | None:
        for b in later:
            for a in earlier:
                if self.overlap.conflict(a, b):
                    return a, b
        return None

    def check_uniform(self, where: ir.Stmt, pair: tuple[_Access, _Access]) -> None:
        if not self.divergent:
            return
        a, b = pair
        raise UnsupportedError(
            f"inject_barriers: function {self.func_name}: `{_short(where)}` needs a barrier "
            f"before it ({'writes' if b.write else 'reads'} shared buffer {b.buffer.name} "
            f"that other threads {'wrote' if a.write else 'read'} just before), but it lies "
            f"under {self.divergent[-1]}, which depends on the thread: threads that skip a "
            "__syncthreads() leave the others waiting. Make that condition or loop the same "
            "for every thread of the block (no threadIdx in it), or move the shared-memory "
            "accesses out of it")

    # -- statements
    def plan(self, s: ir.Stmt) -> tuple[ir.Stmt, _Summary]:
        fn = getattr(self, "plan_" + type(s).__name__, None)
        if fn is None:
            raise UnsupportedError(f"inject_barriers: function {self.func_name}: "
                                   f"{type(s).__name__} is not lowered; run it on lowered IR")
        return fn(s)

    def plan_BufferStore(self, s: ir.BufferStore) -> tuple[ir.Stmt, _Summary]:  # noqa: N802
        acc = self.loads(s.value, s)
        for i in s.indices:
            acc += self.loads(i, s)
        if is_shared(s.buffer):
            acc += self.access(s.buffer, s.indices, True, s)
        return s, _Summary.plain(acc)

    def plan_Evaluate(self, s: ir.Evaluate) -> tuple[ir.Stmt, _Summary]:  # noqa: N802
        if is_barrier(s):
            return s, _Summary(synced=True)
        return s, _Summary.plain(self.loads(s.value, s))

    def plan_SeqStmt(self, s: ir.SeqStmt) -> tuple[ir.Stmt, _Summary]:  # noqa: N802
        out: list[ir.Stmt] = []
        pending: list[_Access] = []
        head: list[_Access] = []
        every: list[_Access] = []
        synced = False
        for child in s.seq:
            new, sub = self.plan(child)
            pair = self.first_conflict(pending, sub.head)
            if pair is not None:
                self.check_uniform(child, pair)
                out.append(barrier())
                pending, synced = [], True
            if not synced:
                head += sub.head
            out.append(new)
            if sub.synced:
                pending, synced = list(sub.tail), True
            else:
                pending += sub.tail
            every += sub.all
        changed = len(out) != len(s.seq) or any(a is not b for a, b in zip(out, s.seq,
                                                                          strict=True))
        return (ir.SeqStmt(tuple(out)) if changed else s), _Summary(head, pending, every, synced)

    def plan_For(self, s: ir.For) -> tuple[ir.Stmt, _Summary]:  # noqa: N802
        if s.kind == "thread_binding":
            return self._thread_loop(s)
        rng = ir.Range(substitute(s.min, self.subst), substitute(s.extent, self.subst))
        varying = self.varies(rng.min) or self.varies(rng.extent)
        if varying:
            self.varying.add(s.loop_var)
            self.divergent.append(f"loop {s.loop_var.name} (its bounds depend on the thread)")
        self.overlap.outer[s.loop_var] = rng
        try:
            body, sub = self.plan(s.body)
        finally:
            del self.overlap.outer[s.loop_var]
        try:
            ext = [a.under(s.loop_var, rng) for a in sub.all]
            head = [a.under(s.loop_var, rng) for a in sub.head] if sub.synced else ext
            tail = [a.under(s.loop_var, rng) for a in sub.tail] if sub.synced else ext
            # the next iteration's first accesses after this iteration's last ones
            pair = self.first_conflict(tail, head)
            if pair is not None:
                self.check_uniform(s, pair)
                body = _append(body, barrier())
        finally:
            if varying:
                self.divergent.pop()
        new = s if body is s.body else replace(s, body=body)
        runs = arith.prove(rng.extent > 0)
        if not runs:
            return new, _Summary.plain(ext)
        if pair is not None:
            return new, _Summary(head, [], ext, True)
        return new, _Summary(head, tail, ext, sub.synced)

    def _thread_loop(self, s: ir.For) -> tuple[ir.Stmt, _Summary]:
        tag = s.thread_tag or ""
        axis = self.axes.get(tag)
        if axis is None:  # blockIdx (blocks share nothing) or a vthread left over
            body, sub = self.plan(s.body)
            return (s if body is s.body else replace(s, body=body)), sub
        self.subst[s.loop_var] = arith.simplify(axis + substitute(s.min, self.subst))
        self.varying.add(s.loop_var)
        partial = self.dims[tag] is None or not ir.is_const_int(
            arith.simplify(s.extent), self.dims[tag])
        if partial:
            self.divergent.append(f"thread loop {s.loop_var.name} ({tag} of extent {s.extent}"
                                  " in a larger block)")
        try:
            body, sub = self.plan(s.body)
        finally:
            del self.subst[s.loop_var]
            if partial:
                self.divergent.pop()
        return (s if body is s.body else replace(s, body=body)), sub

    def plan_IfThenElse(self, s: ir.IfThenElse) -> tuple[ir.Stmt, _Summary]:  # noqa: N802
        cond = substitute(s.condition, self.subst)
        first = self.loads(cond, s)
        varying = self.varies(cond)
        if varying:
            self.divergent.append(f"`if {_short(s.condition)}`")
        try:
            then, st = self.plan(s.then_case)
            if s.else_case is not None:
                other, se = self.plan(s.else_case)
            else:
                other, se = None, _Summary()
        finally:
            if varying:
                self.divergent.pop()
        new = s if then is s.then_case and other is s.else_case else \
            ir.IfThenElse(s.condition, then, other)
        synced = st.synced and se.synced
        return new, _Summary(first + st.head + se.head,
                             st.tail + se.tail if synced else first + st.tail + se.tail,
                             first + st.all + se.all, synced)

    def plan_LetStmt(self, s: ir.LetStmt) -> tuple[ir.Stmt, _Summary]:  # noqa: N802
        value = substitute(s.value, self.subst)
        first = self.loads(value, s)
        if self.varies(value):
            self.varying.add(s.var)
        self.subst[s.var] = value
        try:
            body, sub = self.plan(s.body)
        finally:
            del self.subst[s.var]
        return (s if body is s.body else ir.LetStmt(s.var, s.value, body)), sub.after(first)

    def plan_Allocate(self, s: ir.Allocate) -> tuple[ir.Stmt, _Summary]:  # noqa: N802
        body, sub = self.plan(s.body)
        return (s if body is s.body else ir.Allocate(s.buffer, body)), sub

    def plan_AttrStmt(self, s: ir.AttrStmt) -> tuple[ir.Stmt, _Summary]:  # noqa: N802
        body, sub = self.plan(s.body)
        return (s if body is s.body else replace(s, body=body)), sub


def _append(body: ir.Stmt, last: ir.Stmt) -> ir.Stmt:
    """``body`` then ``last``, inside the allocations and bindings that open ``body``."""
    if isinstance(body, ir.Allocate):
        return ir.Allocate(body.buffer, _append(body.body, last))
    if isinstance(body, ir.LetStmt):
        return ir.LetStmt(body.var, body.value, _append(body.body, last))
    if isinstance(body, ir.AttrStmt):
        return replace(body, body=_append(body.body, last))
    return ir.seq(body, last)


def inject_barriers(func: ir.PrimFunc) -> ir.PrimFunc:
    """Insert ``T.storage_sync('shared')`` where threads of a block would otherwise race on
    shared memory (see the module docstring for the rule and a before/after example);
    a function without shared memory is returned as is."""
    if not has_shared(func.body):
        return func
    allocs, kernels = kernels_of(func.body)
    new = [_Planner(func.name, k).plan(k)[0] if has_shared(k) else k for k in kernels]
    if all(a is b for a, b in zip(new, kernels, strict=True)):
        return func
    return func.with_body(with_kernels(allocs, new))


__all__ = ["MAX_POINTS", "SYNC_OP", "barrier", "has_shared", "inject_barriers", "is_barrier",
           "is_shared", "kernels_of", "thread_extents", "with_kernels"]
