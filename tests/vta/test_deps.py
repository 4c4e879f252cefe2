"""Dependency-token insertion (toolchain.vta.deps) against hand-checked push/pop patterns."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from toolchain.vta import check_program, gemm_workload, run_fsim
from toolchain.vta.deps import accesses, insert_tokens
from toolchain.vta.isa import MEM_INP, MEM_UOP, MEM_WGT, Alu, Finish, Gemm, Load, Store, Uop

FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")


def _flags(insns) -> list[str]:
    return [" ".join(f for f in FLAGS if getattr(i, f)) for i in insns]


def _inp(base: int, rows: int = 1) -> Load:
    return Load(memory_type=MEM_INP, sram_base=base, y_size=1, x_size=rows, x_stride=rows)


def test_chain_load_gemm_store() -> None:
    insns = [_inp(0), Gemm(uop_end=1), Store(sram_base=0, y_size=1, x_size=1, x_stride=1)]
    out = insert_tokens(insns, [[], [Uop(acc=0, inp=0, wgt=0)], []])
    assert _flags(out) == ["push_next", "pop_prev push_next", "pop_prev"]


def test_double_buffer_halves_overlap_and_reuse_waits() -> None:
    """Two groups in two INP halves: the second load does not wait; the third reuses half 0
    and waits (c2l) for the first GEMM only."""
    g = [Uop(acc=0, inp=0), Uop(acc=1, inp=8), Uop(acc=2, inp=0)]
    insns = [_inp(0), _inp(8), Gemm(uop_end=1), Gemm(uop_end=1), _inp(0), Gemm(uop_end=1)]
    uops = [[], [], [g[0]], [g[1]], [], [g[2]]]
    out = insert_tokens(insns, uops)
    assert _flags(out) == ["push_next", "push_next", "pop_prev push_prev", "pop_prev",
                           "pop_next push_next", "pop_prev"]


def test_one_token_covers_several_dependencies() -> None:
    """A GEMM reading rows of three earlier loads pops once (from the latest load)."""
    insns = [_inp(0), _inp(1), _inp(2), Gemm(uop_end=1)]
    out = insert_tokens(insns, [[], [], [], [Uop(acc=0, inp=0)]])
    assert _flags(out) == ["push_next", "", "", "pop_prev"]  # reads row 0 only: load #0
    out = insert_tokens([*insns[:3], Gemm(uop_end=1, iter_in=3, src_factor_in=1,
                                          dst_factor_in=1)],
                        [[], [], [], [Uop(acc=0, inp=0)]])
    assert _flags(out) == ["", "", "push_next", "pop_prev"]


def test_loop_carried_accumulator_reuse_waits_for_the_store() -> None:
    """Tile 2 resets the ACC rows tile 0 stored: s2c from that STORE to the reset."""
    st = Store(sram_base=0, y_size=1, x_size=2, x_stride=2)
    alu = Alu(alu_op=3, use_imm=True, imm=1, uop_end=1, iter_in=2, dst_factor_in=1)
    insns = [Gemm(uop_end=1, reset=True, iter_in=2, dst_factor_in=1), alu, st,
             Gemm(uop_end=1, reset=True, iter_in=2, dst_factor_in=1)]
    out = insert_tokens(insns, [[Uop(acc=0)], [Uop(acc=0)], [], [Uop(acc=0)]])
    assert _flags(out) == ["", "push_next", "pop_prev push_prev", "pop_next"]


def test_accesses_of_gemm_cover_the_micro_op_loop() -> None:
    g = Gemm(uop_end=2, iter_out=3, iter_in=4, dst_factor_out=0, dst_factor_in=2,
             src_factor_out=1, src_factor_in=3, wgt_factor_out=1, wgt_factor_in=0)
    acc = accesses(g, [Uop(acc=0, inp=0, wgt=0), Uop(acc=1, inp=0, wgt=5)])
    assert [(a.mem, a.lo, a.hi, a.write) for a in acc] == [
        (3, 0, 8, True), (3, 0, 8, False), (MEM_INP, 0, 12, False), (MEM_WGT, 0, 8, False)]


def _strip(insn):
    return dataclasses.replace(insn, **{f: False for f in FLAGS})


@pytest.mark.parametrize("shape, tiling", [((64, 96, 48), (16, 1, 2)),
                                           ((40, 64, 48), None)])
def test_tokens_of_the_hand_generator_are_rederived(shape, tiling) -> None:
    """Strip every token from the hand-written latency-hiding program, insert them again:
    the checker accepts it (balanced, no deadlock) and token-mode runs with random engine
    interleavings are bit-exact with plain order and numpy."""
    wl = gemm_workload(*shape, tiling=tiling, seed=3)
    prog = wl.vthread
    uop_rows = np.zeros(prog.config.uop_depth, dtype=np.uint32)
    for insn in prog.insns:
        if isinstance(insn, Load) and insn.memory_type == MEM_UOP:
            raw = prog.dram[insn.dram_base * 4: (insn.dram_base + insn.x_size) * 4]
            uop_rows[insn.sram_base: insn.sram_base + insn.x_size] = np.frombuffer(
                raw.tobytes(), np.uint32)
    body = [_strip(i) for i in prog.insns[:-1]]
    uops = [[Uop.decode(int(w)) for w in uop_rows[i.uop_bgn:i.uop_end]]
            if isinstance(i, (Gemm, Alu)) else [] for i in body]
    insns = [*insert_tokens(body, uops), Finish()]
    new = dataclasses.replace(prog, insns=insns)
    assert check_program(new).ok, str(check_program(new))
    for seed in (0, 1):
        out = wl.read_output(run_fsim(new, tokens=True, seed=seed).dram)
        assert (out == wl.expected).all()
    pushes = lambda p: sum(getattr(i, f) for i in p.insns for f in FLAGS[2:])  # noqa: E731
    assert pushes(new) <= pushes(prog)
