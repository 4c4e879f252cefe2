"""GEMM workloads: serial and virtual-thread programs give numpy's result in both fsim modes."""

from __future__ import annotations

import numpy as np
import pytest

from toolchain.errors import OptionError
from toolchain.vta.checker import check_program
from toolchain.vta.config import VTAConfig
from toolchain.vta.fsim import run_fsim
from toolchain.vta.workloads import (
    RESNET18_LAYERS,
    Tiling,
    choose_tiling,
    expected_result,
    gemm_workload,
    resnet18_workload,
)


@pytest.mark.parametrize("m, k, n, tiling", [
    (40, 64, 48, None),              # resident weights, one tile
    (64, 96, 64, (16, 2, 3)),        # several m, n and k tiles, weights streamed
    (37, 50, 20, (8, 1, 2)),         # ragged M, K and N padded to blocks
    (5, 16, 16, (2, 1, 1)),          # tiny
])
@pytest.mark.parametrize("requant", ["clip", "shift", "none"])
def test_programs_compute_expected_result(m, k, n, tiling, requant):
    wl = gemm_workload(m, k, n, tiling=tiling, requant=requant, seed=m + k + n)
    for prog in (wl.serial, wl.vthread):
        assert check_program(prog).ok
        plain = run_fsim(prog)
        np.testing.assert_array_equal(wl.read_output(plain.dram), wl.expected)
        tok = run_fsim(prog, tokens=True, seed=7)
        np.testing.assert_array_equal(tok.dram, plain.dram)
        assert plain.counters["macs"] == wl.macs


def test_expected_result_is_numpy_gemm():
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (7, 33), dtype=np.int8)
    b = rng.integers(-128, 128, (33, 5), dtype=np.int8)
    c = a.astype(np.int32) @ b.astype(np.int32)
    np.testing.assert_array_equal(expected_result(a, b, 4, "clip"), np.clip(c >> 4, -128, 127))
    np.testing.assert_array_equal(expected_result(a, b, 4, "none"), c.astype(np.int8))
    assert (np.clip(c >> 4, -128, 127) != (c >> 4).astype(np.int8)).any()  # clipping matters


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_expected_result_of_bytes_is_exact_where_int32_wraps(dtype):
    """Byte operands go through float64: exact, with the int32 wrap-around, at the
    extremes (200,000 products of (-128)^2 or 255 * -128 overflow int32)."""
    lo = np.iinfo(dtype).min if dtype == "int8" else np.iinfo(dtype).max
    a = np.full((2, 200_000), lo, dtype)
    a[1, ::3] = 7
    b = np.full((200_000, 3), -128, np.int8)
    acc = a.astype(np.int64) @ b.astype(np.int64)
    assert abs(acc).max() > 2**31  # wraps
    acc = ((acc + 2**31) % 2**32) - 2**31
    for shift, requant in ((0, "none"), (3, "shift"), (3, "clip")):
        want = acc >> shift if requant != "none" else acc
        want = np.clip(want, -128, 127) if requant == "clip" else want
        np.testing.assert_array_equal(expected_result(a, b, shift, requant),
                                      (want & 0xFF).astype(np.uint8).view(np.int8))


def test_vthread_program_overlaps_and_serial_does_not():
    """In the virtual-thread program a load of the next group is free to run before the
    current GEMM (only a c2l token two groups back gates it); serially it is not."""
    wl = gemm_workload(64, 96, 64, tiling=(16, 2, 3), seed=1)
    ser = [x for x in wl.serial.insns if getattr(x, "pop_next", False) and x.engine == 0]
    vt = [x for x in wl.vthread.insns if getattr(x, "pop_next", False) and x.engine == 0]
    groups = 4 * 2 * 2  # m tiles x n tiles x k tiles
    assert len(ser) == groups - 1 and len(vt) == groups - 2
    order = run_fsim(wl.vthread, tokens=True).order
    kinds = [wl.vthread.insns[i].name + str(wl.vthread.insns[i].engine) for i in order]
    first_gemm = next(i for i, k in enumerate(kinds) if k == "GEMM1"
                      and not wl.vthread.insns[order[i]].reset)
    assert kinds[:first_gemm].count("LOAD0") >= 4  # two groups' loads before the first GEMM


def test_resnet_layers_shapes_and_tiling_fit():
    assert RESNET18_LAYERS["C2"].gemm_shape == (3136, 576, 64)
    assert RESNET18_LAYERS["C7"].gemm_shape == (196, 1152, 256)
    assert RESNET18_LAYERS["C12"].gemm_shape == (49, 4608, 512)
    for layer in RESNET18_LAYERS.values():
        m, k, n = layer.gemm_shape
        t = choose_tiling(m, k // 16, n // 16, VTAConfig())
        assert t.tm * t.tk <= 1024 and t.tm * t.tn <= 1024


@pytest.mark.slow
@pytest.mark.parametrize("layer", list(RESNET18_LAYERS))
def test_resnet_layers_correct(layer):
    wl = resnet18_workload(layer, seed=2)
    for prog, tokens in ((wl.serial, False), (wl.vthread, True)):
        out = wl.read_output(run_fsim(prog, tokens=tokens).dram)
        np.testing.assert_array_equal(out, wl.expected)


def test_bad_requests_are_refused():
    with pytest.raises(OptionError, match="unknown ResNet-18 layer 'C1'"):
        resnet18_workload("C1")
    with pytest.raises(OptionError, match="requant must be one of"):
        gemm_workload(16, 16, 16, requant="round")
    with pytest.raises(OptionError, match=r"INP tile 2000x1 exceeds half the INP buffer"):
        gemm_workload(2000, 16, 16, tiling=(2000, 1, 1))
    with pytest.raises(OptionError, match="tn=3 must divide N blocks 4"):
        gemm_workload(16, 16, 64, tiling=Tiling(4, 3, 1, False))
