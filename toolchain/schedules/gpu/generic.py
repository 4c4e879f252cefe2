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

from typing import Any

from toolchain.errors import KilnError
from toolchain.graph.ir import Node
from toolchain.schedules.registry import OpSchedule
from toolchain.target import Target
from toolchain.tir import ir
from toolchain.tir.schedule import Schedule

#: threads per block of the generic kernels (a multiple of the warp size)
THREADS = 256


def _spatial_loops(sch: Schedule, block: Any, loops: list[Any]) -> int:
    """How many of ``block``'s outer loops run over spatial iteration variables only."""
    blk = sch.get(block)
    n = sum(1 for iv in blk.iter_vars if iv.iter_type == ir.IterType.SPATIAL)
    return min(n, len(loops))


def _inline(sch: Schedule) -> None:
    """Inline every stage that can be (consumers first, so chains collapse)."""
    root = sch.get_block("root")
    for b in reversed(sch.get_child_blocks(root)):
        try:
            sch.compute_inline(b)
        except KilnError:
            pass  # a reduction, an output, or a stage read in several ways: a kernel


def _bind(sch: Schedule, block: Any, threads: int) -> None:
    loops = sch.get_loops(block)
    n = _spatial_loops(sch, block, loops)
    if n == 0:
        return  # a scalar result: one thread of one block
    fused = sch.fuse(*loops[:n]) if n > 1 else loops[0]
    extent = sch.get(fused).extent
    total = int(extent.value) if isinstance(extent, ir.IntImm) else threads + 1
    if total == 1:
        return  # one element: one thread of one block, no index to bind
    if total <= threads:
        sch.bind(fused, "threadIdx.x")  # one block
        return
    bx, tx = sch.split(fused, [None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")


def schedule_gpu(func: ir.PrimFunc, target: Target) -> Schedule:
    """The generic GPU schedule of ``func`` (see the module docstring)."""
    sch = Schedule(func, target)
    _inline(sch)
    threads = min(THREADS, target.max_threads_per_block or THREADS)
    for b in sch.get_child_blocks(sch.get_block("root")):
        _bind(sch, b, threads)
    sch.verify(target)
    return sch


def fused_schedule(node: Node, target: Target) -> OpSchedule:
    """The strategy-table entry for ``Fused`` nodes on GPU targets: the group's composed
    compute (:func:`~toolchain.schedules.generic.fused.fused_compute`) under
    :func:`schedule_gpu`."""
    from toolchain import te
    from toolchain.codegen.names import TE_NAMES, sanitize
    from toolchain.schedules.generic.fused import fused_compute

    fc = fused_compute(node)
    func = te.create_prim_func(fc.inputs + fc.outputs,
                               name=sanitize(node.attrs["kernel"], **TE_NAMES))
    return OpSchedule(schedule_gpu(func, target), list(fc.input_values),
                      list(fc.output_values), {"schedule": "gpu generic",
                                               "threads": THREADS})
