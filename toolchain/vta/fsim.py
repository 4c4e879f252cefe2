"""Bit-exact functional simulator of the accelerator (numpy).

:func:`run_fsim` executes a :class:`~toolchain.vta.program.Program` against a DRAM image and
returns the DRAM after FINISH plus counters (bytes moved per buffer, MACs, micro-op steps,
instructions per opcode).  Two modes:

- plain (``tokens=False``): instructions run one after another in program order;
- token mode (``tokens=True``): fetch and the load/compute/store engines run as separate
  in-order streams that honour the dependency-token queues with the target's queue depths
  (:mod:`toolchain.vta.tokens`); a wrong token pattern raises :class:`SimulationError` naming
  each engine's blocked instruction and queue instead of hanging.  ``seed`` shuffles which
  ready engine runs next, so a program whose tokens do not order a real data dependency gives
  a different DRAM than plain mode — which is how tests catch races.

Semantics are those of hw/ISA.md; OUT is not stored separately because it always equals the
low 8 bits of ACC (ISA section 1), so STORE narrows ACC rows on the fly.

Example::

    >>> from toolchain.vta.builder import ProgramBuilder
    >>> b = ProgramBuilder(); _ = b.finish()
    >>> run_fsim(b.build()).counters["insn_FINISH"]
    1
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from toolchain.errors import OptionError, SimulationError
from toolchain.vta.config import VTAConfig
from toolchain.vta.isa import (
    ALU_ADD,
    ALU_MAX,
    ALU_MIN,
    ALU_MUL,
    ALU_NAMES,
    MEM_ACC,
    MEM_INP,
    MEM_NAMES,
    MEM_UOP,
    MEM_WGT,
    Alu,
    Finish,
    Gemm,
    Instruction,
    Load,
    Store,
    uop_fields,
)
from toolchain.vta.program import Program, dram_image
from toolchain.vta.tokens import Deadlock, describe, schedule

_CHUNK = 4096  # GEMM steps per vectorised batch (bounds temporary memory)
#: micro-op steps one GEMM/ALU may execute here: the step indices are materialised (3 int64
#: arrays), so a corrupt loop extent (16383 x 16383 x 8192 steps fit the fields) would take
#: tens of GB instead of failing; compiled programs stay far below (ResNet-18 C12: 451 k
#: GEMM steps in the whole program)
MAX_STEPS_PER_INSN = 1 << 24
_BUF_KEYS = {MEM_UOP: "uop", MEM_WGT: "wgt", MEM_INP: "inp", MEM_ACC: "acc"}


def wrap32(x: np.ndarray) -> np.ndarray:
    """Two's-complement reduction of int64 values to int32."""
    return (np.asarray(x, dtype=np.int64) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


def narrow8(x: np.ndarray) -> np.ndarray:
    """Keep the low 8 bits of int32 values as int8 (how OUT mirrors ACC)."""
    return (np.asarray(x) & 0xFF).astype(np.uint8).view(np.int8)


def alu_reference(op: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise ALU semantics of hw/ISA.md 2.3 on int32 operands; returns int32."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    if op == ALU_MIN:
        r = np.minimum(a, b)
    elif op == ALU_MAX:
        r = np.maximum(a, b)
    elif op == ALU_ADD:
        r = a + b
    elif op == ALU_MUL:
        r = a * b
    else:  # SHR: low 6 bits of b as a signed shift; negative shifts left
        sh = b & 63
        sh = np.where(sh >= 32, sh - 64, sh)
        r = np.where(sh >= 0, a >> np.maximum(sh, 0), a << np.maximum(-sh, 0))
    return wrap32(r)


@dataclass
class FsimResult:
    """DRAM image after FINISH, counters, and the order instructions executed in."""

    dram: np.ndarray
    counters: dict[str, int] = field(default_factory=dict)
    order: list[int] = field(default_factory=list)


class Machine:
    """On-chip state of the accelerator plus DRAM; ``execute`` runs one instruction."""

    def __init__(self, config: VTAConfig, dram: np.ndarray) -> None:
        c = config
        self.cfg = c
        self.dram = dram_image(dram).copy()
        self.uop = np.zeros((c.uop_depth,), np.uint32)
        self.inp = np.zeros((c.inp_depth, c.batch, c.block_in), np.int8)
        self.wgt = np.zeros((c.wgt_depth, c.block_out, c.block_in), np.int8)
        self.acc = np.zeros((c.acc_depth, c.batch, c.block_out), np.int32)
        self.counters: Counter[str] = Counter()

    def execute(self, insn: Instruction, idx: int) -> None:
        self.counters[f"insn_{insn.name}"] += 1
        try:
            if isinstance(insn, Load):
                self._load(insn)
            elif isinstance(insn, Store):
                self._store(insn)
            elif isinstance(insn, Gemm):
                self._gemm(insn)
            elif isinstance(insn, Alu):
                self._alu(insn)
        except _Fault as fault:
            raise SimulationError(f"instruction {idx} ({describe(insn)}): {fault}") from None

    # ---- DMA ---------------------------------------------------------------------------
    def _elem_bytes(self, elems: np.ndarray, row: int) -> np.ndarray:
        """Byte indices of DRAM elements (rows of ``row`` bytes), bounds-checked."""
        if elems.size and (elems.max() + 1) * row > len(self.dram):
            bad = int(elems.max())
            raise _Fault(f"DRAM element {bad} (bytes {bad * row}..{(bad + 1) * row - 1}) is "
                         f"outside the {len(self.dram)}-byte DRAM image")
        return (elems[:, None] * row + np.arange(row)[None, :]).ravel()

    def _load(self, insn: Load) -> None:
        c, mt = self.cfg, insn.memory_type
        key = _BUF_KEYS[mt]
        buf = getattr(self, key)
        row = c.row_bytes(mt)
        h = insn.y_pad_top + insn.y_size + insn.y_pad_bottom
        w = insn.x_pad_left + insn.x_size + insn.x_pad_right
        if insn.sram_base + h * w > len(buf):
            last = insn.sram_base + h * w - 1
            raise _Fault(f"writes {MEM_NAMES[mt]} rows {insn.sram_base}..{last} beyond the "
                         f"buffer depth {len(buf)}")
        block = np.zeros((h, w, row), np.uint8)
        if insn.y_size and insn.x_size:
            yy, xx = np.meshgrid(np.arange(insn.y_size), np.arange(insn.x_size), indexing="ij")
            elems = (insn.dram_base + yy * insn.x_stride + xx).ravel().astype(np.int64)
            data = self.dram[self._elem_bytes(elems, row)]
            block[insn.y_pad_top:insn.y_pad_top + insn.y_size,
                  insn.x_pad_left:insn.x_pad_left + insn.x_size] = \
                data.reshape(insn.y_size, insn.x_size, row)
            self.counters[f"bytes_loaded_{key}"] += data.size
        rows = block.reshape(h * w, row).view(buf.dtype.newbyteorder("<"))
        buf[insn.sram_base:insn.sram_base + h * w] = rows.reshape((h * w, *buf.shape[1:]))

    def _store(self, insn: Store) -> None:
        c = self.cfg
        n = insn.y_size * insn.x_size
        if insn.sram_base + n > c.out_depth:
            raise _Fault(f"reads OUT rows {insn.sram_base}..{insn.sram_base + n - 1} beyond the "
                         f"buffer depth {c.out_depth}")
        if n == 0:
            return
        yy, xx = np.meshgrid(np.arange(insn.y_size), np.arange(insn.x_size), indexing="ij")
        elems = (insn.dram_base + yy * insn.x_stride + xx).ravel().astype(np.int64)
        src = narrow8(self.acc[insn.sram_base:insn.sram_base + n]).reshape(n, -1)
        _, last = np.unique(elems[::-1], return_index=True)  # later writes win
        keep = np.sort(n - 1 - last)
        row = c.out_row_bytes
        self.dram[self._elem_bytes(elems[keep], row)] = src[keep].view(np.uint8).ravel()
        self.counters["bytes_stored_out"] += n * row

    # ---- compute -----------------------------------------------------------------------
    def _indices(self, insn: Gemm | Alu) -> tuple[np.ndarray, ...]:
        """Per-step (acc, src, wgt) row indices in execution order (hw/ISA.md 2.3)."""
        if insn.uop_bgn > insn.uop_end or insn.uop_end > self.cfg.uop_depth:
            raise _Fault(f"micro-op range [{insn.uop_bgn}, {insn.uop_end}) is outside the UOP "
                         f"buffer ({self.cfg.uop_depth} micro-ops)")
        if insn.steps > MAX_STEPS_PER_INSN:
            raise _Fault(f"{insn.steps:,} micro-op steps (iter_out {insn.iter_out} x iter_in "
                         f"{insn.iter_in} x {insn.uop_end - insn.uop_bgn} micro-ops) are more "
                         f"than the functional simulator runs in one instruction "
                         f"({MAX_STEPS_PER_INSN:,}); split the loop")
        ua, us, uw = uop_fields(self.uop[insn.uop_bgn:insn.uop_end])
        i = np.arange(insn.iter_out, dtype=np.int64)[:, None, None]
        j = np.arange(insn.iter_in, dtype=np.int64)[None, :, None]
        a = (ua[None, None, :] + i * insn.dst_factor_out + j * insn.dst_factor_in).ravel()
        s = (us[None, None, :] + i * insn.src_factor_out + j * insn.src_factor_in).ravel()
        wf = (getattr(insn, "wgt_factor_out", 0), getattr(insn, "wgt_factor_in", 0))
        w = (uw[None, None, :] + i * wf[0] + j * wf[1]).ravel()
        return a, s, w, uw

    def _check_range(self, insn: Gemm | Alu, what: str, idx: np.ndarray, depth: int) -> None:
        if idx.size and idx.max() >= depth:
            step = int(np.argmax(idx >= depth))
            nu = insn.uop_end - insn.uop_bgn
            o, rest = divmod(step, insn.iter_in * nu)
            inner, u = divmod(rest, nu)
            raise _Fault(f"{what} row {int(idx[step])} is outside the buffer (depth {depth}) at "
                         f"outer {o}, inner {inner}, micro-op {insn.uop_bgn + u}")

    def _gemm(self, insn: Gemm) -> None:
        c = self.cfg
        a, s, w, _ = self._indices(insn)
        self._check_range(insn, "ACC", a, c.acc_depth)
        if insn.reset:
            self.acc[a] = 0
            return
        self._check_range(insn, "INP", s, c.inp_depth)
        self._check_range(insn, "WGT", w, c.wgt_depth)
        rows, inv = np.unique(a, return_inverse=True)
        delta = np.zeros((len(rows), c.batch, c.block_out), np.int64)
        for lo in range(0, len(a), _CHUNK):
            sl = slice(lo, lo + _CHUNK)
            x = self.inp[s[sl]].astype(np.float32)                 # (n, B, K)
            wt = self.wgt[w[sl]].astype(np.float32)                # (n, O, K)
            # |sum of 16 int8 products| < 2^24, so float32 is exact here
            prod = np.matmul(x, wt.transpose(0, 2, 1)).astype(np.int64)
            np.add.at(delta, inv[sl], prod)
        self.acc[rows] = wrap32(self.acc[rows].astype(np.int64) + delta)
        self.counters["gemm_steps"] += len(a)
        self.counters["macs"] += len(a) * c.macs_per_step

    def _alu(self, insn: Alu) -> None:
        c = self.cfg
        if ALU_NAMES[insn.alu_op] not in c.alu_ops:
            raise _Fault(f"target '{c.name}' does not offer ALU {ALU_NAMES[insn.alu_op]} "
                         f"(alu.ops: {', '.join(c.alu_ops)})")
        a, s, _w, uw = self._indices(insn)
        if uw.size and uw.any():
            raise _Fault("ALU micro-ops must have wgt_idx = 0 (hw/ISA.md 2.3)")
        self._check_range(insn, "destination ACC", a, c.acc_depth)
        if not insn.use_imm:
            self._check_range(insn, "source ACC", s, c.acc_depth)
        self.counters["alu_steps"] += len(a)
        if len(a) == 0:
            return
        if self._alu_vectorisable(a, s, insn.use_imm):
            b = np.int64(insn.imm) if insn.use_imm else self.acc[s]
            self.acc[a] = alu_reference(insn.alu_op, self.acc[a], b)
            return
        for t in range(len(a)):  # overlapping reads/writes: keep strict step order
            b = np.int64(insn.imm) if insn.use_imm else self.acc[s[t]]
            self.acc[a[t]] = alu_reference(insn.alu_op, self.acc[a[t]], b)

    def _alu_vectorisable(self, a: np.ndarray, s: np.ndarray, use_imm: bool) -> bool:
        """True if no step reads a row an earlier step of the same instruction wrote."""
        if len(np.unique(a)) != len(a):
            return False
        if use_imm:
            return True
        first = np.full(self.cfg.acc_depth, len(a), np.int64)
        np.minimum.at(first, a, np.arange(len(a)))
        return bool(np.all(first[s] >= np.arange(len(a))))


class _Fault(Exception):
    """An instruction broke a rule of the ISA (wrapped into SimulationError with its index)."""


def refuse_unsafe(program: Program, dram: np.ndarray | None = None, *,
                  config: VTAConfig | None = None, where: str = "program") -> None:
    """Refuse, before an RTL run, a program the RTL would run into undefined behaviour: it is
    run first on this simulator (plain mode), whose checks the RTL lacks — a micro-op loop's
    rows past a buffer, a DMA past the DRAM image, more than ``MAX_STEPS_PER_INSN`` steps in
    one instruction. Its error becomes ``"<where>: refused before the RTL run (...)"``. Both
    ``kiln sim --rtl`` and :func:`toolchain.vta.rtl.run_rtl` call it.

    Example::

        >>> from toolchain.vta.builder import ProgramBuilder
        >>> from toolchain.vta.isa import Uop
        >>> b = ProgramBuilder()
        >>> _ = b.load_uops(b.uops("k", [Uop(acc=2047)]), 0)
        >>> _ = b.gemm(0, 1, iter_in=2, dst=(0, 1), reset=True); _ = b.finish()
        >>> refuse_unsafe(b.build())
        Traceback (most recent call last):
        ...
        toolchain.errors.SimulationError: program: refused before the RTL run (the \
functional simulator, run first, reports: instruction 1 (GEMM): ACC row 2048 is outside the \
buffer (depth 2048) at outer 0, inner 1, micro-op 0)
    """
    try:
        run_fsim(program, dram, config=config)
    except SimulationError as exc:
        raise SimulationError(f"{where}: refused before the RTL run (the functional "
                              f"simulator, run first, reports: {exc})") from None


def run_fsim(program: Program, dram: np.ndarray | None = None, *, tokens: bool = False,
             seed: int | None = None, config: VTAConfig | None = None) -> FsimResult:
    """Run ``program`` on the functional simulator; returns DRAM after FINISH and counters.

    ``dram`` overrides the program's initial image.  See the module docstring for ``tokens``
    and ``seed``.

    Example::

        >>> from toolchain.vta.builder import ProgramBuilder
        >>> b = ProgramBuilder(); _ = b.finish()
        >>> res = run_fsim(b.build(), tokens=True)
        >>> res.order
        [0]
    """
    if seed is not None and not tokens:
        raise OptionError(f"run_fsim: seed={seed} picks the engines' turns in token mode; "
                          "pass tokens=True with it (plain mode runs in program order)")
    cfg = config or program.config
    insns = program.insns
    m = Machine(cfg, program.dram if dram is None else dram)
    if not insns or not isinstance(insns[-1], Finish):
        raise SimulationError("program does not end with FINISH; the accelerator would never "
                              "report done")
    extra = [i for i, x in enumerate(insns[:-1]) if isinstance(x, Finish)]
    if extra:
        raise SimulationError(f"FINISH at instruction(s) {extra} before the end of the program; "
                              "only the last instruction may be FINISH")
    if tokens:
        try:
            order = schedule(insns, cmd_depth=cfg.cmd_queue_depth,
                             token_depth=cfg.token_queue_depth,
                             execute=lambda i: m.execute(insns[i], i), seed=seed)
        except Deadlock as dead:
            raise SimulationError(f"deadlock in token mode: {dead}") from None
    else:
        order = list(range(len(insns)))
        for i in order:
            m.execute(insns[i], i)
    counters = dict(sorted(m.counters.items()))
    counters["instructions"] = len(insns)
    return FsimResult(m.dram, counters, order)
