"""Static checker for accelerator programs: structure, token balance and certain deadlock.

Runs before anything executes and reports *every* problem found, each with the instruction
index:

- structure: exactly one FINISH and it is last; token flags legal for the engine; LOAD/STORE
  buffer ranges and GEMM/ALU micro-op ranges inside the buffers of the target;
- DRAM (when the image size is known, ``dram_bytes``): every LOAD/STORE block inside the
  DRAM data image (the RTL does not check it: an access past the image reads or overwrites
  whatever lies there);
- balance: per token queue, pushes that are never popped and pops that can never be satisfied;
- deadlock: the fetch/engine/token protocol played without data (:mod:`toolchain.vta.tokens`)
  with the target's command- and token-queue depths.

Example::

    >>> from toolchain.vta.isa import Load, Gemm, Finish, MEM_INP
    >>> report = check_program([Load(memory_type=MEM_INP, push_next=True), Gemm(), Finish()])
    >>> print(report)
    check: 1 problem(s)
      queue l2c: 1 token(s) pushed but never popped (instruction 0 (LOAD INP))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from toolchain.errors import SimulationError
from toolchain.vta.config import VTAConfig
from toolchain.vta.isa import (
    ALU_NAMES,
    Alu,
    Finish,
    Gemm,
    Instruction,
    Load,
    Store,
    check_flags,
)
from toolchain.vta.program import Program
from toolchain.vta.tokens import QUEUE_NAMES, Deadlock, describe, schedule


@dataclass
class CheckReport:
    """Problems found by :func:`check_program`; empty ``errors`` means the program is fine."""

    errors: list[str] = field(default_factory=list)
    insn_count: int = 0

    @property
    def ok(self) -> bool:
        return not self.errors

    def __str__(self) -> str:
        if self.ok:
            return f"check: ok ({self.insn_count} instructions, tokens balanced, no deadlock)"
        lines = [f"check: {len(self.errors)} problem(s)"]
        lines += [f"  {e}" for e in self.errors]
        return "\n".join(lines)

    def raise_if_errors(self) -> None:
        """Raise :class:`SimulationError` carrying the whole report if there are problems."""
        if not self.ok:
            raise SimulationError(str(self))


def _structure(insns: Sequence[Instruction], cfg: VTAConfig) -> list[str]:
    errors = []
    finishes = [i for i, x in enumerate(insns) if isinstance(x, Finish)]
    if not finishes:
        errors.append("program has no FINISH instruction; end it with FINISH")
    elif finishes != [len(insns) - 1]:
        errors.append(f"FINISH must be the last and only FINISH instruction; found FINISH at "
                      f"{finishes} in a program of {len(insns)} instructions")
    for i, insn in enumerate(insns):
        problem = check_flags(insn)
        if problem:
            errors.append(f"instruction {i}: {problem}")
        if isinstance(insn, (Load, Store)):
            depth = cfg.depth(insn.memory_type)
            rows = insn.rows_written if isinstance(insn, Load) else insn.y_size * insn.x_size
            if insn.sram_base + rows > depth:
                errors.append(f"instruction {i} ({describe(insn)}): buffer rows "
                              f"{insn.sram_base}..{insn.sram_base + rows - 1} exceed the "
                              f"buffer depth {depth}")
        if isinstance(insn, Alu) and ALU_NAMES[insn.alu_op] not in cfg.alu_ops:
            errors.append(f"instruction {i} (ALU {ALU_NAMES[insn.alu_op]}): target "
                          f"'{cfg.name}' does not offer this op (alu.ops: "
                          f"{', '.join(cfg.alu_ops)})")
        if isinstance(insn, (Gemm, Alu)):
            if insn.uop_bgn > insn.uop_end or insn.uop_end > cfg.uop_depth:
                errors.append(f"instruction {i} ({insn.name}): micro-op range "
                              f"[{insn.uop_bgn}, {insn.uop_end}) is not inside the UOP "
                              f"buffer of {cfg.uop_depth} micro-ops")
    return errors


def dram_problems(insns: Sequence[Instruction], cfg: VTAConfig, dram_bytes: int) -> list[str]:
    """Every LOAD/STORE whose DRAM block reaches past a ``dram_bytes``-byte data image, one
    line each, worded like the functional simulator's run-time error.

    Example::

        >>> from toolchain.vta.isa import Load, MEM_INP
        >>> load = Load(memory_type=MEM_INP, dram_base=3, x_size=2)   # elements 3 and 4
        >>> print(*dram_problems([load], VTAConfig(), 64))
        instruction 0 (LOAD INP): DRAM element 4 (bytes 64..79) is outside the 64-byte DRAM image
    """
    errors = []
    for i, insn in enumerate(insns):
        if not isinstance(insn, (Load, Store)) or not insn.y_size or not insn.x_size:
            continue
        row = cfg.row_bytes(insn.memory_type)
        last = insn.dram_base + (insn.y_size - 1) * insn.x_stride + insn.x_size - 1
        if (last + 1) * row > dram_bytes:
            errors.append(f"instruction {i} ({describe(insn)}): DRAM element {last} (bytes "
                          f"{last * row}..{(last + 1) * row - 1}) is outside the {dram_bytes}-"
                          "byte DRAM image")
    return errors


def _balance(insns: Sequence[Instruction]) -> list[str]:
    errors = []
    pushes: dict[str, list[int]] = {q: [] for q in QUEUE_NAMES}
    pops: dict[str, list[int]] = {q: [] for q in QUEUE_NAMES}
    for i, insn in enumerate(insns):
        for q in insn.pushes():
            pushes[q].append(i)
        for q in insn.pops():
            pops[q].append(i)
    for q in QUEUE_NAMES:
        npush, npop = len(pushes[q]), len(pops[q])
        if npush > npop:
            extra = pushes[q][npop:]
            where = ", ".join(f"{i} ({describe(insns[i])})" for i in extra[:5])
            more = f" and {len(extra) - 5} more" if len(extra) > 5 else ""
            errors.append(f"queue {q}: {npush - npop} token(s) pushed but never popped "
                          f"(instruction {where}{more})")
        elif npop > npush:
            i = pops[q][npush]
            errors.append(f"queue {q}: instruction {i} ({describe(insns[i])}) pops a token that "
                          f"is never pushed ({npush} push(es), {npop} pop(s) in the program)")
    return errors


def check_program(program: Program | Sequence[Instruction],
                  config: VTAConfig | None = None, *,
                  dram_bytes: int | None = None) -> CheckReport:
    """Check a program (or a bare instruction list) statically; returns a report.

    With ``dram_bytes`` (the size of the DRAM image it will run against) the LOAD/STORE
    blocks are also checked against that image (:func:`dram_problems`).

    Example::

        >>> check_program([Finish()]).ok
        True
    """
    if isinstance(program, Program):
        insns, cfg = program.insns, config or program.config
    else:
        insns, cfg = list(program), config or VTAConfig()
    report = CheckReport(insn_count=len(insns))
    report.errors += _structure(insns, cfg)
    if dram_bytes is not None:
        report.errors += dram_problems(insns, cfg, dram_bytes)
    report.errors += _balance(insns)
    try:
        schedule(insns, cmd_depth=cfg.cmd_queue_depth, token_depth=cfg.token_queue_depth)
    except Deadlock as dead:
        report.errors.append(f"certain deadlock: {dead}")
    return report
