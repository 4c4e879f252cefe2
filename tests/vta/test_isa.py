"""Instruction and micro-op encodings: round trips, pinned bit positions, refusals."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolchain.errors import SimulationError
from toolchain.vta.isa import (
    ALU_SHR,
    MEM_ACC,
    MEM_INP,
    MEM_OUT,
    MEM_UOP,
    MEM_WGT,
    Alu,
    Finish,
    Gemm,
    Load,
    Store,
    Uop,
    decode,
    decode_program,
    encode,
    encode_int,
    encode_program,
)


def u(bits: int):
    return st.integers(0, (1 << bits) - 1)


flag = st.booleans()

loads = st.builds(
    Load, memory_type=st.sampled_from([MEM_UOP, MEM_ACC]), sram_base=u(16), dram_base=u(32),
    y_size=u(16), x_size=u(16), x_stride=u(16), y_pad_top=u(4), y_pad_bottom=u(4),
    x_pad_left=u(4), x_pad_right=u(4), pop_prev=flag, pop_next=flag, push_prev=flag,
    push_next=flag)
dma_loads = st.builds(
    Load, memory_type=st.sampled_from([MEM_INP, MEM_WGT]), sram_base=u(16), dram_base=u(32),
    y_size=u(16), x_size=u(16), x_stride=u(16), y_pad_top=u(4), y_pad_bottom=u(4),
    x_pad_left=u(4), x_pad_right=u(4), pop_next=flag, push_next=flag)
stores = st.builds(Store, sram_base=u(16), dram_base=u(32), y_size=u(16), x_size=u(16),
                   x_stride=u(16), pop_prev=flag, push_prev=flag)
loop = dict(uop_bgn=u(13), uop_end=u(14), iter_out=u(14), iter_in=u(14), dst_factor_out=u(11),
            dst_factor_in=u(11), src_factor_out=u(11), src_factor_in=u(11), pop_prev=flag,
            pop_next=flag, push_prev=flag, push_next=flag)
gemms = st.builds(Gemm, reset=flag, wgt_factor_out=u(10), wgt_factor_in=u(10), **loop)
alus = st.builds(Alu, alu_op=st.integers(0, 4), use_imm=flag,
                 imm=st.integers(-(1 << 15), (1 << 15) - 1), **loop)
finishes = st.builds(Finish, pop_prev=flag, pop_next=flag, push_prev=flag, push_next=flag)
instructions = st.one_of(loads, dma_loads, stores, gemms, alus, finishes)


@settings(max_examples=300, deadline=None)
@given(instructions)
def test_encode_decode_round_trip(insn):
    data = encode(insn)
    assert len(data) == 16
    assert decode(data) == insn
    assert encode(decode(data)) == data


@settings(max_examples=200, deadline=None)
@given(u(11), u(11), u(10))
def test_uop_round_trip(acc, inp, wgt):
    word = Uop(acc, inp, wgt).encode()
    assert 0 <= word < 1 << 32
    assert Uop.decode(word) == Uop(acc, inp, wgt)
    assert word == acc | inp << 11 | wgt << 22


@given(st.lists(instructions, max_size=8))
def test_program_round_trip(insns):
    assert decode_program(encode_program(insns)) == insns


# Pinned bit positions, written from hw/ISA.md section 2 (one field set at a time).
@pytest.mark.parametrize("insn, expected", [
    (Finish(pop_prev=True), 3 | 1 << 3),
    (Finish(pop_next=True), 3 | 1 << 4),
    (Finish(push_prev=True), 3 | 1 << 5),
    (Finish(push_next=True), 3 | 1 << 6),
    (Load(memory_type=MEM_INP, y_size=0, x_size=0), 0 | 2 << 7),
    (Load(memory_type=MEM_UOP, sram_base=0xFFFF, y_size=0, x_size=0), 0xFFFF << 10),
    (Load(memory_type=MEM_UOP, dram_base=0xFFFFFFFF, y_size=0, x_size=0), 0xFFFFFFFF << 26),
    (Load(memory_type=MEM_UOP, y_size=3, x_size=0), 3 << 58),
    (Load(memory_type=MEM_UOP, y_size=0, x_size=5), 5 << 74),
    (Load(memory_type=MEM_UOP, y_size=0, x_size=0, x_stride=7), 7 << 90),
    (Load(memory_type=MEM_UOP, y_size=0, x_size=0, y_pad_top=15), 15 << 106),
    (Load(memory_type=MEM_UOP, y_size=0, x_size=0, y_pad_bottom=1), 1 << 110),
    (Load(memory_type=MEM_UOP, y_size=0, x_size=0, x_pad_left=2), 2 << 114),
    (Load(memory_type=MEM_UOP, y_size=0, x_size=0, x_pad_right=15), 15 << 118),
    (Store(y_size=0, x_size=0), 1 | MEM_OUT << 7),
    (Gemm(reset=True, uop_end=0, iter_out=0, iter_in=0), 2 | 1 << 7),
    (Gemm(uop_bgn=0x1FFF, uop_end=0, iter_out=0, iter_in=0), 2 | 0x1FFF << 8),
    (Gemm(uop_end=0x3FFF, iter_out=0, iter_in=0), 2 | 0x3FFF << 21),
    (Gemm(uop_end=0, iter_out=0x3FFF, iter_in=0), 2 | 0x3FFF << 35),
    (Gemm(uop_end=0, iter_out=0, iter_in=0x3FFF), 2 | 0x3FFF << 49),
    (Gemm(uop_end=0, iter_out=0, iter_in=0, dst_factor_out=0x7FF), 2 | 0x7FF << 63),
    (Gemm(uop_end=0, iter_out=0, iter_in=0, dst_factor_in=0x7FF), 2 | 0x7FF << 74),
    (Gemm(uop_end=0, iter_out=0, iter_in=0, src_factor_out=0x7FF), 2 | 0x7FF << 85),
    (Gemm(uop_end=0, iter_out=0, iter_in=0, src_factor_in=0x7FF), 2 | 0x7FF << 96),
    (Gemm(uop_end=0, iter_out=0, iter_in=0, wgt_factor_out=0x3FF), 2 | 0x3FF << 107),
    (Gemm(uop_end=0, iter_out=0, iter_in=0, wgt_factor_in=0x3FF), 2 | 0x3FF << 117),
    (Alu(alu_op=ALU_SHR, uop_end=0, iter_out=0, iter_in=0), 4 | 3 << 107),
    (Alu(alu_op=0, use_imm=True, uop_end=0, iter_out=0, iter_in=0), 4 | 1 << 110),
    (Alu(alu_op=0, imm=-1, uop_end=0, iter_out=0, iter_in=0), 4 | 0xFFFF << 111),
    (Alu(alu_op=0, imm=-32768, uop_end=0, iter_out=0, iter_in=0), 4 | 0x8000 << 111),
])
def test_field_bit_positions(insn, expected):
    assert encode_int(insn) == expected
    assert encode(insn) == expected.to_bytes(16, "little")


def test_decode_refuses_malformed_words():
    with pytest.raises(SimulationError, match="instruction 5: invalid opcode 7"):
        decode(7, index=5)
    with pytest.raises(SimulationError, match="FINISH has reserved bits set"):
        decode(3 | 1 << 7)
    with pytest.raises(SimulationError, match="LOAD has reserved bits set"):
        decode(1 << 122)
    with pytest.raises(SimulationError, match="GEMM has reserved bits set"):
        decode(2 | 1 << 127)
    with pytest.raises(SimulationError, match="ALU has reserved bits set"):
        decode(4 | 1 << 7)  # bit 7 is GEMM's reset, reserved in ALU
    with pytest.raises(SimulationError, match="memory_type 6 is not one of"):
        decode(6 << 7)
    with pytest.raises(SimulationError, match="alu_op 5 is not one of"):
        decode(4 | 5 << 107)
    with pytest.raises(SimulationError, match="LOAD: memory_type OUT is invalid"):
        decode(MEM_OUT << 7)
    with pytest.raises(SimulationError, match="STORE: memory_type must be OUT"):
        decode(1 | MEM_INP << 7)
    with pytest.raises(SimulationError, match="STORE: padding fields must be 0"):
        decode(1 | MEM_OUT << 7 | 1 << 106)
    with pytest.raises(SimulationError, match="not a multiple of 16"):
        decode_program(bytes(17))


def test_illegal_token_flags_for_the_engine():
    with pytest.raises(SimulationError, match="load engine, which has no previous engine"):
        encode(Load(memory_type=MEM_INP, pop_prev=True))
    with pytest.raises(SimulationError, match="load engine, which has no previous engine"):
        decode(2 << 7 | 1 << 5)  # LOAD INP push_prev
    with pytest.raises(SimulationError, match="store engine, which has no next engine"):
        encode(Store(push_next=True))
    # LOAD UOP/ACC run on compute, which has both neighbours
    assert decode(encode(Load(memory_type=MEM_ACC, pop_prev=True, push_next=True))).pop_prev


def test_field_overflow_is_refused():
    with pytest.raises(SimulationError, match=r"field 'uop_bgn' = 8192 does not fit in 13 bits"):
        encode(Gemm(uop_bgn=8192))
    with pytest.raises(SimulationError, match=r"field 'imm' = 32768 does not fit in 16 signed"):
        encode(Alu(alu_op=0, imm=32768))
    with pytest.raises(SimulationError, match=r"micro-op field 'wgt' = 1024 does not fit"):
        Uop(wgt=1024).encode()


def test_engines_and_queues():
    assert Load(memory_type=MEM_INP).engine == 0 and Load(memory_type=MEM_WGT).engine == 0
    assert Load(memory_type=MEM_UOP).engine == 1 and Load(memory_type=MEM_ACC).engine == 1
    assert Store().engine == 2 and Gemm().engine == 1 and Finish().engine == 1
    g = Gemm(pop_prev=True, pop_next=True, push_prev=True, push_next=True)
    assert g.pops() == ["l2c", "s2c"] and g.pushes() == ["c2l", "c2s"]
    assert Load(memory_type=MEM_INP, pop_next=True, push_next=True).pops() == ["c2l"]
    assert Load(memory_type=MEM_INP, pop_next=True, push_next=True).pushes() == ["l2c"]
    assert Store(pop_prev=True, push_prev=True).pops() == ["c2s"]
    assert Store(pop_prev=True, push_prev=True).pushes() == ["s2c"]
