"""The generic GPU schedule: every fused group as kernels of one thread per output element.

Every stage that can be inlined is (element-wise producers into their consumers); each
stage left — a reduction (convolution, matmul, softmax's max and sum, a pool) or a group
output — becomes one ``__global__`` kernel: its spatial loops fused, split into blocks of
:data:`THREADS` threads and bound to ``blockIdx.x`` / ``threadIdx.x``; its reduction loops
run inside the thread. Intermediate buffers between two kernels of a group live in the
kernel's scratch in the device workspace (the memory plan reserves it). Correct for every
op Kiln supports; the tiled shared-memory schedules of GEMM and convolution replace it where
they apply (``docs/cuda.md``, "What is next").

Before (``Relu(MatMul(x, w))``, 64 x 48 output)::

    for i, j, k in T.grid(64, 48, 32):
        with T.block("T_matmul"): ...
    for i, j in T.grid(64, 48):
        with T.block("T_relu"): ...

after::

    for i_j_fused_0 in T.thread_binding(12, thread="blockIdx.x"):
        for i_j_fused_1 in T.thread_binding(256, thread="threadIdx.x"):
            for k in range(32):
                with T.block("T_matmul"): ...
    for i_j_fused_0 in T.thread_binding(12, thread="blockIdx.x"):
        for i_j_fused_1 in T.thread_binding(256, thread="threadIdx.x"):
            with T.block("T_relu"): ...

>>> from toolchain import te
>>> from toolchain.target import load_target
>>> A = te.placeholder((64, 32), name="A"); W = te.placeholder((32, 48), name="W")
>>> k = te.reduce_axis((0, 32), name="k")
>>> C = te.compute((64, 48), lambda i, j: te.sum(A[i, k] * W[k, j], axis=k), name="C")
>>> D = te.compute((64, 48), lambda i, j: te.max(C[i, j], te.const(0.0)), name="D")
>>> sch = schedule_gpu(te.create_prim_func([A, W, D]), load_target("cuda-sm80"))
>>> "blockIdx.x" in str(sch.mod) and "threadIdx.x" in str(sch.mod)
True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from toolchain.errors import KilnError
from toolchain.graph.ir import Node
from toolchain.schedules.gpu.reduce import block_row_kernel, row_group, try_block_reduce
from toolchain.schedules.registry import OpSchedule
from toolchain.target import Target
from toolchain.tir import ir
from toolchain.tir.schedule import Schedule
from toolchain.tir.schedule import state as st

#: threads per block of the generic kernels (a multiple of the warp size)
THREADS = 256


def _spatial_loops(sch: Schedule, block: Any, loops: list[Any]) -> int:
    """How many of ``block``'s outer loops run over spatial iteration variables only."""
    blk = sch.get(block)
    n = sum(1 for iv in blk.iter_vars if iv.iter_type == ir.IterType.SPATIAL)
    return min(n, len(loops))


def _inline(sch: Schedule, keep: set[str] | frozenset[str] = frozenset()) -> None:
    """Inline every stage that can be (consumers first, so chains collapse), but those
    named in ``keep``."""
    root = sch.get_block("root")
    for b in reversed(sch.get_child_blocks(root)):
        if sch.get(b).name_hint in keep:
            continue
        try:
            sch.compute_inline(b)
        except KilnError:
            pass  # a reduction, an output, or a stage read in several ways: a kernel


def threads_for(total: int, most: int) -> tuple[int, bool]:
    """(threads per block, whether they divide ``total``) for ``total`` outputs: the
    largest multiple of the warp size up to ``most`` that divides ``total``, else the
    largest divisor from 64 up, else ``most`` (the last block then has idle threads).

    >>> threads_for(4704, 256), threads_for(3072, 256), threads_for(4099, 256)
    ((224, True), (256, True), (256, False))
    """
    for d in range(most - most % 32, 31, -32):
        if total % d == 0:
            return d, True
    for d in range(most, 63, -1):
        if total % d == 0:
            return d, True
    return most, False


def _bind(sch: Schedule, block: Any, threads: int, exact: bool = False) -> Any:
    """Bind ``block``'s fused spatial loops to blocks and threads; the innermost bound
    loop (None when nothing is bound, or when ``exact`` and no block size divides the
    outputs: the threads would need a guard)."""
    loops = sch.get_loops(block)
    n = _spatial_loops(sch, block, loops)
    if n == 0:
        return None  # a scalar result: one thread of one block
    fused = sch.fuse(*loops[:n]) if n > 1 else loops[0]
    extent = sch.get(fused).extent
    total = int(extent.value) if isinstance(extent, ir.IntImm) else threads + 1
    if total == 1:
        return None  # one element: one thread of one block, no index to bind
    if total <= threads:
        sch.bind(fused, "threadIdx.x")  # one block
        return fused
    threads, divides = threads_for(total, threads)
    if exact and not divides:
        return None
    bx, tx = sch.split(fused, [None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return tx


def _bound(sch: Schedule, block: Any) -> bool:
    """Whether ``block`` is already under a loop bound to a thread axis."""
    return any((sch.get(lp).thread_tag or "") for lp in sch.get_loops(block))


def _is_reduction(sch: Schedule, block: Any) -> bool:
    return any(iv.iter_type != ir.IterType.SPATIAL for iv in sch.get(block).iter_vars)


def fold_tail(sch: Schedule, copy: Any, prefix: bool = False) -> None:
    """Fold the element-wise consumers of a write-back block ``copy`` (bias, activation,
    residual add) into it, one at a time, until none folds. ``prefix``: a consumer may
    read a prefix of the flat index ``copy`` writes (``reverse_compute_inline(..,
    prefix=True)``: the tensor-core convolution's pixels padded to a multiple of 16)."""
    changed = True
    while changed:
        changed = False
        for c in sch.get_consumers(copy):
            try:
                if prefix:
                    sch.reverse_compute_inline(c, prefix=True)
                else:
                    sch.reverse_compute_inline(c)
                changed = True
                break
            except KilnError:
                continue


def _accumulate_in_registers(sch: Schedule, block: Any, threads: int
                             ) -> tuple[Schedule, Any] | None:
    """A reduction's kernel with its accumulator in a register and the element-wise
    stages that read its result folded into the write-back: ``cache_write(.., "local")``,
    the consumers ``reverse_compute_inline``d into the copy, the copy computed under the
    thread loop. (The new schedule, the write-back block) or None (the schedule untouched)
    where a step does not apply."""
    trial = sch.copy()
    try:
        copy = trial.cache_write(block, 0, "local")
        fold_tail(trial, copy)  # the element-wise tail (bias, activation, ...) into the copy
        # no guard on the threads: the accumulator then lives in one register per thread
        # (compaction keeps a guarded buffer whole)
        tx = _bind(trial, block, threads, exact=True)
        if tx is None:
            return None
        trial.reverse_compute_at(copy, tx)
    except KilnError:
        return None
    return trial, copy


def generic_stage(sch: Schedule, block: Any, threads: int) -> Schedule:
    """One stage as the generic kernel of ``threads``-thread blocks: a reduction with its
    accumulator in a register and its element-wise tail folded in where that applies
    (a new schedule), else its fused spatial loops bound (``sch`` itself, changed)."""
    better = _accumulate_in_registers(sch, block, threads) if _is_reduction(sch, block) \
        else None
    if better is not None:
        return better[0]
    _bind(sch, block, threads)
    return sch


#: ``(schedule, block) -> schedule or None``: a better kernel for one reduction stage
#: (the tiled GEMM of :mod:`toolchain.schedules.gpu.gemm`), tried before the generic one
StageSchedule = Callable[[Schedule, Any, Target], "Schedule | None"]


def schedule_gpu(func: ir.PrimFunc, target: Target, tiled: StageSchedule | None = None,
                 keep: Callable[[Schedule], set[str]] | None = None) -> Schedule:
    """The generic GPU schedule of ``func`` (see the module docstring); ``tiled``, when
    given, schedules the reduction stages it takes (returns a schedule for) instead.
    ``keep(sch)`` names stages not to inline at first (the operands ``tiled`` stages into
    shared memory); one left over after its consumer is scheduled is inlined then (or, if
    it cannot be, gets a kernel of its own). A reduction stage neither takes is a block
    reduction where :func:`~toolchain.schedules.gpu.reduce.prefers_block_reduce` says so
    (long reductions, few outputs), else the generic kernel."""
    sch = Schedule(func, target)
    kept = keep(sch) if keep is not None else set()
    _inline(sch, kept)
    threads = min(THREADS, target.max_threads_per_block or THREADS)
    if not kept:  # a row reduction group: a thread a row, else (long rows) a block a row
        rows = row_kernel(sch, target, threads) or block_row_kernel(sch, target, threads)
        if rows is not None:
            return rows
    # the stages left after inlining; a reduction's write-back block (made below) is
    # scheduled with it, and the element-wise stages folded into that block are gone
    for name in [sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_block("root"))]:
        if name not in st.block_names(sch.mod) or name in kept:
            continue
        b = sch.get_block(name)
        if _bound(sch, b):
            continue  # computed inside an earlier stage's kernel (a block reduction's tail)
        if tiled is not None and _is_reduction(sch, b):
            done = tiled(sch, b, target)
            if done is not None:
                sch = done
                continue
            _inline_kept(sch, b, kept)
        if _is_reduction(sch, b):
            done = try_block_reduce(sch, b, target, threads)
            if done is not None:
                sch = done
                continue
        sch = generic_stage(sch, b, threads)
    for name in sorted(kept & set(st.block_names(sch.mod))):  # a kept stage left over
        b = sch.get_block(name)
        if not _bound(sch, b):
            _bind(sch, b, threads)
    sch.verify(target)
    return sch


#: :func:`row_kernel` only where a row's thread makes at most this many iterations, all
#: its stages together (layer norm of 64: 3 x 64; the encoder's attention rows: 32 x 16
#: scores, 32 for the max, 32 x 16 for the weighted sum, 32 for the sum, 16 outputs)
ROW_WORK_MAX = 2048


def row_kernel(sch: Schedule, target: Target, threads: int) -> Schedule | None:
    """The group as **one kernel of one thread per row** where it is two or more
    reductions (one reduction and its tail are one kernel already; layer
    norm's sum and variance, softmax's max and sum, attention's scores, max, weighted sum
    and sum) feeding one element-wise output, each computing for a row (the output's axes
    but its last) only that row's part, where the reductions' own kernels would not fill
    the GPU anyway (fewer blocks than ``sm_count`` at one thread a row) and a row's thread
    makes at most :data:`ROW_WORK_MAX` iterations: each reduction ``compute_at`` the row's
    thread, its results in registers or the thread's local memory (``local``), then the
    row's outputs. One launch instead of one per stage (the H200 run: the transformer
    encoder's 2 x 32 x 64 layer norms, 3 launches, 0.014-0.017 ms, its attention, 5
    launches, 0.030 ms, while one launch of a small kernel takes 0.004). None (``sch``
    untouched) where it does not apply.

    Before (``LayerNormalization`` of 2 x 32 x 64, inlined)::

        for i0, i1, i2, k2 in T.grid(2, 32, 1, 64):
            with T.block("layer_norm_sum"): ...
        for i0, i1, i2, k2 in T.grid(2, 32, 1, 64):
            with T.block("layer_norm_var_sum"): ...
        for i0, i1, i2 in T.grid(2, 32, 64):
            with T.block("layer_norm"): ...

    after, lowered::

        for i0_i1_fused_0 in T.thread_binding(1, thread="blockIdx.x"):
            for i0_i1_fused_1 in T.thread_binding(64, thread="threadIdx.x"):
                layer_norm_sum = T.allocate((1,), "float32", scope="local")
                layer_norm_var_sum = T.allocate((1,), "float32", scope="local")
                for ax3 in range(64): layer_norm_sum[0] += x[i0_i1_fused_1 * 64 + ax3]
                for ax3_1 in range(64): layer_norm_var_sum[0] += ...
                for i2 in range(64): layer_norm[i0_i1_fused_1 * 64 + i2] = ...
    """
    if not target.sm_count:
        return None
    group = row_group(sch)
    if group is None or not all(_is_reduction(sch, b) for b in group[0][:-1]):
        return None
    blocks, rows, work = group
    out = blocks[-1]
    if -(-rows // threads) >= target.sm_count:
        return None
    trial = sch.copy()
    try:
        b_out = trial.get_block(sch.get(out).name_hint)
        lps = trial.get_loops(b_out)
        row = trial.fuse(*lps[:-1]) if len(lps) > 2 else lps[0]
        tx = row
        if rows > threads:
            per_block, divides = threads_for(rows, threads)
            if not divides:
                return None  # a guard on the rows' threads: the registers would be arrays
            bx, tx = trial.split(row, [None, per_block])
            trial.bind(bx, "blockIdx.x")
        names = [sch.get(b).name_hint for b in blocks[:-1]]
        for name in reversed(names):
            trial.compute_at(trial.get_block(name), tx)
        for name in names:
            b = trial.get_block(name)
            n = _per_row(trial, b, tx, rows)
            if n is None:
                return None  # a row's thread would compute more than its own row's part
            work += n
            trial.set_scope(b, trial.get(b).writes[0].buffer.name, "local")
        if work > ROW_WORK_MAX:
            return None
        trial.bind(tx, "threadIdx.x")
        trial.verify(target)
    except KilnError:
        return None
    return trial


def _per_row(sch: Schedule, block: Any, at: Any, rows: int) -> int | None:
    """The iterations ``block`` makes under loop ``at`` (one row's thread) when they add
    up, over the ``rows`` threads, to the block's own (no row computes another's part);
    else None."""
    loops = sch.get_loops(block)
    at_var = sch.get(at).loop_var
    inner = loops[next(i for i, lp in enumerate(loops) if sch.get(lp).loop_var is at_var) + 1:]
    n = 1
    for lp in inner:
        e = sch.get(lp).extent
        if not isinstance(e, ir.IntImm):
            return None
        n *= int(e.value)
    total = 1
    for iv in sch.get(block).iter_vars:
        if not isinstance(iv.dom.extent, ir.IntImm):
            return None
        total *= int(iv.dom.extent.value)
    return n if n * rows == total else None


def _inline_kept(sch: Schedule, block: Any, kept: set[str]) -> None:
    """Inline the kept producers of ``block`` (its tiled kernel did not apply)."""
    for p in sch.get_producers(block):
        if sch.get(p).name_hint in kept:
            try:
                sch.compute_inline(p)
            except KilnError:
                pass  # it gets a kernel of its own


def fused_schedule(node: Node, target: Target) -> OpSchedule:
    """The strategy-table entry for ``Fused`` nodes on GPU targets: a group whose anchor
    op has an entry of its own on the target (``("Conv", "gpu")``: the tiled GEMM) is
    scheduled by that entry, handed the whole group (its kernels include the tail); any
    other group is its composed compute
    (:func:`~toolchain.schedules.generic.fused.fused_compute`) under :func:`schedule_gpu`."""
    from toolchain import te
    from toolchain.codegen.names import TE_NAMES, sanitize
    from toolchain.schedules import registry
    from toolchain.schedules.generic.fused import anchor_of, fused_compute

    anchor = anchor_of(node)
    fn = registry.lookup(anchor.op, target) if anchor is not None else None
    if fn is not None and fn is not fused_schedule:
        return fn(node, target)  # the anchor's kernel (the tiled GEMM), tail included
    fc = fused_compute(node)
    func = te.create_prim_func(fc.inputs + fc.outputs,
                               name=sanitize(node.attrs["kernel"], **TE_NAMES))
    return OpSchedule(schedule_gpu(func, target), list(fc.input_values),
                      list(fc.output_values), {"schedule": "gpu generic",
                                               "threads": THREADS})
