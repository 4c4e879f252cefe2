"""Instruction emission (toolchain.vta.codegen) on hand-written lowered TIR."""

from __future__ import annotations

import pytest

from toolchain.errors import ScheduleError
from toolchain.intrinsics import load_intrinsics
from toolchain.target import load_target
from toolchain.tir import ir
from toolchain.tir.transform.inject_virtual_thread import INSTRUCTION
from toolchain.vta.builder import ProgramBuilder
from toolchain.vta.codegen import emit_instructions
from toolchain.vta.isa import Alu, Gemm, Load, Uop

TARGET = load_target("vta")
load_intrinsics(TARGET)


def _ptr(load: ir.BufferLoad) -> ir.Call:
    return ir.Call("handle", "tir.address_of", [load])


def _nest(loops: list[tuple[ir.Var, int]], call: ir.Call, stage: str) -> ir.Stmt:
    body: ir.Stmt = ir.Evaluate(call)
    for k, (v, n) in enumerate(reversed(loops)):
        ann = {INSTRUCTION: stage} if k == len(loops) - 1 else {}
        body = ir.For(v, 0, n, "serial", body, annotations=ann)
    return body


def _emit(body: ir.Stmt, params: list[ir.Buffer]):
    b = ProgramBuilder()
    regions = {p.name: b.alloc(p.name, tuple(int(d.value) for d in p.shape), p.dtype)
               for p in params}
    return emit_instructions(ir.PrimFunc(tuple(params), body), TARGET, regions, "L1")


def test_a_gemm_nest_folds_into_two_loops_and_the_fewest_micro_ops() -> None:
    """m(4) x n(2) x k(3): micro-ops over the smallest loop (n), the reduction outermost."""
    inp = ir.Buffer("inp", (4, 3, 1, 16), "int8", "vta.inp")
    wgt = ir.Buffer("wgt", (2, 3, 16, 16), "int8", "vta.wgt")
    acc = ir.Buffer("acc", (4, 2, 1, 16), "int32", "vta.acc")
    m, n, k = ir.Var("m"), ir.Var("n"), ir.Var("k")
    call = ir.Call("int32", "vta.gemm", [_ptr(inp[m, k, 0, 0]), _ptr(wgt[n, k, 0, 0]),
                                         _ptr(acc[m, n, 0, 0])])
    body = ir.Allocate(inp, ir.Allocate(wgt, ir.Allocate(acc, _nest(
        [(m, 4), (n, 2), (k, 3)], call, "compute"))))
    em = _emit(body, [])
    (g,) = em.insns
    assert isinstance(g, Gemm) and not g.reset
    assert (g.iter_out, g.iter_in) == (3, 4)                       # k outer, m inner
    assert (g.dst_factor_out, g.dst_factor_in) == (0, 2)
    assert (g.src_factor_out, g.src_factor_in) == (1, 3)
    assert (g.wgt_factor_out, g.wgt_factor_in) == (1, 0)
    assert em.uops[0] == [Uop(acc=0, inp=0, wgt=0), Uop(acc=1, inp=0, wgt=3)]
    assert em.rows_used == {"inp": 12, "wgt": 6, "acc": 8}


def test_a_dma_nest_becomes_one_strided_load() -> None:
    src = ir.Buffer("data", (8, 6, 1, 16), "int8")
    dst = ir.Buffer("tile", (2, 3, 1, 16), "int8", "vta.inp")
    y, x = ir.Var("y"), ir.Var("x")
    call = ir.Call("int32", "vta.load_inp", [_ptr(src[y + 4, x + 2, 0, 0]),
                                             _ptr(dst[y, x, 0, 0])])
    em = _emit(ir.Allocate(dst, _nest([(y, 2), (x, 3)], call, "load")), [src])
    (ld,) = em.insns
    assert isinstance(ld, Load)
    assert (ld.sram_base, ld.dram_base, ld.y_size, ld.x_size, ld.x_stride) == (0, 26, 2, 3, 6)


def test_a_nest_that_is_not_one_dma_is_refused() -> None:
    """Rows scattered on chip (transposed) are no single 2-D DMA."""
    src = ir.Buffer("data", (8, 6, 1, 16), "int8")
    dst = ir.Buffer("tile", (3, 2, 1, 16), "int8", "vta.inp")
    y, x = ir.Var("y"), ir.Var("x")
    call = ir.Call("int32", "vta.load_inp", [_ptr(src[y, x, 0, 0]), _ptr(dst[x, y, 0, 0])])
    with pytest.raises(ScheduleError, match=r"layer 'L1': vta.load_inp over loops \[2, 3\] "
                                            "is not a 2-D DMA"):
        _emit(ir.Allocate(dst, _nest([(y, 2), (x, 3)], call, "load")), [src])


def test_alu_stages_compute_in_place_and_other_uses_are_refused() -> None:
    a = ir.Buffer("a", (4, 1, 16), "int32", "vta.acc")
    c = ir.Buffer("c", (4, 1, 16), "int32", "vta.acc")
    r = ir.Var("r")
    shr = ir.Call("int32", "vta.alu_shr_imm", [_ptr(a[r, 0, 0]), _ptr(c[r, 0, 0]), 3])
    em = _emit(ir.Allocate(a, ir.Allocate(c, _nest([(r, 4)], shr, "compute"))), [])
    (alu,) = em.insns
    assert isinstance(alu, Alu) and alu.use_imm and alu.imm == 3 and em.rows_used["acc"] == 4
    # a second reader of `a` (here a second ALU op into another buffer) forbids in place
    d = ir.Buffer("d", (4, 1, 16), "int32", "vta.acc")
    mn = ir.Call("int32", "vta.alu_min_imm", [_ptr(a[r, 0, 0]), _ptr(d[r, 0, 0]), 7])
    body = ir.Allocate(a, ir.Allocate(c, ir.Allocate(d, ir.seq(
        _nest([(r, 4)], shr, "compute"), _nest([(r, 4)], mn, "compute")))))
    with pytest.raises(ScheduleError, match=r"layer 'L1': vta.alu_shr_imm must write the rows "
                                            r"it reads \(a -> c\)"):
        _emit(body, [])
