"""Block reductions: one thread block per output, its threads splitting the reduction.

The generic kernel (:mod:`toolchain.schedules.gpu.generic`) gives each output one thread,
which sums the whole reduction alone. Where there are few outputs and long reductions (a
batch-1 classifier ``Gemm``: 1,000 outputs of 512 products on a 132-SM GPU is 4 blocks of
250 threads, neighbouring threads reading weights a row apart) the GPU stays mostly idle.
A block reduction instead gives each output one block of ``T`` threads. On a descriptor
with ``warp_size: 32`` it is :func:`shuffle_reduce` (the partials summed by warp
shuffles: a cross-thread reduction, lowered by
:mod:`~toolchain.tir.transform.lower_thread_allreduce`), and :func:`block_row_kernel`
makes a softmax or layer norm with long rows one launch, a block a row. Elsewhere it is
:func:`block_reduce`, a shared-memory tree:

1. the reduction is split ``[None, T]`` and ``rfactor``-ed on its inner part: thread ``t``
   sums elements ``t, t + T, t + 2T, ...`` (consecutive threads read consecutive
   elements: coalesced) into ``partial[t]`` in ``shared`` memory;
2. the partials are reduced as a tree by a second ``rfactor``: ``T / FAN_IN`` threads each
   add :data:`FAN_IN` partials into a second ``shared`` array; then one thread adds those
   and writes the output, with the stage's element-wise tail (bias, activation) folded
   in where it can be;
3. every step is bound to the same ``T`` threads (a CUDA kernel has one block size), the
   smaller steps guarded (``if threadIdx.x < 16``); the barrier pass
   (:mod:`~toolchain.tir.transform.inject_barriers`) puts the ``__syncthreads()`` between
   the steps, and the SIMT emulation runs the kernel as it is.

The rule (:func:`prefers_block_reduce`) reads only shapes and the descriptor: a reduction
of at least :data:`BLOCK_REDUCE_MIN` elements per output whose one-thread-per-output grid
would launch fewer blocks than ``sm_count``.

Before (a batch-1 ``Gemm`` 512 -> 1000 with ReLU, inlined)::

    for i, j, k in T.grid(1, 1000, 512):
        with T.block("C"): C[i, j] += A[i, k] * W[j, k]
    for i, j in T.grid(1, 1000):
        with T.block("D"): D[i, j] = T.max(C[i, j], 0)

after, lowered (``T`` = 128)::

    for j in T.thread_binding(1000, thread="blockIdx.x"):
        C_rf = T.allocate((128,), "float32", scope="shared")
        C_rf_1 = T.allocate((16,), "float32", scope="shared")
        for t in T.thread_binding(128, thread="threadIdx.x"):
            C_rf[t] = 0
            C_rf[t] = C_rf[t] + A[t] * W[j * 512 + t]      # ... 4 steps of 128
        T.storage_sync('shared')
        for t in T.thread_binding(128, thread="threadIdx.x"):
            for r in range(8):
                if t < 16: C_rf_1[t] = C_rf_1[t] + C_rf[t * 8 + r]
        T.storage_sync('shared')
        C = T.allocate((1,), "float32", scope="local")
        for t in T.thread_binding(128, thread="threadIdx.x"):
            for r in range(16):
                if t < 1: C[0] = C[0] + C_rf_1[r]
            if t < 1: D[j] = T.max(C[0], 0)

>>> from toolchain.target import load_target
>>> sm90 = load_target("cuda-sm90")
>>> prefers_block_reduce(1000, 512, sm90), prefers_block_reduce(1000, 64, sm90)
(True, False)
>>> prefers_block_reduce(64 * 56 * 56, 576, sm90)   # a convolution: the grid is full
False
"""

from __future__ import annotations

import math
from typing import Any

from toolchain.errors import KilnError
from toolchain.target import Target
from toolchain.tir import ir
from toolchain.tir.schedule import Schedule

#: the least reduction length (elements per output) that gets a block reduction: shorter
#: ones are summed by one thread each (a block of threads a few elements each would spend
#: more on the tree and its barriers than on the sum)
BLOCK_REDUCE_MIN = 256

#: partials each thread of the tree's middle step adds
FAN_IN = 8

#: the least block size of a block reduction (a warp)
MIN_THREADS = 32

#: lanes of a warp: the shuffle reduction needs a descriptor that says ``warp_size: 32``
WARP = 32


def prefers_block_reduce(outputs: int, length: int, target: Target, threads: int = 256
                         ) -> bool:
    """Whether a reduction of ``outputs`` outputs, each over ``length`` elements, gets
    :func:`block_reduce`: ``length`` at least :data:`BLOCK_REDUCE_MIN` and the generic
    kernel's grid (one thread an output, ``threads``-thread blocks) fewer blocks than
    ``sm_count`` (never on a descriptor without ``sm_count``)."""
    if not target.sm_count or length < BLOCK_REDUCE_MIN:
        return False
    return math.ceil(outputs / threads) < target.sm_count


def block_threads(length: int, most: int) -> int | None:
    """The block size of a block reduction over ``length`` elements: the largest power
    of two up to ``most`` and ``length / 4`` (each thread at least four elements) that
    divides ``length``, at least :data:`MIN_THREADS` and :data:`FAN_IN` squared; else None.

    >>> block_threads(512, 256), block_threads(4096, 256), block_threads(1000, 256)
    (128, 256, None)
    """
    t = 1 << (min(most, length // 4).bit_length() - 1)
    while t >= max(MIN_THREADS, FAN_IN * FAN_IN):
        if length % t == 0:
            return t
        t //= 2
    return None


def _extents(sch: Schedule, block: Any) -> tuple[int, int] | None:
    """(outputs, reduction length) of ``block`` when its loops are its spatial axes then
    its reduction axes, all of constant extent; else None."""
    blk = sch.get(block)
    loops = sch.get_loops(block)
    kinds = [iv.iter_type for iv in blk.iter_vars]
    if len(loops) != len(kinds) or any(not isinstance(iv.dom.extent, ir.IntImm)
                                       for iv in blk.iter_vars):
        return None
    n_sp = sum(1 for k in kinds if k == ir.IterType.SPATIAL)
    if n_sp == 0 or any(k != ir.IterType.SPATIAL for k in kinds[:n_sp]) \
            or any(k != ir.IterType.REDUCE for k in kinds[n_sp:]):
        return None
    ext = [int(iv.dom.extent.value) for iv in blk.iter_vars]
    return math.prod(ext[:n_sp]), math.prod(ext[n_sp:])


def shuffle_threads(length: int, most: int) -> int:
    """The block size of a shuffle block reduction over ``length`` elements: the largest
    power of two up to ``most`` and ``length / 4`` (each thread at least four elements),
    at least a warp. It need not divide ``length``: the last threads' elements past the
    end are guarded.

    >>> shuffle_threads(512, 256), shuffle_threads(4097, 1024), shuffle_threads(1000, 256)
    (128, 1024, 128)
    """
    return max(WARP, 1 << (max(1, min(most, length // 4)).bit_length() - 1))


def try_block_reduce(sch: Schedule, block: Any, target: Target, threads: int
                     ) -> Schedule | None:
    """:func:`block_reduce` where :func:`prefers_block_reduce` takes the stage (``threads``:
    the generic kernel's block size, the most a block reduction uses); else None. On a
    descriptor with ``warp_size`` 32 the reduction is the shuffle one
    (:func:`shuffle_reduce`), else the shared-memory tree."""
    ext = _extents(sch, block)
    if ext is None or not prefers_block_reduce(ext[0], ext[1], target, threads):
        return None
    if target.warp_size == WARP:
        return shuffle_reduce(sch, block, target, shuffle_threads(ext[1], threads))
    t = block_threads(ext[1], threads)
    return None if t is None else block_reduce(sch, block, target, t)


def shuffle_reduce(sch: Schedule, block: Any, target: Target, threads: int
                   ) -> Schedule | None:
    """Reduction stage ``block`` as one block of ``threads`` threads (a power of two, 1 to
    1,024) per output, summed by warp shuffles: thread ``t`` sums elements ``t, t + T, ...``
    in a register (``rfactor``; elements past the end guarded; no partials where the
    row is no longer than the block: thread ``t`` takes element ``t``), then the
    reduction over ``t`` is bound to ``threadIdx.x`` (a cross-thread reduction, lowered by
    :mod:`~toolchain.tir.transform.lower_thread_allreduce`: a shuffle butterfly per warp,
    ``T / 32`` partials in ``shared`` memory, one barrier, a second butterfly). Its one
    element-wise consumer over the outputs (bias, activation, the mean's division) is
    computed by thread 0 in the same kernel. A new schedule, or None (``sch`` untouched)
    where a step does not apply."""
    name = sch.get(block).name_hint
    ext = _extents(sch, block)
    if ext is None:
        return None
    trial = sch.copy()
    try:
        b = trial.get_block(name)
        red = reduction_loop(trial, b)
        rf = None
        if ext[1] > threads:  # else each thread has at most one element: no partials
            _, inner = trial.split(red, [None, threads])
            # partial[t] over elements t, t + T, ... (a register), initialised in the block
            # (its only writer: compute_at moves it into the thread)
            rf = trial.rfactor(inner, 0, init_in_block=True)
            b = trial.get_block(name)
        cons = trial.get_consumers(b)
        tail = len(cons) == 1 and _over(trial, cons[0], ext[0])
        if tail:  # the consumer's loops make the kernel; the reduction goes inside
            lps = trial.get_loops(cons[0])
            row = trial.fuse(*lps) if len(lps) > 1 else lps[0]
            bx, one = trial.split(row, [None, 1])
            _, tx = trial.split(one, [None, threads])  # the output's thread: t < 1
            trial.bind(bx, "blockIdx.x")
            trial.bind(tx, "threadIdx.x")
            trial.compute_at(b, bx)
        else:
            *spatial, _ = trial.get_loops(b)  # the reduction is one loop now
            row = trial.fuse(*spatial) if len(spatial) > 1 else spatial[0]
            bx, _ = trial.split(row, [None, 1])
            trial.bind(bx, "blockIdx.x")
        tree = trial.get_loops(b)[-1]
        if rf is None:  # threads past the row's end contribute the identity
            _, tree = trial.split(tree, [None, threads])
        trial.bind(tree, "threadIdx.x")  # the cross-thread reduction
        if rf is not None:
            trial.compute_at(rf, tree)
            trial.set_scope(rf, 0, "local")
        if tail:
            trial.set_scope(b, 0, "local")  # every thread's copy of the total
        trial.verify(target)
    except KilnError:
        return None
    return trial


def _over(sch: Schedule, block: Any, outputs: int) -> bool:
    """Whether ``block`` is element-wise over ``outputs`` elements (spatial, constant)."""
    ivs = sch.get(block).iter_vars
    return all(iv.iter_type == ir.IterType.SPATIAL and isinstance(iv.dom.extent, ir.IntImm)
               for iv in ivs) and math.prod(int(iv.dom.extent.value) for iv in ivs) == outputs


def block_reduce(sch: Schedule, block: Any, target: Target, threads: int) -> Schedule | None:
    """Reduction stage ``block`` as one block of ``threads`` threads per output (see the
    module docstring), the partials summed by a shared-memory tree (the reduction on a
    descriptor without ``warp_size`` 32; :func:`shuffle_reduce` otherwise); its
    element-wise consumers computed by the output's thread where they can be. A new
    schedule, or None (``sch`` untouched) where a step does not apply."""
    name = sch.get(block).name_hint
    outputs = math.prod(int(iv.dom.extent.value) for iv in sch.get(block).iter_vars
                        if iv.iter_type == ir.IterType.SPATIAL
                        and isinstance(iv.dom.extent, ir.IntImm))
    trial = sch.copy()
    try:
        red = reduction_loop(trial, trial.get_block(name))
        _, inner = trial.split(red, [None, threads])
        rf = trial.rfactor(inner, 0)  # partial[t] over elements t, t + T, ...
        *spatial, tree = trial.get_loops(trial.get_block(name))
        mid, _ = trial.split(tree, [None, FAN_IN])
        rf2 = trial.rfactor(mid, 0)  # partial2[u] = sum of partial[u * FAN_IN + r]
        b = trial.get_block(name)
        *spatial, _ = trial.get_loops(b)
        row = trial.fuse(*spatial) if len(spatial) > 1 else spatial[0]
        bx, one = trial.split(row, [None, 1])
        trial.bind(bx, "blockIdx.x")
        tail = _fold_consumers(trial, b, one, outputs)
        _, tx = trial.split(one, [None, threads])  # the output's thread: t < 1
        trial.bind(tx, "threadIdx.x")
        trial.compute_at(rf2, bx)
        trial.compute_at(rf, bx)
        lp = trial.get_loops(rf)  # bx, the serial steps, the threads
        trial.reorder(lp[-1], lp[-2])
        trial.bind(lp[-1], "threadIdx.x")
        _, tx2 = trial.split(trial.get_loops(rf2)[1], [None, threads])  # t < T / FAN_IN
        trial.bind(tx2, "threadIdx.x")
        trial.set_scope(rf, 0, "shared")
        trial.set_scope(rf2, 0, "shared")
        if tail:
            trial.set_scope(b, 0, "local")  # read only by the output's thread
        trial.verify(target)
    except KilnError:
        return None
    return trial


def _fold_consumers(sch: Schedule, block: Any, at: Any, outputs: int) -> bool:
    """Compute ``block``'s element-wise consumers over its ``outputs`` outputs under loop
    ``at`` (the output's thread); whether every reader of ``block``'s result is now there."""
    done = True
    for c in sch.get_consumers(block):
        ivs = sch.get(c).iter_vars
        if any(iv.iter_type != ir.IterType.SPATIAL or not isinstance(iv.dom.extent, ir.IntImm)
               for iv in ivs) \
                or math.prod(int(iv.dom.extent.value) for iv in ivs) != outputs:
            done = False  # a reduction, or a stage over more than the outputs (a row)
            continue
        try:
            sch.reverse_compute_at(c, at)
        except KilnError:
            done = False
    return done and bool(sch.get_consumers(block))


def reduction_loop(sch: Schedule, b: Any) -> Any:
    """Block ``b``'s reduction loops (its innermost ones) fused into one loop."""
    n_red = sum(1 for iv in sch.get(b).iter_vars if iv.iter_type != ir.IterType.SPATIAL)
    loops = sch.get_loops(b)
    return sch.fuse(*loops[-n_red:]) if n_red > 1 else loops[-1]


def row_group(sch: Schedule) -> tuple[list[Any], int, int] | None:
    """``(blocks, rows, row length)`` of a row kernel's group: at least three blocks, the
    last an element-wise output (no reduction variable) over at least two loops of
    constant extent, the last one along the row, writing one buffer; None otherwise
    (shared by :func:`block_row_kernel` and :func:`toolchain.schedules.gpu.generic.row_kernel`,
    which each add their own conditions on the blocks before it)."""
    blocks = sch.get_child_blocks(sch.get_block("root"))
    if len(blocks) < 3 or any(iv.iter_type != ir.IterType.SPATIAL
                              for iv in sch.get(blocks[-1]).iter_vars):
        return None
    out = blocks[-1]
    ext = [sch.get(lp).extent for lp in sch.get_loops(out)]
    if len(ext) < 2 or not all(isinstance(e, ir.IntImm) for e in ext) \
            or len(sch.get(out).writes) != 1:
        return None
    return blocks, math.prod(int(e.value) for e in ext[:-1]), int(ext[-1].value)


def block_row_kernel(sch: Schedule, target: Target, threads: int) -> Schedule | None:
    """A group of row reductions feeding one element-wise output (softmax: max, then the
    sum of exponentials, then the division; layer norm: the mean, then the variance, then
    the normalisation) as **one kernel of one block per row**, for rows too long for
    :func:`~toolchain.schedules.gpu.generic.row_kernel`'s thread a row: each reduction a
    shuffle allreduce of the block's ``T`` threads (every thread strides over the row into
    a register, a warp butterfly, ``T / 32`` partials in ``shared`` memory, one barrier,
    a second butterfly: every thread holds the row's value), then the row's outputs,
    ``T`` threads striding over them. Only on a descriptor with ``warp_size`` 32, where
    every reduction gives one value a row (the output's axes but its last) and a row has
    at least :data:`BLOCK_REDUCE_MIN` elements. None (``sch`` untouched) where it does
    not apply.

    Before (``Softmax`` of 2 x 4097, inlined)::

        for i0, i1, k in T.grid(2, 1, 4097):
            with T.block("softmax_max"): ...
        for i0, i1, k in T.grid(2, 1, 4097):
            with T.block("softmax_sum"): ...
        for i0, i1 in T.grid(2, 4097):
            with T.block("softmax"): ...

    after, lowered (``T`` = 256; the sum's steps like the max's)::

        for row in T.thread_binding(2, thread="blockIdx.x"):
            softmax_max = T.allocate((1,), "float32", scope="local")
            for t in T.thread_binding(256, thread="threadIdx.x"):
                softmax_max_rf[0] = T.float32("-inf")
                softmax_max_rf[0] = T.max(softmax_max_rf[0], x[row * 4097 + t])  # 17 steps
                softmax_max_red[0] = softmax_max_rf[0]
                softmax_max_red[0] = T.max(softmax_max_red[0], T.shfl_xor_sync(..., 16, 32))
                ...
                softmax_max_warps[t // 32] = ...; T.storage_sync('shared'); ...
                softmax_max[0] = softmax_max_red[0]
            ...
            for i1_0 in range(17):
                for t in T.thread_binding(256, thread="threadIdx.x"):
                    if i1_0 * 256 + t < 4097:
                        softmax[..] = T.exp(x[..] - softmax_max[0]) / softmax_sum[0]
    """
    from toolchain.tir.schedule import state as st

    if target.warp_size != WARP:
        return None
    group = row_group(sch)
    if group is None:
        return None
    blocks, rows, length = group
    out = blocks[-1]
    if length < BLOCK_REDUCE_MIN or any(_extents(sch, b) != (rows, length)
                                        for b in blocks[:-1]):
        return None
    t = shuffle_threads(length, threads)
    names = [sch.get(b).name_hint for b in blocks[:-1]]
    trial = sch.copy()
    try:
        rfs = {}
        for name in names:  # at the root: each reduction's per-thread partials
            red = reduction_loop(trial, trial.get_block(name))
            _, inner = trial.split(red, [None, t])
            rfs[name] = trial.rfactor(inner, 0, init_in_block=True)
        b_out = trial.get_block(sch.get(out).name_hint)
        lps = trial.get_loops(b_out)
        row = trial.fuse(*lps[:-1]) if len(lps) > 2 else lps[0]
        trial.bind(row, "blockIdx.x")
        _, tx = trial.split(lps[-1], [None, t])
        trial.bind(tx, "threadIdx.x")
        for name in reversed(names):  # the last reduction first: its readers are inside
            b = trial.get_block(name)
            trial.compute_at(b, row)
            tree = trial.get_loops(b)[-1]
            trial.bind(tree, "threadIdx.x")  # the cross-thread reduction
            trial.compute_at(rfs[name], tree)
            trial.set_scope(rfs[name], 0, "local")
            trial.set_scope(b, 0, "local")  # every thread's copy of the row's value
        trial.verify(target)
        if len(st.block_names(trial.mod)) != len(blocks) * 2 - 1:
            return None
    except KilnError:
        return None
    return trial
