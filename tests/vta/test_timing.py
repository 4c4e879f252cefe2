"""The cycle model (toolchain.vta.timing) on hand-checkable programs."""

from __future__ import annotations

import numpy as np

from toolchain.vta import ProgramBuilder, Uop
from toolchain.vta.isa import MEM_INP
from toolchain.vta.timing import STARTUP, estimate_cycles


def test_a_token_chain_adds_up_and_independent_engines_overlap() -> None:
    """load (64 latency + 4 rows x 16 B / 16 B per cycle) -> GEMM (4 steps) -> store
    (4 rows x 16 B / 16 B): 68 + STARTUP + 4 + 4 cycles; without the tokens the engines
    start together and the program takes as long as its longest engine."""
    for tokens in (True, False):
        b = ProgramBuilder()
        x = b.data("x", np.ones((4, 1, 16), np.int8))
        y = b.alloc("y", (4, 1, 16), "int8")
        k = b.uops("k", [Uop(acc=0, inp=0, wgt=0)])
        b.load_uops(k)
        b.load(MEM_INP, 0, x, y_size=1, x_size=4, push_next=tokens)
        b.gemm(0, 1, iter_in=4, dst=(0, 1), src=(0, 1), pop_prev=tokens, push_next=tokens)
        b.store(0, y, y_size=1, x_size=4, pop_prev=tokens)
        b.finish()
        prog = b.build()
        uop_load = 64 + 1  # 4 bytes of micro-ops: one cycle after the latency
        if tokens:
            assert estimate_cycles(prog) == max(uop_load, 68) + STARTUP + 4 + 4
        else:
            assert estimate_cycles(prog) == max(68, uop_load + STARTUP + 4, 4)
