"""GPU kernels as serial code for the CPU (the SIMT emulation): ``emulate_threads``.

A lowered GPU function is turned into one that runs every block and every thread of each
kernel one after the other, with the same results as the GPU wherever the kernel is free
of data races (:mod:`toolchain.tir.race` checks that). It is what
:class:`~toolchain.codegen.backend.SimtCBackend` renders as C (``kiln compile --emulate``).

* A kernel without shared memory or barriers: its ``blockIdx`` / ``threadIdx`` loops just
  become serial loops (threads do not talk to each other).
* Otherwise, per block (MCUDA, Stratton et al. 2008: loop fission at barriers):

  - ``blockIdx`` loops become serial loops (``annotations={"simt_block": tag}``);
  - every statement of the block body runs for every thread of the block, so the block
    body is cut at each barrier (``T.storage_sync('shared')``, left in place as a marker)
    into *phases*, and each phase is wrapped in serial loops over the block's threads
    (``threadIdx_z``, ``threadIdx_y``, ``threadIdx_x``: ``annotations={"simt_thread":
    tag}``). The kernel's own ``threadIdx`` loops inside a phase become those variables
    (guarded by ``if threadIdx_x < extent`` where a loop covers part of the block);
  - a loop or ``if`` that contains a barrier goes outside the thread loops of its phases;
    it must then be the same for every thread (its bounds or condition free of the thread
    index), else the kernel is refused: such a barrier is not reached by all threads;
  - shared allocations move to the start of the block (once per block, as on the GPU);
  - what a thread keeps across a barrier — a ``let`` value that depends on the thread, a
    ``local`` array whose scope holds a barrier — becomes a per-thread array indexed by the
    linear thread id (``x`` -> ``x_per_thread[tid]``);
  - an ``mma.accumulator`` buffer (``mma.sync``'s registers, one lane's share of its
    warp's tile: :mod:`~toolchain.tir.transform.mma_fragments`) is always such an array,
    interleaved by lane -- register ``r`` of lane ``l`` of warp ``w`` at
    ``(w * R + r) * 32 + l`` -- so that a warp-collective call, made once per warp,
    reaches every lane's registers at a stride of 32 (``KILN_MMA_ACC`` in the CUDA
    descriptors' ``c_helpers``); a ``wgmma.accumulator`` the same over a warpgroup's 128
    threads (register ``r`` of thread ``t`` of warpgroup ``g`` at ``(g R + r) 128 + t``).
  - a warp shuffle (``T.shfl_xor_sync`` / ``T.shfl_down_sync``, from
    :mod:`~toolchain.tir.transform.lower_thread_allreduce`) cuts the block like a barrier,
    into two phases: every thread puts the shuffled value in its slot of a lane array,
    then every thread reads its source lane's slot (the lanes in lock step). A source lane
    past the block's threads or outside the mask, or a caller outside the mask, reads NaN
    (the type's least integer): a wrong offset, width or mask shows in the results::

        y_red[0] = y_red[0] + T.shfl_xor_sync(T.uint32(4294967295), y_red[0], 16, 32)

    becomes::

        for threadIdx_x in T.serial(64, annotations={'simt_thread': 'threadIdx.x'}):
            shfl_lanes_float32[threadIdx_x] = y_red_per_thread[threadIdx_x]
        for threadIdx_x in T.serial(64, annotations={'simt_thread': 'threadIdx.x'}):
            src_lane: T.int32 = ...           # (threadIdx_x % 32) ^ 16, in arithmetic
            y_red_per_thread[threadIdx_x] = y_red_per_thread[threadIdx_x] + T.Select(
                src_lane < 32 and threadIdx_x % 32 < 32 and
                threadIdx_x + src_lane - threadIdx_x % 32 < 64,
                shfl_lanes_float32[T.min(threadIdx_x + src_lane - threadIdx_x % 32, 63)],
                T.float32("nan"))

Before (lowered, barriers placed by :mod:`~toolchain.tir.transform.inject_barriers`)::

    for i_0 in T.thread_binding(4, thread="blockIdx.y"):
        for j_0 in T.thread_binding(4, thread="blockIdx.x"):
            for k_0 in range(4):
                A_shared = T.allocate((256,), "float32", scope="shared")
                for ax0 in T.thread_binding(16, thread="threadIdx.y"):
                    for ax1 in T.thread_binding(16, thread="threadIdx.x"):
                        A_shared[ax0 * 16 + ax1] = A[..]
                T.storage_sync('shared')
                for i_1 in T.thread_binding(16, thread="threadIdx.y"):
                    for j_1 in T.thread_binding(16, thread="threadIdx.x"):
                        for k_1 in range(16):
                            C[..] = C[..] + A_shared[i_1 * 16 + k_1] * B[..]
                T.storage_sync('shared')

After ``emulate_threads``: the k loop outside, one thread loop nest per phase::

    for i_0 in T.serial(4, annotations={'simt_block': 'blockIdx.y'}):
        for j_0 in T.serial(4, annotations={'simt_block': 'blockIdx.x'}):
            A_shared = T.allocate((256,), "float32", scope="shared")
            for k_0 in range(4):
                for threadIdx_y in T.serial(16, annotations={'simt_thread': 'threadIdx.y'}):
                    for threadIdx_x in T.serial(16, annotations={'simt_thread': 'threadIdx.x'}):
                        A_shared[threadIdx_y * 16 + threadIdx_x] = A[..]
                T.storage_sync('shared')
                for threadIdx_y in T.serial(16, annotations={'simt_thread': 'threadIdx.y'}):
                    for threadIdx_x in T.serial(16, annotations={'simt_thread': 'threadIdx.x'}):
                        for k_1 in range(16):
                            C[..] = C[..] + A_shared[threadIdx_y * 16 + k_1] * B[..]
                T.storage_sync('shared')

>>> from toolchain.tir import ir
>>> S = ir.Buffer("S", (8,), "float32", scope="shared")
>>> A = ir.Buffer("A", (8,), "float32"); B = ir.Buffer("B", (8,), "float32")
>>> t = ir.Var("t")
>>> sync = ir.Evaluate(ir.Call("int32", "tir.storage_sync", [ir.StringImm("shared")]))
>>> body = ir.For(t, 0, 8, "thread_binding", ir.Allocate(S, ir.seq(
...     S.store(A[t], [t]), sync, B.store(S[7 - t], [t]))), "threadIdx.x")
>>> print(emulate_threads(ir.PrimFunc((A, B), body, "reverse")))
@T.prim_func
def reverse(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
    S = T.allocate((8,), "float32", scope="shared")
    for threadIdx_x in T.serial(8, annotations={'simt_thread': 'threadIdx.x'}):
        S[threadIdx_x] = A[threadIdx_x]
    T.storage_sync('shared')
    for threadIdx_x in T.serial(8, annotations={'simt_thread': 'threadIdx.x'}):
        B[threadIdx_x] = S[7 - threadIdx_x]
"""

from __future__ import annotations

import math
from dataclasses import replace

from toolchain.errors import UnsupportedError
from toolchain.intrinsics import REGISTER_SCOPES
from toolchain.tir import arith, ir
from toolchain.tir.functor import StmtExprMutator, StmtMutator, free_vars, post_order_visit
from toolchain.tir.transform.inject_barriers import (
    barrier,
    has_shared,
    is_barrier,
    is_shared,
    kernels_of,
    thread_extents,
    with_kernels,
)
from toolchain.tir.transform.lower_thread_allreduce import SHFL_XOR, WARP, is_shuffle

#: For annotation marking a block loop / a thread loop of the emulation (value: the tag)
SIMT_BLOCK = "simt_block"
SIMT_THREAD = "simt_thread"

_AXES = ("threadIdx.z", "threadIdx.y", "threadIdx.x")  # outermost first


def has_barrier(node: ir.Node) -> bool:
    """True if ``node`` holds a barrier statement."""
    found: list[bool] = []
    post_order_visit(node, lambda x: found.append(True)
                     if isinstance(x, ir.Stmt) and is_barrier(x) else None)
    return bool(found)


def has_shuffle(node: ir.Node) -> bool:
    """True if ``node`` holds a warp shuffle (``T.shfl_xor_sync`` / ``T.shfl_down_sync``)."""
    found: list[bool] = []
    post_order_visit(node, lambda x: found.append(True) if is_shuffle(x) else None)
    return bool(found)


def _splits(node: ir.Node) -> bool:
    """Whether the emulation cuts ``node`` into phases (a barrier or a warp shuffle)."""
    return has_barrier(node) or has_shuffle(node)


class _Serialize(StmtMutator):
    """Thread-bound loops as serial loops (kernels whose threads never communicate)."""

    def __init__(self, kernel: str) -> None:
        self.kernel = kernel

    def visit_For(self, s: ir.For) -> ir.Stmt:
        if s.kind == "thread_binding":
            if not (s.thread_tag or "").startswith(("blockIdx", "threadIdx")):
                raise UnsupportedError(f"SIMT emulation: kernel {self.kernel}: loop "
                                       f"{s.loop_var.name} is bound to {s.thread_tag}")
            return replace(s, kind="serial", thread_tag=None, body=self.visit_stmt(s.body))
        return super().visit_For(s)


class _HoistShared(StmtMutator):
    """Remove the shared allocations of a block body, remembering their buffers."""

    def __init__(self) -> None:
        self.buffers: dict[ir.Var, ir.Buffer] = {}

    def visit_Allocate(self, s: ir.Allocate) -> ir.Stmt:
        if is_shared(s.buffer):
            self.buffers.setdefault(s.buffer.data, s.buffer)
            return self.visit_stmt(s.body)
        return super().visit_Allocate(s)


class _Block(StmtExprMutator):
    """One block of a kernel with barriers as serial phases (see the module docstring).

    As a mutator it rewrites the statements of one phase (thread loops -> the block's
    thread variables, per-thread values -> their arrays); :meth:`fission` cuts the block
    body at barriers."""

    def __init__(self, kernel: str, dims: dict[str, int]) -> None:
        self.kernel = kernel
        self.dims = dims
        self.axes = {tag: ir.Var(tag.replace(".", "_")) for tag in _AXES if tag in dims}
        tid: ir.PrimExpr = ir.IntImm(0)
        for tag, v in self.axes.items():
            tid = v if ir.is_const_int(tid, 0) else tid * dims[tag] + v
        self.tid = tid
        self.threads = math.prod(dims.values())
        self.subst: dict[ir.Var, ir.PrimExpr] = {}
        #: per-thread arrays: data Var of the original -> (expanded buffer, elements per thread)
        self.expanded: dict[ir.Var, tuple[ir.Buffer, int]] = {}
        self.new_buffers: list[ir.Buffer] = []

    # -- one phase
    def wrap(self, s: ir.Stmt) -> ir.Stmt:
        """``s`` run by every thread of the block: serial loops over the thread axes."""
        body = self.visit_stmt(s)
        for tag in reversed(list(self.axes)):
            body = ir.For(self.axes[tag], 0, self.dims[tag], "serial", body,
                          annotations={SIMT_THREAD: tag})
        return body

    def visit_Var(self, e: ir.Var) -> ir.PrimExpr:
        return self.subst.get(e, e)

    def visit_For(self, s: ir.For) -> ir.Stmt:
        if s.kind != "thread_binding":
            return super().visit_For(s)
        axis, start, guard = self._thread_axis(s)
        self.subst[s.loop_var] = start
        try:
            body = self.visit_stmt(s.body)
        finally:
            del self.subst[s.loop_var]
        return body if guard is None else ir.IfThenElse(guard, body)

    def _thread_axis(self, s: ir.For) -> tuple[ir.Var, ir.PrimExpr, ir.PrimExpr | None]:
        """(the block's thread variable, the loop variable's value, the guard if the loop
        covers part of the block only)."""
        tag = s.thread_tag or ""
        if tag not in self.axes:
            raise UnsupportedError(f"SIMT emulation: kernel {self.kernel}: loop "
                                   f"{s.loop_var.name} bound to {tag} inside a block")
        axis = self.axes[tag]
        mn, ext = self.visit_expr(s.min), self.visit_expr(s.extent)
        start = arith.simplify(axis + mn)
        full = ir.is_const_int(arith.simplify(ext), self.dims[tag])
        return axis, start, None if full else axis < ext

    def _per_thread(self, buf: ir.Buffer, idx: tuple[ir.PrimExpr, ...]
                    ) -> tuple[ir.Buffer, tuple[ir.PrimExpr, ...]]:
        new, n = self.expanded[buf.data]
        off = self.tid * n if n != 1 else self.tid
        lanes = REGISTER_SCOPES.get(buf.scope)
        if lanes:  # register r of lane l of warp (warpgroup) w at (w n + r) lanes + l
            warp = self.tid // lanes * (n * lanes) + self.tid % lanes
            return new, (arith.simplify(warp + idx[0] * lanes),)
        i = idx[0]
        if isinstance(i, ir.Ramp):
            return new, (ir.Ramp(arith.simplify(off + i.base), i.stride, i.lanes),)
        if isinstance(i, ir.Broadcast):
            return new, (ir.Broadcast(arith.simplify(off + i.value), i.lanes),)
        return new, (arith.simplify(off + i),)

    def visit_Evaluate(self, s: ir.Evaluate) -> ir.Stmt:
        out = super().visit_Evaluate(s)
        lanes = _collective_lanes(s)
        if lanes > 1:
            # a warp-collective call (wmma): all lanes make it together on the GPU, with the
            # same operands; here the first lane of each group makes it once for the group
            # (its copy of the fragments stands for the warp's registers; the other lanes'
            # copies would hold the same values, 32 times the work)
            out = ir.IfThenElse(ir.EQ(arith.simplify(self.tid % lanes), ir.IntImm(0)), out)
        return out

    def visit_Allocate(self, s: ir.Allocate) -> ir.Stmt:
        if s.buffer.scope in REGISTER_SCOPES:  # a warp's registers: its lanes' apart
            self._expand(s.buffer)
            return self.visit_stmt(s.body)
        return super().visit_Allocate(s)

    def _expand(self, b: ir.Buffer) -> None:
        """``b`` (one thread's) as one array for the block's threads: ``tid * n + i``,
        or, for mma.sync accumulators, interleaved by lane (``KILN_MMA_ACC`` of the
        target's ``c_helpers``: a warp-collective call made once reaches every lane's
        registers at a stride of 32)."""
        n = ir.const_int(b.shape[0]) if len(b.shape) == 1 else None
        if n is None:
            raise UnsupportedError(f"SIMT emulation: kernel {self.kernel}: buffer "
                                   f"{b.name} lives across a barrier but has no "
                                   f"static flat size ({b.shape})")
        lanes = REGISTER_SCOPES.get(b.scope)
        if lanes and self.threads % lanes:
            raise UnsupportedError(f"SIMT emulation: kernel {self.kernel}: {b.scope} "
                                   f"accumulator {b.name} in a block of {self.threads} "
                                   f"threads, not whole groups of {lanes}")
        buf = ir.Buffer(f"{b.name}_per_thread", (n * self.threads,), b.dtype, "global",
                        align=b.align)
        self.expanded[b.data] = (buf, n)
        self.new_buffers.append(buf)

    def visit_BufferLoad(self, e: ir.BufferLoad) -> ir.PrimExpr:
        e2 = super().visit_BufferLoad(e)
        if e.buffer.data not in self.expanded:
            return e2
        buf, idx = self._per_thread(e2.buffer, e2.indices)
        return ir.BufferLoad(buf, idx)

    def visit_BufferStore(self, s: ir.BufferStore) -> ir.Stmt:
        s2 = super().visit_BufferStore(s)
        if s.buffer.data not in self.expanded:
            return s2
        assert isinstance(s2, ir.BufferStore)
        buf, idx = self._per_thread(s2.buffer, s2.indices)
        return ir.BufferStore(buf, s2.value, idx)

    # -- the block body, cut at barriers
    def uniform(self, e: ir.PrimExpr) -> bool:
        axes = set(self.axes.values())
        return not any(v in axes for v in free_vars(e))

    def refuse(self, what: str) -> UnsupportedError:
        return UnsupportedError(
            f"SIMT emulation: kernel {self.kernel}: a barrier (__syncthreads()) lies under "
            f"{what}, which depends on the thread index; not every thread of the block "
            "reaches it (undefined on a GPU), so the kernel cannot be split into phases. "
            "Keep barriers out of thread-dependent conditions and loops")

    def shuffle(self, s: ir.BufferStore) -> ir.Stmt:
        """``s``, whose value holds one warp shuffle, as two phases: every thread puts the
        shuffled operand in its slot of a lane array, then every thread reads its source
        lane's slot (lock step: all lanes' values are in before any is read). A source lane
        that does not exist (past the block's threads or the mask), or a caller outside
        the mask, reads a poison value (NaN, or the type's least integer): a wrong offset,
        width or mask shows in the results."""
        calls: list[ir.Call] = []
        post_order_visit(s.value, lambda x: calls.append(x) if is_shuffle(x) else None)
        if len(calls) != 1 or has_shuffle(ir.seq(*(ir.Evaluate(a) for a in calls[0].args))):
            raise UnsupportedError(f"SIMT emulation: kernel {self.kernel}: `{s}` must hold "
                                   "exactly one warp shuffle")
        call = calls[0]
        mask, value, offset, width = (self.visit_expr(a) for a in call.args)
        m, off, w = ir.const_int(mask), ir.const_int(offset), ir.const_int(width)
        if m is None or m & (m + 1) or w is None or w & (w - 1) or not 0 < w <= WARP \
                or off is None or (call.op == SHFL_XOR and off & (off - 1)):
            raise UnsupportedError(
                f"SIMT emulation: kernel {self.kernel}: `{call}`: the mask must be a constant "
                "of lanes 0 .. n - 1, the width a power of two up to 32 and the offset a "
                "constant (a power of two for shfl_xor)")
        lanes = self.lane_array(call.dtype)
        put = self.wrap(lanes.store(value, [self.tid]))
        lane = ir.FloorMod(self.tid, WARP)
        seg = ir.FloorMod(lane, w)
        if call.op == SHFL_XOR:  # lane ^ off for a power-of-two off, in arithmetic
            src = ir.Select(ir.EQ(ir.FloorMod(ir.FloorDiv(lane, off), 2), 0), lane + off,
                            lane - off)
            src = ir.Select(ir.LT(ir.FloorDiv(src, w), ir.FloorDiv(lane, w) + 1), src, lane)
        else:  # shfl_down: past the segment, the lane's own value
            src = ir.Select(ir.LT(seg + off, w), lane + off, lane)
        n = (m + 1).bit_length() - 1  # lanes in the mask
        v = ir.Var("src_lane")
        who = arith.simplify(self.tid - lane + v)
        ok = ir.And(ir.And(ir.LT(v, n), ir.LT(lane, n)), ir.LT(who, self.threads))
        got = ir.Select(ok, lanes[ir.Min(who, self.threads - 1)], _poison(call.dtype))
        take = ir.LetStmt(v, arith.simplify(src), _Replace(call, got).visit_stmt(s))
        return ir.seq(put, self.wrap(take))

    def lane_array(self, dtype: str) -> ir.Buffer:
        """The block's per-thread slots for shuffled values of ``dtype``."""
        for b in self.new_buffers:
            if b.name == f"shfl_lanes_{dtype}":
                return b
        buf = ir.Buffer(f"shfl_lanes_{dtype}", (self.threads,), dtype)
        self.new_buffers.append(buf)
        return buf

    def fission(self, s: ir.Stmt) -> ir.Stmt:  # noqa: C901 - one case per statement kind
        """Block-level code running ``s`` for every thread, split at its barriers."""
        if not _splits(s):
            return self.wrap(s)
        if is_barrier(s):
            return barrier()
        if isinstance(s, ir.BufferStore):
            return self.shuffle(s)
        if isinstance(s, ir.SeqStmt):
            out: list[ir.Stmt] = []
            group: list[ir.Stmt] = []
            for x in s.seq:
                if _splits(x):
                    if group:
                        out.append(self.wrap(ir.seq(*group)))
                        group = []
                    out.append(self.fission(x))
                else:
                    group.append(x)
            if group:
                out.append(self.wrap(ir.seq(*group)))
            return ir.seq(*out)
        if isinstance(s, ir.For) and s.kind == "thread_binding":
            axis, start, guard = self._thread_axis(s)
            if guard is not None:
                raise self.refuse(f"thread loop {s.loop_var.name} ({s.thread_tag} of extent "
                                  f"{s.extent}, the block has {self.dims[s.thread_tag]})")
            self.subst[s.loop_var] = start
            try:
                return self.fission(s.body)
            finally:
                del self.subst[s.loop_var]
        if isinstance(s, ir.For):
            mn, ext = self.visit_expr(s.min), self.visit_expr(s.extent)
            if not (self.uniform(mn) and self.uniform(ext)):
                raise self.refuse(f"loop {s.loop_var.name} (bounds {mn}, {ext})")
            kind = s.kind if s.kind in ("serial", "unrolled") else "serial"
            return replace(s, min=mn, extent=ext, kind=kind, body=self.fission(s.body))
        if isinstance(s, ir.IfThenElse):
            cond = self.visit_expr(s.condition)
            if not self.uniform(cond):
                raise self.refuse(f"`if {s.condition}`")
            other = self.fission(s.else_case) if s.else_case is not None else None
            return ir.IfThenElse(cond, self.fission(s.then_case), other)
        if isinstance(s, ir.LetStmt):
            value = self.visit_expr(s.value)
            if self.uniform(value):
                return ir.LetStmt(s.var, value, self.fission(s.body))
            # a value each thread keeps across a barrier: one slot per thread
            buf = ir.Buffer(f"{s.var.name}_per_thread", (self.threads,), s.var.dtype)
            self.new_buffers.append(buf)
            first = self.wrap(buf.store(s.value, [self.tid]))
            self.subst[s.var] = ir.BufferLoad(buf, (self.tid,))
            try:
                return ir.seq(first, self.fission(s.body))
            finally:
                del self.subst[s.var]
        if isinstance(s, ir.Allocate):
            self._expand(s.buffer)
            return self.fission(s.body)
        if isinstance(s, ir.AttrStmt):
            return ir.AttrStmt(s.node, s.key, self.visit_expr(s.value), self.fission(s.body))
        raise UnsupportedError(f"SIMT emulation: kernel {self.kernel}: cannot split "
                               f"{type(s).__name__} at a barrier")


class _Replace(StmtExprMutator):
    """Replace one expression node (by identity)."""

    def __init__(self, old: ir.PrimExpr, new: ir.PrimExpr) -> None:
        self.old, self.new = old, new

    def visit_expr(self, e: ir.PrimExpr) -> ir.PrimExpr:
        return self.new if e is self.old else super().visit_expr(e)


def _poison(dtype: str) -> ir.PrimExpr:
    if dtype.startswith("float"):
        return ir.FloatImm(math.nan, dtype)
    return ir.IntImm(-(2 ** (int(dtype.lstrip("uint") or 32) - 1)), dtype)


def _collective_lanes(s: ir.Evaluate) -> int:
    """How many threads make the call ``s`` together (a declared intrinsic's ``lanes``;
    1 for any other statement)."""
    if not isinstance(s.value, ir.Call):
        return 1
    from toolchain.intrinsics import intrinsic_of_function

    spec = intrinsic_of_function(s.value.op)
    return spec.lanes if spec is not None else 1


def _block_dims(kernel: str, k: ir.Stmt) -> dict[str, int]:
    dims: dict[str, int] = {}
    for tag, ext in thread_extents(k).items():
        if not tag.startswith("threadIdx"):
            continue
        n = ir.const_int(arith.simplify(ext))
        if n is None:
            raise UnsupportedError(f"SIMT emulation: kernel {kernel}: the block shape must be "
                                   f"static ({tag} has extent {ext})")
        dims[tag] = n
    return dims


def _emulate_kernel(kernel: str, k: ir.Stmt) -> ir.Stmt:
    if not has_shared(k) and not _splits(k):
        return _Serialize(kernel).visit_stmt(k)
    dims = _block_dims(kernel, k)

    def grid(s: ir.Stmt) -> ir.Stmt:
        if isinstance(s, ir.For) and (s.thread_tag or "").startswith("blockIdx"):
            return replace(s, kind="serial", thread_tag=None, body=grid(s.body),
                           annotations={**s.annotations, SIMT_BLOCK: s.thread_tag})
        hoist = _HoistShared()
        body = hoist.visit_stmt(s)
        blk = _Block(kernel, dims)
        out = blk.fission(body)
        for b in reversed(blk.new_buffers):
            out = ir.Allocate(b, out)
        for b in reversed(list(hoist.buffers.values())):
            out = ir.Allocate(b, out)
        return out

    return grid(k)


def emulate_threads(func: ir.PrimFunc, name: str | None = None) -> ir.PrimFunc:
    """The lowered GPU function ``func`` with every block and thread run serially, split
    at barriers (see the module docstring); ``name`` names the kernel in errors (default:
    the function's name)."""
    allocs, kernels = kernels_of(func.body)
    new = [_emulate_kernel(name or func.name, k) for k in kernels]
    return func.with_body(with_kernels(allocs, new))


__all__ = ["SIMT_BLOCK", "SIMT_THREAD", "emulate_threads", "has_barrier", "has_shuffle"]
