"""The C simulator's error codes: deadlocks, out-of-range DMA and buffer rows, malformed
instructions, a missing FINISH.  Each is a CFsimError with the documented KILN_VTA_ERR_*
code, raised where the Python simulator raises too, and no DRAM is written by the failing
instruction."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from toolchain.errors import SimulationError
from toolchain.vta.builder import ProgramBuilder
from toolchain.vta.cfsim import CFsimError, run_cfsim, run_cfsim_bytes
from toolchain.vta.checker import check_program
from toolchain.vta.config import VTAConfig
from toolchain.vta.fsim import run_fsim
from toolchain.vta.isa import (
    ALU_ADD,
    ALU_MUL,
    MEM_ACC,
    MEM_INP,
    Finish,
    Gemm,
    Load,
    Store,
    Uop,
    encode,
    encode_program,
)
from toolchain.vta.program import Program
from toolchain.vta.randprog import random_program

RNG = np.random.default_rng(7)


def _code(prog: Program, name: str, *, tokens: bool = True, python: bool = True,
          config: VTAConfig | None = None) -> CFsimError:
    with pytest.raises(CFsimError) as err:
        run_cfsim(prog, tokens=tokens, config=config)
    assert err.value.code_name == name, str(err.value)
    if python:  # the Python simulator refuses the same program
        with pytest.raises(SimulationError):
            run_fsim(prog, tokens=tokens, config=config)
    return err.value


def _prog(insns, config: VTAConfig | None = None) -> Program:
    return Program(list(insns), np.zeros(256, np.uint8), config=config or VTAConfig())


def _checker_words(insns, config: VTAConfig | None = None) -> str:
    (msg,) = check_program(insns, config).errors
    return msg.removeprefix("certain deadlock: ")


def test_cyclic_tokens_deadlock_with_each_engine_named():
    insns = [Load(memory_type=MEM_INP, pop_next=True, push_next=True),
             Gemm(pop_prev=True, push_prev=True), Finish()]
    err = _code(_prog(insns), "KILN_VTA_ERR_DEADLOCK")
    assert err.code == 8 and err.insn is None
    assert str(err).endswith(_checker_words(insns))
    run_cfsim(_prog(insns))  # in program order the tokens are ignored


def test_full_token_queue_deadlock():
    cfg = VTAConfig(token_queue_depth=2)
    insns = ([Load(memory_type=MEM_INP, push_next=True)] * 3
             + [Load(memory_type=MEM_INP, pop_next=True)] * 3
             + [Gemm(push_prev=True)] * 3 + [Gemm(pop_prev=True)] * 3 + [Finish()])
    err = _code(_prog(insns, cfg), "KILN_VTA_ERR_DEADLOCK", config=cfg)
    assert str(err).endswith(_checker_words(insns, cfg))
    run_cfsim(_prog(insns, VTAConfig(token_queue_depth=3)), tokens=True)


def test_full_command_queue_deadlock():
    cfg = VTAConfig(cmd_queue_depth=2)
    insns = [Load(memory_type=MEM_INP, pop_next=True), Load(memory_type=MEM_INP),
             Load(memory_type=MEM_INP), Gemm(push_prev=True), Finish()]
    err = _code(_prog(insns, cfg), "KILN_VTA_ERR_DEADLOCK", config=cfg)
    assert str(err).endswith(_checker_words(insns, cfg))
    assert "fetch is stalled at instruction 2" in str(err)


@pytest.mark.parametrize("flag", ["push_next", "push_prev"])
def test_a_dropped_push_deadlocks_a_random_program(flag):
    prog = next(p for p in (random_program(s, phases=3) for s in range(50))
                if sum(getattr(x, flag) for x in p.insns) >= 2)
    idx = next(i for i, x in enumerate(prog.insns) if getattr(x, flag))
    insns = list(prog.insns)
    insns[idx] = dataclasses.replace(insns[idx], **{flag: False})
    _code(Program(insns, prog.dram, prog.regions, prog.config), "KILN_VTA_ERR_DEADLOCK")


def test_dma_outside_the_dram_image():
    b = ProgramBuilder()
    x = b.data("x", RNG.integers(-128, 128, (2, 1, 16), dtype=np.int8))
    b.load(MEM_INP, 0, x, 1000, y_size=1, x_size=1)
    b.finish()
    err = _code(b.build(), "KILN_VTA_ERR_DRAM_RANGE")
    assert err.insn == 0 and "DRAM element 1000 is outside the 64-byte DRAM image" in str(err)


def test_store_outside_the_dram_image_writes_nothing():
    b = ProgramBuilder()
    acc = b.data("acc", np.full((4, 1, 16), 3, np.int32))
    out = b.alloc("out", (2, 1, 16), "int8")
    b.load(MEM_ACC, 0, acc, y_size=1, x_size=4)
    b.store(0, out, 0, y_size=1, x_size=2)
    b.store(0, out, 0, y_size=2, x_size=2, x_stride=3)  # row 1 ends past the image
    b.finish()
    err = _code(b.build(), "KILN_VTA_ERR_DRAM_RANGE")
    assert err.insn == 2


def test_dma_into_the_instruction_stream():
    """With the whole window open to DMA, a STORE over the instructions is still refused."""
    insns = [Store(sram_base=0, dram_base=2, y_size=1, x_size=1), Finish()]
    dram = np.zeros(32, np.uint8)            # instructions at byte 32 = OUT element 2
    with pytest.raises(CFsimError) as err:
        run_cfsim_bytes(encode_program(insns), dram, VTAConfig(), data_bytes=0)
    assert err.value.code_name == "KILN_VTA_ERR_DRAM_RANGE"
    assert "reaches the instruction stream at byte 32" in str(err.value)
    ok = [Store(sram_base=0, dram_base=1, y_size=1, x_size=1), Finish()]
    run_cfsim_bytes(encode_program(ok), dram, VTAConfig(), data_bytes=0)


@pytest.mark.parametrize("bad", [-1, 33, 64, 1.5, True])
def test_data_bytes_out_of_range_is_refused(bad):
    """``data_bytes`` bounds DMA: 0 (the whole window) or 1..the image's bytes. A negative
    one wrapped to a huge size_t and one past the image was taken as the whole window:
    either let DMA reach past the data image unchecked."""
    from toolchain.errors import OptionError

    ok = encode_program([Store(sram_base=0, dram_base=1, y_size=1, x_size=1), Finish()])
    dram = np.zeros(32, np.uint8)
    with pytest.raises(OptionError, match=rf"data_bytes={bad!r}: must be an int from 1 to "
                                          r"the DRAM image's 32 bytes, or 0"):
        run_cfsim_bytes(ok, dram, VTAConfig(), data_bytes=bad)
    run_cfsim_bytes(ok, dram, VTAConfig(), data_bytes=32)  # element 1: bytes 16..31
    with pytest.raises(CFsimError, match="DRAM element 1"):
        run_cfsim_bytes(ok, dram, VTAConfig(), data_bytes=16)


def test_region_read_refuses_a_float_image_and_a_short_one():
    """Region.read cast the image with np.asarray(dram, dtype=np.uint8): a float image's
    values were truncated silently (1.7 -> 1); it now takes bytes as dram_image does, and
    a region past the image is named (it was a reshape error)."""
    from toolchain.errors import InputError
    from toolchain.vta.program import Region

    r = Region("out", 4, (4,), "int8")
    image = np.array([0, 0, 0, 0, 1, 2, 255, 128], np.uint8)
    assert r.read(image).tolist() == [1, 2, -1, -128]
    assert r.read(image.view(np.int8)).tolist() == [1, 2, -1, -128]
    with pytest.raises(InputError, match="region 'out': DRAM image: dtype float64, expected "
                                         "uint8 bytes"):
        r.read(image.astype(np.float64) + 0.7)
    with pytest.raises(InputError, match=r"region 'out' \(bytes 4..7\) lies past the "
                                         "6-byte DRAM image"):
        r.read(image[:6])


def test_buffer_rows_outside_the_buffers():
    b = ProgramBuilder()
    x = b.data("x", RNG.integers(-128, 128, (2, 1, 16), dtype=np.int8))
    b.load(MEM_INP, 2047, x, y_size=1, x_size=2)
    b.finish()
    err = _code(b.build(), "KILN_VTA_ERR_SRAM_RANGE")
    assert "INP row 2048 is outside the buffer (depth 2048)" in str(err)
    b = ProgramBuilder()
    k = b.uops("k", [Uop(acc=2000)])
    b.load_uops(k, 0)
    b.gemm(0, 1, iter_in=50, dst=(0, 1), reset=True)
    b.finish()
    err = _code(b.build(), "KILN_VTA_ERR_SRAM_RANGE")
    assert err.insn == 1 and "ACC row 2049 is outside" in str(err)  # the last step's row
    b = ProgramBuilder()
    k = b.uops("k", [Uop(acc=0, inp=2000, wgt=1)])
    b.load_uops(k, 0)
    b.gemm(0, 1, iter_out=60, src=(1, 0))
    b.finish()
    assert "INP row 2059" in str(_code(b.build(), "KILN_VTA_ERR_SRAM_RANGE"))
    _code(_prog([Gemm(uop_bgn=5, uop_end=4), Finish()]), "KILN_VTA_ERR_SRAM_RANGE")


@pytest.mark.parametrize("alu", [False, True])
def test_a_loop_over_the_step_limit_is_refused_like_the_python_simulator(alu):
    # the C simulator had no limit: a corrupt loop word (16383 x 16383 x 8192 steps fit the
    # fields) ran for hours where fsim.py refuses more than MAX_STEPS_PER_INSN in one
    from toolchain.vta.fsim import MAX_STEPS_PER_INSN

    def prog(n: int) -> Program:
        b = ProgramBuilder()
        b.load_uops(b.uops("k", [Uop(acc=0)]), 0)
        if alu:
            b.alu(ALU_ADD, 0, 1, iter_out=n, iter_in=n, imm=1)
        else:
            b.gemm(0, 1, iter_out=n, iter_in=n, reset=True)
        b.finish()
        return b.build()

    assert MAX_STEPS_PER_INSN == 4096 * 4096
    err = _code(prog(4097), "KILN_VTA_ERR_STEPS")
    with pytest.raises(SimulationError) as py:
        run_fsim(prog(4097))
    assert err.insn == 1 and str(err) == f"KILN_VTA_ERR_STEPS: {py.value}"
    assert ("16,785,409 micro-op steps (iter_out 4097 x iter_in 4097 x 1 micro-ops) are more "
            "than the functional simulator runs in one instruction (16,777,216); split the "
            "loop") in str(err)
    # the limit itself runs (on the C simulator only: fsim.py would take 400 MB for it)
    counters = run_cfsim(prog(4096)).counters
    assert counters.get("alu_steps", 0) == (MAX_STEPS_PER_INSN if alu else 0)
    assert counters["insn_ALU" if alu else "insn_GEMM"] == 1


def test_alu_micro_op_with_weight_index():
    b = ProgramBuilder()
    k = b.uops("k", [Uop(acc=0, inp=1, wgt=3)])
    b.load_uops(k, 0)
    b.alu(ALU_ADD, 0, 1, imm=1)
    b.finish()
    assert _code(b.build(), "KILN_VTA_ERR_ALU_UOP").insn == 1


def test_alu_op_the_target_lacks():
    cfg = VTAConfig(alu_ops=("MIN", "MAX", "ADD", "SHR"))
    b = ProgramBuilder(cfg)
    k = b.uops("k", [Uop(acc=0)])
    b.load_uops(k, 0)
    b.alu(ALU_MUL, 0, 1, imm=3)
    b.finish()
    err = _code(b.build(), "KILN_VTA_ERR_UNSUPPORTED", config=cfg)
    assert "does not offer ALU MUL" in str(err)


def test_finish_missing_or_early():
    _code(_prog([Gemm()]), "KILN_VTA_ERR_FINISH")
    _code(_prog([Finish(), Gemm(), Finish()]), "KILN_VTA_ERR_FINISH")


@pytest.mark.parametrize("word, what", [
    (5, "invalid opcode"),                                      # opcode 5
    (3 | 1 << 100, "reserved bits set"),                        # FINISH with a data bit
    (2 | 1 << 127, "reserved bits set"),                        # GEMM bit 127
    (4 | 1 << 7, "reserved bits set"),                          # ALU with the reset bit
    (4 | 6 << 107, "invalid ALU op"),
    (0 | 4 << 7, "invalid memory type"),                        # LOAD OUT
    (1 | 2 << 7, "invalid memory type"),                        # STORE INP
    (0 | 2 << 7 | 1 << 3, "a token flag its engine does not have"),  # LOAD INP pop_prev
    (1 | 4 << 7 | 1 << 6, "a token flag its engine does not have"),  # STORE push_next
    (1 | 4 << 7 | 1 << 106, "STORE with padding"),
])
def test_malformed_instructions(word, what):
    data = word.to_bytes(16, "little") + encode(Finish())
    with pytest.raises(CFsimError) as err:
        run_cfsim_bytes(data, np.zeros(64, np.uint8), VTAConfig())
    assert err.value.code_name == "KILN_VTA_ERR_DECODE" and err.value.insn == 0
    assert what in str(err.value)
