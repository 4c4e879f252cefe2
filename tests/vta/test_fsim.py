"""Functional simulator: LOAD (padding, strides), GEMM, ALU, STORE against numpy; errors."""

from __future__ import annotations

import numpy as np
import pytest

from toolchain.errors import SimulationError
from toolchain.vta.builder import ProgramBuilder
from toolchain.vta.fsim import alu_reference, run_fsim
from toolchain.vta.isa import (
    ALU_ADD,
    ALU_MAX,
    ALU_MIN,
    ALU_MUL,
    ALU_SHR,
    MEM_ACC,
    MEM_INP,
    MEM_WGT,
    Uop,
)

RNG = np.random.default_rng(1234)


def i8(*shape):
    return RNG.integers(-128, 128, shape, dtype=np.int8)


def test_padded_strided_load_then_store_matches_numpy_pad():
    """LOAD ACC of a 3x4 block of a 5x6 matrix with pads (1,2,2,1), stored back whole."""
    b = ProgramBuilder()
    src = RNG.integers(-(1 << 31), 1 << 31, (5, 6, 1, 16), dtype=np.int64).astype(np.int32)
    acc = b.data("acc", src)
    h, w = 1 + 3 + 2, 2 + 4 + 1
    out = b.alloc("out", (h, w, 1, 16), "int8")
    b.load(MEM_ACC, 10, acc, 1 * 6 + 1, y_size=3, x_size=4, x_stride=6, pad=(1, 2, 2, 1))
    b.store(10, out, y_size=h, x_size=w)
    b.finish()
    prog = b.build()
    res = run_fsim(prog)
    expect = np.pad(src[1:4, 1:5], ((1, 2), (2, 1), (0, 0), (0, 0)))
    got = prog.read("out", res.dram)
    np.testing.assert_array_equal(got, (expect & 0xFF).astype(np.uint8).view(np.int8))
    assert res.counters["bytes_loaded_acc"] == 3 * 4 * 64  # padding is not DRAM traffic
    assert res.counters["bytes_stored_out"] == h * w * 16


def test_zero_size_load_with_padding_clears_rows():
    b = ProgramBuilder()
    acc = b.data("acc", np.full((4, 1, 16), 7, np.int32))
    out = b.alloc("out", (4, 1, 16), "int8")
    b.load(MEM_ACC, 0, acc, y_size=1, x_size=4)
    b.load(MEM_ACC, 1, acc, y_size=0, x_size=3, pad=(1, 0, 1, 0))  # H=1, W=4 -> rows 1..4
    b.store(0, out, y_size=1, x_size=4)
    b.finish()
    prog = b.build()
    got = prog.read("out", run_fsim(prog).dram)
    assert got[0].tolist() == [[7] * 16] and not got[1:].any()


def _gemm_program(x, w, iter_out, iter_in, uops, dst, src, wgt, acc_rows, reset_first=True):
    b = ProgramBuilder()
    xr = b.data("x", x)
    wr = b.data("w", w)
    out = b.alloc("out", (acc_rows, 1, 16), "int8")
    acc_out = b.alloc("acc_init", (acc_rows, 1, 16), "int32")
    k = b.uops("k", uops)
    b.load_uops(k, 100)
    b.load(MEM_INP, 0, xr, y_size=1, x_size=len(x))
    b.load(MEM_WGT, 0, wr, y_size=1, x_size=len(w))
    b.load(MEM_ACC, 0, acc_out, y_size=1, x_size=acc_rows)
    b.gemm(100, 100 + len(uops), iter_out=iter_out, iter_in=iter_in, dst=dst, src=src, wgt=wgt)
    b.store(0, out, y_size=1, x_size=acc_rows)
    b.finish()
    return b.build()


def test_gemm_affine_loop_matches_numpy():
    """C[m, n] = sum_k X[m, k] . W[n, k] over an out=k, in=m loop with n micro-ops."""
    tm, tn, tk = 5, 3, 4
    x = i8(tm * tk, 1, 16)          # INP row m*tk + k
    w = i8(tn * tk, 16, 16)         # WGT row n*tk + k
    uops = [Uop(acc=n, inp=0, wgt=n * tk) for n in range(tn)]
    prog = _gemm_program(x, w, tk, tm, uops, dst=(0, tn), src=(1, tk), wgt=(1, 0),
                         acc_rows=tm * tn)
    res = run_fsim(prog)
    xm = x.reshape(tm, tk, 16).astype(np.int64)
    wm = w.reshape(tn, tk, 16, 16).astype(np.int64)
    c = np.einsum("mkb,nkob->mno", xm, wm)
    got = prog.read("out", res.dram).reshape(tm, tn, 16)
    np.testing.assert_array_equal(got, (c & 0xFF).astype(np.uint8).view(np.int8))
    assert res.counters["macs"] == tm * tn * tk * 256
    assert res.counters["gemm_steps"] == tm * tn * tk


def test_gemm_accumulates_wraps_and_resets():
    """Accumulating onto int32 values near the limits wraps modulo 2^32; reset writes 0."""
    b = ProgramBuilder()
    x = b.data("x", np.full((1, 1, 16), 127, np.int8))
    w = b.data("w", np.full((1, 16, 16), 127, np.int8))
    init = np.array([[[2**31 - 1] * 16], [[-(2**31)] * 16]], np.int32)
    acc = b.data("acc", init)
    res_region = b.alloc("res", (2, 1, 16), "int8")
    k = b.uops("k", [Uop(0, 0, 0), Uop(1, 0, 0)])
    rst = b.uops("r", [Uop(1, 0, 0)])
    b.load_uops(k, 0)
    b.load_uops(rst, 2)
    b.load(MEM_INP, 0, x)
    b.load(MEM_WGT, 0, w)
    b.load(MEM_ACC, 0, acc, y_size=1, x_size=2)
    b.gemm(0, 2)                          # += 16 * 127 * 127
    b.gemm(2, 3, reset=True)              # row 1 -> 0
    b.store(0, res_region, y_size=1, x_size=2)
    b.finish()
    prog = b.build()
    got = prog.read("res", run_fsim(prog).dram)
    row0 = (2**31 - 1 + 16 * 127 * 127 + 2**31) % 2**32 - 2**31
    assert got[0, 0, 0] == np.int8(np.uint8(row0 & 0xFF).view(np.int8))
    assert not got[1].any()


@pytest.mark.parametrize("op", [ALU_MIN, ALU_MAX, ALU_ADD, ALU_SHR, ALU_MUL])
@pytest.mark.parametrize("use_imm", [False, True])
def test_alu_ops_against_numpy(op, use_imm):
    rows = 6
    init = RNG.integers(-(1 << 31), 1 << 31, (2 * rows, 1, 16), dtype=np.int64).astype(np.int32)
    if op == ALU_SHR and not use_imm:   # shift amounts from -40..40 in the source rows
        init[rows:] = RNG.integers(-40, 41, (rows, 1, 16))
    imm = -7 if op == ALU_SHR else -12345
    b = ProgramBuilder()
    acc = b.data("acc", init)
    out_acc = b.alloc("out", (rows, 1, 16), "int8")
    k = b.uops("k", [Uop(acc=0, inp=rows)])
    b.load_uops(k, 0)
    b.load(MEM_ACC, 0, acc, y_size=1, x_size=2 * rows)
    b.alu(op, 0, 1, imm=imm if use_imm else None, iter_out=2, iter_in=rows // 2,
          dst=(rows // 2, 1), src=(rows // 2, 1))
    b.store(0, out_acc, y_size=1, x_size=rows)
    b.finish()
    prog = b.build()
    got = prog.read("out", run_fsim(prog).dram)
    a = init[:rows].astype(np.int64)
    bb = np.full_like(a, imm) if use_imm else init[rows:].astype(np.int64)
    if op == ALU_MIN:
        r = np.minimum(a, bb)
    elif op == ALU_MAX:
        r = np.maximum(a, bb)
    elif op == ALU_ADD:
        r = a + bb
    elif op == ALU_MUL:
        r = a * bb
    else:
        sh = ((bb & 63) ^ 32) - 32
        r = np.where(sh >= 0, a >> np.clip(sh, 0, 63), a << np.clip(-sh, 0, 63))
    np.testing.assert_array_equal(got, (r & 0xFF).astype(np.uint8).view(np.int8))


def test_shr_edge_cases():
    a = np.array([-256, -256, 1, 1, -1, 12345678], np.int32)
    b = np.array([4, -4, 31, -31, -32, 32], np.int32)  # 32 -> low 6 bits 32 -> -32: left 32
    assert alu_reference(ALU_SHR, a, b).tolist() == [-16, -4096, 0, -2**31, 0, 0]


def test_alu_sequential_semantics_when_rows_overlap():
    """ADD acc[i] += acc[i-1] over i = 1..4 is a prefix sum, not a parallel add."""
    b = ProgramBuilder()
    acc = b.data("acc", np.ones((5, 1, 16), np.int32))
    out = b.alloc("out", (5, 1, 16), "int8")
    k = b.uops("k", [Uop(acc=1, inp=0)])
    b.load_uops(k, 0)
    b.load(MEM_ACC, 0, acc, y_size=1, x_size=5)
    b.alu(ALU_ADD, 0, 1, iter_in=4, dst=(0, 1), src=(0, 1))
    b.alu(ALU_ADD, 0, 1, imm=1, iter_in=2, dst=(0, 0))   # same row twice: +2
    b.store(0, out, y_size=1, x_size=5)
    b.finish()
    prog = b.build()
    got = prog.read("out", run_fsim(prog).dram)[:, 0, 0]
    assert got.tolist() == [1, 4, 3, 4, 5]


def test_store_overlapping_rows_last_write_wins():
    b = ProgramBuilder()
    acc = b.data("acc", np.arange(4, dtype=np.int32).repeat(16).reshape(4, 1, 16))
    out = b.alloc("out", (3, 1, 16), "int8")
    b.load(MEM_ACC, 0, acc, y_size=1, x_size=4)
    b.store(0, out, y_size=2, x_size=2, x_stride=1)   # DRAM elems 0,1 then 1,2
    b.finish()
    prog = b.build()
    assert prog.read("out", run_fsim(prog).dram)[:, 0, 0].tolist() == [0, 2, 3]


def test_out_of_range_accesses_are_errors_with_index():
    b = ProgramBuilder()
    x = b.data("x", i8(2, 1, 16))
    b.load(MEM_INP, 2047, x, y_size=1, x_size=2)
    b.finish()
    with pytest.raises(SimulationError, match=r"instruction 0 \(LOAD INP\): writes INP rows "
                                              r"2047..2048 beyond the buffer depth 2048"):
        run_fsim(b.build())
    b = ProgramBuilder()
    x = b.data("x", i8(2, 1, 16))
    b.load(MEM_INP, 0, x, 1000, y_size=1, x_size=1)
    b.finish()
    with pytest.raises(SimulationError, match="outside the .*-byte DRAM image"):
        run_fsim(b.build())
    b = ProgramBuilder()
    k = b.uops("k", [Uop(acc=2000)])
    b.load_uops(k, 0)
    b.gemm(0, 1, iter_in=50, dst=(0, 1), reset=True)
    b.finish()
    with pytest.raises(SimulationError, match=r"instruction 1 \(GEMM\): ACC row 2048 is outside "
                                              r"the buffer \(depth 2048\) at outer 0, inner 48"):
        run_fsim(b.build())


def test_a_loop_too_long_to_simulate_is_an_error_not_a_memory_blowup():
    # 16383 x 16383 steps fit the fields; materialising their indices took > 8 GB
    b = ProgramBuilder()
    k = b.uops("k", [Uop()])
    b.load_uops(k, 0)
    b.gemm(0, 1, iter_out=16383, iter_in=16383)
    b.finish()
    with pytest.raises(SimulationError, match=r"instruction 1 \(GEMM\): 268,402,689 micro-op "
                                              r"steps \(iter_out 16383 x iter_in 16383 x 1 "
                                              r"micro-ops\) are more than the functional "
                                              r"simulator runs in one instruction"):
        run_fsim(b.build())


def test_program_must_end_with_finish():
    b = ProgramBuilder()
    b.gemm(0, 0)
    with pytest.raises(SimulationError, match="does not end with FINISH"):
        run_fsim(b.build())


def test_token_mode_reports_deadlock_with_instruction_and_queue():
    """Compute waits for a load that itself waits for compute: a cycle."""
    b = ProgramBuilder()
    x = b.data("x", i8(1, 1, 16))
    b.load(MEM_INP, 0, x, pop_next=True, push_next=True)   # waits for c2l
    b.gemm(0, 0, pop_prev=True, push_prev=True)           # waits for l2c
    b.finish()
    prog = b.build()
    run_fsim(prog)  # plain mode ignores tokens
    with pytest.raises(SimulationError) as err:
        run_fsim(prog, tokens=True)
    msg = str(err.value)
    assert "deadlock in token mode" in msg
    assert "load engine blocked at instruction 0 (LOAD INP) waiting to pop c2l" in msg
    assert "compute engine blocked at instruction 1 (GEMM) waiting to pop l2c" in msg


def test_a_dram_image_of_another_dtype_is_refused_by_every_simulator(monkeypatch):
    # it was cast to uint8: 300.5 ran as 44, -1 (int32) as 255, without a word
    from toolchain.errors import InputError
    from toolchain.vta import rtl
    from toolchain.vta.cfsim import run_cfsim
    from toolchain.vta.program import Program

    b = ProgramBuilder()
    b.finish()
    prog = b.build()
    monkeypatch.setattr(rtl, "build", lambda *a, **k: pytest.fail("the RTL was built"))
    for bad in (np.full(32, 300.5), np.full(32, -1, np.int32)):
        for run in (run_fsim, run_cfsim, rtl.run_rtl):
            with pytest.raises(InputError, match=f"DRAM image: dtype {bad.dtype}, expected "
                                                 "uint8 bytes"):
                run(prog, bad)
        with pytest.raises(InputError, match=f"Program.dram: dtype {bad.dtype}"):
            Program(prog.insns, bad)
    signed = np.array([-1, 2], np.int8)  # bytes as int8: taken bit for bit
    assert run_fsim(prog, signed).dram.tolist() == [255, 2]
    assert run_cfsim(prog, signed).dram.tolist() == [255, 2]
