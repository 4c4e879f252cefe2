"""``double_buffer``: two shared tiles for a staged operand, so that the fetch of the next
step overlaps the products of this one (the lowering pass
:mod:`toolchain.tir.transform.inject_double_buffer` does the rewrite)."""

from __future__ import annotations

from toolchain.errors import ScheduleError
from toolchain.tir import ir
from toolchain.tir.schedule.handles import BlockRV
from toolchain.tir.schedule.state import ScheduleState


def double_buffer(state: ScheduleState, block: BlockRV, stages: int = 2,
                  in_flight: int = 0) -> None:
    """Double-buffer the shared buffer that ``block`` fills, a copy ``compute_at`` a serial
    step loop (the tiled GEMM's fetch of one operand's tile per reduction step).

    Recorded as the function attribute ``double_buffer`` (the buffer names); lowering
    gives the buffer two halves, fetches step 0 before the loop and, in step ``k``, the tile
    of step ``k + 1`` into one half while the products read the other; the barriers come
    from ``inject_barriers`` as always (one a step instead of two). Before, lowered::

        for k_0 in range(8):
            A_shared = T.allocate((256,), "float32", scope="shared")
            A_shared[t] = A[k_0 * 256 + t]
            T.storage_sync('shared')
            C_local[0] = C_local[0] + A_shared[i] * B[..]
            T.storage_sync('shared')

    ``sch.double_buffer(sch.get_block("A_shared"))``; after, lowered::

        A_shared = T.allocate((512,), "float32", scope="shared")
        A_shared[t] = A[t]
        T.storage_sync('shared')
        for k_0 in range(8):
            if k_0 + 1 < 8:
                A_shared[(k_0 + 1) % 2 * 256 + t] = A[(k_0 + 1) * 256 + t]
            C_local[0] = C_local[0] + A_shared[k_0 % 2 * 256 + i] * B[..]
            T.storage_sync('shared')

    ``stages`` > 2: a deeper pipeline (``stages`` copies of the tile, the fetches of steps
    ``0 .. stages - 2`` before the loop, step ``k`` fetching step ``k + stages - 1`` into
    copy ``(k + stages - 1) % stages``), so that a fetch has ``stages - 1`` steps of
    products to land in (with ``cp.async``: the kernel's barriers inside the loop wait for
    all but the ``stages - 2`` latest groups of copies; ``toolchain.codegen.cuda``).

    ``in_flight`` g > 0: the step's products may still read their copy after the step
    (asynchronous products -- ``wgmma`` -- retired g steps later): the fetches run only
    ``stages - 1 - g`` steps ahead, so that step ``k`` overwrites the copy of step
    ``k - 1 - g``, whose products are retired (the function attribute
    ``buffer_in_flight``). With 3 stages and g 1 the loop above becomes::

        for k_0 in T.serial(8, annotations={'pipeline_stages': 2}):  # fetches 1 ahead
            if k_0 + 1 < 8:
                A_shared[(k_0 + 1) % 3 * 256 + t] = A[(k_0 + 1) * 256 + t]
            ... the products of step k_0 on A_shared[k_0 % 3 * 256 ..] (in flight)

    Refuses a block that writes no ``shared`` buffer or is under no serial loop (nothing
    to overlap), ``stages`` outside 2..8 and ``in_flight`` leaving no step to fetch ahead
    (``stages - 1 - in_flight`` under 1). It costs ``stages`` times the buffer's
    shared memory, which ``Schedule.verify`` and the tiled GEMM's lowered count see.
    """
    from toolchain.tir.transform.inject_double_buffer import (
        BUFFER_IN_FLIGHT,
        BUFFER_STAGES,
        DOUBLE_BUFFER,
    )

    if not 2 <= stages <= 8:
        raise ScheduleError(f"double_buffer: stages must be 2 (double buffering) to 8, not "
                            f"{stages}")
    if in_flight < 0 or stages - 1 - in_flight < 1:
        raise ScheduleError(f"double_buffer: {stages} stages with {in_flight} steps of "
                            "products in flight leave no step to fetch ahead (stages must "
                            "be at least in_flight + 2)")

    r, loops = state.get_block(block)
    if len(r.block.writes) != 1 or not r.block.writes[0].buffer.scope.startswith("shared"):
        raise ScheduleError(f"double_buffer: block {r.block.name_hint!r} must write one shared "
                            "buffer (a cache_read copy or a stage moved to shared memory)")
    buf = r.block.writes[0].buffer
    if not any(isinstance(lp, ir.For) and lp.kind in ("serial", "unrolled")
               and not lp.thread_tag and _reads_under(lp, buf, r.block) for lp in loops):
        raise ScheduleError(f"double_buffer: block {r.block.name_hint!r} is under no serial "
                            f"loop that also holds a reader of {buf.name}; compute_at it the "
                            "step loop of its consumer first (the fetch per step that double "
                            "buffering overlaps with the step's products)")
    names = tuple(dict.fromkeys((*state.func.attrs.get(DOUBLE_BUFFER, ()), buf.name)))
    f = state.func
    attrs = {**f.attrs, DOUBLE_BUFFER: names}
    if stages != 2:  # (name, stages) pairs; absent: every buffer two
        depth = dict(f.attrs.get(BUFFER_STAGES, ()))
        depth[buf.name] = stages
        attrs[BUFFER_STAGES] = tuple(sorted(depth.items()))
    if in_flight:  # (name, steps in flight) pairs; absent: none
        flying = dict(f.attrs.get(BUFFER_IN_FLIGHT, ()))
        flying[buf.name] = in_flight
        attrs[BUFFER_IN_FLIGHT] = tuple(sorted(flying.items()))
    state.replace(ir.PrimFunc(f.params, f.body, f.name, attrs))


def _reads_under(loop: ir.For, buf: ir.Buffer, writer: ir.Block) -> bool:
    """Whether a block other than ``writer`` under ``loop`` reads ``buf``."""
    from toolchain.tir.schedule import state as st

    return any(isinstance(n, ir.Block) and n is not writer
               and any(rg.buffer is buf for rg in n.reads) for n, _ in st.walk(loop.body))


__all__ = ["double_buffer"]
