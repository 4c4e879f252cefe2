"""Dependency-token insertion: ``insert_tokens`` (a lowering pass on instruction streams).

The compiler emits instructions in a sequentially correct order (what the program means
when run one instruction after another) without any token flags. This pass derives each
instruction's engine and the buffer rows it reads and writes (from its own fields: a LOAD's
rows, a GEMM's micro-op loop over INP/WGT/ACC, an ALU's ACC rows, a STORE's OUT rows — OUT
is the mirror of ACC, so one row range stands for both), and for every instruction that
conflicts with an earlier one on another engine (read after write, write after read,
write after write on overlapping rows) makes sure a token orders them:

- the queue is the one between the two engines (``l2c``, ``c2l``, ``c2s``, ``s2c``);
- tokens match first-pushed to first-popped, so a dependency ``P -> C`` is already covered
  when an earlier token was pushed at or after ``P`` and popped at or before ``C``;
- otherwise ``C`` pops a new token that ``P`` pushes (``P`` is the latest conflicting
  instruction, so one token covers all of ``C``'s dependencies on that engine).

Loop-carried dependencies need no special case: loops are unrolled by then, so the reuse
of a buffer half by the next iteration of a virtual thread is an ordinary write-after-read.
Each instruction pops and pushes at most once per queue, every push is popped (the program
stays balanced), and the result is checked by :func:`~toolchain.vta.checker.check_program`
for deadlock with the target's queue depths.

Before (a tile loaded, multiplied, stored)::

    0000 LOAD   INP  sram[0:+1) <- dram[0] 1x1 stride 1
    0001 GEMM   uop[0:1) out=1x(acc+0,inp+0,wgt+0) in=1x(acc+0,inp+0,wgt+0)
    0002 STORE  OUT  sram[0:+1) -> dram[2] 1x1 stride 1

After ``insert_tokens``::

    0000 LOAD   INP  sram[0:+1) <- dram[0] 1x1 stride 1      push_next
    0001 GEMM   uop[0:1) ...                                  pop_prev push_next
    0002 STORE  OUT  sram[0:+1) -> dram[2] 1x1 stride 1      pop_prev

Example::

    >>> from toolchain.vta.isa import Load, Gemm, Store, Uop, MEM_INP
    >>> insns = [Load(memory_type=MEM_INP, y_size=1, x_size=1, x_stride=1),
    ...          Gemm(uop_end=1), Store(y_size=1, x_size=1, x_stride=1)]
    >>> out = insert_tokens(insns, [[], [Uop()], []])
    >>> [(i.pop_prev, i.push_next) for i in out]
    [(False, True), (True, True), (True, False)]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from toolchain.vta.isa import (
    MEM_ACC,
    MEM_INP,
    MEM_UOP,
    MEM_WGT,
    Alu,
    AnyInstruction,
    Gemm,
    Load,
    Store,
    Uop,
)

LOAD_ENGINE, COMPUTE_ENGINE, STORE_ENGINE = 0, 1, 2

#: (from engine, to engine) -> (queue name, push flag of the producer, pop flag of the consumer)
QUEUES = {
    (LOAD_ENGINE, COMPUTE_ENGINE): ("l2c", "push_next", "pop_prev"),
    (COMPUTE_ENGINE, LOAD_ENGINE): ("c2l", "push_prev", "pop_next"),
    (COMPUTE_ENGINE, STORE_ENGINE): ("c2s", "push_next", "pop_prev"),
    (STORE_ENGINE, COMPUTE_ENGINE): ("s2c", "push_prev", "pop_next"),
}


@dataclass(frozen=True)
class Access:
    """Rows ``[lo, hi)`` of buffer ``mem`` (MEM_INP, MEM_WGT or MEM_ACC), read or written."""

    mem: int
    lo: int
    hi: int
    write: bool

    def conflicts(self, other: Access) -> bool:
        """Whether the two accesses order each other (same rows, at least one write)."""
        return (self.mem == other.mem and (self.write or other.write)
                and self.lo < other.hi and other.lo < self.hi)


def engine_of(insn: AnyInstruction) -> int:
    """The engine that executes ``insn`` (hw/ISA.md section 1)."""
    if isinstance(insn, Load) and insn.memory_type in (MEM_INP, MEM_WGT):
        return LOAD_ENGINE
    if isinstance(insn, Store):
        return STORE_ENGINE
    return COMPUTE_ENGINE


def _hull(base: Sequence[int], f_out: int, f_in: int, n_out: int, n_in: int) -> tuple[int, int]:
    lo = min(base)
    return lo, max(base) + (n_out - 1) * f_out + (n_in - 1) * f_in + 1


def accesses(insn: AnyInstruction, uops: Sequence[Uop]) -> list[Access]:
    """The on-chip rows ``insn`` reads and writes; ``uops`` are the micro-ops it runs (for
    GEMM/ALU: ``UOP[uop_bgn:uop_end]``). UOP rows are left out: only the compute engine
    touches them, and an engine runs its instructions in order.

    >>> from toolchain.vta.isa import Load, MEM_WGT
    >>> accesses(Load(memory_type=MEM_WGT, sram_base=4, y_size=2, x_size=3, x_stride=3), [])
    [Access(mem=1, lo=4, hi=10, write=True)]
    """
    if isinstance(insn, Load):
        if insn.memory_type == MEM_UOP:
            return []
        h = insn.y_pad_top + insn.y_size + insn.y_pad_bottom
        w = insn.x_pad_left + insn.x_size + insn.x_pad_right
        return [Access(insn.memory_type, insn.sram_base, insn.sram_base + h * w, True)]
    if isinstance(insn, Store):
        return [Access(MEM_ACC, insn.sram_base, insn.sram_base + insn.y_size * insn.x_size,
                       False)]
    if not isinstance(insn, (Gemm, Alu)) or not uops or not insn.iter_out or not insn.iter_in:
        return []
    n_out, n_in = insn.iter_out, insn.iter_in
    dst = _hull([u.acc for u in uops], insn.dst_factor_out, insn.dst_factor_in, n_out, n_in)
    out = [Access(MEM_ACC, *dst, True)]
    if isinstance(insn, Gemm) and not insn.reset:
        out.append(Access(MEM_ACC, *dst, False))
        out.append(Access(MEM_INP, *_hull([u.inp for u in uops], insn.src_factor_out,
                                          insn.src_factor_in, n_out, n_in), False))
        out.append(Access(MEM_WGT, *_hull([u.wgt for u in uops], insn.wgt_factor_out,
                                          insn.wgt_factor_in, n_out, n_in), False))
    elif isinstance(insn, Alu):
        out.append(Access(MEM_ACC, *dst, False))
        if not insn.use_imm:
            out.append(Access(MEM_ACC, *_hull([u.inp for u in uops], insn.src_factor_out,
                                              insn.src_factor_in, n_out, n_in), False))
    return out


def insert_tokens(insns: Sequence[AnyInstruction],
                  uops: Sequence[Sequence[Uop]]) -> list[AnyInstruction]:
    """``insns`` (in sequential order, no token flags) with the push/pop flags that make
    the decoupled engines respect every cross-engine dependency; ``uops[i]`` are the
    micro-ops instruction ``i`` runs (empty for DMA). See the module docstring."""
    if len(uops) != len(insns):
        raise ValueError(f"insert_tokens: {len(insns)} instructions but {len(uops)} micro-op "
                         "lists")
    engines = [engine_of(i) for i in insns]
    sets = [accesses(i, u) for i, u in zip(insns, uops, strict=True)]
    history: dict[int, list[int]] = {LOAD_ENGINE: [], COMPUTE_ENGINE: [], STORE_ENGINE: []}
    covered = {q: -1 for q in QUEUES}  # latest producer index a popped token already covers
    flags: list[dict[str, bool]] = [{} for _ in insns]
    for c, (eng, acc) in enumerate(zip(engines, sets, strict=True)):
        for (src, dst), (_, push, pop) in QUEUES.items():
            if dst != eng or not acc:
                continue
            latest = -1
            for p in reversed(history[src]):
                if p <= covered[(src, dst)]:
                    break
                if any(a.conflicts(b) for a in sets[p] for b in acc):
                    latest = p
                    break
            if latest >= 0:
                flags[latest][push] = True
                flags[c][pop] = True
                covered[(src, dst)] = latest
        history[eng].append(c)
    return [replace(i, **f) if f else i for i, f in zip(insns, flags, strict=True)]
