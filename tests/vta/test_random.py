"""Randomised programs: fsim (plain and token mode, several interleavings) vs a literal oracle."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from toolchain.errors import SimulationError
from toolchain.vta.checker import check_program
from toolchain.vta.fsim import run_fsim
from toolchain.vta.program import Program
from toolchain.vta.randprog import random_program

from .reference import run_reference


@pytest.mark.parametrize("seed", range(40))
def test_random_program_all_modes_agree_with_reference(seed):
    prog = random_program(seed)
    assert check_program(prog).ok
    plain = run_fsim(prog)
    np.testing.assert_array_equal(plain.dram, run_reference(prog.insn_bytes, prog.dram))
    for s in (None, seed, seed + 1000):
        tok = run_fsim(prog, tokens=True, seed=s)
        np.testing.assert_array_equal(tok.dram, plain.dram)
        assert tok.counters == plain.counters
        assert sorted(tok.order) == list(range(len(prog.insns)))


def test_random_programs_really_compute_something():
    nonzero = sum(bool(random_program(s).read("out", run_fsim(random_program(s)).dram).any())
                  for s in range(20))
    assert nonzero >= 10


def test_token_mode_interleaves_engines():
    """With a seed, the load engine really runs ahead of program order."""
    reordered = 0
    for seed in range(10):
        prog = random_program(seed, phases=3)
        order = run_fsim(prog, tokens=True, seed=seed).order
        reordered += order != sorted(order)
    assert reordered >= 5


def _drop_flag(prog: Program, flag: str) -> tuple[Program, int]:
    idx = next(i for i, x in enumerate(prog.insns) if getattr(x, flag, False))
    insns = list(prog.insns)
    insns[idx] = dataclasses.replace(insns[idx], **{flag: False})
    return Program(insns, prog.dram, prog.regions, prog.config), idx


@pytest.mark.parametrize("flag", ["push_next", "push_prev"])
def test_dropping_a_push_is_caught_statically_and_dynamically(flag):
    prog = next(p for p in (random_program(s, phases=3) for s in range(50))
                if sum(getattr(x, flag) for x in p.insns) >= 2)
    broken, idx = _drop_flag(prog, flag)
    report = check_program(broken)
    assert not report.ok
    assert any("pops a token that is never pushed" in e for e in report.errors)
    assert any(e.startswith("certain deadlock") for e in report.errors)
    with pytest.raises(SimulationError, match="deadlock in token mode: .*blocked at instruction"):
        run_fsim(broken, tokens=True)
    run_fsim(broken)  # plain mode does not look at tokens
    assert idx >= 0
