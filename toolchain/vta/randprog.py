"""Random, race-free accelerator programs for differential testing (fsim modes, RTL).

:func:`random_program` draws a program of a few *phases*.  Each phase is: the load engine
fills random INP/WGT rows (random 2-D shapes, strides, paddings); compute loads random
micro-op kernels (and sometimes ACC rows) and runs random GEMMs (with and without reset) and
ALU ops (all five, tensor-tensor and immediate) over random affine loops; the store engine
writes random OUT rows to DRAM with random strides.  Tokens make it race-free — the only
legal token pattern that still lets the load engine run a phase ahead:

- the last LOAD of phase *p* pushes ``l2c``; the first compute instruction of *p* pops it;
- the first LOAD of phase *p > 0* pops ``c2l``, pushed by the last compute instruction of *p-1*;
- the last compute instruction of *p* pushes ``c2s``; the first STORE of *p* pops it;
- the last STORE of *p* pushes ``s2c`` when phase *p+1* exists; its first compute pops it.

So every interleaving (plain mode, token mode with any seed, the RTL) must produce the same
DRAM.  All indices stay inside the buffers and DRAM.

Example::

    >>> from toolchain.vta.fsim import run_fsim
    >>> prog = random_program(7)
    >>> a = run_fsim(prog).dram; b = run_fsim(prog, tokens=True, seed=1).dram
    >>> bool((a == b).all())
    True
"""

from __future__ import annotations

import numpy as np

from toolchain.vta.builder import ProgramBuilder
from toolchain.vta.config import VTAConfig
from toolchain.vta.isa import MEM_ACC, MEM_INP, MEM_WGT, Uop
from toolchain.vta.program import Program, Region


class _Gen:
    def __init__(self, seed: int, cfg: VTAConfig, scale: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.cfg = cfg
        self.scale = scale
        self.b = ProgramBuilder(cfg)
        self.kernels = 0
        # Indices are drawn from a small window of each buffer (at its start or its end, to
        # exercise the top rows too) so that loads, GEMMs, ALU ops and stores hit the same rows.
        self.win = 2 * scale * scale
        self.at_end = bool(self.rng.integers(0, 2))

    def idx(self, depth: int, span: int) -> int:
        """A random first row for ``span`` rows inside the window of a buffer of ``depth``."""
        win = min(self.win, depth)
        lo = depth - win if self.at_end else 0
        return min(lo + self.r(0, max(0, win - span)), depth - span)

    def r(self, lo: int, hi: int) -> int:
        """Random int in [lo, hi] (inclusive)."""
        return int(self.rng.integers(lo, hi + 1))

    def dma_shape(self, depth: int, region_elems: int, pads: bool) -> dict:
        s = self.scale
        y, x = self.r(0 if self.r(0, 6) == 0 else 1, s), self.r(1, 2 * s)
        stride = x + self.r(-min(x - 1, 1), s) if self.r(0, 3) else x
        pad = tuple(self.r(0, 2) if pads and self.r(0, 1) else 0 for _ in range(4))
        h, w = pad[0] + y + pad[1], pad[2] + x + pad[3]
        span = (y - 1) * stride + x if y else 0
        base = self.r(0, max(0, region_elems - span))
        sram = self.idx(depth, h * w)
        return dict(sram_base=sram, offset=base, y_size=y, x_size=x, x_stride=stride, pad=pad)

    def load(self, mem: int, region: Region, **deps: bool) -> None:
        cfg = self.cfg
        elems = region.nbytes // cfg.row_bytes(mem)
        d = self.dma_shape(cfg.depth(mem), elems, pads=True)
        self.b.load(mem, d["sram_base"], region, d["offset"], y_size=d["y_size"],
                    x_size=d["x_size"], x_stride=d["x_stride"], pad=d["pad"], **deps)

    def loop(self, alu: bool) -> tuple[dict, list[Uop]]:
        """A random affine loop and micro-ops whose indices stay inside the buffers."""
        cfg, s = self.cfg, self.scale
        it_o, it_i, nu = self.r(1, s), self.r(1, s), self.r(1, s)
        f = {k: self.r(0, s) for k in ("do", "di", "so", "si", "wo", "wi")}
        max_acc = (it_o - 1) * f["do"] + (it_i - 1) * f["di"]
        max_src = (it_o - 1) * f["so"] + (it_i - 1) * f["si"]
        max_wgt = 0 if alu else (it_o - 1) * f["wo"] + (it_i - 1) * f["wi"]
        src_depth = cfg.acc_depth if alu else cfg.inp_depth
        uops = [Uop(acc=self.idx(cfg.acc_depth, max_acc + 1),
                    inp=self.idx(src_depth, max_src + 1),
                    wgt=0 if alu else self.idx(cfg.wgt_depth, max_wgt + 1))
                for _ in range(nu)]
        loop = dict(iter_out=it_o, iter_in=it_i, dst=(f["do"], f["di"]), src=(f["so"], f["si"]))
        if not alu:
            loop["wgt"] = (f["wo"], f["wi"])
        return loop, uops

    def compute_insn(self, data: dict[str, Region], **deps: bool) -> None:
        kind = self.r(0, 9)
        b = self.b
        if kind == 0:  # accumulator rows straight from DRAM
            self.load(MEM_ACC, data["acc"], **deps)
            return
        alu = kind >= 6
        loop, uops = self.loop(alu)
        kern = b.uops(f"k{self.kernels}", uops)
        self.kernels += 1
        at = self.r(0, self.cfg.uop_depth - len(uops))
        b.load_uops(kern, sram_base=at)
        if alu:
            op = self.r(0, 4)
            imm = None if self.r(0, 1) else self.r(-(1 << 15), (1 << 15) - 1)
            if op == 3 and imm is not None and self.r(0, 1):
                imm = self.r(-40, 40)  # interesting shift amounts, both directions
            b.alu(op, at, at + len(uops), imm=imm, **loop, **deps)
        else:
            b.gemm(at, at + len(uops), reset=self.r(0, 5) == 0, **loop, **deps)

    def store(self, out: Region, **deps: bool) -> None:
        cfg = self.cfg
        d = self.dma_shape(cfg.out_depth, out.nbytes // cfg.out_row_bytes, pads=False)
        n = d["y_size"] * d["x_size"]
        self.b.store(self.idx(cfg.out_depth, n), out, d["offset"], y_size=d["y_size"],
                     x_size=d["x_size"], x_stride=d["x_stride"], **deps)


def random_program(seed: int, config: VTAConfig | None = None, *, phases: int | None = None,
                   scale: int = 4) -> Program:
    """A random race-free program (see the module docstring); deterministic in ``seed``.

    ``scale`` bounds DMA sizes, loop extents, factors and kernel lengths (small keeps RTL
    simulation fast).  The DRAM region ``out`` receives the stores.
    """
    cfg = config or VTAConfig()
    g = _Gen(seed, cfg, scale)
    rng = g.rng
    s = scale
    data = {
        "inp": g.b.data("inp", rng.integers(-128, 128, (8 * s * s, cfg.inp_row_bytes), np.int8)),
        "wgt": g.b.data("wgt", rng.integers(-128, 128, (8 * s * s, cfg.wgt_row_bytes), np.int8)),
        "acc": g.b.data("acc", rng.integers(-(1 << 20), 1 << 20,
                                            (8 * s * s, cfg.acc_row_bytes // 4), np.int32)),
    }
    out = g.b.alloc("out", (8 * s * s, cfg.out_row_bytes), "int8")
    nphase = phases if phases is not None else g.r(1, 4)
    for p in range(nphase):
        nload, ncomp, nstore = g.r(1, 3), g.r(1, 4), g.r(1, 3)
        for i in range(nload):
            mem, region = (MEM_INP, data["inp"]) if g.r(0, 1) else (MEM_WGT, data["wgt"])
            g.load(mem, region, pop_next=p > 0 and i == 0, push_next=i == nload - 1)
        for i in range(ncomp):
            deps = dict(pop_prev=i == 0, pop_next=p > 0 and i == 0,
                        push_prev=i == ncomp - 1 and p < nphase - 1, push_next=i == ncomp - 1)
            g.compute_insn(data, **deps)
        for i in range(nstore):
            g.store(out, pop_prev=i == 0, push_prev=i == nstore - 1 and p < nphase - 1)
    g.b.finish()
    return g.b.build()
