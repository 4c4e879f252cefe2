"""Whole-program RTL tests: GEMM, ALU and padded loads against numpy; workloads, random
programs and DRAM-timing independence against the functional simulator; deadlock and
timeout reporting. The tests whose programs pass run them in one simulator process for the
file (``rtl_batch``, tests/hw/rtl_batch.py; alone if that batch fails), the error tests
in one each."""

from __future__ import annotations

import numpy as np
import pytest

from tests.hw.progs import RandomProgram, exact_acc_readout, planes_to_int32, program
from tests.hw.rtl_batch import RtlBatch, selected_jobs
from toolchain.errors import SimulationError
from toolchain.vta import gemm_workload, run_fsim
from toolchain.vta.builder import ProgramBuilder
from toolchain.vta.config import VTAConfig
from toolchain.vta.isa import (
    ALU_ADD,
    ALU_MAX,
    ALU_MIN,
    ALU_MUL,
    ALU_SHR,
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
from toolchain.vta.rtl import run_rtl

CFG = VTAConfig()
BI, BO = CFG.block_in, CFG.block_out


def _gemm_case(seed: int) -> tuple[Program, np.ndarray, int, int]:
    """Random INP/WGT/ACC and a GEMM loop nest; returns (program, numpy ACC, rows, out off)."""
    rng = np.random.default_rng(seed)
    ni, nw, na = 24, 8, 32
    inp = rng.integers(-128, 128, (ni, BI), dtype=np.int8)
    wgt = rng.integers(-128, 128, (nw, BO, BI), dtype=np.int8)
    acc0 = rng.integers(-2**31, 2**31, (na, BO), dtype=np.int64).astype(np.int32)
    uops = [Uop(acc=0, inp=0, wgt=0)] + [
        Uop(acc=int(rng.integers(0, 8)), inp=int(rng.integers(0, 8)),
            wgt=int(rng.integers(0, 3))) for _ in range(3)]
    io, ii = 3, 4
    f = dict(dst_factor_out=int(rng.integers(0, 5)), dst_factor_in=int(rng.integers(0, 4)),
             src_factor_out=int(rng.integers(0, 4)), src_factor_in=int(rng.integers(0, 3)),
             wgt_factor_out=int(rng.integers(0, 2)), wgt_factor_in=int(rng.integers(0, 2)))
    b = ProgramBuilder(CFG)
    r_inp, r_wgt, r_acc = b.data("inp", inp), b.data("wgt", wgt), b.data("acc", acc0)
    kern = b.uops("k", uops)
    r_out = b.alloc("out", (4 * na, BO), "int8")
    insns = [
        Load(memory_type=MEM_UOP, dram_base=kern.elem(4), x_size=4, x_stride=4),
        Load(memory_type=MEM_ACC, dram_base=r_acc.elem(CFG.acc_row_bytes), x_size=na,
             x_stride=na),
        Load(memory_type=MEM_INP, dram_base=r_inp.elem(BI), x_size=ni, x_stride=ni),
        Load(memory_type=MEM_WGT, dram_base=r_wgt.elem(BI * BO), x_size=nw, x_stride=nw),
        Gemm(uop_bgn=1, uop_end=4, iter_out=io, iter_in=ii, **f),
        *exact_acc_readout(na, r_out.elem(BO)),
    ]
    acc = acc0.astype(np.int64)
    for i in range(io):
        for j in range(ii):
            for u in uops[1:]:
                a = u.acc + i * f["dst_factor_out"] + j * f["dst_factor_in"]
                s = u.inp + i * f["src_factor_out"] + j * f["src_factor_in"]
                w = u.wgt + i * f["wgt_factor_out"] + j * f["wgt_factor_in"]
                acc[a] += wgt[w].astype(np.int64) @ inp[s].astype(np.int64)
                acc[a] = (acc[a] + 2**31) % 2**32 - 2**31
    return program(insns, b.dram_image()), acc.astype(np.int32), na, r_out.offset


def _gemm_int32_job():
    cases = [_gemm_case(seed) for seed in range(3)]
    return cases, [(p, None) for p, *_ in cases], None


def test_gemm_int32_exact_against_numpy(rtl_batch: RtlBatch) -> None:
    cases, results = rtl_batch.results(_gemm_int32_job)
    for (prog, expect, rows, off), (dram, counters) in zip(cases, results, strict=True):
        got = planes_to_int32(dram[off:off + 4 * rows * BO], rows, CFG)[:, 0, :]
        np.testing.assert_array_equal(got, expect)
        assert counters["gemm_cycles"] == 3 * 4 * 3
        np.testing.assert_array_equal(dram, run_fsim(prog).dram)


def _alu_numpy(op: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.int64), b.astype(np.int64)
    if op == ALU_MIN:
        r = np.minimum(a, b)
    elif op == ALU_MAX:
        r = np.maximum(a, b)
    elif op == ALU_ADD:
        r = a + b
    elif op == ALU_MUL:
        r = a * b
    else:
        sh = b & 63
        sh = np.where(sh >= 32, sh - 64, sh)
        r = np.where(sh >= 0, a >> np.maximum(sh, 0), a << np.minimum(-sh, 32))
    return ((r + 2**31) % 2**32 - 2**31).astype(np.int32)


def _alu_job(use_imm: bool):
    rng = np.random.default_rng(7 + use_imm)
    na, half = 32, 16
    runs, expects = [], []
    for op in (ALU_MIN, ALU_MAX, ALU_ADD, ALU_SHR, ALU_MUL):
        acc0 = rng.integers(-2**31, 2**31, (na, BO), dtype=np.int64).astype(np.int32)
        acc0[half:][rng.random((half, BO)) < 0.5] = rng.integers(-40, 40)  # small operands too
        imm = int(rng.integers(-33, 34)) if op == ALU_SHR else int(rng.integers(-2**15, 2**15))
        b = ProgramBuilder(CFG)
        r_acc = b.data("acc", acc0)
        kern = b.uops("k", [Uop(acc=0, inp=0), Uop(acc=0, inp=half)])
        r_out = b.alloc("out", (4 * na, BO), "int8")
        insns = [
            Load(memory_type=MEM_UOP, dram_base=kern.elem(4), x_size=2, x_stride=2),
            Load(memory_type=MEM_ACC, dram_base=r_acc.elem(CFG.acc_row_bytes), x_size=na,
                 x_stride=na),
            Alu(alu_op=op, use_imm=use_imm, imm=imm, uop_bgn=1, uop_end=2, iter_out=4,
                iter_in=4, dst_factor_out=4, dst_factor_in=1, src_factor_out=4,
                src_factor_in=1),
            *exact_acc_readout(na, r_out.elem(BO)),
        ]
        operand = np.full((half, BO), imm, np.int32) if use_imm else acc0[half:]
        expect = acc0.copy()
        expect[:half] = _alu_numpy(op, acc0[:half], operand)
        runs.append((program(insns, b.dram_image()), None))
        expects.append((expect, r_out.offset))
    return (expects, na), runs, None


@pytest.mark.parametrize("use_imm", [False, True])
def test_alu_ops_against_numpy(rtl_batch: RtlBatch, use_imm: bool) -> None:
    (expects, na), results = rtl_batch.results(_alu_job, use_imm=use_imm)
    for (expect, off), (dram, _c) in zip(expects, results, strict=True):
        got = planes_to_int32(dram[off:off + 4 * na * BO], na, CFG)[:, 0, :]
        np.testing.assert_array_equal(got, expect)


def _padded_job():
    rng = np.random.default_rng(3)
    src_inp = rng.integers(-128, 128, (40, BI), dtype=np.int8)
    src_acc = rng.integers(-2**31, 2**31, (40, BO), dtype=np.int64).astype(np.int32)
    y, x, stride, pads = 3, 5, 7, (1, 2, 2, 1)  # top, bottom, left, right
    h, w = pads[0] + y + pads[1], pads[2] + x + pads[3]
    b = ProgramBuilder(CFG)
    r_inp, r_acc = b.data("inp", src_inp), b.data("acc", src_acc)
    eye = np.eye(BO, BI, dtype=np.int8)[None]
    r_eye = b.data("eye", eye)
    kern = b.uops("k", [Uop(acc=0, inp=0, wgt=0)])
    r_out = b.alloc("out", (2 * h * w, BO), "int8")
    load = dict(y_size=y, x_size=x, x_stride=stride, y_pad_top=pads[0], y_pad_bottom=pads[1],
                x_pad_left=pads[2], x_pad_right=pads[3])
    insns = [
        Load(memory_type=MEM_UOP, dram_base=kern.elem(4)),
        Load(memory_type=MEM_INP, sram_base=0, dram_base=r_inp.elem(BI) + 2, **load),
        Load(memory_type=MEM_WGT, dram_base=r_eye.elem(BI * BO)),
        Gemm(iter_out=h * w, dst_factor_out=1, src_factor_out=1, uop_bgn=0, uop_end=1),
        Store(sram_base=0, dram_base=r_out.elem(BO), x_size=h * w, x_stride=h * w),
        Load(memory_type=MEM_ACC, sram_base=100, dram_base=r_acc.elem(64) + 3, **load),
        Store(sram_base=100, dram_base=r_out.elem(BO) + h * w, x_size=h * w, x_stride=h * w),
    ]
    prog = program(insns, b.dram_image())
    ctx = dict(prog=prog, src_inp=src_inp, src_acc=src_acc, y=y, x=x, stride=stride, pads=pads,
               h=h, w=w, out=(r_out.offset, r_out.nbytes))
    return ctx, [(prog, None)], None


def test_padded_loads_against_numpy(rtl_batch: RtlBatch) -> None:
    """INP (seen through an identity GEMM) and ACC loads with padding and strides."""
    c, [(dram, _)] = rtl_batch.results(_padded_job)
    prog, src_inp, src_acc, pads, h, w = (c[k] for k in ("prog", "src_inp", "src_acc", "pads",
                                                          "h", "w"))
    y, x, stride = c["y"], c["x"], c["stride"]
    out, nbytes = c["out"]
    block = np.stack([src_inp[2 + r * stride: 2 + r * stride + x] for r in range(y)])
    want_inp = np.pad(block, ((pads[0], pads[1]), (pads[2], pads[3]), (0, 0)))
    block = np.stack([src_acc[3 + r * stride: 3 + r * stride + x] for r in range(y)])
    want_acc = np.pad(block, ((pads[0], pads[1]), (pads[2], pads[3]), (0, 0)))
    got = dram[out:out + nbytes].view(np.int8).reshape(2, h, w, BO)
    np.testing.assert_array_equal(got[0], want_inp)
    np.testing.assert_array_equal(got[1], (want_acc & 0xFF).astype(np.uint8).view(np.int8))
    np.testing.assert_array_equal(dram, run_fsim(prog).dram)


def _gemm_workloads_job(latency: int, bandwidth: float):
    wl = gemm_workload(40, 96, 48, seed=1, tiling=(16, 1, 3))
    return wl, [(wl.serial, None), (wl.vthread, None)], [(latency, bandwidth)] * 2


@pytest.mark.parametrize("latency,bandwidth", [(64, 16), (200, 4)])
def test_gemm_workloads_match_fsim_and_numpy(rtl_batch: RtlBatch, latency: int,
                                              bandwidth: float) -> None:
    wl, results = rtl_batch.results(_gemm_workloads_job, latency=latency, bandwidth=bandwidth)
    fs = run_fsim(wl.serial).dram
    for dram, counters in results:
        np.testing.assert_array_equal(dram, fs)
        np.testing.assert_array_equal(wl.read_output(dram), wl.expected)
        assert counters["gemm_cycles"] * CFG.macs_per_step == wl.macs
    serial, vthread = results[0][1]["cycles"], results[1][1]["cycles"]
    assert vthread < serial


def _random_job(chunk: int):
    seeds = range(chunk * 6, chunk * 6 + 6)
    progs = [RandomProgram(seed).build() for seed in seeds]
    timing = [(64, 16), (9, 16), (150, 3)][chunk]
    return (seeds, progs), [(p, None) for p in progs], [timing] * len(progs)


@pytest.mark.parametrize("chunk", range(3))
def test_random_programs_match_fsim(rtl_batch: RtlBatch, chunk: int) -> None:
    """Random tiles, strides, paddings, micro-op loops; DRAM after FINISH must match."""
    (seeds, progs), results = rtl_batch.results(_random_job, chunk=chunk)
    for seed, prog, (dram, _c) in zip(seeds, progs, results, strict=True):
        want = run_fsim(prog).dram
        diff = np.flatnonzero(dram != want)
        assert diff.size == 0, f"seed {seed}: {diff.size} bytes differ, first at {diff[:8]}"
        np.testing.assert_array_equal(run_fsim(prog, tokens=True, seed=seed).dram, want)


def _timing_job():
    prog = RandomProgram(100).build()
    return prog, [(prog, None)] * 3, [(2, 16), (300, 16), (40, 0.5)]


def test_result_does_not_depend_on_dram_timing(rtl_batch: RtlBatch) -> None:
    _prog, results = rtl_batch.results(_timing_job)
    outs = [dram for dram, _c in results]
    for out in outs[1:]:
        np.testing.assert_array_equal(out, outs[0])


def _deadlocked() -> Program:
    """GEMM pops l2c, but the load before it never pushes one."""
    b = ProgramBuilder(CFG)
    r = b.alloc("inp", (4, BI))
    b.load(MEM_INP, 0, r, x_size=4)
    b.gemm(0, 0, pop_prev=True)
    b.finish()
    return b.build()


def test_wrong_tokens_reported_as_deadlock(core_model: str) -> None:
    prog = _deadlocked()
    with pytest.raises(SimulationError) as rtl_err:
        run_rtl(prog)
    msg = str(rtl_err.value)
    assert "deadlock" in msg
    assert "compute: instruction #1 (GEMM) waits for a token on l2c" in msg
    assert "load: idle" in msg
    with pytest.raises(SimulationError, match="deadlock"):
        run_fsim(prog, tokens=True)


def test_timeout_stops_a_long_run(core_model: str) -> None:
    wl = gemm_workload(64, 64, 64, seed=0)  # 2048 micro-op steps: at least 1024 cycles
    with pytest.raises(SimulationError, match="timeout: not done after 1100 cycles"):
        run_rtl(wl.serial, timeout_cycles=1100)
    with pytest.raises(SimulationError, match="refused before the RTL run: its 2,048 micro-op "
                                              "steps need at least 1,024 cycles"):
        run_rtl(wl.serial, timeout_cycles=1000)


def test_bad_dram_settings_refused() -> None:
    b = ProgramBuilder(CFG)
    b.finish()
    with pytest.raises(SimulationError, match="bandwidth"):
        run_rtl(b.build(), bandwidth=64)
    with pytest.raises(SimulationError, match="latency"):
        run_rtl(b.build(), latency=0)


def test_program_without_finish_refused() -> None:
    prog = Program([Store(sram_base=0, dram_base=0)], np.zeros(64, np.uint8), {}, CFG)
    with pytest.raises(SimulationError, match="does not end with FINISH"):
        run_rtl(prog)


def test_store_past_image_is_refused_before_the_run() -> None:
    # the RTL does not check DRAM ranges: run_rtl refuses the program before building or
    # starting a model (a LOAD past the image used to run and return success)
    insns = [Store(sram_base=0, dram_base=1000, x_size=2, x_stride=2), Finish()]
    prog = Program(insns, np.zeros(64, np.uint8), {}, CFG)
    with pytest.raises(SimulationError, match=r"refused before the RTL run: instruction 0 "
                                              r"\(STORE\): DRAM element 1001 .* outside the "
                                              r"64-byte DRAM image"):
        run_rtl(prog)
    load = [Load(memory_type=MEM_INP, dram_base=1 << 24), Finish()]
    with pytest.raises(SimulationError, match="DRAM element 16777216"):
        run_rtl(Program(load, np.zeros(64, np.uint8), {}, CFG))


def test_program_longer_than_the_timeout_is_refused_before_the_run() -> None:
    # 16383 x 16383 steps need >= 134 M cycles; at ~90 k cycles/s the default 50 M-cycle
    # timeout would only stop it after ~9 minutes
    k = np.zeros(4, np.uint8)
    insns = [Load(memory_type=MEM_UOP, x_size=1, x_stride=1),
             Gemm(uop_end=1, iter_out=16383, iter_in=16383), Finish()]
    with pytest.raises(SimulationError, match=r"refused before the RTL run: its 268,402,689 "
                                              r"micro-op steps need at least 134,201,344 cycles, "
                                              r"more than timeout_cycles=50,000,000 "
                                              r"\(instruction 1, GEMM"):
        run_rtl(Program(insns, k, {}, CFG))


def _counters_job():
    wl = gemm_workload(32, 64, 32, seed=2, tiling=(16, 1, 2), requant="shift")
    return wl, [(wl.vthread, None)], None


def test_counters_account_for_the_work(rtl_batch: RtlBatch) -> None:
    wl, [(dram, c)] = rtl_batch.results(_counters_job)
    fs = run_fsim(wl.vthread)
    assert c["gemm_cycles"] == fs.counters["macs"] // CFG.macs_per_step
    assert c["alu_cycles"] > 0 and c["store_busy"] > 0 and c["load_busy"] > 0
    assert c["cycles"] >= c["compute_busy"] >= c["gemm_cycles"] + c["alu_cycles"]
    assert c["dram_wr_bytes"] == wl.serial.regions["out"].nbytes
    # every byte the loads read, plus instructions, came through the read port
    assert c["dram_rd_bytes"] >= len(wl.vthread.insns) * 16


def _paired_job():
    rng = np.random.default_rng(11)
    na = 64
    acc0 = rng.integers(-2**20, 2**20, (na, BO), dtype=np.int64).astype(np.int32)
    b = ProgramBuilder(CFG)
    r_acc = b.data("acc", acc0)
    kern = b.uops("k", [Uop(acc=0, inp=0), Uop(acc=3, inp=0)])
    r_out = b.alloc("out", (4 * na, BO), "int8")
    loops = [  # (iter_out, iter_in, dst_factor_out, dst_factor_in)
        (3, 5, 0, 1),    # the same five rows three times; odd extent leaves a single step
        (2, 4, 2, 3),    # pairs of rows 3 apart, outer rows overlapping the inner ones
        (4, 2, 1, 1),    # each pair shares a row with the next
        (1, 7, 0, 5),
    ]
    insns = [Load(memory_type=MEM_UOP, dram_base=kern.elem(4), x_size=2, x_stride=2),
             Load(memory_type=MEM_ACC, dram_base=r_acc.elem(CFG.acc_row_bytes), x_size=na,
                  x_stride=na)]
    steps = 0
    for n, (io, ii, fo, fi) in enumerate(loops):
        op = (ALU_ADD, ALU_MUL, ALU_SHR, ALU_MAX)[n]
        imm = (-7, 3, 1, -100)[n]
        insns.append(Alu(alu_op=op, use_imm=True, imm=imm, uop_bgn=n % 2, uop_end=n % 2 + 1,
                         iter_out=io, iter_in=ii, dst_factor_out=fo, dst_factor_in=fi))
        steps += io * ((ii + 1) // 2)
    insns.append(Gemm(reset=True, uop_bgn=1, uop_end=2, iter_out=2, iter_in=3,
                      dst_factor_out=9, dst_factor_in=1))
    insns += exact_acc_readout(na, r_out.elem(BO))
    prog = program(insns, b.dram_image())
    return (prog, steps, na), [(prog, None)], None


def test_paired_reset_and_alu_match_fsim(rtl_batch: RtlBatch) -> None:
    """Reset GEMMs and immediate ALU ops with one micro-op and an odd inner destination
    factor run two steps a cycle; overlapping rows across pairs exercise the forwarding."""
    (prog, steps, na), [(dram, counters)] = rtl_batch.results(_paired_job)
    np.testing.assert_array_equal(dram, run_fsim(prog).dram)
    # the four paired ALU instructions, then the 3 SHR readout loops (outer loop: unpaired)
    assert counters["alu_cycles"] == steps + 3 * na


def _random_vthreads_job():
    rng = np.random.default_rng(5)
    wls = []
    while len(wls) < 4:
        m, k, n = (int(rng.integers(1, hi)) for hi in (70, 120, 80))
        mb, kb, nb = m, -(-k // BI), -(-n // BO)
        tn = int(rng.choice([d for d in range(1, nb + 1) if nb % d == 0]))
        tk = int(rng.choice([d for d in range(1, kb + 1) if kb % d == 0]))
        tm = int(rng.integers(1, mb + 1))
        requant = str(rng.choice(["clip", "shift", "none"]))
        wls.append(gemm_workload(m, k, n, seed=len(wls), tiling=(tm, tn, tk), requant=requant))
    progs = [p for wl in wls for p in (wl.serial, wl.vthread)]
    lat, bw = int(rng.integers(2, 200)), float(rng.choice([1, 3, 8, 16]))
    return (wls, progs), [(p, None) for p in progs], [(lat, bw)] * len(progs)


def test_random_gemm_workloads_with_virtual_threads(rtl_batch: RtlBatch) -> None:
    """Random GEMM shapes and tilings: the double-buffered programs overlap load, compute and
    store through tokens; at random DRAM timing they must equal fsim and numpy."""
    (wls, progs), results = rtl_batch.results(_random_vthreads_job)
    for i, (prog, (dram, _c)) in enumerate(zip(progs, results, strict=True)):
        wl = wls[i // 2]
        np.testing.assert_array_equal(dram, run_fsim(prog).dram)
        np.testing.assert_array_equal(wl.read_output(dram), wl.expected)


def test_full_command_queue_deadlock_names_fetch(core_model: str) -> None:
    """70 GEMMs wait for l2c tokens that loads *after* them would push: the compute queue
    fills (64), fetch blocks, and the loads are never dispatched."""
    b = ProgramBuilder(CFG)
    r = b.alloc("inp", (4, BI))
    for _ in range(70):
        b.gemm(0, 0, pop_prev=True)
    for _ in range(70):
        b.load(MEM_INP, 0, r, x_size=1, push_next=True)
    b.finish()
    with pytest.raises(SimulationError) as err:
        run_rtl(b.build())
    msg = str(err.value)
    assert "compute: instruction #0 (GEMM) waits for a token on l2c (64 queued)" in msg
    assert "fetch: instruction #64 (GEMM) waits for room in the compute command queue" in msg


def _full_token_job():
    b = ProgramBuilder(CFG)
    r = b.data("inp", np.arange(12 * BI, dtype=np.int64).astype(np.int8).reshape(12, BI))
    for _ in range(12):
        b.gemm(0, 0, push_prev=True)
    for n in range(12):
        b.load(MEM_INP, n, r, n, x_size=1, pop_next=True)
    b.finish()
    prog = b.build()
    return prog, [(prog, None)], [(300, None)]


def test_full_token_queue_blocks_the_pusher(rtl_batch: RtlBatch) -> None:
    """Compute pushes 12 c2l tokens faster than slow loads pop them: the 8-deep queue fills,
    compute waits to push (counted as compute_wait) and the program still finishes."""
    prog, [(dram, counters)] = rtl_batch.results(_full_token_job)
    np.testing.assert_array_equal(dram, run_fsim(prog, tokens=True).dram)
    assert counters["compute_wait"] > 0
    assert counters["cycles"] > 12 * 300 // 2


#: the tests whose programs pass, by name: their jobs run in ``rtl_batch``
JOBS = {
    "test_gemm_int32_exact_against_numpy": _gemm_int32_job,
    "test_alu_ops_against_numpy": _alu_job,
    "test_padded_loads_against_numpy": _padded_job,
    "test_gemm_workloads_match_fsim_and_numpy": _gemm_workloads_job,
    "test_random_programs_match_fsim": _random_job,
    "test_result_does_not_depend_on_dram_timing": _timing_job,
    "test_counters_account_for_the_work": _counters_job,
    "test_paired_reset_and_alu_match_fsim": _paired_job,
    "test_random_gemm_workloads_with_virtual_threads": _random_vthreads_job,
    "test_full_token_queue_blocks_the_pusher": _full_token_job,
}


@pytest.fixture(scope="module")
def rtl_batch(core_model: str, request: pytest.FixtureRequest) -> RtlBatch:
    """The selected tests' passing programs, run in one simulator process."""
    return RtlBatch(CFG, selected_jobs(request, JOBS))
