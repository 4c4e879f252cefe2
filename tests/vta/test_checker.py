"""Static checker: correct programs pass; imbalance, deadlock and structure errors are found."""

from __future__ import annotations

import pytest

from toolchain.errors import SimulationError
from toolchain.vta.checker import check_program
from toolchain.vta.config import VTAConfig
from toolchain.vta.isa import MEM_INP, MEM_UOP, MEM_WGT, Finish, Gemm, Load, Store
from toolchain.vta.workloads import gemm_workload


def L(**kw):
    return Load(memory_type=MEM_INP, **kw)


def test_workload_programs_pass():
    wl = gemm_workload(64, 96, 64, seed=3, tiling=(16, 2, 3))
    for prog in (wl.serial, wl.vthread):
        report = check_program(prog)
        assert report.ok, str(report)
        assert str(report).startswith("check: ok (")


def test_push_never_popped_names_queue_and_instruction():
    report = check_program([L(push_next=True), Gemm(pop_prev=True), L(push_next=True),
                            Finish()])
    assert report.errors == ["queue l2c: 1 token(s) pushed but never popped "
                             "(instruction 2 (LOAD INP))"]
    with pytest.raises(SimulationError, match="check: 1 problem"):
        report.raise_if_errors()


def test_pop_never_satisfiable_is_reported_with_deadlock():
    report = check_program([Gemm(push_next=True), Store(pop_prev=True), Store(pop_prev=True),
                            Finish()])
    assert report.errors[0] == ("queue c2s: instruction 2 (STORE) pops a token that is never "
                                "pushed (1 push(es), 2 pop(s) in the program)")
    assert report.errors[1].startswith("certain deadlock: ")
    assert "store engine blocked at instruction 2 (STORE) waiting to pop c2s" in report.errors[1]


def test_balanced_but_cyclic_tokens_deadlock():
    # load waits for compute's c2l, compute waits for load's l2c: counts balance, order does not
    insns = [L(pop_next=True, push_next=True), Gemm(pop_prev=True, push_prev=True), Finish()]
    report = check_program(insns)
    assert len(report.errors) == 1
    assert report.errors[0] == (
        "certain deadlock: load engine blocked at instruction 0 (LOAD INP) waiting to pop c2l "
        "(queue empty); compute engine blocked at instruction 1 (GEMM) waiting to pop l2c "
        "(queue empty); store engine finished")


def test_full_token_queue_blocks_push():
    # each engine pushes 3 tokens to the other before popping any: with queues of depth 2
    # both block on their third push; depth 3 is enough
    insns = [L(push_next=True)] * 3 + [L(pop_next=True)] * 3
    insns += [Gemm(push_prev=True)] * 3 + [Gemm(pop_prev=True)] * 3 + [Finish()]
    report = check_program(insns, VTAConfig(token_queue_depth=2))
    assert report.errors == [
        "certain deadlock: load engine blocked at instruction 2 (LOAD INP) waiting to push l2c "
        "(queue full, 2 tokens); compute engine blocked at instruction 8 (GEMM) waiting to push "
        "c2l (queue full, 2 tokens); store engine finished"]
    assert check_program(insns, VTAConfig(token_queue_depth=3)).ok


def test_full_command_queue_stalls_fetch():
    cfg = VTAConfig(cmd_queue_depth=2)
    # three loads wait for compute's token, but fetch cannot reach the GEMM past them
    insns = [L(pop_next=True), L(), L(), Gemm(push_prev=True), Finish()]
    report = check_program(insns, cfg)
    assert report.errors == [
        "certain deadlock: load engine blocked at instruction 0 (LOAD INP) waiting to pop c2l "
        "(queue empty); compute engine idle: fetch is stalled at instruction 2 (LOAD INP) "
        "because the load engine's command queue is full (2); store engine idle: fetch is "
        "stalled at instruction 2 (LOAD INP) because the load engine's command queue is full "
        "(2)"]
    assert check_program(insns, VTAConfig(cmd_queue_depth=3)).ok


def test_structure_errors_are_all_reported():
    insns = [Load(memory_type=MEM_WGT, sram_base=1020, y_size=1, x_size=8),
             Gemm(uop_bgn=5, uop_end=4), Finish(), Gemm(uop_end=9000)]
    errors = check_program(insns).errors
    assert "FINISH must be the last and only FINISH instruction; found FINISH at [2]" in errors[0]
    assert errors[1] == ("instruction 0 (LOAD WGT): buffer rows 1020..1027 exceed the buffer "
                         "depth 1024")
    assert errors[2] == ("instruction 1 (GEMM): micro-op range [5, 4) is not inside the UOP "
                         "buffer of 8192 micro-ops")
    assert "instruction 3 (GEMM): micro-op range [0, 9000)" in errors[3]
    assert check_program([Load(memory_type=MEM_UOP)]).errors == [
        "program has no FINISH instruction; end it with FINISH"]


def test_illegal_flags_reported_by_index():
    insns = [Load(memory_type=MEM_INP, pop_prev=True), Store(push_next=True), Finish()]
    errors = check_program(insns).errors
    assert errors[0].startswith("instruction 0: LOAD INP runs on the load engine")
    assert errors[1].startswith("instruction 1: STORE runs on the store engine")


def test_alu_op_not_offered_by_target():
    from toolchain.vta.isa import ALU_MUL, Alu

    cfg = VTAConfig(alu_ops=("MIN", "MAX", "ADD", "SHR"))
    report = check_program([Alu(alu_op=ALU_MUL, use_imm=True, imm=3), Finish()], cfg)
    assert report.errors == ["instruction 0 (ALU MUL): target 'vta' does not offer this op "
                             "(alu.ops: MIN, MAX, ADD, SHR)"]


def test_dram_blocks_are_checked_against_the_image_size():
    # INP rows are 16 bytes: elements 3 + 1*5 + 1 = 9 is the last one read -> bytes 144..159
    insns = [L(dram_base=3, y_size=2, x_size=2, x_stride=5), Finish()]
    assert check_program(insns, dram_bytes=160).ok
    assert check_program(insns).ok  # a bare list has no image: not checked
    assert check_program(insns, dram_bytes=159).errors == [
        "instruction 0 (LOAD INP): DRAM element 9 (bytes 144..159) is outside the 159-byte "
        "DRAM image"]
    # a STORE past the image; a LOAD with y_size 0 reads no DRAM wherever dram_base points
    insns = [L(dram_base=10**6, y_size=0, y_pad_top=1), Store(dram_base=4), Finish()]
    assert check_program(insns, dram_bytes=64).errors == [
        "instruction 1 (STORE): DRAM element 4 (bytes 64..79) is outside the 64-byte DRAM "
        "image"]


def test_a_program_is_checked_against_its_own_image():
    wl = gemm_workload(32, 32, 32, tiling=(16, 1, 1), seed=5)
    prog = wl.vthread
    assert check_program(prog, dram_bytes=len(prog.dram)).ok
    errors = check_program(prog, dram_bytes=100).errors
    assert errors and all("DRAM image" in e for e in errors)
