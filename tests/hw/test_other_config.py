"""A second shape of the accelerator: 4x4 GEMM core on a 64-bit DRAM bus.

Rows narrower than the bus (4-byte INP and OUT rows, micro-ops) take the lane-picking load
path and the strobed store path, and fetch assembles each instruction from two beats; none
of that happens in the default configuration. Results must still match the functional
simulator bit for bit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.hw.progs import RandomProgram
from toolchain.vta import gemm_workload, run_fsim
from toolchain.vta.config import VTAConfig
from toolchain.vta.rtl import build, params_svh, run_batch

SMALL = dataclasses.replace(
    VTAConfig(), batch=1, block_in=4, block_out=4, input_bytes=4096, weight_bytes=16384,
    acc_bytes=32768, uop_bytes=8192, bus_width_bits=64, bytes_per_cycle=8, name="vta-small")


@pytest.fixture(scope="module")
def small_model() -> str:
    return str(build(SMALL))


def test_small_params() -> None:
    text = params_svh(SMALL)
    assert "localparam int BUS_BYTES = 8;" in text and "localparam int BLOCK_IN = 4;" in text


def test_small_config_matches_fsim(small_model: str) -> None:
    wl = gemm_workload(24, 20, 12, SMALL, seed=4, tiling=(8, 3, 1))
    progs = [wl.serial, wl.vthread] + [RandomProgram(seed, SMALL).build() for seed in range(4)]
    results = run_batch([(p, None) for p in progs], SMALL, latency=30, bandwidth=4)
    for n, (prog, (dram, _c)) in enumerate(zip(progs, results, strict=True)):
        want = run_fsim(prog).dram
        diff = np.flatnonzero(dram != want)
        assert diff.size == 0, f"program {n}: {diff.size} bytes differ, first at {diff[:8]}"
    for dram, _c in results[:2]:
        np.testing.assert_array_equal(wl.read_output(dram), wl.expected)
