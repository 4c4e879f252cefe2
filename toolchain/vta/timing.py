"""A quick cycle estimate of an accelerator program: ``estimate_cycles``.

Not the judge (the RTL's counters are); a model cheap enough for the compiler to compare
candidate schedules. Each engine runs its instructions in order; an instruction starts when
its engine is free and every token it pops has been pushed (the k-th pop of a queue takes
the k-th push, which is available when its instruction finishes). Durations:

- LOAD: DRAM latency + bytes / bandwidth (the target's ``dram`` keys); STORE: bytes /
  bandwidth;
- GEMM / ALU: one micro-op step per cycle, two per cycle for a reset or an immediate ALU op
  with one micro-op and an odd inner destination step (the RTL pairs those), plus a small
  fixed start-up per instruction.

Command-queue and token-queue depths, and DRAM contention between load and store, are left
out (the static checker handles the depths).

What the compiler ranks candidate programs by is :func:`program_cost`: the estimate plus
:data:`INSN_CYCLES` per instruction, what each instruction costs the RTL beyond its modelled
work (fetch, issue, token hand-offs; the plain estimate ranks small tiles too well).

Example::

    >>> from toolchain.vta import gemm_workload
    >>> wl = gemm_workload(256, 576, 64, seed=0)
    >>> estimate_cycles(wl.serial), estimate_cycles(wl.vthread)
    (52144, 40880)
    >>> program_cost(wl.vthread) - estimate_cycles(wl.vthread) == INSN_CYCLES * len(
    ...     wl.vthread.insns)
    True
"""

from __future__ import annotations

import math

from toolchain.vta.deps import COMPUTE_ENGINE, QUEUES, engine_of
from toolchain.vta.isa import Alu, AnyInstruction, Gemm, Load, Store
from toolchain.vta.program import Program

#: cycles an engine spends starting a GEMM/ALU instruction (pipeline fill)
STARTUP = 4
#: cycles each instruction costs the RTL beyond its modelled work (fetch, issue, token
#: hand-offs): with 30, ranking by the model plus this per instruction picks the RTL's
#: optimum on ResNet-8's 930 tiling points (rank correlation with the RTL 0.94-1.00 per
#: layer, 0.03-1.00 without) and 1.047x the default on MobileNetV1's 2,248 (not fitted;
#: ``benchmarks/vta_tune.py``, docs/tuning.md session 16)
INSN_CYCLES = 30


def duration(insn: AnyInstruction, program: Program) -> int:
    """Estimated cycles of one instruction (see the module docstring)."""
    cfg = program.config
    if isinstance(insn, Load):
        h = insn.y_pad_top + insn.y_size + insn.y_pad_bottom
        w = insn.x_pad_left + insn.x_size + insn.x_pad_right
        return cfg.latency_cycles + math.ceil(h * w * cfg.row_bytes(insn.memory_type)
                                              / cfg.bytes_per_cycle)
    if isinstance(insn, Store):
        return math.ceil(insn.y_size * insn.x_size * cfg.out_row_bytes / cfg.bytes_per_cycle)
    if isinstance(insn, (Gemm, Alu)):
        uops = insn.uop_end - insn.uop_bgn
        paired = (isinstance(insn, Gemm) and insn.reset or isinstance(insn, Alu)
                  and insn.use_imm) and uops == 1 and insn.dst_factor_in % 2 == 1
        inner = -(-insn.iter_in // 2) if paired else insn.iter_in * uops
        return STARTUP + insn.iter_out * inner
    return 0


def estimate_cycles(program: Program) -> int:
    """Estimated cycles from start to the last instruction's end (see the module docstring)."""
    free = [0, 0, 0]
    pushed: dict[str, list[int]] = {q: [] for q, _, _ in QUEUES.values()}
    popped = dict.fromkeys(pushed, 0)
    by_pop = {(dst, pop): q for (_, dst), (q, _, pop) in QUEUES.items()}
    by_push = {(src, push): q for (src, _), (q, push, _) in QUEUES.items()}
    end = 0
    for insn in program.insns:
        eng = engine_of(insn) if not type(insn).__name__ == "Finish" else COMPUTE_ENGINE
        start = free[eng]
        for flag in ("pop_prev", "pop_next"):
            q = by_pop.get((eng, flag))
            if q is not None and getattr(insn, flag):
                k = popped[q]
                popped[q] += 1
                if k < len(pushed[q]):  # a push later in program order: checker's business
                    start = max(start, pushed[q][k])
        finish = start + duration(insn, program)
        for flag in ("push_prev", "push_next"):
            q = by_push.get((eng, flag))
            if q is not None and getattr(insn, flag):
                pushed[q].append(finish)
        free[eng] = finish
        end = max(end, finish)
    return end


def program_cost(program: Program) -> int:
    """What the compiler ranks candidate programs by: :func:`estimate_cycles` plus
    :data:`INSN_CYCLES` per instruction (see the module docstring)."""
    return estimate_cycles(program) + INSN_CYCLES * len(program.insns)
