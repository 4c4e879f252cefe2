"""Program helpers for the hardware tests: token serialisation and random programs.

:func:`serialize` adds dependency flags so that every instruction starts only after the one
before it in program order has finished (a compute no-op relays load<->store hand-overs).
Such a program has exactly the meaning of the plain, in-order functional simulation, whatever
the DRAM timing, which makes it a sharp oracle for randomized RTL tests.

Example::

    >>> from toolchain.vta.isa import Load, Store, MEM_INP
    >>> [type(i).__name__ for i in serialize([Load(memory_type=MEM_INP), Store()])]
    ['Load', 'Gemm', 'Store', 'Finish']
"""

from __future__ import annotations

import dataclasses

import numpy as np

from toolchain.vta.builder import ProgramBuilder
from toolchain.vta.config import VTAConfig
from toolchain.vta.isa import (
    ALU_MUL,
    ALU_SHR,
    ENGINE_LOAD,
    ENGINE_STORE,
    MEM_ACC,
    MEM_INP,
    MEM_UOP,
    MEM_WGT,
    Alu,
    Finish,
    Gemm,
    Load,
    Store,
    Uop,
)
from toolchain.vta.program import Program

NOOP = Gemm(uop_bgn=0, uop_end=0)


def _hand_over(prev, nxt):
    """Flags making ``nxt`` wait for ``prev`` (adjacent engines)."""
    if nxt.engine > prev.engine:
        return dataclasses.replace(prev, push_next=True), dataclasses.replace(nxt, pop_prev=True)
    return dataclasses.replace(prev, push_prev=True), dataclasses.replace(nxt, pop_next=True)


def serialize(insns: list) -> list:
    """Chain ``insns`` (no flags set) with tokens; appends FINISH if missing."""
    if not insns or not isinstance(insns[-1], Finish):
        insns = [*insns, Finish()]
    out: list = []
    for insn in insns:
        if out and out[-1].engine != insn.engine:
            if {out[-1].engine, insn.engine} == {ENGINE_LOAD, ENGINE_STORE}:
                out[-1], relay = _hand_over(out[-1], NOOP)
                out.append(relay)
            out[-1], insn = _hand_over(out[-1], insn)
        out.append(insn)
    return out


def program(insns: list, dram: np.ndarray, config: VTAConfig | None = None) -> Program:
    """A Program from raw instructions and a DRAM image (serialised with tokens)."""
    return Program(serialize(insns), dram, {}, config or VTAConfig())


def exact_acc_readout(acc_rows: int, out_elem: int) -> list:
    """Instructions storing ACC[0:acc_rows] as 4 int8 planes (bytes 0..3 of every int32).

    OUT keeps the low byte of ACC, so store, SHR by 8, store, ... recovers all 32 bits.
    Plane p lands at OUT element ``out_elem + p * acc_rows``.
    """
    insns = []
    for plane in range(4):
        if plane:
            insns.append(Alu(alu_op=ALU_SHR, use_imm=True, imm=8, uop_bgn=0, uop_end=1,
                             iter_out=acc_rows, dst_factor_out=1, src_factor_out=1))
        insns.append(Store(sram_base=0, dram_base=out_elem + plane * acc_rows, y_size=1,
                           x_size=acc_rows, x_stride=acc_rows))
    return insns


def planes_to_int32(raw: np.ndarray, rows: int, cfg: VTAConfig) -> np.ndarray:
    """Inverse of :func:`exact_acc_readout`: (4, rows, OUT row) bytes -> int32 ACC rows."""
    planes = raw.reshape(4, rows, cfg.out_row_bytes).astype(np.uint32)
    word = planes[0] | planes[1] << 8 | planes[2] << 16 | planes[3] << 24
    return word.view(np.int32).reshape(rows, cfg.batch, cfg.block_out)


# ------------------------------------------------------------------ random programs
class RandomProgram:
    """Random legal programs over a small DRAM image (all memory types, pads, strides).

    Every index a GEMM/ALU touches stays inside its buffer and every LOAD/STORE inside the
    DRAM image, so the functional simulator accepts the program; the RTL must then produce
    the same DRAM bit for bit.
    """

    def __init__(self, seed: int, config: VTAConfig | None = None, n_insns: int = 24) -> None:
        self.cfg = config or VTAConfig()
        self.rng = np.random.default_rng(seed)
        self.n = n_insns
        # small working windows keep programs short while covering the address logic
        self.inp_rows, self.wgt_rows, self.acc_rows, self.uop_rows = 96, 24, 96, 64
        self.dram_bytes = 1 << 16
        self.keep_bytes = 1024  # the micro-op kernel sits below this

    def _r(self, lo: int, hi: int) -> int:
        return int(self.rng.integers(lo, hi + 1))

    def _load(self, mt: int) -> Load:
        cfg = self.cfg
        rows = {MEM_INP: self.inp_rows, MEM_WGT: self.wgt_rows, MEM_ACC: self.acc_rows,
                MEM_UOP: self.uop_rows}[mt]
        pads = [self._r(0, 2) if self.rng.random() < 0.5 else 0 for _ in range(4)]
        y, x = self._r(0 if self.rng.random() < 0.1 else 1, 4), self._r(1, 6)
        h, w = pads[0] + y + pads[1], pads[2] + x + pads[3]
        while h * w > rows:
            y, x = max(1, y - 1), max(1, x - 1)
            h, w = pads[0] + y + pads[1], pads[2] + x + pads[3]
        stride = self._r(max(0, x - 2), x + 5)
        row = cfg.row_bytes(mt)
        span = (max(y - 1, 0) * stride + x) * row
        dram_base = self._r(0, (self.dram_bytes - span) // row - 1)
        return Load(memory_type=mt, sram_base=self._r(0, rows - h * w), dram_base=dram_base,
                    y_size=y, x_size=x, x_stride=stride, y_pad_top=pads[0],
                    y_pad_bottom=pads[1], x_pad_left=pads[2], x_pad_right=pads[3])

    def _loop_fields(self, half: int) -> dict:
        """Loop extents over micro-ops of one kernel half (0: GEMM, 1: ALU, wgt_idx 0)."""
        size = self.uop_rows // 2
        bgn = half * size + self._r(0, size - 3)
        return {"uop_bgn": bgn, "uop_end": bgn + self._r(0 if self.rng.random() < 0.05 else 1,
                                                           3),
                "iter_out": self._r(1, 3), "iter_in": self._r(1, 3)}

    def _gemm(self) -> Gemm:
        f = self._loop_fields(0)
        # a zero inner destination factor makes consecutive steps accumulate into one ACC
        # row, the read-after-write case the pipelined GEMM must forward
        insn = Gemm(reset=self.rng.random() < 0.2, **f,
                    dst_factor_out=self._r(0, 8), dst_factor_in=self._pick0(4),
                    src_factor_out=self._r(0, 8), src_factor_in=self._r(0, 4),
                    wgt_factor_out=self._r(0, 3), wgt_factor_in=self._r(0, 2))
        return self._maybe_paired(insn) if insn.reset else insn

    def _alu(self) -> Alu:
        op = self._r(0, 4)
        use_imm = self.rng.random() < 0.5
        imm = self._r(-40, 40) if op != ALU_MUL else self._r(-3, 3)
        if op == ALU_SHR and self.rng.random() < 0.7:
            imm = self._r(-33, 33)
        insn = Alu(alu_op=op, use_imm=use_imm, imm=imm, **self._loop_fields(1),
                   dst_factor_out=self._r(0, 8), dst_factor_in=self._pick0(4),
                   src_factor_out=self._r(0, 8), src_factor_in=self._r(0, 4))
        return self._maybe_paired(insn) if use_imm else insn

    def _maybe_paired(self, insn):
        """Often take the shape the RTL runs two steps a cycle: one micro-op, odd inner
        destination factor, inner extent >= 2."""
        if self.rng.random() < 0.5:
            return insn
        fi = (1, 3)[self._r(0, 1)]
        # outer factors 0, 1 or fi make pairs share rows with the previous pair (forwarding)
        fo = (0, 1, fi, self._r(0, 8))[self._r(0, 3)]
        return dataclasses.replace(insn, uop_end=insn.uop_bgn + 1, iter_in=self._r(2, 5),
                                   dst_factor_in=fi, dst_factor_out=fo)

    def _pick0(self, hi: int) -> int:
        return 0 if self.rng.random() < 0.5 else self._r(0, hi)

    def _store(self) -> Store:
        cfg = self.cfg
        y, x = self._r(1, 4), self._r(1, 6)
        stride = self._r(max(0, x - 2), x + 4)
        span = ((y - 1) * stride + x) * cfg.out_row_bytes
        low = self.keep_bytes // cfg.out_row_bytes  # never overwrite the micro-op kernel
        return Store(sram_base=self._r(0, self.acc_rows - y * x),
                     dram_base=self._r(low, (self.dram_bytes - span) // cfg.out_row_bytes - 1),
                     y_size=y, x_size=x, x_stride=stride)

    def _snapshot(self) -> Store:
        """Store OUT rows 0..acc_rows-1 somewhere above the kernel."""
        row = self.cfg.out_row_bytes
        slots = (self.dram_bytes - self.keep_bytes) // (self.acc_rows * row)
        base = self.keep_bytes // row + self._r(0, slots - 1) * self.acc_rows
        return Store(sram_base=0, dram_base=base, y_size=1, x_size=self.acc_rows,
                     x_stride=self.acc_rows)

    def uops(self) -> list[Uop]:
        """GEMM micro-ops then ALU micro-ops (wgt 0), all in range with the largest offsets."""
        reach = 2 * 8 + 2 * 4  # (iter - 1) * factor, both loops
        half = self.uop_rows // 2
        # half the micro-ops share 4 ACC rows, so loops hit the same row back to back
        return [Uop(acc=self._r(0, 3 if self.rng.random() < 0.5 else self.acc_rows - reach - 1),
                    inp=self._r(0, min(self.inp_rows, self.acc_rows) - reach - 1),
                    wgt=self._r(0, self.wgt_rows - 2 * 3 - 2 * 2 - 1) if n < half else 0)
                for n in range(self.uop_rows)]

    def build(self) -> Program:
        """A random program: uop/acc loads, INP/WGT loads, GEMMs, ALUs, STOREs, FINISH."""
        cfg = self.cfg
        b = ProgramBuilder(cfg)
        dram = self.rng.integers(0, 256, size=self.dram_bytes, dtype=np.uint8)
        kernel = b.uops("uops", self.uops())
        insns: list = [Load(memory_type=MEM_UOP, sram_base=0, dram_base=kernel.elem(4),
                            y_size=1, x_size=self.uop_rows, x_stride=self.uop_rows)]
        kinds = ["inp", "wgt", "acc", "uop", "gemm", "gemm", "alu", "alu", "store"]
        for _ in range(self.n):
            kind = kinds[self._r(0, len(kinds) - 1)]
            if kind in ("gemm", "alu"):
                insns.append(self._gemm() if kind == "gemm" else self._alu())
                if self.rng.random() < 0.5:  # observe the whole ACC window now and then
                    insns.append(self._snapshot())
            elif kind == "store":
                insns.append(self._store())
            else:
                insns.append(self._load({"inp": MEM_INP, "wgt": MEM_WGT, "acc": MEM_ACC,
                                         "uop": MEM_UOP}[kind]))
        insns.append(Store(sram_base=0, dram_base=0, y_size=1, x_size=self.acc_rows,
                           x_stride=self.acc_rows))
        image = b.dram_image()
        dram[:len(image)] = image
        # random bytes as micro-ops would leave the buffers; reload pieces of the kernel
        # instead, each into its own half, at unaligned DRAM and SRAM offsets
        fixed = []
        half = self.uop_rows // 2
        for insn in insns:
            if isinstance(insn, Load) and insn.memory_type == MEM_UOP and fixed:
                h = self._r(0, 1)
                off = self._r(0, half - 1)
                n = self._r(1, half - off)
                dst = h * half + self._r(0, half - n)
                insn = dataclasses.replace(insn, dram_base=kernel.elem(4) + h * half + off,
                                           sram_base=dst,
                                           y_size=1, x_size=n, x_stride=n, y_pad_top=0,
                                           y_pad_bottom=0, x_pad_left=0, x_pad_right=0)
            fixed.append(insn)
        return Program(serialize(fixed), dram, {}, cfg)
