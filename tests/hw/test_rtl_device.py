"""The RTL model as a C device (hw/rtl/sim/kiln_vta_rtl.cpp behind runtime_c/kiln_vta.h):
bit-exact with the C functional simulator, cycle-exact with the cocotb runner, and the
driver's error codes for a deadlock and a timeout."""

from __future__ import annotations

import numpy as np
import pytest

from toolchain.vta.cfsim import CFsimError, run_cfsim
from toolchain.vta.compile import Tiles, compile_dense
from toolchain.vta.isa import MEM_INP, Finish, Gemm, Load
from toolchain.vta.program import Program
from toolchain.vta.randprog import random_program
from toolchain.vta.rtl import run_batch
from toolchain.vta.rtl_device import run_rtl_device
from toolchain.vta.workloads import gemm_workload


@pytest.mark.parametrize("seed", range(10))
def test_random_programs_match_the_c_simulator(seed):
    prog = random_program(seed)
    dram, counters = run_rtl_device(prog, latency=20, bandwidth=4)
    np.testing.assert_array_equal(dram, run_cfsim(prog, tokens=True, seed=seed).dram)
    assert counters["cycles"] > 0


def test_a_compiled_layer_is_bit_exact():
    rng = np.random.default_rng(5)
    w = rng.integers(-128, 128, (64, 48), dtype=np.int8)
    x = rng.integers(-128, 128, (10, 64), dtype=np.int8)
    layer = compile_dense(w, 10, shift=8, tiles=Tiles(5, 3, 2), layer="fc")
    dram, _ = run_rtl_device(layer.program, layer.image(x))
    np.testing.assert_array_equal(dram, run_cfsim(layer.program, layer.image(x)).dram)


def test_cycles_equal_the_cocotb_runner():
    """Same RTL, same reset/start sequence: the same counters, cycle for cycle."""
    progs = [random_program(1), gemm_workload(40, 64, 48, seed=1).vthread]
    for prog, (dram, counters) in zip(progs, run_batch([(p, None) for p in progs], latency=64,
                                                        bandwidth=8), strict=True):
        got = run_rtl_device(prog, latency=64, bandwidth=8)
        np.testing.assert_array_equal(got[0], dram)
        assert got[1] == counters


def _prog(insns) -> Program:
    return Program(list(insns), np.zeros(64, np.uint8))


def test_deadlock_and_timeout_are_error_codes():
    cyclic = _prog([Load(memory_type=MEM_INP, pop_next=True, push_next=True),
                    Gemm(pop_prev=True, push_prev=True), Finish()])
    with pytest.raises(CFsimError) as err:
        run_rtl_device(cyclic)
    assert err.value.code_name == "KILN_VTA_ERR_DEADLOCK"
    assert "compute engine blocked at instruction 1 (GEMM) waiting to pop l2c" in str(err.value)
    long = _prog([Gemm(iter_out=1000, iter_in=100), Finish()])
    with pytest.raises(CFsimError) as err:
        run_rtl_device(long, timeout_cycles=500)
    assert err.value.code_name == "KILN_VTA_ERR_TIMEOUT"
    with pytest.raises(CFsimError) as err:
        run_rtl_device(_prog([Gemm()]))
    assert err.value.code_name == "KILN_VTA_ERR_FINISH"
