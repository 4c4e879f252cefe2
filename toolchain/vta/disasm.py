"""Readable listings of accelerator programs (``kiln sim --disasm``).

One line per instruction: index, mnemonic, operands, then the dependency flags set.  Loop
nests are written ``out=ITERxFACTORS in=ITERxFACTORS`` with the per-operand index steps.

Example::

    >>> from toolchain.vta.isa import Gemm, Load, MEM_INP
    >>> print(disassemble([Load(memory_type=MEM_INP, sram_base=0, dram_base=64, y_size=4,
    ...                         x_size=9, x_stride=36, push_next=True),
    ...                    Gemm(uop_bgn=0, uop_end=4, iter_out=9, iter_in=28,
    ...                         dst_factor_in=4, src_factor_out=1, src_factor_in=9,
    ...                         wgt_factor_out=1, pop_prev=True)]))
    0000 LOAD   INP  sram[0:+36) <- dram[64] 4x9 stride 36                      push_next
    0001 GEMM   uop[0:4) out=9x(acc+0,inp+1,wgt+1) in=28x(acc+4,inp+9,wgt+0)    pop_prev
"""

from __future__ import annotations

from collections.abc import Sequence

from toolchain.vta.isa import (
    ALU_NAMES,
    MEM_NAMES,
    Alu,
    Finish,
    Gemm,
    Instruction,
    Load,
    Store,
    Uop,
)

_FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")
_OPERAND_WIDTH = 64


def _flags(insn: Instruction) -> str:
    return " ".join(f for f in _FLAGS if getattr(insn, f))


def _operands(insn: Instruction) -> str:
    if isinstance(insn, Load):
        rows = insn.rows_written
        text = (f"{MEM_NAMES[insn.memory_type]:<4} sram[{insn.sram_base}:+{rows}) <- "
                f"dram[{insn.dram_base}] {insn.y_size}x{insn.x_size} stride {insn.x_stride}")
        pads = (insn.y_pad_top, insn.y_pad_bottom, insn.x_pad_left, insn.x_pad_right)
        if any(pads):
            text += " pad(t{},b{},l{},r{})".format(*pads)
        return text
    if isinstance(insn, Store):
        rows = insn.y_size * insn.x_size
        return (f"OUT  sram[{insn.sram_base}:+{rows}) -> dram[{insn.dram_base}] "
                f"{insn.y_size}x{insn.x_size} stride {insn.x_stride}")
    if isinstance(insn, Gemm):
        loops = (f"out={insn.iter_out}x(acc+{insn.dst_factor_out},inp+{insn.src_factor_out},"
                 f"wgt+{insn.wgt_factor_out}) in={insn.iter_in}x(acc+{insn.dst_factor_in},"
                 f"inp+{insn.src_factor_in},wgt+{insn.wgt_factor_in})")
        reset = "reset " if insn.reset else ""
        return f"{reset}uop[{insn.uop_bgn}:{insn.uop_end}) {loops}"
    if isinstance(insn, Alu):
        operand = f"imm={insn.imm}" if insn.use_imm else "acc"
        src = "" if insn.use_imm else f",src+{insn.src_factor_out}"
        src_in = "" if insn.use_imm else f",src+{insn.src_factor_in}"
        return (f"{ALU_NAMES[insn.alu_op]:<4} {operand} uop[{insn.uop_bgn}:{insn.uop_end}) "
                f"out={insn.iter_out}x(dst+{insn.dst_factor_out}{src}) "
                f"in={insn.iter_in}x(dst+{insn.dst_factor_in}{src_in})")
    if isinstance(insn, Finish):
        return ""
    raise TypeError(f"not an instruction: {insn!r}")


def format_insn(index: int, insn: Instruction) -> str:
    """One listing line, e.g. ``0007 FINISH pop_next``."""
    ops = _operands(insn)
    flags = _flags(insn)
    line = f"{index:04d} {insn.name:<6} {ops}"
    if flags:
        line = f"{line:<{_OPERAND_WIDTH + 12}}{flags}" if ops else f"{line}{flags}"
    return line.rstrip()


def disassemble(insns: Sequence[Instruction]) -> str:
    """The listing of a whole instruction stream, one line per instruction."""
    return "\n".join(format_insn(i, x) for i, x in enumerate(insns))


def format_uops(words: Sequence[int], base: int = 0) -> str:
    """Listing of micro-op words, e.g. ``uop 0003: acc=3 inp=0 wgt=3``."""
    lines = []
    for k, word in enumerate(words):
        u = Uop.decode(int(word))
        lines.append(f"uop {base + k:04d}: acc={u.acc} inp={u.inp} wgt={u.wgt}")
    return "\n".join(lines)
