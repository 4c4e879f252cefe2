"""Queries: get_block, get_loops, get_child_blocks, get_producers, get_consumers.

They change nothing; like the primitives they take the :class:`ScheduleState` first and
are called as ``sch.get_block(...)`` (which records them in the trace, so that a replayed
trace can refer to the handles they return).

>>> from toolchain import te
>>> from toolchain.tir.schedule.state import ScheduleState
>>> A = te.placeholder((16, 8), name="A")
>>> B = te.compute((16, 8), lambda i, j: A[i, j] * 2.0, name="B")
>>> C = te.compute((16, 8), lambda i, j: B[i, j] + 1.0, name="C")
>>> state = ScheduleState(te.create_prim_func([A, C]))
>>> get_loops(state, get_block(state, "C"))
[LoopRV('i'), LoopRV('j')]
>>> get_producers(state, BlockRV("C")), get_consumers(state, BlockRV("B"))
([BlockRV('B')], [BlockRV('C')])
"""

from __future__ import annotations

from toolchain.tir import ir
from toolchain.tir.schedule import state as st
from toolchain.tir.schedule.handles import BlockRV, LoopRV
from toolchain.tir.schedule.state import ScheduleState


def get_block(state: ScheduleState, name: str) -> BlockRV:
    """The block called ``name``: ``sch.get_block("C")``."""
    state.get_block(BlockRV(name))
    return BlockRV(name)


def get_loops(state: ScheduleState, block: BlockRV) -> list[LoopRV]:
    """The loops around ``block`` up to its enclosing block, outermost first."""
    _, path = state.get_block(block)
    return [LoopRV(f.loop_var) for f in st.loops_of(path)]


def get_child_blocks(state: ScheduleState, parent: BlockRV | LoopRV) -> list[BlockRV]:
    """Blocks directly under a block or loop (not nested in another block)."""
    if isinstance(parent, LoopRV):
        node: ir.Stmt = state.get_loop(parent)[0]
    else:
        node = state.get_block(parent)[0].block.body
    return [BlockRV(r.block.name_hint) for r, _ in st.blocks_under(node)]


def get_producers(state: ScheduleState, block: BlockRV) -> list[BlockRV]:
    """Blocks that write a buffer ``block`` reads (program order)."""
    r, _ = state.get_block(block)
    out: list[str] = []
    for rd in r.block.reads:
        for w, _ in st.writers(state.func, rd.buffer, r.block):
            if w.block.name_hint not in out:
                out.append(w.block.name_hint)
    return [BlockRV(n) for n in out]


def get_consumers(state: ScheduleState, block: BlockRV) -> list[BlockRV]:
    """Blocks that read a buffer ``block`` writes (program order)."""
    r, _ = state.get_block(block)
    out: list[str] = []
    for w in r.block.writes:
        for rd, _ in st.readers(state.func, w.buffer, r.block):
            if rd.block.name_hint not in out:
                out.append(rd.block.name_hint)
    return [BlockRV(n) for n in out]
