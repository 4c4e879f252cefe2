"""Data races on shared memory, found by running the SIMT emulation: ``find_races``.

Two threads of one block race when they touch the same shared element between two
barriers and one of them writes: the result then depends on the order the GPU happens to
run them in (and the serial emulation would hide it). :func:`find_races` runs the
kernel's own lowered code on small inputs, the way the emulation does
(:func:`~toolchain.tir.transform.simt.emulate_threads`: blocks one by one, each phase
between barriers as a loop over the block's threads), in the TIR interpreter
(:mod:`toolchain.tir.interpreter`), with every shared load and store instrumented: each
element remembers, since the last barrier of its block, the thread that wrote it and
the threads that read it. A write by another thread after a read or a write, or a read
after another thread's write, is a race, reported with the kernel, the buffer, the
element, the block, both threads and both statements.

A product left in flight (an intrinsic declared ``in_flight: g``, the overlapped
``wgmma``) may read its shared operands until a later call retires it: the call of step
``k`` of its loop also reads, where it stands, what the call of step ``k - g`` read (that
product is retired there), and a drain (the call with null operands) what the last ``g``
steps' calls read -- so a fetch that overwrites a stage before the wait retiring its reader
races with that reader.

It is a dynamic check: it sees the accesses of the inputs it runs (random ones by
default) and of the blocks it runs (``max_blocks`` per kernel to keep it quick), so give it
a small instance of the kernel (a 64 x 64 GEMM rather than 4096 x 4096); the index
patterns of a schedule do not depend on the data, only on the shapes.

>>> from toolchain.tir import ir
>>> S = ir.Buffer("S", (8,), "float32", scope="shared")
>>> A = ir.Buffer("A", (8,), "float32"); B = ir.Buffer("B", (8,), "float32")
>>> t = ir.Var("t")
>>> body = ir.For(t, 0, 8, "thread_binding", ir.Allocate(S, ir.seq(  # no barrier
...     S.store(A[t], [t]), B.store(S[7 - t], [t]))), "threadIdx.x")
>>> races = find_races(ir.PrimFunc((A, B), body, "reverse"))
>>> print(races[0])  # doctest: +NORMALIZE_WHITESPACE
data race in kernel reverse, block (): shared buffer S element 4 is read by thread
(threadIdx.x=3) in `B[threadIdx_x] = S[7 - threadIdx_x]` and written by thread
(threadIdx.x=4) in `S[threadIdx_x] = A[threadIdx_x]` with no barrier between them
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from toolchain.errors import ScheduleError
from toolchain.tir import ir
from toolchain.tir.functor import StmtExprMutator
from toolchain.tir.interpreter import run
from toolchain.tir.race_products import PRODUCT, Plan, plan_of, run_plan
from toolchain.tir.transform.inject_barriers import (
    is_barrier,
    is_shared,
    kernels_of,
    with_kernels,
)
from toolchain.tir.transform.simt import SIMT_BLOCK, SIMT_THREAD, emulate_threads


class DataRaceError(ScheduleError):
    """A kernel's threads race on shared memory (a barrier is missing)."""


@dataclass(frozen=True)
class DataRace:
    """Two threads of one block touched shared ``buffer[element]`` between two barriers,
    ``first`` then ``second``, at least one of them writing. Threads and the block are
    ``{tag: index}``; an empty thread is every thread of the block (a block-level
    statement); the statements are the emulation's (thread loops as thread indices)."""

    kernel: str
    buffer: str
    element: int
    block: dict[str, int]
    first_thread: dict[str, int]
    first_writes: bool
    first_stmt: str
    second_thread: dict[str, int]
    second_writes: bool
    second_stmt: str

    def __str__(self) -> str:
        def who(t: dict[str, int]) -> str:
            return "(" + ", ".join(f"{k}={v}" for k, v in t.items()) + ")" if t else \
                "(every thread)"

        block = "(" + ", ".join(f"{k}={v}" for k, v in self.block.items()) + ")"
        verb = {True: "written", False: "read"}
        return (f"data race in kernel {self.kernel}, block {block}: shared buffer "
                f"{self.buffer} element {self.element} is {verb[self.first_writes]} by "
                f"thread {who(self.first_thread)} in `{self.first_stmt}` and "
                f"{verb[self.second_writes]} by thread {who(self.second_thread)} in "
                f"`{self.second_stmt}` with no barrier between them")


def _short(s: ir.Node) -> str:
    text = " ".join(str(s).split())
    return text if len(text) <= 100 else text[:97] + "..."


@dataclass(frozen=True)
class _Site:
    buffer: str
    write: bool
    stmt: str
    tags: tuple[str, ...]


class _Instrument(StmtExprMutator):
    """Every shared access of the emulated function as ``S[kiln_race_access(index, site,
    thread...)]``; barriers and block starts as calls the tracker hears."""

    def __init__(self) -> None:
        self.threads: list[tuple[str, ir.Var]] = []
        self.blocks: list[tuple[str, ir.Var]] = []
        self.sites: list[_Site] = []
        self.names: dict[int, tuple[str, object]] = {}
        self.stmt = ""
        #: the block tags of the kernel being instrumented, outermost first
        self.block_tags: list[str] = []
        #: the serial loops around the statement being instrumented, outermost first
        self.serial: list[ir.For] = []
        #: the last in-flight call seen: (its step loop, the call, the groups it leaves)
        self.flying: tuple[ir.For, ir.Call, int] | None = None
        #: the element loops run as arrays (``kiln_race_product``), in call order
        self.plans: list[Plan] = []
        #: whether intrinsic calls' element loops become plans (False: one element at a
        #: time, the reference the plans are tested against)
        self.vectorise = True

    def vectorised(self, loops: ir.Stmt) -> ir.Stmt:
        """``loops`` (instrumented) run by a plan where one runs them, else as they are."""
        plan = plan_of(loops) if self.vectorise else None
        if plan is None:
            return loops
        self.plans.append(plan)
        return ir.IfThenElse(plan.call(len(self.plans) - 1), loops)

    def name_of(self, buf: ir.Buffer) -> str:
        """``buf``'s name, suffixed ``_1``, ``_2``... where another buffer (another pointer
        Var: two ``rfactor``s of one output) has it already: accesses are keyed by it."""
        var = buf.data if buf.data is not None else buf
        key = id(var)  # by identity (a Var's == builds an expression)
        if key not in self.names:
            taken = {n for n, _ in self.names.values()}
            name, n = buf.name, 0
            while name in taken:
                n += 1
                name = f"{buf.name}_{n}"
            self.names[key] = (name, var)  # the Var kept alive: its id stays its own
        return self.names[key][0]

    def site(self, index: ir.PrimExpr, buf: ir.Buffer, write: bool) -> ir.PrimExpr:
        self.sites.append(_Site(self.name_of(buf), write, self.stmt,
                                tuple(t for t, _ in self.threads)))
        return ir.Call(index.dtype, "kiln_race_access",
                       [index, ir.IntImm(len(self.sites) - 1), *(v for _, v in self.threads)])

    def visit_For(self, s: ir.For) -> ir.Stmt:
        tag = s.annotations.get(SIMT_THREAD) or s.annotations.get(SIMT_BLOCK)
        if tag is None:
            self.stmt = f"for {s.loop_var.name} in range({s.min}, {s.extent})"
            self.serial.append(s)
            try:
                return super().visit_For(s)
            finally:
                self.serial.pop()
        stack = self.threads if SIMT_THREAD in s.annotations else self.blocks
        if stack is self.blocks:
            self.block_tags.append(tag)
        stack.append((tag, s.loop_var))
        try:
            body = self.visit_stmt(s.body)
        finally:
            stack.pop()
        if stack is self.blocks and SIMT_BLOCK not in getattr(s.body, "annotations", {}):
            # the innermost block loop: a new block starts (and runs only if asked for)
            start = ir.Call("bool", "kiln_race_block", [*(v for _, v in self.blocks),
                                                        s.loop_var])
            body = ir.IfThenElse(start, body)
        return replace(s, body=body)

    def visit_BufferStore(self, s: ir.BufferStore) -> ir.Stmt:
        self.stmt = _short(s)
        value = self.visit_expr(s.value)
        idx = tuple(self.visit_expr(i) for i in s.indices)
        if is_shared(s.buffer) and len(idx) == 1:
            idx = (self.site(idx[0], s.buffer, True),)
        return ir.BufferStore(s.buffer, value, idx)

    def visit_BufferLoad(self, e: ir.BufferLoad) -> ir.PrimExpr:
        idx = tuple(self.visit_expr(i) for i in e.indices)
        if is_shared(e.buffer) and len(idx) == 1:
            idx = (self.site(idx[0], e.buffer, False),)
        return ir.BufferLoad(e.buffer, idx)

    def visit_IfThenElse(self, s: ir.IfThenElse) -> ir.Stmt:
        self.stmt = f"if {_short(s.condition)}"
        return super().visit_IfThenElse(s)

    def visit_LetStmt(self, s: ir.LetStmt) -> ir.Stmt:
        self.stmt = f"{s.var.name} = {_short(s.value)}"
        return super().visit_LetStmt(s)

    def visit_Evaluate(self, s: ir.Evaluate) -> ir.Stmt:
        if is_barrier(s):
            return ir.Evaluate(ir.Call("int32", "kiln_race_sync", []))
        self.stmt = _short(s)
        if isinstance(s.value, ir.Call):
            from toolchain.intrinsics import behaviour_of_call
            from toolchain.tir.transform.drain_wgmma import in_flight_call, is_drain

            if is_drain(s.value):  # the products still in flight retire here
                return self._retired(*self.flying, last=True) if self.flying else \
                    ir.Evaluate(ir.IntImm(0))
            loops = behaviour_of_call(s.value)
            g = in_flight_call(s)
            if loops is not None and g:
                return ir.seq(self._issued(s, loops), self._retired(
                    self._step_loop(s.value), s.value, g, last=False))
            if loops is not None:  # a tensor intrinsic: its elements, as declared
                stmt = _short(s)
                out = self.vectorised(self.visit_stmt(loops))
                self.stmt = stmt
                return out
        return super().visit_Evaluate(s)

    def _issued(self, s: ir.Evaluate, loops: ir.Stmt) -> ir.Stmt:
        stmt = _short(s)
        out = self.vectorised(self.visit_stmt(loops))
        self.stmt = stmt
        return out

    def _step_loop(self, call: ir.Call) -> ir.For:
        """The innermost serial loop whose variable the call's operands use."""
        from toolchain.tir.functor import post_order_visit

        used: set[int] = set()
        post_order_visit(call, lambda n: used.add(id(n)) if isinstance(n, ir.Var) else None)
        for lp in reversed(self.serial):
            if id(lp.loop_var) in used:
                return lp
        raise ScheduleError(f"race check: the in-flight product {call.op} is in no step loop")

    def _retired(self, loop: ir.For, call: ir.Call, g: int, last: bool) -> ir.Stmt:
        """The reads of the products this statement retires: in step k of ``loop`` the
        call of step ``k - g``; after it (``last``, a drain) those of its last g steps --
        each shared element of their operand tiles read once."""
        from toolchain.intrinsics import operand_elements
        from toolchain.tir.functor import substitute

        if not last:
            self.flying = (loop, call, g)
        k, out = loop.loop_var, []
        for j in range(1, g + 1) if not last else range(g):
            step = k - j if not last else loop.min + loop.extent - 1 - j
            ops = operand_elements(substitute(call, {k: step}))
            for buf, first, dims, written in ops or ():
                if written or not is_shared(buf):
                    continue
                ivs = [ir.Var(f"retired_{d}") for d in range(len(dims))]
                index = first
                for v, (_, stride) in zip(ivs, dims, strict=True):
                    index = index + v * stride
                body: ir.Stmt = ir.Evaluate(ir.BufferLoad(buf, (index,)))
                for v, (ext, _) in reversed(list(zip(ivs, dims, strict=True))):
                    body = ir.For(v, 0, ext, "serial", body)
                stmt = self.stmt
                self.stmt = f"(retiring) {_short(ir.Evaluate(call))}"
                out.append(ir.IfThenElse(ir.GE(step, loop.min),
                                         self.vectorised(self.visit_stmt(body))))
                self.stmt = stmt
        return ir.seq(*out) if out else ir.Evaluate(ir.IntImm(0))


class _Stop(Exception):
    pass


class _Tracker:
    """The accesses of one block since its last barrier (see the module docstring)."""

    def __init__(self, sites: list[_Site], kernels: list[tuple[str, tuple[str, ...]]],
                 limit: int, max_blocks: int | None) -> None:
        self.sites = sites
        #: each site's (buffer, writes, whether it runs per thread), read by every access
        self.site_info = [(s.buffer, s.write, bool(s.tags)) for s in sites]
        self.kernels = kernels
        self.limit = limit
        self.max_blocks = max_blocks
        self.kernel = ""
        self.block_tags: tuple[str, ...] = ()
        self.block: dict[str, int] = {}
        self.blocks_run = 0
        self.races: list[DataRace] = []
        self.reported: set[tuple[int, int]] = set()
        self.sync()

    def start_kernel(self, index: Any) -> None:
        self.kernel, self.block_tags = self.kernels[int(index)]
        self.blocks_run, self.block = 0, {}
        self.sync()

    def start_block(self, *indices: Any) -> bool:
        self.sync()
        self.block = {t: int(v) for t, v in zip(self.block_tags, indices, strict=False)}
        self.blocks_run += 1
        return self.max_blocks is None or self.blocks_run <= self.max_blocks

    def sync(self) -> None:
        self.writer: dict[tuple[str, int], tuple[tuple[int, ...] | None, int]] = {}
        self.readers: dict[tuple[str, int], list[tuple[tuple[int, ...] | None, int]]] = {}

    def access(self, index: Any, site: Any, *thread: Any) -> Any:
        # (the thread indices as the emulation's loops give them, Python ints: compared
        # by value, made ints in a report)
        buffer, write, tagged = self.site_info[site]
        tid = thread if tagged else None
        me = (tid, site)
        writer, readers = self.writer, self.readers
        # (one element mostly: a scalar index, without numpy's round trip)
        elements = (index,) if type(index) is int or isinstance(index, np.integer) else \
            np.asarray(index).ravel()
        for e in elements:
            key = (buffer, int(e))
            w = writer.get(key)
            if w is not None and (w[0] != tid or tid is None):
                self.report(key, w, me)
            if write:
                for r in readers.get(key, ()):
                    if r[0] != tid or tid is None:
                        self.report(key, r, me)
                writer[key] = me
            else:
                rs = readers.get(key)
                if rs is None:
                    readers[key] = [me]
                elif len(rs) == 1 and rs[0][0] != tid:  # (two readers of other threads kept)
                    rs.append(me)
        return index

    def access_batch(self, columns: list[tuple[int, tuple[Any, ...]]],
                     indices: np.ndarray) -> None:
        """The accesses of a loop nest run at once (``toolchain.tir.race_products``): row
        ``r`` of ``indices`` holds iteration ``r``'s elements, column ``c`` those of the
        access ``columns[c]`` (site, thread); recorded in that order, as one ``access``
        each. Where no column writes, an access repeating an earlier one of the same site
        and element is left out: a read changes nothing a second time (no write between)."""
        n, width = indices.shape
        cols = np.broadcast_to(np.arange(width), (n, width)).ravel()
        flat = indices.ravel()
        if not any(self.site_info[site][1] for site, _ in columns):
            _, first = np.unique(flat * width + cols, return_index=True)
            first.sort()
            cols, flat = cols[first], flat[first]
        access = self.access
        for c, e in zip(cols.tolist(), flat.tolist(), strict=True):
            site, thread = columns[c]
            access(e, site, *thread)

    def report(self, key: tuple[str, int], first: tuple[tuple[int, ...] | None, int],
               second: tuple[tuple[int, ...] | None, int]) -> None:
        if (first[1], second[1]) in self.reported:
            return
        self.reported.add((first[1], second[1]))
        a, b = self.sites[first[1]], self.sites[second[1]]
        self.races.append(DataRace(
            self.kernel, key[0], key[1], dict(self.block),
            dict(zip(a.tags, map(int, first[0] or ()), strict=False)), a.write, a.stmt,
            dict(zip(b.tags, map(int, second[0] or ()), strict=False)), b.write, b.stmt))
        if len(self.races) >= self.limit:
            raise _Stop


def _random_args(func: ir.PrimFunc, seed: int) -> list[Any]:
    rng = np.random.default_rng(seed)
    out: list[Any] = []
    for p in func.params:
        if not isinstance(p, ir.Buffer):
            raise ScheduleError(f"find_races: {func.name} takes the scalar {p.name}, which "
                                "cannot be made up: pass args (one value per parameter)")
        shape = tuple(ir.const_int(s) for s in p.shape)
        if None in shape:
            raise ScheduleError(f"find_races: buffer {p.name} of {func.name} has a symbolic "
                                f"shape {p.shape}: pass args (one array per parameter)")
        dt = np.dtype(ir.element_of(p.dtype))
        if np.issubdtype(dt, np.floating):
            out.append(rng.standard_normal(shape).astype(dt))
        else:
            out.append(rng.integers(0, 2 if dt == np.bool_ else 8, shape).astype(dt))
    return out


def find_races(func: ir.PrimFunc, args: Sequence[Any] | None = None, *,
               max_blocks: int | None = None, limit: int = 8, seed: int = 0,
               elementwise: bool = False) -> list[DataRace]:
    """The shared-memory data races of the lowered GPU function ``func`` (at most
    ``limit``, each pair of statements once), found by running its emulation on ``args``
    (default: random arrays of the parameters' shapes) and ``max_blocks`` blocks per
    kernel (default: all). The arrays are written as the kernel writes them (where it
    stops at ``limit`` races, up to about there). A tensor intrinsic's element loops run
    as whole arrays (:mod:`toolchain.tir.race_products`); ``elementwise`` runs them one
    element at a time instead (the same races and values, some 3 times slower)."""
    allocs, kernels = kernels_of(func.body)
    if args is None:
        args = _random_args(func, seed)
    inst = _Instrument()
    inst.vectorise = not elementwise
    names: list[tuple[str, tuple[str, ...]]] = []
    body: list[ir.Stmt] = []
    for n, k in enumerate(kernels):
        inst.block_tags = []
        emu = inst.visit_stmt(emulate_threads(func.with_body(k)).body)
        names.append((func.name if len(kernels) == 1 else f"{func.name}_k{n}",
                      tuple(inst.block_tags)))
        body += [ir.Evaluate(ir.Call("int32", "kiln_race_kernel", [ir.IntImm(n)])), emu]
    if not inst.sites:
        return []
    tracker = _Tracker(inst.sites, names, limit, max_blocks)
    externs = {"kiln_race_access": tracker.access, "kiln_race_sync": tracker.sync,
               "kiln_race_block": tracker.start_block, "kiln_race_kernel": tracker.start_kernel,
               PRODUCT: lambda plan, *a: run_plan(inst.plans[plan], tracker.access_batch, a)}
    try:
        run(func.with_body(with_kernels(allocs, body)), *args, externs=externs)
    except _Stop:
        pass
    return tracker.races


def check_races(func: ir.PrimFunc, args: Sequence[Any] | None = None, *,
                max_blocks: int | None = None, seed: int = 0) -> None:
    """Raise :class:`DataRaceError` listing the races :func:`find_races` finds."""
    races = find_races(func, args, max_blocks=max_blocks, seed=seed)
    if races:
        raise DataRaceError("\n".join(str(r) for r in races) + "\nput a barrier "
                            "(T.storage_sync('shared')) between the two statements, or let "
                            "the lowering place it (inject_barriers)")


__all__ = ["DataRace", "DataRaceError", "check_races", "find_races"]
