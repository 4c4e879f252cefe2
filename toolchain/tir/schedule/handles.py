"""Handles to blocks and loops of a scheduled function.

A handle names a node, not a position: a :class:`BlockRV` holds the block's unique name and
a :class:`LoopRV` its loop variable, both of which survive the rebuilding that every
primitive does. :meth:`ScheduleState.get_block` / :meth:`ScheduleState.get_loop
<toolchain.tir.schedule.state.ScheduleState.get_loop>` turn a handle into the node.

>>> from toolchain.tir import ir
>>> LoopRV(ir.Var("i")), BlockRV("C")
(LoopRV('i'), BlockRV('C'))
"""

from __future__ import annotations

from toolchain.tir import ir


class BlockRV:
    """A handle to a block (by its unique name)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"BlockRV({self.name!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BlockRV) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("block", self.name))


class LoopRV:
    """A handle to a loop (by its loop variable, which survives other transformations)."""

    def __init__(self, var: ir.Var) -> None:
        self.var = var

    @property
    def name(self) -> str:
        return self.var.name

    def __repr__(self) -> str:
        return f"LoopRV({self.var.name!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LoopRV) and other.var is self.var

    def __hash__(self) -> int:
        return hash(("loop", id(self.var)))
