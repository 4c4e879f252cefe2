"""The decoupled machine's control skeleton: fetch, three in-order engines, token queues.

:func:`schedule` plays the protocol of hw/ISA.md section 3 — fetch dispatching in order into
bounded command queues, each engine popping tokens, executing, then pushing into bounded token
queues — and calls ``execute(index)`` for every instruction in one legal interleaving.  It
either completes or raises :class:`Deadlock` describing what every engine is blocked on.  The
static checker runs it without data; the functional simulator's token mode runs it with data.

Because engines are deterministic in-order processes talking only through blocking FIFOs, the
machine is determinate: whether it deadlocks does not depend on the interleaving chosen
(``seed`` only changes the order of independent work, which is how tests expose data races).

Example::

    >>> from toolchain.vta.isa import Load, Gemm, Finish, MEM_INP
    >>> prog = [Load(memory_type=MEM_INP, push_next=True), Gemm(), Finish()]
    >>> schedule(prog, cmd_depth=4, token_depth=2)      # execution order
    [0, 1, 2]
    >>> try:
    ...     schedule([Gemm(pop_prev=True), Finish()], cmd_depth=4, token_depth=2)
    ... except Deadlock as d:
    ...     print(d.blocked["compute"])
    blocked at instruction 0 (GEMM) waiting to pop l2c (queue empty)
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from toolchain.vta.isa import ENGINE_NAMES, MEM_NAMES, Instruction

QUEUE_NAMES = ("l2c", "c2l", "c2s", "s2c")


def describe(insn: Instruction) -> str:
    """Short name of an instruction for messages, e.g. 'LOAD INP' or 'GEMM'."""
    mem = getattr(insn, "memory_type", None)
    return f"{insn.name} {MEM_NAMES[mem]}" if insn.name == "LOAD" else insn.name


@dataclass
class Deadlock(Exception):
    """The machine cannot make progress; ``blocked`` maps engine name -> explanation."""

    blocked: dict[str, str]
    done: list[bool]

    def __str__(self) -> str:
        return "; ".join(f"{eng} engine {why}" for eng, why in self.blocked.items())


class _Engine:
    def __init__(self, eid: int) -> None:
        self.eid = eid
        self.cmd: deque[int] = deque()
        self.pending_push: list[str] | None = None  # pushes left of the retiring insn
        self.current: int | None = None


def schedule(insns: Sequence[Instruction], *, cmd_depth: int, token_depth: int,
             execute: Callable[[int], None] | None = None, seed: int | None = None) -> list[int]:
    """Run the token protocol; returns the order in which instructions executed.

    ``seed`` None picks engines round-robin; an int picks the next engine at random.
    Raises :class:`Deadlock` when no engine and not fetch can move.
    """
    rng = random.Random(seed) if seed is not None else None
    tokens = dict.fromkeys(QUEUE_NAMES, 0)
    engines = [_Engine(i) for i in range(3)]
    pc = 0
    order: list[int] = []
    n = len(insns)

    def fetch() -> bool:
        nonlocal pc
        moved = False
        while pc < n and len(engines[insns[pc].engine].cmd) < cmd_depth:
            engines[insns[pc].engine].cmd.append(pc)
            pc += 1
            moved = True
        return moved

    def step(eng: _Engine) -> bool:
        """Advance one engine by one instruction phase; True if anything changed."""
        if eng.pending_push is not None:
            left = [q for q in eng.pending_push if tokens[q] >= token_depth]
            moved = len(left) < len(eng.pending_push)
            for q in eng.pending_push:
                if tokens[q] < token_depth:
                    tokens[q] += 1
            eng.pending_push = left or None
            if not left:
                eng.current = None
            return moved
        if not eng.cmd:
            return False
        idx = eng.cmd[0]
        insn = insns[idx]
        pops = insn.pops()
        if any(tokens[q] == 0 for q in pops):
            return False
        for q in pops:
            tokens[q] -= 1
        eng.cmd.popleft()
        if execute is not None:
            execute(idx)
        order.append(idx)
        eng.current = idx
        eng.pending_push = insn.pushes()
        step(eng)  # pushes happen right away when there is room
        if eng.pending_push is None:
            eng.current = None
        return True

    while True:
        moved = fetch()
        ids = [0, 1, 2]
        if rng is not None:
            rng.shuffle(ids)
        for e in ids:
            moved |= step(engines[e])
        if pc == n and all(not e.cmd and e.pending_push is None for e in engines):
            return order
        if not moved:
            raise Deadlock(_explain(insns, engines, tokens, pc, cmd_depth, token_depth),
                           [not e.cmd and e.pending_push is None for e in engines])


def _explain(insns, engines, tokens, pc, cmd_depth, token_depth) -> dict[str, str]:
    out: dict[str, str] = {}
    for eng in engines:
        name = ENGINE_NAMES[eng.eid]
        if eng.pending_push is not None:
            i = eng.current
            qs = ", ".join(eng.pending_push)
            out[name] = (f"blocked at instruction {i} ({describe(insns[i])}) waiting to push "
                         f"{qs} (queue full, {token_depth} tokens)")
        elif eng.cmd:
            i = eng.cmd[0]
            empty = [q for q in insns[i].pops() if tokens[q] == 0]
            out[name] = (f"blocked at instruction {i} ({describe(insns[i])}) waiting to pop "
                         f"{', '.join(empty)} (queue empty)")
        elif pc < len(insns):
            full = ENGINE_NAMES[insns[pc].engine]
            out[name] = (f"idle: fetch is stalled at instruction {pc} ({describe(insns[pc])}) "
                         f"because the {full} engine's command queue is full ({cmd_depth})")
        else:
            out[name] = "finished"
    return out
